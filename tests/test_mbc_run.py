"""``tiers mbc run``: an unmodified MPI program with libtiers-mbc-mpi.so
preloaded, its exit status, its traffic statistics, and its composition
with ``tiers trace``.

Two libraries are used.  The plumbing (preload, LD_PRELOAD kept and
composed, the statistics files gathered from a temporary folder that is
removed, exit status, signals) is checked with a stand-in library built
here from tests/programs/mbc_standin.c: it counts the calls it sees in the
real library's file format and carries nothing.  The tests marked
``real_library`` run the installed libtiers-mbc-mpi.so itself; they are
skipped only where the native folder tiers uses lacks it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import PROGRAMS, assert_one_line_error, build_program, needs_mpicc, run_tiers

pytestmark = needs_mpicc

LIB = "libtiers-mbc-mpi.so"


def _real_library() -> Path | None:
    from tiers import native
    p = native.lib_path(LIB)
    return p if p.is_file() else None


real_library = pytest.mark.skipif(_real_library() is None,
                                  reason=f"the native folder tiers uses has no {LIB}")


def mpirun(n: int) -> list[str]:
    """The launcher words for ``n`` ranks on this machine."""
    from tiers import launch
    if launch.detect().kind == "mpich":
        return ["mpiexec", "-n", str(n)]
    return ["mpirun", "--oversubscribe", "-n", str(n)]


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    d = tmp_path_factory.mktemp("mbc-run")
    standin = d / "standin.so"
    subprocess.run(["mpicc", "-O1", "-shared", "-fPIC", "-o", str(standin),
                    str(PROGRAMS / "mbc_standin.c"), "-ldl"], check=True, capture_output=True)
    return {"standin": str(standin), "traffic": build_program(d, "mbc_traffic"), "dir": d}


def standin_env(progs, **more) -> dict:
    return {"TIERS_MBC_MPI_LIB": progs["standin"], **more}


def plain_run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def expected_buckets(n: int) -> list[tuple[int, int]]:
    """(messages, bytes) per bucket of mbc_traffic on n ranks: per rank one
    empty message, three of 40 B and two of 8000 B."""
    return [(n, 0), (3 * n, 120 * n), (0, 0), (2 * n, 16000 * n), (0, 0), (0, 0), (0, 0)]


# --------------------------------------------------------------------------
# plumbing, with the stand-in library


@pytest.mark.parametrize("n", [2, 4])
def test_stats_of_a_known_traffic_and_the_program_output(tmp_path, progs, n):
    plain = plain_run([*mpirun(n), progs["traffic"]])
    assert plain.returncode == 0, plain.stderr
    doc_path = tmp_path / "mbc.json"
    run = run_tiers("mbc", "run", "--json", str(doc_path), "--format", "plain", "--",
                    *mpirun(n), progs["traffic"], env=standin_env(progs, TMPDIR=str(tmp_path)))
    assert run.returncode == 0, run.stderr
    # the program printed what it prints without the library
    assert plain.stdout.splitlines()[0] in run.stdout.splitlines()
    doc = json.loads(doc_path.read_text())
    assert doc["schema"] == "tiers.mbc.run/1"
    s = doc["summary"]
    assert (s["ranks"], s["size"], s["missing_ranks"]) == (n, n, [])
    assert [(b["messages"], b["bytes"]) for b in s["buckets"]] == expected_buckets(n)
    assert [b["max_bytes"] for b in s["buckets"]] == [0, 64, 1024, 16384, 262144, 4194304, None]
    assert s["messages"] == 6 * n and s["bytes"] == 16120 * n
    assert s["fifo_share"] == 1.0 and s["remote_write_share"] == 0.0
    assert s["buckets"][2]["fifo_share"] is None          # no message: no share
    assert s["wildcard_receives"] == n
    assert s["passed_to_mpi"] == {"MPI_Barrier": n}
    assert s["carried"]["MPI_Send"] == n and s["carried"]["MPI_Isend"] == 5 * n
    assert [r["rank"] for r in doc["samples"]["ranks"]] == list(range(n))
    # the table: one row per bucket with its counts
    row = [ln.split() for ln in run.stdout.splitlines() if ln.strip().startswith("1 - 64 B")]
    assert row and row[0][4:6] == [str(3 * n), f"{120 * n}"], run.stdout
    assert f"wildcard receives {n}" in run.stdout
    # the statistics folder is gone
    assert not list(tmp_path.glob("tiers-mbc-stats-*"))


def test_exit_status_of_the_program_is_returned(tmp_path, progs):
    run = run_tiers("mbc", "run", "--stats", "--", *mpirun(2), progs["traffic"], "5",
                    env=standin_env(progs, TMPDIR=str(tmp_path)))
    assert run.returncode == 5, run.stderr
    assert "Traceback" not in run.stderr
    # statistics of the ranks that finalised are still printed
    assert "wildcard receives 2" in run.stdout
    assert not list(tmp_path.glob("tiers-mbc-stats-*"))


def test_without_stats_nothing_is_gathered(tmp_path, progs):
    run = run_tiers("mbc", "run", "--", *mpirun(2), progs["traffic"],
                    env=standin_env(progs, TMPDIR=str(tmp_path)))
    assert run.returncode == 0, run.stderr
    assert "received sum" in run.stdout and "wildcard" not in run.stdout
    assert not list(tmp_path.glob("tiers-mbc-stats-*"))


def test_json_on_stdout_is_the_document_alone(tmp_path, progs):
    run = run_tiers("mbc", "run", "--format", "json", "--", *mpirun(2), progs["traffic"],
                    env=standin_env(progs))
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["summary"]["messages"] == 12
    assert "received sum" in run.stderr      # the program's own output moved to stderr


def test_show_and_report_render_the_document(tmp_path, progs):
    doc_path = tmp_path / "mbc.json"
    run = run_tiers("mbc", "run", "--json", str(doc_path), "--", *mpirun(2), progs["traffic"],
                    env=standin_env(progs))
    assert run.returncode == 0, run.stderr
    show = run_tiers("show", "--format", "csv", str(doc_path))
    assert show.returncode == 0, show.stderr
    lines = show.stdout.splitlines()
    assert "size,messages,bytes,remote write,FIFO" in lines
    assert "1 - 16 KiB,4,31.2 KiB,0.0 %,100.0 %" in lines
    assert "MPI_Barrier,0,2" in lines
    rep = run_tiers("report", str(doc_path), "-o", str(tmp_path / "r.html"))
    assert rep.returncode == 0, rep.stderr
    html = (tmp_path / "r.html").read_text()
    assert "tiers mbc run" in html and "wildcard receives 2" in html


def test_preload_composition_rules():
    """An LD_PRELOAD already set (in the environment or by the command's
    launcher options) stays in front: the tracer's place when both run."""
    from tiers import mbcrun
    assert mbcrun.compose_preload("/a/tracer.so", "/b/mbc.so") == "/a/tracer.so:/b/mbc.so"
    assert mbcrun.compose_preload("/b/mbc.so /c.so", "/b/mbc.so") == "/b/mbc.so:/c.so"
    assert mbcrun.compose_preload(None, "/b/mbc.so") == "/b/mbc.so"
    assert mbcrun.command_preload(["mpirun", "-x", "LD_PRELOAD=/t.so", "-n", "2", "./a"]) \
        == "/t.so"
    assert mbcrun.command_preload(["mpiexec.hydra", "-genv", "LD_PRELOAD", "/t.so", "./a"]) \
        == "/t.so"
    assert mbcrun.command_preload(["srun", "--export=ALL,LD_PRELOAD=/t.so", "./a"]) == "/t.so"
    assert mbcrun.command_preload(["mpirun", "-n", "2", "true", "-x", "LD_PRELOAD=/no"]) is None


def test_aggregate_adds_ranks_and_names_the_missing_ones():
    from tiers import mbcrun
    from tiers.errors import TiersError

    def rank(r, small, big, rw):
        b = [{"max_bytes": m, "messages": 0, "bytes": 0, "remote_write": 0, "fifo": 0}
             for m in mbcrun.BUCKETS]
        b[1].update(messages=small, bytes=10 * small, fifo=small)
        b[6].update(messages=big, bytes=(5 << 20) * big, remote_write=rw, fifo=big - rw)
        return {"rank": r, "size": 4, "buckets": b, "unexpected": r, "wildcard_receives": 1,
                "passed_to_mpi": {"MPI_Bcast": 2}, "carried": {"MPI_Send": small + big}}

    s = mbcrun.aggregate([rank(0, 3, 2, 1), rank(2, 5, 2, 2), rank(3, 0, 0, 0)])
    assert (s["ranks"], s["size"], s["missing_ranks"]) == (3, 4, [1])
    assert s["buckets"][1]["messages"] == 8 and s["buckets"][1]["bytes"] == 80
    assert s["buckets"][6]["remote_write_share"] == 0.75
    assert s["buckets"][6]["fifo_share"] == 0.25
    assert s["messages"] == 12 and s["remote_write_share"] == 3 / 12
    assert (s["unexpected"], s["wildcard_receives"]) == (5, 3)
    assert s["passed_to_mpi"] == {"MPI_Bcast": 6} and s["carried"] == {"MPI_Send": 12}
    bad = rank(0, 1, 0, 0)
    bad["buckets"][2]["max_bytes"] = 2048
    with pytest.raises(TiersError, match="unknown size bucket 2048"):
        mbcrun.aggregate([bad])


@pytest.mark.parametrize("order", ["trace-outside", "trace-inside"])
def test_composes_with_tiers_trace_tracer_first(tmp_path, progs, order):
    """Both libraries see the program: the tracer (first) records its
    MPI_Send calls, and the stand-in behind it still counts them through
    the PMPI_ names the tracer calls."""
    n = 2
    tiers_cmd = [sys.executable, "-m", "tiers"]
    mbc = ["mbc", "run", "--json", str(tmp_path / "mbc.json"), "--"]
    trace = ["trace", "--out", str(tmp_path / "tr"), "--"]
    job = [*mpirun(n), progs["traffic"]]
    if order == "trace-outside":
        run = run_tiers(*trace, *tiers_cmd, *mbc, *job, env=standin_env(progs))
    else:
        run = run_tiers(*mbc, *tiers_cmd, *trace, *job, env=standin_env(progs))
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "tr" / "summary.json").read_text())
    stats = json.loads((tmp_path / "mbc.json").read_text())["summary"]
    # the program's calls, as the tracer saw them
    prof = run_tiers("trace", "stats", str(tmp_path / "tr"))
    assert prof.returncode == 0, prof.stderr
    calls = {ln.split()[0]: int(ln.split()[1]) for ln in prof.stdout.splitlines()
             if ln.startswith("MPI_") and len(ln.split()) > 1 and ln.split()[1].isdigit()}
    assert calls["MPI_Send"] == n and calls["MPI_Isend"] == 5 * n
    assert summary["summary"]["p2p_messages"] == 6 * n
    # ... and as the library behind it saw them (plus the tracer's own
    # messages, which go through the PMPI_ names as well)
    assert stats["carried"]["MPI_Isend"] >= 5 * n
    assert stats["buckets"][3]["messages"] >= 2 * n


# --------------------------------------------------------------------------
# bad input and signals


def test_bad_commands_are_one_line(tmp_path, progs):
    assert_one_line_error(run_tiers("mbc", "run", "--stats"), "no command to run")
    assert_one_line_error(run_tiers("mbc", "run", "--", *mpirun(2), str(tmp_path / "nope")),
                          "no such program")
    r = run_tiers("mbc", "run", "--", *mpirun(2), progs["traffic"],
                  env={"TIERS_MBC_MPI_LIB": str(tmp_path / "missing.so")})
    assert_one_line_error(r, "missing.so: no such file")
    (tmp_path / "plain").write_text("a file, not a folder\n")
    r = run_tiers("mbc", "run", "--json", str(tmp_path / "plain" / "x.json"), "--",
                  *mpirun(2), progs["traffic"], env=standin_env(progs))
    assert_one_line_error(r, "--json")
    assert r.returncode == 2 and "received sum" not in r.stdout   # refused before the run
    r = run_tiers("mbc", "run", "--timeout", "-1", "--", *mpirun(2), progs["traffic"])
    assert_one_line_error(r, "--timeout")
    assert r.returncode == 2


def test_a_program_that_is_not_mpi_gives_no_statistics(tmp_path, progs):
    r = run_tiers("mbc", "run", "--stats", "--", *mpirun(2), "true", env=standin_env(progs))
    assert_one_line_error(r, "no rank wrote MBC statistics")


@pytest.mark.parametrize("ranks", [2, 4])
def test_sigterm_stops_the_whole_job(tmp_path, progs, ranks):
    from test_signals import SLEEPER_C, _assert_job_gone, _one_line, _start, _wait_for_job
    src = tmp_path / "sleeper.c"
    src.write_text(SLEEPER_C)
    exe = tmp_path / "tiers-test-sleeper"
    subprocess.run(["mpicc", "-O1", "-o", str(exe), str(src)], check=True, timeout=120)
    mark = uuid.uuid4().hex
    os.environ["TIERS_MBC_MPI_LIB"] = progs["standin"]
    try:
        proc = _start(["mbc", "run", "--stats", "--", *mpirun(ranks), str(exe)], mark, tmp_path)
    finally:
        del os.environ["TIERS_MBC_MPI_LIB"]
    shm, launchers = _wait_for_job(proc, mark, ranks, "tiers-test-slee")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "SIGTERM" in _one_line(err)
    _assert_job_gone(mark, shm, launchers)


def test_timeout_stops_the_job_in_one_line(tmp_path, progs):
    from test_signals import SLEEPER_C
    src = tmp_path / "sleeper.c"
    src.write_text(SLEEPER_C)
    exe = tmp_path / "sleeper"
    subprocess.run(["mpicc", "-O1", "-o", str(exe), str(src)], check=True, timeout=120)
    r = run_tiers("mbc", "run", "--stats", "--timeout", "3", "--", *mpirun(2), str(exe),
                  env=standin_env(progs, TMPDIR=str(tmp_path)))
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("tiers")]
    assert lines == [lines[0]] and "timed out after 3 s" in lines[0], r.stderr
    assert "before any rank wrote its statistics" in lines[0]
    assert not list(tmp_path.glob("tiers-mbc-stats-*"))


# --------------------------------------------------------------------------
# the real library


@real_library
@pytest.mark.parametrize("n", [2, 4])
def test_real_library_carries_a_known_traffic(tmp_path, progs, n):
    plain = plain_run([*mpirun(n), progs["traffic"]])
    assert plain.returncode == 0, plain.stderr
    doc_path = tmp_path / "mbc.json"
    run = run_tiers("mbc", "run", "--json", str(doc_path), "--", *mpirun(n), progs["traffic"],
                    env={"TMPDIR": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert plain.stdout.splitlines()[0] in run.stdout.splitlines()
    s = json.loads(doc_path.read_text())["summary"]
    assert (s["ranks"], s["missing_ranks"]) == (n, [])
    assert [(b["messages"], b["bytes"]) for b in s["buckets"]] == expected_buckets(n)
    for b in s["buckets"]:       # every message went one way or the other
        assert b["remote_write"] + b["fifo"] == b["messages"], b
    assert s["wildcard_receives"] == n
    assert s["carried"].get("MPI_Send") == n and s["carried"].get("MPI_Isend") == 5 * n
    assert not list(tmp_path.glob("tiers-mbc-stats-*"))


@real_library
@pytest.mark.parametrize("order", ["trace-outside", "trace-inside"])
def test_real_library_composes_with_the_tracer(tmp_path, progs, order):
    n = 2
    tiers_cmd = [sys.executable, "-m", "tiers"]
    mbc = ["mbc", "run", "--json", str(tmp_path / "mbc.json"), "--"]
    trace = ["trace", "--out", str(tmp_path / "tr"), "--"]
    job = [*mpirun(n), progs["traffic"]]
    if order == "trace-outside":
        run = run_tiers(*trace, *tiers_cmd, *mbc, *job)
    else:
        run = run_tiers(*mbc, *tiers_cmd, *trace, *job)
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "tr" / "summary.json").read_text())["summary"]
    assert summary["p2p_messages"] == 6 * n
    prof = run_tiers("trace", "stats", str(tmp_path / "tr"))
    calls = {ln.split()[0]: int(ln.split()[1]) for ln in prof.stdout.splitlines()
             if ln.startswith("MPI_") and len(ln.split()) > 1 and ln.split()[1].isdigit()}
    assert calls["MPI_Send"] == n and calls["MPI_Isend"] == 5 * n   # the program's, only
    stats = json.loads((tmp_path / "mbc.json").read_text())["summary"]
    assert stats["carried"].get("MPI_Isend", 0) >= 5 * n
