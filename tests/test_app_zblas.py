"""tiers-zblas under real mpirun: zaxpy, zdotc, dznrm2 and zgemv (N, T, C)
verify themselves against the serial reference at 1, 2 and 4 ranks x 1 and
2 threads, in both the AVX2 and the portable kernels; the dot product and
the norm equal values computed here independently; dznrm2 survives huge and
tiny inputs; bytes and flops follow from the sizes; bad input is one line."""

from __future__ import annotations

import json
import math
import os
import re
from fractions import Fraction

import pytest

from conftest import assert_one_line_error, run_app, tool_error_lines

from tiers import bench

TOOL = "tiers-zblas"
QUICK_N, QUICK_M, QUICK_ITERS = 4096, 64, 10
KERNELS = ["zaxpy", "zdotc", "dznrm2", "zgemv_n", "zgemv_t", "zgemv_c"]


def _x(i: int) -> tuple[Fraction, Fraction]:
    """x_i of native/apps/zblas.c, exactly."""
    return Fraction((7 * i) % 13 - 6, 8), Fraction((3 * i) % 11 - 5, 8)


def _y(i: int) -> tuple[Fraction, Fraction]:
    return Fraction((5 * i) % 17 - 8, 16), Fraction((11 * i) % 7 - 3, 4)


def exact_zdotc(n: int) -> tuple[float, float]:
    re = im = Fraction(0)
    for i in range(n):
        (xr, xi), (yr, yi) = _x(i), _y(i)
        re += xr * yr + xi * yi
        im += xr * yi - xi * yr
    return float(re), float(im)


def exact_sumsq(n: int) -> Fraction:
    return sum((xr * xr + xi * xi for xr, xi in map(_x, range(n))), Fraction(0))


def _run(ranks: int, threads: int, *args: str, check: bool = True):
    return run_app(TOOL, ranks, threads, *args, check=check, timeout=180)


def _error_lines(run):
    return tool_error_lines(run, TOOL)


def _assert_consistent(doc: dict, n: int, m: int, iters: int, names=KERNELS):
    r = doc["result"]
    assert doc["verification"]["passed"] is True and doc["verification"]["checked"] is True
    assert (r["length"], r["matrix"], r["iters"]) == (n, m, iters)
    assert [k["name"] for k in r["kernels"]] == names
    bytes_ = {"zaxpy": 48 * n, "zdotc": 32 * n, "dznrm2": 16 * n}
    flops = {"zaxpy": 8 * n, "zdotc": 8 * n, "dznrm2": 4 * n}
    for name in ("zgemv_n", "zgemv_t", "zgemv_c"):
        bytes_[name] = 16 * m * m + 48 * m
        flops[name] = 8 * m * m
    total_b = total_s = 0.0
    for k in r["kernels"]:
        assert k["passed"] is True and k["error"] <= k["tolerance"], k
        assert k["calls"] == iters
        assert k["bytes_per_call"] == bytes_[k["name"]]
        assert k["flops_per_call"] == flops[k["name"]]
        assert k["seconds_per_call"] == pytest.approx(k["seconds"] / iters)
        assert k["gbytes_per_s"] == pytest.approx(k["bytes_per_call"] / k["seconds_per_call"] / 1e9)
        assert k["gflops_per_s"] == pytest.approx(k["flops_per_call"] / k["seconds_per_call"] / 1e9)
        total_b += k["bytes_per_call"] * iters
        total_s += k["seconds"]
    fom = doc["figure_of_merit"]
    assert fom["unit"] == "GB/s" and fom["value"] == pytest.approx(total_b / total_s / 1e9)


@pytest.fixture(scope="module")
def grid_doc(tmp_path_factory):
    from conftest import run_tiers

    out = tmp_path_factory.mktemp("zblas") / "zblas.json"
    run = run_tiers("bench", "zblas", "--quick", "--ranks", "1,2,4", "--threads", "1,2",
                    "--json", str(out), timeout=600)
    assert run.returncode == 0, run.stderr
    return run, json.loads(out.read_text())


def test_every_configuration_verifies(grid_doc):
    run, doc = grid_doc
    assert {(s["ranks"], s["threads"]) for s in doc["samples"]} == \
        {(r, t) for r in (1, 2, 4) for t in (1, 2)}
    for s in doc["samples"]:
        d = s["doc"]
        assert d["ranks"] == s["ranks"] and d["threads"] == s["threads"]
        _assert_consistent(d, QUICK_N, QUICK_M, QUICK_ITERS)
    assert doc["summary"]["all_verified"] is True
    assert "speed-up and efficiency" in run.stdout and "GB/s" in run.stdout
    # the GFLOP/s table: a row per kernel, a column per configuration, each
    # figure the run's own flops over its time
    assert "GFLOP/s per kernel" in run.stdout
    for name in KERNELS:
        m = re.search(rf"^\W*{name}\b(.*)$", run.stdout, re.M)
        assert m, name
        shown = [float(v) for v in re.findall(r"\d+\.\d+", m.group(1))]
        want = [next(k for k in s["doc"]["result"]["kernels"] if k["name"] == name)["gflops_per_s"]
                for s in doc["samples"]]
        assert shown == pytest.approx([round(w, 2) for w in want], abs=0.006)


def test_dot_and_norm_are_exact_everywhere(grid_doc):
    # the inputs are multiples of 1/16: every product and partial sum is
    # exact, so any decomposition must give the exact value
    _, doc = grid_doc
    dot = exact_zdotc(QUICK_N)
    norm = math.sqrt(exact_sumsq(QUICK_N))
    for s in doc["samples"]:
        r = s["doc"]["result"]
        assert tuple(r["zdotc"]) == dot, (s["ranks"], s["threads"])
        assert r["dznrm2"] == norm


def test_several_processes_exchange_messages(grid_doc):
    _, doc = grid_doc
    for s in doc["samples"]:
        b = s["doc"]["breakdown"]
        assert b["compute_s"]["max"] > 0
        if s["ranks"] > 1:           # reductions, zgemv's gather / reduce-scatter
            assert b["comm_s"]["max"] > 0


@pytest.mark.parametrize("ranks,threads", [(1, 2), (2, 2), (4, 1)])
def test_portable_kernels_and_ragged_sizes(ranks, threads):
    # odd lengths per process and per thread: every tail path of the
    # vector kernels runs, in both the AVX2 and the portable kernels
    n, m = 4 * 1031, 4 * 17
    for simd in ("generic", "auto"):
        doc = _run(ranks, threads, "--size", str(n), "--matrix", str(m), "--iters", "3",
                   "--simd", simd)
        _assert_consistent(doc, n, m, 3)
        assert tuple(doc["result"]["zdotc"]) == exact_zdotc(n)
        assert doc["result"]["dznrm2"] == math.sqrt(exact_sumsq(n))
    assert doc["result"]["simd"] in ("avx512", "avx2-fma", "generic")


@pytest.mark.parametrize("ranks,threads,n", [(1, 2, 4 * 131), (2, 2, 4 * 131), (1, 2, 4 * 1031)])
def test_zaxpy_below_and_above_its_thread_split(ranks, threads, n):
    # short vectors run zaxpy on fewer threads than the team has (the
    # others get an empty block); every element must still be updated once
    # per call, which the kernel's check against the exact y verifies
    doc = _run(ranks, threads, "--size", str(n), "--matrix", "8", "--iters", "5",
               "--kernel", "zaxpy")
    _assert_consistent(doc, n, 8, 5, names=["zaxpy"])


@pytest.mark.parametrize("scale", ["1e300", "1e-300", "1e160", "1e-170"])
def test_dznrm2_neither_overflows_nor_underflows(scale):
    # a naive sum of squares gives inf for 1e300 and 0 for 1e-300
    doc = _run(2, 2, "--quick", "--kernel", "dznrm2", "--scale", scale)
    _assert_consistent(doc, QUICK_N, QUICK_M, QUICK_ITERS, names=["dznrm2"])
    want = float(scale) * math.sqrt(exact_sumsq(QUICK_N))
    assert math.isfinite(doc["result"]["dznrm2"]) and doc["result"]["dznrm2"] > 0
    assert doc["result"]["dznrm2"] == pytest.approx(want, rel=1e-13)


def test_kernel_selection():
    doc = _run(2, 1, "--quick", "--kernel", "zgemv,zdotc")
    _assert_consistent(doc, QUICK_N, QUICK_M, QUICK_ITERS,
                       names=["zdotc", "zgemv_n", "zgemv_t", "zgemv_c"])
    assert "dznrm2" not in doc["result"]


def test_default_sizes_are_the_seeds():
    doc = _run(1, 1, "--kernel", "dznrm2", "--iters", "1")
    assert (doc["result"]["length"], doc["result"]["matrix"]) == (256 * 256, 256)


def test_size_not_divisible_is_one_line(tiers):
    run = tiers("bench", "zblas", "--quick", "--ranks", "4", "--threads", "1", "--size", "4098")
    assert_one_line_error(run, "--size 4098 is not divisible by the 4 processes")


@pytest.mark.parametrize("args,fragment", [
    (["--kernel", "zgemm"], "unknown --kernel zgemm"),
    (["--kernel", "zaxpy,bogus"], "unknown --kernel bogus"),
    (["--matrix", "65"], "matrix order 65 is not divisible by the 2 processes"),
    (["--scale", "0"], "--scale needs a positive finite number"),
    (["--simd", "sse"], "--simd must be auto, avx512, avx2 or generic"),
    (["--overlap"], "no halo exchange"),
])
def test_bad_options_are_one_line(args, fragment):
    run = _run(2, 1, "--quick", *args, check=False)
    assert run.returncode != 0
    lines = _error_lines(run)
    assert len(lines) == 1 and fragment in lines[0], run.stderr


def test_threads_above_the_cpuset_is_one_line():
    cpus = len(os.sched_getaffinity(0))
    run = _run(2, cpus + 1, "--quick", check=False)
    assert run.returncode != 0
    lines = _error_lines(run)
    assert len(lines) == 1 and f"{cpus + 1} threads" in lines[0], run.stderr


def test_unknown_kernel_through_bench_is_one_line(tiers):
    run = tiers("bench", "zblas", "--quick", "--ranks", "1", "--threads", "1",
                "--app-args", "--kernel zgemm")
    assert_one_line_error(run, "unknown --kernel zgemm")


def test_bench_app_entry():
    app = bench.app_info("zblas")
    assert app.tool == TOOL and app.size_option and app.iters_option
    assert not app.overlap_option and not app.classes


def _simd_levels() -> list[str]:
    """The --simd levels this CPU runs, from /proc/cpuinfo's flags."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    levels = ["generic"]
    if {"avx2", "fma"} <= flags:
        levels.append("avx2")
        if {"avx512f", "avx512dq"} <= flags:
            levels.append("avx512")
    return levels


@pytest.mark.parametrize("simd", _simd_levels())
@pytest.mark.parametrize("scale", ["1", "1e300", "1e-300"])
def test_every_simd_level_is_exact_with_threads_sharing_the_work(simd, scale):
    # long enough that both threads of the reductions take part (below
    # 768 complex numbers per thread zdotc runs on one, below 384 dznrm2),
    # with a ragged tail; zdotc is exact (multiples of 1/16), dznrm2 within 1e-13
    # of the exact norm, relative, whether its blocks take the fast path (scale 1)
    # or Blue's scaled sums (huge and tiny values)
    # (a sum of 65,000 rounded squares)
    n = 2 * 16384 + 13
    doc = _run(1, 2, "--size", str(n), "--matrix", "61", "--iters", "2", "--simd", simd,
               "--scale", scale, "--kernel", "zaxpy,zdotc,dznrm2,zgemv")
    _assert_consistent(doc, n, 61, 2)
    assert doc["result"]["simd"] == {"generic": "generic", "avx2": "avx2-fma",
                                     "avx512": "avx512"}[simd]
    assert tuple(doc["result"]["zdotc"]) == exact_zdotc(n)
    want = float(scale) * math.sqrt(exact_sumsq(n))
    assert doc["result"]["dznrm2"] == pytest.approx(want, rel=1e-13)


@pytest.mark.parametrize("n", [760, 776, 1528, 1544])
def test_reductions_either_side_of_their_thread_split_stay_exact(n):
    # zdotc splits over two threads from 768 complex numbers a thread
    # (n >= 1536), dznrm2 from 384 (n >= 768): below, the second thread sits
    # out; either way, and on one thread, the values are the exact ones,
    # bit for bit
    for threads in (1, 2):
        doc = _run(1, threads, "--size", str(n), "--iters", "5", "--kernel", "zdotc,dznrm2")
        _assert_consistent(doc, n, int(math.isqrt(n)), 5, names=["zdotc", "dznrm2"])
        assert tuple(doc["result"]["zdotc"]) == exact_zdotc(n)
        assert doc["result"]["dznrm2"] == math.sqrt(exact_sumsq(n))


@pytest.mark.parametrize("threads", [1, 2])
def test_avx512_zgemv_past_one_row_block(threads):
    # the AVX-512 zgemv_n works in row blocks of 1024: order 2062 gives one
    # thread two whole blocks and a 14-row tail, two threads 1031 rows each
    # (a whole block and a 7-row tail: masked loads); 2062 mod 8 = 6 and
    # mod 4 = 2 leave leftover columns for zgemv_n and zgemv_t/_c; all three
    # must match the serial reference within its bound
    if "avx512" not in _simd_levels():
        pytest.skip("this CPU cannot run the avx512 kernels")
    m = 2062
    doc = _run(1, threads, "--size", "4096", "--matrix", str(m), "--iters", "2",
               "--simd", "avx512", "--kernel", "zgemv")
    _assert_consistent(doc, 4096, m, 2, names=["zgemv_n", "zgemv_t", "zgemv_c"])
    assert doc["result"]["simd"] == "avx512" and doc["threads"] == threads


@pytest.mark.parametrize("ranks,threads,m", [(1, 1, 401), (1, 2, 601), (2, 1, 802)])
def test_avx512_zgemv_on_l3_sized_matrices_and_split_columns(ranks, threads, m):
    # a process's matrix beyond the L2 cache, worked by one thread in whole
    # columns (order 401 on one process: 2.6 MB; order 802 on two: 401
    # local rows each, 5.1 MB), takes zgemv_n two columns per pass, with one
    # leftover column and a one-row masked tail; two threads' row halves of
    # order 601 (304 and 297 rows, 2.9 MB each) take eight columns per pass,
    # with one leftover column and a one-row tail; an odd leading dimension
    # starts columns off the cache line, so zgemv_t/_c take the AVX2 kernel
    # in all three; every form must match the serial reference within its
    # bound
    if "avx512" not in _simd_levels():
        pytest.skip("this CPU cannot run the avx512 kernels")
    doc = _run(ranks, threads, "--size", "4096", "--matrix", str(m), "--iters", "3",
               "--simd", "avx512", "--kernel", "zgemv")
    _assert_consistent(doc, 4096, m, 3, names=["zgemv_n", "zgemv_t", "zgemv_c"])
    assert doc["result"]["simd"] == "avx512"
    assert (doc["ranks"], doc["threads"]) == (ranks, threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_dznrm2_exact_whether_it_reads_x_or_a_scaled_copy(threads):
    # at --scale 1 dznrm2 reads x (no second vector); any other scale a
    # scaled copy: both give the exact norm times the scale (to rounding)
    n = 2 * 16384 + 8
    for scale in ("1", "0.5", "1e200"):
        doc = _run(1, threads, "--size", str(n), "--iters", "2", "--scale", scale,
                   "--kernel", "zdotc,dznrm2")
        _assert_consistent(doc, n, int(math.isqrt(n)), 2, names=["zdotc", "dznrm2"])
        want = float(scale) * math.sqrt(exact_sumsq(n))
        assert doc["result"]["dznrm2"] == pytest.approx(want, rel=1e-15 if scale != "1e200"
                                                        else 1e-13)
        assert tuple(doc["result"]["zdotc"]) == exact_zdotc(n)


@pytest.mark.parametrize("ranks", [1, 2])
def test_reductions_with_both_threads_over_many_calls_are_exact(ranks):
    # 32776 complex numbers per process: zdotc and dznrm2 reduce over both
    # threads every call (each thread writes its partial sums to a ring of
    # four slots, the master adds them in thread order as they arrive and
    # frees the slot), then over the processes; 203 calls reuse every slot
    # about 50 times (at 2 ranks the 4 threads outnumber this machine's
    # CPUs on small hosts, and waits sleep), and the values are still exact
    n = ranks * 32776
    doc = _run(ranks, 2, "--size", str(n), "--iters", "203", "--kernel", "zdotc,dznrm2")
    _assert_consistent(doc, n, int(math.isqrt(n)), 203, names=["zdotc", "dznrm2"])
    assert tuple(doc["result"]["zdotc"]) == exact_zdotc(n)
    assert doc["result"]["dznrm2"] == math.sqrt(exact_sumsq(n))
    if ranks > 1:
        assert doc["breakdown"]["comm_s"]["max"] > 0


@pytest.mark.parametrize("simd", ["generic", "avx2", "avx512"])
@pytest.mark.parametrize("ranks,threads", [(1, 1), (1, 2), (2, 2)])
def test_zgemv_t_alternating_column_order_matches_the_reference(simd, ranks, threads):
    # order 568 (aligned columns: 568 mod 4 = 0): a thread's columns hold
    # 5.2 MB on one thread, 2.6 MB on each of two and 1.3 MB at 2 x 2, so
    # on a 2 MiB L2 the odd calls of the first two walk their columns
    # backwards, 16 at a time (284 columns a thread: a 12-column piece
    # last), and the third runs forward; 5 calls, each of which must have
    # applied y := alpha A' x + beta y (or conj) once per column, or the
    # result leaves the reference's bound
    if simd not in _simd_levels():
        pytest.skip(f"this CPU cannot run the {simd} kernels")
    m = 568
    doc = _run(ranks, threads, "--size", "4096", "--matrix", str(m), "--iters", "5",
               "--simd", simd, "--kernel", "zgemv_t,zgemv_c")
    _assert_consistent(doc, 4096, m, 5, names=["zgemv_t", "zgemv_c"])
    assert doc["result"]["simd"] == {"avx2": "avx2-fma"}.get(simd, simd)
    assert (doc["ranks"], doc["threads"]) == (ranks, threads)
