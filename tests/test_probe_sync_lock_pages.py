"""LOCK/UNLOCK's lock on several pages of its own: ``tiers-probe-sync`` puts
one lock on each of ``lock_pages`` pages and the pairs take them in turn
(pairs 2k and 2k+1 on page k mod lock_pages), so that one launch samples
several placements of the lock in physical memory instead of one; per page
it reports the median of that page's per-pair overheads (the statistics
layer's, far-out outliers left out), and the figure is
the median of the pages' medians -- over every page of every launch when
``tiers probe sync`` runs several launches.

The real runs check the tool's and the package's per-page figures against
the raw per-pair samples of the same document (no timing thresholds); the
synthetic launches (the native tool's own results of given pairs, with the
pages as the tool writes them) check the merge on values known here."""

from __future__ import annotations

import json
import os
import statistics
import subprocess

import pytest

from _sync_helpers import pair_stats
from conftest import run_tiers

PAGES = 8


def _threads() -> int:
    return 2 if len(os.sched_getaffinity(0)) >= 2 else 1


def _by_page(values: list[float], pages: list[int]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for v, p in zip(values, pages):
        out.setdefault(p, []).append(v)
    return out


def test_the_tool_reports_every_page_and_their_median(native_bin):
    from tiers import stats

    proc = subprocess.run([native_bin("tiers-probe-sync"), "--threads", str(_threads()),
                           "--tests", "lock,critical", "--reps", "16", "--test-time", "50",
                           "--figure-time", "0.05"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["params"]["lock_pages"] == PAGES
    lock, crit = (next(t for t in doc["runs"][0]["tests"] if t["name"] == n)
                  for n in ("lock", "critical"))
    assert "pair_pages" not in crit and "page_medians_us" not in crit  # only LOCK is paged
    n = len(lock["overheads_us"])
    assert n >= 16 and lock["lock_pages"] == PAGES
    assert lock["pair_pages"] == [(r // 2) % PAGES for r in range(n)]
    groups = _by_page(lock["overheads_us"], lock["pair_pages"])
    assert sorted(groups) == list(range(PAGES))  # 16 pairs or more: every page has 2
    assert lock["page_reps"] == [len(groups[p]) for p in range(PAGES)]
    # the statistics layer's median of each page (far-out outliers left out)
    want = [stats.summarize(groups[p])["median"] for p in range(PAGES)]
    assert lock["page_medians_us"] == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert lock["page_median_us"] == pytest.approx(statistics.median(want), rel=1e-12,
                                                   abs=1e-15)
    # each page's pairs hold one reference-first and one test-first pair per
    # round of the pages, so the order of a pair does not go with its page
    for p in range(PAGES):
        orders = [r % 2 for r in range(n) if lock["pair_pages"][r] == p]
        assert abs(orders.count(0) - orders.count(1)) <= 1


@pytest.mark.parametrize("launches", [1, 2])
def test_the_figure_is_the_median_of_the_pages_medians(tmp_path, launches):
    from tiers import stats

    path = tmp_path / "s.json"
    r = run_tiers("probe", "sync", "--quick", "--threads", str(_threads()), "--tests", "lock",
                  "--reps", str(16 * launches), "--test-time", "50", "--figure-time",
                  str(0.05 * launches), "--launches", str(launches), "--json", str(path))
    assert r.returncode == 0, r.stderr
    doc = json.loads(path.read_text())
    (t,) = doc["samples"][0]["tests"]
    reps = t["launch_reps"]
    assert len(reps) == launches and sum(reps) == len(t["overheads_us"])
    at, pm = 0, []
    for k, n in enumerate(reps):
        vals, pages = t["overheads_us"][at:at + n], t["pair_pages"][at:at + n]
        at += n
        assert pages == [(r // 2) % PAGES for r in range(n)]  # each launch from page 0
        groups = _by_page(vals, pages)
        meds = [stats.summarize(groups[p])["median"] for p in sorted(groups)]
        assert t["launch_page_medians_us"][k] == pytest.approx(meds, rel=1e-12, abs=1e-15)
        assert t["launch_medians_us"][k] == pytest.approx(statistics.median(meds),
                                                          rel=1e-12, abs=1e-15)
        pm += meds
    assert len(pm) == PAGES * launches
    assert t["page_medians_us"] == pytest.approx(pm, rel=1e-12, abs=1e-15)
    figure = statistics.median(pm)
    ms = t["stats"]["median_stats"]
    if figure > 0:
        assert ms["median"] == pytest.approx(figure, rel=1e-12)
    else:  # never stored as a cost
        assert ms["median"] is None
    (row,) = doc["summary"]["rows"]
    assert row["lock_pages"] == PAGES
    if row["reliable"]:
        assert row["value_us"] == pytest.approx(figure, rel=1e-12)
        assert row["page_medians_us"] == t["page_medians_us"]
        assert (f"the median of {PAGES * launches} lock placements' medians ({PAGES} pages "
                "per launch)") in r.stdout
    else:  # below noise or resolution: no number, the pages' medians kept in the samples
        assert row["value_us"] is None


REFS = [1.0, 1.01, 0.99, 1.0] * 4


def _launch(native_bin, page_overheads: list[float]) -> dict:
    """One launch's raw output holding one LOCK/UNLOCK test of 16 pairs on 8
    pages (pairs 2k, 2k+1 on page k), the pairs of page k giving
    ``page_overheads[k]`` (the two within +-1 %)."""
    pages = [(r // 2) % PAGES for r in range(16)]
    tests = [ref + page_overheads[p] * (1.01 if r % 2 else 0.99)
             for r, (ref, p) in enumerate(zip(REFS, pages))]
    test = pair_stats(native_bin, REFS, tests)
    test.update(name="lock", label="LOCK/UNLOCK", stopped="converged", seconds=0.01,
                blocks=4, lock_pages=PAGES, pair_pages=pages)
    return {"params": {"cycles_per_second": 1e9, "timer_us": 0.0, "delay_length": 100,
                       "delay_measured_us": 1.0},
            "runs": [{"threads": 2, "pus": [0, 1], "pu_delay_us": [1.0, 1.0],
                      "pu_delay_spread": 0.0, "references": [], "tests": [test]}],
            "delay_check": {"start_us": 1.0, "end_us": 1.0, "drift": 0.0}}


def test_merged_launches_take_every_page_as_a_block(native_bin):
    """Three launches whose pages read from 0.016 to 0.030 us (placements
    that differ by up to 1.9x, as measured on a 2-CPU VM): the figure is the
    median of the 24 pages' medians, each launch's figure the median of its
    8, and the row says it is noisy (the pages disagree) rather than
    picking one placement."""
    from tiers.probe import sync

    launches = [[0.016, 0.018, 0.020, 0.022, 0.024, 0.026, 0.028, 0.030],
                [0.017, 0.019, 0.021, 0.023, 0.025, 0.027, 0.029, 0.030],
                [0.016, 0.016, 0.018, 0.018, 0.020, 0.020, 0.030, 0.030]]
    raws = [_launch(native_bin, x) for x in launches]
    each = [sum(r["runs"][0]["tests"][0]["overheads_us"][1:]) / 15 for r in raws]
    raw = sync.merge_launches(raws)
    (t,) = raw["runs"][0]["tests"]
    assert t["page_medians_us"] == pytest.approx([v for x in launches for v in x], rel=1e-9)
    for got, want in zip(t["launch_page_medians_us"], launches, strict=True):
        assert got == pytest.approx(want, rel=1e-9)
    assert t["launch_medians_us"] == pytest.approx([0.023, 0.024, 0.019], rel=1e-9)
    (row,) = sync.summarise(raw)["rows"]
    assert row["value_us"] == pytest.approx(statistics.median(
        [v for x in launches for v in x]), rel=1e-9)
    assert row["value_us"] == pytest.approx(0.0215, rel=1e-9)
    assert row["noisy"] is True and row["lock_pages"] == PAGES
    lo, hi = row["median_ci95_us"]
    assert lo <= 0.020 and hi >= 0.024  # the 95 % interval of the median of 24 blocks
    # EPCC's figure stays per launch: the mean of each launch's pairs, first dropped
    assert t["epcc"]["launch_means_us"] == pytest.approx(each, rel=1e-12)


def test_one_launch_of_a_paged_test_is_merged_by_pages(native_bin):
    from tiers.probe import sync

    raw = _launch(native_bin, [0.010, 0.012, 0.014, 0.016, 0.030, 0.032, 0.034, 0.036])
    merged = sync.merge_launches([raw])
    assert merged is not raw
    (row,) = sync.summarise(merged)["rows"]
    # the median of the 8 pages' medians, not of the 16 pooled pairs
    assert row["value_us"] == pytest.approx(0.023, rel=1e-9)
    assert row["launch_medians_us"] == pytest.approx([0.023], rel=1e-9)
