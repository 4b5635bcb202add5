"""tiers trace of MPI-4 calls that MPICH 4 declares (make test-mpich):
MPI_Isendrecv and MPI_Isendrecv_replace (tests/programs/trace_isendrecv.c,
at 2 and 4 ranks) record the send and the receive at the call, the receive
with the source, tag and bytes the call names (MPICH 4.0's status of the
request has neither), so both ends of each message are matched; MPI_Comm_idup_with_info defines its communicator (members and
parent) when its request completes, as MPI_Comm_idup does.  Skipped under
an MPI whose mpi.h is older than MPI-4 (Open MPI 4.1)."""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_tiers
from tiers import launch

PROGRAMS = Path(__file__).resolve().parent / "programs"
ITERS = 2

MPI = launch.built_mpi() or "openmpi"
pytestmark = [
    pytest.mark.skipif(MPI != "mpich", reason="MPI-4 calls: the tracer built with MPICH 4 "
                                              "(make test-mpich)"),
    pytest.mark.skipif(shutil.which("mpicc.mpich") is None, reason="needs mpicc.mpich"),
]


@pytest.mark.parametrize("n", [2, 4])
def test_isendrecv_and_idup_with_info(tmp_path, n):
    import otf2

    exe = tmp_path / "trace_isendrecv"
    proc = subprocess.run(["mpicc.mpich", "-O1", "-o", str(exe),
                           str(PROGRAMS / "trace_isendrecv.c")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", "mpiexec.mpich", "-n", str(n),
                    str(exe), timeout=240)
    assert run.returncode == 0, run.stderr          # the program checked its results
    doc = json.loads((folder / "summary.json").read_text())
    s = doc["summary"]
    matrix = [[0] * n for _ in range(n)]
    for rank_doc in doc["samples"]["ranks"]:
        r = rank_doc["rank"]
        f = {k: (v["calls"], v["bytes"]) for k, v in rank_doc["functions"].items()}
        # the send and the receive at the call: 3 ints each way, 2 doubles each way
        assert f["MPI_Isendrecv"] == (ITERS, ITERS * 24)
        assert f["MPI_Isendrecv_replace"] == (ITERS, ITERS * 32)
        assert f["MPI_Wait"] == (2 * ITERS + 1, 0)
        assert f["MPI_Comm_idup_with_info"] == (1, 0)
        matrix[r][(r + 1) % n] = ITERS * 28
    assert s["comm_matrix"]["bytes"] == matrix
    assert s["p2p_messages"] == 2 * ITERS * n
    assert s["matched_p2p_bytes"] == s["p2p_bytes"] == n * ITERS * 28
    with otf2.reader.open(str(folder / "traces.otf2")) as tr:
        parents = {c.name: (c.parent.name if c.parent else None) for c in tr.definitions.comms}
        members = {c.name: sorted(int(m.group.name.split()[-1]) for m in c.group.members)
                   for c in tr.definitions.comms}
        used = collections.Counter(ev.communicator.name for _loc, ev in tr.events
                                   if type(ev).__name__ == "MpiCollectiveEnd")
    dups = [c for c, p in parents.items() if p == "MPI_COMM_WORLD"]
    assert len(dups) == 1 and members[dups[0]] == list(range(n))
    assert used[dups[0]] == n                       # the barrier on the copy, at every rank
