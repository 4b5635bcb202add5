"""Shared fixtures: run the tiers command line and the native tools.

The tests run whichever ``tiers`` package the interpreter imports: the one
``make build`` installed into .venv, or a source tree when PYTHONPATH points
at ``python/`` (then TIERS_NATIVE_DIR names a folder with the native bin/
and lib/).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


PROGRAMS = Path(__file__).resolve().parent / "programs"

#: skip mark of tests that build and launch MPI programs of tests/programs/
needs_mpicc = pytest.mark.skipif(not shutil.which("mpicc") or not shutil.which("mpirun"),
                                 reason="needs mpicc and mpirun")


def build_program(folder, name: str, *flags: str) -> str:
    """Compile tests/programs/NAME.c with mpicc -O1 into ``folder``; return
    the executable's path."""
    exe = Path(folder) / name
    subprocess.run(["mpicc", "-O1", *flags, "-o", str(exe), str(PROGRAMS / f"{name}.c")],
                   check=True, capture_output=True)
    return str(exe)


def build_fortran_program(folder, name: str, required: bool = False) -> str:
    """Compile tests/programs/NAME.f90 with mpif90 (or mpifort) -O1 into
    ``folder`` (run there, so any module files land there too); return the
    executable's path.  Without a Fortran MPI compiler the test is skipped,
    or fails when ``required``."""
    fc = shutil.which("mpif90") or shutil.which("mpifort")
    if not fc:
        if required:
            pytest.fail("mpif90 missing: install gfortran and the MPI Fortran bindings")
        pytest.skip("needs mpif90")
    exe = Path(folder) / name
    subprocess.run([fc, "-O1", "-o", str(exe), str(PROGRAMS / f"{name}.f90")], check=True,
                   capture_output=True, cwd=folder)
    return str(exe)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


def run_tiers(*args: str, timeout: float = 300, env: dict | None = None, cwd=None) -> Run:
    """Run ``python -m tiers ARGS`` and return its exit status and output."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run([sys.executable, "-m", "tiers", *args], capture_output=True,
                          text=True, timeout=timeout, env=full_env, cwd=cwd)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def run_app(tool: str, ranks: int, threads: int, *args: str, check: bool = True,
            timeout: float = 180, env: dict | None = None, pin: str = "none"):
    """Run a hybrid-runtime program (``tiers-jacobi3d``, ...) on ``ranks``
    ranks of ``threads`` threads (pinned as ``pin`` says) under the real launcher,
    oversubscribed and yielding when idle.  With ``check`` return its JSON
    document (a failed run raises); otherwise the launch result."""
    from tiers import launch, native

    program = [str(native.tool_path(tool)), "--threads", str(threads), "--pin", pin, *args]
    kwargs = dict(env={"OMP_NUM_THREADS": str(threads), **(env or {})}, bind_to="none",
                  oversubscribe=True, timeout=timeout)
    if launch.detect().kind == "openmpi":
        kwargs["mca"] = {"mpi_yield_when_idle": "1"}
    if check:
        return launch.launch_json(program, ranks, **kwargs)
    return launch.launch(program, ranks, check=False, **kwargs)


def tool_error_lines(run, tool: str) -> list[str]:
    """The ``TOOL: error: ...`` lines of a native tool's stderr."""
    return [ln for ln in run.stderr.splitlines() if ln.startswith(f"{tool}: error: ")]


def assert_one_line_error(run: Run, fragment: str) -> None:
    """A user error: non-zero exit, exactly one line on stderr that names the
    problem, and no traceback."""
    assert run.returncode != 0, run
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert lines[0].startswith("tiers: error: "), lines[0]
    assert fragment in lines[0], lines[0]


@pytest.fixture
def tiers():
    return run_tiers


@pytest.fixture(scope="session")
def native_bin():
    """Return a function giving the path of a native tool."""
    from tiers import native

    return lambda name: str(native.tool_path(name))


@pytest.fixture(scope="session")
def survey(tmp_path_factory):
    """One ``tiers survey`` (the main job, about a minute) shared by the
    tests that check what it writes and how its report renders: returns
    (the run, its output folder)."""
    out = tmp_path_factory.mktemp("survey") / "survey"
    return run_tiers("survey", "--out", str(out), timeout=900), out


def pytest_collection_modifyitems(config, items):
    """Under MPICH (make test-mpich: TIERS_LAUNCHER=mpich) skip the tests
    that check Open MPI's own command lines or behaviour, each with its
    reason (OPENMPI_ONLY in tests/test_mpich.py)."""
    if os.environ.get("TIERS_LAUNCHER", "").strip().lower() not in ("mpich", "hydra"):
        return
    from test_mpich import OPENMPI_ONLY

    for item in items:
        for prefix, why in OPENMPI_ONLY.items():
            if item.nodeid.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=f"Open MPI only: {why}"))
