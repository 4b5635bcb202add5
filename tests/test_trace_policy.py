"""tiers trace swap-out policies and buffer memory, under real mpirun.

The default policy (auto) keeps every event of a phase without collectives
on MPI_COMM_WORLD: the rank whose buffer fills swaps out alone there and the
summary counts those unsynchronised swap-outs; --policy sync keeps the
strict behaviour (tracing stops with one message).  The trace buffer is made
resident as the records reach it, not whole at MPI_Init.
"""

from __future__ import annotations

import collections
import json

import pytest

from conftest import build_program, needs_mpicc, run_tiers

MPIRUN = ["mpirun", "--oversubscribe"]

pytestmark = needs_mpicc


@pytest.fixture(scope="module")
def pingpong(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("policy-programs"), "trace_pingpong")


def trace(tmp_path, *args):
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), *args)
    doc = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").exists() \
        else None
    return run, doc


ROUNDS = 20_000


@pytest.mark.parametrize("n", [2, 3])
def test_default_policy_keeps_every_event_without_collectives(tmp_path, pingpong, n):
    # 20,000 round trips, no collective until the end: 80,000+ records of
    # at least 16 bytes each do not fit a 64K buffer many times over
    run, doc = trace(tmp_path, "--budget", "64K", "--", *MPIRUN, "-n", str(n), pingpong,
                     str(ROUNDS), "8", "0")
    assert run.returncode == 0, run.stderr
    assert "tracing stopped" not in run.stderr
    assert doc["params"]["policy"] == "auto"
    ranks = {r["rank"]: r for r in doc["samples"]["ranks"]}
    for r in (0, 1):
        assert ranks[r]["stopped"] is None
        assert ranks[r]["functions"]["MPI_Send"]["calls"] == ROUNDS
        assert ranks[r]["functions"]["MPI_Recv"]["calls"] == ROUNDS
        assert ranks[r]["functions"]["MPI_Send"]["bytes"] == 8 * ROUNDS
        assert ranks[r]["swapouts"]["unsynchronised"] > 0
    for r in range(2, n):   # idle ranks never filled their buffer
        assert ranks[r]["swapouts"]["unsynchronised"] == 0
        assert "MPI_Send" not in ranks[r]["functions"]
    s = doc["summary"]
    assert s["p2p_messages"] == 2 * ROUNDS
    assert s["matched_p2p_bytes"] == s["p2p_bytes"] == 2 * ROUNDS * 8
    assert s["swapouts"]["unsynchronised"] == sum(r["swapouts"]["unsynchronised"]
                                                  for r in ranks.values())
    assert s["stopped_ranks"] == []
    # the archive marks them: a region of their own, once per such swap-out
    import otf2

    entered = collections.Counter()
    with otf2.reader.open(str(tmp_path / "trace" / "traces.otf2")) as tr:
        for location, event in tr.events:
            if isinstance(event, otf2.events.Enter) and event.region.name.startswith("tiers_"):
                entered[(location.group.name, event.region.name)] += 1
    for r in range(n):
        assert entered[(f"MPI Rank {r}", "tiers_swapout_unsynchronised")] == \
            ranks[r]["swapouts"]["unsynchronised"]
        assert (entered[(f"MPI Rank {r}", "tiers_swapout_unsynchronised")]
                + entered[(f"MPI Rank {r}", "tiers_swapout")]) == ranks[r]["swapouts"]["count"]


@pytest.mark.parametrize("n", [2, 3])
def test_sync_policy_still_stops_on_overflow(tmp_path, pingpong, n):
    run, doc = trace(tmp_path, "--budget", "64K", "--policy", "sync", "--", *MPIRUN, "-n",
                     str(n), pingpong, str(ROUNDS), "8", "0")
    assert run.returncode == 0, run.stderr
    assert "filled up between two collectives" in run.stderr
    ranks = doc["samples"]["ranks"]
    assert any(r["stopped"] == "buffer overflow between collectives" for r in ranks)
    assert all(r["functions"].get("MPI_Send", {"calls": 0})["calls"] < ROUNDS for r in ranks)
    assert doc["summary"]["swapouts"]["unsynchronised"] == 0


@pytest.mark.parametrize("n", [2, 3])
def test_buffer_memory_follows_use(tmp_path, pingpong, n):
    # a small trace at a 64M budget: the buffer made resident stays at its
    # first chunk (1 MiB), far below the budget, on every rank
    run, doc = trace(tmp_path, "--budget", "64M", "--", *MPIRUN, "-n", str(n), pingpong,
                     "100", "8", "10")
    assert run.returncode == 0, run.stderr
    for r in doc["samples"]["ranks"]:
        mem = r["memory"]
        assert mem["buffer_reserved_bytes"] == 64 << 20
        assert mem["buffer_resident_bytes"] <= 1 << 20


def test_buffer_grows_in_chunks_up_to_what_the_trace_needs(tmp_path, pingpong):
    # 20,000 round trips at 64M with no collective hold all of rank 0's
    # records (over 1 MiB) without a swap-out: the resident part grew past
    # the first chunk, in doublings, and stayed below the budget
    run, doc = trace(tmp_path, "--budget", "64M", "--", *MPIRUN, "-n", "2", pingpong,
                     str(ROUNDS), "8", "0")
    assert run.returncode == 0, run.stderr
    r0 = doc["samples"]["ranks"][0]
    resident = r0["memory"]["buffer_resident_bytes"]
    assert resident in {(1 << 20) << k for k in range(1, 6)}
    assert resident < 64 << 20
    assert r0["swapouts"]["count"] == 0
