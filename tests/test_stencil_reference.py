"""jacobi3d and laplace2d against an independent reference: the same Jacobi
sweeps written in numpy, one IEEE operation at a time in the order the C
code evaluates them (no FMA contraction: the apps build with
-ffp-contract=off), with the transcendental terms from Python's math module
(the same libm).  The fields must agree bit for bit, so the exact figures
the apps print (jacobi3d's maximum error against the exact solution,
laplace2d's maximum and centre value) must equal the reference's exactly,
at every rank and thread count.  This pins what the sweeps compute, however
they are vectorised, blocked or laid out in memory (jacobi3d's source term
from 1-D tables, huge-page grids), and with either store kind: regular, or
non-temporal through a row buffer (what grids beyond the last-level cache
get; TIERS_STENCIL_STORES forces it here)."""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pytest

from conftest import run_tiers


def _app(tmp_path, app, ranks, threads, stores, *args, env=None):
    out = tmp_path / f"{app}-{ranks}x{threads}.json"
    run = run_tiers("bench", app, "--ranks", str(ranks), "--threads", str(threads), *args,
                    "--json", str(out), timeout=300,
                    env={"TIERS_STENCIL_STORES": stores, **(env or {})})
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())["samples"][0]["doc"]
    assert doc["verification"]["passed"] is True
    assert doc["params"]["stores"] == stores
    return doc["result"]


def _jacobi3d(nx, ny, nz, iters):
    """Returns (field without ghosts, indexed [k, j, i]; the maximum error)."""
    h = [1.0 / (n + 1) for n in (nx, ny, nz)]
    cx, cy, cz = (1.0 / (hh * hh) for hh in h)
    diag = 2.0 * (cx + cy + cz)
    inv = 1.0 / diag
    sx = np.array([3.0 * math.pi * math.pi * math.sin(math.pi * ((i + 1) * h[0]))
                   for i in range(nx)])
    sy = np.array([math.sin(math.pi * ((j + 1) * h[1])) for j in range(ny)])
    sz = np.array([math.sin(math.pi * ((k + 1) * h[2])) for k in range(nz)])
    # f = 3 pi^2 sin(pi x) sin(pi y) sin(pi z), left to right
    f = (sx[None, None, :] * sy[None, :, None]) * sz[:, None, None]
    u = np.zeros((nz + 2, ny + 2, nx + 2))
    for _ in range(iters):
        c = u[1:-1, 1:-1, 1:-1]
        s = (cx * (u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:])
             + cy * (u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1])) \
            + cz * (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1])
        s = s + f
        new = np.zeros_like(u)
        new[1:-1, 1:-1, 1:-1] = s * inv
        assert c.shape == s.shape
        u = new
    ex = np.array([math.sin(math.pi * ((i + 1) * h[0])) for i in range(nx)])
    ey = np.array([math.sin(math.pi * ((j + 1) * h[1])) for j in range(ny)])
    ez = np.array([math.sin(math.pi * ((k + 1) * h[2])) for k in range(nz)])
    exact = (ex[None, None, :] * ey[None, :, None]) * ez[:, None, None]
    field = u[1:-1, 1:-1, 1:-1]
    return field, float(np.max(np.abs(field - exact)))


def _laplace2d(nx, ny, iters):
    """Returns (u_max, u_center) of the reference field."""
    h = [1.0 / (n + 1) for n in (nx, ny)]
    cx, cy = 1.0 / (h[0] * h[0]), 1.0 / (h[1] * h[1])
    diag = 2.0 * (cx + cy)
    inv = 1.0 / diag
    u = np.zeros((ny + 2, nx + 2))
    u[-1, :] = 1.0  # the row above the top edge, corners included
    for _ in range(iters):
        s = cx * (u[1:-1, :-2] + u[1:-1, 2:]) + cy * (u[:-2, 1:-1] + u[2:, 1:-1])
        new = u.copy()
        new[1:-1, 1:-1] = s * inv
        u = new
    field = u[1:-1, 1:-1]
    return float(field.max()), float(field[ny // 2, nx // 2])


def test_reference_fields_are_not_trivial():
    # the comparisons below would prove little on a field still near zero
    field, err = _jacobi3d(10, 8, 6, 12)
    assert 0.05 < field.max() < 1.0 and 0.0 < err < 1.0
    umax, _ = _laplace2d(20, 16, 30)
    assert 0.3 < umax < 1.0


CONFIGS = [(1, 1, "regular"), (1, 2, "regular"), (2, 1, "regular"), (1, 1, "nt"),
           (1, 2, "nt"), (2, 1, "nt")]


@pytest.mark.parametrize("ranks,threads,stores", CONFIGS)
def test_jacobi3d_matches_the_numpy_sweep_bit_for_bit(tmp_path, ranks, threads, stores):
    nx, ny, nz, iters = 20, 14, 10, 9
    _, want = _jacobi3d(nx, ny, nz, iters)
    got = _app(tmp_path, "jacobi3d", ranks, threads, stores, "--size", f"{nx},{ny},{nz}",
               "--iters", str(iters))
    assert got["error_max"] == want


@pytest.mark.parametrize("ranks,threads,stores", [(1, 1, "regular"), (1, 2, "nt"),
                                                  (2, 1, "regular")])
def test_tiled_jacobi3d_sweeps_give_the_same_field_and_residuals(tmp_path, ranks, threads,
                                                                 stores):
    # tiles of 3 rows (TIERS_STENCIL_TILE; large grids get tiles sized to L2)
    # visit the rows in another order; the field must still match the numpy
    # sweep, and the residuals, summed back in row order, the untiled run's
    # to the last bit, with and without --overlap
    nx, ny, nz, iters = 22, 14, 10, 6
    _, want = _jacobi3d(nx, ny, nz, iters)
    for overlap in ([], ["--overlap"]):
        got = [_app(tmp_path, "jacobi3d", ranks, threads, stores, "--size", f"{nx},{ny},{nz}",
                    "--iters", str(iters), *overlap, env={"TIERS_STENCIL_TILE": tile})
               for tile in ("0", "3")]
        for res in got:
            assert res["error_max"] == want
        assert got[1]["residual"] == got[0]["residual"]
        assert got[1]["residual_initial"] == got[0]["residual_initial"]


@pytest.mark.parametrize("ranks,threads,stores", CONFIGS)
def test_laplace2d_matches_the_numpy_sweep_bit_for_bit(tmp_path, ranks, threads, stores):
    nx, ny, iters = 34, 22, 40
    umax, center = _laplace2d(nx, ny, iters)
    got = _app(tmp_path, "laplace2d", ranks, threads, stores, "--size", f"{nx},{ny}",
               "--iters", str(iters))
    assert got["u_max"] == umax
    assert got["u_center"] == center


@pytest.mark.parametrize("app,size", [("jacobi3d", "16,12,10"), ("laplace2d", "40,30")])
def test_store_kinds_give_the_same_residuals(tmp_path, app, size):
    # the residual sums are per lane and then across lanes: the row buffer
    # keeps the loop, so the residuals agree to the last bit as well
    got = [_app(tmp_path, app, 1, 2, stores, "--size", size, "--iters", "7")
           for stores in ("regular", "nt")]
    assert got[0]["residual"] == got[1]["residual"]
    assert got[0]["residual_initial"] == got[1]["residual_initial"]


def _llc_bytes() -> int:
    """The L3 size glibc reports (what the apps ask), 0 when unknown."""
    try:
        out = subprocess.run(["getconf", "LEVEL3_CACHE_SIZE"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        return int(out) if out.isdigit() else 0
    except (OSError, subprocess.SubprocessError):
        return 0


def _l1_bytes() -> int:
    try:
        out = subprocess.run(["getconf", "LEVEL1_DCACHE_SIZE"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        return int(out) if out.isdigit() else 0
    except (OSError, subprocess.SubprocessError):
        return 0


def _l2_bytes() -> int:
    try:
        out = subprocess.run(["getconf", "LEVEL2_CACHE_SIZE"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        return int(out) if out.isdigit() else 0
    except (OSError, subprocess.SubprocessError):
        return 0


def test_jacobi3d_tiles_planes_larger_than_the_l2_cache(tmp_path):
    l2 = _l2_bytes()
    if not 65536 <= l2 <= 8 << 20:
        pytest.skip(f"L2 size unknown or unusual ({l2})")
    # four planes of (n + 2)^2 doubles beyond L2: tiles of rows that fill half
    # of it in four planes; a grid whose planes fit: untiled
    n = int(math.sqrt(1.5 * l2 / 32)) + 2
    docs = {}
    for tile in (None, "0"):
        out = tmp_path / f"tile-{tile}.json"
        env = {"TIERS_STENCIL_TILE": tile} if tile else {"TIERS_STENCIL_TILE": ""}
        run = run_tiers("bench", "jacobi3d", "--ranks", "1", "--threads", "1", "--size",
                        f"{n},{n},4", "--iters", "3", "--json", str(out), timeout=300, env=env)
        assert run.returncode == 0, run.stderr
        docs[tile] = json.loads(out.read_text())["samples"][0]["doc"]
    want = max(8, int(l2 / 2 / (4 * 8 * (n + 2))))
    assert want < n
    assert docs[None]["params"]["tile_rows"] == want
    assert docs["0"]["params"]["tile_rows"] == 0
    assert docs[None]["result"] == docs["0"]["result"]
    small = tmp_path / "small.json"
    run = run_tiers("bench", "jacobi3d", "--ranks", "1", "--threads", "1", "--size", "24",
                    "--iters", "2", "--json", str(small), timeout=300,
                    env={"TIERS_STENCIL_TILE": ""})
    assert run.returncode == 0, run.stderr
    assert json.loads(small.read_text())["samples"][0]["doc"]["params"]["tile_rows"] == 0


def _stores(tmp_path, app, size):
    out = tmp_path / f"{app}-{size}.json"
    run = run_tiers("bench", app, "--ranks", "1", "--threads", "1", "--size", size,
                    "--iters", "2", "--json", str(out), timeout=300,
                    env={"TIERS_STENCIL_STORES": ""})
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())["samples"][0]["doc"]
    assert doc["verification"]["passed"] is True
    return doc["params"]["stores"]


def test_grids_beyond_the_last_level_cache_get_non_temporal_stores(tmp_path):
    llc, l1 = _llc_bytes(), _l1_bytes()
    if not (0 < llc <= 1 << 30 and l1 >= 8192):
        pytest.skip(f"cache sizes unknown or too large for a test grid (L3 {llc}, L1 {l1})")
    # jacobi3d: two grids of (n + 2)^3 doubles just beyond the cache, rows
    # far below a quarter of L1: non-temporal; a small grid: regular
    n = int((1.1 * llc / 16) ** (1 / 3)) + 2
    assert 8 * n <= l1 // 4
    assert _stores(tmp_path, "jacobi3d", str(n)) == "nt"
    assert _stores(tmp_path, "jacobi3d", "24") == "regular"
    # laplace2d beyond the cache with rows longer than a quarter of L1: a row
    # buffer would push the rows the stencil reads out of L1, so regular
    m = int(math.sqrt(1.1 * llc / 16)) + 2
    if 8 * m > l1 // 4:
        assert _stores(tmp_path, "laplace2d", str(m)) == "regular"
