"""libtiers' grid recogniser (tiers_map_grid) against a Python reference
written here: the same answer, the same axes and coordinates, on grids in
every numbering and on graphs that only look like grids."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tiers.map import core
from tiers.map import graph as G


def _bfs(g: G.Graph, start: int) -> np.ndarray:
    """Hop distance of every rank from ``start`` (-1: not reached)."""
    xadj, adj = g.xadj.tolist(), g.adjncy.tolist()
    d = [-1] * g.n
    d[start] = 0
    front = [start]
    while front:
        nxt = []
        for v in front:
            for u in adj[xadj[v]:xadj[v + 1]]:
                if d[u] < 0:
                    d[u] = d[v] + 1
                    nxt.append(u)
        front = nxt
    return np.asarray(d, dtype=np.int64)


def recover_grid_python(g: G.Graph) -> bool:
    """The reference: :func:`tiers.map.graph.recover_grid` written in Python
    (the same tests, in the same order, as libtiers' ``tiers_map_grid``)."""

    if g.coords is not None or g.n < 4:
        return False
    # the cheap tests first: degrees (a sparse matrix's graph fails here)
    deg = np.diff(g.xadj)
    dims = int(deg.min())
    if dims not in (2, 3) or deg.max() > 2 * dims:
        return False
    corners = np.flatnonzero(deg == dims)
    if corners.size != 2 ** dims:
        return False
    # both directions alike (np.allclose's first call costs milliseconds)
    if g.adjsent is not None and g.adjsent.size and \
            np.abs(g.adjsent * 2 - g.adjwgt).max() > 1e-9 * np.abs(g.adjwgt).max():
        return False
    c0 = int(corners[0])
    d0 = _bfs(g, c0)
    if d0.min() < 0:
        return False
    others = [int(c) for c in corners[1:]]
    u, v, w = g.edge_list()
    from_corner: dict[int, np.ndarray] = {}    # each corner's search once
    for ends in itertools.combinations(others, dims):
        sizes = [int(d0[e]) + 1 for e in ends]
        if math.prod(sizes) != g.n:
            continue
        coords = np.empty((g.n, dims), dtype=np.int64)
        ok = True
        for a, e in enumerate(ends):
            if a == dims - 1:
                # the last coordinate without a search of its own: a grid
                # point's distance from the first corner is the sum of its
                # coordinates (the checks below test every edge anyway)
                last = d0 - coords[:, :a].sum(axis=1)
                if last.min() < 0 or last.max() > sizes[a] - 1:
                    ok = False
                    break
                coords[:, a] = last
                break
            if e not in from_corner:
                from_corner[e] = _bfs(g, e)
            twice = d0 - from_corner[e] + (sizes[a] - 1)
            if np.any(twice % 2) or twice.min() < 0 or twice.max() > 2 * (sizes[a] - 1):
                ok = False
                break
            coords[:, a] = twice // 2
        if not ok:
            continue
        lin = np.zeros(g.n, dtype=np.int64)
        for a in reversed(range(dims)):
            lin = lin * sizes[a] + coords[:, a]
        if np.bincount(lin, minlength=g.n).max() != 1:
            continue
        step = np.abs(coords[u] - coords[v])
        if not np.all(step.sum(axis=1) == 1):
            continue
        axis = np.argmax(step, axis=1)
        expect = sum((sizes[a] - 1) * g.n // sizes[a] for a in range(dims))
        if u.size != expect:
            continue
        pair = []
        for a in range(dims):
            wa = w[axis == a]
            if wa.size and not np.all(wa == wa[0]):
                return False
            pair.append(float(wa[0]) if wa.size else 0.0)
        g.coords = coords.astype(np.int32)
        g.grid = (tuple(sizes), tuple(pair))
        return True
    return False


def _fresh(g: G.Graph) -> G.Graph:
    """A copy of ``g`` without coordinates (arrays shared)."""
    return G.Graph(g.n, g.xadj, g.adjncy, g.adjwgt, adjsent=g.adjsent)


def _both(g: G.Graph):
    """Return (python graph after recognition, native result)."""
    py = _fresh(g)
    found = recover_grid_python(py)
    nat = core.grid(_fresh(g))
    assert found == (nat is not None)
    if found:
        coords, sizes, pair = nat
        assert (sizes, pair) == py.grid
        assert coords.dtype == np.int32 and np.array_equal(coords, py.coords)
    return py, nat


SPECS = [([4, 4, 4], [64, 32, 16]), ([4, 4, 4], [32, 32, 32]), ([8, 4, 2], [8, 8, 8]),
         ([5, 3, 7], [4, 8, 16]), ([2, 2, 2], [8, 8, 8]), ([3, 3, 3], [8, 8, 8]),
         ([16, 16], [256, 256]), ([6, 4], [32, 8]), ([5, 3], [8, 4]), ([2, 2], [8, 8])]


@pytest.mark.parametrize("parts,points", SPECS)
def test_native_recognises_every_numbering_as_python_does(parts, points):
    g = G.stencil(parts, points)
    for seed in range(4):
        h = g.permuted(np.random.default_rng(seed).permutation(g.n)) if seed else g
        py, nat = _both(h)
        assert nat is not None
        assert sorted(nat[1]) == sorted(parts)
        # every edge joins grid neighbours, every grid point holds one rank
        u, v, _ = h.edge_list()
        assert np.all(np.abs(nat[0][u].astype(int) - nat[0][v]).sum(axis=1) == 1)
        assert len(set(map(tuple, nat[0].tolist()))) == h.n
    # through recover_grid (the path tiers map takes)
    h = _fresh(g.permuted(np.random.default_rng(9).permutation(g.n)))
    assert G.recover_grid(h) and sorted(h.grid[0]) == sorted(parts)


@pytest.mark.parametrize("parts", [[5, 4, 3], [6, 5], [4, 4, 4], [8, 8]])
def test_native_and_python_agree_on_rewired_near_grids(parts):
    """Random degree-keeping rewirings (two edges a-b, c-d -> a-d, c-b):
    neither recogniser takes them for a grid, and they never disagree."""
    g = G.stencil(parts, [8] * len(parts))
    u, v, w = g.edge_list()
    rng = np.random.default_rng(11)
    tried = 0
    for _ in range(40):
        i, j = rng.choice(u.size, 2, replace=False)
        a, b, c, d = int(u[i]), int(v[i]), int(u[j]), int(v[j])
        edges = {(int(x), int(y)) for x, y in zip(u, v)}
        if len({a, b, c, d}) < 4 or (min(a, d), max(a, d)) in edges or \
                (min(c, b), max(c, b)) in edges:
            continue
        u2, v2 = u.copy(), v.copy()
        v2[i], v2[j] = d, b
        h = G.from_coo(g.n, u2, v2, w, symmetric=True)
        h = h.permuted(rng.permutation(h.n))
        _, nat = _both(h)
        assert nat is None
        tried += 1
    assert tried >= 10


def test_native_refuses_what_python_refuses():
    g = G.stencil([4, 4, 2], [8, 8, 8])
    u, v, w = g.edge_list()
    # one extra edge
    h = G.from_coo(g.n, np.append(u, 0), np.append(v, g.n - 1), np.append(w, w[0]),
                   symmetric=True)
    assert _both(h)[1] is None
    # uneven bytes along one axis
    w2 = w.copy()
    w2[0] += 1
    assert _both(G.from_coo(g.n, u, v, w2, symmetric=True))[1] is None
    # the same graph with the bytes even again is a grid
    assert _both(G.from_coo(g.n, u, v, w, symmetric=True))[1] is not None
    # a periodic ring of rings (a torus: every degree 4, no corner)
    n = 16
    r = np.arange(n)
    tu = np.concatenate([r, r])
    tv = np.concatenate([(r // 4) * 4 + (r + 1) % 4, (r + 4) % n])
    tor = G.from_coo(n, tu, tv, np.ones(2 * n), symmetric=True)
    assert _both(tor)[1] is None
    # a path and a small graph
    assert _both(G.from_coo(5, np.arange(4), np.arange(1, 5), np.ones(4), symmetric=True))[1] \
        is None
    assert _both(G.from_coo(3, [0, 1], [1, 2], [1.0, 1.0], symmetric=True))[1] is None


def test_native_reads_the_direction_of_the_bytes():
    """A grid whose pairs send unequal bytes each way is not a grid of
    face exchanges; with half each way it is."""
    g = G.stencil([4, 3], [8, 8])
    src, dst, out = g.sent()
    even = G.from_coo(g.n, src, dst, out)
    assert _both(even)[1] is not None
    skew = out.copy()
    skew[src < dst] *= 3
    assert _both(G.from_coo(g.n, src, dst, skew))[1] is None
