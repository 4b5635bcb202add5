"""tiers trace of MPI_Alltoallw, the neighbourhood collectives and matched
probes (tests/programs/trace_nbr.c in C, trace_fnbr.f90 through `use mpi`)
at 2 and 4 ranks under the MPI the tracer was built with (Open MPI, or
MPICH under make test-mpich).  A neighbourhood collective is recorded with
the bytes this rank sends to its topology's destinations and receives from
its sources, and every block it sends to a destination reaches the
summary's communication matrix; Alltoallw's bytes are the sum of counts x
type sizes; MPI_Mrecv and MPI_Imrecv are receives on the communicator of
their probe.  Every figure below is computed from the programs' code."""

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
TOOLS = {"openmpi": ("mpicc.openmpi", "mpif90.openmpi", ["mpirun.openmpi", "--oversubscribe"]),
         "mpich": ("mpicc.mpich", "mpif90.mpich", ["mpiexec.mpich"])}[MPI]

pytestmark = pytest.mark.skipif(shutil.which(TOOLS[0]) is None or shutil.which(TOOLS[2][0]) is None,
                                reason=f"needs {TOOLS[0]} and {TOOLS[2][0]}")


def compile_program(folder: Path, compiler: str, source: str) -> str:
    exe = folder / Path(source).stem
    proc = subprocess.run([compiler, "-O1", "-o", str(exe), str(PROGRAMS / source)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return str(exe)


def trace(tmp_path: Path, exe: str, n: int) -> dict:
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", *TOOLS[2], "-n", str(n), exe,
                    timeout=240)
    assert run.returncode == 0, run.stderr          # the program checked its results
    return json.loads((folder / "summary.json").read_text())


def line_neighbours(n: int, r: int) -> list[int]:
    """The 1-D non-periodic cartesian neighbours that exist (no MPI_PROC_NULL)."""
    return [q for q in (r - 1, r + 1) if 0 <= q < n]


def alltoallw_bytes(n: int, r: int) -> tuple[int, int]:
    """Rank r sends rank i i+1 elements of 4 (i even) or 8 (i odd) bytes."""
    size = lambda i: 8 if i % 2 else 4  # noqa: E731
    return sum((i + 1) * size(i) for i in range(n)), n * (r + 1) * size(r)


def expected_c(n: int, r: int) -> tuple[dict, dict]:
    """(function -> (calls, bytes) of one rank, matrix row {dest: (bytes, messages)})
    of tests/programs/trace_nbr.c over its ITERS rounds."""
    line = line_neighbours(n, r)
    ring = [(r - 1) % n] + ([(r + 1) % n] if n > 2 else [])
    dests, srcs = [(r + 1) % n, (r + 2) % n], [(r - 1) % n, (r - 2) % n]
    w_sent, w_recv = alltoallw_bytes(n, r)
    per_iter = {
        "MPI_Neighbor_alltoall": 24 * len(line),
        "MPI_Neighbor_allgather": 32 * len(line),
        "MPI_Neighbor_allgatherv": 4 * (r + 1) * len(ring) + sum(4 * (q + 1) for q in ring),
        "MPI_Neighbor_alltoallv": 12 + 12,
        "MPI_Ineighbor_alltoallw": 20 + 20,
        "MPI_Alltoallw": w_sent + w_recv,
        "MPI_Ialltoallw": w_sent + w_recv,
        "MPI_Iscan": 16,
        "MPI_Iexscan": 16 if r > 0 else 8,
    }
    f = {k: (ITERS, ITERS * v) for k, v in per_iter.items()}
    row = collections.Counter()
    msgs = collections.Counter()

    def to(q, nbytes):
        row[q] += ITERS * nbytes
        msgs[q] += ITERS

    for q in line:
        to(q, 12)                       # Neighbor_alltoall: 3 ints
        to(q, 16)                       # Neighbor_allgather: 2 doubles
    for q in ring:
        to(q, 4 * (r + 1))              # Neighbor_allgatherv
    to(dests[0], 4)                     # Neighbor_alltoallv: 1 int, 2 ints
    to(dests[1], 8)
    to(dests[0], 12)                    # Ineighbor_alltoallw: 3 ints, 1 double
    to(dests[1], 8)
    waits = 2                           # Ineighbor_alltoallw, Ialltoallw
    if r == 0:
        to(1, 20)                       # MPI_Send of 5 ints
        f["MPI_Send"] = (ITERS, ITERS * 20)
        f["MPI_Imrecv"] = (ITERS, 0)
        waits += 1
    elif r == 1:
        to(0, 48)                       # MPI_Send of 6 doubles
        f["MPI_Send"] = (ITERS, ITERS * 48)
        f["MPI_Mprobe"] = (ITERS, 0)
        f["MPI_Mrecv"] = (ITERS, ITERS * 20)
    f["MPI_Wait"] = (ITERS * waits, ITERS * 48 if r == 0 else 0)  # the Imrecv completes there
    f["MPI_Waitall"] = (ITERS, 0)
    f["MPI_Allreduce"] = (1, 8)         # the final check: 1 int
    assert srcs  # the sources mirror the destinations: nothing to add for them
    return f, {q: (row[q], msgs[q]) for q in row}


@pytest.fixture(scope="module")
def c_program(tmp_path_factory):
    return compile_program(tmp_path_factory.mktemp("nbr"), TOOLS[0], "trace_nbr.c")


@pytest.mark.parametrize("n", [2, 4])
def test_neighbourhood_alltoallw_and_matched_probes(tmp_path, c_program, n):
    doc = trace(tmp_path, c_program, n)
    s = doc["summary"]
    assert s["ranks"] == n
    matrix = [[0] * n for _ in range(n)]
    messages = [[0] * n for _ in range(n)]
    coll = 0
    for rank_doc in doc["samples"]["ranks"]:
        r = rank_doc["rank"]
        got = {k: (v["calls"], v["bytes"]) for k, v in rank_doc["functions"].items()}
        want, row = expected_c(n, r)
        for name, cb in want.items():
            assert got.get(name) == cb, (r, name)
        # MPI_Improbe is called until the message is there: at least once a round
        if r == 0:
            assert got["MPI_Improbe"][0] >= ITERS and got["MPI_Improbe"][1] == 0
        # the topology constructors are traced with their parent
        for name in ("MPI_Cart_create", "MPI_Graph_create", "MPI_Dist_graph_create_adjacent"):
            assert got[name] == (1, 0), name
        for q, (b, m) in row.items():
            matrix[r][q] = b
            messages[r][q] = m
        coll += sum(cb[1] for name, cb in want.items()
                    if name not in ("MPI_Send", "MPI_Mrecv", "MPI_Wait", "MPI_Imrecv",
                                    "MPI_Mprobe", "MPI_Waitall"))
    assert s["comm_matrix"]["bytes"] == matrix
    assert s["comm_matrix"]["messages"] == messages
    assert s["coll_bytes"] == coll
    # point-to-point bytes are the sends alone: the matched receives found them
    assert s["p2p_bytes"] == ITERS * (20 + 48)
    assert s["neighbor_bytes"] == sum(map(sum, matrix)) - ITERS * (20 + 48)
    # the Chrome export: one "neighbor" instant per block, with its target and bytes
    out = tmp_path / "trace.json"
    run = run_tiers("trace", "export", "--format", "chrome", "--output", str(out),
                    str(tmp_path / "trace"))
    assert run.returncode == 0, run.stderr
    events = json.loads(out.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    blocks = collections.Counter()
    for e in events:
        if e.get("name") == "neighbor":
            blocks[(e["pid"], e["args"]["target"])] += e["args"]["bytes"]
    assert blocks == collections.Counter({
        (r, q): b - (ITERS * 20 if (r, q) == (0, 1) else ITERS * 48 if (r, q) == (1, 0) else 0)
        for r in range(n) for q, b in enumerate(matrix[r]) if b}) - collections.Counter()


@pytest.mark.skipif(shutil.which(TOOLS[1]) is None, reason=f"needs {TOOLS[1]}")
@pytest.mark.parametrize("n", [2, 4])
def test_fortran_neighbour_alltoall_and_alltoallw(tmp_path, n):
    """tests/programs/trace_fnbr.f90 (`use mpi`): ITERS rounds of
    MPI_NEIGHBOR_ALLTOALL of 3 integers on a 1-D non-periodic cartesian
    communicator and MPI_ALLTOALLW on MPI_COMM_WORLD with i+1 elements of
    MPI_INTEGER (i even) or MPI_DOUBLE_PRECISION (i odd) to rank i.  Each round
    also has the matched probes of trace_nbr.c: MPI_MPROBE + MPI_MRECV of
    5 integers at rank 1, MPI_IMPROBE + MPI_IMRECV of 6 doubles at rank 0."""
    exe = compile_program(tmp_path, TOOLS[1], "trace_fnbr.f90")
    doc = trace(tmp_path, exe, n)
    matrix = [[0] * n for _ in range(n)]
    for rank_doc in doc["samples"]["ranks"]:
        r = rank_doc["rank"]
        got = {k: (v["calls"], v["bytes"]) for k, v in rank_doc["functions"].items()}
        line = line_neighbours(n, r)
        assert got["MPI_Neighbor_alltoall"] == (ITERS, ITERS * 24 * len(line))
        assert got["MPI_Alltoallw"] == (ITERS, ITERS * sum(alltoallw_bytes(n, r)))
        assert got["MPI_Cart_create"] == (1, 0)
        for q in line:
            matrix[r][q] = ITERS * 12
        if r == 0:
            assert got["MPI_Imrecv"] == (ITERS, 0)
            assert got["MPI_Wait"] == (ITERS, ITERS * 48)   # the Imrecv completes there
            assert got["MPI_Improbe"][0] >= ITERS
            matrix[0][1] += ITERS * 20
        elif r == 1:
            assert got["MPI_Mprobe"] == (ITERS, 0)
            assert got["MPI_Mrecv"] == (ITERS, ITERS * 20)
            matrix[1][0] += ITERS * 48
    assert doc["summary"]["comm_matrix"]["bytes"] == matrix
    assert doc["summary"]["matched_p2p_bytes"] == ITERS * (20 + 48)


@pytest.mark.parametrize("n", [2, 4])
def test_persistent_neighbourhood_and_alltoallw(tmp_path, n):
    """tests/programs/trace_pnbr.c: a neighbour alltoall (3 ints, 1-D line),
    a neighbour alltoallv (1 and 2 ints, the distributed graph) and an
    alltoallw (as trace_nbr.c's) made once with *_init (MPI-4, or Open MPI's
    MPIX_*_init, recorded under the MPI-4 names) and started together ITERS
    times: each MPI_Startall records the three collectives' bytes, and the
    neighbourhood ones' blocks reach the communication matrix."""
    exe = compile_program(tmp_path, TOOLS[0], "trace_pnbr.c")
    doc = trace(tmp_path, exe, n)
    matrix = [[0] * n for _ in range(n)]
    for rank_doc in doc["samples"]["ranks"]:
        r = rank_doc["rank"]
        got = {k: (v["calls"], v["bytes"]) for k, v in rank_doc["functions"].items()}
        line = line_neighbours(n, r)
        for name in ("Neighbor_alltoall", "Neighbor_alltoallv", "Alltoallw"):
            assert got[f"MPI_{name}_init"] == (1, 0), name
        per_start = 24 * len(line) + 24 + sum(alltoallw_bytes(n, r))
        assert got["MPI_Startall"] == (ITERS, ITERS * per_start)
        assert got["MPI_Waitall"] == (ITERS, 0)
        assert got["MPI_Request_free"] == (3, 0)
        assert not any(k.startswith("MPIX_") for k in got)
        for q in line:
            matrix[r][q] += ITERS * 12
        matrix[r][(r + 1) % n] += ITERS * 4
        matrix[r][(r + 2) % n] += ITERS * 8
    assert doc["summary"]["comm_matrix"]["bytes"] == matrix
    assert doc["summary"]["p2p_bytes"] == 0
    assert doc["summary"]["neighbor_bytes"] == sum(map(sum, matrix))
