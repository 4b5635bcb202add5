"""Fortran calls with string arguments under the tracer (their hidden
lengths passed on to the MPI library), at 2 and 3 ranks:
tests/programs/trace_fstrings.f90 names a duplicated communicator with
MPI_Comm_set_name and writes a file through MPI_File_open,
MPI_File_set_view and MPI_File_write_at; every call is recorded once, the
archive's communicator has the Fortran name without its trailing blanks,
and the file holds what the program wrote (the library got the right
strings)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess

import pytest

from conftest import PROGRAMS, run_tiers

MPIRUN = ["mpirun", "--oversubscribe"]


@pytest.fixture(scope="module")
def fstrings(tmp_path_factory):
    fc = shutil.which("mpif90") or shutil.which("mpifort")
    if not fc or not shutil.which("mpirun"):
        pytest.skip("needs mpif90 and mpirun")
    exe = tmp_path_factory.mktemp("fstrings") / "trace_fstrings"
    proc = subprocess.run([fc, "-O1", "-o", str(exe), str(PROGRAMS / "trace_fstrings.f90")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mpif90 cannot build trace_fstrings here: {proc.stderr.strip()[:200]}")
    return str(exe)


@pytest.mark.parametrize("n", [2, 3])
def test_fortran_string_arguments(tmp_path, fstrings, n):
    import otf2

    folder, data = tmp_path / "trace", tmp_path / "out.dat"
    run = run_tiers("trace", "--out", str(folder), "--", *MPIRUN, "-n", str(n), fstrings,
                    str(data))
    assert run.returncode == 0, run.stderr
    doc = json.loads((folder / "summary.json").read_text())
    for r in doc["samples"]["ranks"]:
        f = {k: (v["calls"], v["bytes"]) for k, v in r["functions"].items()}
        assert f["MPI_Comm_set_name"] == (1, 0)
        assert f["MPI_File_open"] == (1, 0) and f["MPI_File_set_view"] == (1, 0)
        assert f["MPI_File_write_at"] == (1, 16)
        assert r["io_bytes"] == {"read": 0, "write": 16}
    # the library got the file name and the data representation right
    assert data.read_bytes() == b"".join(struct.pack("<4i", *[r] * 4) for r in range(n))
    with otf2.reader.open(str(folder / "traces.otf2")) as tr:
        comms = {c.name: c for c in tr.definitions.comms}
    assert "tiers-fortran-dup" in comms
    assert comms["tiers-fortran-dup"].parent.name == "MPI_COMM_WORLD"
    assert len(comms["tiers-fortran-dup"].group.members) == n
