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

Each figure comes from ``reps`` outer repetitions; samples beyond 3 standard
deviations are dropped, and the mean, median, standard deviation and 95%
confidence interval of the mean are reported in microseconds and in CPU
cycles.  This module wraps the tool's output into a ``tiers.probe.sync/1``
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
QUICK = {"reps": 15, "test_time": 200.0, "chunks": "1,8,64"}

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
                chunks=None, pin=None, iters_per_thread=None, quick=False) -> list[str]:
    """Return the tiers-probe-sync arguments for these options (lists as
    Python lists or comma-separated text; None means the default, or the
    quick value when ``quick``)."""
    if quick:
        reps = QUICK["reps"] if reps is None else reps
        test_time = QUICK["test_time"] if test_time is None else test_time
        chunks = QUICK["chunks"] if chunks is None else chunks
    args: list[str] = []
    for flag, value in (("--threads", threads), ("--tests", tests), ("--chunks", chunks)):
        text = native.list_arg(value)
        if text is not None:
            args += [flag, text]
    for flag, value in (("--reps", reps), ("--test-time", test_time),
                        ("--delay-time", delay_time), ("--iters-per-thread", iters_per_thread),
                        ("--pin", pin)):
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


MIN_WHY = ("the smallest single repetition was not slower than its reference loop: "
           "an overhead at or below the timing noise, not a negative cost")


def _drop_impossible_min(st: dict) -> None:
    """An EPCC overhead is a difference of two timed loops, so one noisy
    repetition can come out at zero or below.  Such a minimum is not a cost
    a construct can have: store None, ``min_reliable: false`` and why,
    instead of the number."""
    low = st.get("min_us")
    if isinstance(low, (int, float)) and low <= 0:
        st["min_us"] = None
        if "min_cycles" in st:
            st["min_cycles"] = None
        st["min_reliable"] = False
        st["min_why"] = MIN_WHY


def summarise(raw: dict) -> dict:
    """Return the ``summary`` of a document from the tool's output: one row
    per test (and chunk size) and thread count with the statistics of its
    overheads, and the ``headline`` figures at 2 threads (or the fewest
    measured): spin, pthread and condvar barrier times and the EPCC BARRIER
    and PARALLEL overheads, each in microseconds and cycles."""
    rows = []
    for run in raw["runs"]:
        for test in run["tests"]:
            _drop_impossible_min(test["stats"])
            row = {"group": test["group"], "name": test["name"], "label": test["label"],
                   "threads": run["threads"]}
            if "chunk" in test:
                row["chunk"] = test["chunk"]
            row.update({k: test["stats"][k] for k in _ROW_KEYS})
            if "min_why" in test["stats"]:
                row["min_why"] = test["stats"]["min_why"]
            # the statistics layer beside the EPCC figures (docs/statistics.md)
            ms = test["stats"].get("median_stats")
            row["noisy"] = test["stats"].get("noisy")
            row["median_ci95_us"] = ([ms["ci_low"], ms["ci_high"]]
                                     if ms and ms.get("ci_low") is not None else None)
            rows.append(row)
    threads = [run["threads"] for run in raw["runs"]]
    at = HEADLINE_THREADS if HEADLINE_THREADS in threads else (min(threads) if threads else None)
    headline: dict = {"threads": at}
    for key, group, name, label in _HEADLINE:
        for row in rows:
            if row["threads"] == at and row["group"] == group and row["name"] == name:
                headline[key] = {"label": label, **{k: row[k] for k in (
                    "mean_us", "median_us", "ci95_us", "mean_cycles", "median_cycles",
                    "ci95_cycles", "noisy", "median_ci95_us")}}
    return {"cycles_per_second": raw["params"]["cycles_per_second"], "threads": threads,
            "rows": rows, "headline": headline}


def measure(*, threads=None, tests=None, reps=None, test_time=None, delay_time=None,
            chunks=None, pin=None, iters_per_thread=None, quick: bool = False,
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
    15 repetitions, 200 us tests and chunks 1, 8, 64 unless given.
    ``progress(done, total)`` is called after each test.

    The document's ``params`` are the tool's parameters (with the measured
    delay and the cycles per second used), ``samples`` its runs (one per
    thread count, with every test's raw per-repetition times and overheads
    and their statistics), ``summary`` what :func:`summarise` returns.
    Raise TiersError (one line) on bad input."""
    args = native_args(threads=threads, tests=tests, reps=reps, test_time=test_time,
                       delay_time=delay_time, chunks=chunks, pin=pin,
                       iters_per_thread=iters_per_thread, quick=quick)
    raw = _run_tool(args, progress)
    summary = summarise(raw)
    noisy = sum(1 for r in summary["rows"] if r.get("noisy"))
    extra = {"warnings": [f"probe sync: {noisy} of {len(summary['rows'])} figures are noisy "
                          "(95 % CI of the median wider than +-5 %)"]} if noisy else {}
    return result.new_document("probe.sync", params=raw["params"], samples=raw["runs"],
                               summary=summary, argv=argv, native=raw.get("native", {}),
                               **extra)


def _cell(row: dict | None) -> str:
    """Mean (+/- half the 95% interval) in us, then the mean in cycles."""
    if row is None:
        return "-"
    half = (row["ci95_us"][1] - row["ci95_us"][0]) / 2
    if row["mean_us"] <= 0:
        # a difference of two loops at or below the noise: no cost to print
        return stats.mark(f"< {half:.3f} µs", True) + "\nbelow noise"
    return stats.mark(f"{row['mean_us']:.3f} ±{half:.3f} µs", row.get("noisy")) + \
        f"\n{row['mean_cycles']:,.0f} cy"


def _index(rows: list[dict]) -> dict:
    return {(r["group"], r["name"], r.get("chunk"), r["threads"]): r for r in rows}


def render(doc: dict, console: Console) -> None:
    """Print a document: its parameters, the EPCC overheads (constructs x
    thread counts), the schedule overheads (schedule and chunk x thread
    counts), the barrier comparison (spin / pthread / condvar, with the
    ratios to the spin barrier), each as mean ± half the 95% interval in
    microseconds and the mean in CPU cycles, then the headline figures."""
    p, summary = doc["params"], doc["summary"]
    rows, threads = summary["rows"], summary["threads"]
    index = _index(rows)
    console.print(f"delay() = {p['delay_length']} iterations = {p['delay_measured_us']:.4f} µs "
                  f"(asked {p['delay_time_us']:g} µs); {p['reps']} repetitions of about "
                  f"{p['test_time_us']:g} µs; outliers beyond {p['outlier_sigma']:g} σ dropped; "
                  f"{p['cycles_per_second'] / 1e9:.3f} GHz for cycles; threads pinned "
                  f"{p['pin']}.")
    console.print("Cells: mean ± half the 95% confidence interval in µs, and the mean in CPU "
                  "cycles.")

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
                        spin["mean_us"] > 0:
                    text += f"\n×{row['mean_us'] / spin['mean_us']:,.1f} spin"
                cells.append(text)
            t.add_row(label, *cells)
        console.print(t)

    if any(r.get("noisy") for r in rows):
        console.print(stats.LEGEND)

    head = summary["headline"]
    parts = [f"{v['label']} {v['mean_us']:.3f} µs ({v['mean_cycles']:,.0f} cycles), median "
             f"{v['median_us']:.3f} µs ({v['median_cycles']:,.0f} cycles)"
             + (" (noisy)" if v.get("noisy") else "")
             for k, v in head.items() if k != "threads"]
    if parts:
        console.print(f"At {plural(head['threads'], 'thread')}, mean and median: " + "; ".join(parts)
                      + ".")


def _secondary_cycles(ax, hz: float) -> None:
    """Add a right-hand axis in CPU cycles to an axis in microseconds."""
    scale = hz * 1e-6
    sec = ax.secondary_yaxis("right", functions=(lambda us: us * scale, lambda cy: cy / scale))
    sec.set_ylabel("CPU cycles")


def plot(doc: dict, path) -> Path:
    """Draw overhead against threads per construct, schedule overhead against
    chunk size (one line per schedule and thread count) and barrier time
    against threads (spin, pthread, condvar), each with its 95% interval, in
    microseconds with a cycles axis; save as PNG at ``path``; return the path."""
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
                y = [r["mean_us"] for r in pts]
                err = [[r["mean_us"] - r["ci95_us"][0] for r in pts],
                       [r["ci95_us"][1] - r["mean_us"] for r in pts]]
                ax.errorbar(x, y, yerr=err, marker="o", markersize=3, capsize=2,
                            label=f"{label}, {n} thr")
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
            err = [[max(0.0, r["mean_us"] - r["ci95_us"][0]) for r in pts],
                   [max(0.0, r["ci95_us"][1] - r["mean_us"]) for r in pts]]
            ax.bar(x, [r["mean_us"] for r in pts], yerr=err, capsize=3,
                   color=[f"C{i}" for i in x], label=f"{pts[0]['threads']} threads")
            ax.set_xticks(x)
            ax.set_xticklabels([r["label"] for r in pts], rotation=35, ha="right", fontsize=8)
            if group == "barriers" and all(r["mean_us"] > 0 for r in pts):
                ax.set_yscale("log")
            ax.set_title(("barrier time per episode" if group == "barriers"
                          else "EPCC overhead per construct") + f", {pts[0]['threads']} threads")
        else:
            for label in dict.fromkeys(r["label"] for r in grows):
                pts = sorted((r for r in grows if r["label"] == label), key=lambda r: r["threads"])
                x = [r["threads"] for r in pts]
                y = [r["mean_us"] for r in pts]
                err = [[r["mean_us"] - r["ci95_us"][0] for r in pts],
                       [r["ci95_us"][1] - r["mean_us"] for r in pts]]
                ax.errorbar(x, y, yerr=err, marker="o", markersize=3, capsize=2, label=label)
            ax.set_xlabel("threads")
            ax.set_xticks(summary["threads"])
            if group == "barriers":
                if all(r["mean_us"] > 0 for r in grows):
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
                   pin=args.pin, quick=args.quick, argv=argv)
    with tool_progress("tests") as progress:
        doc = measure(progress=progress, **options)
    noise.attach(doc, noise_block)
    render(doc, console)
    tplot.write_outputs(doc, args.json, getattr(args, "plot", None), plot, console)
    return 0
