"""jacobi3d's --permutation on this machine (no virtual cluster): the
subdomains really move to the ranks the file names.  The run is traced and
its communication matrix, indexed by world rank, must be the unpermuted
run's matrix with rows and columns renumbered by the permutation; the
solution is the same."""

from __future__ import annotations

import json

import pytest

from conftest import run_tiers
from tiers import launch, native


def _traced(tmp_path, name: str, ranks: int, grid: str, *extra: str):
    """Trace one jacobi3d run; return (its tiers.app/1 document, the
    point-to-point byte matrix by world rank)."""
    app = [str(native.tool_path("tiers-jacobi3d")), "--size", "48,24,24", "--grid", grid,
           "--iters", "6", "--threads", "1", "--pin", "none", "--no-verify", *extra]
    cmd = launch.build_command("openmpi", app, ranks, oversubscribe=True, bind_to="none",
                               mca={"mpi_yield_when_idle": "1"})
    out = tmp_path / name
    run = run_tiers("trace", "--budget", "1M", "--out", str(out), "--", *cmd, timeout=180)
    assert run.returncode == 0, run.stderr
    doc = next(json.loads(ln) for ln in run.stdout.splitlines() if '"tiers.app/1"' in ln)
    summary = json.loads((out / "summary.json").read_text())
    return doc, summary["summary"]["comm_matrix"]["bytes"]


@pytest.mark.parametrize("ranks,grid,perm", [(2, "2,1,1", [1, 0]),
                                             (4, "2,2,1", [2, 0, 3, 1])])
def test_permutation_moves_the_subdomains(tmp_path, ranks, grid, perm):
    try:
        launch.detect("openmpi")
    except Exception as exc:   # pragma: no cover - depends on the machine
        pytest.skip(f"no Open MPI: {exc}")
    plain, m = _traced(tmp_path, "plain", ranks, grid)
    pfile = tmp_path / "perm"
    pfile.write_text("".join(f"{p}\n" for p in perm))
    moved, mp = _traced(tmp_path, "moved", ranks, grid, "--permutation", str(pfile))
    assert moved["params"]["permutation"] == str(pfile)
    # subdomain s ran on world rank perm[s]: its traffic moved with it
    assert any(m[s][t] for s in range(ranks) for t in range(ranks))
    for s in range(ranks):
        for t in range(ranks):
            assert mp[perm[s]][perm[t]] == m[s][t], (s, t, m, mp)
    if ranks == 4:
        # faces of a 24 x 12 x 24 subdomain: an axis-1 pair carries 2x an
        # axis-0 pair, so the renumbered matrix differs from the plain one
        assert mp != m
    # the same problem was solved
    for key in ("iterations", "residual"):
        assert moved["result"][key] == pytest.approx(plain["result"][key], rel=1e-12)


def test_bad_permutation_is_one_line(tmp_path):
    pfile = tmp_path / "perm"
    pfile.write_text("0\n0\n")
    app = [str(native.tool_path("tiers-jacobi3d")), "--quick", "--threads", "1",
           "--permutation", str(pfile)]
    res = launch.launch(app, 2, check=False, oversubscribe=True, bind_to="none", timeout=120)
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if "error" in ln]
    assert any("is not a permutation of the 2 ranks" in ln for ln in lines), res.stderr


@pytest.mark.parametrize("ranks,threads", [(2, 1), (4, 1), (2, 2)])
def test_unbound_ranks_pin_their_threads_to_successive_pus(ranks, threads):
    """Under a launcher that binds nothing every rank sees the whole
    machine as its cpuset; compact pinning must then give rank k the PUs
    from k x threads on (wrapping around), not every rank the first PU.
    The app reports where each thread is pinned (thread_pus)."""
    import os

    app = [str(native.tool_path("tiers-jacobi3d")), "--quick", "--threads", str(threads),
           "--pin", "compact", "--no-verify"]
    doc = launch.launch_json(app, ranks, env={"OMP_NUM_THREADS": str(threads)},
                             bind_to="none", oversubscribe=True,
                             mca={"mpi_yield_when_idle": "1"}, timeout=120)
    cpus = len(os.sched_getaffinity(0))
    if threads > cpus:
        pytest.skip("more threads than CPUs")
    # logical PUs of this machine in compact order are 0..cpus-1 here
    # when the whole machine is the cpuset
    want = [[(r * threads + t) % cpus for t in range(threads)] for r in range(ranks)]
    assert doc["thread_pus"] == want
    unpinned = launch.launch_json(app[:-2] + ["none", "--no-verify"], ranks,
                                  env={"OMP_NUM_THREADS": str(threads)}, bind_to="none",
                                  oversubscribe=True, mca={"mpi_yield_when_idle": "1"},
                                  timeout=120)
    assert unpinned["thread_pus"] == [[-1] * threads for _ in range(ranks)]


@pytest.mark.parametrize("tool,size", [("tiers-jacobi3d", "99999999999"),
                                       ("tiers-jacobi3d", "8,8,2000000"),
                                       ("tiers-laplace2d", "99999999999999999999999,8")])
def test_size_beyond_the_axis_limit_is_one_line(tool, size):
    # Values strtol cannot hold, and values above 2^20 points an axis, are
    # refused before any grid is allocated (no overflow, no huge malloc).
    app = [str(native.tool_path(tool)), "--quick", "--threads", "1", "--size", size]
    res = launch.launch(app, 2, check=False, oversubscribe=True, bind_to="none", timeout=120)
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if f"{tool}: error:" in ln]
    assert lines and all("each 1..1048576" in ln for ln in lines), res.stderr


@pytest.mark.parametrize("tool,size", [("tiers-jacobi3d", "38,21,18"),
                                       ("tiers-laplace2d", "202,90")])
def test_vectorised_sweeps_give_the_same_field_everywhere(tool, size):
    # row lengths (19 or 38, 101 or 202 points) that leave a remainder after
    # every vector width (the sweeps keep per-lane residual sums): each run
    # checks its field bit for bit against the serial sweep, so a field
    # figure (jacobi3d's error against the exact solution, laplace2d's
    # largest value) is the same at every decomposition, and the residuals
    # agree to rounding
    from conftest import run_app

    docs = [run_app(tool, r, t, "--size", size, "--iters", "7", "--verify")
            for r, t in ((1, 1), (1, 2), (2, 1), (2, 2))]
    for d in docs:
        assert d["verification"]["passed"] is True
        assert d["result"]["residual"] < d["result"]["residual_initial"]
    first = docs[0]["result"]
    for d in docs[1:]:
        key = "error_max" if tool == "tiers-jacobi3d" else "u_max"
        assert d["result"][key] == first[key]
        assert d["result"]["residual"] == pytest.approx(first["residual"], rel=1e-12)
