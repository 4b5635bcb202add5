"""libtiers' geometric candidate (tiers_map_geometric) against a Python
reference written here from the method in docs/map.md: the same nodes and
the same slots, rank for rank, on tiled and bisected grids, 2-D and 3-D,
uniform and anisotropic, on node trees of two and three levels, nodes of
unequal slots and oversubscribed nodes."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tiers import topo
from tiers.map import graph as G
from tiers.map import machine as M
from tiers.map import placement as P


def _fill_sizes(count: int, capacities: list[int]) -> list[int]:
    """How many of ``count`` items each container holds, filled in order."""
    out = []
    for c in capacities:
        take = min(c, count)
        out.append(take)
        count -= take
    return out


def _rcb(pos: list, idx: list, sizes: list[int], pair, out: dict, first: int) -> None:
    """Parts first, first + 1, ... of ``sizes`` items to the items ``idx``:
    each cut across the axis whose cut plane carries the fewest bytes, the
    items ordered along it, then along the other axes in index order."""
    if len(sizes) == 1 or not idx:
        for i in idx:
            out[i] = first
        return
    k = len(sizes) // 2
    left = sum(sizes[:k])
    dim = len(pos[idx[0]])
    best, best_cost = None, None
    for a in range(dim):
        vals = [pos[i][a] for i in idx]
        extent = max(vals) - min(vals) + 1
        if extent < 2:
            continue
        cost = len(idx) / extent * float(pair[a])
        if best_cost is None or cost < best_cost - 1e-12 * cost:
            best, best_cost = a, cost
    order = list(idx)
    if best is not None:
        others = [b for b in range(dim) if b != best]
        order.sort(key=lambda i: (pos[i][best],) + tuple(pos[i][b] for b in others))
    _rcb(pos, order[:left], sizes[:k], pair, out, first)
    _rcb(pos, order[left:], sizes[k:], pair, out, first + k)


def _box(parts, pair, size: int):
    """The tiling box: fewest bytes across boxes, then the least busy box,
    then the smallest surface, the first shape in order among equals."""
    total = math.prod(parts)
    best, best_key = None, None
    for shape in itertools.product(*[[d for d in range(1, p + 1) if p % d == 0]
                                     for p in parts]):
        if math.prod(shape) != size:
            continue
        boxes = [p // s for p, s in zip(parts, shape)]
        cut = sum((b - 1) * total // p * float(w) for b, p, w in zip(boxes, parts, pair))
        busiest = sum(min(b - 1, 2) * size // s * float(w) / 2
                      for b, s, w in zip(boxes, shape, pair))
        surface = sum(2 * size // s * float(w) for s, w in zip(shape, pair))
        if best_key is None or (cut, busiest, surface) < best_key:
            best, best_key = shape, (cut, busiest, surface)
    return best


def geometric_python(g: G.Graph, mach: M.Machine):
    """The reference: ``(node, slot, shape)`` of the geometric candidate."""
    parts, pair = g.grid
    pos = [tuple(int(c) for c in row) for row in g.coords]
    n, cap = g.n, list(mach.capacity)
    size = cap[0]
    shape = None
    if all(c == size for c in cap) and n % size == 0 and n // size <= len(cap):
        shape = _box(parts, pair, size)
    strides = mach.strides

    def inside(pos, idx, out, level, base):
        if level >= len(mach.arity) or len(idx) <= 1 or strides[level] == 1:
            for j, i in enumerate(idx):
                out[i] = base + j
            return
        stride = strides[level]
        sizes = [s for s in _fill_sizes(len(idx), [stride] * mach.arity[level]) if s > 0]
        part = {}
        _rcb(pos, idx, sizes, pair, part, 0)
        for c in range(len(sizes)):
            inside(pos, [i for i in idx if part[i] == c], out, level + 1, base + c * stride)

    node, slot = [0] * n, [0] * n
    if shape is not None:
        boxes = [p // s for p, s in zip(parts, shape)]
        box_pos = []
        for i in range(size):
            p = []
            for s in shape:
                p.append(i % s)
                i //= s
            box_pos.append(tuple(p))
        of_pos = [0] * size
        inside(box_pos, list(range(size)), of_pos, 0, 0)
        for v, p in enumerate(pos):
            lin, at = 0, 0
            for a in reversed(range(len(parts))):
                lin = lin * boxes[a] + p[a] // shape[a]
                at = at * shape[a] + p[a] % shape[a]
            node[v], slot[v] = lin, of_pos[at]
    else:
        sizes = _fill_sizes(n, cap)
        used = [i for i, s in enumerate(sizes) if s > 0]
        part = {}
        _rcb(pos, list(range(n)), [sizes[i] for i in used], pair, part, 0)
        node = [used[part[v]] for v in range(n)]
        for i in range(mach.nodes):
            inside(pos, [v for v in range(n) if node[v] == i], slot, 0, 0)
    return node, slot, shape


SPECS = ("3d:4,4,4:32,32,32", "3d:4,4,4:64,32,16", "3d:8,8,8:64,32,16", "3d:5,5,5:10,10,10",
         "3d:6,4,3:8,9,10", "2d:16,16:256,256", "2d:7,9:10,30", "3d:16,8,4:10,20,40",
         "2d:3,50:100,7", "3d:2,3,7:5,5,5")
NODES = ("synthetic:pack:2 core:8 pu:1", "synthetic:pack:2 numa:2 core:3 pu:1",
         "synthetic:core:6 pu:1")


@pytest.fixture(scope="module")
def docs():
    return {d: topo.measure(d) for d in NODES}


def _same(g, mach):
    geo = P.geometric(g, mach)
    node, slot, shape = geometric_python(g, mach)
    assert geo.node.tolist() == node
    assert geo.slot.tolist() == slot
    assert geo.note.startswith("grid tiled into " + "x".join(map(str, shape))
                               if shape else "recursive coordinate bisection")
    # a placement: every rank on a slot of its node, no slot twice
    pairs = set(zip(node, slot))
    assert len(pairs) == g.n
    assert all(0 <= s < mach.capacity[i] or mach.oversubscribed > 1 for i, s in pairs)
    return shape


@pytest.mark.parametrize("desc", NODES)
@pytest.mark.parametrize("spec", SPECS)
def test_geometric_matches_the_reference(docs, desc, spec):
    parts, pts = G.parse_stencil(spec)
    shapes = []
    for numbering in ("x-fastest", "cart"):
        g = G.stencil(parts, pts, numbering=numbering)
        per = M.build(docs[desc], nodes=1, ranks=1).slots_per_node
        fit = -(-g.n // per)
        for nodes in (fit, fit + 3):
            shapes.append(_same(g, M.build(docs[desc], nodes=nodes, ranks=g.n)))
    if spec == "3d:4,4,4:32,32,32" and desc == NODES[0]:
        # the method's own answer by hand: three 16-rank boxes cut 32 pair
        # bytes, 2x2x4 is the first of them in order (nodes to spare stay
        # empty)
        assert shapes == [(2, 2, 4)] * 4


def test_geometric_on_unequal_and_oversubscribed_nodes(docs, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=16\nb slots=8\nc slots=16\nd slots=12\n")
    doc = docs[NODES[0]]
    for spec in ("3d:3,3,5:10,10,10", "2d:6,8:100,50", "3d:4,4,2:32,32,32"):
        parts, pts = G.parse_stencil(spec)
        g = G.stencil(parts, pts)
        mach = M.build(doc, hostfile=str(hostfile), ranks=g.n)
        assert _same(g, mach) is None     # unequal nodes are bisected
        counts = np.bincount(P.geometric(g, mach).node, minlength=4)
        assert (counts <= np.asarray(mach.capacity)).all()
        _same(g, M.build(doc, nodes=1, ranks=g.n, oversubscribe=True))
