"""The hybrid runtime (libtiers-hybrid) under real mpirun: hybrid barrier,
hybrid reductions and halo exchange with several processes and threads,
checked by tiers-hybrid-check (native/tests/mpi/test_hybrid_mpi.c)."""

from __future__ import annotations

import pytest

from conftest import run_app

CHECK = "tiers-hybrid-check"
COUNT = 5


def _run(ranks: int, threads: int, *args: str, pin: str = "none", check: bool = True):
    return run_app(CHECK, ranks, threads, *args, pin=pin, check=check)


@pytest.mark.parametrize("ranks,threads", [(2, 2), (3, 2), (1, 2), (3, 1)])
def test_reductions_exact(ranks, threads):
    doc = _run(ranks, threads, "--rounds", "8", "--delay-us", "1000")
    assert doc["ranks"] == ranks and doc["threads"] == threads
    n = ranks * threads          # thread t of rank r contributed g = r*T + t + 1
    base = 2**40
    for i in range(COUNT):
        m = i + 1
        assert doc["sum_double"][i] == n * (n + 1) // 2 * m
        assert doc["max_double"][i] == n * m
        assert doc["min_double"][i] == m
        assert doc["sum_int64"][i] == base * n + n * (n + 1) // 2 * m
        assert doc["max_int64"][i] == base + n * m
        assert doc["min_int64"][i] == base + m
    assert doc["failures"] == [] and doc["ok"] is True


@pytest.mark.parametrize("ranks,threads", [(2, 2), (3, 2)])
def test_barrier_orders_every_thread_of_every_rank(ranks, threads):
    rounds = 12
    doc = _run(ranks, threads, "--rounds", str(rounds), "--delay-us", "3000")
    bar = doc["barrier"]
    assert bar["rounds"] == rounds
    assert bar["violations"] == 0
    # The earliest departure follows the latest arrival in every round.
    assert bar["min_slack_s"] >= 0.0


@pytest.mark.parametrize("ranks", [2, 3])
def test_halo_exchange_fills_every_face_ghost(ranks):
    doc = _run(ranks, 2, "--rounds", "1")
    for name in ("2d", "3d", "3d_overlap"):
        halo = doc["halo"][name]
        # every point of every rank's ghosted block was compared
        assert halo["checked"] > 0
        assert halo["wrong"] == 0, (name, halo)
    # 2-D 13x10 grid over ranks x 1 processes (MPI_Dims_create): x is cut
    # into blocks of 13 // ranks or one more; every ghosted block
    # (lx+2) x (10+2) was checked whole.
    blocks = [13 // ranks + (1 if b < 13 % ranks else 0) for b in range(ranks)]
    assert doc["halo"]["2d"]["checked"] == sum((lx + 2) * 12 for lx in blocks)


def test_timers_split_the_run():
    doc = _run(2, 2, "--rounds", "4", "--delay-us", "20000")
    times = doc["times_rank0"]
    assert set(times) == {"compute", "comm", "sync"}
    # Rank 0's threads wait in the barrier while rank 1's late thread sleeps
    # 20 ms in rounds 1 and 3: at least that much is synchronisation time.
    assert times["sync"] >= 0.04
    assert all(v >= 0 for v in times.values())


def test_too_many_threads_is_one_clear_error():
    import os

    cpus = len(os.sched_getaffinity(0))
    run = _run(1, cpus + 1, check=False)
    assert run.returncode != 0
    assert f"{cpus + 1} threads exceed the {cpus} PU" in run.stderr


def test_bad_option_is_one_line(native_bin):
    import subprocess

    proc = subprocess.run([native_bin(CHECK), "--bogus"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "tiers-hybrid-check: error: bad option --bogus (use --threads T, --pin "
        "none|compact|scatter, --rounds R, --delay-us D)"]
