"""tiers trace --policy sync: equal overhead on every rank ("condition C").

Seed 003 pads every swap-out to the same length tau so that all ranks carry
the same tracer overhead at the same points of the program.  A write that
overruns tau (a loaded machine, a slow disk) would break that; the tracer
then makes every rank carry the overrun at the same swap-out (one
reduction of the accumulated swap-out time) and raises tau.  These tests
inject a write that is 50 ms late on one rank (the test-only knob
TIERS_TRACE_TEST_SLOW_WRITE=RANK:MS:K) and check the accounting: the
accumulated swap-out times of all ranks agree after that swap-out, far
closer than the 50 ms a rank-local padding would leave between them.  The
margins are fractions of the injected 50 ms, not measured figures.

They also check --swap-every F: a swap-out right after every F-th
collective on MPI_COMM_WORLD, as in the seed's matrix multiply (Fig. 4).
"""

from __future__ import annotations

import subprocess

import pytest

from conftest import assert_one_line_error, run_tiers
from test_trace import MPIRUN, PROGRAMS, needs_mpi, summary

SLOW_MS = 50


@pytest.fixture(scope="module")
def pingpong(tmp_path_factory):
    exe = tmp_path_factory.mktemp("trace-sync") / "trace_pingpong"
    subprocess.run(["mpicc", "-O1", "-o", str(exe), str(PROGRAMS / "trace_pingpong.c")],
                   check=True, capture_output=True)
    return str(exe)


def swap_records(folder):
    """Return {rank: [(total_ns, tau_ns, flags), ...]} from the raw files."""
    from tiers.trace import raw
    return {log.rank: [(p[2], p[4], p[3]) for kind, _th, _f, _t, p in log.events
                       if kind == raw.SWAP]
            for log in raw.read_all(folder)}


def accumulated(seq):
    out, total = [], 0
    for total_ns, _tau, _flags in seq:
        total += total_ns
        out.append(total)
    return out


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_late_write_is_carried_by_every_rank(tmp_path, pingpong, n):
    # 400 round trips, a barrier every 10: 40 + 1 world collectives, a
    # swap-out after every 10th (4 swap-outs); rank 1's 2nd write is 50 ms late.
    folder = tmp_path / "t"
    run = run_tiers("trace", "--out", str(folder), "--policy", "sync", "--tau", "0.002",
                    "--swap-every", "10", "--", *MPIRUN, "-n", str(n),
                    "-x", f"TIERS_TRACE_TEST_SLOW_WRITE=1:{SLOW_MS}:2",
                    pingpong, "400", "8", "10")
    assert run.returncode == 0, run.stderr
    swaps = swap_records(folder)
    assert sorted(swaps) == list(range(n))
    assert all(len(s) == 4 for s in swaps.values()), swaps
    slow = SLOW_MS * 1_000_000
    for rank, seq in swaps.items():
        # the 1st swap-out is padded to the 2 ms tau, not more
        assert seq[0][1] == 2_000_000 and seq[0][0] < slow, (rank, seq)
        # every rank, not only rank 1, carries the late write by the 2nd swap-out
        assert accumulated(seq)[1] >= slow, (rank, seq)
        assert all(flags & 2 for _, _, flags in seq)      # equalised across ranks
        # after the overrun tau is raised to 1.5x the late write, on every rank
        assert seq[2][1] >= 1.5 * slow and seq[2][0] >= 1.5 * slow, (rank, seq)
    acc = [accumulated(swaps[r]) for r in range(n)]
    spread = max(max(a[k] for a in acc) - min(a[k] for a in acc) for k in range(4))
    # a rank-local padding would leave the others 50 ms behind rank 1
    assert spread < 0.4 * slow, acc
    s = summary(folder)["summary"]["swapouts"]
    assert s["count"] == 4 * n
    assert s["spread_s"] == pytest.approx(spread * 1e-9)
    assert s["spread_share"] == pytest.approx(s["spread_s"] / summary(folder)["summary"]
                                              ["duration_s"])
    assert "longer than tau 0.002 s; tau is now" in run.stderr
    st = run_tiers("trace", "stats", str(folder))
    assert st.returncode == 0 and "spread between ranks" in st.stdout


@needs_mpi
@pytest.mark.parametrize("n, every", [(2, 7), (3, 4)])
def test_swap_every_swaps_after_every_fth_world_collective(tmp_path, pingpong, n, every):
    # a barrier every 5 round trips: 100 round trips give 20 + 1 barriers
    folder = tmp_path / "t"
    run = run_tiers("trace", "--out", str(folder), "--swap-every", str(every), "--",
                    *MPIRUN, "-n", str(n), pingpong, "100", "8", "5")
    assert run.returncode == 0, run.stderr
    from tiers.trace import raw
    logs = raw.read_all(folder)
    assert len(logs) == n
    barrier = logs[0].functions.index("MPI_Barrier")
    for log in logs:
        assert log.info["swap_every"] == every
        barriers_done, at = 0, []
        for kind, _th, func, _t, _p in log.events:
            if kind == raw.LEAVE and func == barrier:
                barriers_done += 1
            elif kind == raw.ENTER and func == raw.FN_SWAPOUT:
                at.append(barriers_done)
        assert at == list(range(every, 21 + 1, every)), (log.rank, at)
    doc = summary(folder)
    assert doc["params"]["swap_every"] == every
    assert [r["swapouts"]["count"] for r in doc["samples"]["ranks"]] == [21 // every] * n
    # every Send still found its Recv: swapping out lost nothing
    assert doc["summary"]["matched_p2p_bytes"] == doc["summary"]["p2p_bytes"] == 2 * 100 * 8


def test_swap_every_bad_input(tmp_path):
    run = run_tiers("trace", "--swap-every", "0", "--out", str(tmp_path / "t"), "--", "true")
    assert_one_line_error(run, "--swap-every: 0 is below the minimum of 1")
    run = run_tiers("trace", "--swap-every", "3", "--policy", "full", "--out",
                    str(tmp_path / "t"), "--", "true")
    assert_one_line_error(run, "--swap-every goes with --policy auto or sync")
