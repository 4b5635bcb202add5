"""tiers trace when the output folder's disk fills up during the run.

The output folder is a 2 MiB tmpfs (mounted here; root only) and the
traced program makes a trace of several MiB.  The program must run on and
finish with its normal output and exit status 0; tiers must say in one line
that tracing stopped and that the trace is incomplete (no OTF2 library
noise, no traceback, no partial archive left behind); and what the ranks
wrote before the disk filled must read back as whole records, ending with
the tracer's record of why it stopped.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import run_tiers
from test_trace import MPIRUN, PROGRAMS, needs_mpi

ITERS = 20000          # ~160 bytes of trace per round trip and rank: ~3 MiB per rank


@pytest.fixture(scope="module")
def fill_program(tmp_path_factory):
    exe = tmp_path_factory.mktemp("trace-fill") / "trace_fill"
    subprocess.run(["mpicc", "-O1", "-o", str(exe), str(PROGRAMS / "trace_fill.c")],
                   check=True, capture_output=True)
    return str(exe)


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs; unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@needs_mpi
@pytest.mark.parametrize("n, policy", [(2, "full"), (4, "sync")])
def test_full_disk_stops_tracing_not_the_program(small_disk, fill_program, n, policy):
    folder = small_disk / "t"
    run = run_tiers("trace", "--out", str(folder), "--budget", "64K", "--policy", policy,
                    "--", *MPIRUN, "-n", str(n), fill_program, str(ITERS))
    # the program ran to its end, with its own output and exit status
    assert run.returncode == 0, run.stderr
    assert f"trace_fill: {ITERS} round trips, sum {ITERS * (ITERS + 1)}" in run.stdout
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in run.stderr and "[OTF2]" not in run.stderr, run.stderr
    stopped = [ln for ln in lines if "tracing stopped" in ln and ln.startswith("tiers trace:")]
    assert len(stopped) == 1, run.stderr
    assert "incomplete" in stopped[0] and "no space left" in stopped[0]
    # each rank's tracer says so at most once
    for r in range(n):
        assert sum(ln.startswith(f"tiers-trace: rank {r}:") for ln in lines) <= 1, run.stderr
    # no partial archive is left on the full disk
    assert not (folder / "traces.otf2").exists() and not (folder / "traces").exists()

    from tiers.trace import raw
    logs = raw.read_all(folder)
    assert [log.rank for log in logs] == list(range(n))
    for log in logs:
        assert not log.truncated, log.rank         # cut back to whole records
    write_errors = [log.rank for log in logs if log.stopped == "write error"]
    assert write_errors, [log.stopped for log in logs]
    send = logs[0].functions.index("MPI_Send")
    sends = sum(1 for kind, _th, f, _t, _p in logs[0].events if kind == raw.ENTER and f == send)
    # a good part of the run reads back, not all of it
    assert 1000 < sends < ITERS, sends

    # with room again, the incomplete trace reads back through tiers itself
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    st = run_tiers("trace", "stats", str(folder))
    assert st.returncode == 0, st.stderr
    assert "stopped: write error (incomplete)" in st.stdout
    row = next(ln for ln in st.stdout.splitlines() if ln.startswith("MPI_Send "))
    assert 2 * 1000 < int(row.split()[1]) < 2 * ITERS


def test_python_archive_writer_failure_is_one_line_and_leaves_stderr_alone(tmp_path, capfd,
                                                                         monkeypatch):
    """The Python archive writer (the fallback of tiers-trace-post): when
    OTF2 cannot create the archive, the error is one line with OTF2's own
    reason, taken through OTF2's error callback -- the process's fd 2 is not
    redirected (a library must not take a program's stderr), OTF2 prints
    nothing, no traceback follows when the half-open writer is collected,
    and no partial archive is left.  A later write into the cleared folder
    succeeds."""
    import gc
    from pathlib import Path

    from tiers.errors import TiersError
    from tiers.trace import raw, write_archive

    raw.write_synthetic(tmp_path, 600)
    logs = raw.read_all(Path(tmp_path))
    (tmp_path / "traces").write_text("in the way\n")   # OTF2's event directory
    calls = []
    real_dup2 = os.dup2
    monkeypatch.setattr(os, "dup2", lambda *a: calls.append(a) or real_dup2(*a))
    with pytest.raises(TiersError) as err:
        write_archive(logs, tmp_path)
    gc.collect()                                         # the writer's __del__ runs here
    monkeypatch.undo()
    out, stderr = capfd.readouterr()
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"cannot write the OTF2 archive in {tmp_path}")
    assert "Could not create archive trace directory" in msg, msg
    assert calls == []                                   # fd 2 never redirected
    assert stderr == "" and "Traceback" not in out, (out, stderr)
    assert not (tmp_path / "traces.otf2").exists() and not (tmp_path / "traces.def").exists()
    (tmp_path / "traces").unlink()
    assert write_archive(logs, tmp_path) == "traces.otf2"
    assert capfd.readouterr().err == ""
