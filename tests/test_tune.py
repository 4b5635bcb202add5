"""``tiers tune``: trace, map, then run the default and the mapped placement.

Real mpirun, real jacobi3d (native/apps).  Every rank starts through a
small wrapper that appends one line per rank to a log -- the run it
belongs to (``TIERS_TUNE_RUN``), its rank, host and the PUs it may run
on -- before it execs jacobi3d, so the tests count the runs and see where
each rank ran without trusting what tiers says about it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_tiers

needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")
#: make test-mpich: the native tools are MPICH programs, which Open MPI's
#: mpirun (a launcher line, the virtual cluster) cannot start as one job
UNDER_MPICH = os.environ.get("TIERS_LAUNCHER", "").strip().lower() in ("mpich", "hydra")

JACOBI_ARGS = ["--threads", "1", "--size", "24", "--iters", "10", "--no-verify"]


def _wrapper(folder: Path, jacobi: str) -> tuple[str, Path]:
    """Write the logging wrapper; return its path and the log's."""
    log = folder / "ranks.log"
    script = folder / "jacobi-logged"
    script.write_text(
        "#!/bin/sh\n"
        f"echo \"${{TIERS_TUNE_RUN:-none}} ${{OMPI_COMM_WORLD_RANK:-${{PMI_RANK:-x}}}} "
        f"$(hostname) $(grep Cpus_allowed_list /proc/self/status | cut -f2)\" >> {log}\n"
        f"exec {jacobi} \"$@\"\n")
    script.chmod(0o755)
    return str(script), log


def _log(log: Path) -> dict[str, dict[int, tuple[str, str]]]:
    """{run label: {rank: (host, cpus)}} from the wrapper's log."""
    runs: dict[str, dict[int, tuple[str, str]]] = {}
    for line in log.read_text().splitlines():
        label, rank, host, cpus = line.split()
        runs.setdefault(label, {})[int(rank)] = (host, cpus)
    return runs


@needs_mpirun
@pytest.mark.parametrize("ranks", [2, 4])
def test_tune_runs_both_placements_rounds_times_as_mapped(tmp_path, native_bin, ranks):
    rounds = 3
    prog, log = _wrapper(tmp_path, native_bin("tiers-jacobi3d"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    doc_path = tmp_path / "tune.json"
    run = run_tiers("tune", "-n", str(ranks), "--rounds", str(rounds), "--keep", "--json",
                    str(doc_path), "--", prog, *JACOBI_ARGS, timeout=600,
                    env={"TMPDIR": str(tmp)})
    assert run.returncode == 0, run.stderr
    doc = json.loads(doc_path.read_text())
    assert doc["schema"] == "tiers.tune/1"
    s = doc["summary"]
    assert s["ranks"] == ranks and s["rounds"] == rounds

    # the runs: one traced, then rounds x (default, tuned), each on every rank
    seen = _log(log)
    labels = Counter(label.split(":")[0] for label in seen)
    assert labels == {"trace": 1, "default": rounds, "tuned": rounds}, seen
    assert all(sorted(v) == list(range(ranks)) for v in seen.values()), seen
    order = [(r["round"], r["placement"]) for r in doc["samples"]["runs"]]
    assert order == [(k, w) for k in range(1, rounds + 1)
                     for w in (("default", "tuned") if k % 2 else ("tuned", "default"))]
    for which in ("default", "tuned"):
        side = s[which]
        assert side["runs"] == rounds == len(side["times_s"])
        assert side["stats"]["n"] == rounds
        assert side["stats"]["min"] == min(side["times_s"])
        assert side["predicted_time_s"] > 0
    # jacobi3d reports its time: that is what was measured
    assert s["time_source"] == "program"
    assert all(r["time_s"] == r["program_s"] for r in doc["samples"]["runs"])
    ratio = s["default"]["stats"]["median"] / s["tuned"]["stats"]["median"]
    assert s["speedup_measured"] == pytest.approx(ratio)

    # every tuned rank ran on the PU the placement gives it
    tuned = doc["samples"]["placements"]["tuned"]
    for label, ranks_seen in seen.items():
        if label.startswith("tuned:"):
            assert {r: cpus for r, (_, cpus) in ranks_seen.items()} == \
                {e["rank"]: str(e["pu"]) for e in tuned}, (label, ranks_seen)

    # ... which is what tiers map makes of the same trace
    work = Path(s["workdir"])
    assert work.parent == tmp
    table = tmp_path / "table.json"
    m = run_tiers("map", "--comm", str(work / "trace"), "--oversubscribe", "--table",
                  str(table))
    assert m.returncode == 0, m.stderr
    mapped = json.loads(table.read_text())["ranks"]
    assert [(e["host"], e["pu"]) for e in mapped] == [(e["host"], e["pu"]) for e in tuned]
    assert s["map"]["chosen"] == s["tuned"]["placement"]
    same = [(e["host"], e["pu"]) for e in tuned] == \
        [(e["host"], e["pu"]) for e in doc["samples"]["placements"]["default"]]
    assert s["same_as_default"] == same
    if same:
        assert any("default" in w for w in doc["warnings"])
        assert "launcher's default does" in run.stdout
    assert "predicted" in run.stdout and "default / tuned" in run.stdout
    shutil.rmtree(work)


@needs_mpirun
def test_tune_leaves_no_folder_and_json_on_stdout(tmp_path, native_bin):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    run = run_tiers("tune", "-n", "2", "--rounds", "3", "--json", "-", "--",
                    native_bin("tiers-jacobi3d"), *JACOBI_ARGS, timeout=600,
                    env={"TMPDIR": str(tmp)}, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)          # stdout is the document alone
    assert doc["schema"] == "tiers.tune/1" and doc["summary"]["workdir"] is None
    assert len(doc["samples"]["runs"]) == 6
    assert list(tmp.iterdir()) == []
    assert not any(p.name.startswith("tiers-trace") for p in tmp_path.iterdir())


def _no_cluster() -> bool:
    from tiers import vcluster
    return vcluster.load_state() is None


@pytest.mark.parametrize("args,fragment", [
    ([], "no program given"),
    (["-n", "4", "--"], "no program given"),
    (["-n", "0", "--", "true"], "--ranks"),
    (["-n", "x", "--", "true"], "--ranks"),
    (["-n", "1", "--", "true"], "at least 2 ranks"),
    (["-n", "2", "--rounds", "2", "--", "true"], "--rounds"),
    (["-n", "2", "--", "/no/such/program"], "no such program"),
    (["-n", "2", "--", "mpirun", "-n", "2", "true"], "give the program alone"),
    (["--", "true"], "give the number of ranks"),
    (["-n", "2", "--hostfile", "/no/such/hosts", "--", "true"], "--hostfile"),
])
def test_bad_input_is_one_line_before_anything_runs(tmp_path, args, fragment):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    run = run_tiers("tune", *args, env={"TMPDIR": str(tmp)}, cwd=tmp_path)
    assert_one_line_error(run, fragment)
    assert run.returncode == 2
    assert list(tmp.iterdir()) == []


@pytest.mark.skipif(not _no_cluster(), reason="a virtual cluster is up")
def test_vcluster_without_a_cluster_is_one_line(tmp_path):
    run = run_tiers("tune", "--vcluster", "-n", "2", "--", "true", cwd=tmp_path)
    assert_one_line_error(run, "no virtual cluster is up")
    assert run.returncode == 2


# --------------------------------------------------------------------------
# On a 2-node virtual cluster (root)

def _vcluster_reason():
    from tiers import vcluster
    why = vcluster.unavailable_reason()
    if why is None and UNDER_MPICH:
        why = "the virtual cluster runs Open MPI; the tools are MPICH programs here"
    if why is None and shutil.which("mpirun") is None:
        why = "Open MPI's mpirun is not on PATH"
    if why is None and (vcluster.state_path().exists() or vcluster.leftovers()):
        why = "a virtual cluster is up already; the tests leave it alone"
    return why


@pytest.fixture
def two_nodes():
    """2 nodes x 1 slot at 1 Gbit, always taken down."""
    why = _vcluster_reason()
    if why:
        pytest.skip(why)
    try:
        run = run_tiers("vcluster", "up", "--nodes", "2", "--slots", "1", "--link", "1gbit",
                        timeout=120)
        assert run.returncode == 0, run.stderr
        from tiers import vcluster
        yield json.loads(vcluster.state_path().read_text())
    finally:
        run = run_tiers("vcluster", "down", timeout=120)
        assert run.returncode == 0, run.stderr


def test_tune_on_a_two_node_vcluster(two_nodes, tmp_path, native_bin):
    prog, log = _wrapper(tmp_path, native_bin("tiers-jacobi3d"))
    doc_path = tmp_path / "tune.json"
    run = run_tiers("tune", "--vcluster", "--rounds", "3", "--json", str(doc_path), "--",
                    prog, "--threads", "1", "--size", "16", "--iters", "5", "--no-verify",
                    timeout=600)
    assert run.returncode == 0, run.stderr
    doc = json.loads(doc_path.read_text())
    s = doc["summary"]
    assert s["where"] == "vcluster" and s["ranks"] == 2
    assert s["machine"]["hosts"] == ["tiers-n0", "tiers-n1"]
    seen = _log(log)
    # the traced run goes through tiers trace's own vcluster launch: unlabelled
    assert Counter(k.split(":")[0] for k in seen) == {"none": 1, "default": 3, "tuned": 3}
    tuned = {e["rank"]: e["host"] for e in doc["samples"]["placements"]["tuned"]}
    for label, ranks_seen in seen.items():
        assert sorted(ranks_seen) == [0, 1]
        # one rank per node, in every run: the cluster has one slot per node
        assert sorted(h for h, _ in ranks_seen.values()) == ["tiers-n0", "tiers-n1"]
        if label.startswith("tuned:"):
            assert {r: h for r, (h, _) in ranks_seen.items()} == tuned
    # the runs went through the cluster's hostfile and agent
    assert all(two_nodes["agent"] in " ".join(r["command"]) for r in doc["samples"]["runs"])
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert two_nodes["agent"] not in out


# --------------------------------------------------------------------------
# tiers map --launch needs real hosts

DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize("machine", [
    ["--machine", "synthetic:pack:2 core:4 pu:1"],
    ["--machine", str(DATA / "topo-pack2-numa2-l3-core2-pu2.xml")],
    ["--nodes", "2"],
])
def test_map_launch_refuses_invented_hosts(tmp_path, machine):
    mark = tmp_path / "started"
    run = run_tiers("map", "--stencil", "2d:2,1:4,4", *machine, "--oversubscribe", "--launch",
                    "--", "touch", str(mark), timeout=120)
    assert_one_line_error(run, "cannot run on invented hosts")
    assert run.returncode == 2
    assert not mark.exists()
    # without --launch the same machine is mapped and written as before
    rf = tmp_path / "rf"
    run = run_tiers("map", "--stencil", "2d:2,1:4,4", *machine, "--oversubscribe",
                    "--rankfile", str(rf), timeout=120)
    assert run.returncode == 0, run.stderr
    assert len(rf.read_text().splitlines()) == 2


@needs_mpirun
@pytest.mark.parametrize("form", ["program", "launcher-line"])
def test_map_launch_dry_run_prints_a_line_that_works_when_pasted(tmp_path, native_bin, form):
    if UNDER_MPICH and form == "launcher-line":
        pytest.skip("an Open MPI mpirun line; the tools are MPICH programs here")
    who = native_bin("tiers-whoami")
    tab = tmp_path / "t.json"
    cmd = [who] if form == "program" else ["mpirun", "-n", "4", "--oversubscribe", who]
    run = run_tiers("map", "--stencil", "2d:2,2:400,4", "--oversubscribe", "--table", str(tab),
                    "--launch", "--dry-run", "--", *cmd, timeout=120)
    assert run.returncode == 0, run.stderr
    assert '"tiers.whoami/1"' not in run.stdout          # nothing ran
    line = run.stdout.strip().splitlines()[-1]
    pasted = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=120)
    assert pasted.returncode == 0, (line, pasted.stderr)
    doc = json.loads(next(ln for ln in pasted.stdout.splitlines() if "tiers.whoami/1" in ln))
    table = json.loads(tab.read_text())["ranks"]
    assert {r["rank"]: r["cpuset"] for r in doc["ranks"]} == \
        {e["rank"]: str(e["pu"]) for e in table}
    # the files the line names were kept for it; nothing else is left
    folder = Path(next(w for w in line.split() if "tiers-map-launch-" in w)).parent
    shutil.rmtree(folder)


def test_dry_run_goes_with_launch():
    assert_one_line_error(run_tiers("map", "--stencil", "2d:2,1:4,4", "--dry-run"),
                          "--dry-run goes with --launch")
