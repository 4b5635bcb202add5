"""tiers map: grouping and placement on synthetic machines with known
optima, every placement a bijection onto distinct slots within capacity,
input readers that agree, bad input as one line, and a real mpirun whose
ranks read back the binding the generated rankfile asked for."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_one_line_error, run_tiers
from tiers import launch, native, topo
from tiers.map import graph as G
from tiers.map import machine as M
from tiers.map import placement as P
from tiers.map import plan, writers

NODE8 = "synthetic:pack:2 core:4 pu:1"      # the seed's RICC node: 2 x 4-core packages
NODE4 = "synthetic:pack:2 core:2 pu:1"


@pytest.fixture(scope="module")
def node8():
    return topo.measure(NODE8)


@pytest.fixture(scope="module")
def node4():
    return topo.measure(NODE4)


def cut_bytes(g, node):
    u, v, w = g.edge_list()
    return float(w[node[u] != node[v]].sum())


def assert_bijection(p, mach, n):
    assert p.node.shape == (n,) and p.slot.shape == (n,)
    assert np.all((p.node >= 0) & (p.node < mach.nodes))
    assert np.all((p.slot >= 0) & (p.slot < mach.slots_per_node))
    keys = set(zip(p.node.tolist(), p.slot.tolist()))
    assert len(keys) == n, f"{p.name}: two ranks share a slot"
    counts = np.bincount(p.node, minlength=mach.nodes)
    assert np.all(counts <= np.asarray(mach.capacity)), p.name


def test_node_tree_from_synthetic(node8):
    arity, layers, depths, pus, cores = M.node_tree(node8)
    assert arity == [2, 4]
    assert layers == ["machine", "package"]
    assert pus == list(range(8))


def test_stencil_numbering_x_fastest_and_cart():
    """2x3x1 subdomains of 4x16x8 points: the x-face holds 16x8 points, the
    y-face 4x8.  x-fastest numbers rank = x + 2 y; cart (MPI_Cart_create)
    numbers rank = y + 3 x; the heavy edges follow the numbering."""
    x_face, y_face = 16 * 8 * G.BYTES_PER_POINT * 2, 4 * 8 * G.BYTES_PER_POINT * 2

    def weight(g, a, b):
        lo, hi = g.xadj[a], g.xadj[a + 1]
        hits = [w for v, w in zip(g.adjncy[lo:hi], g.adjwgt[lo:hi]) if v == b]
        return hits[0] if hits else 0.0

    xf = G.stencil([2, 3, 1], [4, 16, 8])
    cart = G.stencil([2, 3, 1], [4, 16, 8], numbering="cart")
    for x in range(2):
        for y in range(3):
            r_x, r_c = x + 2 * y, y + 3 * x
            if x == 0:   # x-neighbour (1, y)
                assert weight(xf, r_x, r_x + 1) == x_face
                assert weight(cart, r_c, r_c + 3) == x_face
            if y < 2:    # y-neighbour (x, y + 1)
                assert weight(xf, r_x, r_x + 2) == y_face
                assert weight(cart, r_c, r_c + 1) == y_face
    assert xf.adjwgt.sum() == cart.adjwgt.sum()
    with pytest.raises(Exception, match="numbering"):
        G.stencil([2, 2], [4, 4], numbering="fortran")


def test_stencil_graph_weights():
    g = G.stencil([2, 3, 1], [10, 20, 30])
    # x faces: 20*30 points, y faces: 10*30 points, 8 bytes, both directions
    u, v, w = g.edge_list()
    xs = w[(v - u) == 1]
    ys = w[(v - u) == 2]
    assert g.n == 6 and g.edges == 3 + 4
    assert set(xs.tolist()) == {2 * 600 * 8.0}
    assert set(ys.tolist()) == {2 * 300 * 8.0}


def test_cube_on_two_nodes_cuts_the_minimum(node4):
    """A 2x2x2 stencil on 2 nodes x 4 cores: the best cut is one face plane
    of 4 edges; the mapped grouping must cut exactly that."""
    g = G.stencil([2, 2, 2], [10, 10, 10])
    out = plan(g, node4, nodes=2)
    afc = out["placements"][0]
    face = 2 * 100 * 8.0
    assert cut_bytes(g, afc.node) == 4 * face
    assert out["metrics"][0]["bytes_inter_node"] == 4 * face
    # inside a node the group is a 4-cycle: at best 2 of its edges stay in a package
    levels = P.edge_layers(g, out["machine"], afc)[3]
    assert int((levels == 1).sum()) == 4   # 2 per node


def test_heavy_axis_is_never_cut(node8):
    """A 8x2x2 grid with heavy x faces on 4 nodes of 8: the optimum puts each
    x-row pair (2 rows of 8 along x... ) together: cut only light faces."""
    g = G.stencil([4, 2, 2], [1000, 10, 10])   # x faces 10*10, y/z faces 1000*10: x is light
    out = plan(g, node8, nodes=2)
    afc = out["placements"][0]
    u, v, w = g.edge_list()
    cut = afc.node[u] != afc.node[v]
    # the minimum bisection of 4x2x2 with light x faces cuts the 4 x edges in the middle
    assert cut.sum() == 4 and set(np.unique(v[cut] - u[cut]).tolist()) == {1}


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_every_placement_is_a_bijection(node8, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    nodes = int(-(-n // 8) + rng.integers(0, 2))
    # random connected graph: a path plus random extra edges with random weights
    rows = list(range(n - 1)) + rng.integers(0, n, 3 * n).tolist()
    cols = list(range(1, n)) + rng.integers(0, n, 3 * n).tolist()
    w = rng.integers(1, 10_000, len(rows)).astype(float)
    g = G.from_coo(n, rows, cols, w)
    out = plan(g, node8, nodes=nodes, seed=seed)
    for p in out["placements"]:
        assert_bijection(p, out["machine"], n)
    # the mapped grouping never crosses more than block does on a random graph by much
    m = {x["placement"]: x for x in out["metrics"]}
    assert m["afc"]["bytes_inter_node"] <= m["random"]["bytes_inter_node"]


def test_oversubscribed_placement_only_when_asked(node4):
    g = G.stencil([3, 3], [4, 4])
    with pytest.raises(Exception) as exc:
        plan(g, node4, nodes=2)
    assert "more than the 8 cores" in str(exc.value)
    out = plan(g, node4, nodes=2, oversubscribe=True)
    mach = out["machine"]
    assert mach.oversubscribed == 2 and mach.slots_per_node == 8
    for p in out["placements"]:
        assert_bijection(p, mach, 9)


def test_readers_agree(tmp_path):
    m = np.array([[0, 5, 0, 1], [3, 0, 2, 0], [0, 2, 0, 7], [1, 0, 7, 0]], dtype=float)
    expect = G.from_dense(m)
    (tmp_path / "m.csv").write_text("\n".join(",".join(str(int(x)) for x in r) for r in m))
    (tmp_path / "s.json").write_text(json.dumps({"comm_matrix": {"ranks": 4,
                                                                 "bytes": m.tolist()}}))
    rows, cols = np.nonzero(m)
    (tmp_path / "m.mtx").write_text("%%MatrixMarket matrix coordinate real general\n4 4 "
                                    f"{rows.size}\n" + "".join(
                                        f"{r + 1} {c + 1} {m[r, c]}\n" for r, c in zip(rows, cols)))
    sym = m + m.T
    lines = []
    for r in range(4):
        lines.append(" ".join(f"{c + 1} {int(sym[r, c])}" for c in range(4) if sym[r, c]))
    (tmp_path / "g.graph").write_text(f"4 {int((sym > 0).sum() // 2)} 001\n" + "\n".join(lines))
    # Matrix Market: dense (array, column-major), and a symmetric byte
    # matrix stored as one triangle, as coordinates and as an array
    (tmp_path / "a.mtx").write_text("%%MatrixMarket matrix array real general\n4 4\n" +
                                    "".join(f"{m[r, c]}\n" for c in range(4) for r in range(4)))
    half = sym / 2                     # the symmetric matrix with the same pair totals
    lo = [(r, c) for c in range(4) for r in range(c, 4)]
    (tmp_path / "sa.mtx").write_text("%%MatrixMarket matrix array real symmetric\n4 4\n" +
                                     "".join(f"{half[r, c]}\n" for r, c in lo))
    nz = [(r, c) for r, c in lo if half[r, c]]
    (tmp_path / "sc.mtx").write_text("%%MatrixMarket matrix coordinate real symmetric\n"
                                     f"4 4 {len(nz)}\n" +
                                     "".join(f"{r + 1} {c + 1} {half[r, c]}\n" for r, c in nz))
    # Scotch source graph, base 1, labels and edge loads (flags 110), each
    # arc listed from both ends
    vlines = [f"{r + 1} {int((sym[r] > 0).sum())} " +
              " ".join(f"{int(sym[r, c])} {c + 1}" for c in range(4) if sym[r, c])
              for r in range(4)]
    (tmp_path / "g.grf").write_text(f"0\n4 {int((sym > 0).sum())}\n1 110\n" +
                                    "\n".join(vlines) + "\n")
    for name in ("m.csv", "s.json", "m.mtx", "g.graph", "a.mtx", "sa.mtx", "sc.mtx", "g.grf"):
        g = G.read(str(tmp_path / name))
        assert g.n == 4
        assert np.array_equal(g.xadj, expect.xadj), name
        assert np.array_equal(g.adjncy, expect.adjncy), name
        assert np.allclose(g.adjwgt, expect.adjwgt), name
    # symmetrised: 0<->1 exchanged 5 + 3 bytes
    u, v, w = expect.edge_list()
    assert w[(u == 0) & (v == 1)][0] == 8


def test_permutation_reproduces_the_placement(node8):
    g = G.stencil([4, 4, 4], [8, 8, 8])
    out = plan(g, node8, nodes=8)
    afc = out["placements"][0]
    new = P.permutation(afc)
    assert sorted(new.tolist()) == list(range(64))
    blk = P.block(64, out["machine"])
    # new rank new[s] launched in block order sits where afc put subdomain s
    assert np.array_equal(blk.node[new], afc.node)


def test_mapping_beats_block_and_random_on_case2_shape(node8):
    """Seed 002 Case 2 at 512 ranks (8x8x8 subdomains of 1024x256x256):
    block lines each node's 8 ranks along x; the mapped grouping packs 2x2x2
    cubes and must send fewer bytes across nodes than block and random."""
    g = G.stencil([8, 8, 8], [1024, 256, 256])
    out = plan(g, node8, nodes=64)
    m = {x["placement"]: x for x in out["metrics"]}
    assert m["afc"]["bytes_inter_node"] < m["block"]["bytes_inter_node"]
    assert m["afc"]["bytes_inter_node"] < m["random"]["bytes_inter_node"]
    assert m["afc"]["hop_bytes"] < m["random"]["hop_bytes"]
    assert m["afc"]["predicted_time_s"] <= m["random"]["predicted_time_s"]


# --------------------------------------------------------------------------
# Command line and bad input


def test_cli_writes_rankfile_table_and_document(tmp_path):
    rf, tab, doc = tmp_path / "rf", tmp_path / "t.json", tmp_path / "d.json"
    r = run_tiers("map", "--stencil", "3d:2,2,2:10,10,10", "--machine", NODE4, "--nodes", "2",
                  "--rankfile", str(rf), "--table", str(tab), "--json", str(doc))
    assert r.returncode == 0, r.stderr
    lines = rf.read_text().splitlines()
    assert len(lines) == 8 and all(ln.startswith(f"rank {i}=node") for i, ln in
                                   enumerate(lines))
    table = json.loads(tab.read_text())["ranks"]
    assert len({(e["host"], e["core"]) for e in table}) == 8
    d = json.loads(doc.read_text())
    assert d["schema"] == "tiers.map/1"
    assert d["summary"]["comparison"][0]["placement"] == "afc"
    assert d["summary"]["comparison"][0]["bytes_inter_node"] == 4 * 2 * 100 * 8.0


@pytest.mark.parametrize("content,suffix,fragment", [
    ("0,1\n-1,0\n", ".csv", "negative weight"),
    ("0,x\n1,0\n", ".csv", "non-numeric"),
    ("0,1,2\n1,0\n", ".csv", "different lengths"),
    ('{"comm_matrix": {"ranks": 3, "bytes": [[0,1],[1,0]]}}', ".json", "says 3 ranks"),
    ('{"other": 1}', ".json", "no \"comm_matrix\""),
    ("0 1\n1 0\n", ".xyz", "unknown communication file format"),
    ("%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 2 1 0\n", ".mtx", "complex"),
    ("%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n2 1 1\n", ".mtx",
     "general or symmetric"),
    ("%%MatrixMarket matrix array real symmetric\n2 2\n1\n2\n", ".mtx", "lower triangle"),
    ("0,1,0,0\n1,0,0,0\n0,0,0,1\n0,0,1,0\n", ".csv", "disconnected"),
])
def test_bad_comm_input_is_one_line(tmp_path, content, suffix, fragment):
    f = tmp_path / f"comm{suffix}"
    f.write_text(content)
    r = run_tiers("map", "--comm", str(f), "--machine", NODE4)
    assert_one_line_error(r, fragment)


def test_too_many_ranks_is_one_line():
    r = run_tiers("map", "--stencil", "3d:3,3,1:4,4,4", "--machine", NODE4, "--nodes", "2")
    assert_one_line_error(r, "--oversubscribe")


def test_bad_stencil_and_missing_file_are_one_line(tmp_path):
    assert_one_line_error(run_tiers("map", "--stencil", "3d:2,2:4,4,4", "--machine", NODE4),
                          "bad stencil")
    assert_one_line_error(run_tiers("map", "--comm", str(tmp_path / "nope.csv"),
                                    "--machine", NODE4), "no such file")
    assert_one_line_error(run_tiers("map", "--machine", NODE4), "either --comm")


def test_disconnected_allowed_when_asked(tmp_path):
    f = tmp_path / "two.csv"
    f.write_text("0,1,0,0\n1,0,0,0\n0,0,0,1\n0,0,1,0\n")
    r = run_tiers("map", "--comm", str(f), "--machine", NODE4, "--allow-disconnected",
                  "--table", str(tmp_path / "t.json"))
    assert r.returncode == 0, r.stderr
    ranks = json.loads((tmp_path / "t.json").read_text())["ranks"]
    assert len({e["core"] for e in ranks}) == 4


# --------------------------------------------------------------------------
# A real mpirun with a generated rankfile


def _whoami():
    return str(native.tool_path("tiers-whoami"))


@pytest.mark.parametrize("ranks", [2, 4])
def test_rankfile_binding_read_back(tmp_path, ranks):
    """Map a ring of ``ranks`` onto this machine (oversubscribed when it has
    fewer cores), write the rankfile, run tiers-whoami with it, and check
    every rank is bound to the PU the table says."""
    try:
        lau = launch.detect("openmpi")
    except Exception as exc:   # pragma: no cover - depends on the machine
        pytest.skip(f"no Open MPI: {exc}")
    doc = topo.measure("this")
    n = ranks
    g = G.from_coo(n, list(range(n)), [(i + 1) % n for i in range(n)], [1000.0] * n)
    out = plan(g, doc, nodes=1, oversubscribe=True)
    afc, mach = out["placements"][0], out["machine"]
    # a placement that differs from the launcher's default: reverse the slots
    rev = P.Placement("reversed", afc.node, (mach.slots_per_node - 1 - afc.slot) %
                      mach.slots_per_node)
    for p in (afc, rev):
        rf = tmp_path / f"{p.name}.rankfile"
        writers.write_rankfile(str(rf), p, mach)
        report = launch.launch_json([_whoami()], n, launcher=lau, rankfile=str(rf), timeout=120)
        table = writers.table(p, mach)
        got = {e["rank"]: e["cpuset"] for e in report["ranks"]}
        assert got == {e["rank"]: str(e["pu"]) for e in table}, (p.name, got, table)


def _whoami_report(stdout: str) -> dict:
    """The tiers.whoami/1 document in a command's output (after the map table)."""
    line = next(ln for ln in stdout.splitlines() if ln.startswith('{"schema":"tiers.whoami/1"'))
    return json.loads(line)


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("form", ["program", "launcher-line"])
def test_map_launch_applies_the_placement(tmp_path, ranks, form):
    """tiers map --launch, with the program alone (tiers builds the launch)
    or with the user's mpirun line (tiers adds the rankfile): every rank
    runs bound to the PU of the written table."""
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun")
    tab = tmp_path / "t.json"
    cmd = [_whoami()] if form == "program" else \
        ["mpirun", "-n", str(ranks), "--oversubscribe", _whoami()]
    r = run_tiers("map", "--stencil", f"2d:{ranks},1:20,20", "--oversubscribe", "--table",
                  str(tab), "--launch", "--", *cmd, timeout=180)
    assert r.returncode == 0, r.stderr
    report = _whoami_report(r.stdout)
    table = json.loads(tab.read_text())["ranks"]
    assert len(report["ranks"]) == ranks
    assert {e["rank"]: e["cpuset"] for e in report["ranks"]} == \
        {e["rank"]: str(e["pu"]) for e in table}


def test_map_launch_bad_use_is_one_line():
    assert_one_line_error(run_tiers("map", "--stencil", "2d:2,1:4,4", "--launch"),
                          "--launch needs a command")
    assert_one_line_error(run_tiers("map", "--stencil", "2d:2,1:4,4", "--", "true"),
                          "goes with --launch")
    assert_one_line_error(run_tiers("map", "--stencil", "2d:2,1:4,4", "--launcher", "mpich"),
                          "--launcher goes with --launch")
    assert_one_line_error(run_tiers("map", "--stencil", "2d:2,1:4,4", "--oversubscribe",
                                    "--launch", "--", "mpirun", "-n", "3", "true"),
                          "asks for 3 ranks")
    assert_one_line_error(run_tiers("map", "--stencil", "2d:2,1:4,4", "--vcluster", "--nodes",
                                    "2", "--launch", "--", "true"),
                          "do not give --nodes or --hostfile")
    assert_one_line_error(run_tiers("map", "--stencil", "2d:2,1:4,4", "--vcluster"),
                          "--vcluster goes with --launch")


def _crossed():
    """4 ranks on 2 nodes x 2 slots whose local orders differ between the
    hosts: node 0 runs slot 1 then slot 0, node 1 slot 0 then slot 1."""
    return P.Placement("crossed", np.array([0, 1, 0, 1]), np.array([1, 0, 0, 1]))


def test_per_host_lists_use_the_launcher_list_or_tiers_bind(tmp_path, node4):
    """Hydra and Slurm get one local-rank list when every host agrees, and
    start each rank through tiers-bind with the launcher's binding off when
    the hosts need different lists."""
    from tiers.map import apply
    g = G.from_coo(4, [0, 1, 2], [1, 2, 3], [1.0, 1.0, 1.0])
    mach = plan(g, node4, nodes=2)["machine"]
    same = P.Placement("same", np.array([0, 0, 1, 1]), np.array([1, 0, 1, 0]))
    crossed = _crossed()
    for kind in ("mpich", "slurm"):
        how = apply.plan_launch(kind, same, mach, tmp_path)
        pu = [int(mach.slot_pu[1]), int(mach.slot_pu[0])]
        assert how["wrapper"] == []
        # local rank i on any host reads entry i
        assert [c[0] for c in how["options"]["cpu_map"]][:2] == pu
        how = apply.plan_launch(kind, crossed, mach, tmp_path)
        assert how["options"]["bind_to"] == "none" and "cpu_map" not in how["options"]
        assert how["wrapper"][1:] == ["--pus", writers.pu_list(crossed, mach), "--"]
        assert Path(how["wrapper"][0]).name == "tiers-bind"
    hosts = (tmp_path / "placement.hosts").read_text().split()
    assert hosts == [mach.hosts[i] for i in crossed.node]
    assert apply.plan_launch("slurm", crossed, mach, tmp_path)["env"]["SLURM_HOSTFILE"]
    cmds = writers.commands({"hydra": "h", "slurm": "s"}, crossed, mach, 4)
    assert "-bind-to none tiers-bind --pus" in cmds["mpich"]
    assert "--cpu-bind=none tiers-bind --pus" in cmds["slurm"]
    cmds = writers.commands({"hydra": "h", "slurm": "s"}, same, mach, 4)
    assert "tiers-bind" not in cmds["mpich"] + cmds["slurm"]


@pytest.mark.parametrize("ranks", [2, 4])
def test_tiers_bind_under_mpirun(ranks):
    """tiers-bind under a real mpirun with the launcher's binding off: each
    rank runs on the PU its entry names (reversed order here)."""
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun")
    cores = launch.local_slots()
    pus = [(ranks - 1 - r) % cores for r in range(ranks)]
    bind = [str(native.tool_path("tiers-bind")), "--pus", ",".join(map(str, pus)), "--"]
    report = launch.launch_json(bind + [_whoami()], ranks, launcher="openmpi", bind_to="none",
                                oversubscribe=True, timeout=120)
    assert {e["rank"]: e["cpuset"] for e in report["ranks"]} == \
        {r: str(pus[r]) for r in range(ranks)}


def test_tiers_bind_bad_input_is_one_line():
    tool = str(native.tool_path("tiers-bind"))
    env = dict(os.environ, PMI_RANK="2")
    env.pop("OMPI_COMM_WORLD_RANK", None)
    for args, fragment in ((["--pus", "0,1", "--", "true"], "none for rank 2"),
                           (["--pus", "0,x,1", "--", "true"], "'x' is not a PU index"),
                           (["--pus", "0,1,0", "--", "/nonexistent/app"], "cannot run"),
                           (["--", "true"], "--pus LIST is required")):
        r = subprocess.run([tool, *args], env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (args, r)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("tiers-bind: error: "), r.stderr
        assert fragment in r.stderr, r.stderr


# --------------------------------------------------------------------------
# The time model and measured links (--links)


def test_predicted_time_is_the_critical_resource(node4):
    """A chain on two nodes of 4 cores whose two heavy pairs (2 MB each
    way) both cross: each rank sends at most one heavy message, the link of
    a node carries two, so the link is the critical resource."""
    g = G.from_coo(8, list(range(7)), list(range(1, 8)), [4e6, 2, 2, 4e6, 2, 2, 2],
                   symmetric=True)   # undirected: half each way
    out = plan(g, node4, nodes=2, layer_costs="node=10/1000")
    mach = out["machine"]
    p = P.Placement("split", np.array([0, 1, 0, 0, 1, 1, 1, 0], np.int32),
                    np.array([0, 0, 1, 2, 1, 2, 3, 3], np.int32))
    m = P.metrics(g, mach, p)
    # edges 0-1 and 3-4 cross (2 MB one way each on node 0's and node 1's
    # link); the 2-byte edges 1-2 and 6-7 cross too: node 0's link time is
    # (2e6 + 2e6 + 1 + 1) / 1e9
    assert m["predicted_link_s"] == pytest.approx((4e6 + 2) / 1e9)
    assert m["critical"] == "link"
    assert m["predicted_time_s"] == m["predicted_link_s"]
    # rank 4: remote neighbour 3 (2 MB through the link, 10 us) and local
    # neighbour 5 on the other package (1 byte at the default machine layer,
    # 33 us); the worst rank of all
    assert m["predicted_rank_s"] == pytest.approx(10e-6 + 2e6 / 1e9 + 33e-6 + 1 / 1420e6)


def _probe_doc(hosts, lat_us, bw_mbps, with_nodes=True, ranks_per_node=1):
    k = len(hosts)
    doc = {"schema": "tiers.probe.net/1", "summary": {"allpairs": {}}, "samples": {}}
    if with_nodes:
        doc["summary"]["allpairs"]["node_matrices"] = {
            "ranks": k, "hosts": hosts, "latency_us": lat_us, "bandwidth_mbps": bw_mbps}
    else:
        n = k * ranks_per_node
        node = [r // ranks_per_node for r in range(n)]
        lat = [[None if i == j else lat_us[node[i]][node[j]] if node[i] != node[j] else 1.0
                for j in range(n)] for i in range(n)]
        bw = [[None if i == j else bw_mbps[node[i]][node[j]] if node[i] != node[j] else 9e3
               for j in range(n)] for i in range(n)]
        doc["summary"]["allpairs"]["matrices"] = {"ranks": n, "latency_us": lat,
                                                  "bandwidth_mbps": bw}
        doc["summary"]["allpairs"]["node_matrices"] = None
        doc["samples"]["placement"] = [{"rank": r, "host": hosts[node[r]], "node": node[r]}
                                       for r in range(n)]
    return doc


@pytest.mark.parametrize("with_nodes", [True, False])
def test_links_put_heavy_groups_on_the_cheap_pair(tmp_path, node4, with_nodes):
    """4 nodes of 4 cores (a synthetic probe-net document); a-c and b-d are
    joined by links 20 times faster than the other pairs.  A 4x2x2 grid
    with heavy x rows (one per node) and y edges 10 times the z edges: the
    row pairs joined by y edges must sit on the fast pairs, so only the
    light z bytes use slow links (block order would put y pairs on a-b)."""
    hosts = ["a", "b", "c", "d"]
    bw = [[None if i == j else 100.0 for j in range(4)] for i in range(4)]
    bw[0][2] = bw[2][0] = 2000.0
    bw[1][3] = bw[3][1] = 2000.0
    lat = [[None if i == j else 5.0 for j in range(4)] for i in range(4)]
    f = tmp_path / "net.json"
    f.write_text(json.dumps(_probe_doc(hosts, lat, bw, with_nodes, ranks_per_node=2)))
    g = G.stencil([4, 2, 2], [1, 1, 1])
    u, v, w = g.edge_list()
    d = v - u                                   # 1: x, 4: y, 8: z
    g = G.from_coo(16, u, v, np.where(d == 1, 1e6, np.where(d == 4, 1e5, 1e4)),
                   symmetric=True)
    out = plan(g, node4, links=str(f))
    mach, afc = out["machine"], out["placements"][0]
    assert mach.hosts == hosts
    # every x row on one node
    for row in range(4):
        assert len(set(afc.node[row * 4:(row + 1) * 4].tolist())) == 1
    fast = {(0, 2), (2, 0), (1, 3), (3, 1)}
    cross = afc.node[u] != afc.node[v]
    heavy = cross & (d == 4)
    assert heavy.sum() == 8
    assert all((int(afc.node[a]), int(afc.node[b])) in fast for a, b in zip(u[heavy], v[heavy]))
    m = {x["placement"]: x for x in out["metrics"]}
    # the measured bandwidths enter the model: node link time of afc is
    # 4 y edges (1e5 B, 5e4 one way) at 2000 MB/s + 4 z edges (5e3) at 100 MB/s
    assert m["afc"]["predicted_link_s"] == pytest.approx(4 * 5e4 / 2e9 + 4 * 5e3 / 1e8)
    assert m["afc"]["predicted_time_s"] < m["random"]["predicted_time_s"]
    assert m["afc"]["predicted_time_s"] < m["block"]["predicted_time_s"]


def test_uniform_links_keep_the_plain_grouping(tmp_path, node4):
    hosts = ["h0", "h1"]
    lat = [[None, 3.0], [3.0, None]]
    bw = [[None, 500.0], [500.0, None]]
    f = tmp_path / "u.json"
    f.write_text(json.dumps(_probe_doc(hosts, lat, bw)))
    g = G.stencil([2, 2, 2], [10, 10, 10])
    out = plan(g, node4, links=str(f))
    assert out["machine"].hosts == hosts
    assert cut_bytes(g, out["placements"][0].node) == 4 * 2 * 100 * 8.0
    m = out["metrics"][0]
    # 4 cut faces of 800 B one way each leave every node at 500 MB/s
    assert m["predicted_link_s"] == pytest.approx(4 * 800 / 500e6)


@pytest.mark.parametrize("doc,fragment", [
    ({"schema": "tiers.topo/1"}, "not a tiers probe net document"),
    ({"schema": "tiers.probe.net/1", "summary": {}}, "no all-pairs"),
    (_probe_doc(["a", "b"], [[None, 1], [1, None]], [[None, None], [None, None]]),
     "no positive bandwidth"),
    (_probe_doc(["a", "b", "c"], [[None, 1, 1], [1, None, 1], [1, 1, None]],
                [[None, 9, 9], [9, None, 9], [9, 9, None]]), "cover 3 node(s)"),
])
def test_bad_links_are_one_line(tmp_path, doc, fragment):
    f = tmp_path / "l.json"
    f.write_text(json.dumps(doc))
    r = run_tiers("map", "--stencil", "3d:2,2,2:4,4,4", "--machine", NODE4, "--nodes", "2",
                  "--links", str(f))
    assert_one_line_error(r, fragment)


def test_mapping_beats_block_in_predicted_time_at_512(node8):
    """Case 2 at 512 ranks: the predicted time separates the placements."""
    g = G.stencil([8, 8, 8], [1024, 256, 256])
    out = plan(g, node8, nodes=64)
    m = {x["placement"]: x for x in out["metrics"]}
    assert m["afc"]["critical"] == "link"
    assert m["block"]["predicted_time_s"] > 1.3 * m["afc"]["predicted_time_s"]
    assert m["random"]["predicted_time_s"] > 1.3 * m["afc"]["predicted_time_s"]


# --------------------------------------------------------------------------
# Metrics recomputed by hand, the never-worse rule, the geometric candidate


def test_metrics_by_hand_on_a_directed_graph(node4):
    """Six ranks on three nodes of 2 packages x 2 cores, with traffic that is
    different in each direction: every metric recomputed here from the
    directed entries and the placement."""
    sends = {(0, 2): 100.0, (1, 4): 30.0, (3, 0): 5.0, (5, 2): 70.0,   # across nodes
             (0, 1): 1000.0, (2, 3): 8.0}                              # inside nodes
    rows, cols = zip(*sends)
    g = G.from_coo(6, rows, cols, list(sends.values()))
    mach = M.build(node4, nodes=3, ranks=6,
                   layer_costs=M.parse_layer_costs("node=10/1000,package=2/4000,machine=3/2000"))
    node = np.array([0, 0, 1, 1, 2, 2], np.int32)
    slot = np.array([0, 1, 0, 2, 1, 3], np.int32)   # 2-3 on two packages, 0-1 on one
    m = P.metrics(g, mach, P.Placement("hand", node, slot))

    def layer(a, b):
        if node[a] != node[b]:
            return "node"
        return "package" if slot[a] // 2 == slot[b] // 2 else "machine"

    hop = {"node": 6, "machine": 4, "package": 2}    # links up and down the tree
    sent = [0.0] * 3
    recv = [0.0] * 3
    per_layer: dict = {}
    t_rank = [0.0] * 6
    for (a, b), x in sends.items():
        per_layer[layer(a, b)] = per_layer.get(layer(a, b), 0.0) + x
        lat, bw = mach.layer_costs[layer(a, b)]
        t_rank[a] += lat + x / bw
        if node[a] != node[b]:
            sent[node[a]] += x
            recv[node[b]] += x
    t_link = [s / 1000e6 for s in sent]
    assert m["bytes_inter_node"] == 205.0 == per_layer["node"]
    assert m["max_node_sent_bytes"] == max(sent) == 130.0
    assert m["max_node_sent_node"] == 0
    assert m["max_node_received_bytes"] == max(recv) == 170.0
    assert m["max_node_received_node"] == 1
    assert m["max_node_out_bytes"] == m["max_node_sent_bytes"]   # deprecated name
    assert m["bytes_per_layer"] == per_layer
    assert m["hop_weights"]["node"] == 6 and m["hop_weights"]["machine"] == 4
    assert m["hop_weights"]["package"] == 2
    assert m["hop_bytes"] == sum(x * hop[layer(a, b)] for (a, b), x in sends.items())
    assert m["predicted_rank_s"] == pytest.approx(max(t_rank))
    assert m["predicted_link_s"] == pytest.approx(max(t_link))
    assert m["predicted_time_s"] == pytest.approx(max(max(t_rank), max(t_link)))
    assert m["critical"] == "rank"
    assert m["critical_detail"].startswith(f"rank {int(np.argmax(t_rank))}:")


def _beats(a, b):
    """Lower predicted time by more than 1 % (closer is a tie), then lower
    max node sent, then lower inter-node bytes (equal within 1e-9)."""
    for key, tie in (("predicted_time_s", 0.01), ("max_node_sent_bytes", 1e-9),
                     ("bytes_inter_node", 1e-9)):
        if abs(a[key] - b[key]) > tie * max(abs(a[key]), abs(b[key])):
            return a[key] < b[key]
    return False


def _key(m):
    return (m["predicted_time_s"], m["max_node_sent_bytes"], m["bytes_inter_node"])


def _run_map(tmp_path, name, stencil, machine, nodes, *extra):
    table = tmp_path / f"{name}.table.json"
    run = run_tiers("map", "--stencil", stencil, "--machine", machine, "--nodes", str(nodes),
                    "--table", str(table), "--json", str(tmp_path / f"{name}.json"), *extra)
    assert run.returncode == 0, run.stderr
    doc = json.loads((tmp_path / f"{name}.json").read_text())
    rows = json.loads(table.read_text())
    rows = rows["ranks"] if isinstance(rows, dict) else rows
    return run, doc, rows


NODE16 = "synthetic:pack:2 core:8 pu:1"


@pytest.mark.parametrize("stencil,machine,nodes", [
    ("3d:5,5,5:16,16,16", NODE16, 8),             # the 3d:5,5,5 case on 8 nodes
    ("3d:4,4,4:16,16,64", NODE8, 8),              # anisotropic subdomains
    ("3d:8,8,8:32,32,32", NODE16, 32),
])
def test_the_written_placement_is_the_models_best(tmp_path, stencil, machine, nodes, node8):
    run, doc, rows = _run_map(tmp_path, "best", stencil, machine, nodes)
    s = doc["summary"]
    comp = {c["placement"]: c for c in s["comparison"]}
    chosen = s["chosen"]["placement"]
    # no candidate (random is only a reference) beats the written one
    assert chosen != "random"
    for name, m in comp.items():
        if name != "random":
            assert not _beats(m, comp[chosen]), (name, chosen)
    # the written table is that placement: its metrics recomputed from the
    # file are the chosen row's
    g = G.stencil(*G.parse_stencil(stencil))
    mach = M.build(topo.measure(machine), nodes=nodes, ranks=g.n)
    p = P.Placement("written", np.array([r["node"] for r in rows], np.int32),
                    np.array([r["slot"] for r in rows], np.int32))
    m = P.metrics(g, mach, p)
    for key in ("bytes_inter_node", "max_node_sent_bytes", "predicted_time_s", "hop_bytes"):
        assert m[key] == pytest.approx(comp[chosen][key], rel=1e-12)
    if chosen != "afc":
        line = [ln for ln in run.stdout.splitlines() if ln.startswith(f"chose {chosen} over afc")]
        assert len(line) == 1, run.stdout
    else:
        assert "placement written: afc" in run.stdout


def test_placement_forces_one_and_says_when_it_is_slower(tmp_path):
    stencil = "3d:5,5,5:16,16,16"
    _, doc, _ = _run_map(tmp_path, "free", stencil, NODE16, 8)
    comp = {c["placement"]: c for c in doc["summary"]["comparison"]}
    chosen = doc["summary"]["chosen"]["placement"]
    slower = max((n for n in comp if n != "random"), key=lambda n: _key(comp[n]))
    assert _key(comp[slower])[0] > _key(comp[chosen])[0]
    run, forced, rows = _run_map(tmp_path, "forced", stencil, NODE16, 8, "--placement", slower)
    assert forced["summary"]["chosen"]["placement"] == slower
    want = doc["samples"]["placements"][slower]
    assert [r["node"] for r in rows] == want["node"]
    assert [r["slot"] for r in rows] == want["slot"]
    notes = [ln for ln in run.stdout.splitlines() if "forced by --placement" in ln]
    assert len(notes) == 1 and f"slower than {chosen}" in notes[0], run.stdout
    # forcing the best one says nothing more
    run, _, _ = _run_map(tmp_path, "same", stencil, NODE16, 8, "--placement", chosen)
    assert "forced by --placement" not in run.stdout
    bad = run_tiers("map", "--stencil", stencil, "--machine", NODE16, "--nodes", "8",
                    "--placement", "best-guess")
    assert_one_line_error(bad, "--placement")


def test_geometric_tiles_the_grid_into_4x2x2_boxes():
    """8x8x8 subdomains on 32 nodes of 16 slots: 4x2x2 boxes cut one plane
    across x and three across y and z, each plane 64 face pairs."""
    g = G.stencil([8, 8, 8], [8, 8, 8])
    mach = M.build(topo.measure(NODE16), nodes=32, ranks=g.n)
    geo = P.geometric(g, mach)
    geo.check(mach)
    pair = 2 * 8 * 8 * 8.0                          # one face, both directions
    assert cut_bytes(g, geo.node) == (1 + 3 + 3) * 64 * pair
    m = P.metrics(g, mach, geo)
    assert m["bytes_inter_node"] == (1 + 3 + 3) * 64 * pair
    # every node holds one box of 16: a 4 x 2 x 2 one in some orientation
    # (surface 40 faces, 20 pairs sent each way at most)
    for i in range(32):
        c = g.coords[geo.node == i]
        ext = sorted(int(c[:, a].max() - c[:, a].min()) + 1 for a in range(3))
        assert ext == [2, 2, 4] and len(c) == 16
        # its two packages are 2 x 2 x 2 halves: 4 face pairs between them
        pk = geo.slot[geo.node == i] // 8
        for half in (0, 1):
            h = c[pk == half]
            assert sorted(int(h[:, a].max() - h[:, a].min()) + 1 for a in range(3)) == [2, 2, 2]
    assert m["bytes_per_layer"]["machine"] == 32 * 4 * pair
    # the busiest node sends half of its box surface that is not on the
    # grid's boundary: at most 2*(2*2) + 2*(4*2) + 2*(4*2) = 40 faces x half a pair
    assert m["max_node_sent_bytes"] <= 40 * pair / 2
    # no other candidate moves fewer inter-node bytes, and it is what
    # tiers writes here: the model's best
    out = plan(g, topo.measure(NODE16), nodes=32)
    for other in out["metrics"]:
        assert other["bytes_inter_node"] >= m["bytes_inter_node"]
    # what tiers writes moves no more than the tiling (Scotch's mapping onto
    # the whole machine finds the same boxes here, and is listed first)
    chosen = next(x for x in out["metrics"] if x["placement"] == out["chosen"].name)
    assert chosen["bytes_inter_node"] == m["bytes_inter_node"]
    assert chosen["max_node_sent_bytes"] <= m["max_node_sent_bytes"]


def test_geometric_bisects_when_no_box_tiles_the_grid(node8):
    """5x5x5 on 8-slot nodes: no box of 8 tiles it; bisection still gives
    every rank a distinct slot within capacity and cuts fewer bytes than
    block."""
    g = G.stencil([5, 5, 5], [8, 8, 8])
    mach = M.build(node8, nodes=16, ranks=g.n)
    geo = P.geometric(g, mach)
    geo.check(mach)
    assert geo.note.startswith("recursive coordinate bisection")
    assert cut_bytes(g, geo.node) < cut_bytes(g, P.block(g.n, mach).node)
    assert P.geometric(G.from_coo(2, [0], [1], [5.0]), mach) is None   # no coordinates


# --------------------------------------------------------------------------
# --comm TRACE_DIR: a traced jacobi3d run


@pytest.mark.parametrize("ranks,grid", [(2, "2,1,1"), (4, "2,2,1")])
def test_comm_accepts_a_trace_folder(tmp_path, ranks, grid):
    try:
        launch.detect("openmpi")
    except Exception as exc:   # pragma: no cover - depends on the machine
        pytest.skip(f"no Open MPI: {exc}")
    app = [str(native.tool_path("tiers-jacobi3d")), "--size", "48,24,24", "--grid", grid,
           "--iters", "4", "--threads", "1", "--pin", "none", "--no-verify"]
    cmd = launch.build_command("openmpi", app, ranks, oversubscribe=True, bind_to="none",
                               mca={"mpi_yield_when_idle": "1"})
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--budget", "1M", "--policy", "sync", "--out", str(folder), "--",
                    *cmd, timeout=180)
    assert run.returncode == 0, run.stderr
    cm = json.loads((folder / "summary.json").read_text())["summary"]["comm_matrix"]
    b, msgs = np.array(cm["bytes"], float), np.array(cm["messages"])
    counts = set(msgs[b > 0].tolist())
    assert len(counts) == 1          # a halo exchange: the same count on every pair
    k = counts.pop()
    out = tmp_path / "map.json"
    run = run_tiers("map", "--comm", str(folder), "--machine", "synthetic:pack:1 core:1 pu:1",
                    "--nodes", str(ranks), "--json", str(out))
    assert run.returncode == 0, run.stderr
    s = json.loads(out.read_text())["summary"]
    assert s["ranks"] == ranks
    assert s["bytes_total"] == pytest.approx(b.sum() / k)
    assert f"{k} messages each way" in s["volume"] and "one exchange" in s["volume"]
    assert sum(1 for ln in run.stdout.splitlines() if ln.startswith("volumes: ")) == 1
    # every rank alone on its node: all bytes cross, each node sends its row
    m = {c["placement"]: c for c in s["comparison"]}["block"]
    assert m["bytes_inter_node"] == pytest.approx(b.sum() / k)
    assert m["max_node_sent_bytes"] == pytest.approx(b.sum(axis=1).max() / k)
    assert m["max_node_received_bytes"] == pytest.approx(b.sum(axis=0).max() / k)
    # the summary file alone gives the totals of the run
    alone = run_tiers("map", "--comm", str(folder / "summary.json"), "--machine",
                      "synthetic:pack:1 core:1 pu:1", "--nodes", str(ranks), "--json", "-")
    assert alone.returncode == 0, alone.stderr
    assert alone.json()["summary"]["bytes_total"] == pytest.approx(b.sum())


def test_comm_folder_without_a_trace_is_one_line(tmp_path):
    run = run_tiers("map", "--comm", str(tmp_path), "--machine", NODE8, "--nodes", "2")
    assert_one_line_error(run, "without summary.json")


def test_trace_folder_with_uneven_message_counts_gives_totals(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    summary = {"schema": "tiers.trace/1", "summary": {"comm_matrix": {
        "ranks": 3, "bytes": [[0, 60, 0], [30, 0, 90], [0, 90, 0]],
        "messages": [[0, 2, 0], [1, 0, 3], [0, 3, 0]]}}}
    (folder / "summary.json").write_text(json.dumps(summary))
    g = G.read(str(folder))
    assert g.total_bytes() == 270.0 and "whole traced run" in g.volume_note
    summary["summary"]["comm_matrix"]["messages"] = [[0, 3, 0], [3, 0, 3], [0, 3, 0]]
    (folder / "summary.json").write_text(json.dumps(summary))
    g = G.read(str(folder))
    assert g.total_bytes() == 90.0 and "3 messages each way" in g.volume_note
    # the directions survive: rank 1 sends 30 / 3 to rank 0, 90 / 3 to rank 2
    src, dst, sent = g.sent()
    assert {(int(a), int(b)): float(x) for a, b, x in zip(src, dst, sent)} == {
        (0, 1): 20.0, (1, 0): 10.0, (1, 2): 30.0, (2, 1): 30.0}


# --------------------------------------------------------------------------
# The refinement pass (node-level swaps)


def test_refinement_repairs_a_spoiled_block_placement(node8):
    """A chain of 16 ranks on two 8-slot nodes: block cuts one edge; with
    ranks 3 and 12 traded the cut is five edges, and the swaps bring it
    back to one."""
    from tiers.map import refine

    g = G.from_coo(16, list(range(15)), list(range(1, 16)), [1000.0] * 15, symmetric=True)
    mach = M.build(node8, nodes=2, ranks=16)
    p = P.block(16, mach)
    node, slot = p.node.copy(), p.slot.copy()
    node[[3, 12]], slot[[3, 12]] = node[[12, 3]], slot[[12, 3]]
    spoiled = P.Placement("spoiled", node, slot)
    assert cut_bytes(g, node) == 5 * 1000.0
    r = refine.swaps(g, mach, spoiled)
    r.check(mach)
    assert cut_bytes(g, r.node) == 1000.0
    m = P.metrics(g, mach, r)
    assert m["max_node_sent_bytes"] == 500.0      # half of one edge each way
    assert r.note.startswith("spoiled with 1 node-level swap")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_refinement_never_raises_the_busiest_node_or_the_cut(node8, seed):
    from tiers.map import refine

    g = G.stencil([4, 4, 4], [16, 8, 32])
    mach = M.build(node8, nodes=8, ranks=g.n)
    p = P.random(g.n, mach, seed)
    before = P.metrics(g, mach, p)
    r = refine.swaps(g, mach, p)
    r.check(mach)
    after = P.metrics(g, mach, r)
    assert after["max_node_sent_bytes"] <= before["max_node_sent_bytes"]
    assert after["bytes_inter_node"] < before["bytes_inter_node"]


@pytest.mark.parametrize("stencil,nodes", [("3d:5,5,5:16,16,16", 8), ("3d:4,4,2:8,64,8", 2)])
def test_plan_keeps_a_refined_placement_only_when_the_model_agrees(stencil, nodes):
    g = G.stencil(*G.parse_stencil(stencil))
    out = plan(g, topo.measure(NODE16), nodes=nodes)
    mets = {m["placement"]: m for m in out["metrics"]}
    others = [m for name, m in mets.items() if name not in ("random", "refined")]
    fastest = min(m["predicted_time_s"] for m in others)
    if "refined" in mets:
        assert mets["refined"]["predicted_time_s"] <= fastest * (1 + 1e-12)
    # whatever is written, no candidate beats it
    chosen = mets[out["chosen"].name]
    assert not any(_beats(m, chosen) for name, m in mets.items() if name != "random")


def test_placement_that_the_input_cannot_have_is_one_line(tmp_path):
    csv = tmp_path / "ring.csv"
    csv.write_text("0,5,5\n5,0,5\n5,5,0\n")
    run = run_tiers("map", "--comm", str(csv), "--machine", NODE8, "--nodes", "1",
                    "--placement", "geometric")
    assert_one_line_error(run, "geometric is not a candidate for this input")
