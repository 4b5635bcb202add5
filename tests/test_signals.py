"""Signals to tiers reach the whole job it started, and nothing of the job
survives: no process, no /dev/shm segment, no Open MPI session folder --
also when tiers itself is killed outright (SIGKILL) or when the launcher is.

Every run carries a unique marker in its environment (inherited by tiers,
its watchdog, mpirun and every rank), so the test finds exactly the
processes of its own job in /proc; the shared-memory files are the ones
those processes map while the job runs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = pytest.mark.skipif(not shutil.which("mpicc") or not shutil.which("mpirun"),
                                reason="needs mpicc and mpirun")

SLEEPER_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
/* An MPI program that runs until it is stopped: an allreduce every 50 ms. */
int main(int argc, char **argv)
{
    int rank, x = 1, y = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (;;) {
        MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        usleep(50000);
    }
    MPI_Finalize();
    return 0;
}
"""

MARK_VAR = "TIERS_TEST_JOB_MARK"


@pytest.fixture(scope="module")
def sleeper(tmp_path_factory):
    d = tmp_path_factory.mktemp("sleeper")
    src = d / "sleeper.c"
    src.write_text(SLEEPER_C)
    exe = d / "tiers-test-sleeper"
    subprocess.run(["mpicc", "-O1", "-o", str(exe), str(src)], check=True, timeout=120)
    return str(exe)


def _marked(mark: str) -> dict[int, str]:
    """PID -> command name of every live process carrying ``mark``."""
    needle = f"{MARK_VAR}={mark}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                st = f.read().decode("ascii", "replace")
            with open(f"/proc/{entry}/comm", encoding="utf-8", errors="replace") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if st[st.rfind(")") + 2:][:1] in ("Z", "X"):
            continue
        if needle in env.split(b"\0"):
            found[int(entry)] = comm
    return found


def _shm_of(pids) -> set[str]:
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    i = line.find("/dev/shm/")
                    if i >= 0:
                        out.add(line[i:].strip().removesuffix(" (deleted)"))
        except OSError:
            pass
    return {p for p in out if os.path.exists(p)}


def _start(args, mark, tmp_path):
    env = dict(os.environ)
    env[MARK_VAR] = mark
    return subprocess.Popen([sys.executable, "-m", "tiers", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                            start_new_session=True)


def _wait_for_job(proc, mark, ranks, rank_name, timeout=90.0):
    """Wait until ``ranks`` processes named ``rank_name`` of the job map
    their shared memory; return (shm files, mpirun pids)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"tiers ended early ({proc.returncode}): {err[-2000:]}")
        procs = _marked(mark)
        rank_pids = [p for p, c in procs.items() if c == rank_name]
        if len(rank_pids) >= ranks:
            shm = _shm_of(rank_pids)
            if shm:
                return shm, [p for p, c in procs.items() if c in ("mpirun", "orterun")]
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"the job did not start {ranks} ranks of {rank_name} in time")


def _session_dirs(launchers) -> list[str]:
    out = []
    for base in {os.environ.get("TMPDIR") or "/tmp", "/tmp"}:
        try:
            tops = os.listdir(base)
        except OSError:
            continue
        for top in tops:
            if top.startswith(("ompi.", "prte.")):
                for pid in launchers:
                    for leaf in (f"pid.{pid}", f"dvm.{pid}"):
                        if os.path.exists(os.path.join(base, top, leaf)):
                            out.append(os.path.join(base, top, leaf))
    return out


def _assert_job_gone(mark, shm, launchers, within=15.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = _marked(mark)
        files = [f for f in shm if os.path.exists(f)]
        dirs = _session_dirs(launchers)
        if not left and not files and not dirs:
            return
        time.sleep(0.2)
    for pid in left:          # do not leave them running for the next tests
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, f"processes of the job survived: {left}"
    assert not files, f"shared-memory files of the job survived: {files}"
    assert not dirs, f"session folders of the job survived: {dirs}"


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("tiers")]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    return lines[0]


SIGNALS = [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)]


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("sig,code", SIGNALS + [(signal.SIGKILL, -signal.SIGKILL)],
                         ids=["TERM", "INT", "HUP", "KILL"])
def test_trace_job_stops_with_tiers(tmp_path, sleeper, ranks, sig, code):
    mark = uuid.uuid4().hex
    proc = _start(["trace", "--out", "tr", "--", "mpirun", "--oversubscribe", "-n", str(ranks),
                   sleeper], mark, tmp_path)
    shm, launchers = _wait_for_job(proc, mark, ranks, "tiers-test-slee")
    assert launchers
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    if sig != signal.SIGKILL:
        assert signal.Signals(sig).name in _one_line(err)
    _assert_job_gone(mark, shm, launchers)


@pytest.mark.parametrize("ranks", [2, 4])
def test_kill_9_of_mpirun_under_trace_leaves_nothing(tmp_path, sleeper, ranks):
    mark = uuid.uuid4().hex
    proc = _start(["trace", "--out", "tr", "--", "mpirun", "--oversubscribe", "-n", str(ranks),
                   sleeper], mark, tmp_path)
    shm, launchers = _wait_for_job(proc, mark, ranks, "tiers-test-slee")
    for pid in launchers:
        os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL, err
    _assert_job_gone(mark, shm, launchers)


def _probe_net_args(ranks):
    return ["probe", "net", "-n", str(ranks), "--tests", "pingpong", "--sizes", "4M",
            "--iters", "1000000"]


def _bench_args(ranks):
    return ["bench", "jacobi3d", "--ranks", str(ranks), "--threads", "1", "--size", "64",
            "--iters", "1000000", "--timeout", "600"]


@pytest.mark.parametrize("what,rank_name,sig,code", [
    ("net", "tiers-probe-net", signal.SIGTERM, 143),
    ("net", "tiers-probe-net", signal.SIGKILL, -signal.SIGKILL),
    ("bench", "tiers-jacobi3d", signal.SIGINT, 130),
    ("bench", "tiers-jacobi3d", signal.SIGKILL, -signal.SIGKILL),
])
@pytest.mark.parametrize("ranks", [2, 4])
def test_long_measurements_stop_with_tiers(tmp_path, what, rank_name, sig, code, ranks):
    from tiers import native

    tool = rank_name
    try:
        native.tool_path(tool)
    except Exception:  # noqa: BLE001 - no such tool in this build
        pytest.skip(f"no {tool}")
    mark = uuid.uuid4().hex
    args = _probe_net_args(ranks) if what == "net" else _bench_args(ranks)
    proc = _start(args, mark, tmp_path)
    shm, launchers = _wait_for_job(proc, mark, ranks, rank_name[:15])
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    if sig != signal.SIGKILL:
        assert signal.Signals(sig).name in _one_line(err)
    _assert_job_gone(mark, shm, launchers)
