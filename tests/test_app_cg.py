"""tiers-cg under real mpirun: NPB CG classes S and W reproduce NPB's zeta
at 1, 2 and 4 ranks x 1 and 2 threads, the Mop/s field is NPB's formula
applied to the printed time, Matrix Market solves give the exact solution,
and bad input ends in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess

import numpy as np
import pytest

from conftest import assert_one_line_error, run_app

from tiers import native

TOOL = "tiers-cg"

# NPB's problem classes: (na, nonzer, niter, shift) and the verification
# value of zeta, as published with the benchmark (NPB 3.x cg.f).  These
# are constants of the benchmark, not measurements.
NPB = {
    "S": ((1400, 7, 15, 10.0), 8.5971775078648),
    "W": ((7000, 8, 15, 12.0), 10.362595087124),
}


def npb_mops(na: int, nonzer: int, niter: int, seconds: float) -> float:
    """NPB CG's Mop/s: 2 niter na (3 + z + 25 (5 + z) + 3) / t / 1e6, z = nonzer (nonzer+1)."""
    z = nonzer * (nonzer + 1)
    return 2.0 * niter * na * (3 + z + 25 * (5 + z) + 3) / seconds / 1e6


def _run(ranks: int, threads: int, *args: str, check: bool = True):
    return run_app(TOOL, ranks, threads, *args, check=check, timeout=300)


def _single(*args: str) -> subprocess.CompletedProcess:
    """The tool without mpirun (MPI singleton), for exact stderr checks."""
    return subprocess.run([str(native.tool_path(TOOL)), "--pin", "none", *args],
                          capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------------------
# NPB classes


CONFIGS = [("S", 1, 1), ("S", 2, 1), ("S", 4, 1), ("S", 1, 2), ("S", 2, 2), ("S", 4, 2),
           ("W", 1, 1), ("W", 2, 1), ("W", 1, 2)]


@pytest.fixture(scope="module")
def npb_docs():
    return {(c, r, t): _run(r, t, "--class", c) for c, r, t in CONFIGS}


@pytest.mark.parametrize("klass,ranks,threads", CONFIGS)
def test_npb_zeta_matches_reference(npb_docs, klass, ranks, threads):
    doc = npb_docs[(klass, ranks, threads)]
    (na, nonzer, niter, shift), zeta_ref = NPB[klass]
    assert doc["schema"] == "tiers.app/1"
    assert doc["ranks"] == ranks and doc["threads"] == threads
    res = doc["result"]
    assert (res["class"], res["na"], res["nonzer"], res["niter"], res["shift"]) == \
        (klass, na, nonzer, niter, shift)
    assert abs(res["zeta"] - zeta_ref) / zeta_ref <= 1e-10
    assert doc["verification"]["passed"] is True
    # NPB prints zeta after every outer iteration; the last one is the result.
    assert len(res["zeta_per_iteration"]) == niter
    assert res["zeta_per_iteration"][-1] == res["zeta"]
    # The inverse power method converges: the last steps barely move zeta.
    assert abs(res["zeta_per_iteration"][-1] - res["zeta_per_iteration"][-2]) < 1e-8
    assert len(doc["breakdown"]["comm_s"]["per_rank"]) == ranks


@pytest.mark.parametrize("klass,ranks,threads", CONFIGS)
def test_mops_is_npb_formula_of_printed_time(npb_docs, klass, ranks, threads):
    doc = npb_docs[(klass, ranks, threads)]
    (na, nonzer, niter, _), _ = NPB[klass]
    fom = doc["figure_of_merit"]
    assert fom["unit"] == "Mop/s"
    assert fom["value"] == pytest.approx(npb_mops(na, nonzer, niter, doc["time_s"]), rel=1e-12)


def test_matrix_is_the_same_for_every_decomposition(npb_docs):
    for klass in NPB:
        docs = [d for (c, _, _), d in npb_docs.items() if c == klass]
        assert len({d["result"]["nnz"] for d in docs}) == 1
        zetas = [d["result"]["zeta"] for d in docs]
        assert max(zetas) - min(zetas) < 1e-12 * zetas[0]


def test_two_processes_and_two_threads_give_the_same_bits(npb_docs):
    """The product sums every row in an order fixed by the row alone, and a
    sum of two parts is the same in thread order and over MPI: the 2x1 and
    1x2 runs (the same split of the rows) agree to the last bit."""
    for klass in NPB:
        flat, hybrid = npb_docs[(klass, 2, 1)]["result"], npb_docs[(klass, 1, 2)]["result"]
        assert flat["zeta_per_iteration"] == hybrid["zeta_per_iteration"]
        assert flat["rnorm_per_iteration"] == hybrid["rnorm_per_iteration"]


def test_flat_run_has_no_thread_waits(npb_docs):
    doc = npb_docs[("S", 1, 1)]
    assert doc["breakdown"]["sync_s"]["max"] == 0.0
    assert doc["breakdown"]["compute_s"]["max"] > 0.0
    # two processes exchange p every CG iteration: communication time appears
    assert npb_docs[("S", 2, 1)]["breakdown"]["comm_s"]["max"] > 0.0


def test_tiers_bench_cg_table(tiers, tmp_path):
    out = tmp_path / "cg.json"
    run = tiers("bench", "cg", "--class", "S", "--ranks", "1,2", "--threads", "1,2",
                "--json", str(out), timeout=600)
    assert run.returncode == 0, run.stderr
    assert "time, speed-up and efficiency" in run.stdout
    assert "Mop/s" in run.stdout
    doc = json.loads(out.read_text())
    assert {(s["ranks"], s["threads"]) for s in doc["samples"]} == \
        {(r, t) for r in (1, 2) for t in (1, 2)}
    assert doc["summary"]["all_verified"] is True
    for row in doc["summary"]["rows"]:
        assert row["merit_unit"] == "Mop/s"
        assert row["merit"] == pytest.approx(npb_mops(1400, 7, 15, row["time_s"]), rel=1e-12)
    # the zeta table: one row per configuration with the run's zeta and
    # NPB's class S value, printed to 13 decimals
    assert "zeta against NPB's reference value" in run.stdout
    zetas = re.findall(r"^\W*(\d)x(\d)(?: \(over\))?\W+S\W+(\d+\.\d{13})\W+(\d+\.\d{13})\W.*\byes\b",
                       run.stdout, re.M)
    assert {(int(r), int(t)) for r, t, _, _ in zetas} == {(r, t) for r in (1, 2) for t in (1, 2)}
    for r, t, zeta, ref in zetas:
        sample = next(s for s in doc["samples"] if (s["ranks"], s["threads"]) == (int(r), int(t)))
        assert float(zeta) == pytest.approx(sample["doc"]["result"]["zeta"], abs=1e-12)
        assert float(ref) == pytest.approx(8.5971775078648, abs=1e-12)


# ---------------------------------------------------------------------------
# Matrix Market


def write_mtx(path, n: int, entries, symmetric: bool, field: str = "real") -> str:
    """Write (i, j, v) 1-based entries as a Matrix Market coordinate file."""
    kind = "symmetric" if symmetric else "general"
    lines = [f"%%MatrixMarket matrix coordinate {field} {kind}", "% written by test_app_cg",
             f"{n} {n} {len(entries)}"]
    lines += [f"{i} {j} {v!r}" for i, j, v in entries]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def laplace1d(n: int, symmetric: bool):
    out = []
    for i in range(1, n + 1):
        for j in (i - 1, i, i + 1):
            if 1 <= j <= n and (not symmetric or j <= i):
                out.append((i, j, 2 if i == j else -1))
    return out


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("ranks,threads", [(1, 1), (2, 1), (4, 1), (2, 2)])
def test_laplacian_solution_is_exact(tmp_path, symmetric, ranks, threads):
    n = 64
    path = write_mtx(tmp_path / "lap.mtx", n, laplace1d(n, symmetric), symmetric,
                     field="integer" if symmetric else "real")
    sol = tmp_path / "x.txt"
    doc = _run(ranks, threads, "--matrix", path, "--solution", str(sol))
    res = doc["result"]
    assert res["n"] == n and res["nnz"] == 3 * n - 2
    assert res["symmetry"] == ("symmetric" if symmetric else "general")
    assert res["converged"] is True and doc["verification"]["passed"] is True
    assert res["residual"] <= 1e-9
    assert res["iterations"] <= n
    # -x[i-1] + 2 x[i] - x[i+1] = 1 with x[0] = x[n+1] = 0: x[i] = i (n+1-i) / 2
    exact = np.array([i * (n + 1 - i) / 2 for i in range(1, n + 1)])
    x = np.loadtxt(sol)
    assert np.max(np.abs(x - exact)) <= 1e-8 * np.max(exact)
    assert res["x_max"] == pytest.approx(exact.max(), rel=1e-10)
    assert res["x_sum"] == pytest.approx(exact.sum(), rel=1e-10)


def assert_matches_dense_solve(path, a, ranks: int, threads: int, rel: float):
    """Write the symmetric matrix ``a`` (its lower triangle) to ``path``,
    solve A x = 1 with tiers-cg to 1e-12 on ``ranks`` x ``threads`` and
    assert that the run verifies and that x is numpy's dense solution to
    within ``rel`` of its largest entry."""
    n = a.shape[0]
    entries = [(i + 1, j + 1, float(a[i, j])) for i in range(n) for j in range(i + 1)
               if a[i, j] != 0]
    mtx = write_mtx(path, n, entries, symmetric=True)
    sol = path.parent / "x.txt"
    doc = _run(ranks, threads, "--matrix", mtx, "--solution", str(sol), "--tol", "1e-12")
    assert doc["verification"]["passed"] is True
    x = np.loadtxt(sol)
    want = np.linalg.solve(a, np.ones(n))
    assert np.max(np.abs(x - want)) <= rel * np.max(np.abs(want))


@pytest.mark.parametrize("ranks,threads", [(1, 2), (3, 1)])
def test_random_spd_matches_dense_solve(tmp_path, ranks, threads):
    rng = np.random.default_rng(7)
    n = 40
    b = rng.uniform(-1, 1, size=(n, n)) * (rng.uniform(size=(n, n)) < 0.15)
    a = b + b.T + np.diag(rng.uniform(1, 2, size=n) + np.abs(b + b.T).sum(axis=1))
    assert_matches_dense_solve(tmp_path / "spd.mtx", a, ranks, threads, 1e-9)


@pytest.mark.parametrize("ranks,threads", [(1, 1), (2, 1), (1, 2)])
def test_rows_of_every_length_match_dense_solve(tmp_path, ranks, threads):
    """Rows of 1 to 13 entries: the product's groups of four and every
    length of the remainder (0 to 3 entries) give the right A p."""
    rng = np.random.default_rng(11)
    n = 52
    a = np.zeros((n, n))
    for i in range(n):
        want = i % 13  # off-diagonal entries below the diagonal in row i
        cols = rng.choice(i, size=min(want, i), replace=False) if i else []
        for j in cols:
            a[i, j] = a[j, i] = rng.uniform(-1, 1)
    a += np.diag(np.abs(a).sum(axis=1) + rng.uniform(1, 2, size=n))
    lengths = set(int(c) for c in np.count_nonzero(a, axis=1))
    assert {k % 4 for k in lengths} == {0, 1, 2, 3} and max(lengths) >= 12
    assert_matches_dense_solve(tmp_path / "rows.mtx", a, ranks, threads, 1e-10)


@pytest.mark.parametrize("ranks,threads", [(1, 1), (2, 1), (1, 2)])
def test_columns_far_apart_solve_correctly(tmp_path, ranks, threads):
    """Rows whose neighbouring columns are 65,536 or more apart (the first
    and the last row couple): the product keeps 32-bit column indices for
    them, and the solution satisfies A x = 1 when checked here."""
    n = 66_000
    diag = 3.0 + np.arange(n) % 7  # x varies from row to row
    entries = [(i + 1, i + 1, float(diag[i])) for i in range(n)]
    entries += [(i + 1, i, -1.0) for i in range(1, n)]
    entries.append((n, 1, -1.5))
    path = write_mtx(tmp_path / "far.mtx", n, entries, symmetric=True)
    sol = tmp_path / "x.txt"
    doc = _run(ranks, threads, "--matrix", path, "--solution", str(sol), "--tol", "1e-12")
    assert doc["verification"]["passed"] is True and doc["result"]["nnz"] == 3 * n
    x = np.loadtxt(sol)
    ax = diag * x
    ax[1:] -= x[:-1]
    ax[:-1] -= x[1:]
    ax[0] -= 1.5 * x[-1]
    ax[-1] -= 1.5 * x[0]
    assert np.max(np.abs(ax - 1.0)) <= 1e-8


def test_too_few_iterations_fails_verification_with_the_miss(tmp_path):
    path = write_mtx(tmp_path / "lap.mtx", 50, laplace1d(50, True), True)
    run = _run(2, 1, "--matrix", path, "--iters", "3", check=False)
    assert run.returncode != 0
    lines = [ln for ln in run.stderr.splitlines() if "tiers-cg: error:" in ln]
    assert len(lines) == 1
    assert "did not converge" in lines[0] and "after 3 iterations" in lines[0]
    doc = run.json()
    assert doc["verification"]["passed"] is False and doc["result"]["iterations"] == 3
    single = _single("--threads", "1", "--matrix", path, "--iters", "3")
    assert single.returncode == 3


# ---------------------------------------------------------------------------
# Bad input: one line, non-zero exit


BAD_FILES = {
    "nonsquare.mtx": ("%%MatrixMarket matrix coordinate real general\n2 3 1\n1 1 1\n",
                      "is not square: 2 x 3"),
    "malformed.mtx": ("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n2 x 1\n",
                      "line 4: malformed entry"),
    "short.mtx": ("%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1\n2 2 1\n",
                  "ends after 2 of its 3 entries"),
    "header.mtx": ("1 1 1\n1 1 1\n", "is not a Matrix Market matrix file"),
    "array.mtx": ("%%MatrixMarket matrix array real general\n1 1\n1\n",
                  "only coordinate (sparse) files"),
    "indefinite.mtx": ("%%MatrixMarket matrix coordinate real symmetric\n2 2 3\n1 1 1\n"
                       "2 1 -3\n2 2 1\n", "is not positive definite: p.Ap = -4"),
    "negdiag.mtx": ("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n2 2 -1\n",
                    "diagonal entry A(2,2) = -1 is not positive"),
    "unsymmetric.mtx": ("%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1\n"
                        "2 1 0.5\n2 2 1\n", "is not symmetric: A(2,1) = 0.5"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_matrix_is_one_line(tmp_path, name):
    text, fragment = BAD_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    single = _single("--threads", "2", "--matrix", str(path))
    assert single.returncode == 2
    assert single.stdout == ""
    lines = single.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tiers-cg: error: {path}"), single.stderr
    assert fragment in lines[0]


# Read on rank 0 (non-square) and found during the solve by every rank
# (indefinite): either way the run ends in one line.
@pytest.mark.parametrize("name", ["nonsquare.mtx", "indefinite.mtx"])
def test_bad_matrix_under_mpirun_is_one_line(tmp_path, name, tiers):
    text, fragment = BAD_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    run = tiers("bench", "cg", "--ranks", "2", "--threads", "1", "--app-args",
                f"--matrix {path}")
    assert_one_line_error(run, fragment)


def test_missing_matrix_is_one_line(tmp_path, tiers):
    run = tiers("bench", "cg", "--ranks", "2", "--threads", "1", "--app-args",
                f"--matrix {tmp_path / 'nosuch.mtx'}")
    assert_one_line_error(run, "nosuch.mtx: No such file or directory")


def test_matrix_smaller_than_ranks_is_one_line(tmp_path, tiers):
    path = write_mtx(tmp_path / "lap3.mtx", 3, laplace1d(3, True), True)
    run = tiers("bench", "cg", "--ranks", "4", "--threads", "1", "--app-args",
                f"--matrix {path}")
    assert_one_line_error(run, "has 3 rows, fewer than the 4 processes")


@pytest.mark.parametrize("args,fragment", [
    (["--class", "X"], "unknown class X (known: S, W, A, B)"),
    (["--class", "S", "--matrix", "a.mtx"], "--class and --matrix exclude each other"),
    (["--iters", "5"], "apply to --matrix only"),
    (["--tol", "0"], "--tol needs a number between 0 and 1"),
    (["--grid", "1,1"], "--grid does not apply"),
    (["--bogus"], "unknown option --bogus"),
])
def test_bad_option_is_one_line(args, fragment):
    run = _single("--threads", "1", *args)
    assert run.returncode == 2
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tiers-cg: error: ") and fragment in lines[0]


def test_threads_above_cpuset_is_one_line():
    cpus = len(os.sched_getaffinity(0))
    run = _single("--threads", str(cpus + 1))
    assert run.returncode == 2
    assert run.stderr.splitlines() == [run.stderr.strip()]
    assert f"{cpus + 1} threads exceed the {cpus} PU" in run.stderr


def test_bench_rejects_unknown_class_and_iters(tiers):
    assert_one_line_error(tiers("bench", "cg", "--class", "Z"), "unknown class 'Z' for cg")
    assert_one_line_error(tiers("bench", "cg", "--iters", "3"), "cg takes no --iters")

