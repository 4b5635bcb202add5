"""``tiers vcluster``: real network namespaces, real tc shaping, real mpirun.

Needs root, ``ip``, ``tc``, ``unshare`` and Open MPI; skipped with the reason
otherwise (CI runs as root).  Every test that builds a cluster removes it in
a finalizer, also when it fails.  Tests refuse to run while a virtual cluster
that they did not build is up, so they never destroy a user's cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_tiers
from tiers import vcluster

REASON = vcluster.unavailable_reason()
if REASON is None and shutil.which("mpirun") is None:
    REASON = "Open MPI's mpirun is not on PATH"
if REASON is None and (vcluster.state_path().exists() or vcluster.leftovers()):
    REASON = "a virtual cluster is up already; the tests leave it alone"

pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))

RATE = "300mbit"                      # low enough that this machine reaches it
RATE_MBPS = 300e6 / 8 / 1e6           # MB/s (10^6 bytes) the tbf qdisc lets through
NODES, SLOTS = 3, 2


def _netns_inode(name: str) -> int:
    return os.stat(f"/run/netns/{name}").st_ino


def _root_netns() -> str:
    return os.readlink("/proc/self/ns/net")


def _hosts_lines() -> list[str]:
    return [ln for ln in Path("/etc/hosts").read_text().splitlines() if vcluster.HOSTS_MARK in ln]


def _down():
    run = run_tiers("vcluster", "down", timeout=120)
    assert run.returncode == 0, run.stderr


@pytest.fixture(scope="class")
def cluster():
    """3 nodes x 2 slots at 300 Mbit, removed at the end of the class."""
    try:
        run = run_tiers("vcluster", "up", "--nodes", str(NODES), "--slots", str(SLOTS),
                        "--link", RATE, timeout=120)
        assert run.returncode == 0, run.stderr
        yield json.loads(vcluster.state_path().read_text())
    finally:
        _down()


@pytest.fixture
def clean():
    """Leaves no cluster behind, whatever the test did."""
    yield
    _down()
    assert vcluster.leftovers() == []


def _whoami(native_bin, *args):
    run = run_tiers("vcluster", "mpirun", *args, "--timeout", "120", "--",
                    native_bin("tiers-whoami"), timeout=180)
    assert run.returncode == 0, run.stderr
    assert "setpgid" not in run.stderr
    return run.json()["ranks"]


class TestCluster:
    def test_ranks_fill_the_hostfile_nodes_in_their_own_namespaces(self, cluster, native_bin):
        ranks = _whoami(native_bin, "-n", str(NODES * SLOTS))
        hosts = [r["host"] for r in ranks]
        assert hosts == [f"tiers-n{i // SLOTS}" for i in range(NODES * SLOTS)]
        by_node: dict[str, set[str]] = {}
        for r in ranks:
            by_node.setdefault(r["host"], set()).add(r["netns"])
        # one network namespace per node, shared by the node's ranks...
        assert all(len(spaces) == 1 for spaces in by_node.values()), by_node
        spaces = [next(iter(s)) for s in by_node.values()]
        # ...different between nodes, and none is this machine's own
        assert len(set(spaces)) == NODES
        assert _root_netns() not in spaces
        # and each is the namespace 'up' created under the node's name
        for host, ns in zip(by_node, spaces):
            assert ns == f"net:[{_netns_inode(host)}]"

    def test_map_by_node_and_fewer_ranks(self, cluster, native_bin):
        ranks = _whoami(native_bin, "-n", "4", "--map-by", "node")
        assert [r["host"] for r in ranks] == ["tiers-n0", "tiers-n1", "tiers-n2", "tiers-n0"]

    def test_map_launch_places_ranks_on_the_mapped_nodes_and_cores(self, cluster, native_bin,
                                                                     tmp_path):
        """tiers map --vcluster --launch: a 2x3 stencil whose heavy axis
        (y, 100x the x traffic) runs across x-fastest numbering, so the
        mapped groups differ from the block default; every rank runs on
        the node and the PU of the written table."""
        tab = tmp_path / "t.json"
        run = run_tiers("map", "--stencil", "2d:3,2:400,4", "--vcluster", "--table", str(tab),
                        "--launch", "--", native_bin("tiers-whoami"), timeout=180)
        assert run.returncode == 0, run.stderr
        line = next(ln for ln in run.stdout.splitlines() if '"tiers.whoami/1"' in ln)
        ranks = {r["rank"]: r for r in json.loads(line)["ranks"]}
        table = json.loads(tab.read_text())["ranks"]
        assert len(ranks) == len(table) == NODES * SLOTS
        for e in table:
            r = ranks[e["rank"]]
            assert r["host"] == e["host"], (e, r)
            assert r["netns"] == f"net:[{_netns_inode(e['host'])}]"
            assert r["cpuset"] == str(e["pu"]), (e, r)
        # the y neighbours (r, r+3) share a node: no heavy edge is cut
        assert all(ranks[r]["host"] == ranks[r + 3]["host"] for r in range(3))
        # which the block default (ranks 0,1 on n0 ...) would have cut
        assert [e["host"] for e in table] != [f"tiers-n{i // SLOTS}" for i in range(6)]

    def test_map_launch_on_the_cluster_takes_the_program_alone(self, cluster):
        run = run_tiers("map", "--stencil", "2d:3,2:400,4", "--vcluster", "--launch", "--",
                        "mpirun", "-n", "6", "true", timeout=120)
        assert_one_line_error(run, "give the program alone")

    def test_inter_node_bandwidth_is_the_shaped_rate(self, cluster, tmp_path):
        def probe(pair):
            out = tmp_path / f"net-{pair.replace(',', '-')}.json"
            run = run_tiers("probe", "net", "--vcluster", "-n", "4", "--tests", "pingpong",
                            "--sizes", "8,1M", "--iters", "6", "--window", "4",
                            "--pair", pair, "--json", str(out), "--time-limit", "150",
                            timeout=180)
            assert run.returncode == 0, run.stderr
            return json.loads(out.read_text())

        inter = probe("0,2")
        place = {p["rank"]: p["host"] for p in inter["samples"]["placement"]}
        assert (place[0], place[2]) == ("tiers-n0", "tiers-n1")
        assert inter["params"]["vcluster"]["link"]["rate"] == RATE
        pp = inter["summary"]["pingpong"]
        for key in ("pingpong_1mib_mbps", "bandwidth_1mib_mbps"):
            assert abs(pp[key] - RATE_MBPS) <= 0.15 * RATE_MBPS, (key, pp[key], RATE_MBPS)

        print(f"between nodes at {RATE}: 1 MiB ping-pong {pp['pingpong_1mib_mbps']:.1f} MB/s, "
              f"streaming {pp['bandwidth_1mib_mbps']:.1f} MB/s, shaped {RATE_MBPS:.1f} MB/s")
        intra = probe("0,1")
        place = {p["rank"]: p["host"] for p in intra["samples"]["placement"]}
        assert place[0] == place[1] == "tiers-n0"
        # shared memory within a node is not held to the link rate
        assert intra["summary"]["pingpong"]["pingpong_1mib_mbps"] > 3 * RATE_MBPS

    def test_up_again_changes_nothing(self, cluster):
        before = ([_netns_inode(n["netns"]) for n in cluster["nodes"]],
                  [vcluster._link(n["host_if"])["ifindex"] for n in cluster["nodes"]],
                  _hosts_lines())
        run = run_tiers("vcluster", "up", "--nodes", str(NODES), "--slots", str(SLOTS),
                        "--link", RATE)
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith("already up")
        after = ([_netns_inode(n["netns"]) for n in cluster["nodes"]],
                 [vcluster._link(n["host_if"])["ifindex"] for n in cluster["nodes"]],
                 _hosts_lines())
        assert after == before
        assert len(before[2]) == NODES
        assert json.loads(vcluster.state_path().read_text())["created"] == cluster["created"]

    def test_status_shows_both_link_ends_shaped(self, cluster, tmp_path):
        out = tmp_path / "status.json"
        run = run_tiers("vcluster", "status", "--json", str(out))
        assert run.returncode == 0, run.stderr
        st = json.loads(out.read_text())
        assert st["schema"] == "tiers.vcluster/1" and st["command"][:3] == \
            ["tiers", "vcluster", "status"]
        st = st["summary"]
        assert st["up"] and st["healthy"]
        assert [n["name"] for n in st["nodes"]] == [f"tiers-n{i}" for i in range(NODES)]
        for n in st["nodes"]:
            for end in ("qdisc_node", "qdisc_host"):
                assert n[end]["kind"] == "tbf"
                assert n[end]["rate_bits_per_s"] == 300_000_000
            assert n["processes"] == 0        # every launch above cleaned up after itself

    def test_up_of_another_size_refuses(self, cluster):
        run = run_tiers("vcluster", "up", "--nodes", "2")
        assert_one_line_error(run, "tiers vcluster down")
        assert len(json.loads(vcluster.state_path().read_text())["nodes"]) == NODES


def test_down_removes_everything(clean):
    run = run_tiers("vcluster", "up", "--nodes", "2", "--link", "1gbit")
    assert run.returncode == 0, run.stderr
    assert len(_hosts_lines()) == 2 and vcluster.leftovers()
    run = run_tiers("vcluster", "down")
    assert run.returncode == 0, run.stderr
    assert vcluster.leftovers() == []
    listed = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert "tiers-" not in listed
    assert "tiers-" not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                          text=True).stdout
    assert _hosts_lines() == []
    run = run_tiers("vcluster", "down")        # nothing left to remove: still fine
    assert run.returncode == 0 and "nothing to remove" in run.stdout
    # and launching on no cluster is a one-line error
    assert_one_line_error(run_tiers("vcluster", "mpirun", "-n", "2", "--", "true"),
                          "no virtual cluster is up")
    assert_one_line_error(run_tiers("probe", "net", "--vcluster", "-n", "2"),
                          "no virtual cluster is up")


def test_up_refuses_a_foreign_interface_of_the_same_name(clean):
    subprocess.run(["ip", "link", "add", vcluster.BRIDGE, "type", "bridge"], check=True)
    try:
        run = run_tiers("vcluster", "up", "--nodes", "2")
        assert_one_line_error(run, f"interface {vcluster.BRIDGE} exists and was not created")
        # the foreign bridge is untouched and nothing was built
        assert vcluster._link(vcluster.BRIDGE) is not None
        assert vcluster._link(vcluster.BRIDGE).get("ifalias") is None
        assert not vcluster.state_path().exists()
        assert not any(ns.startswith("tiers-") for ns in vcluster._netns_list())
        run = run_tiers("vcluster", "down")    # and down leaves it alone too
        assert run.returncode == 0
        assert vcluster._link(vcluster.BRIDGE) is not None
    finally:
        subprocess.run(["ip", "link", "delete", vcluster.BRIDGE], check=False)


def test_down_after_up_was_killed_half_way(clean):
    proc = subprocess.Popen([sys.executable, "-m", "tiers", "vcluster", "up", "--nodes", "8"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = vcluster.state_path()
    state = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            state = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            state = None
        if state and sum(o["kind"] == "netns" for o in state["created"]) >= 3:
            proc.send_signal(signal.SIGSTOP)     # freeze it mid-way, then crash it
            break
        time.sleep(0.001)
    proc.kill()
    proc.wait()
    state = json.loads(path.read_text())
    assert state["complete"] is False
    assert 3 <= sum(o["kind"] == "netns" for o in state["created"]) < 8
    assert vcluster.leftovers()
    run = run_tiers("vcluster", "status")
    assert run.returncode == 0 and "half built" in run.stdout
    run = run_tiers("vcluster", "mpirun", "-n", "2", "--", "true")
    assert_one_line_error(run, "half built")
    run = run_tiers("vcluster", "down")
    assert run.returncode == 0, run.stderr
    assert vcluster.leftovers() == []


def test_up_completes_what_a_killed_up_left(clean, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tiers", "vcluster", "up", "--nodes", "6"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            state = json.loads(vcluster.state_path().read_text())
        except (OSError, json.JSONDecodeError):
            state = None
        if state and sum(o["kind"] == "netns" for o in state["created"]) >= 2:
            proc.send_signal(signal.SIGSTOP)
            break
        time.sleep(0.001)
    proc.kill()
    proc.wait()
    run = run_tiers("vcluster", "up", "--nodes", "6", "--json", str(tmp_path / "up.json"))
    assert run.returncode == 0, run.stderr
    st = json.loads((tmp_path / "up.json").read_text())["summary"]
    assert st["complete"] and not st["already_up"]
    # every object exactly once in the record: nothing was created twice
    assert len(st["created"]) == len({(o["kind"], o["name"]) for o in st["created"]})
    assert sorted(o["name"] for o in st["created"] if o["kind"] == "netns") == \
        sorted(f"tiers-n{i}" for i in range(6))
    status = run_tiers("vcluster", "status", "--json", str(tmp_path / "status.json"))
    assert status.returncode == 0
    assert json.loads((tmp_path / "status.json").read_text())["summary"]["healthy"]


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv is not installed")
def test_without_root_one_line_and_non_zero():
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-m", "tiers", "vcluster", "up", "--nodes", "2"],
                          capture_output=True, text=True, env=dict(os.environ), timeout=60)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == ["tiers: error: tiers vcluster needs root (network namespaces, links "
                     "and tc)"], proc.stderr
    assert vcluster.leftovers() == []


@pytest.fixture
def two_nodes():
    """2 nodes x 2 slots at 1 Gbit, always taken down (also on failure)."""
    try:
        run = run_tiers("vcluster", "up", "--nodes", "2", "--slots", "2", "--link", "1gbit",
                        timeout=120)
        assert run.returncode == 0, run.stderr
        yield json.loads(vcluster.state_path().read_text())
    finally:
        _down()
        assert vcluster.leftovers() == []


def test_jacobi3d_under_the_tiers_map_placement(two_nodes, native_bin, tmp_path):
    """Seed 002 on a 2-node cluster: jacobi3d on a 2x2x1 grid of 4x16x8
    subdomains, whose default (block) numbering puts y-neighbours (faces of
    4x8 points) on one node and x-neighbours (16x8) across nodes.  tiers map
    must pair x-neighbours instead; jacobi3d renumbered by its placement must
    pass its bit-for-bit check against a serial run and give the default
    placement's result."""
    # jacobi3d numbers subdomains as MPI_Cart_create does (rank = y + 2 x here)
    doc_path, perm_path = tmp_path / "map.json", tmp_path / "map.permutation"
    run = run_tiers("map", "--stencil", "3d:2,2,1:4,16,8", "--numbering", "cart", "--machine",
                    "synthetic:pack:1 core:2 pu:1", "--hostfile", two_nodes["hostfile"],
                    "--permutation", str(perm_path), "--json", str(doc_path))
    assert run.returncode == 0, run.stderr
    doc = json.loads(doc_path.read_text())
    nodes = [r["node"] for r in doc["samples"]["ranks"]]
    assert nodes[0] == nodes[2] != nodes[1] == nodes[3]       # x-neighbours together
    metrics = {m["placement"]: m for m in doc["summary"]["comparison"]}
    # 2 subdomain pairs x 16x8 points x 8 bytes x both ways vs 4x8 points
    assert metrics["block"]["bytes_inter_node"] == 2 * 16 * 8 * 8 * 2
    assert metrics["afc"]["bytes_inter_node"] == 2 * 4 * 8 * 8 * 2
    # jacobi3d reads the file tiers map writes, as it is
    assert [int(x) for x in perm_path.read_text().split()] != list(range(4))
    jperm = perm_path

    def jacobi(*extra):
        run = run_tiers("vcluster", "mpirun", "-n", "4", "--timeout", "120", "--",
                        native_bin("tiers-jacobi3d"), "--threads", "1", "--grid", "2,2,1",
                        "--size", "8,32,8", "--iters", "30", "--verify", *extra, timeout=180)
        assert run.returncode == 0, run.stderr
        return run.json()

    default, mapped = jacobi(), jacobi("--permutation", str(jperm))
    for out in (default, mapped):
        assert out["verification"]["passed"] and out["verification"]["serial_compared"]
        assert out["verification"]["max_diff_serial"] == 0
    assert mapped["params"]["permutation"] == str(jperm)
    assert mapped["result"] == default["result"]


def test_bench_and_trace_run_on_the_cluster(two_nodes, native_bin, tmp_path):
    """--vcluster takes tiers bench and tiers trace onto the cluster's nodes:
    the bench's runs go through the cluster's hostfile and still verify, and
    a traced program's ranks run on both nodes and are all traced."""
    bench_json = tmp_path / "bench.json"
    run = run_tiers("bench", "laplace2d", "--vcluster", "--ranks", "1,4", "--threads", "1",
                    "--quick", "--json", str(bench_json), timeout=300)
    assert run.returncode == 0, run.stderr
    doc = json.loads(bench_json.read_text())
    assert doc["params"]["vcluster"] is True
    assert [(s["ranks"], s["threads"]) for s in doc["samples"]] == [(1, 1), (4, 1)]
    for s in doc["samples"]:
        assert two_nodes["hostfile"] in s["command"]
        assert s["doc"]["verification"]["passed"]
    # every decomposition gives the same field: the result figures agree
    results = [s["doc"]["result"] for s in doc["samples"]]
    assert results[0] == results[1]

    out = tmp_path / "trace"
    run = run_tiers("trace", "--vcluster", "-n", "4", "--budget", "1M", "--out", str(out),
                    "--", native_bin("tiers-whoami"), timeout=300)
    assert run.returncode == 0, run.stderr
    who = json.loads(next(ln for ln in run.stdout.splitlines() if "tiers.whoami/1" in ln))
    hosts = sorted({r["host"] for r in who["ranks"]})
    assert hosts == sorted(n["name"] for n in two_nodes["nodes"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["summary"]["ranks"] == 4
    assert summary["params"]["vcluster"] is True


def test_vcluster_options_need_a_cluster(tmp_path):
    """Without a cluster, --vcluster on bench and trace is one line."""
    if vcluster.load_state() is not None:
        pytest.skip("a virtual cluster is up already; the tests leave it alone")
    assert_one_line_error(run_tiers("bench", "laplace2d", "--vcluster", "--ranks", "2",
                                    "--threads", "1", "--quick"), "vcluster")
    assert_one_line_error(run_tiers("trace", "--vcluster", "--out", str(tmp_path / "t"),
                                    "--", "true"), "vcluster")


@pytest.mark.parametrize("how", [["--json", "-"], ["--format", "json"]])
def test_document_on_stdout_keeps_the_human_lines_on_stderr(clean, how):
    # With the document on standard output, stdout is exactly one JSON
    # document and the status line goes to standard error.
    run = run_tiers("vcluster", "status", *how)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["schema"] == "tiers.vcluster/1"
    assert doc["summary"]["up"] is False
    assert "no virtual cluster is up" in run.stderr


# --------------------------------------------------------------------------
# Launch lines that work when pasted; down and node failures mid-run


def _shim(folder: Path) -> dict:
    """An environment whose PATH has a ``tiers`` that runs this tiers, as
    the installed console command would, for pasting printed lines."""
    shim = folder / "bin"
    shim.mkdir(exist_ok=True)
    exe = shim / "tiers"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m tiers \"$@\"\n")
    exe.chmod(0o755)
    return {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}


def _paste(line: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(line, shell=True, capture_output=True, text=True, env=env,
                          timeout=180)


def _whoami_ranks(stdout: str) -> dict:
    line = next(ln for ln in stdout.splitlines() if '"tiers.whoami/1"' in ln)
    return {r["rank"]: r for r in json.loads(line)["ranks"]}


def test_printed_launch_lines_work_when_pasted(two_nodes, native_bin, tmp_path):
    env = _shim(tmp_path)
    who = native_bin("tiers-whoami")
    # the hint of 'up'
    run = run_tiers("vcluster", "up", "--nodes", "2", "--slots", "2", "--link", "1gbit")
    assert run.returncode == 0, run.stderr
    hint = next(ln for ln in run.stdout.splitlines() if "tiers vcluster mpirun" in ln)
    line = hint.split(": ", 1)[1].replace("PROGRAM [ARGS]", who)
    pasted = _paste(line, env)
    assert pasted.returncode == 0, pasted.stderr
    ranks = _whoami_ranks(pasted.stdout)
    assert sorted(r["host"] for r in ranks.values()) == ["tiers-n0"] * 2 + ["tiers-n1"] * 2

    # tiers map --vcluster: the rankfile line it prints and the --dry-run line
    rf, tab = tmp_path / "rf", tmp_path / "t.json"
    run = run_tiers("map", "--stencil", "2d:2,2:400,4", "--vcluster", "--rankfile", str(rf),
                    "--table", str(tab), "--launch", "--dry-run", "--", who, timeout=120)
    assert run.returncode == 0, run.stderr
    assert '"tiers.whoami/1"' not in run.stdout          # a dry run runs nothing
    table = {e["rank"]: e for e in json.loads(tab.read_text())["ranks"]}
    printed = next(ln for ln in run.stdout.splitlines() if ln.startswith("vcluster: "))
    dry = run.stdout.strip().splitlines()[-1]
    assert "mpirun -n 4 -rf" not in run.stdout         # a bare mpirun would miss the nodes
    for line in (printed.split(": ", 1)[1].replace("./app", who), dry):
        pasted = _paste(line, env)
        assert pasted.returncode == 0, (line, pasted.stderr)
        ranks = _whoami_ranks(pasted.stdout)
        assert {r: (x["host"], x["cpuset"]) for r, x in ranks.items()} == \
            {r: (e["host"], str(e["pu"])) for r, e in table.items()}, line


def _pids_of(netns: str, word: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    pids = []
    for p in out.split():
        try:
            args = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if word in args:
            pids.append(int(p))
    return pids


def _start_sleepers(ranks: int, nodes: list[str]) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-m", "tiers", "vcluster", "mpirun", "-n",
                             str(ranks), "--", "sleep", "300"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    pids = {}
    while time.monotonic() < deadline:
        pids = {n: _pids_of(n, "sleep 300") for n in nodes}
        if all(pids.values()):
            return proc, pids
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"the sleepers did not start: {pids}")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return not stat[stat.rfind(")") + 2:].startswith("Z")


def test_down_stops_a_running_program_first(clean):
    run = run_tiers("vcluster", "up", "--nodes", "2", "--slots", "1", "--link", "1gbit",
                    timeout=120)
    assert run.returncode == 0, run.stderr
    agent = json.loads(vcluster.state_path().read_text())["agent"]
    proc, pids = _start_sleepers(2, ["tiers-n0", "tiers-n1"])
    mpirun = [p for p, args in vcluster._launches(vcluster.load_state())]  # noqa: SLF001
    assert len(mpirun) == 1
    down = run_tiers("vcluster", "down", timeout=120)
    assert down.returncode == 0, down.stderr
    assert "stopped mpirun (pid " in down.stdout and ": sleep), which ran" in down.stdout
    proc.wait(timeout=30)                  # the tiers vcluster mpirun of the program ends
    left = [p for ps in pids.values() for p in ps if _alive(p)] + \
        [p for p in mpirun if _alive(p)]
    assert left == []
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert agent not in ps


def test_a_node_that_dies_mid_run_is_one_line(two_nodes):
    proc, pids = _start_sleepers(4, ["tiers-n0", "tiers-n1"])
    for pid in _pids_of("tiers-n1", ""):   # the node's daemon and ranks: the node is gone
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("tiers: error: node tiers-n1 ")
    assert "stopped during the run of sleep on 4 ranks" in lines[0]
    assert not any(_alive(p) for p in pids["tiers-n0"])
