"""Placements and what they cost.

A placement gives every rank a node and a slot (a core of that node, in
hwloc logical order).  :func:`strategies` builds the ones the AFC mapping paper's §4.1
compares -- the launcher's default (block), the mapped one (AFC), the
mapped grouping without the intra-node step (AFC-NB), a random one -- and
Open MPI's ``--map-by node`` and ``--map-by package``, plus a geometric
box tiling for graphs with grid coordinates; :func:`metrics` measures each
on the communication graph and :func:`choose` picks the one to write.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.random  # noqa: F401  (loaded with the module, not inside a timed mapping)

from ..errors import TiersError
from . import core
from .graph import Graph
from .machine import Machine


@dataclass
class Placement:
    """Per rank, its ``node`` index and ``slot`` within the node; ``name``
    says which strategy made it and ``note`` how a launcher reproduces it."""

    name: str
    node: np.ndarray
    slot: np.ndarray
    note: str = ""

    def check(self, machine: Machine) -> None:
        """Raise TiersError unless every rank has a distinct (node, slot)
        within the node's capacity."""
        if self.node.min() < 0 or self.node.max() >= machine.nodes:
            raise TiersError(f"placement {self.name}: a node index is out of range")
        cap = np.asarray(machine.capacity)
        if np.any(self.slot < 0) or np.any(self.slot >= machine.slots_per_node):
            raise TiersError(f"placement {self.name}: a slot is out of range")
        counts = np.bincount(self.node, minlength=machine.nodes)
        if np.any(counts > cap):
            raise TiersError(f"placement {self.name}: a node holds more ranks than its capacity")
        key = self.node.astype(np.int64) * machine.slots_per_node + self.slot
        if key.size and np.bincount(key).max() > 1:
            raise TiersError(f"placement {self.name}: two ranks share a slot")


def _fill_order(node: np.ndarray, nodes: int) -> np.ndarray:
    """Slot of each rank when ranks fill their node's slots in rank order."""
    slot = np.empty(node.size, dtype=np.int32)
    order = np.argsort(node, kind="stable")
    counts = np.bincount(node, minlength=nodes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slot[order] = np.arange(node.size) - np.repeat(starts, counts)
    return slot


def block(n: int, machine: Machine) -> Placement:
    """Return Open MPI's default placement (``--map-by core``/``slot``):
    ranks fill node 0's slots in order, then node 1's, and so on."""
    cap = np.asarray(machine.capacity)
    if cap.size and np.all(cap == cap[0]) and cap[0] > 0:
        # equal nodes: the rank's place in its node is r mod the node size
        r = np.arange(n, dtype=np.int32)
        return Placement("block", r // int(cap[0]), r % int(cap[0]),
                         "mpirun's default: --map-by core --bind-to core")
    node = np.repeat(np.arange(machine.nodes), cap)[:n].astype(np.int32)
    return Placement("block", node, _fill_order(node, machine.nodes),
                     "mpirun's default: --map-by core --bind-to core")


def by_node(n: int, machine: Machine) -> Placement:
    """Return Open MPI's ``--map-by node``: rank r on node r mod N (nodes
    with room), filling each node's slots in order."""
    cap = np.asarray(machine.capacity).copy()
    if cap.size and np.all(cap == cap[0]) and n <= cap[0] * cap.size:
        # equal nodes: no node fills before the deal ends, and rank r is
        # the (r div N)-th of its node
        r = np.arange(n, dtype=np.int32)
        return Placement("map-by-node", r % machine.nodes, r // machine.nodes,
                         "mpirun --map-by node --bind-to core")
    node = np.empty(n, dtype=np.int32)
    used = np.zeros_like(cap)
    r, i = 0, 0
    while r < n:
        if used[i] < cap[i]:
            node[r] = i
            used[i] += 1
            r += 1
        i = (i + 1) % machine.nodes
    return Placement("map-by-node", node, _fill_order(node, machine.nodes),
                     "mpirun --map-by node --bind-to core")


def by_package(n: int, machine: Machine) -> Placement:
    """Return Open MPI's ``--map-by package``: nodes filled in order, and
    inside a node ranks dealt round-robin over the top-level objects
    (packages)."""
    base = block(n, machine)
    if not machine.arity:
        return Placement("map-by-package", base.node, base.slot, "mpirun --map-by package")
    top = machine.arity[0]
    per = machine.slots_per_node // top
    local = base.slot
    slot = (local % top) * per + local // top
    return Placement("map-by-package", base.node, slot.astype(np.int32),
                     "mpirun --map-by package --bind-to core")


def random(n: int, machine: Machine, seed: int) -> Placement:
    """Return a random placement (seeded): the block positions shuffled."""
    base = block(n, machine)
    perm = np.random.default_rng(seed).permutation(n)
    return Placement("random", base.node[perm], base.slot[perm], "ranks shuffled at random")


def mapped(graph: Graph, machine: Machine, seed: int, *, intra: bool = True) -> Placement:
    """Return the AFC mapping placement: ranks grouped per node with Scotch
    (step 3), then, with ``intra``, each group mapped onto its node's tree
    (step 4, "AFC"); without, ranks fill their node in rank order
    ("AFC-NB")."""
    cost = None
    links = getattr(machine, "links", None)
    if links is not None and graph.edges:
        message = graph.total_bytes() / graph.edges / 2   # mean bytes one way
        if not links.uniform(message):
            cost = links.cost_per_byte(message)
    whole = _whole_tree(graph, machine) if cost is None and core.has_tree() else None
    if whole is not None:
        tried = PORTFOLIO if graph.n <= PORTFOLIO_MAX_RANKS else (STRATEGY,)
        best = None
        for strategy in tried:
            node, slot = core.tree(graph, whole, NODE_COST_FACTOR * max(machine.cost),
                                   machine.arity, machine.cost, strategy=strategy,
                                   balance=BALANCE, seed=seed)
            p = Placement("afc", node, slot,
                          f"Scotch static mapping onto the machine's tleaf tree ({whole} nodes "
                          f"x {'x'.join(map(str, machine.arity))}, {strategy} strategy, "
                          f"balance {BALANCE})")
            if len(tried) == 1:
                best = (p, None)
                break
            m = metrics(graph, machine, p)
            if best is None or better(m, best[1]):
                best = (p, m)
        if not intra:
            return nb_of(best[0], machine)
        return best[0]
    node = core.group(graph, machine.capacity, seed, link_cost=cost)
    if not intra:
        return Placement("afc-nb", node, _fill_order(node, machine.nodes),
                         "grouped with Scotch; inside a node in rank order")
    slot = core.place(graph, node, machine.nodes, machine.arity, machine.cost, seed)
    return Placement("afc", node, slot, "grouped and placed with Scotch")


#: The cost of a pair on two nodes, relative to the dearest level inside a
#: node, in the tleaf tree Scotch maps onto (the AFC mapping paper's 10^d
#: processor graph: one decade per layer).
NODE_COST_FACTOR = 10.0
#: Scotch's strategy and load imbalance for the one-call mapping: its
#: default strategy with 5 % imbalance (a node over capacity is repaired
#: afterwards) cuts fewer bytes than an exact balance on grids and meshes.
STRATEGY = "default"
BALANCE = 0.05
#: Up to this many ranks Scotch maps with each strategy of PORTFOLIO and
#: ``afc`` is the one the model ranks best (:func:`better`): no strategy
#: wins on every graph, and on small graphs each call takes milliseconds.
PORTFOLIO_MAX_RANKS = 256
PORTFOLIO = ("default", "quality", "recursive")
#: Above this many ranks the mapping is done in the two steps (Scotch's
#: k-way mapping into nodes, then each node's tree): Scotch's mapping onto
#: a tree of tens of thousands of cores takes minutes where the two steps
#: take seconds.
TREE_MAX_RANKS = 32768


def _whole_tree(graph: Graph, machine: Machine) -> int | None:
    """Return how many nodes the one-call mapping onto the machine's tree
    uses (the first nodes that hold the ranks, as a block placement), or
    None when it does not apply: nodes of unequal capacity, or capacity
    other than the node's cores (oversubscribed)."""
    cap = list(machine.capacity)
    size = machine.slots_per_node
    prod = 1
    for a in machine.arity:
        prod *= a
    if not machine.arity or prod != size or any(c != size for c in cap):
        return None
    if graph.n > TREE_MAX_RANKS:
        return None
    return min(len(cap), -(-graph.n // size))


def nb_of(p: Placement, machine: Machine) -> Placement:
    """Return ``afc-nb``: the nodes of ``p`` with the ranks of each node
    filling its slots in rank order (the grouping without the placement
    inside the node)."""
    return Placement("afc-nb", p.node, _fill_order(p.node, machine.nodes), NB_NOTE)


NB_NOTE = "grouped with Scotch; inside a node in rank order"


# --------------------------------------------------------------------------
# Geometric: box tiling and recursive coordinate bisection of a grid


def geometric(graph: Graph, machine: Machine) -> Placement | None:
    """Return the geometric placement of a graph with grid coordinates
    (a ``--stencil``), or None for a graph without: the grid tiled into
    node-sized boxes of the least cut bytes when such boxes tile it
    exactly, recursive coordinate bisection otherwise; inside a node the
    same bisection splits the node's box over the node tree's objects
    (packages, then what is below), one cut per level (in libtiers:
    ``tiers_map_geometric``)."""
    if graph.coords is None or graph.grid is None:
        return None
    parts, pair = graph.grid
    node, slot, shape = core.geometric(graph.coords, parts, pair, machine.capacity,
                                       machine.arity)
    if shape is not None:
        how = f"grid tiled into {'x'.join(map(str, shape))} boxes, one per node"
    else:
        how = "recursive coordinate bisection of the grid over the nodes"
    return Placement("geometric", node, slot, how + "; inside a node, bisection per level")


#: Above this many ranks a grid whose geometric candidate tiles it into
#: one box per node is not mapped with Scotch: the tiling is built in
#: linear time and cuts no more bytes than Scotch's mapping of a grid
#: (its boxes have the least cut of any node-sized box), where Scotch takes
#: seconds.  ``--placement afc`` (or ``afc-nb``) still maps with Scotch.
GEOMETRIC_ONLY_RANKS = 8192


def tiles(p: Placement | None) -> bool:
    """Return whether ``p`` is a geometric placement that tiles its grid
    into one equal box per node."""
    return p is not None and p.name == "geometric" and p.note.startswith("grid tiled")


def skips_scotch(n: int, geo: Placement | None, forced: str | None = None) -> bool:
    """Return whether the candidate set of ``n`` ranks leaves Scotch's
    mapping out: above GEOMETRIC_ONLY_RANKS when the geometric candidate
    ``geo`` tiles the grid, unless ``forced`` names a Scotch placement."""
    return n > GEOMETRIC_ONLY_RANKS and tiles(geo) and forced not in ("afc", "afc-nb")


def strategies(graph: Graph, machine: Machine, seed: int = 1,
               forced: str | None = None) -> list[Placement]:
    """Return the placements to compare, the mapped one ("afc") first, or,
    when :func:`skips_scotch` says so, the launcher's default (block)
    first and no Scotch placement."""
    n = graph.n
    geo = geometric(graph, machine)
    out = []
    if not skips_scotch(n, geo, forced):
        afc = mapped(graph, machine, seed)
        out += [afc, nb_of(afc, machine)]
    out += [block(n, machine), by_node(n, machine), random(n, machine, seed)]
    if machine.arity and machine.arity[0] > 1:
        out.append(by_package(n, machine))
    if geo is not None:
        out.append(geo)
    for p in out:
        p.check(machine)
    return out


# --------------------------------------------------------------------------
# Metrics


def edge_layers(graph: Graph, machine: Machine, p: Placement):
    """Return ``(u, v, bytes, level)`` of every edge once, where level is
    the node tree level joining the pair (0 = the node's root) or -1 for a
    pair on different nodes, and ``machine.levels`` for one slot shared."""
    u, v, w = graph.edge_list()
    nu, nv = p.node[u], p.node[v]
    su, sv = p.slot[u].astype(np.int64), p.slot[v].astype(np.int64)
    level = np.full(u.size, len(machine.arity), dtype=np.int64)
    for i in range(len(machine.arity) - 1, -1, -1):
        stride = machine.strides[i]
        level[(su // stride) != (sv // stride)] = i
    level[nu != nv] = -1
    return u, v, w, level


def hop_weights(machine: Machine) -> dict:
    """Return the hop weight of each layer: the links of the machine tree a
    message crosses between two cores joined at that layer (up to the
    joining object and down again); a pair on two nodes goes up to the
    node's root, through the network switch and down: 2 (levels + 1)."""
    levels = len(machine.arity)
    out = {"core": 0}
    for i, name in enumerate(machine.level_layers):
        out.setdefault(name, 2 * (levels - i))
    out["node"] = 2 * (levels + 1)
    return out


def metrics(graph: Graph, machine: Machine, p: Placement) -> dict:
    """Return the costs of placement ``p`` for one exchange of the graph
    (each edge's bytes in the directions the input gave, half each way
    when it gave none):

    - ``bytes_inter_node``: bytes crossing nodes, both directions summed;
    - ``max_node_sent_bytes`` / ``max_node_received_bytes``: the most bytes
      one node sends to (receives from) other nodes, with the node
      (``max_node_sent_node``, ``max_node_received_node``);
    - ``bytes_per_layer``: bytes (both directions) per layer joining the
      two ranks (``node`` = different nodes; ``core`` = one core shared);
    - ``hop_bytes``: bytes x the hop weight of the joining layer
      (:func:`hop_weights`, written as ``hop_weights``);
    - the predicted time, from two resources that work at the same time:
      ``predicted_rank_s``, the largest over ranks of the serial cost of
      the messages it sends (per neighbour it sends to: latency + bytes /
      bandwidth of the joining layer, or of the link for a neighbour on
      another node), and ``predicted_link_s``, the largest over nodes of
      the time its network link needs for the bytes it sends (sum over
      destination nodes of bytes / bandwidth of that node pair).
      ``predicted_time_s`` is the larger; ``critical`` says which
      (``rank`` or ``link``) and ``critical_detail`` which rank or node,
      in words.
    - ``max_node_out_bytes``: deprecated, the same as
      ``max_node_sent_bytes``."""
    u, v, w, level = edge_layers(graph, machine, p)
    levels = len(machine.arity)
    # layers by code: 0 = another node, 1 + i = tree level i, levels + 1 =
    # one core shared (integer codes: no string arrays on large graphs)
    names = ["node"] + list(machine.level_layers) + ["core"]
    code = level + 1
    by_code = np.bincount(code, weights=w, minlength=levels + 2)
    count = np.bincount(code, minlength=levels + 2)
    per_layer: dict[str, float] = {}
    for name in ("node", "machine", "numa", "package", "cache", "core"):
        sel = [c for c, x in enumerate(names) if x == name]
        if sel and count[sel].sum() > 0:
            per_layer[name] = float(by_code[sel].sum())
    weights = hop_weights(machine)
    hops = np.where(level < 0, 2 * (levels + 1), 2 * (levels - level))
    cross = level < 0

    # every direction with traffic: src sends b bytes to dst
    src, dst, b = graph.sent()
    has = b > 0
    if not has.all():
        src, dst, b = src[has], dst[has], b[has]
    ns, nd = p.node[src], p.node[dst]
    ss, sd = p.slot[src].astype(np.int64), p.slot[dst].astype(np.int64)
    dlevel = np.full(src.size, levels, dtype=np.int64)
    for i in range(levels - 1, -1, -1):
        dlevel[(ss // machine.strides[i]) != (sd // machine.strides[i])] = i
    dcross = ns != nd
    dlevel[dcross] = -1
    sent_node = np.bincount(ns[dcross], weights=b[dcross], minlength=machine.nodes)
    recv_node = np.bincount(nd[dcross], weights=b[dcross], minlength=machine.nodes)
    lat_of = np.array([machine.layer_costs[x][0] for x in names], dtype=np.float64)
    bw_of = np.array([machine.layer_costs[x][1] for x in names], dtype=np.float64)
    lat = lat_of[dlevel + 1]
    bw = bw_of[dlevel + 1]
    links = getattr(machine, "links", None)
    if links is not None and dcross.any():
        lat[dcross] = links.latency[ns[dcross], nd[dcross]]
        bw[dcross] = links.bandwidth[ns[dcross], nd[dcross]]
    # per rank: serial cost of the messages it sends, at the joining layer's
    # (or the link's) latency and bandwidth; a node's link, shared by its
    # ranks, is the second resource
    t_rank = np.bincount(src, weights=lat + b / bw, minlength=graph.n)
    t_link = np.bincount(ns[dcross], weights=b[dcross] / bw[dcross], minlength=machine.nodes)
    rank_s = float(t_rank.max()) if t_rank.size else 0.0
    link_s = float(t_link.max()) if t_link.size else 0.0
    critical = "link" if link_s > rank_s else "rank"
    if critical == "link":
        i = int(np.argmax(t_link))
        detail = (f"the network link of node {i} ({machine.hosts[i]}): "
                  f"{_fmt(sent_node[i])} sent to other nodes")
    else:
        r = int(np.argmax(t_rank)) if t_rank.size else 0
        mine = src == r
        detail = (f"rank {r}: {int(mine.sum())} messages, {_fmt(float(b[mine].sum()))} sent, "
                  f"{int((mine & dcross).sum())} of them to other nodes")
    sent_max = float(sent_node.max()) if sent_node.size else 0.0
    return {
        "placement": p.name,
        "bytes_total": float(w.sum()),
        "bytes_inter_node": float(w[cross].sum()),
        "bytes_per_layer": per_layer,
        "hop_bytes": float((w * hops).sum()),
        "hop_weights": weights,
        "max_node_sent_bytes": sent_max,
        "max_node_sent_node": int(np.argmax(sent_node)) if sent_node.size else 0,
        "max_node_received_bytes": float(recv_node.max()) if recv_node.size else 0.0,
        "max_node_received_node": int(np.argmax(recv_node)) if recv_node.size else 0,
        "max_node_out_bytes": sent_max,
        "predicted_rank_s": rank_s,
        "predicted_link_s": link_s,
        "predicted_time_s": max(rank_s, link_s),
        "critical": critical,
        "critical_detail": detail,
        "nodes_used": int(np.count_nonzero(np.bincount(p.node, minlength=machine.nodes))),
    }


def _fmt(x: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024 or unit == "GiB":
            return f"{x:.0f} B" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x}"


def _fmt_vs(a: float, b: float) -> str:
    """``a vs b`` in _fmt's units, or in whole bytes when the two would
    print alike but differ (5,536 B vs 5,552 B, not 5.4 KiB vs 5.4 KiB)."""
    fa, fb = _fmt(a), _fmt(b)
    if fa == fb and not _close(a, b):
        return f"{a:,.0f} B vs {b:,.0f} B"
    return f"{fa} vs {fb}"


#: Predicted times within this (relative) of the fastest are a tie: the
#: model's uncertainty.  Its per-layer figures come from one table of one
#: machine (the AFC mapping paper's Table 5, whose per-pair bandwidth
#: alone falls 5x between 4 and 32 nodes), and its rank term sends a rank's
#: messages one after another where MPI overlaps them, so a placement
#: predicted up to 15 % slower is not known to be slower; among tied ones
#: the one whose busiest node sends least, then the one with the fewest
#: inter-node bytes, is written, and the choice line says so.
TIME_TIE = 0.15


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b))


def better(a: dict, b: dict) -> bool:
    """Return whether metrics ``a`` beat ``b``: a lower predicted time (by
    more than TIME_TIE), ties broken by the bytes the busiest node sends,
    then by the inter-node bytes."""
    if not _close(a["predicted_time_s"], b["predicted_time_s"], TIME_TIE):
        return a["predicted_time_s"] < b["predicted_time_s"]
    for key in ("max_node_sent_bytes", "bytes_inter_node"):
        if not _close(a[key], b[key]):
            return a[key] < b[key]
    return False


#: Every placement :func:`strategies` can build (``geometric`` only for a
#: graph with grid coordinates, ``map-by-package`` only for nodes with
#: several packages).
NAMES = ("afc", "afc-nb", "block", "map-by-node", "map-by-package", "geometric", "refined",
         "grouped", "random")

#: Placements that are references only, never chosen.
REFERENCE_ONLY = ("random",)


def choose(mets: list[dict], forced: str | None = None,
           best: int | None = None) -> tuple[int, str]:
    """Return ``(index, note)``: the placement to write -- the model's
    best, or ``forced`` -- and a one line note when it is not ``afc`` or
    the forced one is not the best ("" otherwise).  The best: among the
    candidates (not ``random``) whose predicted time is within TIME_TIE of
    the lowest, the one whose busiest node sends least, then the one with
    the fewest inter-node bytes, then the first listed.  Raise TiersError
    for an unknown ``forced`` name."""
    cands = [i for i, m in enumerate(mets) if m["placement"] not in REFERENCE_ONLY]
    fastest = min(mets[i]["predicted_time_s"] for i in cands)
    if best is None:
        tied = [i for i in cands
                if mets[i]["predicted_time_s"] <= fastest * (1 + TIME_TIE) or
                _close(mets[i]["predicted_time_s"], fastest)]
        best = tied[0]
        for i in tied[1:]:
            m, b = mets[i], mets[best]
            for key in ("max_node_sent_bytes", "bytes_inter_node"):
                if not _close(m[key], b[key]):
                    if m[key] < b[key]:
                        best = i
                    break
    b = mets[best]
    if forced is not None:
        names = [m["placement"] for m in mets]
        if forced not in names:
            why = "is not a candidate for this input" if forced in NAMES else "is unknown"
            raise TiersError(f"--placement: {forced} {why} (the candidates here: "
                             f"{', '.join(names)})")
        i = names.index(forced)
        m = mets[i]
        if i != best and better(b, m):
            if not _close(m["predicted_time_s"], b["predicted_time_s"], TIME_TIE):
                return i, (f"placement {forced} forced by --placement; the model predicts it "
                           f"slower than {b['placement']} ({m['predicted_time_s'] * 1e3:.3f} "
                           f"vs {b['predicted_time_s'] * 1e3:.3f} ms)")
            return i, (f"placement {forced} forced by --placement; the model ranks "
                       f"{b['placement']} first (predicted {m['predicted_time_s'] * 1e3:.3f} "
                       f"vs {b['predicted_time_s'] * 1e3:.3f} ms, within its {TIME_TIE:.0%} "
                       f"uncertainty; busiest node sends {_fmt(m['max_node_sent_bytes'])} vs "
                       f"{_fmt(b['max_node_sent_bytes'])}, inter-node "
                       f"{_fmt(m['bytes_inter_node'])} vs {_fmt(b['bytes_inter_node'])})")
        return i, ""
    if b["placement"] == "afc":
        return best, ""
    afc = next((m for m in mets if m["placement"] == "afc"), None)
    if afc is None:
        return best, f"chose {b['placement']}: the model's best"
    if b["predicted_time_s"] <= afc["predicted_time_s"] * (1 + TIME_TIE) and \
            afc["predicted_time_s"] <= b["predicted_time_s"] * (1 + TIME_TIE):
        same = (f"predicted {b['predicted_time_s'] * 1e3:.3f} vs "
                f"{afc['predicted_time_s'] * 1e3:.3f} ms, within the model's "
                f"{TIME_TIE:.0%} uncertainty")
        if not _close(afc["max_node_sent_bytes"], b["max_node_sent_bytes"]):
            why = (f"{same}, its busiest node sends "
                   f"{_fmt_vs(b['max_node_sent_bytes'], afc['max_node_sent_bytes'])}")
        else:
            why = (f"{same}, same busiest node, inter-node "
                   f"{_fmt_vs(b['bytes_inter_node'], afc['bytes_inter_node'])}")
    else:
        why = (f"the model predicts {b['predicted_time_s'] * 1e3:.3f} ms per exchange vs "
               f"{afc['predicted_time_s'] * 1e3:.3f} ms for afc")
    return best, f"chose {b['placement']} over afc: {why}"


#: The refinement's work limit in the one-call search: edge visits per
#: edge of the graph, plus a floor for small graphs (bounded so that it
#: costs about what Scotch's own mapping costs).
REFINE_PER_EDGE = 20
REFINE_MIN = 5000


def search_applies(graph: Graph, machine: Machine, forced: str | None = None) -> bool:
    """Return whether the one-call native search (:func:`search`) maps this
    input: nodes of one shape, all cores usable, no measured link costs,
    and either Scotch's one-call mapping applies or Scotch is left out."""
    if getattr(machine, "links", None) is not None or not core.has_search():
        return False
    cap = list(machine.capacity)
    size = machine.slots_per_node
    if not machine.arity or math.prod(machine.arity) != size or any(c != size for c in cap):
        return False
    return graph.n <= TREE_MAX_RANKS or skips_scotch(graph.n, geometric_cached(graph, machine),
                                                    forced)


def geometric_cached(graph: Graph, machine: Machine) -> Placement | None:
    """Return :func:`geometric`, built once per graph and machine shape."""
    key = ("geometric", machine.nodes, tuple(machine.capacity), tuple(machine.arity))
    cache = graph.__dict__.setdefault("_placements", {})
    if key not in cache:
        cache[key] = geometric(graph, machine)
    return cache[key]


def search(graph: Graph, machine: Machine, seed: int = 1, forced: str | None = None):
    """Run the whole mapping search in libtiers (``tiers_map_search``: one
    Scotch mapping onto the machine's tree, the candidates below measured
    by the model, the best refined) and return ``(places, chosen, swaps)``:
    the candidates in table order without ``random`` (afc and afc-nb unless
    Scotch is left out, block, map-by-node, map-by-package, geometric, and
    ``refined`` when the refined winner ranks first, or ``grouped`` when
    the third start replaces it), the placement to write, and the
    refinement's swaps."""
    n = graph.n
    geo = geometric_cached(graph, machine)
    use_scotch = not skips_scotch(n, geo, forced)
    cands = [block(n, machine), by_node(n, machine)]
    if machine.arity and machine.arity[0] > 1:
        cands.append(by_package(n, machine))
    if geo is not None:
        cands.append(geo)
    names = ["node"] + list(machine.level_layers) + ["core"]
    lat = [machine.layer_costs[x][0] for x in names]
    bw = [machine.layer_costs[x][1] for x in names]
    whole = min(machine.nodes, -(-n // machine.slots_per_node))
    budget = REFINE_PER_EDGE * int(graph.adjncy.size) + REFINE_MIN
    extra = use_scotch and geo is None and n <= EXTRA_STARTS_MAX_RANKS
    place, _costs, chosen, swaps, second = core.search(
        graph, machine.nodes, NODE_COST_FACTOR * max(machine.cost), machine.arity, machine.cost,
        lat, bw, TIME_TIE, [(p.node, p.slot) for p in cands], use_scotch=use_scotch,
        seed=seed, budget=budget, tree_nodes=whole, extra_starts=extra)
    by_index = {}
    out = []
    if use_scotch:
        afc = Placement("afc", place[0, 0], place[0, 1],
                        f"Scotch static mapping onto the machine's tleaf tree ({whole} nodes "
                        f"x {'x'.join(map(str, machine.arity))}, Scotch's default strategy, "
                        "as scotch_gmap)")
        by_index[0] = afc
        # the native row 1: afc's nodes, each node's ranks in rank order
        # (what nb_of builds)
        by_index[1] = Placement("afc-nb", place[1, 0], place[1, 1], NB_NOTE)
        out += [by_index[0], by_index[1]]
    for i, p in enumerate(cands):
        by_index[i + 2] = p
        out.append(p)
    last = len(cands) + 2
    if chosen == last and second == 2:
        by_index[last] = Placement("grouped", place[last, 0], place[last, 1], GROUPED_NOTE)
        out.append(by_index[last])
    elif chosen == last:
        # listed when the refined winner ranks first (so it is written);
        # its start: the same order over the others
        mets = [{"placement": by_index[i].name,
                 "predicted_time_s": max(_costs[i].rank_s, _costs[i].link_s),
                 "max_node_sent_bytes": _costs[i].sent_max, "bytes_inter_node": _costs[i].inter}
                for i in sorted(by_index)]
        start, _ = choose(mets)
        origin = ("Scotch's grouping onto the nodes by recursive bipartitioning, 30 % "
                  "imbalance allowed (a second start: Scotch's mapping's busiest node sent far "
                  "more than any other)" if second else mets[start]['placement'])
        refined = Placement("refined", place[last, 0], place[last, 1],
                            f"{origin} with {swaps} node-level "
                            f"swap{'s' if swaps != 1 else ''} and moves (busiest node's sent "
                            "bytes, then inter-node bytes; chains of moves between nodes; "
                            "balancing of the busiest node)")
        by_index[last] = refined
        out.append(refined)
    return out, by_index[chosen], swaps


#: How the third start's placement (``grouped``) was made.
GROUPED_NOTE = ("Scotch's grouping of the ranks onto the nodes by recursive bipartitioning, "
                "50 % imbalance allowed (repaired), each node's ranks placed by a quick split "
                "of the node tree (a third start); written because it moves no more bytes "
                "between nodes than the search's result, its busiest node sends no more, and "
                "one of the two is lower")

#: The search's extra starts (``tiers_map_search``'s extra_starts), for
#: graphs without coordinates (sparse matrices, traces) up to this many
#: ranks.  Which basin Scotch's mapping lands in decides what the
#: refinement can reach; both extra starts are Scotch's grouping of the
#: ranks onto the nodes by recursive bipartitioning.  The second (30 %
#: imbalance allowed) is refined instead of the winner when Scotch's
#: mapping has a node sending more than 1.25x what any other node sends
#: and it ranks before the winner: on the row blocks of
#: local_disc_galerkin_diffusion at 128 ranks (Scotch's busiest node 2,976
#: B, the next 2,120 B) it gives 14,752 B inter-node with the busiest node
#: at 2,368 B, against 14,624 B and 2,976 B.  The third (50 %) replaces
#: the result only when it is no worse on either byte measure and better
#: on one: on bar at 128 ranks 35,016 B and 5,536 B against 35,336 B and
#: 5,552 B.  As the only start either loses elsewhere (docs/map.md).
#: Grids have the geometric candidate instead.
EXTRA_STARTS_MAX_RANKS = 256


def permutation(p: Placement) -> np.ndarray:
    """Return, per old rank (subdomain), the new rank that a block launch
    puts where ``p`` places it: ranks sorted by (node, slot).  Exact when
    every node is full; otherwise the ranks of a node keep their order."""
    order = np.lexsort((p.slot, p.node))
    new = np.empty_like(order)
    new[order] = np.arange(order.size)
    return new
