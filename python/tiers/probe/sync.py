"""``tiers probe sync``: synchronisation and scheduling overheads of OpenMP
(the EPCC micro-benchmark method) and the barriers of the COMPaS paper.

The native tool ``tiers-probe-sync`` measures, per thread count, with every
thread pinned to a PU of its own:

* ``sync``: PARALLEL, FOR, PARALLEL FOR, BARRIER, SINGLE, CRITICAL,
  LOCK/UNLOCK, ATOMIC and REDUCTION, each as EPCC's syncbench does: a
  reference loop of ``delay()`` against the same loop inside the construct;
  the overhead is the difference per construct execution;
* ``sched``: ``omp for`` with STATIC, DYNAMIC and GUIDED schedules at each
  chunk size (EPCC's schedbench: ``iters_per_thread`` delays per thread
  against a reference of that many delays on one thread);
* ``barriers``: the tiers spin barrier (``tiers/hybrid.h``), a
  ``pthread_barrier_t`` and a mutex/condition-variable barrier, as time per
  barrier episode.

Each figure repeats by the statistics layer's rule (docs/statistics.md):
at least ``reps`` outer repetitions, then on until the 95 % CI of the
median is within +-5 % or ``figure_time`` seconds pass.  An EPCC overhead
is measured in pairs: the reference loop and the test, timed one beside the
other in alternating order, and the figure is the median of the per-pair
differences, so a disturbed reference moves one pair and not the figure.
An overhead whose median, or the lower end of its CI, is at or below zero is
"below noise": ``reliable: false`` with ``why``, and no number is given; one
whose median is smaller than the resolution of its pairs (twice the
interquartile range of the reference loop's repetitions, at least two clock
readings per inner repetition) is printed as "< X µs (below resolution)",
``reliable: false`` with ``why`` and ``below_resolution_us``.  Beside the
median every overhead carries EPCC's own figure (``epcc_mean_us``: the mean
of the per-pair overheads, the first repetition dropped, outliers counted),
the figure the EPCC suite itself prints.  LOCK/UNLOCK's lock lies on several
pages of its own, taken in turn, and its figure is the median of the pages'
medians (every page of every launch an independent block): where the lock's
line lies in physical memory, new in every process, sets its cost.
The EPCC statistics (mean, 3-sigma filter, t interval of the mean) stay
beside the median in the document, in microseconds and in CPU cycles.  This module wraps the tool's output into a ``tiers.probe.sync/1``
document (docs/schemas/probe-sync.md), prints tables and draws the plots.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table

from .. import native, plot as tplot, result, stats
from ..errors import TiersError
from ..noise import PLACEMENT_GAP, class_of, placement_classes  # noqa: F401 (also used here)
from ..progress import tool_progress
from ..render import plural

TOOL = "tiers-probe-sync"

#: The test groups and their tests, in the tool's order.
GROUPS = {
    "sync": ["parallel", "for", "parallel_for", "barrier", "single", "critical", "lock",
             "atomic", "reduction"],
    "sched": ["static", "dynamic", "guided"],
    "barriers": ["spin", "pthread", "condvar"],
}

#: What ``quick=True`` changes (options given explicitly still win).
QUICK = {"reps": 15, "test_time": 200.0, "chunks": "1,8,64", "figure_time": 0.2}

#: The thread count the headline figures are taken at (the issue quotes 2).
HEADLINE_THREADS = 2

_HEADLINE = [("spin_barrier", "barriers", "spin", "spin barrier"),
             ("pthread_barrier", "barriers", "pthread", "pthread barrier"),
             ("condvar_barrier", "barriers", "condvar", "mutex/condvar barrier"),
             ("omp_barrier", "sync", "barrier", "EPCC BARRIER"),
             ("omp_parallel", "sync", "parallel", "EPCC PARALLEL")]

_ROW_KEYS = ("mean_us", "median_us", "stddev_us", "ci95_us", "min_us", "max_us",
             "mean_cycles", "median_cycles", "stddev_cycles", "ci95_cycles", "kept", "dropped")


def native_args(*, threads=None, tests=None, reps=None, test_time=None, delay_time=None,
                chunks=None, pin=None, iters_per_thread=None, quick=False,
                figure_time=None, max_reps=None) -> list[str]:
    """Return the tiers-probe-sync arguments for these options (lists as
    Python lists or comma-separated text; None means the default, or the
    quick value when ``quick``)."""
    if quick:
        reps = QUICK["reps"] if reps is None else reps
        test_time = QUICK["test_time"] if test_time is None else test_time
        chunks = QUICK["chunks"] if chunks is None else chunks
        figure_time = QUICK["figure_time"] if figure_time is None else figure_time
    args: list[str] = []
    for flag, value in (("--threads", threads), ("--tests", tests), ("--chunks", chunks)):
        text = native.list_arg(value)
        if text is not None:
            args += [flag, text]
    for flag, value in (("--reps", reps), ("--test-time", test_time),
                        ("--delay-time", delay_time), ("--iters-per-thread", iters_per_thread),
                        ("--pin", pin), ("--figure-time", figure_time),
                        ("--max-reps", max_reps)):
        if value is not None:
            args += [flag, str(value)]
    return args


def _run_tool(args: list[str], progress: Callable[[int, int], None] | None) -> dict:
    """Run tiers-probe-sync and return its JSON; raise TiersError with the
    tool's own line when it fails."""
    returncode, stdout, stderr = native.run_with_progress(TOOL, args, progress)
    if returncode != 0:
        raise native.tool_error(TOOL, stderr, returncode)
    return native.parse_json(TOOL, stdout)


#: PUs of one team whose delay() (timed on all of them at once) differs by
#: more than this fraction make every overhead of that thread count noisy:
#: EPCC's method takes every PU to be as fast as the reference's.
PU_SPREAD = 0.05

#: A delay() that changed by more than this fraction between the start and
#: the end of a run is warned about (the machine's speed changed).
DELAY_DRIFT = 0.05

MIN_WHY = ("the smallest single repetition was not slower than its reference loop: "
           "an overhead at or below the timing noise, not a negative cost")

#: EPCC figures of an overhead that are never given at or below zero, and
#: what else goes with each
_POSITIVE = {"min_us": ("min_cycles",), "mean_us": ("mean_cycles", "ci95_us", "ci95_cycles"),
             "median_us": ("median_cycles",)}


def _drop_impossible_min(st: dict) -> None:
    """An EPCC overhead is a difference of two timed loops, so one noisy
    repetition can come out at zero or below.  Such a minimum (or mean, or
    median) is not a cost a construct can have: store None,
    ``<figure>_reliable: false`` and why, instead of the number.  A mean
    whose t interval reaches zero or below is dropped the same way
    (``mean_why``)."""
    for key, others in _POSITIVE.items():
        v = st.get(key)
        if isinstance(v, (int, float)) and v <= 0:
            st[key] = None
            for o in others:
                if o in st:
                    st[o] = None
            st[key.replace("_us", "_reliable")] = False
            if key == "min_us":
                st["min_why"] = MIN_WHY
    ci = st.get("ci95_us")
    if st.get("mean_us") is not None and ci and isinstance(ci[0], (int, float)) and ci[0] <= 0:
        # the t interval of the EPCC mean reaches zero: a few disturbed
        # repetitions pull the mean; the mean is not a cost to give
        for k in ("mean_us", "mean_cycles", "ci95_us", "ci95_cycles"):
            if k in st:
                st[k] = None
        st["mean_reliable"] = False
        st["mean_why"] = ("the 95 % t interval of the EPCC mean includes zero: the mean is "
                          "not told from the noise (the median is the figure)")
    ms = st.get("median_stats")
    if isinstance(ms, dict):
        for key in ("min", "median", "ci_low", "ci_high", "min_cycles", "median_cycles"):
            v = ms.get(key)
            if isinstance(v, (int, float)) and v <= 0:
                ms[key] = None


def _reliability(test: dict) -> tuple[bool, str | None]:
    """Whether a test's figure can be given, from the tool's ``reliable``
    and ``why`` (documents of older tools: the median of the statistics
    layer, and its CI, above zero)."""
    if "reliable" in test:
        return bool(test["reliable"]), test.get("why")
    ms = test["stats"].get("median_stats") or {}
    med, lo = ms.get("median"), ms.get("ci_low")
    if not isinstance(med, (int, float)) or med <= 0:
        return False, "below noise: the median overhead is at or below zero"
    if isinstance(lo, (int, float)) and lo <= 0:
        return False, "below noise: the 95 % CI of the median overhead includes zero"
    return True, None


#: the row fields that are figures: None in a row that is below the noise
_FIGURES = ("mean_us", "median_us", "stddev_us", "ci95_us", "min_us", "max_us", "mean_cycles",
            "median_cycles", "stddev_cycles", "ci95_cycles", "value_us", "value_cycles",
            "median_ci95_us", "epcc_mean_us", "epcc_sd_us", "epcc_mean_cycles",
            "epcc_launch_means_us", "epcc_launch_median_us")


def _epcc(test: dict) -> dict:
    """The row fields of EPCC's own figure of an overhead (the tool's
    ``epcc``: mean of the per-pair overheads, the first repetition dropped,
    outliers counted and kept): ``epcc_mean_us`` (None when at or below
    zero: not a cost), ``epcc_sd_us``, ``epcc_mean_cycles``, ``epcc_n``,
    ``epcc_outliers``; empty for a test without one (barriers, older
    documents)."""
    e = test.get("epcc")
    if not isinstance(e, dict):
        return {}
    mean = e.get("mean_us")
    ok = isinstance(mean, (int, float)) and mean > 0
    out = {"epcc_mean_us": mean if ok else None, "epcc_sd_us": e.get("sd_us"),
           "epcc_mean_cycles": e.get("mean_cycles") if ok else None, "epcc_n": e.get("n"),
           "epcc_outliers": e.get("outliers")}
    if "launch_means_us" in e:
        out["epcc_launch_means_us"] = e["launch_means_us"]
        out["epcc_launch_median_us"] = e.get("launch_median_us")
    if ok:
        why = _epcc_disturbed(mean, e.get("sd_us"), e.get("n"),
                              (test.get("stats") or {}).get("median_stats") or {})
        out["epcc_noisy"] = why is not None
        if why:
            out["epcc_noisy_why"] = why
    return out


#: The legend line of an EPCC mean marked "~" on its own (see _epcc_disturbed).
EPCC_LEGEND = ("~ after EPCC mean: the mean holds disturbed repetitions (its 95 % t "
               "interval wider than +-5 %, or outside the median's 95 % CI)")


def _epcc_disturbed(mean: float, sd, n, ms: dict) -> str | None:
    """Why EPCC's mean of an overhead is disturbed, or None.  A mean keeps
    every disturbed repetition (a preempted test run adds its whole delay
    divided by the repetitions), so it is marked as the median is when it
    is noisy: when its own 95 % t interval is wider than +-5 % (the
    statistics layer's target), or when it lies outside the 95 % CI of
    the median of the same pairs (the repetitions that moved it are ones
    the median does not follow)."""
    if isinstance(sd, (int, float)) and isinstance(n, int) and n > 1:
        half = _t95(n - 1) * sd / n ** 0.5
        if half > stats.NOISY_REL * mean:
            return (f"the 95 % t interval of the EPCC mean is ±{half / mean * 100:.0f} % "
                    "(disturbed repetitions stay in a mean)")
    lo, hi = ms.get("ci_low"), ms.get("ci_high")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and not lo <= mean <= hi:
        return (f"the EPCC mean {mean:.4g} µs lies outside the 95 % CI of the median "
                f"[{lo:.4g}, {hi:.4g}] µs (disturbed repetitions stay in a mean)")
    return None


def summarise(raw: dict) -> dict:
    """Return the ``summary`` of a document from the tool's output: one row
    per test (and chunk size) and thread count and the ``headline`` figures
    at 2 threads (or the fewest measured): spin, pthread and condvar barrier
    times and the EPCC BARRIER and PARALLEL overheads.

    A row's figure is ``value_us`` (and ``value_cycles``): the statistics
    layer's median of the test's values -- per-pair overheads, or times per
    barrier episode -- with ``median_ci95_us``, its 95 % CI, and ``noisy``;
    the EPCC mean, median, deviation, t interval, min and max are beside
    it.  A row that is below the noise has ``reliable: false``, ``why``,
    and None for every figure: no number at or below zero is reported."""
    hz = raw["params"]["cycles_per_second"]
    rows = []
    for run in raw["runs"]:
        pu_spread = run.get("pu_delay_spread")
        uneven = isinstance(pu_spread, (int, float)) and pu_spread > PU_SPREAD
        for test in run["tests"]:
            ok, why = _reliability(test)
            st = test["stats"]
            ms = st.get("median_stats") or {}
            value = ms.get("median")
            ci = ([ms["ci_low"], ms["ci_high"]]
                  if ms.get("ci_low") is not None and ms.get("ci_high") is not None else None)
            _drop_impossible_min(st)
            row = {"group": test["group"], "name": test["name"], "label": test["label"],
                   "threads": run["threads"]}
            if "chunk" in test:
                row["chunk"] = test["chunk"]
            row.update({k: st.get(k) for k in _ROW_KEYS})
            for k in ("min_why", "mean_why"):
                if k in st:
                    row[k] = st[k]
            row["value_us"] = value
            row["value_cycles"] = value * hz * 1e-6 if isinstance(value, (int, float)) else None
            row["median_ci95_us"] = ci
            row["noisy"] = bool(st.get("noisy", ms.get("noisy")))
            row["reps"] = test.get("reps", st.get("n"))
            row["stopped"] = test.get("stopped")
            if test.get("by_placement"):
                # the figure per placement of the team's first two PUs, each
                # a cost only where it is one (as the row's own figure)
                res = test.get("resolution_us")
                places = []
                for b in test["by_placement"]:
                    b = dict(b)
                    b["value_us"], text = _placement_value(b, res)
                    b["reliable"] = b["value_us"] is not None
                    if not b["reliable"]:
                        # as the row's own figures: no overhead that is not
                        # one (a median at or below zero); the pairs' values
                        # stay in the samples
                        b.update(median_us=None, ci95_us=None, why=text)
                    places.append(b)
                row["by_placement"] = places
                row["placement_mixed_pairs"] = test.get("placement_mixed_pairs", 0)
            if "launch_medians_us" in test:
                # the figure of each launch (independent blocks) and why the
                # figure is noisy when they disagree
                row["launch_medians_us"] = test["launch_medians_us"]
                if "page_medians_us" in test:
                    # LOCK/UNLOCK: the figure is the median of these
                    row["page_medians_us"] = test["page_medians_us"]
                    row["lock_pages"] = test.get("lock_pages")
                if test.get("noisy_why"):
                    row["noisy_why"] = test["noisy_why"]
            row.update(_epcc(test))
            if "resolution_us" in test:
                row["resolution_us"] = test["resolution_us"]
            if uneven and test["group"] != "barriers":
                # the team's PUs ran delay() at different speeds: the
                # overhead holds the difference (noisy, with the spread)
                row["pu_delay_spread"] = pu_spread
                row["noisy"] = True
            row["reliable"] = ok
            if not ok:
                row["why"] = why
                row["noisy"] = True
                if test.get("below_resolution"):
                    # smaller than what the pairs can resolve: an upper bound
                    row["below_resolution_us"] = test.get("resolution_us")
                for k in _FIGURES:
                    row[k] = None
            rows.append(row)
    threads = [run["threads"] for run in raw["runs"]]
    at = HEADLINE_THREADS if HEADLINE_THREADS in threads else (min(threads) if threads else None)
    headline: dict = {"threads": at}
    for key, group, name, label in _HEADLINE:
        for row in rows:
            if row["threads"] == at and row["group"] == group and row["name"] == name:
                headline[key] = {"label": label, **{k: row.get(k) for k in (
                    "value_us", "value_cycles", "median_ci95_us", "mean_us", "median_us",
                    "ci95_us", "mean_cycles", "median_cycles", "ci95_cycles", "noisy",
                    "reliable", "why", "epcc_mean_us", "below_resolution_us")}}
    return {"cycles_per_second": hz, "threads": threads, "rows": rows, "headline": headline}


#: Separate launches of the tool per run; every figure is the median of the
#: launches' medians (docs/statistics.md, "Independent blocks").
LAUNCHES = 3

#: The tool's defaults that the launches share out: the least repetitions
#: and the time per figure, {quick: value}.
_DEFAULT_REPS = {False: 20, True: QUICK["reps"]}
_DEFAULT_FIGURE_TIME = {False: 1.0, True: QUICK["figure_time"]}
_DEFAULT_MAX_REPS = 2000

#: Outlier filter of EPCC's statistics (the tool's OUTLIER_SIGMA).
_SIGMA = 3.0

#: Student's t, 0.975 quantile, for 1-30 degrees of freedom (the tool's table).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def _t95(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom
    (0 below 1): the table to 30, then a Cornish-Fisher expansion, as the
    tool computes it."""
    if df < 1:
        return 0.0
    if df <= 30:
        return _T95[df - 1]
    z, v = 1.959963984540054, float(df)
    return z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v * v)


def _mean_sd(x: list[float]) -> tuple[float, float]:
    m = sum(x) / len(x)
    sd = (sum((v - m) ** 2 for v in x) / (len(x) - 1)) ** 0.5 if len(x) > 1 else 0.0
    return m, sd


def _epcc_stats(x: list[float], blocks: list[list[float]], hz: float) -> dict:
    """The tool's ``stats`` object for the samples ``x`` pooled from several
    launches (``blocks``, one list per launch): EPCC's statistics of all
    samples (one pass of the 3-sigma filter; mean, median, deviation, min,
    max, t interval of the mean on the kept ones), in us and cycles, and
    under ``median_stats`` the statistics layer's independent-block summary
    (:func:`tiers.stats.summarize_blocks`: the median of the launches'
    medians, an interval that covers every launch's median, noisy)."""
    m_all, sd_all = _mean_sd(x)
    kept = [v for v in x if not (sd_all > 0 and abs(v - m_all) > _SIGMA * sd_all)]
    dropped = [v for v in x if sd_all > 0 and abs(v - m_all) > _SIGMA * sd_all]
    mean, sd = _mean_sd(kept)
    k = len(kept)
    srt = sorted(kept)
    median = srt[k // 2] if k % 2 else 0.5 * (srt[k // 2 - 1] + srt[k // 2])
    t = _t95(k - 1)
    half = t * sd / k ** 0.5 if k > 1 else 0.0
    c = hz * 1e-6
    b = stats.summarize_blocks(blocks, fmt=lambda v: f"{v:.4g} µs")
    ms = {key: b.get(key) for key in ("min", "median", "ci_low", "ci_high", "rel_halfwidth",
                                      "n", "kept", "noisy", "why", "blocks", "block_medians",
                                      "block_spread")}
    ms["median_cycles"] = b["median"] * c if b.get("median") is not None else None
    ms["min_cycles"] = b["min"] * c if b.get("min") is not None else None
    return {"n": len(x), "kept": k, "dropped": len(dropped), "dropped_us": dropped,
            "mean_us": mean, "median_us": median, "stddev_us": sd, "min_us": srt[0],
            "max_us": srt[-1], "ci95_us": [mean - half, mean + half], "t95": t,
            "mean_cycles": mean * c, "median_cycles": median * c, "stddev_cycles": sd * c,
            "min_cycles": srt[0] * c, "max_cycles": srt[-1] * c,
            "ci95_cycles": [(mean - half) * c, (mean + half) * c], "median_stats": ms,
            "noisy": bool(b.get("noisy"))}


def _epcc_figure(blocks: list[list[float]], hz: float) -> dict:
    """EPCC's own figure over launches: the mean of the per-pair overheads
    with every launch's first repetition dropped (each launch has its own
    warm-up), the deviation, and the repetitions beyond 3 deviations
    counted and kept, as the tool's ``epcc``."""
    rest = [v for b in blocks for v in b[1:]]
    # each launch's own EPCC figure (None where it has no repetition left
    # or is not above zero), and their median: the figure of independent
    # launches (docs/statistics.md), which one disturbed launch cannot pull
    each = [sum(b[1:]) / len(b[1:]) if len(b) > 1 else None for b in blocks]
    each = [m if m is not None and m > 0 else None for m in each]
    out = {"method": "mean over the outer repetitions of (test - reference) per inner "
                     "repetition, the first repetition of every launch dropped",
           "n": len(rest), "mean_us": None, "sd_us": None, "mean_cycles": None,
           "outliers": 0, "reliable": False, "launch_means_us": each,
           "launch_median_us": statistics.median(each)
           if each and all(m is not None for m in each) else None}
    if not rest:
        out["why"] = "fewer than 2 repetitions"
        return out
    mean, sd = _mean_sd(rest)
    out["sd_us"] = sd if len(rest) > 1 else None
    out["outliers"] = sum(1 for v in rest if sd > 0 and abs(v - mean) > 3 * sd)
    if mean > 0:
        out.update(mean_us=mean, mean_cycles=mean * hz * 1e-6, reliable=True)
    else:
        out["why"] = "the mean of the per-pair overheads is at or below zero: not a cost"
    return out


def page_blocks(part: dict) -> list[list[float]] | None:
    """The per-pair overheads of one launch of a paged test (LOCK/UNLOCK,
    whose lock the tool takes from several pages of its own in turn:
    ``pair_pages``), grouped by page in page order; None for a test that
    is not paged."""
    pages = part.get("pair_pages")
    if not pages:
        return None
    groups: dict[int, list[float]] = {}
    for v, page in zip(part["overheads_us"], pages):
        groups.setdefault(int(page), []).append(v)
    return [groups[k] for k in sorted(groups)]


def _merge_test(parts: list[dict], hz: float, timer_us: float) -> dict:
    """One test measured in several launches (``parts``: the tool's result
    of that test in each launch, in order), as one result: the samples of
    every launch pooled in launch order, the figure from the launches as
    independent blocks, EPCC's figure, the resolution and whether the
    figure can be given, by the tool's rules (sync_stats.h); each launch's
    own figure, stop reason and inner repetitions beside them.

    A paged test (LOCK/UNLOCK: its lock on several pages of its own, taken
    in turn) has one independent block per page of every launch -- each a
    placement of the lock in physical memory, new in every process -- so
    its figure is the median of the pages' medians over all launches
    (``page_medians_us``, launch by launch), a launch's own figure the
    median of its pages' medians."""
    first = parts[0]
    has_ref = first.get("reference") is not None
    blocks = [list(p["overheads_us"]) for p in parts]
    paged = [page_blocks(p) for p in parts]
    if not all(paged):
        paged = None
    values = [v for b in blocks for v in b]
    out = {k: first[k] for k in ("group", "name", "label", "chunk", "reference")
           if k in first}
    refs = [v for p in parts for v in p.get("reference_times_us", [])] if has_ref else []
    out["reference_us"] = stats.summarize(refs)["median"] if has_ref else 0.0
    out["innerreps"] = min(p["innerreps"] for p in parts)
    if has_ref:
        out["reference_innerreps"] = min(p["reference_innerreps"] for p in parts)
    out["launch_innerreps"] = [p["innerreps"] for p in parts]
    out["reps"] = len(values)
    out["times_us"] = [v for p in parts for v in p["times_us"]]
    if has_ref:
        out["reference_times_us"] = refs
    out["overheads_us"] = values
    st = _epcc_stats(values, [g for pb in paged for g in pb] if paged else blocks, hz)
    out["stats"] = st
    ms = st["median_stats"]
    if paged:
        pm = [[stats.summarize(g)["median"] for g in pb] for pb in paged]
        out["lock_pages"] = first.get("lock_pages")
        out["pair_pages"] = [int(x) for p in parts for x in p["pair_pages"]]
        out["launch_page_medians_us"] = pm
        out["page_medians_us"] = ms["block_medians"]
        out["launch_medians_us"] = [statistics.median(m) for m in pm]
        agree = stats.launch_agreement(out["launch_medians_us"])
        out["launch_spread"] = agree.get("spread")
    else:
        out["launch_medians_us"] = ms["block_medians"]
        out["launch_spread"] = ms["block_spread"]
    if ms.get("why"):
        out["noisy_why"] = ms["why"]
    what = "overhead (test minus reference, per pair)" if has_ref else "time"
    med, lo = ms.get("median"), ms.get("ci_low")
    ok, why, below_res = True, None, False
    if med is None:
        ok, why = False, "no finite samples"
    elif med <= 0:
        ok, why = False, f"below noise: the median {what} is at or below zero"
    elif lo is not None and lo <= 0:
        ok, why = False, (f"below noise: the 95 % CI of the median {what} includes zero (its "
                          f"upper end: {ms['ci_high']:.4g} us)")
    if has_ref:
        out["epcc"] = _epcc_figure(blocks, hz)
        # the timer floor of the launch with the fewest inner repetitions
        res = stats.resolution(refs, 2.0 * timer_us / out["innerreps"])
        out["resolution_us"] = res
        if ok and stats.below_resolution(med, res):
            ok, below_res = False, True
            why = (f"below resolution: the median overhead {med:.4g} us is smaller than "
                   f"{res:.4g} us, twice the spread (interquartile range) of the reference "
                   "loop timed beside it")
    out["reliable"] = ok
    if not ok:
        out["why"] = why
        out["below_resolution"] = below_res
    stops = [p.get("stopped") for p in parts]
    out["stopped"] = next((x for x in stops if x != "converged"), stops[0])
    out["launch_stopped"] = stops
    out["launch_reps"] = [len(b) for b in blocks]
    out["launch_seconds"] = [p.get("seconds", 0.0) for p in parts]
    out["seconds"] = sum(p.get("seconds", 0.0) for p in parts)
    out["blocks"] = sum(p.get("blocks", 0) for p in parts)
    return out


def _merge_reference(parts: list[dict], hz: float) -> dict:
    """A reference loop timed in several launches, pooled (EPCC statistics
    of all its repetitions; the launches' inner repetitions beside)."""
    times = [v for p in parts for v in p["times_us"]]
    return {"name": parts[0]["name"], "innerreps": min(p["innerreps"] for p in parts),
            "launch_innerreps": [p["innerreps"] for p in parts], "times_us": times,
            "stats": _epcc_stats(times, [p["times_us"] for p in parts], hz)}


def _takes_delay_length() -> bool:
    """Whether the native tool takes ``--delay-length`` (a tool built before
    it calibrates the delay in every launch)."""
    import subprocess

    try:
        proc = subprocess.run([str(native.tool_path(TOOL)), "--help"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--delay-length" in proc.stdout


def pu_link_note(run: dict) -> str | None:
    """One line when the host placed the run's first two PUs differently
    during it: the cache-line round trips between them (``pu_link`` of each
    launch, at its start and end; ``launch_pu_link_ns`` of merged launches)
    differ by more than :data:`tiers.noise.PAIR_MOVED`; None otherwise (or
    when they were not measured)."""
    from ..noise import PAIR_MOVED

    per = run.get("launch_pu_link_ns")
    if per is None:
        link = run.get("pu_link") or {}
        per = [link.get("rtt_ns")]
    values = [x for launch in per if launch for x in launch if x and x > 0]
    if not values or max(values) <= PAIR_MOVED * min(values):
        return None
    pus = run.get("pus") or [0, 1]
    shown = ", ".join("/".join(f"{x:.0f}" for x in launch) if launch else "-" for launch in per)
    where = "per launch, at its start and end" if len(per) > 1 else "at its start and end"
    return (f"PUs {pus[0]} and {pus[1]} moved during the run: a cache line's round trip "
            f"between them ({where}) was {shown} ns (on a virtual machine, the host placing "
            "its CPUs elsewhere), and figures between the PUs move with it")


#: A placement class holds at least this many pairs, and this share of the
#: figure's pairs, before it gets a figure of its own.
PLACEMENT_MIN_PAIRS = 10
PLACEMENT_MIN_SHARE = 0.2


def by_placement(parts: list[dict], links: list[list[float] | None]) -> tuple[list[dict], int]:
    """The figure of one test per placement of the team's first two PUs:
    ``parts`` the test's result in each launch (its ``overheads_us`` and
    ``pair_rounds``), ``links`` each launch's round trips before every round
    of turns and after the last (``pu_link.round_rtt_ns``).  A pair belongs
    to a placement when the round trips before and after its round fall in
    the same class (:func:`tiers.noise.placement_classes` over every launch's round
    trips); the others are mixed.  Return (one entry per class with at
    least :data:`PLACEMENT_MIN_PAIRS` pairs and
    :data:`PLACEMENT_MIN_SHARE` of all: ``rtt_ns`` (the class's median
    round trip), ``rtt_range_ns``, ``pairs``, and :func:`tiers.stats.
    summarize`'s ``median``, ``ci_low``, ``ci_high``, ``noisy`` of its pairs'
    values -- nearest placement first --, the mixed pairs' count)."""
    classes = placement_classes([x for rt in links if rt for x in rt])
    if not classes:
        return [], 0
    groups: list[list[float]] = [[] for _ in classes]
    rtts: list[list[float]] = [[] for _ in classes]
    mixed = total = 0
    for part, rt in zip(parts, links):
        rounds = part.get("pair_rounds")
        if not rt or not rounds or len(rounds) != len(part["overheads_us"]):
            continue
        for v, r in zip(part["overheads_us"], rounds):
            total += 1
            if r + 1 >= len(rt):
                mixed += 1
                continue
            a, b = class_of(rt[r], classes), class_of(rt[r + 1], classes)
            if a is None or a != b:
                mixed += 1
                continue
            groups[a].append(v)
            rtts[a].extend((rt[r], rt[r + 1]))
    out = []
    for k, g in enumerate(groups):
        if len(g) < PLACEMENT_MIN_PAIRS or len(g) < PLACEMENT_MIN_SHARE * max(total, 1):
            continue
        st = stats.summarize(g)
        out.append({"rtt_ns": statistics.median(rtts[k]),
                    "rtt_range_ns": [min(rtts[k]), max(rtts[k])], "pairs": len(g),
                    "median_us": st["median"], "ci95_us": [st["ci_low"], st["ci_high"]],
                    "noisy": st["noisy"]})
    return out, mixed


def _split_by_placement(test: dict, k: int, launches: list[dict]) -> None:
    """Store on ``test`` (the ``k``-th test of a run) its figures per
    placement (:func:`by_placement`) from that run in each launch
    (``launches``, each with its ``tests`` and ``pu_link``), when there are
    any."""
    places, mixed = by_placement([r["tests"][k] for r in launches],
                                 [(r.get("pu_link") or {}).get("round_rtt_ns")
                                  for r in launches])
    if places:
        test["by_placement"] = places
        test["placement_mixed_pairs"] = mixed


def merge_launches(raws: list[dict]) -> dict:
    """Return one tool output from the outputs of separate launches of the
    same measurement (``raws``, in launch order; one launch is returned as
    it is, unless a test is paged, below).  Per thread count and test, the launches are independent
    blocks: the samples are pooled, the figure (``stats.median_stats``) is
    the median of the launches' medians with an interval that covers every
    launch's median (:func:`tiers.stats.summarize_blocks`), noisy when they
    disagree by more than +-5 %; EPCC's statistics and figure, the
    resolution and the reliability are computed from the pooled pairs by
    the tool's rules.  ``params`` are the first launch's with ``launches``;
    ``delay_check`` runs from the first launch's start to the last one's
    end; a team's ``pu_delay_spread`` is the largest of the launches'.
    A paged test (LOCK/UNLOCK) has one block per page of every launch
    (:func:`_merge_test`), so one launch of a run with such a test is
    merged too: its figure is the median of its pages' medians."""
    if len(raws) == 1 and not any(page_blocks(t) for run in raws[0]["runs"]
                                  for t in run["tests"]):
        for run in raws[0]["runs"]:
            for k, t in enumerate(run["tests"]):
                _split_by_placement(t, k, [run])
        return raws[0]
    first = raws[0]
    p = first["params"]
    hz, timer = p["cycles_per_second"], p["timer_us"]
    runs = []
    for i, run in enumerate(first["runs"]):
        per = [r["runs"][i] for r in raws]
        spreads = [r.get("pu_delay_spread") for r in per
                   if isinstance(r.get("pu_delay_spread"), (int, float))]
        worst = max(range(len(per)), key=lambda k: per[k].get("pu_delay_spread") or 0.0)
        merged = {
            "threads": run["threads"], "pus": run["pus"],
            "pu_delay_us": per[worst].get("pu_delay_us"),
            "pu_delay_spread": max(spreads) if spreads else None,
            "launch_pu_delay_spread": [r.get("pu_delay_spread") for r in per],
            "launch_pu_link_ns": [(r.get("pu_link") or {}).get("rtt_ns") for r in per],
            "references": [_merge_reference([r["references"][k] for r in per], hz)
                           for k in range(len(run["references"]))],
            "tests": [_merge_test([r["tests"][k] for r in per], hz, timer)
                      for k in range(len(run["tests"]))]}
        for k, t in enumerate(merged["tests"]):
            _split_by_placement(t, k, per)
        note = pu_link_note(merged)
        if note:
            # launches that disagree: the placement says why
            for t in merged["tests"]:
                if t.get("noisy_why"):
                    t["noisy_why"] += f"; {note}"
        runs.append(merged)
    start = (first.get("delay_check") or {}).get("start_us")
    end = (raws[-1].get("delay_check") or {}).get("end_us")
    out = {k: v for k, v in first.items() if k not in ("runs", "delay_check")}
    out["params"] = dict(p, launches=len(raws),
                         launch_delay_measured_us=[r["params"]["delay_measured_us"]
                                                   for r in raws],
                         launch_delay_length=[r["params"]["delay_length"] for r in raws])
    out["runs"] = runs
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and start > 0:
        out["delay_check"] = {"start_us": start, "end_us": end, "drift": (end - start) / start,
                              "launch_drifts": [(r.get("delay_check") or {}).get("drift")
                                                for r in raws]}
    return out


def measure(*, threads=None, tests=None, reps=None, test_time=None, delay_time=None,
            chunks=None, pin=None, iters_per_thread=None, quick: bool = False,
            figure_time=None, max_reps=None, launches: int | None = None,
            argv: list[str] | None = None,
            progress: Callable[[int, int], None] | None = None) -> dict:
    """Run the synchronisation probe and return its ``tiers.probe.sync/1``
    result document.

    ``threads`` (e.g. ``[2, 4]`` or ``"2-8"``; default 2 to all PUs; never
    more than the PUs, since every thread is pinned), ``tests`` (groups
    ``sync``, ``sched``, ``barriers`` or single test names) and ``chunks``
    (schedule chunk sizes, default 1,2,4,...,128) are lists or
    comma-separated text; ``reps`` outer repetitions (default 20);
    ``test_time`` and ``delay_time`` in microseconds (defaults 1000 and
    0.1); ``pin`` is ``"compact"`` or ``"scatter"``; ``iters_per_thread``
    the delays per thread of a schedule test (default 128); ``quick`` uses
    15 repetitions, 200 us tests, chunks 1, 8, 64 and 0.2 s per figure unless
    given.  Every figure repeats until the 95 % CI of its median is within
    +-5 %, ``figure_time`` seconds pass (default 1) or ``max_reps``
    repetitions (default 2000) were taken; ``reps`` is the least count.
    ``progress(done, total)`` is called after each test.

    ``launches`` (default :data:`LAUNCHES`): the tool runs this many times,
    one launch after the other, and each figure is the median of the
    launches' medians, noisy when they disagree by more than +-5 %
    (:func:`merge_launches`); the launches share the time per figure, the
    least and the most repetitions (each at least 6, so that its own
    interval is defined), and the later ones time the delay() length that
    the first one calibrated.

    The document's ``params`` are the tool's parameters (with the measured
    delay and the cycles per second used), ``samples`` its runs (one per
    thread count, with every test's raw per-repetition times and overheads
    and their statistics), ``summary`` what :func:`summarise` returns.
    Raise TiersError (one line) on bad input."""
    if launches is None:
        launches = LAUNCHES
    if isinstance(launches, bool) or not isinstance(launches, int) or launches < 1:
        raise TiersError(f"--launches must be a positive integer, not {launches!r}")
    if launches == 1:
        raws = [_run_tool(native_args(
            threads=threads, tests=tests, reps=reps, test_time=test_time,
            delay_time=delay_time, chunks=chunks, pin=pin, iters_per_thread=iters_per_thread,
            quick=quick, figure_time=figure_time, max_reps=max_reps), progress)]
    else:
        # the launches share the figure's time and repetitions, so that a
        # run takes about as long as one launch with the whole of them
        total_reps = _DEFAULT_REPS[bool(quick)] if reps is None else int(reps)
        total_time = _DEFAULT_FIGURE_TIME[bool(quick)] if figure_time is None \
            else float(figure_time)
        each_reps = max(6, -(-total_reps // launches))
        cap = _DEFAULT_MAX_REPS if max_reps is None else int(max_reps)
        each_max = max(each_reps, -(-cap // launches))
        raws = []
        for k in range(launches):
            args = native_args(threads=threads, tests=tests, reps=each_reps,
                               test_time=test_time, delay_time=delay_time, chunks=chunks,
                               pin=pin, iters_per_thread=iters_per_thread, quick=quick,
                               figure_time=total_time / launches,
                               max_reps=each_max)
            if raws and _takes_delay_length():
                args += ["--delay-length", str(raws[0]["params"]["delay_length"])]
            step = None
            if progress is not None:
                step = (lambda k: lambda d, t: progress(k * t + d, launches * t))(k)
            raws.append(_run_tool(args, step))
    raw = merge_launches(raws)
    if launches > 1:
        raw["params"].update(reps=total_reps, figure_time_s=total_time,
                             launch_reps=each_reps, launch_figure_time_s=total_time / launches,
                             max_reps=each_max * launches)
    summary = summarise(raw)
    noisy = sum(1 for r in summary["rows"] if r.get("noisy") and r.get("reliable", True))
    below = sum(1 for r in summary["rows"] if r.get("reliable") is False)
    warnings = []
    for run in raw["runs"]:
        sp = run.get("pu_delay_spread")
        if isinstance(sp, (int, float)) and sp > PU_SPREAD:
            warnings.append(f"probe sync: at {run['threads']} threads the PUs ran delay() "
                            f"{sp * 100:.0f} % apart (timed at once on each: "
                            + ", ".join(f"{x:.4f}" for x in run.get("pu_delay_us", []))
                            + " µs); every overhead at that count holds the difference and "
                            "is marked noisy")
        note = pu_link_note(run)
        if note:
            warnings.append(f"probe sync: at {run['threads']} threads {note}; this run's "
                            "figures may differ from another run's for that reason alone")
    drift = (raw.get("delay_check") or {}).get("drift")
    if isinstance(drift, (int, float)) and abs(drift) > DELAY_DRIFT:
        summary["delay_drift"] = drift
        warnings.append(f"probe sync: delay() took {drift * 100:+.1f} % as long after the tests "
                        "as before them: the machine's speed changed during the run, so its "
                        "overheads are not comparable with another run's")
    if noisy:
        split = sum(1 for r in summary["rows"]
                    if "disagree" in (r.get("noisy_why") or "") and r.get("reliable", True))
        warnings.append(f"probe sync: {noisy} of {len(summary['rows'])} figures are noisy "
                        "(95 % CI of the median wider than +-5 % when the time per figure "
                        "ran out" + (f"; in {split} of them the launches' medians disagree"
                                     if split else "") + ")")
    if below:
        warnings.append(f"probe sync: {below} of {len(summary['rows'])} overheads are below "
                        "the timing noise or the resolution and given as 'below noise' or "
                        "'< X (below resolution)' (see each row's why)")
    extra = {"warnings": warnings} if warnings else {}
    params = dict(raw["params"])
    if "delay_check" in raw:
        params["delay_check"] = raw["delay_check"]
    return result.new_document("probe.sync", params=params, samples=raw["runs"],
                               summary=summary, argv=argv, native=raw.get("native", {}),
                               **extra)


def _half(row: dict) -> float | None:
    """The larger side of the 95 % CI of the row's median, in us."""
    ci, v = row.get("median_ci95_us"), row.get("value_us")
    if not ci or v is None or ci[0] is None or ci[1] is None:
        return None
    return max(v - ci[0], ci[1] - v)


def _cell(row: dict | None) -> str:
    """The median (+- the larger side of its 95 % CI) in us, then in cycles;
    "below noise" for a row that cannot be given as a cost."""
    if row is None:
        return "-"
    if "value_us" not in row:  # a document of an older tiers: its EPCC mean
        mean, ci = row.get("mean_us"), row.get("ci95_us")
        if mean is None or mean <= 0 or not ci:
            return stats.mark("below noise", True)
        return stats.mark(f"{mean:.3f} ±{(ci[1] - ci[0]) / 2:.3f} µs", row.get("noisy")) + \
            f"\n{row['mean_cycles']:,.0f} cy"
    if row.get("below_resolution_us") is not None:
        # smaller than the pairs can resolve: an upper bound, not a number
        return stats.mark(f"< {row['below_resolution_us']:.3f} µs (below resolution)", True)
    if row.get("reliable") is False or row.get("value_us") is None:
        # a difference of two loops at or below the noise: no cost to print
        return stats.mark("below noise", True)
    half = _half(row)
    ci = f" ±{half:.3f}" if half is not None else ""
    text = stats.mark(f"{row['value_us']:.3f}{ci} µs", row.get("noisy"))
    if row.get("value_cycles") is not None:
        text += f"\n{row['value_cycles']:,.0f} cy"
    if row.get("epcc_mean_us") is not None:
        # EPCC's own figure beside the median: what its suite would print,
        # marked when the row is noisy or the mean itself is disturbed
        text += "\n" + stats.mark(f"EPCC mean {row['epcc_mean_us']:.3f}",
                                  row.get("noisy") or row.get("epcc_noisy"))
    return text


def _render_legacy_header(p: dict, console: Console) -> None:
    """The parameters line of a document of an older tiers (EPCC means)."""
    console.print(f"delay() = {p['delay_length']} iterations = {p['delay_measured_us']:.4f} µs "
                  f"(asked {p['delay_time_us']:g} µs); {p['reps']} repetitions of about "
                  f"{p['test_time_us']:g} µs; outliers beyond {p['outlier_sigma']:g} σ dropped; "
                  f"{p['cycles_per_second'] / 1e9:.3f} GHz for cycles; threads pinned "
                  f"{p['pin']}.")
    console.print("Cells: mean ± half the 95% confidence interval in µs, and the mean in CPU "
                  "cycles.")


def _render_legacy_headline(head: dict, console: Console) -> None:
    """The headline of a document of an older tiers: mean and median."""
    parts = [f"{v['label']} {v['mean_us']:.3f} µs ({v['mean_cycles']:,.0f} cycles), median "
             f"{v['median_us']:.3f} µs ({v['median_cycles']:,.0f} cycles)"
             + (" (noisy)" if v.get("noisy") else "")
             for k, v in head.items() if k != "threads" and v.get("mean_us") is not None]
    if parts:
        console.print(f"At {plural(head['threads'], 'thread')}, mean and median: "
                      + "; ".join(parts) + ".")


def _placement_value(b: dict, res: float | None) -> tuple[float | None, str]:
    """A placement's figure (an entry of ``by_placement``) by the row's own
    rules, with ``res`` the row's resolution: (the median as a cost, or None,
    and what to print): "below noise" where the median is at or below zero
    or its interval reaches zero, "< res (below resolution)" where it is
    smaller than the resolution, else the median."""
    med, ci = b.get("median_us"), b.get("ci95_us") or [None, None]
    if not (isinstance(med, (int, float)) and med > 0 and
            (not isinstance(ci[0], (int, float)) or ci[0] > 0)):
        return None, "below noise"
    if stats.below_resolution(med, res):
        return None, f"< {res:.3f} µs (below resolution)"
    return med, f"{med:.3f} µs"


def _index(rows: list[dict]) -> dict:
    return {(r["group"], r["name"], r.get("chunk"), r["threads"]): r for r in rows}


def render(doc: dict, console: Console) -> None:
    """Print a document: its parameters, the EPCC overheads (constructs x
    thread counts), the schedule overheads (schedule and chunk x thread
    counts), the barrier comparison (spin / pthread / condvar, with the
    ratios to the spin barrier), each as the median ± its 95 % interval in
    microseconds and in CPU cycles ("below noise" where an overhead cannot
    be told from the timing noise, with why), then the headline figures."""
    p, summary = doc["params"], doc["summary"]
    rows, threads = summary["rows"], summary["threads"]
    index = _index(rows)
    if rows and not any("value_us" in r for r in rows):
        _render_legacy_header(p, console)
    else:
        console.print(f"delay() = {p['delay_length']} iterations = "
                      f"{p['delay_measured_us']:.4f} µs (asked {p['delay_time_us']:g} µs); "
                      f"repetitions of about {p['test_time_us']:g} µs, at least {p['reps']}"
                      + (f", until the 95 % CI of the median is within ±5 % or "
                         f"{p['figure_time_s']:g} s per figure pass"
                         if "figure_time_s" in p else "")
                      + f"; {p['cycles_per_second'] / 1e9:.3f} GHz for cycles; threads pinned "
                      f"{p['pin']}.")
        console.print("Cells: the median ± its 95 % confidence interval in µs, and in CPU "
                      "cycles; an overhead is the median of (test - reference) over pairs timed "
                      "side by side"
                      + (f"; each figure is the median of {p['launches']} separate launches' "
                         "medians, noisy when they disagree by more than ±5 %"
                         if p.get("launches", 1) > 1 else "") + ".")

    def table(title: str, first: str) -> Table:
        t = Table(title=title, title_justify="left")
        t.add_column(first)
        for n in threads:
            t.add_column(f"{n} thread{'s' if n != 1 else ''}", justify="right")
        return t

    seen = lambda group, name, chunk=None: any(  # noqa: E731
        (group, name, chunk, n) in index for n in threads)
    sync_names = [n for n in GROUPS["sync"] if seen("sync", n)]
    if sync_names:
        t = table("EPCC overhead per construct", "Construct")
        for name in sync_names:
            label = next(r["label"] for r in rows if r["group"] == "sync" and r["name"] == name)
            t.add_row(label, *[_cell(index.get(("sync", name, None, n))) for n in threads])
        console.print(t)

    sched_rows = [r for r in rows if r["group"] == "sched"]
    if sched_rows:
        t = table(f"Schedule overhead per loop ({p['iters_per_thread']} delays/thread)",
                  "Schedule")
        keys = list(dict.fromkeys((r["name"], r["label"], r["chunk"]) for r in sched_rows))
        for name, label, chunk in keys:
            t.add_row(f"{label} {chunk}",
                      *[_cell(index.get(("sched", name, chunk, n))) for n in threads])
        console.print(t)

    bar_names = [n for n in GROUPS["barriers"] if seen("barriers", n)]
    if bar_names:
        t = table("Barrier time per episode (×: times the spin barrier)", "Barrier")
        for name in bar_names:
            label = next(r["label"] for r in rows
                         if r["group"] == "barriers" and r["name"] == name)
            cells = []
            for n in threads:
                row = index.get(("barriers", name, None, n))
                spin = index.get(("barriers", "spin", None, n))
                text = _cell(row)
                if row is not None and spin is not None and name != "spin" and \
                        row.get("value_us", row.get("mean_us")) and \
                        spin.get("value_us", spin.get("mean_us")):
                    a = row.get("value_us", row.get("mean_us"))
                    text += f"\n×{a / spin.get('value_us', spin.get('mean_us')):,.1f} spin"
                cells.append(text)
            t.add_row(label, *cells)
        console.print(t)

    # figures given as a cost (not below noise or resolution) split by
    # placement; a placement's own median at or below zero, or whose
    # interval reaches zero, is below noise there
    moved = [r for r in rows if len(r.get("by_placement") or []) > 1 and
             r.get("reliable", True) is not False and r.get("value_us") is not None]
    if moved:
        pus = next((run.get("pus") for run in doc.get("samples") or [] if run.get("pu_link")),
                   None) or [0, 1]
        t = Table(title=f"Per placement of PUs {pus[0]} and {pus[1]}: they moved during the run "
                  "(a cache line's round trip between them, measured before every round of "
                  "turns; on a virtual machine the host places its CPUs); each figure from the "
                  "pairs of one placement", title_justify="left")
        t.add_column("Figure")
        t.add_column("threads", justify="right")
        width = max(len(r["by_placement"]) for r in moved)
        for k in range(width):
            t.add_column("nearest" if k == 0 else ("farthest" if k == width - 1 else "next"),
                         justify="right")
        t.add_column("mixed pairs", justify="right")
        for r in moved:
            cells = []
            for b in r["by_placement"]:
                value, text = ((None, b["why"]) if b.get("reliable") is False and b.get("why")
                               else _placement_value(b, r.get("resolution_us")))
                cells.append(stats.mark(text, value is None or b.get("noisy")) +
                             f"\n{b['rtt_ns']:.0f} ns, {b['pairs']} pairs")
            cells += [""] * (width - len(cells))
            label = r["label"] + (f" {r['chunk']}" if "chunk" in r else "")
            t.add_row(label, str(r["threads"]), *cells, str(r.get("placement_mixed_pairs", 0)))
        console.print(t)
    if any(r.get("noisy") for r in rows):
        console.print(stats.LEGEND)
    if any(r.get("epcc_noisy") and r.get("epcc_mean_us") is not None for r in rows):
        console.print(EPCC_LEGEND, markup=False)
    uneven = {r["threads"]: r["pu_delay_spread"] for r in rows if r.get("pu_delay_spread")}
    for n, sp in sorted(uneven.items()):
        console.print(f"uneven PUs: at {plural(n, 'thread')} the PUs ran delay() {sp * 100:.0f} % "
                      "apart, so the overheads there hold the difference (marked ~)",
                      markup=False)
    if summary.get("delay_drift") is not None:
        console.print(f"delay() took {summary['delay_drift'] * 100:+.1f} % as long after the "
                      "tests as before: the machine's speed changed during the run",
                      markup=False)
    for r in rows:
        pm = [v for v in r.get("page_medians_us") or [] if isinstance(v, (int, float))]
        if pm and r.get("value_us") is not None:
            # LOCK/UNLOCK: the figure is the median over the lock's pages
            console.print(f"{r['label']} at {plural(r['threads'], 'thread')}: the median of "
                          f"{len(pm)} lock placements' medians ({r.get('lock_pages')} pages per "
                          f"launch), which lie from {min(pm):.3f} to {max(pm):.3f} µs",
                          markup=False)
    for r in rows:
        if r.get("reliable") is False:
            chunk = f" {r['chunk']}" if "chunk" in r else ""
            what = "below resolution" if r.get("below_resolution_us") is not None \
                else "below noise"
            console.print(f"{what}: {r['label']}{chunk} at {plural(r['threads'], 'thread')}"
                          f": {r.get('why') or 'not a cost'}", markup=False)

    head = summary["headline"]
    if rows and not any("value_us" in r for r in rows):
        _render_legacy_headline(head, console)
        return
    parts = []
    for k, v in head.items():
        if k == "threads":
            continue
        if v.get("below_resolution_us") is not None:
            parts.append(f"{v['label']} < {v['below_resolution_us']:.3f} µs (below resolution)")
            continue
        if v.get("value_us") is None:
            parts.append(f"{v['label']} below noise")
            continue
        parts.append(f"{v['label']} {v['value_us']:.3f} µs ({v['value_cycles']:,.0f} cycles)"
                     + (" (noisy)" if v.get("noisy") else ""))
    if parts:
        console.print(f"At {plural(head['threads'], 'thread')}, median: " + "; ".join(parts)
                      + ".")


def _secondary_cycles(ax, hz: float) -> None:
    """Add a right-hand axis in CPU cycles to an axis in microseconds."""
    scale = hz * 1e-6
    sec = ax.secondary_yaxis("right", functions=(lambda us: us * scale, lambda cy: cy / scale))
    sec.set_ylabel("CPU cycles")


def _circle_noisy(ax, x, y, pts: list[dict]) -> None:
    """Circle in red the points of noisy rows that are drawn."""
    hits = [(a, b) for a, b, r in zip(x, y, pts) if r.get("noisy") and b == b]
    if hits:
        ax.scatter([h[0] for h in hits], [h[1] for h in hits], s=60, facecolors="none",
                   edgecolors="red", zorder=3)


def _points(pts: list[dict]) -> tuple[list[float], list[list[float]]]:
    """The medians of rows (NaN where below the noise, so nothing is drawn)
    and their error bars from the 95 % CI of the median."""
    nan = float("nan")
    legacy = lambda r: "value_us" not in r  # noqa: E731 -- older documents: the mean
    val = lambda r: r.get("mean_us") if legacy(r) else r.get("value_us")  # noqa: E731
    y = [nan if val(r) is None or val(r) <= 0 else val(r) for r in pts]
    lo, hi = [], []
    for r, v in zip(pts, y):
        ci = r.get("ci95_us") if legacy(r) else r.get("median_ci95_us")
        ok = ci and ci[0] is not None and ci[1] is not None and v == v
        lo.append(max(0.0, v - ci[0]) if ok else 0.0)
        hi.append(max(0.0, ci[1] - v) if ok else 0.0)
    return y, [lo, hi]


def plot(doc: dict, path) -> Path:
    """Draw overhead against threads per construct, schedule overhead against
    chunk size (one line per schedule and thread count) and barrier time
    against threads (spin, pthread, condvar), each the median with its 95 %
    interval, in microseconds with a cycles axis (a figure below the noise
    is left out, never drawn at or below zero; noisy ones are circled);
    save as PNG at ``path``; return the path."""
    summary = doc["summary"]
    rows, hz = summary["rows"], summary["cycles_per_second"]
    panels = [g for g in ("sync", "sched", "barriers") if any(r["group"] == g for r in rows)]
    fig, axes = tplot.figure(ncols=max(1, len(panels)))
    if not panels:
        axes[0][0].text(0.5, 0.5, "no results", ha="center", va="center")
    for ax, group in zip(axes[0], panels):
        grows = [r for r in rows if r["group"] == group]
        if group == "sched":
            series = dict.fromkeys((r["label"], r["threads"]) for r in grows)
            for i, (label, n) in enumerate(series):
                pts = sorted((r for r in grows if r["label"] == label and r["threads"] == n),
                             key=lambda r: r["chunk"])
                x = [r["chunk"] for r in pts]
                y, err = _points(pts)
                ax.errorbar(x, y, yerr=err, marker="o", markersize=3, capsize=2,
                            label=f"{label}, {n} thr")
                _circle_noisy(ax, x, y, pts)
            ax.set_xscale("log", base=2)
            chunks = sorted({r["chunk"] for r in grows})
            ax.set_xticks(chunks)
            ax.set_xticklabels([str(c) for c in chunks])
            ax.set_xlabel("chunk size")
            ax.set_title("loop scheduling overhead")
        elif len(summary["threads"]) == 1:
            # One thread count: a bar per construct or barrier.
            pts = grows
            x = list(range(len(pts)))
            y, err = _points(pts)
            ax.bar(x, y, yerr=err, capsize=3,
                   color=[f"C{i}" for i in x], label=f"{pts[0]['threads']} threads")
            _circle_noisy(ax, x, y, pts)
            ax.set_xticks(x)
            ax.set_xticklabels([r["label"] + ("\n(below resolution)"
                                               if r.get("below_resolution_us") is not None
                                               else "\n(below noise)" if r.get("value_us") is None
                                               else "") for r in pts],
                               rotation=35, ha="right", fontsize=8)
            if group == "barriers" and all(r.get("value_us") for r in pts):
                ax.set_yscale("log")
            ax.set_title(("barrier time per episode" if group == "barriers"
                          else "EPCC overhead per construct") + f", {pts[0]['threads']} threads")
        else:
            for label in dict.fromkeys(r["label"] for r in grows):
                pts = sorted((r for r in grows if r["label"] == label), key=lambda r: r["threads"])
                x = [r["threads"] for r in pts]
                y, err = _points(pts)
                ax.errorbar(x, y, yerr=err, marker="o", markersize=3, capsize=2, label=label)
                _circle_noisy(ax, x, y, pts)
            ax.set_xlabel("threads")
            ax.set_xticks(summary["threads"])
            if group == "barriers":
                if all(r.get("value_us") for r in grows):
                    ax.set_yscale("log")
                ax.set_title("barrier time per episode")
            else:
                ax.set_title("EPCC overhead per construct")
        ax.set_ylabel("µs")
        ax.grid(True, alpha=0.3)
        if len(summary["threads"]) > 1 or group == "sched":
            ax.legend(fontsize=7)
        if hz:
            _secondary_cycles(ax, hz)
    return tplot.save(fig, path)


def main(args, argv: list[str]) -> int:
    """``tiers probe sync``: measure, print the tables, and write the
    document (--json) and the plot (--plot, or next to --json); return the
    exit status (0)."""
    from ..render import console as tiers_console
    console = tiers_console()
    from .. import noise
    noise_block = noise.begin(console, bool(args.quick))  # first: is the machine quiet?
    options = dict(threads=args.threads, tests=args.tests, reps=args.reps,
                   test_time=args.test_time, delay_time=args.delay_time, chunks=args.chunks,
                   pin=args.pin, quick=args.quick,
                   figure_time=getattr(args, "figure_time", None),
                   launches=getattr(args, "launches", None), argv=argv)
    with tool_progress("tests") as progress:
        doc = measure(progress=progress, **options)
    noise.attach(doc, noise_block)
    render(doc, console)
    tplot.write_outputs(doc, args.json, getattr(args, "plot", None), plot, console)
    return 0
