"""``tiers probe sync`` in separate launches: every figure is the median of
the launches' medians (independent blocks, docs/statistics.md), noisy with
the reason when the launches disagree by more than +-5 %, however steady
each launch was on its own; EPCC's figure drops every launch's first
repetition; the resolution and the "below noise" rule work on the pooled
pairs.

Each synthetic launch is the native tool's own result of one test
(``--pair-stats``, the code a measurement runs), merged by
``tiers.probe.sync.merge_launches``; the expected values are computed here
from the samples.  One real run checks that the launches share the time and
the delay length.  No timing thresholds."""

from __future__ import annotations

import json
import statistics

import pytest

from _sync_helpers import pair_stats
from conftest import assert_one_line_error, run_tiers

HZ = 1e9


# a steady reference loop (about 1 us per iteration, +-1 %) of 12 pairs
REFS = [1.0, 1.01, 0.99, 1.0, 1.0, 1.01, 0.99, 1.0, 1.005, 0.995, 1.0, 1.0]
# a steady spread of overheads around 0 (+-0.5 %), added to an overhead
WOBBLE = [0.0, 0.001, -0.001, 0.0005, -0.0005, 0.0, 0.001, -0.001, 0.0, 0.0005, -0.0005, 0.0]


def _launch(native_bin, overhead: float, refs=REFS, link=None) -> dict:
    """One launch's raw output holding one BARRIER test whose pairs give
    ``overhead`` (steady within +-0.5 %); ``link``: the cache-line round
    trips between the team's PUs at the launch's start and end."""
    test = pair_stats(native_bin, refs, [r + overhead * (1 + w) for r, w in zip(refs, WOBBLE)])
    test.update(stopped="converged", seconds=0.01, blocks=3)
    return {"params": {"cycles_per_second": HZ, "timer_us": 0.0, "delay_length": 100,
                       "delay_measured_us": 1.0},
            "runs": [{"threads": 2, "pus": [0, 1], "pu_delay_us": [1.0, 1.0],
                      "pu_delay_spread": 0.0, "references": [], "tests": [test],
                      "pu_link": None if link is None else
                      {"pus": [0, 1], "rtt_ns": list(link), "timed_out": False}}],
            "delay_check": {"start_us": 1.0, "end_us": 1.0, "drift": 0.0}}


def _merged_row(raws: list[dict]) -> tuple[dict, dict]:
    from tiers.probe import sync

    raw = sync.merge_launches(raws)
    (row,) = sync.summarise(raw)["rows"]
    return raw["runs"][0]["tests"][0], row


def test_launches_that_agree_give_a_steady_figure(native_bin):
    test, row = _merged_row([_launch(native_bin, x) for x in (0.30, 0.302, 0.299)])
    meds = test["launch_medians_us"]
    assert meds == pytest.approx([0.30, 0.302, 0.299], rel=2e-3)
    assert row["value_us"] == pytest.approx(statistics.median(meds))
    assert row["reliable"] is True and row["noisy"] is False
    assert "noisy_why" not in row and row["launch_medians_us"] == meds
    # the samples of every launch are pooled, in launch order
    assert test["reps"] == 36 and test["launch_reps"] == [12, 12, 12]
    assert len(test["overheads_us"]) == len(test["reference_times_us"]) == 36


def test_launches_that_disagree_are_noisy_and_say_why(native_bin):
    """Each launch is steady (its own interval within +-5 %), but one
    launch's figure is a third above the others': the figure is the
    median launch's, and noisy because the launches disagree."""
    raws = [_launch(native_bin, x) for x in (0.30, 0.40, 0.302)]
    for r in raws:
        assert r["runs"][0]["tests"][0]["stats"]["noisy"] is False
    test, row = _merged_row(raws)
    assert row["value_us"] == pytest.approx(0.302, rel=2e-3)
    assert row["reliable"] is True and row["noisy"] is True
    assert row["noisy_why"].startswith("3 independent blocks disagree")
    ci = row["median_ci95_us"]
    meds = test["launch_medians_us"]
    assert ci[0] <= min(meds) and ci[1] >= max(meds)  # covers every launch's median


def test_launches_the_host_placed_apart_say_so(native_bin):
    """The launch whose figure disagrees ran while the host had put the two
    PUs further apart (a cache line's round trip 4.7x longer): the noisy
    figure's reason names the placement, launch by launch; launches whose
    round trips agree within 1.5x add nothing."""
    from tiers.probe import sync

    raws = [_launch(native_bin, 0.30, link=(100, 98)), _launch(native_bin, 0.60, link=(470, 475)),
            _launch(native_bin, 0.302, link=(101, 104))]
    test, row = _merged_row(raws)
    assert row["noisy"] is True
    assert row["noisy_why"].startswith("3 independent blocks disagree")
    assert ("PUs 0 and 1 moved during the run: a cache line's round trip between them (per "
            "launch, at its start and end) was 100/98, 470/475, 101/104 ns (on a virtual "
            "machine, the host placing its CPUs elsewhere)") in row["noisy_why"]
    merged = sync.merge_launches(raws)["runs"][0]
    assert merged["launch_pu_link_ns"] == [[100, 98], [470, 475], [101, 104]]
    # steady placement (within 1.5x): the reason is the launches' alone
    # in the summary rows a placement's figure is a cost only where it is one
    row_places = sync.summarise({"params": {"cycles_per_second": HZ, "timer_us": 0.0},
                                 "runs": [dict(merged, tests=[dict(
                                     test, by_placement=[
                                         {"rtt_ns": 100, "rtt_range_ns": [98, 104], "pairs": 12,
                                          "median_us": 0.3, "ci95_us": [0.29, 0.31],
                                          "noisy": False},
                                         {"rtt_ns": 470, "rtt_range_ns": [470, 475],
                                          "pairs": 12, "median_us": -0.01,
                                          "ci95_us": [-0.02, 0.01], "noisy": True}])])]}
                                )["rows"][0]["by_placement"]
    assert [(b["value_us"], b["reliable"]) for b in row_places] == [(0.3, True), (None, False)]
    # a placement's figure that is not a cost is not given as a number at all
    # (the pairs' values stay in the samples), and says why
    assert row_places[0]["median_us"] == 0.3 and row_places[0]["ci95_us"] == [0.29, 0.31]
    assert row_places[1]["median_us"] is None and row_places[1]["ci95_us"] is None
    assert row_places[1]["why"] == "below noise"
    steady = [_launch(native_bin, x, link=(100, 140)) for x in (0.30, 0.40, 0.302)]
    test, row = _merged_row(steady)
    assert row["noisy"] is True and "moved" not in row["noisy_why"]
    # not measured (one thread, or an older tool): nothing said
    assert sync.pu_link_note({"pus": [0, 1], "launch_pu_link_ns": [None, None]}) is None
    # one launch: its start and end
    note = sync.pu_link_note({"pus": [2, 3], "pu_link": {"rtt_ns": [90.4, 480.0]}})
    assert note.startswith("PUs 2 and 3 moved during the run")
    assert "(at its start and end) was 90/480 ns" in note
    assert sync.pu_link_note({"pus": [2, 3], "pu_link": {"rtt_ns": [90, 134]}}) is None


def test_figures_per_placement_of_the_pus():
    """Pairs carry the round of turns they were taken in, and each launch
    the round trips between its two PUs before every round and after the
    last: a pair whose round began and ended in one placement counts for
    that placement's figure; a round in which the host moved the PUs is
    mixed.  Placements with too few pairs get no figure."""
    from tiers.probe import sync

    assert sync.placement_classes([100, 470, 0, 98, 75, 480, 120]) == [
        (75, 75), (98, 120), (470, 480)]
    # one launch: rounds 0-1 near (about 100 ns, 10 pairs), round 2 moved
    # (2 pairs), rounds 3-4 far (about 475 ns, 12 pairs)
    test = {"overheads_us": [0.30] * 10 + [0.45] * 2 + [0.60] * 12,
            "pair_rounds": [0] * 5 + [1] * 5 + [2] * 2 + [3] * 6 + [4] * 6}
    links = [[100.0, 98.0, 102.0, 470.0, 480.0, 475.0]]
    places, mixed = sync.by_placement([test], links)
    assert mixed == 2
    assert [p["pairs"] for p in places] == [10, 12]
    assert places[0]["median_us"] == pytest.approx(0.30)
    assert places[1]["median_us"] == pytest.approx(0.60)
    # the class's round trips: before and after each of its pairs' rounds
    assert places[0]["rtt_ns"] == pytest.approx(statistics.median([100] * 5 + [98] * 10 +
                                                                  [102] * 5))
    assert places[0]["rtt_range_ns"] == [98.0, 102.0]
    assert places[1]["rtt_range_ns"] == [470.0, 480.0]
    # a placement with fewer than PLACEMENT_MIN_PAIRS (10) pairs, or under a
    # fifth of them, has no figure of its own
    few = {"overheads_us": [0.30] * 4 + [0.60] * 30, "pair_rounds": [0] * 4 + [3] * 30}
    places, mixed = sync.by_placement([few], links)
    assert [p["pairs"] for p in places] == [30] and mixed == 0
    assert places[0]["median_us"] == pytest.approx(0.60)
    # no round trips (one thread, an older tool): nothing
    assert sync.by_placement([test], [None]) == ([], 0)


def test_epcc_figure_drops_every_launchs_first_repetition(native_bin):
    raws = [_launch(native_bin, x) for x in (0.30, 0.40, 0.302)]
    test, row = _merged_row(raws)
    rest = [v for r in raws for v in r["runs"][0]["tests"][0]["overheads_us"][1:]]
    assert test["epcc"]["n"] == len(rest) == 33
    assert test["epcc"]["mean_us"] == pytest.approx(sum(rest) / len(rest), rel=1e-12)
    assert row["epcc_mean_us"] == test["epcc"]["mean_us"]
    # each launch's own EPCC figure, and their median: the middle launch's
    # (0.302), where the pooled mean is pulled toward the 0.40 launch
    each = [sum(r["runs"][0]["tests"][0]["overheads_us"][1:]) / 11 for r in raws]
    assert test["epcc"]["launch_means_us"] == pytest.approx(each, rel=1e-12)
    assert row["epcc_launch_means_us"] == test["epcc"]["launch_means_us"]
    assert row["epcc_launch_median_us"] == pytest.approx(sorted(each)[1], rel=1e-12)
    assert row["epcc_launch_median_us"] == pytest.approx(0.302, rel=0.01)
    assert row["epcc_mean_us"] > row["epcc_launch_median_us"] * 1.05


def test_pooled_pairs_below_zero_are_below_noise(native_bin):
    """Two launches whose median overhead is below zero and one above: the
    median of the launches' medians is at or below zero, so no figure."""
    test, row = _merged_row([_launch(native_bin, x) for x in (-0.05, 0.05, -0.04)])
    assert row["reliable"] is False and row["why"].startswith("below noise")
    assert row["value_us"] is None and row["epcc_mean_us"] is None
    assert row["epcc_launch_median_us"] is None


def test_one_launch_is_the_tools_output(native_bin):
    from tiers.probe import sync

    raw = _launch(native_bin, 0.3)
    assert sync.merge_launches([raw]) is raw


def test_a_real_run_shares_time_and_delay_between_launches():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        doc_path = Path(tmp) / "s.json"
        r = run_tiers("probe", "sync", "--quick", "--threads", "1", "--tests",
                      "barrier,spin", "--reps", "6", "--test-time", "50", "--figure-time",
                      "0.06", "--launches", "2", "--json", str(doc_path))
        assert r.returncode == 0, r.stderr
        doc = json.loads(doc_path.read_text())
    p = doc["params"]
    assert p["launches"] == 2 and p["figure_time_s"] == 0.06 and p["reps"] == 6
    assert p["launch_figure_time_s"] == pytest.approx(0.03) and p["launch_reps"] == 6
    assert len(p["launch_delay_measured_us"]) == 2
    # the second launch timed the delay length the first one calibrated
    assert p["delay_calibrations"] >= 1
    assert p["launch_delay_length"] == [p["delay_length"]] * 2
    for t in doc["samples"][0]["tests"]:
        assert len(t["launch_reps"]) == 2 and all(n >= 6 for n in t["launch_reps"])
        assert t["reps"] == sum(t["launch_reps"])
    for row in doc["summary"]["rows"]:
        assert len(row["launch_medians_us"]) == 2


@pytest.mark.parametrize("value", ["0", "x", "101"])
def test_bad_launches_is_one_line(value):
    r = run_tiers("probe", "sync", "--launches", value)
    assert_one_line_error(r, "--launches")
    assert r.returncode == 2
