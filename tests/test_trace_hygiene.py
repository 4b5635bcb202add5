"""tiers trace and its output folder: --force only ever clears a folder
tiers trace made, a program that does not exist leaves no folder, default
folders never collide, and a run stopped by --timeout or Ctrl-C says in one
line that its trace is incomplete and marks it so in summary.json."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import assert_one_line_error, run_tiers
from test_signals import MARK_VAR, SLEEPER_C

needs_mpi = pytest.mark.skipif(not shutil.which("mpicc") or not shutil.which("mpirun"),
                               reason="needs mpicc and mpirun")

PINGPONG = os.path.join(os.path.dirname(__file__), "programs", "trace_pingpong.c")


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    if not shutil.which("mpicc"):
        pytest.skip("needs mpicc")
    d = tmp_path_factory.mktemp("hygiene-programs")
    (d / "sleeper.c").write_text(SLEEPER_C)
    out = {}
    for name, src in (("pingpong", PINGPONG), ("sleeper", str(d / "sleeper.c"))):
        exe = d / f"tiers-test-{name}"
        subprocess.run(["mpicc", "-O1", "-o", str(exe), src], check=True, timeout=120)
        out[name] = str(exe)
    return out


def _mpirun(n, *program):
    return ["mpirun", "--oversubscribe", "-n", str(n), *program]


# -- --force ----------------------------------------------------------------

@needs_mpi
def test_force_refuses_a_folder_tiers_did_not_make(tmp_path, programs):
    mine = tmp_path / "results"
    mine.mkdir()
    (mine / "summary.json").write_text("my own file\n")
    (mine / "raw").mkdir()
    (mine / "raw" / "keep.txt").write_text("keep\n")
    r = run_tiers("trace", "--out", str(mine), "--force", "--",
                  *_mpirun(2, programs["pingpong"], "10"))
    assert_one_line_error(r, "was not made by tiers trace")
    assert r.returncode == 2
    assert (mine / "summary.json").read_text() == "my own file\n"
    assert (mine / "raw" / "keep.txt").read_text() == "keep\n"
    assert sorted(p.name for p in mine.iterdir()) == ["raw", "summary.json"]


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_force_replaces_a_trace_tiers_made(tmp_path, programs, n):
    out = tmp_path / "t"
    r = run_tiers("trace", "--out", str(out), "--", *_mpirun(4, programs["pingpong"], "10"))
    assert r.returncode == 0, r.stderr
    assert (out / ".tiers-trace").is_file()
    assert len(list((out / "raw").glob("rank-*.tev"))) == 4
    r = run_tiers("trace", "--out", str(out), "--", *_mpirun(n, programs["pingpong"], "10"))
    assert_one_line_error(r, "add --force")
    r = run_tiers("trace", "--out", str(out), "--force", "--",
                  *_mpirun(n, programs["pingpong"], "10"))
    assert r.returncode == 0, r.stderr
    # the old four rank files are gone, only the new run's are there
    assert len(list((out / "raw").glob("rank-*.tev"))) == n
    assert json.loads((out / "summary.json").read_text())["summary"]["ranks"] == n


# -- a program that does not exist ---------------------------------------------

@pytest.mark.parametrize("cmd", [["./no-such-program"], ["no-such-program-xyz"],
                                 ["mpirun", "-n", "2", "./no-such-program"]])
def test_missing_program_is_refused_before_any_folder(tmp_path, cmd):
    r = run_tiers("trace", "--", *cmd, cwd=tmp_path)
    assert_one_line_error(r, "no such program")
    assert list(tmp_path.iterdir()) == []          # no tiers-trace-* folder


@needs_mpi
def test_program_the_launcher_cannot_find_leaves_no_raw_folder(tmp_path):
    # a bare name: only mpirun finds out that it does not exist
    given = tmp_path / "given"
    given.mkdir()
    for out, made in ((tmp_path / "new", False), (given, True)):
        r = run_tiers("trace", "--out", str(out), "--",
                      *_mpirun(2, "no-such-program-xyz"), timeout=120)
        assert r.returncode != 0
        assert "before any rank was traced" in r.stderr
        assert not (out / "raw").exists()
        assert out.exists() == made                # a folder the user made stays
        if made:
            assert list(out.iterdir()) == []       # but nothing of tiers in it
    r = run_tiers("trace", "--", *_mpirun(2, "no-such-program-xyz"), cwd=tmp_path,
                  timeout=120)
    assert r.returncode != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["given"]


# -- default folders ------------------------------------------------------------

def test_default_folders_never_collide(tmp_path, monkeypatch):
    from tiers import trace

    monkeypatch.chdir(tmp_path)
    made = [trace._new_default_folder() for _ in range(5)]   # well within one second
    assert len(set(made)) == 5
    assert all(p.is_dir() and p.parent == tmp_path for p in made)
    # within one second: the stem, then the stem with -2, -3 ... in order
    stem_len = len("tiers-trace-YYYYmmdd-HHMMSS")
    stems = [p.name[:stem_len] for p in made]
    for stem in dict.fromkeys(stems):
        names = [p.name for p in made if p.name[:stem_len] == stem]
        assert names == [stem] + [f"{stem}-{k}" for k in range(2, len(names) + 1)]


@needs_mpi
def test_two_traces_started_together_get_two_folders(tmp_path, programs):
    cmd = [sys.executable, "-m", "tiers", "trace", "--", *_mpirun(2, programs["pingpong"], "20")]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    folders = sorted(tmp_path.glob("tiers-trace-*"))
    assert len(folders) == 2
    for f in folders:
        assert (f / ".tiers-trace").is_file()
        assert json.loads((f / "summary.json").read_text())["summary"]["ranks"] == 2


# -- stopped runs ---------------------------------------------------------------

def _incomplete(folder, how: str) -> dict:
    doc = json.loads((folder / "summary.json").read_text())
    assert doc["params"]["complete"] is False
    assert how in doc["params"]["stopped"]
    assert any("incomplete" in w for w in doc["warnings"])
    return doc


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_timeout_marks_the_trace_incomplete(tmp_path, programs, n):
    out = tmp_path / "t"
    r = run_tiers("trace", "--out", str(out), "--timeout", "8", "--",
                  *_mpirun(n, programs["sleeper"]), timeout=180)
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("tiers")]
    assert len(lines) == 1 and "timed out after 8 s" in lines[0], r.stderr
    if "before any rank was traced" in lines[0]:     # a very slow start
        assert not (out / "raw").exists()
        return
    assert "incomplete" in lines[0]
    doc = _incomplete(out, "timed out")
    assert doc["summary"]["ranks"] == n


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_ctrl_c_marks_the_trace_incomplete(tmp_path, programs, n):
    out = tmp_path / "t"
    env = dict(os.environ)
    env[MARK_VAR] = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-m", "tiers", "trace", "--out", str(out), "--",
                             *_mpirun(n, programs["sleeper"])], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(list((out / "raw").glob("rank-*"))) < n:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    time.sleep(1.0)    # every rank is past MPI_Init and tracing
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.startswith("tiers")]
    assert len(lines) == 1, err
    assert "stopped by SIGINT" in lines[0] and "incomplete" in lines[0], lines[0]
    doc = _incomplete(out, "SIGINT")
    assert doc["summary"]["ranks"] == n
