"""bench/survey_repeat's quiet-spread rule for probe sync's figures: a
figure that tiers gives as "below noise" (not told apart from zero) in every
quiet survey agrees between the surveys -- the same answer each time -- and
one that is below noise in some surveys and a number in the others does not.
The script's own functions, fed runs of key figures as ``key_figures``
returns them ({figure: (value or None, flagged)})."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "survey_repeat" / "run"


@pytest.fixture(scope="module")
def repeat():
    loader = importlib.machinery.SourceFileLoader("survey_repeat_run", str(SCRIPT))
    spec = importlib.util.spec_from_loader("survey_repeat_run", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _runs(**figures) -> list[dict]:
    """Five runs; each keyword is a figure with its five values."""
    return [{name.replace("_", " "): (vals[i], vals[i] is None) for name, vals in
             figures.items()} for i in range(5)]


def test_below_noise_in_every_run_agrees(repeat):
    runs = _runs(sync_STATIC_1=[None] * 5, sync_BARRIER=[0.30, 0.31, 0.30, 0.305, 0.30])
    qs = repeat.summarise(runs)
    assert qs["sync STATIC 1"] == (None, None, 5)
    med, spread, below = qs["sync BARRIER"]
    assert med == 0.30 and spread == pytest.approx(0.01 / 0.30) and below == 0
    assert repeat.disagreeing(qs, 5, runs) == []


def test_below_noise_in_some_runs_fails_and_says_how_many(repeat):
    runs = _runs(sync_DYNAMIC_8=[None, 1.9, None, 2.0, 1.95])
    qs = repeat.summarise(runs)
    assert qs["sync DYNAMIC 8"] == (None, None, 2)
    (line,) = repeat.disagreeing(qs, 5, runs)
    assert line == ("sync DYNAMIC 8: below noise in 2/5 quiet runs and a number in the "
                    "others")


def test_a_wide_spread_still_fails(repeat):
    runs = _runs(sync_LOCK=[0.018, 0.021, 0.040, 0.019, 0.020])
    qs = repeat.summarise(runs)
    med, spread, below = qs["sync LOCK"]
    assert med == 0.020 and spread == pytest.approx((0.040 - 0.018) / 0.020)
    (line,) = repeat.disagreeing(qs, 5, runs)
    assert line.startswith("sync LOCK (110.0%; flagged in 0/5 quiet runs")
    # within the target agrees, just above it does not
    within = repeat.summarise(_runs(x=[1.0, 1.0, 1.0, 0.955, 1.045]))
    assert repeat.disagreeing(within, 5) == []
    above = repeat.summarise(_runs(x=[1.0, 1.0, 1.0, 0.95, 1.051]))
    assert repeat.disagreeing(above, 5) == ["x (10.1%)"]


def test_the_rule_is_printed_as_it_is_applied(repeat):
    assert "below noise (not told apart from zero) in every run" in repeat.AGREE_RULE
    assert "within 10 %" in repeat.AGREE_RULE
    assert "below noise in some runs and a number in the others does not agree" \
        in repeat.AGREE_RULE


def _flagged_runs(values, flags) -> list[dict]:
    return [{"jacobi3d 2x1 time (s)": (v, f)} for v, f in zip(values, flags)]


def test_a_wide_spread_from_flagged_runs_agrees_over_the_unflagged(repeat):
    # one run 12 % slow and flagged noisy in its own row; the other four,
    # which tiers presented as reliable, within 5 %
    runs = _flagged_runs([0.0185, 0.0188, 0.0211, 0.0191, 0.0181],
                         [False, False, True, False, False])
    qs = repeat.summarise(runs)
    med, spread, _ = qs["jacobi3d 2x1 time (s)"]
    assert spread == pytest.approx((0.0211 - 0.0181) / 0.0188)
    assert spread > repeat.TARGET
    assert repeat.unflagged_agree(runs, "jacobi3d 2x1 time (s)") == \
        (4, pytest.approx((0.0191 - 0.0181) / 0.01865))
    assert repeat.disagreeing(qs, 5, runs) == []
    (line,) = repeat.agreeing_unflagged(qs, runs)
    assert line.startswith("jacobi3d 2x1 time (s): 16.0% over all 5 runs, 5.4% over the 4")
    # without the runs themselves the rule cannot see the flags: it fails
    assert repeat.disagreeing(qs, 5) == ["jacobi3d 2x1 time (s) (16.0%)"]


def test_an_unflagged_outlier_still_fails(repeat):
    # the slow run is not flagged: tiers presented it as reliable
    runs = _flagged_runs([0.0185, 0.0188, 0.0211, 0.0191, 0.0181], [False] * 5)
    qs = repeat.summarise(runs)
    (line,) = repeat.disagreeing(qs, 5, runs)
    assert line == "jacobi3d 2x1 time (s) (16.0%; flagged in 0/5 quiet runs; 16.0% over the 5 unflagged)"


def test_flagged_in_most_runs_fails(repeat):
    # only two unflagged runs: too few to say that the reliable figures agree
    runs = _flagged_runs([0.0185, 0.0188, 0.0211, 0.0230, 0.0160],
                         [False, False, True, True, True])
    assert repeat.unflagged_agree(runs, "jacobi3d 2x1 time (s)") is None
    qs = repeat.summarise(runs)
    (line,) = repeat.disagreeing(qs, 5, runs)
    assert "flagged in 3/5 quiet runs" in line
    assert repeat.agreeing_unflagged(qs, runs) == []


def test_the_flag_rule_is_printed(repeat):
    assert "flagged" in repeat.AGREE_RULE and "at least 3" in repeat.AGREE_RULE


def test_a_figure_split_by_placement_agrees_per_placement(repeat):
    """FOR read 0.39 µs where the host kept the two PUs close (a cache line's
    round trip about 100 ns) and 0.65 µs where it put them on different dies
    (about 460 ns); the runs mixed the two, so the figure's spread over the
    runs is 67 %.  Per placement -- round trips clustered over every run --
    the runs agree within 10 %: the figure agrees; a placement measured in
    fewer than 3 runs is not judged; one that disagrees fails."""
    name = "sync FOR overhead 2 thr (us)"
    runs = [{name: (v, True)} for v in (0.39, 0.65, 0.40, 0.39, 0.64)]
    places = [{name: [(101.0, 0.390), (455.0, 0.650)]},
              {name: [(470.0, 0.650)]},
              {name: [(98.0, 0.400)]},
              {name: [(104.0, 0.385)]},
              {name: [(72.0, 0.340), (462.0, 0.640)]}]
    per = repeat.placement_spreads(places)[name]
    # three classes: about 72 ns (one run), about 100 ns and about 460 ns
    assert [(round(rtt), k) for rtt, k, _ in per] == [(72, 1), (101, 3), (462, 3)]
    assert per[1][2] == pytest.approx((0.400 - 0.385) / 0.390)
    assert per[2][2] == pytest.approx((0.650 - 0.640) / 0.650)
    assert repeat.agrees_per_placement(per)
    qs = repeat.summarise(runs)
    assert qs[name][1] > 0.6
    assert repeat.disagreeing(qs, 5, runs) != []                      # without placements
    assert repeat.disagreeing(qs, 5, runs, repeat.placement_spreads(places)) == []
    # one placement's runs 15 % apart: it does not agree
    places[3] = {name: [(104.0, 0.45)]}
    per = repeat.placement_spreads(places)[name]
    assert not repeat.agrees_per_placement(per)
    assert repeat.disagreeing(qs, 5, runs, repeat.placement_spreads(places)) != []
    # no placement measured in 3 runs: not judged, so it does not agree
    assert not repeat.agrees_per_placement([(100.0, 2, 0.0), (460.0, 2, 0.0)])
