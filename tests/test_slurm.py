"""Slurm on the virtual cluster: ``tiers vcluster up --slurm``, jobs under
``srun`` and ``salloc`` with Open MPI and MPICH, and ``tiers map --launch``
checked per rank for every launcher (Open MPI rankfile, MPICH Hydra, Slurm
srun) on 4 nodes at 8 ranks.

Real munged, slurmctld and slurmd (Debian's slurm-wlm and munge), real
network namespaces and real MPI.  Needs root, the packages, Open MPI's and
MPICH's compilers; skipped with the reason otherwise.  Tests refuse to run
while a virtual cluster that they did not build is up.  ``pytest -s``
prints the three per-rank placement tables.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import assert_one_line_error, build_program, run_tiers
from tiers import native, slurm, vcluster

ROOT = Path(__file__).resolve().parent.parent
REASON = vcluster.unavailable_reason() or slurm.unavailable_reason()
for _tool in ("mpicc.openmpi", "mpicc.mpich", "mpirun.openmpi", "mpiexec.hydra"):
    if REASON is None and shutil.which(_tool) is None:
        REASON = f"{_tool} is not on PATH (Open MPI and MPICH are both needed)"
if REASON is None and (vcluster.state_path().exists() or vcluster.leftovers()):
    REASON = "a virtual cluster is up already; the tests leave it alone"

pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))

NODES, SLOTS, RANKS = 4, 2, 8
STENCIL = "2d:4,2:400,4"        # y traffic 100x x: the mapped groups are (r, r+4)


def _skip_if_a_cluster_is_up():
    """Another cluster (a user's, or another test run's) is never touched."""
    if vcluster.state_path().exists() or vcluster.leftovers():
        pytest.skip("a virtual cluster is up already; the tests leave it alone")


def _down():
    run = run_tiers("vcluster", "down", timeout=120)
    assert run.returncode == 0, run.stderr


def _netns_inode(name: str) -> int:
    return os.stat(f"/run/netns/{name}").st_ino


@pytest.fixture(scope="module")
def whoami(tmp_path_factory):
    """native/apps/whoami.c built with each MPI's compiler: {"openmpi": path,
    "mpich": path} (the installed tiers-whoami is built with one MPI only)."""
    folder = tmp_path_factory.mktemp("whoami")
    lib = native.native_dir() / "lib"
    out = {}
    for mpi in ("openmpi", "mpich"):
        exe = folder / f"whoami-{mpi}"
        subprocess.run([f"mpicc.{mpi}", "-O1", "-fopenmp", '-DTIERS_VERSION="test"',
                        f"-I{ROOT / 'native/include'}", f"-I{ROOT / 'native/src'}", "-o", str(exe),
                        str(ROOT / "native/apps/whoami.c"),
                        str(ROOT / "native/src/common/json.c"),
                        str(ROOT / "native/src/common/tool.c"),
                        f"-L{lib}", "-ltiers", f"-Wl,-rpath,{lib}", "-lhwloc", "-lm"],
                       check=True, capture_output=True)
        out[mpi] = str(exe)
    return out


#: Under load Open MPI's TCP transport between two namespaces can report
#: its own non-blocking connect still "in progress" as a failed connect,
#: and the rank then crashes: the job had started on every node, its
#: ranks could not reach each other in time.  Seen once in a full
#: `make test` (with Open MPI's shared-memory segment also missing on one
#: node; the cause is not established).  A job that fails so runs once
#: more; a second failure fails the test.
OMPI_TCP_RACE = "Open MPI failed to TCP connect to a peer MPI process"


def _job(*args, **kw):
    """run_tiers(*args, **kw) for an MPI job on the cluster, once more when
    it failed on Open MPI's TCP connect race (OMPI_TCP_RACE)."""
    run = run_tiers(*args, **kw)
    if run.returncode != 0 and OMPI_TCP_RACE in run.stderr.replace("\n", " "):
        print(f"\nOpen MPI's TCP connect race; running the job again: {run.stderr[-300:]}")
        run = run_tiers(*args, **kw)
    return run


def _ranks(run) -> dict[int, dict]:
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(ln for ln in run.stdout.splitlines() if '"tiers.whoami/1"' in ln)
    return {r["rank"]: r for r in json.loads(line)["ranks"]}


def _assert_on_nodes(ranks: dict[int, dict]) -> None:
    """Every rank runs in its node's namespaces; two ranks per node."""
    assert sorted(ranks) == list(range(RANKS))
    per_node: dict[str, int] = {}
    for r in ranks.values():
        assert r["size"] == RANKS
        assert r["host"] in {vcluster.node_name(i) for i in range(NODES)}, r
        assert r["netns"] == f"net:[{_netns_inode(r['host'])}]", r
        assert r["netns_name"] == r["host"], r
        per_node[r["host"]] = per_node.get(r["host"], 0) + 1
    assert per_node == {vcluster.node_name(i): SLOTS for i in range(NODES)}


# Where Slurm and munge keep their files by default: the cluster writes none there.
DEFAULT_PLACES = ("/etc/slurm", "/var/log/slurm", "/var/lib/slurm", "/var/spool/slurmd",
                  "/var/spool/slurmctld", "/run/slurm", "/etc/munge", "/run/munge",
                  "/var/log/munge", "/var/lib/munge")


def _files_in_default_places() -> dict[str, float]:
    out = {}
    for top in DEFAULT_PLACES:
        for folder, _, files in os.walk(top):
            for f in files:
                path = os.path.join(folder, f)
                try:
                    out[path] = os.stat(path).st_mtime
                except OSError:
                    pass
    return out


@pytest.fixture(scope="class")
def cluster():
    """4 nodes x 2 slots, unshaped links, Slurm on them; removed at the end
    of the class, and nothing of it is left, nor anything written where
    Slurm and munge keep files by default (/etc, /var, /run)."""
    _skip_if_a_cluster_is_up()
    before = _files_in_default_places()
    try:
        run = run_tiers("vcluster", "up", "--nodes", str(NODES), "--slots", str(SLOTS),
                        "--link", "none", "--slurm", timeout=120)
        assert run.returncode == 0, run.stderr
        yield json.loads(vcluster.state_path().read_text())
    finally:
        _down()
        assert vcluster.leftovers() == []
        assert _files_in_default_places() == before
        # the Open MPI jobs on the nodes made session folders named after
        # them; down removes them (one left by a killed job broke a later
        # job of the same Slurm job number)
        assert not list(Path(os.environ.get("TMPDIR") or "/tmp").glob("ompi.tiers-n*"))


class TestSlurmCluster:
    def test_every_node_is_idle_with_this_machines_shape(self, cluster, tmp_path):
        run = run_tiers("vcluster", "status", "--json", str(tmp_path / "s.json"))
        assert run.returncode == 0, run.stderr
        doc = json.loads((tmp_path / "s.json").read_text())["summary"]
        view = doc["slurm"]["nodes"]
        from tiers import topo
        s = topo.measure()["summary"]
        assert [v["name"] for v in view] == [vcluster.node_name(i) for i in range(NODES)]
        for v in view:
            assert v["state"] == "idle", v
            assert v["cpus"] == s["pus"]
            assert v["sockets"] * v["cores_per_socket"] == s["cores"]
            assert v["sockets"] * v["cores_per_socket"] * v["threads_per_core"] == s["pus"]
        assert "tiers-n3   idle" in run.stdout
        # one slurmd per node, each inside its node's network namespace
        p = slurm.paths()
        for i in range(NODES):
            name = vcluster.node_name(i)
            pid = int(Path(slurm.slurmd_pid_file(p, name)).read_text())
            assert os.stat(f"/proc/{pid}/ns/net").st_ino == _netns_inode(name)
        assert sorted(doc["slurm"]["running"]) == sorted(
            ["slurmctld", "munged"] + [f"slurmd on {vcluster.node_name(i)}"
                                       for i in range(NODES)])
        # every file under the cluster's state folder; the key as munged wants it
        conf = Path(p["conf"]).read_text()
        assert conf.count("NodeName=") == NODES and "NodeAddr=10.77.0.4" in conf
        for line in conf.splitlines():
            if "=/" in line:
                assert ("/" + line.split("=/", 1)[1]).startswith(str(vcluster.state_dir())), \
                    line
        assert (os.stat(p["munge_key"]).st_mode & 0o777) == 0o600
        # job numbers start where no earlier cluster's did: from the clock
        first = int(next(ln for ln in conf.splitlines()
                         if ln.startswith("FirstJobId=")).split("=")[1])
        assert abs(first - slurm.first_job_id()) < 3600


    @pytest.mark.parametrize("mpi,how", [("openmpi", "srun"), ("mpich", "srun"),
                                         ("openmpi", "salloc"), ("mpich", "salloc")])
    def test_jobs_start_on_every_node(self, cluster, whoami, mpi, how):
        """srun with the PMI each MPI speaks (pmix, pmi2), and salloc +
        the MPI's own launcher, which starts its daemons through Slurm."""
        prog = whoami[mpi]
        if how == "srun":
            words = ["-n", str(RANKS), prog]
        else:
            launcher = ["mpirun.openmpi"] if mpi == "openmpi" else ["mpiexec.hydra"]
            words = ["-n", str(RANKS)] + launcher + [prog]
        run = _job("vcluster", how, "--mpi", mpi, "--timeout", "120", "--", *words,
                   timeout=180)
        ranks = _ranks(run)
        _assert_on_nodes(ranks)
        doc = json.loads(next(ln for ln in run.stdout.splitlines() if '"tiers.whoami/1"' in ln))
        assert doc["mpi"].startswith("Open MPI" if mpi == "openmpi" else "MPICH")

    @pytest.mark.parametrize("launcher,placement", [("openmpi", "afc"), ("mpich", "afc"),
                                                    ("mpich", "block"), ("slurm", "afc")])
    def test_map_launch_places_every_rank(self, cluster, whoami, tmp_path, launcher,
                                          placement):
        """tiers map --vcluster --launcher L --launch: every rank's host,
        namespace and binding are the placement table's."""
        tab = tmp_path / "t.json"
        prog = whoami["mpich" if launcher == "mpich" else "openmpi"]
        args = ["map", "--stencil", STENCIL, "--vcluster", "--launcher", launcher,
                "--placement", placement, "--table", str(tab), "--launch"]
        # the files a dry run's line names are kept for it: in tmp_path
        dry = run_tiers(*args, "--dry-run", "--", prog, timeout=120,
                        env={"TMPDIR": str(tmp_path)})
        assert dry.returncode == 0, dry.stderr
        line = dry.stdout.strip().splitlines()[-1]
        run = _job(*args, "--", prog, timeout=180)
        ranks = _ranks(run)
        table = json.loads(tab.read_text())["ranks"]
        print(f"\n{launcher} ({placement}): {line}")
        print(f"{'rank':>4} | {'table host':<10} {'PU':>3} | {'got host':<10} "
              f"{'netns':<10} {'cpuset':>6}")
        for e in table:
            r = ranks[e["rank"]]
            print(f"{e['rank']:>4} | {e['host']:<10} {e['pu']:>3} | {r['host']:<10} "
                  f"{r['netns_name']:<10} {r['cpuset']:>6}")
        assert len(table) == RANKS
        for e in table:
            r = ranks[e["rank"]]
            assert r["host"] == e["host"], (e, r)
            assert r["netns_name"] == e["host"], (e, r)
            assert r["netns"] == f"net:[{_netns_inode(e['host'])}]", (e, r)
            assert r["cpuset"] == str(e["pu"]), (e, r)
        _assert_on_nodes(ranks)
        if placement == "afc":
            # the y neighbours (r, r+4) share a node, which block would not give
            assert all(ranks[r]["host"] == ranks[r + 4]["host"] for r in range(4))
        # each launcher's own binding where one list says the placement
        if launcher == "slurm":
            # srun's map_cpu is one list for every node's local tasks in rank
            # order: it says the placement only when all nodes' lists agree
            local: dict[str, list[int]] = {}
            for e in sorted(table, key=lambda e: e["rank"]):
                local.setdefault(e["host"], []).append(e["pu"])
            one_list = len({tuple(v) for v in local.values()}) == 1
            assert "--distribution=arbitrary" in line and "SLURM_HOSTFILE=" in line
            if one_list:
                assert "--cpu-bind=map_cpu:" in line and "tiers-bind" not in line
            else:
                assert "--cpu-bind=none" in line and "tiers-bind --pus" in line
        if launcher == "mpich" and placement == "block":
            assert "-bind-to user:" in line and "tiers-bind" not in line
        if launcher == "openmpi":
            assert "--rankfile" in line

    def test_inside_an_allocation_tiers_launches_with_srun(self, cluster, whoami, tmp_path):
        """In salloc ($SLURM_JOB_ID set) tiers picks srun by itself: tiers map
        --launch with the program alone places every rank through srun."""
        tab = tmp_path / "t.json"
        inner = [sys.executable, "-m", "tiers", "map", "--stencil", STENCIL, "--hostfile",
                 cluster["hostfile"], "--table", str(tab), "--launch"]
        dry = run_tiers("vcluster", "salloc", "--", "-n", str(RANKS), *inner, "--dry-run",
                        "--", whoami["openmpi"], timeout=180, env={"TMPDIR": str(tmp_path)})
        assert dry.returncode == 0, dry.stderr
        line = next(ln for ln in dry.stdout.splitlines() if "SLURM_HOSTFILE=" in ln)
        assert "srun -n 8" in line and "--distribution=arbitrary" in line, line
        run = _job("vcluster", "salloc", "--", "-n", str(RANKS), *inner, "--",
                   whoami["openmpi"], timeout=180)
        ranks = _ranks(run)
        for e in json.loads(tab.read_text())["ranks"]:
            r = ranks[e["rank"]]
            assert (r["host"], r["netns_name"], r["cpuset"]) == (e["host"], e["host"],
                                                                 str(e["pu"])), (e, r)

    def test_trace_under_srun_is_the_archive_of_mpirun(self, cluster, tmp_path):
        """tiers trace -- srun ...: same counts per rank and pair as under a
        local mpirun, and an OTF2 archive, with ranks on the nodes."""
        prog = build_program(tmp_path, "trace_mix")
        env = slurm.environment(cluster, mpi="openmpi")
        local = run_tiers("trace", "--out", str(tmp_path / "local"), "--", "mpirun", "-n",
                          "4", "--oversubscribe", prog, timeout=180)
        assert local.returncode == 0, local.stderr
        srun = run_tiers("trace", "--out", str(tmp_path / "srun"), "--", "srun", "-N", "4",
                         "-n", "4", prog, env=env, timeout=180)
        assert srun.returncode == 0, srun.stderr
        a = json.loads((tmp_path / "local" / "summary.json").read_text())
        b = json.loads((tmp_path / "srun" / "summary.json").read_text())
        for key in ("ranks", "p2p_messages", "p2p_bytes", "matched_p2p_bytes", "coll_bytes"):
            assert b["summary"][key] == a["summary"][key], key
        assert b["summary"]["comm_matrix"] == a["summary"]["comm_matrix"]
        calls = [{f: e["calls"] for f, e in r["functions"].items()}
                 for r in sorted(b["samples"]["ranks"], key=lambda r: r["rank"])]
        assert calls == [{f: e["calls"] for f, e in r["functions"].items()}
                         for r in sorted(a["samples"]["ranks"], key=lambda r: r["rank"])]
        assert [r["host"] for r in sorted(b["samples"]["ranks"], key=lambda r: r["rank"])] \
            == ["tiers-n0", "tiers-n1", "tiers-n2", "tiers-n3"]
        assert (tmp_path / "srun" / "traces.otf2").is_file()
        assert b["summary"]["archive"] is not None

    def test_up_again_keeps_the_daemons(self, cluster):
        before = {p: Path(slurm.slurmd_pid_file(slurm.paths(), p)).read_text()
                  for p in (vcluster.node_name(i) for i in range(NODES))}
        run = run_tiers("vcluster", "up", "--nodes", str(NODES), "--slots", str(SLOTS),
                        "--link", "none", "--slurm", timeout=120)
        assert run.returncode == 0, run.stderr
        after = {p: Path(slurm.slurmd_pid_file(slurm.paths(), p)).read_text() for p in before}
        assert after == before


def test_slurmd_that_does_not_come_up_is_named_and_nothing_is_left():
    """A node whose slurmd cannot take its port: 'up --slurm' names it in
    one line and stops every daemon it started, removing their files; the
    cluster that was up before stays as it was."""
    _skip_if_a_cluster_is_up()
    try:
        run = run_tiers("vcluster", "up", "--nodes", "2", "--link", "none", timeout=120)
        assert run.returncode == 0, run.stderr
        blocker = subprocess.Popen(
            ["ip", "netns", "exec", "tiers-n1", sys.executable, "-c",
             "import socket, sys, time\n"
             "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
             f"s.bind(('0.0.0.0', {slurm.SLURMD_PORT})); s.listen(); print('ok', flush=True)\n"
             "time.sleep(120)\n"], stdout=subprocess.PIPE, text=True)
        try:
            assert blocker.stdout.readline().strip() == "ok"
            t0 = time.monotonic()
            run = run_tiers("vcluster", "up", "--nodes", "2", "--link", "none", "--slurm",
                            "--slurm-timeout", "20", timeout=120)
            assert time.monotonic() - t0 < 60
        finally:
            blocker.kill()
            blocker.wait()
        assert_one_line_error(run, "tiers-n1")
        assert "tiers-n0" not in run.stderr and "slurmd" in run.stderr
        assert slurm.running() == []
        assert not slurm.folder().exists()
        st = json.loads(vcluster.state_path().read_text())
        assert st["complete"] and "slurm" not in st
    finally:
        _down()
    assert vcluster.leftovers() == []


def test_slurm_without_the_packages_is_one_line_and_builds_nothing(tmp_path):
    """--slurm on a machine without Slurm: one line naming the packages,
    before any namespace or link exists."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ip", "tc", "unshare"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    run = run_tiers("vcluster", "up", "--nodes", "2", "--slurm", env={"PATH": str(bin_dir)},
                    timeout=60)
    assert_one_line_error(run, "slurm-wlm munge")
    assert run.returncode == 2
    assert vcluster.leftovers() == []
    run = run_tiers("vcluster", "srun", "--", "-n", "2", "true", timeout=60)
    assert_one_line_error(run, "no virtual cluster is up")


def test_first_job_numbers_differ_between_clusters():
    """Two clusters started a second apart, or a day apart, number their
    first job differently, inside Slurm's default range."""
    t = 1_795_000_000
    ids = {slurm.first_job_id(t + d) for d in (0, 1, 2, 86_400)}
    assert len(ids) == 4
    assert all(1000 <= i < 67_043_328 for i in ids)
