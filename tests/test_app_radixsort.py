"""tiers-radixsort under real mpirun at 1, 2 and 4 ranks x 1 and 2
threads: the result verifies (sorted blocks, ordered boundaries, same key
multiset, equal to a serial sort), the checksums equal the ones computed
here from the documented key generator, another seed gives other keys
that still sort, and bad input ends in one line."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from conftest import assert_one_line_error

from tiers import bench, native

TOOL = "tiers-radixsort"
SIZE = 100_003          # not a multiple of 2, 3 or 4: uneven blocks
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function, on uint64 arrays (wrapping arithmetic)."""
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def expected(seed: int, size: int) -> dict:
    """The keys the header of radixsort.c defines, and their checksums."""
    base = mix64(np.array([seed ^ 0x7261646978736F72], dtype=np.uint64))[0]
    keys = (mix64(base + np.arange(size, dtype=np.uint64)) >> np.uint64(32)).astype(np.uint64)
    h = mix64(keys)
    total = int(np.sum(h, dtype=np.uint64))      # wraps mod 2^64
    xor = int(np.bitwise_xor.reduce(h))
    return {"checksum": f"{total:016x}", "checksum_xor": f"{xor:016x}",
            "min_key": int(keys.min()), "max_key": int(keys.max())}


@pytest.fixture(scope="module")
def grid():
    """One bench grid: every configuration with the serial comparison on."""
    doc = bench.measure("radixsort", [1, 2, 4], [1, 2], size=SIZE, verify=True,
                        app_extra=["--seed", "5"], argv=["test"])
    return {(s["ranks"], s["threads"]): s["doc"] for s in doc["samples"]}


def test_every_configuration_verifies(grid):
    assert set(grid) == {(r, t) for r in (1, 2, 4) for t in (1, 2)}
    for (ranks, threads), doc in grid.items():
        assert doc["ranks"] == ranks and doc["threads"] == threads
        v = doc["verification"]
        assert v["passed"] is True and v["sorted"] is True and v["multiset_equal"] is True
        assert v["serial_compared"] is True and v["serial_equal"] is True
        assert v["count_before"] == v["count_after"] == SIZE
        assert v["unsorted_pairs"] == 0 and v["unsorted_boundaries"] == 0
        assert doc["result"]["passes"] == 4 and doc["result"]["keys"] == SIZE


def test_checksums_are_those_of_the_documented_keys(grid):
    want = expected(5, SIZE)
    for doc in grid.values():
        res = doc["result"]
        got = {k: res[k] for k in want}
        assert got == want
        assert doc["verification"]["checksum_before"] == want["checksum"]


def test_keys_cross_ranks_only_when_there_are_several(grid):
    for (ranks, _), doc in grid.items():
        sent = doc["result"]["exchange_bytes_mean"]
        if ranks == 1:
            assert sent == 0
        else:
            # uniform keys: about (ranks-1)/ranks of each block leaves its rank
            # in each of the 4 passes, 4 bytes a key
            share = 4 * 4 * SIZE / ranks * (ranks - 1) / ranks
            assert 0.8 * share < sent < 1.2 * share


def test_merit_is_keys_per_second(grid):
    for doc in grid.values():
        fom = doc["figure_of_merit"]
        assert fom["unit"] == "Mkeys/s"
        assert fom["value"] == pytest.approx(SIZE / doc["time_s"] / 1e6, rel=1e-12)


def _run(ranks: int, threads: int, *args: str) -> dict:
    doc = bench.measure("radixsort", [ranks], [threads], app_extra=list(args), argv=["test"])
    return doc["samples"][0]["doc"]


def test_other_seed_other_checksum_still_sorted():
    a = _run(2, 1, "--size", "50000", "--seed", "1", "--verify")
    b = _run(2, 1, "--size", "50000", "--seed", "2", "--verify")
    for doc in (a, b):
        assert doc["verification"]["passed"] is True
        assert doc["verification"]["serial_equal"] is True
    assert a["result"]["checksum"] != b["result"]["checksum"]
    assert a["result"]["checksum"] == expected(1, 50000)["checksum"]
    assert b["result"]["checksum"] == expected(2, 50000)["checksum"]


@pytest.mark.parametrize("ranks,threads", [(1, 2), (3, 1)])
def test_eleven_bit_digits(ranks, threads):
    doc = _run(ranks, threads, "--size", "60000", "--bits", "11", "--seed", "9", "--verify")
    assert doc["result"]["passes"] == 3
    assert doc["verification"]["passed"] is True and doc["verification"]["serial_equal"]
    assert doc["result"]["checksum"] == expected(9, 60000)["checksum"]


def test_default_is_4m_keys_without_serial_check():
    doc = _run(2, 1)
    assert doc["result"]["keys"] == 4 * 2**20
    assert doc["verification"]["passed"] is True
    assert doc["verification"]["serial_compared"] is False


# ---------------------------------------------------------------------------
# Bad input


def _single(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(native.tool_path(TOOL)), "--pin", "none", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args,fragment", [
    (["--bits", "9"], "--bits must be 8 or 11 (got 9)"),
    (["--size", "many"], "--size needs a positive key count"),
    (["--size", "0"], "--size needs a positive key count"),
    (["--seed", "-1"], "--seed needs a non-negative integer"),
    (["--grid", "1,1"], "--grid does not apply"),
    (["--bogus"], "unknown option --bogus"),
])
def test_bad_option_is_one_line(args, fragment):
    run = _single("--threads", "1", *args)
    assert run.returncode == 2
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tiers-radixsort: error: ")
    assert fragment in lines[0]


def test_threads_above_cpuset_is_one_line():
    cpus = len(os.sched_getaffinity(0))
    run = _single("--threads", str(cpus + 1), "--quick")
    assert run.returncode == 2
    assert len(run.stderr.splitlines()) == 1
    assert f"{cpus + 1} threads exceed the {cpus} PU" in run.stderr


def test_fewer_keys_than_ranks_is_one_line(tiers):
    run = tiers("bench", "radixsort", "--size", "3", "--ranks", "4", "--threads", "1")
    assert_one_line_error(run, "--size 3 is smaller than the 4 processes")


def test_bench_rejects_iters(tiers):
    assert_one_line_error(tiers("bench", "radixsort", "--iters", "2"), "takes no --iters")
