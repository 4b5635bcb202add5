"""The statistics of ``tiers probe sync`` beside the per-pair median: EPCC's
own figure (the mean of the per-pair overheads, the first repetition
dropped, outliers counted and kept) and the resolution of an overhead
(twice the interquartile range of the reference loop timed beside it, at
least two clock readings per inner repetition).

Synthetic samples go through the native tool's ``--pair-stats`` (the code a
measurement runs) and through ``tiers.stats``; the values are checked
against sums written out here.  One real run at 1 and 2 threads checks that
the document carries the new keys.  No timing thresholds."""

from __future__ import annotations

import json
import math
import os
import subprocess

import pytest

from _sync_helpers import pair_stats, row_of
from tiers import stats


def test_resolution_is_twice_the_interquartile_range():
    # 8 values: Q1 = 1.0 + 0.25 * 7 steps... written out: sorted
    # [1.00, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07]; Q1 at h = 1.75 ->
    # 1.0175, Q3 at h = 5.25 -> 1.0525; IQR 0.035
    refs = [1.07, 1.00, 1.03, 1.05, 1.01, 1.06, 1.02, 1.04]
    assert stats.resolution(refs) == pytest.approx(2 * 0.035)
    # a 100x outlier moves the range, not the interquartile range much
    assert stats.resolution(refs + [100.0]) == pytest.approx(2 * (1.06 - 1.02))
    # the clock's floor: identical references still cannot resolve less
    # than two clock readings
    assert stats.resolution([1.0] * 10) == 0.0
    assert stats.resolution([1.0] * 10, timer=0.003) == pytest.approx(0.006)
    assert stats.resolution([]) is None
    assert stats.resolution([math.nan, None]) is None
    assert stats.below_resolution(0.05, 0.07) is True
    assert stats.below_resolution(0.07, 0.07) is False
    assert stats.below_resolution(None, 0.07) is False
    assert stats.below_resolution(0.05, None) is False


def test_native_and_python_resolution_agree(native_bin):
    refs = [1.07, 1.00, 1.03, 1.05, 1.01, 1.06, 1.02, 1.04, 1.5, 0.99, 1.02, 1.03]
    tests = [r + 0.4 for r in refs]
    t = pair_stats(native_bin, refs, tests)
    assert t["resolution_us"] == pytest.approx(stats.resolution(refs), rel=1e-12)
    assert t["reliable"] is True  # 0.4 us against a resolution of about 0.07 us


def test_an_overhead_below_resolution_is_an_upper_bound(native_bin):
    """Every pair 0.01 us apart, steady (its CI is [0.01, 0.01]: not below
    noise), but the reference loop scatters by 0.035 us between quartiles:
    a 0.01 us overhead cannot be told from that scatter.  It is given as
    '< 0.070 µs (below resolution)', with reliable false and no number."""
    from tiers.probe import sync

    refs = [1.07, 1.00, 1.03, 1.05, 1.01, 1.06, 1.02, 1.04] * 2
    tests = [r + 0.01 for r in refs]
    t = pair_stats(native_bin, refs, tests)
    assert t["stats"]["median_stats"]["median"] == pytest.approx(0.01)
    assert t["resolution_us"] == pytest.approx(2 * 0.035)
    assert t["reliable"] is False and t["below_resolution"] is True
    assert t["why"].startswith("below resolution") and "0.07" in t["why"]
    row = row_of(t)
    assert row["reliable"] is False and row["noisy"] is True
    assert row["below_resolution_us"] == pytest.approx(0.07)
    for key in ("value_us", "mean_us", "median_us", "epcc_mean_us", "value_cycles"):
        assert row[key] is None, key
    assert sync._cell(row) == "< 0.070 µs (below resolution)~"
    # below noise is still below noise, not a bound
    flat = [1.0] * 12
    diffs = [0.03, -0.02, 0.01, -0.04, 0.02, 0.05, -0.01, 0.04, -0.03, 0.02, 0.01, -0.02]
    t = pair_stats(native_bin, flat, [1.0 + d for d in diffs])
    assert t["below_resolution"] is False and t["why"].startswith("below noise")
    assert "below_resolution_us" not in row_of(t)


def test_epcc_figure_and_median_agree_on_steady_pairs(native_bin):
    """Pairs with a symmetric scatter around an overhead of 0.3 us: EPCC's
    mean (first repetition dropped) and the per-pair median estimate the
    same figure."""
    refs = [1.0 + 0.01 * ((i * 7) % 5 - 2) for i in range(21)]
    wiggle = [0.004 * ((i * 3) % 5 - 2) for i in range(21)]
    tests = [r + 0.3 + w for r, w in zip(refs, wiggle)]
    t = pair_stats(native_bin, refs, tests)
    diffs = [b - a for a, b in zip(refs, tests)]
    rest = diffs[1:]
    mean = sum(rest) / len(rest)
    sd = math.sqrt(sum((x - mean) ** 2 for x in rest) / (len(rest) - 1))
    e = t["epcc"]
    assert e["n"] == 20 and e["outliers"] == 0
    assert e["mean_us"] == pytest.approx(mean, rel=1e-12)
    assert e["sd_us"] == pytest.approx(sd, rel=1e-9)
    assert e["mean_cycles"] == pytest.approx(mean * 1000, rel=1e-9)
    row = row_of(t)
    assert row["reliable"] is True
    assert row["epcc_mean_us"] == pytest.approx(0.3, rel=0.01)
    assert row["value_us"] == pytest.approx(0.3, rel=0.01)
    assert row["epcc_mean_us"] == pytest.approx(row["value_us"], rel=0.02)


def test_a_disturbed_repetition_moves_the_epcc_mean_not_the_median(native_bin):
    """The same pairs with the first repetition disturbed (dropped by EPCC's
    method) and one later test run disturbed by 20 us (kept in the mean,
    counted as an outlier): the EPCC mean rises by 20 us / 20, the median
    stays -- the two methods differ by the disturbed repetitions alone."""
    refs = [1.0] * 21
    tests = [1.3] * 21
    tests[0] = 50.0   # a warm-up: EPCC drops it
    tests[9] = 21.3   # disturbed: EPCC keeps it and counts it
    t = pair_stats(native_bin, refs, tests)
    e = t["epcc"]
    assert e["n"] == 20 and e["outliers"] == 1
    assert e["mean_us"] == pytest.approx(0.3 + 20.0 / 20, rel=1e-9)
    row = row_of(t)
    assert row["value_us"] == pytest.approx(0.3)
    assert row["epcc_mean_us"] == pytest.approx(1.3)
    assert row["epcc_outliers"] == 1
    # too few repetitions for EPCC's figure: none
    t = pair_stats(native_bin, [1.0], [1.3])
    assert t["epcc"]["n"] == 0 and t["epcc"]["mean_us"] is None
    assert t["epcc"]["reliable"] is False
    # disturbed references pull the mean below zero: no number, why
    refs = [1.0] * 11
    refs[5] = 9.0
    t = pair_stats(native_bin, refs, [1.3] * 11)
    assert t["epcc"]["mean_us"] is None and t["epcc"]["mean_cycles"] is None
    assert t["epcc"]["reliable"] is False and "at or below zero" in t["epcc"]["why"]
    row = row_of(t)
    assert row["epcc_mean_us"] is None and row["value_us"] == pytest.approx(0.3)


def test_a_barrier_has_no_reference_figures(native_bin):
    t = pair_stats(native_bin, None, [0.2, 0.21, 0.19, 0.2, 0.2, 0.2, 0.2, 0.2])
    assert "epcc" not in t and "resolution_us" not in t
    row = row_of(t)
    assert "epcc_mean_us" not in row and "resolution_us" not in row


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 PUs")
def test_a_run_at_1_and_2_threads_carries_the_new_keys(native_bin):
    from tiers.probe import sync

    proc = subprocess.run([native_bin("tiers-probe-sync"), "--threads", "1,2", "--tests",
                           "barrier,critical,spin", "--reps", "6", "--test-time", "50",
                           "--figure-time", "0.05"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    raw = json.loads(proc.stdout)
    p = raw["params"]
    assert 1 <= p["delay_calibrations"] <= 6
    assert p["timer_us"] > 0 and p["delay_length"] >= 1
    dc = raw["delay_check"]
    assert dc["start_us"] == p["delay_measured_us"] and dc["end_us"] > 0
    assert dc["drift"] == pytest.approx((dc["end_us"] - dc["start_us"]) / dc["start_us"])
    assert [r["threads"] for r in raw["runs"]] == [1, 2]
    for run in raw["runs"]:
        # delay() timed on every PU of the team at once
        pd = run["pu_delay_us"]
        assert len(pd) == run["threads"] and all(x > 0 for x in pd)
        assert run["pu_delay_spread"] == pytest.approx((max(pd) - min(pd)) / min(pd))
        by = {t["name"]: t for t in run["tests"]}
        assert set(by) == {"barrier", "critical", "spin"}
        for name in ("barrier", "critical"):
            t = by[name]
            assert t["innerreps"] >= 1 and t["reference_innerreps"] >= 1
            rest = t["overheads_us"][1:]
            assert t["epcc"]["n"] == len(rest)
            mean = sum(rest) / len(rest)
            if mean > 0:
                assert t["epcc"]["mean_us"] == pytest.approx(mean, rel=1e-9, abs=1e-12)
                assert t["epcc"]["reliable"] is True
            else:  # never a cost at or below zero
                assert t["epcc"]["mean_us"] is None and t["epcc"]["reliable"] is False
            assert t["resolution_us"] == pytest.approx(max(
                stats.resolution(t["reference_times_us"]),
                4 * p["timer_us"] / t["innerreps"]), rel=1e-9)
            assert isinstance(t["reliable"], bool)
            if not t["reliable"]:
                assert isinstance(t["below_resolution"], bool)
        assert "epcc" not in by["spin"] and "resolution_us" not in by["spin"]
        for t in run["tests"]:
            # sampled in turns of block_reps pairs, at least --reps in all
            assert t["reps"] == t["blocks"] * p["block_reps"] == len(t["overheads_us"])
            assert t["reps"] >= 6 and t["stopped"] in ("converged", "time limit",
                                                        "max samples")
    rows = sync.summarise(raw)["rows"]
    for row in rows:
        if row["name"] == "spin":
            continue
        assert "epcc_n" in row and "resolution_us" in row
        if row["reliable"]:
            assert row["value_us"] >= row["resolution_us"]


def test_uneven_pus_mark_the_overheads_of_that_thread_count(native_bin):
    """A team whose PUs ran delay() 20 % apart: every overhead at that
    thread count is noisy and carries the spread; the barriers and the
    other thread counts are untouched; the table and the document say so."""
    import io

    from rich.console import Console

    from tiers.probe import sync

    refs = [1.0, 1.01, 0.99, 1.0, 1.0, 1.02, 1.0, 0.98, 1.0, 1.01, 0.99, 1.0]
    over = pair_stats(native_bin, refs, [r + 0.3 for r in refs])
    bar = pair_stats(native_bin, None, [0.2] * 12)
    raw = {"params": {"cycles_per_second": 1e9},
           "runs": [{"threads": 1, "pu_delay_us": [0.1], "pu_delay_spread": 0.0,
                     "tests": [dict(over)]},
                    {"threads": 2, "pu_delay_us": [0.1, 0.12], "pu_delay_spread": 0.2,
                     "tests": [dict(over), dict(bar)]}]}
    rows = sync.summarise(raw)["rows"]
    one, two, spin = rows
    assert one["noisy"] is False and "pu_delay_spread" not in one
    assert two["noisy"] is True and two["pu_delay_spread"] == 0.2
    assert two["reliable"] is True and two["value_us"] == pytest.approx(0.3)
    assert spin["noisy"] is False and "pu_delay_spread" not in spin
    buf = io.StringIO()
    doc = {"params": {"delay_length": 10, "delay_measured_us": 0.1, "delay_time_us": 0.1,
                      "reps": 12, "test_time_us": 100, "figure_time_s": 0.2,
                      "cycles_per_second": 1e9, "pin": "compact", "iters_per_thread": 128},
           "summary": sync.summarise(raw)}
    sync.render(doc, Console(file=buf, width=120))
    assert "at 2 threads the PUs ran delay() 20 % apart" in buf.getvalue()


def _render(row: dict) -> str:
    """What ``tiers probe sync`` prints for a document of this one row."""
    import io

    from rich.console import Console

    from tiers.probe import sync

    doc = {"params": {"delay_length": 100, "delay_measured_us": 0.1, "delay_time_us": 0.1,
                      "test_time_us": 1000.0, "reps": 20, "cycles_per_second": 1e9,
                      "pin": "compact"},
           "summary": {"rows": [row], "threads": [2], "headline": {"threads": 2}}}
    buf = io.StringIO()
    sync.render(doc, Console(file=buf, width=200, color_system=None))
    return buf.getvalue()


def test_a_disturbed_epcc_mean_is_marked_like_a_noisy_median(native_bin):
    """EPCC's mean keeps disturbed repetitions: beside a steady median it
    is marked "~", with its own legend line, when its t interval is wider
    than +-5 % or when it lies outside the median's 95 % CI; a steady one
    is not marked; in a noisy row both are marked."""
    from tiers.probe import sync

    # steady pairs: mean and median agree, nothing marked
    refs = [1.0 + 0.01 * ((i * 7) % 5 - 2) for i in range(21)]
    wiggle = [0.004 * ((i * 3) % 5 - 2) for i in range(21)]
    row = row_of(pair_stats(native_bin, refs, [r + 0.3 + w for r, w in zip(refs, wiggle)]))
    assert row["noisy"] is False and row["epcc_noisy"] is False
    assert "epcc_noisy_why" not in row
    assert "~" not in sync._cell(row) and "EPCC mean 0.3" in sync._cell(row)
    assert sync.EPCC_LEGEND not in _render(row)

    # one test run disturbed by 20 us: the mean reads 1.3 us (4.3x the
    # median); its t interval (sd about 4.5 us over 20) is far wider than 5 %
    tests = [1.3] * 21
    tests[9] = 21.3
    row = row_of(pair_stats(native_bin, [1.0] * 21, tests))
    assert row["noisy"] is False and row["value_us"] == pytest.approx(0.3)
    assert row["epcc_mean_us"] == pytest.approx(1.3) and row["epcc_noisy"] is True
    assert "t interval" in row["epcc_noisy_why"]
    cell = sync._cell(row)
    assert cell.splitlines()[0] == "0.300 ±0.000 µs"  # the median: not marked
    assert cell.splitlines()[-1] == "EPCC mean 1.300~"
    text = _render(row)
    assert sync.EPCC_LEGEND in text and stats.LEGEND not in text

    # 100 pairs, 4 of them 0.2 us slower: the mean (0.308 us) has a t
    # interval of +-2.5 % but lies above every value the median's CI allows
    diffs = [0.3] * 100
    for k in (20, 45, 70, 95):
        diffs[k] = 0.5
    row = row_of(pair_stats(native_bin, [1.0] * 100, [1.0 + d for d in diffs]))
    rest = diffs[1:]
    assert row["epcc_mean_us"] == pytest.approx(sum(rest) / len(rest))
    assert row["median_ci95_us"] == pytest.approx([0.3, 0.3])
    assert row["epcc_noisy"] is True and "outside the 95 % CI" in row["epcc_noisy_why"]
    assert sync._cell(row).endswith("~")

    # a noisy row: the median and the EPCC mean are both marked, one legend
    row = dict(row_of(pair_stats(native_bin, refs, [r + 0.3 + w for r, w in zip(refs, wiggle)])),
               noisy=True)
    lines = sync._cell(row).splitlines()
    assert lines[0].endswith("~") and lines[-1].endswith("~")
    text = _render(row)
    assert stats.LEGEND in text and sync.EPCC_LEGEND not in text
