"""The statistics layer (tiers.stats and native/src/common/stats.c) on
synthetic noisy samples: a quiet lognormal cloud with a few 100x outliers,
bimodal samples, constant samples, n = 1..3, a wide cloud.  Expected values
are computed here independently: the interval's ranks from the binomial
distribution with exact combinations (math.comb), the median by sorting.
The C version must give the same numbers on the same inputs."""

from __future__ import annotations

import glob
import math
import os
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from tiers import stats

ROOT = Path(__file__).resolve().parents[1]
MASK = 2**64 - 1


class XorShift:
    """xorshift64*, the generator native/tests/test_stats.c uses."""

    def __init__(self, seed: int):
        self.s = seed

    def uniform(self) -> float:
        s = self.s
        s ^= s >> 12
        s ^= (s << 25) & MASK
        s ^= s >> 27
        self.s = s
        r = (s * 2685821657736338717) & MASK
        return (r >> 11) * (1.0 / 9007199254740992.0)

    def normal(self) -> float:
        t = 0.0
        for _ in range(12):
            t += self.uniform()
        return t - 6.0


def lognormal(seed: int, n: int, median: float, sigma: float) -> list[float]:
    g = XorShift(seed)
    return [median * math.exp(sigma * g.normal()) for _ in range(n)]


def cases() -> dict[str, list[float]]:
    quiet = lognormal(1, 50, 10.0, 0.01)
    for i in (7, 21, 40):
        quiet[i] *= 100
    return {
        "quiet_with_outliers": quiet,
        "bimodal": lognormal(2, 20, 10.0, 0.005) + lognormal(3, 20, 20.0, 0.005),
        "constant": [5.0] * 10,
        "n1": [3.0],
        "n2": [4.0, 3.0],
        "n3": [5.0, 3.0, 4.0],
        "n6_quiet": lognormal(4, 6, 2.0, 0.005),
        "wide": lognormal(5, 40, 100.0, 0.3),
    }


def exact_ci_ranks(n: int):
    """The largest l with P(B <= l-1) <= 2.5 %, B ~ Binomial(n, 1/2), exactly."""
    best = None
    for l in range(1, n + 1):
        tail = Fraction(sum(math.comb(n, k) for k in range(l)), 2**n)
        if tail <= Fraction(1, 40):
            best = l
    return None if best is None else (best, n + 1 - best)


@pytest.mark.parametrize("n", range(1, 121))
def test_ci_ranks_match_the_exact_binomial(n):
    assert stats.median_ci_ranks(n) == exact_ci_ranks(n)


def test_ci_is_undefined_below_six_samples():
    assert [stats.median_ci_ranks(n) for n in range(1, 6)] == [None] * 5
    assert stats.median_ci_ranks(6) == (1, 6)
    # coverage of (1, 6) at n = 6 is 1 - 2/64
    l, u = stats.median_ci_ranks(6)
    assert 1 - 2 * sum(math.comb(6, k) for k in range(l)) / 64 >= 0.95


def test_quiet_cloud_with_100x_outliers():
    x = cases()["quiet_with_outliers"]
    s = stats.summarize(x)
    quiet = sorted(v for v in x if v < 100)
    assert s["n"] == 50 and s["kept"] == 47 and s["outliers"] == 3
    assert s["median"] == quiet[23]
    assert s["min"] == quiet[0]
    l, u = exact_ci_ranks(47)
    assert (s["ci_low"], s["ci_high"]) == (quiet[l - 1], quiet[u - 1])
    assert s["ci_low"] <= s["median"] <= s["ci_high"]
    assert not s["noisy"] and s["why"] is None
    # the outliers did not move the median: it is the median of the quiet cloud
    assert abs(s["median"] - 10.0) < 0.1


def test_bimodal_samples_are_noisy():
    s = stats.summarize(cases()["bimodal"])
    assert s["kept"] == 40
    assert 10.3 < s["median"] < 19.7
    assert s["noisy"] and s["rel_halfwidth"] > 0.05
    assert "wider than +-5 %" in s["why"]


def test_constant_samples():
    s = stats.summarize([5.0] * 10)
    assert (s["min"], s["median"], s["ci_low"], s["ci_high"]) == (5.0, 5.0, 5.0, 5.0)
    assert s["rel_halfwidth"] == 0 and not s["noisy"]


@pytest.mark.parametrize("name,median", [("n1", 3.0), ("n2", 3.5), ("n3", 4.0)])
def test_tiny_samples_have_no_interval(name, median):
    s = stats.summarize(cases()[name])
    assert s["median"] == median and s["min"] == 3.0
    assert s["ci_low"] is None and s["ci_high"] is None and s["rel_halfwidth"] is None
    assert s["noisy"] and "needs 6" in s["why"]


def test_best_is_the_fastest_of_all_samples_even_outside_the_fences():
    # quantised quiet timings: IQR 0, so the one faster sample is outside the
    # fences -- left out of the median, but it is the best
    s = stats.summarize([10.0] * 9 + [9.9])
    assert s["kept"] == 9 and s["median"] == 10.0 and s["min"] == 9.9


def test_wide_cloud_is_noisy_and_non_finite_samples_are_ignored():
    assert stats.summarize(cases()["wide"])["noisy"]
    s = stats.summarize([float("nan"), 2.0, float("inf"), 4.0, None])
    assert s["n"] == 2 and s["median"] == 3.0
    assert stats.summarize([])["median"] is None


class FakeClock:
    """A clock the test advances by hand (the driver's time source)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_driver_stops_when_the_interval_is_tight():
    clock = FakeClock()
    d = stats.Driver(10.0, 100, clock=clock)
    for i in range(5):
        d.add(10.0 + 0.01 * (i % 3))
        assert d.stop() is None  # fewer than 6 samples: no interval yet
    d.add(10.0)
    assert d.stop() == "converged"


def test_driver_stops_at_the_time_limit_or_the_cap_when_noisy():
    clock = FakeClock()
    d = stats.Driver(1.0, 1000, clock=clock)
    for i in range(30):
        d.add(10.0 if i % 2 else 20.0)
        clock.t += 0.01
    assert d.stop() is None
    clock.t = 1.0
    assert d.stop() == "time limit"
    d = stats.Driver(1.0, 30, clock=FakeClock())
    for i in range(30):
        d.add(10.0 if i % 2 else 20.0)
    assert d.stop() == "max samples"


def test_quick_shortens_the_limit_not_the_rule():
    normal, quick = stats.Driver(clock=FakeClock()), stats.Driver(quick=True, clock=FakeClock())
    assert quick.time_limit_s < normal.time_limit_s
    for d in (normal, quick):
        for _ in range(6):
            d.add(1.0)
        assert d.stop() == "converged"


def test_repeat_until_takes_samples_until_converged():
    clock = FakeClock()
    values = iter([1.0, 50.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.0, 1.01] + [1.0] * 100)

    def sample():
        clock.t += 0.001
        return next(values)

    out = stats.repeat_until(sample, 5.0, 1000, clock=clock)
    assert out["stopped"] == "converged"
    # every prefix before the last one was not yet converged
    assert not stats.converged(out["samples"][:-1])
    assert out["outliers"] == 1 and out["median"] == 1.0


def _native_test_binary():
    env = os.environ.get("TIERS_TEST_STATS_BIN")
    if env:
        return env
    found = sorted(glob.glob(str(ROOT / "build" / "*" / "native" / "tests" / "test_stats")),
                   key=os.path.getmtime)
    return found[-1] if found else None


def test_native_layer_gives_the_same_numbers():
    binary = _native_test_binary()
    if binary is None:
        pytest.skip("native/tests/test_stats is not built (cmake --build, then rerun)")
    out = subprocess.run([binary, "--print"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    mine = cases()
    assert set(rows) == set(mine)
    for name, x in mine.items():
        s = stats.summarize(x)
        n, kept, mn, med, lo, hi, l, u, rel, noisy = rows[name]
        assert (int(n), int(kept)) == (s["n"], s["kept"]), name
        for text, want in ((mn, s["min"]), (med, s["median"]), (lo, s["ci_low"]),
                           (hi, s["ci_high"]), (rel, s["rel_halfwidth"])):
            if want is None:
                assert text == "nan", name
            else:
                assert float(text) == pytest.approx(want, rel=1e-12, abs=1e-15), name
        ranks = s["ci_ranks"] or [0, 0]
        assert [int(l), int(u)] == ranks, name
        assert bool(int(noisy)) == s["noisy"], name


@pytest.mark.parametrize("name", sorted(cases()))
def test_sync_probe_reports_the_same_median_statistics(native_bin, name):
    # tiers-probe-sync keeps its EPCC mean +- t-interval and, beside it, the
    # shared layer's median, CI of the median and noisy flag
    import json

    x = cases()[name]
    text = ",".join(repr(v) for v in x)
    proc = subprocess.run([native_bin("tiers-probe-sync"), "--stats", text],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    st = json.loads(proc.stdout)["stats"]
    mine = stats.summarize(x)
    got = st["median_stats"]
    assert (got["n"], got["kept"]) == (mine["n"], mine["kept"])
    for key in ("min", "median", "ci_low", "ci_high", "rel_halfwidth"):
        if mine[key] is None:
            assert got[key] is None, key
        else:
            assert got[key] == pytest.approx(mine[key], rel=1e-12, abs=1e-15), key
    assert got["noisy"] == st["noisy"] == mine["noisy"]
    assert "mean_us" in st and "ci95_us" in st  # the EPCC figures stay


def _cell_runs(times):
    """A run function for bench._run_cell that returns application
    documents with these times, one per call."""
    it = iter(times)

    def run():
        t = next(it)
        return {"doc": {"time_s": t}, "wall_s": t}
    return run


def test_bench_cells_repeat_until_the_median_time_is_steady():
    """tiers bench (the survey's jacobi3d cells) with repeat_time_s: runs
    repeat by the same rule; a steady cell stops at 6 runs and gives their
    median, a cell with a disturbed first run is not moved by it, and a
    scattered one stops at the cap and is flagged noisy in its row."""
    from tiers import bench

    steady = [0.100, 0.101, 0.099, 0.100, 0.102, 0.100, 0.5, 0.5]
    out, rep = bench._run_cell(_cell_runs(steady), 60.0, 30)
    assert rep["n"] == 6 and rep["stopped"] == "converged" and not rep["noisy"]
    assert rep["median"] == pytest.approx(0.1) and rep["times_s"] == steady[:6]
    assert out["doc"]["time_s"] == 0.100
    disturbed = [0.9] + [0.100, 0.101, 0.099, 0.100, 0.102, 0.100, 0.101]
    _, rep2 = bench._run_cell(_cell_runs(disturbed), 60.0, 30)
    assert rep2["median"] == pytest.approx(0.1) and not rep2["noisy"] and rep2["min"] == 0.099
    assert rep2["n"] == 7 and rep2["outliers"] == 1  # the disturbed run is left out
    scattered = [0.1, 0.2, 0.3, 0.15, 0.25, 0.12, 0.28, 0.18]
    _, rep3 = bench._run_cell(_cell_runs(scattered), 60.0, 8)
    assert rep3["stopped"] == "max samples" and rep3["noisy"] and rep3["n"] == 8
    one, none = bench._run_cell(_cell_runs([0.3]), None, 30)
    assert none is None and one["doc"]["time_s"] == 0.3
    doc = lambda t: {"time_s": t, "breakdown": {f"{p}_s": {"mean": 0.0}  # noqa: E731
                                                for p in bench.PHASES}}
    summary = bench.analyse([
        {"ranks": 1, "threads": 1, "doc": doc(0.5), "repeats": rep},
        {"ranks": 2, "threads": 1, "doc": doc(0.05), "repeats": rep3}])
    r1, r2 = summary["rows"]
    assert r1["time_s"] == rep["median"] and r1["noisy"] is False and r1["runs"] == 6
    assert r2["time_s"] == rep3["median"] and r2["noisy"] is True
    assert r2["speedup"] == pytest.approx(rep["median"] / rep3["median"])
