"""tiers-matmul under real mpirun: the blocked, tiled and column-broadcast
multiplies verify themselves (exact integer checks of every row, every
column and sampled entries) at 1, 2 and 4 ranks x 1 and 2 threads, the
figures in the document follow from the size, a perturbed result is caught,
and bad input ends in one line."""

from __future__ import annotations

import json
import math
import os

import pytest

from conftest import assert_one_line_error, run_app, tool_error_lines

from tiers import bench, launch

TOOL = "tiers-matmul"
QUICK_N = 240            # tiers-matmul --quick
DEFAULT_BLOCK = 64


def _run(ranks: int, threads: int, *args: str, check: bool = True):
    return run_app(TOOL, ranks, threads, *args, check=check, timeout=180)


def _error_lines(run, tool=TOOL):
    return tool_error_lines(run, tool)


@pytest.fixture(scope="module")
def tiled_grid(tmp_path_factory):
    """tiers bench matmul (the tiled multiply) over 1, 2, 4 ranks x 1, 2 threads."""
    from conftest import run_tiers

    out = tmp_path_factory.mktemp("matmul") / "matmul.json"
    run = run_tiers("bench", "matmul", "--quick", "--ranks", "1,2,4", "--threads", "1,2",
                    "--json", str(out), timeout=600)
    assert run.returncode == 0, run.stderr
    return run, json.loads(out.read_text())


def _assert_verified(doc: dict, n: int, ranks: int, iters: int = 1):
    assert doc["schema"] == "tiers.app/1" and doc["app"] == TOOL
    assert doc["ranks"] == ranks
    r, v = doc["result"], doc["verification"]
    assert v["passed"] is True and v["checked"] is True and v["misses"] == 0
    assert v["max_abs_diff"] == 0
    # every row and every column of C was checked, plus 64 entries per
    # process that holds rows (rank 0 alone for blocked/tiled)
    assert v["rows_checked"] == n and v["cols_checked"] == n
    holders = ranks if r["algo"] == "bcast" else 1
    assert v["entries_sampled"] == 64 * holders
    assert r["size"] == n and r["iters"] == iters
    assert r["flops"] == 2 * n ** 3 * iters
    assert r["rows_per_rank"] * ranks == n
    assert doc["figure_of_merit"]["unit"] == "GFLOP/s"
    assert doc["figure_of_merit"]["value"] == pytest.approx(r["flops"] / doc["time_s"] / 1e9,
                                                            rel=1e-9)
    assert len(doc["breakdown"]["comm_s"]["per_rank"]) == ranks


def test_bench_grid_verifies_and_tabulates(tiled_grid):
    run, doc = tiled_grid
    assert doc["schema"] == "tiers.bench/1" and doc["params"]["app"] == "matmul"
    assert {(s["ranks"], s["threads"]) for s in doc["samples"]} == \
        {(r, t) for r in (1, 2, 4) for t in (1, 2)}
    for s in doc["samples"]:
        d = s["doc"]
        assert d["threads"] == s["threads"]
        assert d["result"]["algo"] == "tiled"
        _assert_verified(d, QUICK_N, s["ranks"])
    # the table of the COMPaS paper's Table 5, speed-up and efficiency by definition
    assert "speed-up and efficiency" in run.stdout and "GFLOP/s" in run.stdout
    s = doc["summary"]
    base = s["baseline"]["time_s"]
    assert (s["baseline"]["ranks"], s["baseline"]["threads"]) == (1, 1)
    for row in s["rows"]:
        assert row["speedup"] == pytest.approx(base / row["time_s"])
        assert row["efficiency"] == pytest.approx(row["speedup"] / (row["ranks"] * row["threads"]))
    assert s["all_verified"] is True


def test_single_process_sends_nothing(tiled_grid):
    _, doc = tiled_grid
    one = next(s["doc"] for s in doc["samples"] if (s["ranks"], s["threads"]) == (1, 1))
    # no scatter, broadcast or gather with one process: no comm time at all
    assert one["breakdown"]["comm_s"]["max"] < 1e-4
    assert one["breakdown"]["compute_s"]["max"] > 0


@pytest.mark.parametrize("ranks,threads", [(1, 2), (2, 1), (2, 2), (4, 1), (4, 2)])
def test_bcast_counts_its_broadcasts(ranks, threads):
    block = 32
    doc = _run(ranks, threads, "--quick", "--algo", "bcast", "--block", str(block))
    _assert_verified(doc, QUICK_N, ranks)
    r = doc["result"]
    per = QUICK_N // ranks
    # every owner sends its N/P columns L at a time: P * ceil((N/P)/L) in all
    assert r["broadcasts"] == ranks * math.ceil(per / block)
    assert r["block"] == block
    assert r["bcast_bytes"] == 8 * QUICK_N * QUICK_N


@pytest.mark.parametrize("ranks,threads", [(1, 1), (2, 2), (4, 1)])
def test_blocked_and_generic_kernel(ranks, threads):
    doc = _run(ranks, threads, "--quick", "--algo", "blocked", "--iters", "2")
    _assert_verified(doc, QUICK_N, ranks, iters=2)
    assert doc["result"]["kernel"] == "blocked-c"
    # the portable micro-kernel, on an order that is not a multiple of its
    # 4 x 4 tile nor of the AVX2 6 x 8 one (edge blocks everywhere)
    n = 4 * 61
    doc = _run(ranks, threads, "--size", str(n), "--algo", "tiled", "--simd", "generic")
    _assert_verified(doc, n, ranks)
    assert (doc["result"]["kernel"], doc["result"]["mr"], doc["result"]["nr"]) == ("generic", 4, 4)


@pytest.mark.parametrize("algo,ranks", [("tiled", 2), ("bcast", 4)])
def test_a_wrong_entry_fails_verification(algo, ranks):
    # --perturb adds 1 to one entry after the multiply: the exact checks
    # must catch it, say by how much, and exit 3 (the app's own status)
    run = _run(ranks, 1, "--quick", "--algo", algo, "--perturb", "200,17", check=False)
    assert run.returncode != 0
    doc = launch.parse_json_output(run.stdout)
    assert doc["verification"]["passed"] is False and doc["verification"]["misses"] >= 2
    assert doc["verification"]["max_abs_diff"] == 1
    # exactly one line, from rank 0, printed before any rank ends
    lines = _error_lines(run)
    assert len(lines) == 1, run.stderr
    assert "verification failed" in lines[0] and "largest miss 1" in lines[0]


def test_exit_status_of_a_failed_check(native_bin):
    import subprocess

    proc = subprocess.run([native_bin(TOOL), "--quick", "--threads", "1", "--perturb", "0,0"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    assert proc.returncode == 3
    assert "row 0 of C sums to" in proc.stderr


def test_size_not_divisible_is_one_line(tiers):
    run = tiers("bench", "matmul", "--quick", "--ranks", "4", "--threads", "1", "--size", "30")
    assert_one_line_error(run, "--size 30 is not divisible by the 4 processes")


def test_unknown_algo_is_one_line(tiers):
    run = tiers("bench", "matmul", "--quick", "--ranks", "2", "--threads", "1",
                "--app-args", "--algo strassen")
    assert_one_line_error(run, "unknown --algo strassen")


@pytest.mark.parametrize("args,fragment", [
    (["--block", "0"], "--block needs a positive number"),
    (["--grid", "2,1"], "--grid does not apply"),
    (["--simd", "neon"], "--simd must be auto, avx512, avx2 or generic"),
    (["--perturb", "240,0"], "outside the 240 x 240 matrix"),
    (["--schedule", "dynamic"], "--schedule must be auto, shared or static"),
    (["--algo", "bcast", "--schedule", "shared"], "--schedule applies to --algo tiled only"),
])
def test_bad_options_are_one_line(args, fragment):
    run = _run(2, 1, "--quick", *args, check=False)
    assert run.returncode != 0
    lines = _error_lines(run)
    assert len(lines) == 1 and fragment in lines[0], run.stderr


def test_threads_above_the_cpuset_is_one_line():
    cpus = len(os.sched_getaffinity(0))
    run = _run(1, cpus + 1, "--quick", check=False)
    assert run.returncode != 0
    lines = _error_lines(run)
    assert len(lines) == 1 and f"{cpus + 1} threads" in lines[0], run.stderr
    assert "Traceback" not in run.stderr


def test_bench_app_entry():
    app = bench.app_info("matmul")
    assert app.tool == TOOL and app.size_option and app.iters_option
    assert bench.app_args(app, quick=True, size=480, iters=2) == \
        ["--quick", "--size", "480", "--iters", "2"]


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@pytest.mark.parametrize("simd,tile", [("avx2", (6, 8)), ("avx512", (12, 16))])
@pytest.mark.parametrize("ranks,threads", [(1, 2), (2, 1)])
def test_vector_kernels_with_edge_blocks(simd, tile, ranks, threads):
    # an order that is a multiple of neither tile and deeper than one packed
    # panel (KC = 384), so that edge blocks and the accumulate-into-C path
    # both run; the exact integer checks must pass
    need = {"avx2": {"avx2", "fma"}, "avx512": {"avx2", "fma", "avx512f"}}[simd]
    if not need <= _cpu_flags():
        pytest.skip(f"this CPU cannot run the {simd} kernel")
    n = 2 * 197 * 2  # 788: 788 mod 12 = 8, 788 mod 16 = 4, two panels of depth
    doc = _run(ranks, threads, "--size", str(n), "--algo", "tiled", "--simd", simd)
    _assert_verified(doc, n, ranks)
    r = doc["result"]
    assert (r["mr"], r["nr"]) == tile
    assert r["kernel"] == {"avx2": "avx2-fma", "avx512": "avx512"}[simd]


@pytest.mark.parametrize("algo", ["tiled", "bcast"])
@pytest.mark.parametrize("threads", [1, 2])
def test_avx512_kernel_past_one_packed_block_of_b(threads, algo):
    # N = 2052 > NC = 2048: a second block of B only 4 columns wide (narrower
    # than the 16-column tile, so its next-panel prefetch wraps to the
    # block's first panel), a last panel of depth 2052 - 5 * 384 = 132
    # (not a multiple of the 8 x 8 transposes that pack A) and, at 2
    # threads, 1026 rows each (1026 mod 12 = 6: an edge tile on every
    # thread); bcast packs its column-major chunks of B (64 columns, the
    # last 4) by 8 x 8 transposes with the same ragged depth; every row,
    # column and 64 entries are checked exactly
    if not {"avx2", "fma", "avx512f"} <= _cpu_flags():
        pytest.skip("this CPU cannot run the avx512 kernel")
    n = 2052
    doc = _run(1, threads, "--size", str(n), "--algo", algo, "--simd", "avx512")
    _assert_verified(doc, n, 1)
    assert doc["threads"] == threads and doc["result"]["algo"] == algo
    assert (doc["result"]["mr"], doc["result"]["nr"]) == (12, 16)


@pytest.mark.parametrize("simd", ["generic", "avx2", "avx512"])
@pytest.mark.parametrize("ranks,n", [(1, 2), (2, 2), (1, 26), (2, 794)])
def test_shared_schedule_of_a_thread_team(simd, ranks, n):
    # two threads share each packed panel of B and take row blocks of C as
    # they free up: orders smaller than a micro-tile (2: one thread's row
    # blocks are empty), smaller than a row block (26) and of several
    # panels of depth with ragged edges (794 = 2 * 384 + 26 deep, 397 rows
    # a process: an edge tile for every kernel), at one and two processes;
    # every row, column and 64 entries are checked exactly
    need = {"generic": set(), "avx2": {"avx2", "fma"}, "avx512": {"avx2", "fma", "avx512f"}}[simd]
    if not need <= _cpu_flags():
        pytest.skip(f"this CPU cannot run the {simd} kernel")
    doc = _run(ranks, 2, "--size", str(n), "--algo", "tiled", "--simd", simd, "--iters", "2",
               "--schedule", "shared")
    _assert_verified(doc, n, ranks, iters=2)
    r = doc["result"]
    assert r["schedule"] == "shared" and doc["threads"] == 2
    assert doc["params"]["schedule"] == "shared"
    # row blocks: a multiple of the threads, of at most 96 rows each
    assert r["row_blocks"] % 2 == 0 and r["row_blocks"] * 96 >= n // ranks
    assert len(r["thread_busy_s"]) == 2 and len(r["thread_blocks"]) == 2
    assert all(0 <= b <= doc["time_s"] for b in r["thread_busy_s"])
    # every panel (column block x depth block) has at least one row block
    # per thread, in each of the two multiplies
    panels = math.ceil(n / 2048) * math.ceil(n / 384)
    assert sum(r["thread_blocks"]) >= 2 * 2 * panels


def test_one_thread_keeps_its_own_panels():
    doc = _run(1, 1, "--size", "26", "--algo", "tiled")
    _assert_verified(doc, 26, 1)
    r = doc["result"]
    assert r["schedule"] == "static" and len(r["thread_busy_s"]) == 1
    assert "thread_blocks" not in r


@pytest.mark.parametrize("n", [240, 800])
def test_automatic_schedule_follows_the_l2_cache(n):
    # auto shares the panels of B once a panel (384 deep, up to 2048
    # wide) outgrows the L2 cache, and keeps one per thread below
    l2 = os.sysconf("SC_LEVEL2_CACHE_SIZE") if "SC_LEVEL2_CACHE_SIZE" in os.sysconf_names else 0
    l2 = l2 if l2 > 0 else 2 << 20
    want = "shared" if 8 * min(n, 384) * min(n, 2048) > l2 else "static"
    doc = _run(1, 2, "--size", str(n), "--algo", "tiled")
    _assert_verified(doc, n, 1)
    assert doc["params"]["schedule"] == "auto" and doc["result"]["schedule"] == want
    assert ("thread_blocks" in doc["result"]) == (want == "shared")
    # static on request, whatever the size
    doc = _run(1, 2, "--size", str(n), "--algo", "tiled", "--schedule", "static")
    _assert_verified(doc, n, 1)
    assert doc["result"]["schedule"] == "static" and "thread_blocks" not in doc["result"]

