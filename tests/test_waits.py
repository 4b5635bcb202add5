"""Waits that do not collapse: with a busy process beside them, the tiers
spin barrier, the hybrid team barrier and the team reductions still
complete, correctly, and the spin barrier does not fall to milliseconds an
episode (it did when its waiters yielded the CPU to the neighbour).

The timing check is a gross-collapse check only (spin barrier within 20x
the pthread barrier measured in the same run, where a collapse was 100x to
1000x); the real targets are in bench/barrier_noise.  The neighbour is a
real CPU-bound process started by the test and always killed."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from conftest import run_app, run_tiers

COUNT = 5


@contextlib.contextmanager
def busy_neighbour(cpu: int | None = None):
    """A CPU-bound Python process for the duration of the block, pinned to
    OS CPU ``cpu`` when given; always killed."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        if cpu is not None:
            os.sched_setaffinity(proc.pid, {cpu})
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _median(doc: dict, name: str, threads: int = 2) -> float:
    for row in doc["summary"]["rows"]:
        if row["name"] == name and row["threads"] == threads:
            return row["median_us"]
    raise AssertionError(f"no {name} figure at {threads} threads")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_spin_barrier_does_not_collapse_beside_a_busy_process(tmp_path):
    out = tmp_path / "sync.json"
    cpus = sorted(os.sched_getaffinity(0))
    # The probe pins its two threads compactly (the first two PUs); the
    # neighbour shares the second thread's CPU.
    with busy_neighbour(cpus[1]):
        run = run_tiers("probe", "sync", "--threads", "2", "--tests", "barriers", "--quick",
                        "--json", str(out), timeout=300)
    assert run.returncode == 0, run.stderr
    import json

    doc = json.loads(out.read_text())
    spin, pthread = _median(doc, "spin"), _median(doc, "pthread")
    assert spin > 0 and pthread > 0
    assert spin <= 20 * pthread, (spin, pthread)
    # the noise check ran first and is in the document
    noise = doc["noise"]
    assert noise["verdict"] in ("quiet", "busy")
    if noise["verdict"] == "busy":
        assert noise["summary"] in doc["warnings"]


@pytest.mark.parametrize("ranks,threads", [(1, 2), (2, 2)])
def test_team_barrier_and_reductions_exact_beside_a_busy_process(ranks, threads):
    """Team threads that must sleep (more threads than free CPUs, and a
    thread 12 ms late every other round) still pass every barrier in order
    and reduce exactly."""
    with busy_neighbour():
        doc = run_app("tiers-hybrid-check", ranks, threads, "--rounds", "6",
                      "--delay-us", "12000", timeout=300)
    n = ranks * threads          # thread t of rank r contributed g = r*T + t + 1
    base = 2**40
    for i in range(COUNT):
        m = i + 1
        assert doc["sum_double"][i] == n * (n + 1) // 2 * m
        assert doc["max_double"][i] == n * m
        assert doc["min_double"][i] == m
        assert doc["sum_int64"][i] == base * n + n * (n + 1) // 2 * m
        assert doc["min_int64"][i] == base + m
    bar = doc["barrier"]
    assert bar["rounds"] == 6 and bar["violations"] == 0
    assert bar["min_slack_s"] >= 0.0
    assert doc["failures"] == [] and doc["ok"] is True
