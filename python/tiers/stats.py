"""The statistics layer of tiers: one way to summarise repeated samples of one
figure, and one rule for how many samples to take.

The same rule is implemented in C (``native/src/common/stats.c``) for the
native probes; both give the same numbers on the same samples
(docs/statistics.md describes the method):

- **outliers**: with 4 samples or more, a sample outside Tukey's far-out
  fences ``[Q1 - 3 IQR, Q3 + 3 IQR]`` (quartiles by linear interpolation
  between order statistics) is left out; the others are "kept";
- **median** of the kept samples, and **min** (the best) of all samples: a
  timing can be disturbed upwards only, so a low sample is never dropped
  from the best;
- **95 % confidence interval of the median**, distribution-free: the order
  statistics ``x(l)`` and ``x(n+1-l)`` of the n kept samples, where ``l`` is the
  largest rank with ``P(B <= l - 1) <= 0.025`` for ``B ~ Binomial(n, 1/2)``.
  Below 6 kept samples no such rank exists: the interval is undefined;
- **relative half-width** ``max(median - lo, hi - median) / median``;
- **noisy**: the half-width is above 5 % of the median, or the interval is
  undefined (too few samples to say the figure is steady).

:class:`Driver` is the "repeat until" rule: keep taking samples until the
interval is within +-5 % of the median (and at least :data:`MIN_SAMPLES`
were taken), a time limit for the figure passes, or a maximum count is
reached.  ``--quick`` shortens the time limit, never the rule.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Iterable, Sequence

#: Confidence level of the interval of the median.
CONFIDENCE = 0.95
#: A figure whose interval is wider than this fraction of its median is noisy.
NOISY_REL = 0.05
#: Tukey's far-out fence factor: samples beyond Q1 - k IQR or Q3 + k IQR are outliers.
FENCE = 3.0
#: The fewest kept samples with a defined 95 % interval of the median.
MIN_SAMPLES = 6
#: Defaults of the repeat-until driver: time limit per figure (s), quick limit, count cap.
TIME_LIMIT_S = 1.0
QUICK_TIME_LIMIT_S = 0.2
MAX_SAMPLES = 200


def quantile(sorted_x: Sequence[float], p: float) -> float:
    """Return the ``p`` quantile (0..1) of already sorted values by linear
    interpolation between order statistics (numpy's default rule)."""
    n = len(sorted_x)
    if n == 0:
        return math.nan
    h = (n - 1) * p
    lo = int(math.floor(h))
    hi = min(lo + 1, n - 1)
    return sorted_x[lo] + (h - lo) * (sorted_x[hi] - sorted_x[lo])


def median_ci_ranks(n: int) -> tuple[int, int] | None:
    """Return the 1-based ranks (l, u) of the order statistics that bound the
    95 % confidence interval of the median of ``n`` samples, or None when
    ``n`` is too small for any interval to reach 95 %.

    ``l`` is the largest rank with P(B <= l - 1) <= 0.025, B ~ Binomial(n,
    1/2), and u = n + 1 - l, so the coverage is 1 - 2 P(B <= l - 1) >= 0.95.
    The tail is summed in floating point with terms computed by the
    recurrence C(n, k+1) = C(n, k) (n - k) / (k + 1), as the C version does."""
    if n < 1:
        return None
    alpha = (1.0 - CONFIDENCE) / 2.0
    term = math.pow(0.5, n)  # P(B = 0)
    tail = 0.0  # P(B <= k - 1) for the candidate rank l = k
    best = 0
    for k in range(0, n):
        tail += term  # now P(B <= k)
        if tail > alpha * (1 + 1e-12):
            break
        best = k + 1
        term = term * (n - k) / (k + 1)
    if best < 1:
        return None
    return best, n + 1 - best


def outlier_fences(sorted_x: Sequence[float]) -> tuple[float, float] | None:
    """Return Tukey's far-out fences (Q1 - 3 IQR, Q3 + 3 IQR) of sorted
    values, or None below 4 values (no sample is then called an outlier)."""
    if len(sorted_x) < 4:
        return None
    q1 = quantile(sorted_x, 0.25)
    q3 = quantile(sorted_x, 0.75)
    iqr = q3 - q1
    return q1 - FENCE * iqr, q3 + FENCE * iqr


def summarize(samples: Iterable[float]) -> dict:
    """Return the summary of the samples of one figure, a dict with

    ``n`` (finite samples given), ``kept`` (samples inside the outlier
    fences), ``outliers`` (n - kept), ``min`` (of all samples) and
    ``median`` (of the kept ones), ``ci_low``/``ci_high`` (the 95 % interval of the median; None
    when undefined), ``ci_ranks`` ([l, u], 1-based, or None),
    ``rel_halfwidth`` (None when undefined), ``noisy`` (bool) and ``why``
    (one line saying why the figure is noisy, or None).  Non-finite samples
    are ignored; with none at all every value is None and ``noisy`` True."""
    xs = sorted(float(x) for x in samples if x is not None and math.isfinite(float(x)))
    out = {"n": len(xs), "kept": 0, "outliers": 0, "min": None, "median": None,
           "ci_low": None, "ci_high": None, "ci_ranks": None, "rel_halfwidth": None,
           "noisy": True, "why": "no samples"}
    if not xs:
        return out
    fences = outlier_fences(xs)
    kept = xs if fences is None else [x for x in xs if fences[0] <= x <= fences[1]]
    k = len(kept)
    med = quantile(kept, 0.5)
    out.update(kept=k, outliers=len(xs) - k, min=xs[0], median=med)
    ranks = median_ci_ranks(k)
    if ranks is None:
        out["why"] = (f"{k} sample{'s' if k != 1 else ''} kept: the 95 % interval of the "
                      f"median needs {MIN_SAMPLES}")
        return out
    lo, hi = kept[ranks[0] - 1], kept[ranks[1] - 1]
    half = max(med - lo, hi - med)
    if med > 0:
        rel = half / med
    else:
        rel = 0.0 if half == 0 else math.inf
    noisy = rel > NOISY_REL
    out.update(ci_low=lo, ci_high=hi, ci_ranks=[ranks[0], ranks[1]], rel_halfwidth=rel,
               noisy=noisy,
               why=(f"95 % interval of the median is +-{rel * 100:.1f} %, wider than "
                    f"+-{NOISY_REL * 100:.0f} %") if noisy else None)
    return out


#: A difference measured against a reference is resolved when it is at least
#: this many times the spread (interquartile range) of the reference's samples.
RESOLUTION_FACTOR = 2.0


def resolution(reference: Iterable[float], timer: float = 0.0) -> float | None:
    """Return the smallest difference that a figure measured against these
    reference samples can resolve: :data:`RESOLUTION_FACTOR` times their
    interquartile range (quartiles by linear interpolation), and never less
    than twice ``timer`` (what one reading of the clock costs, per sample,
    in the samples' unit).  None without a finite sample.  The C version is
    ``tiers_stats_resolution``."""
    xs = sorted(float(x) for x in reference if x is not None and math.isfinite(float(x)))
    if not xs:
        return None
    r = RESOLUTION_FACTOR * (quantile(xs, 0.75) - quantile(xs, 0.25))
    floor = 2.0 * timer if timer and math.isfinite(timer) and timer > 0 else 0.0
    return max(r, floor)


def below_resolution(value: float | None, res: float | None) -> bool:
    """Return True when a difference ``value`` is smaller than the
    resolution ``res`` (:func:`resolution`): it must then be given as
    "< res (below resolution)", never as a number."""
    return value is not None and res is not None and math.isfinite(res) and value < res


def converged(samples: Sequence[float]) -> bool:
    """Return True when the samples are enough to stop: at least
    :data:`MIN_SAMPLES` kept and the 95 % interval of the median within
    +-5 % of it."""
    s = summarize(samples)
    return s["rel_halfwidth"] is not None and not s["noisy"]


def summarize_blocks(blocks: Iterable[Iterable[float]],
                     fmt: Callable[[float], str] | None = None) -> dict:
    """Return the summary of one figure measured in independent blocks --
    separate launches of a probe, or blocks restarted from scratch -- each
    holding repeated samples.

    Repetitions inside one block share whatever the block started with
    (where the processes landed, their buffers' pages): their interval says
    how steady the figure was *in that block*, not how far another block
    would move it.  So the figure is the **median of the block medians**
    (each block summarised by :func:`summarize`), ``min`` is the best
    sample of all, and the interval must cover both the pooled samples'
    95 % interval and every block's median:

    - with :data:`MIN_SAMPLES` blocks or more, it is the 95 % interval of
      the median *of the block medians* (order statistics, as
      :func:`summarize`), widened to the pooled interval;
    - with fewer, ``[min(pooled low, lowest block median), max(pooled
      high, highest block median)]``: blocks that disagree by more than
      +-5 % around the figure make it noisy, however steady each block was.

    Returns :func:`summarize`'s keys (``n``, ``kept``, ``outliers`` of the
    pooled samples; ``median``, ``ci_low``, ``ci_high``, ``rel_halfwidth``,
    ``noisy``, ``why`` as described; ``ci_ranks`` None) plus ``blocks``
    (blocks with at least one finite sample), ``block_medians`` and
    ``block_spread`` ((max - min) / median of the block medians, None for
    fewer than 2 blocks).  With one block the figures are :func:`summarize`'s
    of its samples.  ``fmt`` words a block median in ``why`` (default: 4
    significant digits), e.g. as a rate derived from a time."""
    fmt = fmt or (lambda v: f"{v:.4g}")
    groups = [[float(x) for x in b if x is not None and math.isfinite(float(x))]
              for b in blocks]
    groups = [g for g in groups if g]
    pooled = summarize([x for g in groups for x in g])
    out = dict(pooled, blocks=len(groups), block_medians=[], block_spread=None)
    if not groups:
        return out
    if len(groups) == 1:
        out["block_medians"] = [pooled["median"]]
        return out
    meds = [summarize(g)["median"] for g in groups]
    sm = sorted(meds)
    med = quantile(sm, 0.5)
    out.update(median=med, block_medians=meds, ci_ranks=None,
               block_spread=(sm[-1] - sm[0]) / med if med > 0 else None)
    if pooled["ci_low"] is None:
        out.update(ci_low=None, ci_high=None, rel_halfwidth=None, noisy=True,
                   why=pooled["why"])
        return out
    ranks = median_ci_ranks(len(sm))
    lo, hi = (sm[ranks[0] - 1], sm[ranks[1] - 1]) if ranks else (sm[0], sm[-1])
    lo, hi = min(lo, pooled["ci_low"]), max(hi, pooled["ci_high"])
    half = max(med - lo, hi - med)
    rel = half / med if med > 0 else (0.0 if half == 0 else math.inf)
    noisy = rel > NOISY_REL
    why = None
    if noisy:
        spread_rel = max(med - sm[0], sm[-1] - med) / med if med > 0 else math.inf
        if ranks is None and spread_rel > NOISY_REL:
            why = (f"{len(sm)} independent blocks disagree: their medians lie from "
                   f"{fmt(sm[0])} to {fmt(sm[-1])} (+-{spread_rel * 100:.1f} % around the "
                   f"figure), wider than +-{NOISY_REL * 100:.0f} %")
        else:
            why = (f"95 % interval of the median is +-{rel * 100:.1f} %, wider than "
                   f"+-{NOISY_REL * 100:.0f} %")
    out.update(ci_low=lo, ci_high=hi, rel_halfwidth=rel, noisy=noisy, why=why)
    return out


def launch_agreement(values: Iterable[float | None],
                     fmt: Callable[[float], str] | None = None) -> dict:
    """Return how far one figure moved between independent launches, given
    the figure of each launch (``values``; None or non-finite ones are left
    out): ``median`` of the launches' figures, ``launches`` (how many
    counted), ``spread`` ((max - min) / median, None for fewer than 2),
    ``rel`` (the largest distance of a launch from the median, relative),
    ``noisy`` (``rel`` above +-:data:`NOISY_REL`, as
    :func:`summarize_blocks` judges blocks that disagree) and ``why`` (one
    line when noisy, else None; ``fmt`` words a figure, default 4
    significant digits).  With one launch nothing can disagree: ``noisy``
    is False."""
    fmt = fmt or (lambda v: f"{v:.4g}")
    xs = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))
    out = {"median": None, "launches": len(xs), "spread": None, "rel": None, "noisy": False,
           "why": None}
    if not xs:
        return out
    med = quantile(xs, 0.5)
    out["median"] = med
    if len(xs) < 2:
        return out
    if med > 0:
        out["spread"] = (xs[-1] - xs[0]) / med
        out["rel"] = max(med - xs[0], xs[-1] - med) / med
    else:
        out["spread"] = out["rel"] = math.inf if xs[-1] != xs[0] else 0.0
    if out["rel"] > NOISY_REL:
        out["noisy"] = True
        out["why"] = (f"{len(xs)} launches disagree: from {fmt(xs[0])} to {fmt(xs[-1])} "
                      f"(+-{out['rel'] * 100:.1f} % around the median), wider than "
                      f"+-{NOISY_REL * 100:.0f} %")
    return out


class Driver:
    """The repeat-until rule for one figure.

    Call :meth:`add` with each sample; :meth:`stop` returns why sampling
    should stop ("converged", "time limit", "max samples") or None to go on.
    ``time_limit_s`` is measured from the driver's creation with ``clock``
    (default :func:`time.monotonic`); ``quick`` uses the quick limit when no
    limit is given.  The rule itself is the same in both cases."""

    def __init__(self, time_limit_s: float | None = None, max_samples: int = MAX_SAMPLES,
                 *, quick: bool = False, clock: Callable[[], float] = time.monotonic):
        if time_limit_s is None:
            time_limit_s = QUICK_TIME_LIMIT_S if quick else TIME_LIMIT_S
        if not time_limit_s > 0:
            raise ValueError("the time limit of a figure must be positive")
        if max_samples < 1:
            raise ValueError("the sample cap must be at least 1")
        self.time_limit_s = float(time_limit_s)
        self.max_samples = int(max_samples)
        self.clock = clock
        self.start = clock()
        self.samples: list[float] = []

    def add(self, x: float) -> None:
        """Record one sample."""
        self.samples.append(float(x))

    def stop(self) -> str | None:
        """Return "converged", "max samples" or "time limit" when sampling
        should stop (checked in that order), else None."""
        if self.samples and converged(self.samples):
            return "converged"
        if len(self.samples) >= self.max_samples:
            return "max samples"
        if self.clock() - self.start >= self.time_limit_s:
            return "time limit"
        return None

    def summary(self) -> dict:
        """Return :func:`summarize` of the samples plus ``stopped`` (why the
        driver stopped, or None while it would go on)."""
        out = summarize(self.samples)
        out["stopped"] = self.stop()
        return out


def repeat_until(sample: Callable[[], float], time_limit_s: float | None = None,
                 max_samples: int = MAX_SAMPLES, *, quick: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> dict:
    """Call ``sample()`` until :class:`Driver`'s rule stops (at least once)
    and return the driver's summary, with the samples under ``samples``."""
    d = Driver(time_limit_s, max_samples, quick=quick, clock=clock)
    while True:
        d.add(sample())
        if d.stop() is not None:
            break
    out = d.summary()
    out["samples"] = list(d.samples)
    return out


def mark(value: str, noisy: bool | None) -> str:
    """Return a table cell: ``value`` with a trailing "~" when noisy."""
    return f"{value}~" if noisy else value


#: The legend line of tables that mark noisy figures with "~".
LEGEND = "~ noisy: 95 % CI of the median wider than +-5 %"
