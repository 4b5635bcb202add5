"""No event lost under the default policy: a ping-pong loop of 10^5 MPI calls
with no collective at all between MPI_Init and the end, traced with a 1 MiB
buffer per rank (each rank's trace is about 4 MiB), at 2 and 3 ranks.

Every call the program made is in the OTF2 archive, counted there by the
otf2 reader (25,000 round trips: 50,000 MPI_Send and 50,000 MPI_Recv, an
Enter and a Leave each, and one message event each), the summary's event
count is the archive's, no rank stopped, and each rank's buffer stayed
within the budget.  bench/trace_loss runs the same at 10^7 calls."""

from __future__ import annotations

import collections
import json

import pytest

from conftest import build_program, needs_mpicc, run_tiers

MPIRUN = ["mpirun", "--oversubscribe"]
ROUND_TRIPS = 25_000          # x 2 ranks x (Send + Recv) = 10^5 calls

pytestmark = needs_mpicc


@pytest.fixture(scope="module")
def pingpong(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("loss-programs"), "trace_pingpong")


@pytest.mark.parametrize("n", [2, 3])
def test_every_call_is_in_the_archive(tmp_path, pingpong, n):
    import otf2

    folder = tmp_path / "trace"
    # EVERY 0: no barrier inside the loop, only the one before MPI_Finalize
    run = run_tiers("trace", "--budget", "1M", "--out", str(folder), "--", *MPIRUN, "-n", str(n),
                    pingpong, str(ROUND_TRIPS), "8", "0")
    assert run.returncode == 0, run.stderr
    doc = json.loads((folder / "summary.json").read_text())
    s = doc["summary"]
    assert s["stopped_ranks"] == []
    enters, leaves, kinds = collections.Counter(), collections.Counter(), collections.Counter()
    with otf2.reader.open(str(folder / "traces.otf2")) as tr:
        for loc, ev in tr.events:
            kind = type(ev).__name__
            kinds[kind] += 1
            if kind == "Enter":
                enters[(loc.group.name, ev.region.name)] += 1
            elif kind == "Leave":
                leaves[(loc.group.name, ev.region.name)] += 1
    assert enters == leaves
    for r in (0, 1):
        assert enters[(f"MPI Rank {r}", "MPI_Send")] == ROUND_TRIPS
        assert enters[(f"MPI Rank {r}", "MPI_Recv")] == ROUND_TRIPS
    calls = sum(v for (_, name), v in enters.items() if name in ("MPI_Send", "MPI_Recv"))
    assert calls == 4 * ROUND_TRIPS == 10 ** 5
    assert kinds["MpiSend"] == kinds["MpiRecv"] == 2 * ROUND_TRIPS
    assert sum(kinds.values()) == s["events"]
    # the buffer filled between collectives: the ping-pong ranks swapped out alone
    ranks = {r["rank"]: r for r in doc["samples"]["ranks"]}
    for r in (0, 1):
        assert ranks[r]["swapouts"]["unsynchronised"] >= 3
        assert enters[(f"MPI Rank {r}", "tiers_swapout_unsynchronised")] == \
            ranks[r]["swapouts"]["unsynchronised"]
    for r in ranks.values():
        assert r["memory"]["buffer_resident_bytes"] <= r["memory"]["buffer_reserved_bytes"] \
            == 1 << 20
