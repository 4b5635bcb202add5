"""Real MPI programs nobody here wrote, unchanged, under ``tiers mbc run``.

Each family runs at 2 and 4 ranks under plain Open MPI and under ``tiers mbc
run --json`` (libtiers-mbc-mpi.so preloaded), and the results are compared:

* Debian's ``hpcc`` on a tiny hpccinf.txt (N=400): the same verdicts (every
  ``PASSED``/``FAILED``, error counts, residual-check counts, ``Success=``),
  all of them passing;
* LAMMPS (Debian ``lammps``) on two inputs of ``lammps-examples``, melt
  (3-D LJ) and crack (2-D LJ), copied with a shorter ``run``: the same
  thermodynamic output, as printed, at the same steps;
* a PETSc KSP solve (CG + Jacobi on a 2-D Laplacian, tests/programs/
  petsc_ksp.c built against Debian's ``petsc-dev``): the same iteration
  count, converged reason, residual and error norms;
* mpi4py scripts (tests/programs/mpi4py_*.py): point-to-point with
  wildcards and probes, communicator splits, nonblocking and persistent
  requests: the same output.

mpi4py asks for MPI_THREAD_MULTIPLE by default, which memory-based
messaging refuses in one line; the scripts run at MPI_THREAD_SERIALIZED
(``MPI4PY_RC_THREAD_LEVEL``, under MPI and under MBC alike), and one test
checks the refusal itself.  mpi4py's pickled ``recv()`` uses ``MPI_Mprobe``
and ``MPI_Mrecv`` by default: the scripts run that way and once more with
``MPI4PY_RC_RECV_MPROBE=false`` (plain probe and receive).  Every MBC run also checks the statistics
document: every rank wrote one, and every message went by remote write or
by the FIFO.  The tests are skipped where the native folder tiers uses has
no libtiers-mbc-mpi.so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROGRAMS, run_tiers
from test_mbc_run import mpirun, plain_run, real_library

RANKS = [2, 4]
EXAMPLES = Path("/usr/share/lammps/examples")


def _openmpi() -> bool:
    from tiers import launch
    try:
        return launch.detect().kind == "openmpi"
    except Exception:  # noqa: BLE001 - no launcher: the skip says why
        return False


# The Debian builds of hpcc, LAMMPS and mpi4py's wheel here link Open MPI.
openmpi_only = pytest.mark.skipif(not _openmpi(), reason="the Debian programs link Open MPI")
pytestmark = [real_library, openmpi_only,
              pytest.mark.skipif(not shutil.which("mpirun"), reason="needs mpirun")]


def mbc_run(tmp_path: Path, cmd: list[str], cwd: Path, env: dict | None = None):
    """Run ``cmd`` under ``tiers mbc run --json``; return (run, summary)
    after checking the statistics document."""
    doc_path = tmp_path / "mbc.json"
    run = run_tiers("mbc", "run", "--json", str(doc_path), "--", *cmd, cwd=cwd, env=env,
                    timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    s = json.loads(doc_path.read_text())["summary"]
    n = int(cmd[cmd.index("-n") + 1])
    assert (s["ranks"], s["size"], s["missing_ranks"]) == (n, n, [])
    assert s["messages"] > 0
    for b in s["buckets"]:
        assert b["remote_write"] + b["fifo"] == b["messages"], b
    return run, s


# --------------------------------------------------------------------------
# hpcc

HPCC_INPUT = PROGRAMS / "hpccinf.txt"


def hpcc_verdicts(text: str) -> list[str]:
    """The lines of an hpccoutf.txt that say whether a test passed: the
    PASSED/FAILED word of each check (with the line's first word), error
    counts, residual-check counts, STREAM's validation and the summary's
    Success and error fields."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        m = re.search(r"\b(PASSED|FAILED)\b", s)
        if m and s.startswith("CPU ") and m.group(1) == "PASSED":
            # PTRANS prints its CPU-time line only when clock() moved during
            # the transpose, so whether a passing CPU line is there depends on
            # timing, not on the result; a failing one is kept.
            continue
        if m:
            out.append(f"{s.split()[0]} {m.group(1)}")
        elif re.match(r"(Found \d+ errors in \d+ locations|Node\(s\) with error|"
                      r"\d+ tests completed and (passed|failed)|Solution Validates|"
                      r"Success=|\w+_Errors=|\w+_ErrorsFraction=|PTRANS_residual=)", s):
            out.append(s)
    return out


def run_hpcc(folder: Path, n: int, runner) -> list[str]:
    folder.mkdir()
    p, q = (1, 2) if n == 2 else (2, 2)
    text = HPCC_INPUT.read_text()
    text = re.sub(r"^\d+(\s+Ps)", rf"{p}\1", text, flags=re.M)
    text = re.sub(r"^\d+(\s+Qs)", rf"{q}\1", text, flags=re.M)
    (folder / "hpccinf.txt").write_text(text)
    runner([*mpirun(n), "hpcc"], folder)
    return hpcc_verdicts((folder / "hpccoutf.txt").read_text())


@pytest.mark.skipif(not shutil.which("hpcc"), reason="needs Debian's hpcc")
@pytest.mark.parametrize("n", RANKS)
def test_hpcc_same_verdicts(tmp_path, n):
    def plain(cmd, cwd):
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=240,
                           env=_root_env())
        assert r.returncode == 0, r.stderr[-3000:]

    def mbc(cmd, cwd):
        mbc_run(tmp_path, cmd, cwd)

    want = run_hpcc(tmp_path / "mpi", n, plain)
    got = run_hpcc(tmp_path / "mbc", n, mbc)
    assert "Success=1" in want and not any("FAILED" in v for v in want), want
    assert "0 tests completed and failed residual checks." in want
    assert sum(v.startswith("Found 0 errors") for v in want) == 4, want
    assert want.count("WALL PASSED") == 5, want          # PTRANS ran its 5 checks
    assert got == want


def _root_env() -> dict:
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


# --------------------------------------------------------------------------
# LAMMPS

LAMMPS_INPUTS = {  # example: (run steps, thermo every)
    "melt": (100, 20),
    "crack": (400, 100),
}


def thermo_rows(text: str) -> list[str]:
    """The thermo table of a LAMMPS run as printed: the header and every
    row up to 'Loop time'."""
    rows, inside = [], False
    for line in text.splitlines():
        if line.split()[:1] == ["Step"]:
            inside = True
        elif line.startswith("Loop time"):
            inside = False
        if inside:
            rows.append(" ".join(line.split()))
    return rows


@pytest.mark.skipif(not shutil.which("lmp") or not EXAMPLES.is_dir(),
                    reason="needs Debian's lammps and lammps-examples")
@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("example", list(LAMMPS_INPUTS))
def test_lammps_same_thermo(tmp_path, example, n):
    steps, every = LAMMPS_INPUTS[example]
    text = (EXAMPLES / example / f"in.{example}").read_text()
    text = re.sub(r"^run\s+\d+", f"run {steps}", text, flags=re.M)
    text = re.sub(r"^thermo\s+\d+", f"thermo {every}", text, flags=re.M)
    (tmp_path / f"in.{example}").write_text(text)
    cmd = [*mpirun(n), "lmp", "-in", f"in.{example}", "-log", "none", "-nocite"]
    plain = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240,
                           env=_root_env())
    assert plain.returncode == 0, plain.stderr[-3000:]
    want = thermo_rows(plain.stdout)
    assert len(want) == 1 + steps // every + 1, want       # header, step 0 .. steps
    assert want[-1].split()[0] == str(steps)
    run, _ = mbc_run(tmp_path, cmd, tmp_path)
    assert thermo_rows(run.stdout) == want


# --------------------------------------------------------------------------
# PETSc


def _petsc_flags() -> list[str] | None:
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs", "PETSc"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.split()


@pytest.fixture(scope="module")
def petsc_ksp(tmp_path_factory):
    flags = _petsc_flags()
    if flags is None or not shutil.which("mpicc"):
        pytest.skip("needs mpicc and petsc-dev (pkg-config PETSc)")
    exe = tmp_path_factory.mktemp("petsc") / "petsc_ksp"
    subprocess.run(["mpicc", "-O1", "-o", str(exe), str(PROGRAMS / "petsc_ksp.c"), *flags],
                   check=True, capture_output=True, timeout=240)
    return str(exe)


@pytest.mark.parametrize("n", RANKS)
def test_petsc_ksp_same_iterations_and_residual(tmp_path, petsc_ksp, n):
    cmd = [*mpirun(n), petsc_ksp, "-m", "64"]
    plain = plain_run(cmd)
    assert plain.returncode == 0, plain.stderr[-3000:]
    want = plain.stdout.splitlines()
    assert want[0].startswith("iterations ") and int(want[0].split()[1]) > 10
    assert want[1] == "reason CONVERGED_RTOL"
    assert float(want[2].split()[-1]) < 1e-5
    run, s = mbc_run(tmp_path, cmd, tmp_path)
    assert run.stdout.splitlines()[:4] == want[:4]


# --------------------------------------------------------------------------
# mpi4py


def _has_mpi4py() -> bool:
    return subprocess.run([sys.executable, "-c", "import mpi4py.MPI"],
                          capture_output=True, env=_root_env()).returncode == 0


needs_mpi4py = pytest.mark.skipif(not _has_mpi4py(), reason="needs mpi4py")
SERIALIZED = {"MPI4PY_RC_THREAD_LEVEL": "serialized"}
#: mpi4py's pickled recv() without matched probes (MPI_Probe + MPI_Recv);
#: test_mpi4py_matched_probes runs its default (MPI_Mprobe + MPI_Mrecv).
NO_MPROBE = {**SERIALIZED, "MPI4PY_RC_RECV_MPROBE": "false"}


def _mpi4py_plain(cmd: list[str], n: int, env: dict) -> list[str]:
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                           env={**_root_env(), **env})
    assert plain.returncode == 0, plain.stderr[-3000:]
    want = [ln for ln in plain.stdout.splitlines() if ln.startswith("rank ")]
    assert {ln.split(":")[0] for ln in want} == {f"rank {r}" for r in range(n)}
    return want


@needs_mpi4py
@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("script", ["p2p", "split", "nonblocking"])
def test_mpi4py_same_output(tmp_path, script, n):
    cmd = [*mpirun(n), sys.executable, str(PROGRAMS / f"mpi4py_{script}.py")]
    want = _mpi4py_plain(cmd, n, NO_MPROBE)
    run, s = mbc_run(tmp_path, cmd, tmp_path, env=NO_MPROBE)
    assert [ln for ln in run.stdout.splitlines() if ln.startswith("rank ")] == want
    if script == "p2p":   # rank 0's receives with MPI_ANY_SOURCE and MPI_ANY_TAG
        assert s["wildcard_receives"] >= 2 * (n - 1)


@needs_mpi4py
@pytest.mark.parametrize("n", RANKS)
def test_mpi4py_matched_probes(tmp_path, n):
    """mpi4py's default pickled recv() (MPI_Mprobe, then MPI_Mrecv) gives
    the same output under MBC as under MPI, with every matched probe and
    matched receive carried by the library."""
    cmd = [*mpirun(n), sys.executable, str(PROGRAMS / "mpi4py_p2p.py")]
    want = _mpi4py_plain(cmd, n, SERIALIZED)
    run, s = mbc_run(tmp_path, cmd, tmp_path, env=SERIALIZED)
    assert [ln for ln in run.stdout.splitlines() if ln.startswith("rank ")] == want
    # every rank receives one pickled object around the ring
    assert s["carried"].get("MPI_Mprobe", 0) >= n, s["carried"]
    assert s["carried"].get("MPI_Mrecv", 0) == s["carried"]["MPI_Mprobe"], s["carried"]
    assert "MPI_Mprobe" not in s["passed_to_mpi"] and "MPI_Mrecv" not in s["passed_to_mpi"]


@needs_mpi4py
def test_mpi4py_default_thread_multiple_is_refused_in_one_line(tmp_path):
    cmd = [*mpirun(2), sys.executable, str(PROGRAMS / "mpi4py_split.py")]
    run = run_tiers("mbc", "run", "--", *cmd, cwd=tmp_path, timeout=240,
                    env={"MPI4PY_RC_THREAD_LEVEL": "multiple"})
    assert run.returncode == 2, run.stderr[-3000:]
    said = {ln for ln in run.stderr.splitlines() if ln.startswith("tiers mbc: ")}
    assert len(said) == 1, run.stderr
    assert said.pop().startswith("tiers mbc: MPI_Init_thread: not supported (")
    assert "rank 0:" not in run.stdout
