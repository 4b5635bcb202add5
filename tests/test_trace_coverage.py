"""Coverage of the MPI interface by the tracer: every function the mpi.h
the tracer is built with declares (Open MPI's, or MPICH's under make
test-mpich) is either wrapped (native/src/trace/mpi_functions.txt) or
named, with its reason, in native/src/trace/mpi_untraced.txt.  mpi.h is
read through the MPI's own compiler wrapper and preprocessor, so that what
a program can call is what is checked."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tiers import launch

TRACE = Path(__file__).resolve().parents[1] / "native" / "src" / "trace"
MPI = launch.built_mpi() or "openmpi"
MPICC = {"openmpi": "mpicc.openmpi", "mpich": "mpicc.mpich"}[MPI]


def traced() -> set[str]:
    """The functions of mpi_functions.txt (MPI_ names)."""
    out = set()
    for line in (TRACE / "mpi_functions.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            out.add("MPI_" + line.split("|")[0].split()[1])
    return out


def untraced() -> list[tuple[str, str]]:
    """(pattern, reason) of mpi_untraced.txt."""
    out = []
    for line in (TRACE / "mpi_untraced.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            pattern, _, reason = line.partition(" ")
            out.append((pattern, reason.strip()))
    return out


def declared() -> set[str]:
    """The MPI_ functions mpi.h declares, after preprocessing (typedefs of
    callback types left out)."""
    proc = subprocess.run([MPICC, "-E", "-x", "c", "-"], input="#include <mpi.h>\n",
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = re.sub(r"\btypedef\b[^;]*;", "", proc.stdout)
    return set(re.findall(r"(?<![\w(])(MPI_\w+)\s*\(", text))


@pytest.mark.skipif(shutil.which(MPICC) is None, reason=f"needs {MPICC}")
def test_every_declared_function_is_traced_or_excused():
    names = declared()
    assert {"MPI_Send", "MPI_Neighbor_alltoallw", "MPI_Alltoallw", "MPI_Mprobe"} <= names
    wrapped, excused = traced(), untraced()
    missing = sorted(f for f in names - wrapped
                     if not any(fnmatch.fnmatchcase(f, p) for p, _ in excused))
    assert not missing, ("declared by mpi.h but neither in mpi_functions.txt nor in "
                         f"mpi_untraced.txt: {' '.join(missing)}")


def test_untraced_list_is_consistent():
    """Every excuse has a reason, and none covers a function that is wrapped."""
    excused = untraced()
    assert excused
    for pattern, reason in excused:
        assert pattern.startswith("MPI_") and len(reason) > 10, pattern
    for f in traced():
        hits = [p for p, _ in excused if fnmatch.fnmatchcase(f, p)]
        assert not hits, f"{f} is wrapped but mpi_untraced.txt excuses it ({hits})"
