"""MPI_Comm_idup under the tracer, at 3 and 4 ranks: the communicator it
makes is defined in the archive, with its members and its parent, once its
request completes; the collectives on it use it (tests/programs/trace_idup.c)."""

from __future__ import annotations

import collections
import json

import pytest

from conftest import build_program, needs_mpicc, run_tiers

MPIRUN = ["mpirun", "--oversubscribe"]

pytestmark = needs_mpicc


@pytest.fixture(scope="module")
def idup(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("idup"), "trace_idup")


@pytest.mark.parametrize("n", [3, 4])
def test_idup_communicators_have_members_and_parent(tmp_path, idup, n):
    import otf2

    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", *MPIRUN, "-n", str(n), idup)
    assert run.returncode == 0, run.stderr
    doc = json.loads((folder / "summary.json").read_text())
    for r in doc["samples"]["ranks"]:
        assert r["functions"]["MPI_Comm_idup"]["calls"] == 2
        assert r["functions"]["MPI_Allreduce"]["calls"] == 2
    with otf2.reader.open(str(folder / "traces.otf2")) as tr:
        comms = {c.name: c for c in tr.definitions.comms}
        # a communicator's members are the locations of its ranks ("MPI Rank r")
        members = {c.name: [m.group.name for m in c.group.members] for c in tr.definitions.comms}
        parents = {c.name: (c.parent.name if c.parent else None) for c in tr.definitions.comms}
        used = collections.Counter()
        for _loc, ev in tr.events:
            if type(ev).__name__ == "MpiCollectiveEnd":
                used[ev.communicator.name] += 1
    def ranks_of(name):
        return sorted(int(m.split()[-1]) for m in members[name])

    assert comms["MPI_COMM_WORLD"].parent is None
    # MPI_Comm_split's halves (parent the world), each duplicated by MPI_Comm_idup
    # (parent the half, the same members), and the world's duplicate
    for want in ([r for r in range(n) if r % 2 == 0], [r for r in range(n) if r % 2 == 1]):
        half = [c for c in comms if parents[c] == "MPI_COMM_WORLD" and ranks_of(c) == want]
        assert len(half) == 1, (want, parents, members)
        dup = [c for c in comms if parents[c] == half[0]]
        assert len(dup) == 1 and ranks_of(dup[0]) == want, (half, parents)
        assert used[dup[0]] == len(want)             # its Allreduce, on each member
    dup_world = [c for c in comms if parents[c] == "MPI_COMM_WORLD"
                 and ranks_of(c) == list(range(n))]
    assert len(dup_world) == 1 and used[dup_world[0]] == n
