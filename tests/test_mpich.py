"""MPICH as tiers' MPI, for real: the native tools built with
``cmake -DTIERS_MPI=mpich`` (``make test-mpich`` builds them into
build/mpich-inst and points TIERS_NATIVE_DIR there) run under MPICH's Hydra
``mpiexec`` at 2 and 4 ranks on this machine.

- the launcher tiers picks follows the MPI the tools were built with, never
  Debian's mpirun/mpiexec alternatives;
- the MPICH build links MPICH only;
- ``tiers map --launch`` with a Hydra machine file and ``-bind-to user:``
  places every rank on the PU of the placement table (tiers-whoami reports
  each rank's affinity);
- ``tiers trace -- mpiexec.mpich ...`` records trace_mix exactly as under
  Open MPI (the two summaries agree with each other and with what the
  program sends), and ``use mpi`` / ``use mpi_f08`` programs built with
  MPICH's mpif90.

Tests that need the MPICH build skip, naming make test-mpich, when the
tools in use were built with Open MPI (plain ``make test-py``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import run_tiers
from test_trace import assert_counts_and_matrix, fortran_expected, mix_expected
from tiers import launch, native

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
RANKS = [2, 4]


def _launcher(names, kind):
    for name in names:
        found = launch.identify(name)
        if found is not None and found.kind == kind:
            return found
    return None


# Tests of other files that check Open MPI's own command lines or behaviour:
# skipped under MPICH (tests/conftest.py), each for the reason given.
OPENMPI_ONLY = {
    "tests/test_probe_net.py::test_barrier_mpi_and_hybrid_rows":
        "asserts Open MPI's launch line (--bind-to none, PE=2); Hydra's is -bind-to",
    "tests/test_probe_net.py::test_rank_dying_mid_measurement":
        "Hydra's report of a killed process names no rank, the test expects 'rank 1'",
    "tests/test_probe_net.py::test_stalled_rank_in_a_small_message_ping_pong":
        "Hydra ends the job when the stalling rank exits, before rank 0 reports the deadline",
    "tests/test_probe_net.py::test_stalled_rank_hits_the_timeout":
        "Hydra ends the job when the stalling rank exits, before rank 0 reports the deadline",
    "tests/test_mbc.py::test_peer_exit_ends_waits_with_an_error":
        "Hydra kills every rank when one exits without MPI_Finalize "
        "(Open MPI: orte_allowed_exit_without_sync)",
    "tests/test_mbc.py::test_suite_across_vcluster_nodes":
        "the virtual cluster starts Open MPI's mpirun",
    "tests/test_mbc.py::test_under_address_sanitizer":
        "TIERS_MBC_ASAN_CHECK is the Open MPI ASan build",
}

MPICH = _launcher(("mpiexec.hydra", "mpiexec.mpich"), "mpich")
OPENMPI = _launcher(("mpirun.openmpi", "mpirun"), "openmpi")

needs_both = pytest.mark.skipif(MPICH is None or OPENMPI is None,
                                reason="needs Open MPI and MPICH both installed")
needs_mpich_build = pytest.mark.skipif(
    MPICH is None or launch.built_mpi() != "mpich",
    reason="needs tools built with -DTIERS_MPI=mpich: run make test-mpich")


def _whoami() -> str:
    return str(native.tool_path("tiers-whoami"))


def _fake_native(tmp_path: Path, mpi: str | None) -> Path:
    folder = tmp_path / f"native-{mpi}"
    (folder / "share" / "tiers").mkdir(parents=True)
    if mpi is not None:
        (folder / "share" / "tiers" / "build_info.json").write_text(
            json.dumps({"version": "0", "commit": "", "modified": False, "mpi": mpi}))
    return folder


# --------------------------------------------------------------- detection


@needs_both
def test_default_launcher_follows_the_build_not_the_alternatives(tmp_path, monkeypatch):
    # plain mpirun/mpiexec on PATH are MPICH's, as if the alternatives pointed there
    shadow = tmp_path / "bin"
    shadow.mkdir()
    (shadow / "mpirun").symlink_to("/usr/bin/mpirun.mpich")
    (shadow / "mpiexec").symlink_to(MPICH.program)
    monkeypatch.setenv("PATH", f"{shadow}:{os.environ['PATH']}")
    monkeypatch.delenv("TIERS_LAUNCHER", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)

    monkeypatch.setenv("TIERS_NATIVE_DIR", str(_fake_native(tmp_path, "openmpi")))
    assert launch.built_mpi() == "openmpi"
    found = launch.detect()
    assert found.kind == "openmpi"
    assert Path(found.program).resolve() == Path(OPENMPI.program).resolve()

    monkeypatch.setenv("TIERS_NATIVE_DIR", str(_fake_native(tmp_path, "mpich")))
    assert launch.built_mpi() == "mpich"
    assert launch.detect().kind == "mpich"
    # $TIERS_LAUNCHER and an explicit kind still win over the build
    monkeypatch.setenv("TIERS_LAUNCHER", "openmpi")
    assert launch.detect().kind == "openmpi"
    monkeypatch.delenv("TIERS_LAUNCHER")
    assert launch.detect("openmpi").kind == "openmpi"

    # tools that do not say (built before the key existed): Open MPI first
    monkeypatch.setenv("TIERS_NATIVE_DIR", str(_fake_native(tmp_path, None)))
    assert launch.built_mpi() is None
    assert launch.detect().kind == "openmpi"


@needs_mpich_build
def test_mpich_build_links_mpich_only():
    base = native.native_dir()
    parts = [base / "lib" / f"libtiers-{n}.so" for n in ("trace", "hybrid", "mbc")] + \
        [base / "bin" / n for n in ("tiers-probe-net", "tiers-whoami", "tiers-mbc-check",
                                   "tiers-hybrid-check", "tiers-cg", "tiers-jacobi3d")]
    for part in parts:
        assert part.is_file(), part
        deps = subprocess.run(["ldd", str(part)], capture_output=True, text=True,
                              check=True).stdout
        assert "libmpich.so" in deps, (part, deps)
        assert "libmpi.so" not in deps, (part, deps)   # Open MPI's library


# ------------------------------------------------------ launching under Hydra


@needs_mpich_build
@pytest.mark.parametrize("ranks", RANKS)
def test_whoami_under_hydra(ranks):
    doc = launch.launch_json([_whoami()], ranks, launcher="mpich", oversubscribe=True,
                             timeout=120)
    assert doc["mpi"].startswith("MPICH")
    assert [r["rank"] for r in doc["ranks"]] == list(range(ranks))
    assert {r["size"] for r in doc["ranks"]} == {ranks}
    assert len({r["pid"] for r in doc["ranks"]}) == ranks


def _whoami_report(stdout: str) -> dict:
    line = next(ln for ln in stdout.splitlines() if ln.startswith('{"schema":"tiers.whoami/1"'))
    return json.loads(line)


@needs_mpich_build
@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("form", ["program", "launcher-line"])
def test_map_launch_with_hydra_binds_every_rank(tmp_path, ranks, form):
    """tiers map --launch under MPICH: the program alone (tiers builds the
    mpiexec line with the machine file and -bind-to user:) or the user's
    mpiexec.mpich line (tiers adds them): every rank runs on its PU."""
    tab, hydra = tmp_path / "t.json", tmp_path / "hosts"
    cmd = ["--launcher", "mpich", "--", _whoami()] if form == "program" else \
        ["--", "mpiexec.mpich", "-n", str(ranks), _whoami()]
    r = run_tiers("map", "--stencil", f"2d:{ranks},1:20,20", "--oversubscribe",
                  "--table", str(tab), "--hydra", str(hydra), "--launch", *cmd, timeout=180)
    assert r.returncode == 0, r.stderr
    report = _whoami_report(r.stdout)
    assert report["mpi"].startswith("MPICH")
    table = json.loads(tab.read_text())["ranks"]
    assert len(report["ranks"]) == ranks
    assert {e["rank"]: e["cpuset"] for e in report["ranks"]} == \
        {e["rank"]: str(e["pu"]) for e in table}
    assert {e["rank"]: e["host"] for e in report["ranks"]} == \
        {e["rank"]: e["host"] for e in table}
    assert hydra.read_text().split() == [socket.gethostname()] * ranks


# ---------------------------------------------------------------- tracing


def _compile(tmp_path: Path, compiler: str, source: str, out: str) -> str:
    exe = tmp_path / out
    proc = subprocess.run([compiler, "-O1", "-o", str(exe), str(PROGRAMS / source)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return str(exe)


def _trace(folder: Path, *command: str, native_dir: Path | None = None) -> dict:
    env = {"TIERS_NATIVE_DIR": str(native_dir)} if native_dir else None
    run = run_tiers("trace", "--out", str(folder), "--", *command, env=env, timeout=240)
    assert run.returncode == 0, run.stderr
    return json.loads((folder / "summary.json").read_text())


def _counts(doc: dict) -> dict:
    return {"matrix": doc["summary"]["comm_matrix"],
            "p2p_bytes": doc["summary"]["p2p_bytes"],
            "calls": {r["rank"]: {f: (e["calls"], e["bytes"]) for f, e in r["functions"].items()}
                      for r in doc["samples"]["ranks"]}}


@needs_mpich_build
@pytest.mark.parametrize("n", RANKS)
def test_trace_under_mpich_matches_open_mpi(tmp_path, n):
    mpich_prog = _compile(tmp_path, "mpicc.mpich", "trace_mix.c", "mix-mpich")
    doc = _trace(tmp_path / "mpich", "mpiexec.mpich", "-n", str(n), mpich_prog)
    assert doc["schema"] == "tiers.trace/1"
    assert_counts_and_matrix(doc, mix_expected(n))
    anchor = tmp_path / "mpich" / "traces.otf2"
    assert anchor.is_file()

    # the same program built and traced with Open MPI (the package's own
    # tools, or $TIERS_OPENMPI_NATIVE_DIR)
    ompi_native = Path(os.environ.get("TIERS_OPENMPI_NATIVE_DIR") or
                       Path(native.__file__).resolve().parent / "_native")
    if OPENMPI is None or not (ompi_native / "lib" / "libtiers-trace.so").is_file():
        pytest.fail(f"no Open MPI build of the tracer in {ompi_native} to compare with: "
                    "make build, or set TIERS_OPENMPI_NATIVE_DIR")
    ompi_prog = _compile(tmp_path, "mpicc.openmpi", "trace_mix.c", "mix-ompi")
    other = _trace(tmp_path / "ompi", OPENMPI.program, "--oversubscribe", "-n", str(n),
                   ompi_prog, native_dir=ompi_native)
    assert _counts(other) == _counts(doc)


@needs_mpich_build
@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("source", ["trace_f.f90", "trace_f08.f90"])
def test_trace_fortran_programs_under_mpich(tmp_path, n, source):
    """`use mpi` (trace_f) and `use mpi_f08` (trace_f08) built with MPICH's
    mpif90: every call recorded once, with or without the optional ierror,
    MPI_STATUS(ES)_IGNORE and MPI_IN_PLACE included (see wrapgen.py,
    FORTRAN_ENTRIES_BY_MPI)."""
    if shutil.which("mpif90.mpich") is None:
        pytest.fail("mpif90.mpich missing: install libmpich-dev and gfortran")
    prog = _compile(tmp_path, "mpif90.mpich", source, "fortran-mpich")
    doc = _trace(tmp_path / "t", "mpiexec.mpich", "-n", str(n), prog)
    assert_counts_and_matrix(doc, fortran_expected(n))
    r0 = doc["samples"]["ranks"][0]["functions"]
    assert r0["MPI_Recv"]["bytes"] == 4 * 4096 + sum(20 * r for r in range(1, n))
    assert r0["MPI_Waitall"]["bytes"] == 2 * 400 + 200
    assert r0["MPI_Gather"]["bytes"] == 4 + 4 * n      # MPI_IN_PLACE seen at the root
