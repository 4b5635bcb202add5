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
