"""tiers map's one-call search (libtiers' tiers_map_search) on small graphs:
its afc is scotch_gmap's own mapping of the same graph and tleaf target,
its costs are the time model and byte counts recomputed here by plain
loops, and the placement it writes is the first by the choice rule
(predicted time within the model's uncertainty, then the busiest node's
sent bytes, then the inter-node bytes), recomputed here too."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tiers import topo
from tiers.map import core
from tiers.map import graph as G
from tiers.map import machine as M
from tiers.map import placement as P
from tiers.map import plan

NODE16 = "synthetic:pack:2 core:8 pu:1"     # 2 packages x 8 cores

needs_search = pytest.mark.skipif(not core.has_search(),
                                  reason="libtiers without tiers_map_search")


@pytest.fixture(scope="module")
def node16():
    return topo.measure(NODE16)


def sparse_graph(n: int, seed: int):
    """A connected sparse graph of whole-number directed bytes, like the
    halo exchange of a sparse matrix cut into row blocks: each rank talks
    to a few near ranks and a few far ones."""
    rng = np.random.default_rng(seed)
    rows, cols, w = [], [], []
    for r in range(n):
        peers = {(r + 1) % n, (r + 7) % n} | set(rng.integers(0, n, 2).tolist())
        for c in sorted(peers - {r}):
            rows.append(r)
            cols.append(c)
            w.append(8.0 * int(rng.integers(1, 40)))
    return G.from_coo(n, rows, cols, w)


def directed(g):
    """{(src, dst): bytes} of a graph, by loops over its CSR rows."""
    out = {}
    for v in range(g.n):
        for e in range(int(g.xadj[v]), int(g.xadj[v + 1])):
            u = int(g.adjncy[e])
            b = float(g.adjsent[e]) if g.adjsent is not None else float(g.adjwgt[e]) / 2
            if b > 0:
                out[(v, u)] = b
    return out


def by_loops(traffic, mach, node, slot):
    """(predicted time, max bytes one node sends, inter-node bytes), the
    model of docs/map.md by plain loops: a rank's messages one after
    another at its layer's latency and bandwidth, a node's link carrying
    what the node sends."""
    lat = {k: v[0] for k, v in mach.layer_costs.items()}
    bw = {k: v[1] for k, v in mach.layer_costs.items()}
    rank_t, link_t, sent = {}, {}, {}
    inter = 0.0
    per_pkg = mach.slots_per_node // mach.arity[0]
    for (s, d), b in traffic.items():
        if node[s] != node[d]:
            layer = "node"
            inter += b
            sent[node[s]] = sent.get(node[s], 0.0) + b
            link_t[node[s]] = link_t.get(node[s], 0.0) + b / bw["node"]
        elif slot[s] // per_pkg != slot[d] // per_pkg:
            layer = "machine"
        elif slot[s] != slot[d]:
            layer = "package"
        else:
            layer = "core"
        rank_t[s] = rank_t.get(s, 0.0) + lat[layer] + b / bw[layer]
    time = max(max(rank_t.values(), default=0.0), max(link_t.values(), default=0.0))
    return time, max(sent.values(), default=0.0), inter


def machine(node16, nodes, n):
    return M.build(node16, nodes=nodes, ranks=n)


def first_by_rule(keys):
    """Index of the first of (time, sent, inter) keys by the choice rule,
    by hand: the fastest within TIME_TIE, then least sent, then least
    inter-node bytes, then the first listed."""
    fastest = min(k[0] for k in keys)
    tied = [i for i, k in enumerate(keys) if k[0] <= fastest * (1 + P.TIME_TIE) * (1 + 1e-9)]

    def key(i):
        return (round(keys[i][1], 6), round(keys[i][2], 6), i)
    return min(tied, key=key)


@needs_search
@pytest.mark.parametrize("n,seed", [(64, 1), (96, 2), (128, 3)])
def test_eval_costs_equal_plain_loops(node16, n, seed):
    """tiers_map_eval's inter-node bytes, busiest node's sent bytes and
    predicted time of random placements equal the loops' (directed
    traffic: what a node sends differs from what it receives)."""
    g = sparse_graph(n, seed)
    mach = machine(node16, n // 16, n)
    traffic = directed(g)
    rnd = P.random(n, mach, seed)
    names = ["node"] + list(mach.level_layers) + ["core"]
    lat = [mach.layer_costs[x][0] for x in names]
    bw = [mach.layer_costs[x][1] for x in names]
    place, costs, chosen, _, _ = core.search(
        g, mach.nodes, 100.0, mach.arity, mach.cost, lat, bw, P.TIME_TIE,
        [(rnd.node, rnd.slot)], use_scotch=False, seed=1, budget=0)
    c = costs[2]
    t, sent, inter = by_loops(traffic, mach, rnd.node, rnd.slot)
    assert c.inter == pytest.approx(inter, rel=1e-12)
    assert c.sent_max == pytest.approx(sent, rel=1e-12)
    assert max(c.rank_s, c.link_s) == pytest.approx(t, rel=1e-12)
    recv = {}
    for (s, d), b in traffic.items():
        if rnd.node[s] != rnd.node[d]:
            recv[rnd.node[d]] = recv.get(rnd.node[d], 0.0) + b
    assert c.recv_max == pytest.approx(max(recv.values()), rel=1e-12)
    assert chosen == 2    # the only candidate, and the budget allows no swap


def write_grf(g, path):
    """The graph as a Scotch source graph of integer loads (bytes of the
    pair, both directions) divided by their gcd, as a scotch_gmap user
    writes it."""
    w = np.rint(g.adjwgt).astype(np.int64)
    w //= np.gcd.reduce(w)
    with open(path, "w") as f:
        f.write(f"0\n{g.n} {g.adjncy.size}\n0 010\n")
        for v in range(g.n):
            lo, hi = int(g.xadj[v]), int(g.xadj[v + 1])
            f.write(f"{hi - lo} " + " ".join(f"{w[e]} {g.adjncy[e]}" for e in range(lo, hi))
                    + "\n")


@needs_search
@pytest.mark.skipif(not shutil.which("scotch_gmap"), reason="scotch_gmap (Debian scotch)")
@pytest.mark.parametrize("n,seed", [(64, 4), (128, 5)])
def test_afc_is_scotch_gmaps_mapping_of_a_sparse_graph(node16, tmp_path, n, seed):
    """Scotch's own mapper, run here on the same graph and the tleaf target
    of the same machine (nodes x 2 packages x 8 cores, distances 100 / 10
    / 1, default strategy), puts every rank on the node tiers' afc puts it
    on; so the written placement, first by the rule among candidates that
    include afc, moves no more bytes than scotch_gmap's (recomputed here)."""
    g = sparse_graph(n, seed)
    nodes = n // 16
    write_grf(g, tmp_path / "g.grf")
    (tmp_path / "m.tgt").write_text(f"tleaf 3 {nodes} 100 2 10 8 1\n")
    subprocess.run(["scotch_gmap", str(tmp_path / "g.grf"), str(tmp_path / "m.tgt"),
                    str(tmp_path / "g.map")], check=True, capture_output=True)
    gmap = np.empty(n, dtype=np.int64)
    gslot = np.empty(n, dtype=np.int64)
    lines = (tmp_path / "g.map").read_text().split("\n")[1:]
    for ln in lines:
        if ln.strip():
            v, dom = map(int, ln.split())
            gmap[v], gslot[v] = dom // 16, dom % 16
    mach = machine(node16, nodes, n)
    places, chosen, _ = P.search(g, mach, seed=1)
    afc = places[0]
    assert afc.name == "afc"
    assert np.array_equal(afc.node, gmap)
    assert np.array_equal(afc.slot, gslot)   # every rank on its own core: nothing repaired
    # afc-nb: afc's nodes, each node's ranks on its slots in rank order
    nb = places[1]
    assert nb.name == "afc-nb" and np.array_equal(nb.node, gmap)
    for k in range(nodes):
        assert nb.slot[gmap == k].tolist() == list(range(int(np.sum(gmap == k))))
    traffic = directed(g)
    _, sent_g, inter_g = by_loops(traffic, mach, gmap, gslot)
    _, sent_c, inter_c = by_loops(traffic, mach, chosen.node, chosen.slot)
    keys = [by_loops(traffic, mach, p.node, p.slot) for p in places]
    assert places.index(chosen) == first_by_rule(keys)
    if chosen.name == "refined":
        # the refined winner is never worse than where it started, on either
        start = next(p for p in places if chosen.note.startswith(p.name + " with "))
        _, sent_s, inter_s = by_loops(traffic, mach, start.node, start.slot)
        assert sent_c <= sent_s and inter_c <= inter_s and (sent_c, inter_c) != (sent_s, inter_s)
    assert sent_c <= sent_g and inter_c <= inter_g


@needs_search
@pytest.mark.parametrize("spec,nodes", [("3d:4,4,4:64,32,16", 4), ("3d:8,8,8:64,32,16", 32),
                                        ("3d:4,4,8:32,32,32", 8), ("2d:16,8:256,64", 8)])
def test_written_placement_is_first_by_the_rule(node16, spec, nodes):
    """plan() writes the candidate that the rule, applied here to costs
    recomputed by loops, puts first; random is never it."""
    parts, points = G.parse_stencil(spec)
    g = G.stencil(parts, points)
    out = plan(g, node16, nodes=nodes)
    mach = out["machine"]
    traffic = directed(g)
    cands = [p for p in out["placements"] if p.name != "random"]
    keys = [by_loops(traffic, mach, p.node, p.slot) for p in cands]
    assert cands[first_by_rule(keys)] is out["chosen"]


@needs_search
def test_byte_tie_break_writes_the_box_tiling_of_an_anisotropic_grid(node16):
    """8x8x8 subdomains of 64x32x16 points on 32 nodes: the box tiling's
    busiest node sends 224 KiB where Scotch's mapping's sends 256 KiB, and
    its predicted time (a rank with one more inter-node neighbour) is
    within the model's uncertainty of the fastest: the tiling is written,
    and the line says why (by loops: its sent bytes are the least of the
    tied candidates, and no candidate moves fewer inter-node bytes)."""
    g = G.stencil([8, 8, 8], [64, 32, 16])
    out = plan(g, node16, nodes=32)
    mach = out["machine"]
    traffic = directed(g)
    chosen = out["chosen"]
    assert chosen.name == "geometric"
    keys = {p.name: by_loops(traffic, mach, p.node, p.slot) for p in out["placements"]}
    fastest = min(k[0] for name, k in keys.items() if name != "random")
    mine = keys["geometric"]
    assert fastest < mine[0] <= fastest * (1 + P.TIME_TIE)   # slower, but within the band
    assert mine[1] == 224 * 1024
    assert keys["afc"][1] == 256 * 1024
    assert mine[2] == min(k[2] for k in keys.values())
    assert "within the model's 15% uncertainty" in out["chosen_note"]
    assert "busiest node sends 224.0 KiB vs 256.0 KiB" in out["chosen_note"]


@needs_search
def test_outside_the_band_the_faster_placement_wins_over_fewer_bytes(node16):
    """The rule's time comes first: with the band at zero (every predicted
    time counts), the same grid gets the model's fastest candidate, even
    though the tiling's busiest node sends less."""
    g = G.stencil([8, 8, 8], [64, 32, 16])
    mach = machine(node16, 32, g.n)
    names = ["node"] + list(mach.level_layers) + ["core"]
    lat = [mach.layer_costs[x][0] for x in names]
    bw = [mach.layer_costs[x][1] for x in names]
    geo = P.geometric(g, mach)
    blk = P.block(g.n, mach)
    place, costs, chosen, _, _ = core.search(
        g, mach.nodes, 100.0, mach.arity, mach.cost, lat, bw, 0.0,
        [(blk.node, blk.slot), (geo.node, geo.slot)], use_scotch=True, seed=1, budget=0)
    traffic = directed(g)
    keys = [by_loops(traffic, mach, place[i, 0], place[i, 1]) for i in range(4)]
    assert chosen == int(np.argmin([k[0] for k in keys]))
    assert chosen != 3 and keys[3][1] < keys[chosen][1]


def row_block_graph(name: str, ranks: int):
    """The halo exchange of pyamg's gallery matrix ``name`` cut into
    ``ranks`` contiguous row blocks, built by bench/map_vs_scotch's own
    ``matrix_graph`` (the graph the benchmark maps)."""
    pytest.importorskip("pyamg")
    pytest.importorskip("scipy.io")
    import importlib.machinery
    import importlib.util
    script = Path(__file__).resolve().parent.parent / "bench" / "map_vs_scotch" / "run"
    loader = importlib.machinery.SourceFileLoader("map_vs_scotch_run", str(script))
    spec = importlib.util.spec_from_loader("map_vs_scotch_run", loader)
    bench = importlib.util.module_from_spec(spec)
    loader.exec_module(bench)
    src, dst, b, _ = bench.matrix_graph(name, ranks)
    return G.from_coo(ranks, src.tolist(), dst.tolist(), b.tolist())


def row_block_case(node16, name: str):
    """The row blocks of ``name`` at 128 ranks on 8 nodes of 16, with the
    baselines as the caller's candidates."""
    g = row_block_graph(name, 128)
    mach = machine(node16, 8, g.n)
    return g, mach, [P.block(g.n, mach), P.by_node(g.n, mach), P.by_package(g.n, mach)]


def _search(g, mach, cands, extra):
    names = ["node"] + list(mach.level_layers) + ["core"]
    lat = [mach.layer_costs[x][0] for x in names]
    bw = [mach.layer_costs[x][1] for x in names]
    budget = P.REFINE_PER_EDGE * int(g.adjncy.size) + P.REFINE_MIN
    return core.search(g, mach.nodes, 100.0, mach.arity, mach.cost, lat, bw, P.TIME_TIE,
                       [(p.node, p.slot) for p in cands], use_scotch=True, seed=1,
                       budget=budget, tree_nodes=mach.nodes, extra_starts=extra)


@needs_search
def test_a_second_start_leaves_scotch_s_basin_on_a_sparse_matrix(node16):
    """local_disc_galerkin_diffusion in 128 row blocks on 8 nodes:
    Scotch's mapping has one node sending far more than any other; the
    second start (Scotch's grouping onto the nodes by recursive
    bipartitioning, 30 % imbalance allowed), refined, is written: its busiest node sends less than the first start's choice,
    its predicted time is within the band, and it moves no more inter-node
    bytes than the fewest of any candidate (the balancing's cap) -- all
    recomputed here by loops."""
    g, mach, cands = row_block_case(node16, "local_disc_galerkin_diffusion")
    traffic = directed(g)
    place0, _, chosen0, _, second0 = _search(g, mach, cands, False)
    place, _, chosen, _, second = _search(g, mach, cands, True)
    assert second0 == 0 and second == 1
    last = len(cands) + 2
    assert chosen == last
    first = by_loops(traffic, mach, place0[chosen0, 0], place0[chosen0, 1])
    mine = by_loops(traffic, mach, place[last, 0], place[last, 1])
    # the trigger: Scotch's mapping's busiest node against the next one
    sent = {}
    for (s, d), b in traffic.items():
        n0 = place0[0, 0]
        if n0[s] != n0[d]:
            sent[n0[s]] = sent.get(n0[s], 0.0) + b
    top, nxt = sorted(sent.values(), reverse=True)[:2]
    assert top > 1.25 * nxt
    assert mine[1] < first[1]
    assert mine[0] <= min(first[0], mine[0]) * (1 + P.TIME_TIE)
    fewest = min(by_loops(traffic, mach, place[i, 0], place[i, 1])[2] for i in range(last))
    assert mine[2] <= fewest + 1e-9
    # rows 0 .. last - 1 are the same with and without the second start
    assert np.array_equal(place[:last], place0[:last])
    # every node holds its 16 ranks on 16 distinct cores
    assert np.bincount(place[last, 0], minlength=8).tolist() == [16] * 8
    for k in range(8):
        assert len(set(place[last, 1][place[last, 0] == k].tolist())) == 16


@needs_search
def test_the_third_start_replaces_a_result_it_beats_on_both_measures(node16):
    """bar in 128 row blocks on 8 nodes: the third start (Scotch's grouping
    onto the nodes by recursive bipartitioning, 50 % imbalance allowed) is
    written: recomputed by loops, it moves fewer bytes between nodes than
    the search without the extra starts and its busiest node sends no more;
    every node holds 16 ranks on distinct cores, and the quick split of the
    node tree cuts no more bytes between the two packages than ranks in
    rank order on the cores would."""
    g, mach, cands = row_block_case(node16, "bar")
    traffic = directed(g)
    place0, _, chosen0, _, second0 = _search(g, mach, cands, False)
    place, costs, chosen, _, second = _search(g, mach, cands, True)
    last = len(cands) + 2
    assert second0 == 0 and second == 2 and chosen == last
    before = by_loops(traffic, mach, place0[chosen0, 0], place0[chosen0, 1])
    mine = by_loops(traffic, mach, place[last, 0], place[last, 1])
    assert mine[2] < before[2] and mine[1] <= before[1]
    assert costs[last].inter == pytest.approx(mine[2]) and costs[last].sent_max == \
        pytest.approx(mine[1])
    node, slot = place[last, 0], place[last, 1]
    assert np.bincount(node, minlength=8).tolist() == [16] * 8
    packages = 0.0
    in_order = 0.0
    order = {}
    for k in range(8):
        ranks = np.flatnonzero(node == k)
        assert sorted(slot[ranks].tolist()) == list(range(16))
        order.update({int(r): i for i, r in enumerate(ranks)})
    for (s, d), b in traffic.items():
        if node[s] == node[d]:
            packages += b * (slot[s] // 8 != slot[d] // 8)
            in_order += b * (order[s] // 8 != order[d] // 8)
    assert packages <= in_order


@needs_search
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                    reason="the extra starts' own thread needs a second CPU")
@pytest.mark.parametrize("name,taken", [("local_disc_galerkin_diffusion", 1), ("bar", 2),
                                        ("helmholtz_2D", 0)])
def test_the_extra_starts_on_their_own_thread_give_what_one_thread_does(node16, name, taken):
    """The extra starts run on a thread of their own while the first start
    is mapped, where the process may use two CPUs: with this thread held to
    one CPU (the starts made afterwards, on the calling thread) every row,
    cost and choice is the same -- whether the second start, the third or
    neither is taken."""
    g, mach, cands = row_block_case(node16, name)
    both = _search(g, mach, cands, True)
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        one = _search(g, mach, cands, True)
    finally:
        os.sched_setaffinity(0, cpus)
    assert both[4] == one[4] == taken
    assert np.array_equal(both[0], one[0])
    assert both[2] == one[2] and both[3] == one[3]
    for a, b in zip(both[1], one[1]):
        assert (a.inter, a.sent_max, a.rank_s, a.link_s) == (b.inter, b.sent_max, b.rank_s,
                                                             b.link_s)


@needs_search
def test_no_second_start_where_no_node_stands_out(node16):
    """A graph whose chosen placement has no node far above the others
    gets no second start, nor a third one that beats its result: the
    written placement is the same as without the extra starts."""
    g = G.stencil([4, 4, 8], [32, 32, 32])
    mach = machine(node16, 8, g.n)
    cands = [P.block(g.n, mach), P.by_node(g.n, mach)]
    place0, _, chosen0, _, _ = _search(g, mach, cands, False)
    place, _, chosen, _, second = _search(g, mach, cands, True)
    assert second == 0 and chosen == chosen0
    assert np.array_equal(place[chosen], place0[chosen0])


@pytest.mark.parametrize("name,written,says", [
    ("local_disc_galerkin_diffusion", "refined", "(a second start"),
    ("bar", "grouped", "grouped: Scotch's grouping of the ranks onto the nodes")])
def test_tiers_map_writes_an_extra_start_and_says_so(tmp_path, name, written, says):
    """Through the command: the row blocks of a matrix as a Matrix Market
    file; the second start (refined) or the third (grouped) is written, its
    note says so, and it beats Scotch's mapping (afc) on the busiest node
    and moves no more bytes between nodes."""
    import json

    from conftest import run_tiers
    g = row_block_graph(name, 128)
    path = tmp_path / "g.mtx"
    rows = [(v, int(g.adjncy[e]), float(g.adjsent[e]) if g.adjsent is not None
             else float(g.adjwgt[e]) / 2)
            for v in range(g.n) for e in range(int(g.xadj[v]), int(g.xadj[v + 1]))]
    rows = [r for r in rows if r[2] > 0]
    path.write_text("%%MatrixMarket matrix coordinate real general\n"
                    f"{g.n} {g.n} {len(rows)}\n"
                    + "".join(f"{s + 1} {d + 1} {b:.0f}\n" for s, d, b in rows))
    out = tmp_path / "map.json"
    run = run_tiers("map", "--machine", NODE16, "--nodes", "8", "--comm", str(path),
                    "--json", str(out))
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    assert doc["summary"]["chosen"]["placement"] == written
    mets = {m["placement"]: m for m in doc["summary"]["comparison"]}
    assert mets[written]["max_node_sent_bytes"] < mets["afc"]["max_node_sent_bytes"]
    assert mets[written]["bytes_inter_node"] <= mets["afc"]["bytes_inter_node"]
    assert says in run.stdout
    if written == "grouped":
        # the choice line gives whole bytes where KiB would print alike
        assert "its busiest node sends 5,536 B vs 5,552 B" in run.stdout
