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
the figure the EPCC suite itself prints.
The EPCC statistics (mean, 3-sigma filter, t interval of the mean) stay
beside the median in the document, in microseconds and in CPU cycles.  This module wraps the tool's output into a ``tiers.probe.sync/1``
document (docs/schemas/probe-sync.md), prints tables and draws the plots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table

from .. import native, plot as tplot, result, stats
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
            "median_ci95_us", "epcc_mean_us", "epcc_sd_us", "epcc_mean_cycles")


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
    return {"epcc_mean_us": mean if ok else None, "epcc_sd_us": e.get("sd_us"),
            "epcc_mean_cycles": e.get("mean_cycles") if ok else None, "epcc_n": e.get("n"),
            "epcc_outliers": e.get("outliers")}


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


def measure(*, threads=None, tests=None, reps=None, test_time=None, delay_time=None,
            chunks=None, pin=None, iters_per_thread=None, quick: bool = False,
            figure_time=None, max_reps=None, argv: list[str] | None = None,
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

    The document's ``params`` are the tool's parameters (with the measured
    delay and the cycles per second used), ``samples`` its runs (one per
    thread count, with every test's raw per-repetition times and overheads
    and their statistics), ``summary`` what :func:`summarise` returns.
    Raise TiersError (one line) on bad input."""
    args = native_args(threads=threads, tests=tests, reps=reps, test_time=test_time,
                       delay_time=delay_time, chunks=chunks, pin=pin,
                       iters_per_thread=iters_per_thread, quick=quick,
                       figure_time=figure_time, max_reps=max_reps)
    raw = _run_tool(args, progress)
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
    drift = (raw.get("delay_check") or {}).get("drift")
    if isinstance(drift, (int, float)) and abs(drift) > DELAY_DRIFT:
        summary["delay_drift"] = drift
        warnings.append(f"probe sync: delay() took {drift * 100:+.1f} % as long after the tests "
                        "as before them: the machine's speed changed during the run, so its "
                        "overheads are not comparable with another run's")
    if noisy:
        warnings.append(f"probe sync: {noisy} of {len(summary['rows'])} figures are noisy "
                        "(95 % CI of the median wider than +-5 % when the time per figure "
                        "ran out)")
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
        # EPCC's own figure beside the median: what its suite would print
        text += f"\nEPCC mean {row['epcc_mean_us']:.3f}"
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
                      "side by side.")

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

    if any(r.get("noisy") for r in rows):
        console.print(stats.LEGEND)
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
                   figure_time=getattr(args, "figure_time", None), argv=argv)
    with tool_progress("tests") as progress:
        doc = measure(progress=progress, **options)
    noise.attach(doc, noise_block)
    render(doc, console)
    tplot.write_outputs(doc, args.json, getattr(args, "plot", None), plot, console)
    return 0
