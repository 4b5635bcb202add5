"""Fortran programs under the tracer, built with the MPI the tracer was
built with (Open MPI; MPICH under make test-mpich), at 2 and 4 ranks:

- `use mpi` MPI_Comm_idup (tests/programs/trace_fidup.f90): the new
  communicators are defined in the archive with their members and parent
  once their requests complete (by MPI_Wait and by MPI_Waitall);
- `use mpi_f08` string functions and MPI_Comm_idup
  (tests/programs/trace_f08strings.f90): MPI_Comm_set_name with and without
  ierror, MPI_Comm_get_name, MPI_File_open and MPI_File_set_view are
  recorded, the names set from the program name the archive's
  communicators, and the library got the right strings (the file's
  contents, the name read back);
- `use mpi` and `use mpi_f08` MPI_Comm_spawn (tests/programs/trace_fspawn.f90,
  trace_f08spawn.f90): refused in one line naming the call, the program goes
  on and its calls are recorded."""

from __future__ import annotations

import collections
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import run_tiers
from tiers import launch

PROGRAMS = Path(__file__).resolve().parent / "programs"
MPI = launch.built_mpi() or "openmpi"
FC, LAUNCH = {"openmpi": ("mpif90.openmpi", ["mpirun.openmpi", "--oversubscribe"]),
              "mpich": ("mpif90.mpich", ["mpiexec.mpich"])}[MPI]

pytestmark = pytest.mark.skipif(shutil.which(FC) is None or shutil.which(LAUNCH[0]) is None,
                                reason=f"needs {FC} and {LAUNCH[0]}")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fortran-idup")

    def make(name: str) -> str:
        exe = folder / name
        if not exe.exists():
            proc = subprocess.run([FC, "-O1", "-o", str(exe), str(PROGRAMS / f"{name}.f90")],
                                  capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
        return str(exe)
    return make


def trace(tmp_path, *cmd, timeout=240):
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", *LAUNCH, *cmd, timeout=timeout)
    return run, folder


def calls_bytes(rank_doc):
    return {k: (v["calls"], v["bytes"]) for k, v in rank_doc["functions"].items()}


def read_comms(folder):
    """{name: (parent name, sorted member ranks)} and the collectives per
    communicator name, from the archive."""
    import otf2

    with otf2.reader.open(str(folder / "traces.otf2")) as tr:
        comms = {c.name: (c.parent.name if c.parent else None,
                          sorted(int(m.group.name.split()[-1]) for m in c.group.members))
                 for c in tr.definitions.comms}
        used = collections.Counter()
        for _loc, ev in tr.events:
            if isinstance(ev, otf2.events.MpiCollectiveEnd):
                used[ev.communicator.name] += 1
    return comms, used


@pytest.mark.parametrize("n", [2, 4])
def test_use_mpi_comm_idup_defines_its_communicators(tmp_path, build, n):
    run, folder = trace(tmp_path, "-n", str(n), build("trace_fidup"))
    assert run.returncode == 0, run.stderr            # the program checked its sums
    doc = json.loads((folder / "summary.json").read_text())
    for r in doc["samples"]["ranks"]:
        f = calls_bytes(r)
        assert f["MPI_Comm_idup"] == (2, 0)
        assert f["MPI_Wait"] == (1, 0) and f["MPI_Waitall"] == (1, 0)
        assert f["MPI_Comm_set_name"] == (1, 0)
        assert f["MPI_Allreduce"] == (2, 2 * 2 * 3 * 4)
        assert f["MPI_Comm_free"] == (3, 0)
    comms, used = read_comms(folder)
    # the world's duplicate, named from Fortran, with the world as parent
    assert comms["tiers-fidup"] == ("MPI_COMM_WORLD", list(range(n)))
    assert used["tiers-fidup"] == n
    # each parity half (parent the world) has its idup duplicate (parent the
    # half, the same members), used by one Allreduce on each member
    for want in ([r for r in range(n) if r % 2 == 0], [r for r in range(n) if r % 2 == 1]):
        half = [c for c, (p, m) in comms.items() if p == "MPI_COMM_WORLD" and m == want]
        assert len(half) == 1, comms
        dup = [c for c, (p, m) in comms.items() if p == half[0]]
        assert len(dup) == 1 and comms[dup[0]][1] == want, comms
        assert used[dup[0]] == len(want)


@pytest.mark.parametrize("n", [2, 4])
def test_use_mpi_f08_string_functions_and_idup(tmp_path, build, n):
    data = tmp_path / "out.dat"
    run, folder = trace(tmp_path, "-n", str(n), build("trace_f08strings"), str(data))
    assert run.returncode == 0, run.stderr            # the name read back was right
    doc = json.loads((folder / "summary.json").read_text())
    for r in doc["samples"]["ranks"]:
        f = calls_bytes(r)
        assert f["MPI_Comm_set_name"] == (2, 0)       # without and with ierror
        assert f["MPI_Comm_get_name"] == (1, 0)
        assert f["MPI_Comm_dup"] == (1, 0) and f["MPI_Comm_idup"] == (1, 0)
        assert f["MPI_Wait"] == (1, 0)
        assert f["MPI_Allreduce"] == (2, 2 * 2 * 2 * 4)
        assert f["MPI_File_open"] == (1, 0) and f["MPI_File_set_view"] == (1, 0)
        assert f["MPI_File_write_at"] == (1, 16) and f["MPI_File_close"] == (1, 0)
        assert r["io_bytes"] == {"read": 0, "write": 16}
    # the library got the file name and the data representation right
    assert data.read_bytes() == b"".join(struct.pack("=4i", *[r] * 4) for r in range(n))
    comms, used = read_comms(folder)
    assert comms["tiers-f08-dup"] == ("MPI_COMM_WORLD", list(range(n)))
    assert comms["tiers-f08-idup"] == ("MPI_COMM_WORLD", list(range(n)))
    assert used["tiers-f08-dup"] == n and used["tiers-f08-idup"] == n


@pytest.mark.parametrize("program", ["trace_fspawn", "trace_f08spawn"])
def test_comm_spawn_refused_in_one_line(tmp_path, build, program):
    if program == "trace_f08spawn" and MPI == "mpich":
        pytest.skip("MPICH's use mpi_f08 MPI_Comm_spawn is left to MPICH (docs/trace.md)")
    exe = build(program)
    root = ["--allow-run-as-root"] if MPI == "openmpi" and os.geteuid() == 0 else []
    alone = subprocess.run([*LAUNCH, *root, "-n", "1", exe], capture_output=True, text=True,
                           timeout=120)
    if "parent got 42" not in alone.stdout:
        pytest.skip(f"this MPI cannot spawn here: {alone.stderr.strip()[-200:]}")
    run, folder = trace(tmp_path, "-n", "1", exe, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "parent got 42" in run.stdout
    said = [ln for ln in run.stderr.splitlines() if "does not follow spawned processes" in ln]
    assert len(said) == 1 and "MPI_Comm_spawn" in said[0], run.stderr
    doc = json.loads((folder / "summary.json").read_text())
    assert doc["summary"]["ranks"] == 1                # only the parent traced
    f = calls_bytes(doc["samples"]["ranks"][0])
    assert f["MPI_Comm_spawn"] == (1, 0)
    assert f["MPI_Send"] == (1, 4) and f["MPI_Recv"] == (1, 4)
