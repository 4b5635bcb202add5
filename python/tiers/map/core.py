"""The native mapping core (``tiers_map_*`` in libtiers, see
native/include/tiers/map.h), called through ctypes.

Why ctypes and not a native tool: the graph stays in numpy CSR arrays that
libtiers reads in place, so a 65,536-rank stencil costs its edges once in
memory (no JSON or text copy of the graph, no second process holding
another copy).  Memory is linear in ranks plus edges throughout.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .. import native
from ..errors import TiersError

_ERRORS = {1: "invalid argument", 2: "out of memory", 5: "malformed input", 6: "not supported"}


class _Graph(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int), ("xadj", ctypes.c_void_p), ("adjncy", ctypes.c_void_p),
                ("adjwgt", ctypes.c_void_p)]


class _Node(ctypes.Structure):
    _fields_ = [("levels", ctypes.c_int), ("arity", ctypes.c_void_p), ("cost", ctypes.c_void_p)]


_lib = None


def _library():
    global _lib
    if _lib is None:
        path = native.lib_path("libtiers.so")
        if not path.is_file():
            raise TiersError(f"libtiers is missing from {path.parent}; reinstall tiers with "
                             "'make build'")
        try:
            lib = ctypes.CDLL(str(path))
            for name in ("tiers_map_check", "tiers_map_group", "tiers_map_group_costs",
                         "tiers_map_place"):
                getattr(lib, name).restype = ctypes.c_int
        except (OSError, AttributeError) as exc:
            raise TiersError(f"cannot load the mapping core from {path}: {exc}") from None
        lib.tiers_last_error.restype = ctypes.c_char_p
        _lib = lib
        _prepare(lib)
    return _lib


def _prepare(lib) -> None:
    """Do ctypes' one-time work for the calls a mapping makes (function
    lookup, return types, the array types of the results, numpy's ctypes
    interface) when the library is loaded, not inside the first mapping:
    on a 64-rank graph it is about a tenth of a millisecond."""
    for name in ("tiers_map_search", "tiers_map_grid", "tiers_map_refine",
                 "tiers_map_refine_within", "tiers_map_tree", "tiers_map_eval",
                 "tiers_map_geometric"):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = ctypes.c_int
    fn = getattr(lib, "tiers_map_geometric", None)
    if fn is not None:
        vp, i = ctypes.c_void_p, ctypes.c_int
        fn.argtypes = [i, i, vp, vp, vp, i, vp, ctypes.POINTER(_Node), vp, vp, vp]
    for count in (6, 7):   # the search's candidates (+ 3): with and without packages
        Cost * count
    _INT3()
    _DOUBLE3()
    np.empty(1).ctypes.data_as(ctypes.c_void_p)


def _call(name: str, *args) -> None:
    """Call ``name`` in libtiers; raise TiersError with its message on failure.

    Scotch prints nothing: libtiers defines Scotch's error-print functions
    (native/src/map/scotch_error.c), and a call that fails in Scotch ends
    its tiers_last_error() with " (Scotch: <Scotch's message>)", so the one
    line raised here carries it and fd 2 is never touched."""
    lib = _library()
    rc = getattr(lib, name)(*args)
    if rc != 0:
        message = (lib.tiers_last_error() or b"").decode("utf-8", "replace")
        message = message.removeprefix("map: ")
        raise TiersError(message or f"{name} failed: {_ERRORS.get(rc, rc)}")


def scotch_message(warning: bool = False) -> str:
    """Return the last error (or, with ``warning``, warning) Scotch gave on
    this thread during the last mapping call, "" when none (or when
    libtiers predates ``tiers_map_scotch_message``)."""
    lib = _library()
    fn = getattr(lib, "tiers_map_scotch_message", None)
    if fn is None:
        return ""
    fn.restype = ctypes.c_char_p
    fn.argtypes = [ctypes.c_int]
    return (fn(1 if warning else 0) or b"").decode("utf-8", "replace")


def _graph(graph) -> tuple[_Graph, tuple]:
    xadj = np.ascontiguousarray(graph.xadj, dtype=np.int64)
    adj = np.ascontiguousarray(graph.adjncy, dtype=np.int32)
    w = np.ascontiguousarray(graph.adjwgt, dtype=np.float64)
    g = _Graph(graph.n, xadj.ctypes.data, adj.ctypes.data if adj.size else None,
               w.ctypes.data if w.size else None)
    return g, (xadj, adj, w)   # keep the arrays alive as long as g


def check(graph) -> tuple[int, np.ndarray]:
    """Check a graph (indices, weights, symmetry) and return ``(count,
    component)``: the number of connected components and, per rank, the
    index of its component.  Raise TiersError on a malformed graph."""
    g, keep = _graph(graph)
    comp = np.empty(graph.n, dtype=np.int32)
    count = ctypes.c_int(0)
    _call("tiers_map_check", ctypes.byref(g), ctypes.byref(count),
          comp.ctypes.data_as(ctypes.c_void_p))
    del keep
    return count.value, comp


def group(graph, capacity, seed: int = 1, link_cost=None) -> np.ndarray:
    """Return, per rank, the node it is grouped on (the AFC mapping paper's step 3).
    With ``link_cost`` (nodes x nodes, cost per byte of each node pair,
    only ratios matter) the groups are also mapped onto the node graph so
    that heavy group pairs sit on cheap node pairs (step 5)."""
    g, keep = _graph(graph)
    cap = np.ascontiguousarray(capacity, dtype=np.int32)
    out = np.empty(graph.n, dtype=np.int32)
    if link_cost is None:
        _call("tiers_map_group", ctypes.byref(g), ctypes.c_int(len(cap)),
              cap.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(seed),
              out.ctypes.data_as(ctypes.c_void_p))
    else:
        cost = np.ascontiguousarray(link_cost, dtype=np.float64)
        if cost.shape != (len(cap), len(cap)):
            raise TiersError(f"link costs are {cost.shape}, not {len(cap)} x {len(cap)} nodes")
        _call("tiers_map_group_costs", ctypes.byref(g), ctypes.c_int(len(cap)),
              cap.ctypes.data_as(ctypes.c_void_p), cost.ctypes.data_as(ctypes.c_void_p),
              ctypes.c_uint64(seed), out.ctypes.data_as(ctypes.c_void_p))
    del keep
    return out


def place(graph, node_of, nodes: int, arity, cost, seed: int = 1) -> np.ndarray:
    """Return, per rank, its core within its node (the AFC mapping paper's step 4): the
    group of each node mapped onto the node's tree of ``arity`` children
    per level with ``cost`` per level (root first)."""
    g, keep = _graph(graph)
    part = np.ascontiguousarray(node_of, dtype=np.int32)
    ar = np.ascontiguousarray(arity, dtype=np.int32)
    co = np.ascontiguousarray(cost, dtype=np.float64)
    node = _Node(len(ar), ar.ctypes.data if ar.size else None,
                 co.ctypes.data if co.size else None)
    out = np.empty(graph.n, dtype=np.int32)
    _call("tiers_map_place", ctypes.byref(g), part.ctypes.data_as(ctypes.c_void_p),
          ctypes.c_int(nodes), ctypes.byref(node), ctypes.c_uint64(seed),
          out.ctypes.data_as(ctypes.c_void_p))
    del keep
    return out


#: Scotch's mapping strategy flags (scotch.h), by the names tiers uses;
#: "default" is Scotch's default strategy (what ``gmap`` runs without -c).
STRATEGIES = {"default": -1, "quality": 0x1, "balance": 0x4, "quality-balance": 0x5,
              "recursive": 0x100, "recursive-balance": 0x104}


def has_tree() -> bool:
    """Return whether libtiers has the one-call mapping (:func:`tree`); a
    libtiers built before it has only the two steps."""
    return hasattr(_library(), "tiers_map_tree")


def has_refine() -> bool:
    """Return whether libtiers has the native refinement (:func:`refine`)."""
    return hasattr(_library(), "tiers_map_refine")


def tree(graph, nodes: int, node_cost: float, arity, cost, *, strategy: str = "default",
         balance: float = 0.05, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(node, slot)`` per rank: the graph mapped in one Scotch call
    onto the tleaf tree of the whole machine -- ``nodes`` nodes joined at
    ``node_cost``, each the tree of ``arity`` children per level with
    ``cost`` per level (root first) -- with the strategy named in
    STRATEGIES and the load ``balance`` Scotch may leave (nodes over
    capacity and shared cores are repaired afterwards)."""
    g, keep = _graph(graph)
    ar = np.ascontiguousarray(arity, dtype=np.int32)
    co = np.ascontiguousarray(cost, dtype=np.float64)
    _library().tiers_map_tree.restype = ctypes.c_int
    shape = _Node(len(ar), ar.ctypes.data if ar.size else None,
                  co.ctypes.data if co.size else None)
    node = np.empty(graph.n, dtype=np.int32)
    slot = np.empty(graph.n, dtype=np.int32)
    _call("tiers_map_tree", ctypes.byref(g), ctypes.c_int(nodes), ctypes.c_double(node_cost),
          ctypes.byref(shape), ctypes.c_int(STRATEGIES[strategy]), ctypes.c_double(balance),
          ctypes.c_uint64(seed), node.ctypes.data_as(ctypes.c_void_p),
          slot.ctypes.data_as(ctypes.c_void_p))
    del keep
    return node, slot


def refine(graph, node, slot, nodes: int, budget: int,
           limit_cut: float | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Return ``(node, slot, swaps)``: the placement improved by node-level
    swaps, chains of moves and the balancing phase in libtiers
    (``tiers_map_refine``: the busiest node's sent bytes first, then the
    inter-node bytes, never worse on either), within ``budget`` edges
    visited per phase.  ``limit_cut`` caps the balancing's budget of
    inter-node bytes (``tiers_map_refine_within``; 0 turns the balancing
    off).  Raise TiersError when libtiers lacks it."""
    lib = _library()
    if not hasattr(lib, "tiers_map_refine"):
        raise TiersError("this libtiers has no tiers_map_refine; reinstall tiers")
    if limit_cut is not None and not hasattr(lib, "tiers_map_refine_within"):
        raise TiersError("this libtiers has no tiers_map_refine_within; reinstall tiers")
    lib.tiers_map_refine.restype = ctypes.c_int
    g, keep = _graph(graph)
    sent = None if graph.adjsent is None else np.ascontiguousarray(graph.adjsent,
                                                                   dtype=np.float64)
    node = np.ascontiguousarray(node, dtype=np.int32).copy()
    slot = np.ascontiguousarray(slot, dtype=np.int32).copy()
    swaps = ctypes.c_int(0)
    args = [ctypes.byref(g), sent.ctypes.data_as(ctypes.c_void_p) if sent is not None else None,
            ctypes.c_int(nodes), node.ctypes.data_as(ctypes.c_void_p),
            slot.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(budget)]
    if limit_cut is None:
        _call("tiers_map_refine", *args, ctypes.byref(swaps))
    else:
        lib.tiers_map_refine_within.restype = ctypes.c_int
        _call("tiers_map_refine_within", *args, ctypes.c_double(limit_cut), ctypes.byref(swaps))
    del keep
    return node, slot, swaps.value


_INT3 = ctypes.c_int * 3
_DOUBLE3 = ctypes.c_double * 3


class Cost(ctypes.Structure):
    """What a placement costs (``tiers_map_cost_t``): inter-node bytes, the
    busiest node's sent and received bytes, the time model's two terms."""
    _fields_ = [("inter", ctypes.c_double), ("sent_max", ctypes.c_double),
                ("sent_node", ctypes.c_int), ("recv_max", ctypes.c_double),
                ("recv_node", ctypes.c_int), ("rank_s", ctypes.c_double),
                ("rank", ctypes.c_int), ("link_s", ctypes.c_double),
                ("link_node", ctypes.c_int)]


def grid(graph):
    """Recognise a 2-D or 3-D grid of face exchanges in any numbering
    (``tiers_map_grid``) and return ``(coords, sizes, pair)`` -- per rank
    its coordinates (n x dims int32), ranks per axis, bytes of one
    neighbour pair across each axis -- or None when ``graph`` is not one."""
    lib = _library()
    fn = lib.tiers_map_grid
    n = graph.n
    g, keep = _graph(graph)
    sent = None if graph.adjsent is None or not graph.adjsent.size else \
        np.ascontiguousarray(graph.adjsent, dtype=np.float64)
    dims = ctypes.c_int(0)
    sizes = _INT3()
    pair = _DOUBLE3()
    coords = np.empty(3 * n, dtype=np.int32)
    rc = fn(ctypes.byref(g), sent.ctypes.data_as(ctypes.c_void_p) if sent is not None else None,
            ctypes.byref(dims), sizes, pair, coords.ctypes.data_as(ctypes.c_void_p))
    del keep
    if rc != 0:
        message = (lib.tiers_last_error() or b"").decode("utf-8", "replace")
        raise TiersError(message.removeprefix("map: ") or f"tiers_map_grid failed: {rc}")
    k = dims.value
    if not k:
        return None
    return coords[:n * k].reshape(n, k), tuple(sizes[:k]), tuple(pair[:k])


def geometric(coords, parts, pair, capacity, arity):
    """Return ``(node, slot, shape)``: the geometric placement of a grid
    (``tiers_map_geometric``) -- ranks at ``coords`` (n x dims) of a grid of
    ``parts`` subdomains per axis, ``pair`` bytes of one neighbour pair
    across each axis -- on nodes of ``capacity`` slots, each the tree of
    ``arity`` children per level; ``shape`` is the box of one node when
    the grid was tiled, None when it was bisected."""
    co = np.ascontiguousarray(coords, dtype=np.int32)
    n, dims = co.shape
    pa = np.asarray(parts, dtype=np.int32)
    pr = np.asarray(pair, dtype=np.float64)
    cap = np.ascontiguousarray(capacity, dtype=np.int32)
    ar = np.ascontiguousarray(arity, dtype=np.int32)
    shape = _Node(len(ar), ar.ctypes.data if ar.size else None, None)
    out = np.empty((2, n), dtype=np.int32)
    box = np.zeros(dims, dtype=np.int32)
    _call("tiers_map_geometric", n, dims, pa.ctypes.data, pr.ctypes.data, co.ctypes.data,
          cap.size, cap.ctypes.data, ctypes.byref(shape), out[0].ctypes.data,
          out[1].ctypes.data, box.ctypes.data)
    node, slot = out
    return node, slot, (tuple(box.tolist()) if box[0] else None)


def has_search() -> bool:
    """Return whether libtiers has the one-call search (:func:`search`)."""
    return hasattr(_library(), "tiers_map_search")


def search(graph, nodes: int, node_cost: float, arity, cost, lat, bw, tie: float, cands,
           *, use_scotch: bool, seed: int, budget: int, tree_nodes: int = 0,
           extra_starts: bool = False):
    """Run libtiers' whole search (``tiers_map_search``) and return
    ``(place, costs, chosen, swaps, second)``: ``place`` (len(cands) + 3,
    2, n) -- afc, afc-nb, the candidates ``cands`` (each a (node, slot)
    pair of arrays), the refined winner --, the Cost of each, the index of
    the one to write, the refinement's swap count and which start the
    refined row holds: 0 the winner's, 1 the second start's, 2 the third
    start's (``extra_starts``: Scotch's groupings onto the nodes by
    recursive bipartitioning; the second tried when Scotch's first mapping
    has a node sending far more than any other, and refined instead of the
    winner when it ranks before it; the third kept when no worse on either
    byte measure and better on one).  ``lat``/``bw``: per layer, between nodes
    first, then each tree level, then one core shared."""
    lib = _library()
    fn = lib.tiers_map_search
    fn.restype = ctypes.c_int
    n = graph.n
    g, keep = _graph(graph)
    sent = None if graph.adjsent is None else np.ascontiguousarray(graph.adjsent,
                                                                   dtype=np.float64)
    total = len(cands) + 3
    place = np.empty((total, 2, n), dtype=np.int32)
    for i, (node, slot) in enumerate(cands):
        place[i + 2, 0] = node
        place[i + 2, 1] = slot
    ar = np.ascontiguousarray(arity, dtype=np.int32)
    co = np.ascontiguousarray(cost, dtype=np.float64)
    shape = _Node(len(ar), ar.ctypes.data if ar.size else None,
                  co.ctypes.data if co.size else None)
    la = np.ascontiguousarray(lat, dtype=np.float64)
    bb = np.ascontiguousarray(bw, dtype=np.float64)
    costs = (Cost * total)()
    chosen = ctypes.c_int(-1)
    swaps = ctypes.c_int(0)
    second = ctypes.c_int(0)
    _call("tiers_map_search", ctypes.byref(g),
          sent.ctypes.data_as(ctypes.c_void_p) if sent is not None else None,
          ctypes.c_int(nodes), ctypes.byref(shape), ctypes.c_double(node_cost),
          ctypes.c_int(tree_nodes or nodes), la.ctypes.data_as(ctypes.c_void_p),
          bb.ctypes.data_as(ctypes.c_void_p),
          ctypes.c_double(tie), ctypes.c_int(len(cands)), ctypes.c_int(1 if use_scotch else 0),
          ctypes.c_uint64(seed), ctypes.c_int64(budget), ctypes.c_int(1 if extra_starts else 0),
          place.ctypes.data_as(ctypes.c_void_p), costs, ctypes.byref(chosen),
          ctypes.byref(swaps), ctypes.byref(second))
    del keep
    return place, list(costs), chosen.value, swaps.value, second.value
