"""The NPB-method CG references of bench/cg_classes (ref_cg_omp.c,
ref_cg_mpi.c): built here as the benchmark builds them, run under the real
launcher, checked against NPB's class S zeta, against each other and
against tiers-cg (an independent implementation of the same method)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import needs_mpicc, run_app

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT / "bench" / "cg_classes"
# NPB's published class S parameters and verification value
NA, NONZER, NITER, ZETA_S = 1400, 7, 15, 8.5971775078648

pytestmark = needs_mpicc


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    """{"mpi": path, "omp": path}: the two references compiled as
    bench/cg_classes/run compiles them (tiers' application flags)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("needs cc")
    out = tmp_path_factory.mktemp("cgref")
    exes = {}
    for kind, compiler, extra in (("mpi", "mpicc", []), ("omp", cc, ["-fopenmp"])):
        exe = out / f"ref_cg_{kind}"
        proc = subprocess.run([compiler, "-O3", "-ffp-contract=off", "-Wall", "-Wextra", *extra,
                               "-o", str(exe), str(REF / f"ref_cg_{kind}.c"), "-lm"],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert "warning:" not in proc.stderr, proc.stderr
        exes[kind] = str(exe)
    return exes


def run_mpi(exe: str, ranks: int, *args: str):
    """ref_cg_mpi on ``ranks`` ranks (oversubscribed, yielding when idle);
    returns the launch result."""
    from tiers import launch

    kwargs = dict(bind_to="none", oversubscribe=True, timeout=180, check=False,
                  env={"OMP_NUM_THREADS": "1"})
    if launch.detect().kind == "openmpi":
        kwargs["mca"] = {"mpi_yield_when_idle": "1"}
    return launch.launch([exe, *args], ranks, **kwargs)


def run_omp(exe: str, threads: int, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    return subprocess.run([exe, *args], capture_output=True, text=True, env=env, timeout=180)


def doc_of(stdout: str) -> dict:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


def npb_mops(na: int, nonzer: int, niter: int, seconds: float) -> float:
    z = nonzer * (nonzer + 1)
    return 2.0 * niter * na * (3 + z + 25 * (5 + z) + 3) / seconds / 1e6


def check_class_s(d: dict) -> None:
    assert (d["class"], d["na"], d["nonzer"], d["niter"]) == ("S", NA, NONZER, NITER)
    assert d["zeta_reference"] == pytest.approx(ZETA_S, rel=1e-15)
    assert abs(d["zeta"] - ZETA_S) / ZETA_S <= 1e-10
    assert d["verified"] is True
    assert d["zeta_rel_error"] == pytest.approx(abs(d["zeta"] - ZETA_S) / ZETA_S, abs=1e-15)
    # the inner CG solves A z = x to rounding: NPB's residual norm is tiny
    assert 0 <= d["rnorm"] < 1e-10
    assert d["time_s"] > 0
    assert d["mops"] == pytest.approx(npb_mops(NA, NONZER, NITER, d["time_s"]), rel=1e-3)


@pytest.mark.parametrize("ranks,grid", [(1, [1, 1]), (2, [1, 2]), (4, [2, 2]), (8, [2, 4])])
def test_mpi_reference_verifies_class_s_on_npbs_process_grid(refs, ranks, grid):
    """1 and 2 ranks are the benchmark's; 4 (square grid) and 8 (npcols =
    2 nprows) are the grids where the transpose exchange moves data."""
    r = run_mpi(refs["mpi"], ranks, "--class", "S")
    assert r.returncode == 0, r.stderr
    d = doc_of(r.stdout)
    check_class_s(d)
    assert d["procs"] == ranks and d["threads"] == 1
    assert d["grid"] == grid
    serial = doc_of(run_omp(refs["omp"], 1, "--class", "S").stdout)
    # every rank count holds the same matrix (the blocks add up to it) and
    # reaches the same zeta up to the order of the sums
    assert d["nnz"] == serial["nnz"]
    assert d["zeta"] == pytest.approx(serial["zeta"], rel=1e-13)


@pytest.mark.parametrize("threads", [1, 2])
def test_openmp_reference_verifies_class_s(refs, threads):
    r = run_omp(refs["omp"], threads, "--class", "S")
    assert r.returncode == 0, r.stderr
    d = doc_of(r.stdout)
    check_class_s(d)
    assert d["procs"] == 1 and d["threads"] == threads and d["grid"] == [1, 1]


def test_references_make_the_matrix_and_zeta_of_tiers_cg(refs):
    """Two independent implementations of NPB's method: the same nonzeros
    and the same zeta (to rounding) as tiers-cg."""
    t = run_app("tiers-cg", 1, 1, "--class", "S")["result"]
    d = doc_of(run_omp(refs["omp"], 2, "--class", "S").stdout)
    assert d["nnz"] == t["nnz"]
    assert d["zeta"] == pytest.approx(t["zeta"], rel=1e-12)


@pytest.mark.parametrize("kind,n", [("omp", 2), ("mpi", 2)])
def test_a_zeta_off_npbs_value_is_reported_not_verified(refs, kind, n):
    """Two outer iterations instead of 15: the power method has not
    converged, zeta misses NPB's value, and the program says so (exit 3)."""
    if kind == "omp":
        r = run_omp(refs["omp"], n, "--class", "S", "--niter", "2")
    else:
        r = run_mpi(refs["mpi"], n, "--class", "S", "--niter", "2")
    assert r.returncode == 3
    d = doc_of(r.stdout)
    assert d["niter"] == 2
    assert d["verified"] is False
    assert d["zeta_rel_error"] > 1e-10
    assert abs(d["zeta"] - ZETA_S) / ZETA_S == pytest.approx(d["zeta_rel_error"], rel=1e-3)
    assert d["mops"] == pytest.approx(npb_mops(NA, NONZER, 2, d["time_s"]), rel=1e-3)


def test_references_refuse_bad_usage_in_one_line(refs):
    for args, fragment in ((["--class", "Q"], "--class must be S, W, A or B (got 'Q')"),
                           (["--niter", "0"], "--niter must be a count"),
                           (["--class"], "unknown or incomplete option '--class'")):
        r = run_omp(refs["omp"], 1, *args)
        assert r.returncode == 2
        assert r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ref_cg_omp: error: ")
        assert fragment in lines[0]
    r = run_mpi(refs["mpi"], 3, "--class", "S")
    assert r.returncode != 0
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("ref_cg_mpi: error: ")]
    assert errors == ["ref_cg_mpi: error: the number of processes must be a power of two "
                      "(got 3)"]
