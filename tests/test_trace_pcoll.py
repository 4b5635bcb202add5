"""tiers trace of persistent collectives (tests/programs/trace_pcoll.c) at 2
and 4 ranks under the MPI the tracer was built with: MPI-4's MPI_*_init
under MPICH (make test-mpich), Open MPI 4.1's MPIX_*_init (mpi-ext.h) under
Open MPI, and from Fortran Open MPI's MPIX_*_init (use mpi_ext,
tests/programs/trace_fpcoll.f90).  Every MPI_Start(all) of a persistent
collective is recorded as that collective, with its operation, root and the
bytes this rank sends and receives; the figures below are computed from the
programs' code."""

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
ITERS = 3

MPI = launch.built_mpi() or "openmpi"
TOOLS = {"openmpi": ("mpicc.openmpi", ["mpirun.openmpi", "--oversubscribe"]),
         "mpich": ("mpicc.mpich", ["mpiexec.mpich"])}[MPI]

pytestmark = pytest.mark.skipif(shutil.which(TOOLS[0]) is None or shutil.which(TOOLS[1][0]) is None,
                                reason=f"needs {TOOLS[0]} and {TOOLS[1][0]}")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    exe = tmp_path_factory.mktemp("pcoll") / "trace_pcoll"
    proc = subprocess.run([TOOLS[0], "-O1", "-o", str(exe), str(PROGRAMS / "trace_pcoll.c")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return str(exe)


def expected(n: int, rank: int) -> dict:
    """(operation, root) -> (bytes sent, bytes received) of one start, as
    the program's six persistent collectives give them at rank ``rank``."""
    return {("BARRIER", None): (0, 0),
            ("BCAST", 0): (40, 0) if rank == 0 else (0, 40),
            ("ALLREDUCE", None): (32, 32),
            ("REDUCE", n - 1): (12, 12) if rank == n - 1 else (12, 0),
            ("ALLGATHER", None): (8, 8 * n),
            ("ALLTOALL", None): (4 * n, 4 * n)}


@pytest.mark.parametrize("n", [2, 4])
def test_persistent_collectives_recorded_at_every_start(tmp_path, program, n):
    import otf2

    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", *TOOLS[1], "-n", str(n), program,
                    timeout=240)
    assert run.returncode == 0, run.stderr          # the program checked its results
    doc = json.loads((folder / "summary.json").read_text())
    assert doc["summary"]["ranks"] == n
    for r in doc["samples"]["ranks"]:
        f = {k: (v["calls"], v["bytes"]) for k, v in r["functions"].items()}
        want = expected(n, r["rank"])
        for name in ("Barrier", "Bcast", "Allreduce", "Reduce", "Allgather", "Alltoall"):
            assert f[f"MPI_{name}_init"] == (1, 0), name   # recorded under the MPI-4 name
        # the barrier alone in MPI_Start, the other five in MPI_Startall
        assert f["MPI_Start"] == (ITERS, 0)
        five = sum(s + v for key, (s, v) in want.items() if key[0] != "BARRIER")
        assert f["MPI_Startall"] == (ITERS, ITERS * five)
        assert f["MPI_Wait"] == (ITERS, 0) and f["MPI_Waitall"] == (ITERS, 0)
        assert f["MPI_Request_free"] == (6, 0)
        assert not any(k.startswith("MPIX_") for k in f)
    assert doc["summary"]["coll_bytes"] == sum(
        ITERS * sum(s + v for s, v in expected(n, rank).values()) for rank in range(n))

    # the archive: each start is a collective of its operation, root and
    # bytes, on MPI_COMM_WORLD, inside its MPI_Start/MPI_Startall region
    ops = [(getattr(otf2.enums.CollectiveOp, k), k)
           for k in ("BARRIER", "BCAST", "ALLREDUCE", "REDUCE", "ALLGATHER", "ALLTOALL")]
    seen = collections.Counter()
    with otf2.reader.open(str(folder / "traces.otf2")) as tr:
        stacks = collections.defaultdict(list)
        for loc, ev in tr.events:
            rank = int(loc.group.name.split()[-1])
            if isinstance(ev, otf2.events.Enter):
                stacks[loc].append(ev.region.name)
            elif isinstance(ev, otf2.events.Leave):
                stacks[loc].pop()
            elif isinstance(ev, otf2.events.MpiCollectiveEnd):
                op = next((k for v, k in ops if ev.collective_op == v), str(ev.collective_op))
                root = None if ev.root in (0xFFFFFFFF, -1) else ev.root
                assert ev.communicator.name == "MPI_COMM_WORLD"
                assert stacks[loc][-1] == ("MPI_Start" if op == "BARRIER" else "MPI_Startall")
                seen[(rank, op, root, ev.size_sent, ev.size_received)] += 1
    want = collections.Counter()
    for rank in range(n):
        for (op, root), (s, v) in expected(n, rank).items():
            want[(rank, op, root, s, v)] = ITERS
    assert seen == want


@pytest.mark.skipif(MPI != "openmpi" or shutil.which("mpif90.openmpi") is None,
                    reason="Open MPI's Fortran MPIX_*_init (use mpi_ext); needs mpif90.openmpi")
@pytest.mark.parametrize("n", [2, 4])
def test_fortran_mpix_persistent_collectives(tmp_path, n):
    """tests/programs/trace_fpcoll.f90: MPIX_Bcast_init (10 integers from
    rank 0) and MPIX_Allreduce_init (4 integers) started together ITERS
    times, MPIX_Barrier_init started alone."""
    exe = tmp_path / "trace_fpcoll"
    proc = subprocess.run(["mpif90.openmpi", "-O1", "-o", str(exe),
                           str(PROGRAMS / "trace_fpcoll.f90")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", *TOOLS[1], "-n", str(n), str(exe),
                    timeout=240)
    assert run.returncode == 0, run.stderr          # the program checked its results
    doc = json.loads((folder / "summary.json").read_text())
    for r in doc["samples"]["ranks"]:
        f = {k: (v["calls"], v["bytes"]) for k, v in r["functions"].items()}
        for name in ("Bcast", "Allreduce", "Barrier"):
            assert f[f"MPI_{name}_init"] == (1, 0), name
        assert f["MPI_Startall"] == (ITERS, ITERS * (40 + 2 * 16))
        assert f["MPI_Start"] == (ITERS, 0)
        assert f["MPI_Request_free"] == (3, 0)
    assert doc["summary"]["coll_bytes"] == n * ITERS * (40 + 2 * 16)
