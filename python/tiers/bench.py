"""``tiers bench``: the reference applications of the hybrid runtime, flat
and hybrid, over a grid of process and thread counts.

Every application (``tiers-jacobi3d``, ``tiers-laplace2d``, ...) is an MPI
program built on ``libtiers-hybrid``: one thread team per process (the
COMPaS model of the COMPaS paper's §4).  It verifies its own result and prints one
``tiers.app/1`` document with its time, the compute / communication /
synchronisation breakdown of every process and its figure of merit.

This module runs one application for every pair (ranks, threads) of the
grid through the launching module (:mod:`tiers.launch`), then derives,
as the COMPaS paper's Table 5 does, the speed-up against the 1 x 1 run (or the
smallest run of the grid) and the parallel efficiency
speed-up / (ranks x threads).  Ranks get ``threads`` cores each when the
machine has enough (``--map-by slot:PE=T``); otherwise the run is
oversubscribed: no binding, ranks yield the CPU when idle, and the threads
are not pinned.  The document is ``tiers.bench/1`` (docs/schemas/bench.md).
"""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.table import Table

from . import launch, native, result, validate
from .registry import APPS, App  # noqa: F401 - the apps live in the registry
from .errors import TiersError

DEFAULT_RANKS = (1, 2, 4)
DEFAULT_THREADS = (1, 2)
DEFAULT_TIMEOUT_S = 600.0
PHASES = ("compute", "comm", "sync")
GRID_APPS = ("jacobi3d", "laplace2d")  # --size: grid points per axis
GRID_AXIS_MAX = 1 << 20
OVER_MARK = "(over)"  # table marker of an oversubscribed configuration


def app_info(name: str) -> App:
    """Return the :class:`App` called ``name``; raise TiersError naming the
    known ones otherwise."""
    try:
        return APPS[name]
    except KeyError:
        raise TiersError(f"unknown application '{name}' (known: {', '.join(sorted(APPS))})") \
            from None


def parse_counts(value, what: str) -> list[int]:
    """Return the positive integers of ``value``: a list, or text such as
    ``"1,2,4"`` or ``"1-4"``; sorted, without repeats."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        words = [str(v) for v in value]
    else:
        words = [w for w in str(value).replace(" ", "").split(",") if w]
    out: set[int] = set()
    for w in words:
        try:
            if "-" in w:
                a, b = (int(x) for x in w.split("-", 1))
                if a < 1 or b < a:
                    raise ValueError
                out.update(range(a, b + 1))
            else:
                n = int(w)
                if n < 1:
                    raise ValueError
                out.add(n)
        except ValueError:
            raise TiersError(f"bad {what} list '{value}': use positive integers such as "
                             "1,2,4 or 1-4") from None
    if not out:
        raise TiersError(f"the {what} list is empty")
    return sorted(out)


COMM_MODES = ("mpi", "mbc")


def parse_comms(value, app: App) -> list[str]:
    """Return the messaging modes of ``value`` (a list, or text such as
    ``"mpi,mbc"``; None gives ``["mpi"]``) in the order given, without
    repeats.  Raise TiersError for an unknown mode, or for ``mbc`` when
    ``app`` cannot send its messages through the memory-based layer."""
    if value is None:
        return ["mpi"]
    words = [str(v) for v in value] if isinstance(value, (list, tuple)) else \
        [w for w in str(value).replace(" ", "").split(",") if w]
    modes: list[str] = []
    for w in words:
        if w not in COMM_MODES:
            raise TiersError(f"unknown --comm mode '{w}' (known: {', '.join(COMM_MODES)})")
        if w not in modes:
            modes.append(w)
    if not modes:
        raise TiersError("the --comm list is empty (use mpi, mbc or mpi,mbc)")
    if "mbc" in modes and not app.comm_option:
        able = ", ".join(a.name for a in APPS.values() if a.comm_option)
        raise TiersError(f"{app.name} has no --comm mbc (its messages go through MPI only; "
                         f"--comm mbc is for {able})")
    return modes


def usable_cpus() -> int:
    """Return the number of CPUs this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def app_args(app: App, *, quick: bool = False, size=None, iters=None, overlap: bool = False,
             klass: str | None = None, verify: bool | None = None,
             extra: Sequence[str] = ()) -> list[str]:
    """Return the application options (without --threads and --pin) for
    these settings.  Raise TiersError for options the app does not take."""
    args: list[str] = []
    if quick:
        args.append("--quick")
    if klass is not None:
        if not app.classes:
            raise TiersError(f"{app.name} has no problem classes (--class is for "
                             f"{', '.join(a.name for a in APPS.values() if a.classes) or 'cg'})")
        k = str(klass).upper()
        if k not in app.classes:
            raise TiersError(f"unknown class '{klass}' for {app.name} (known: "
                             f"{', '.join(app.classes)})")
        args += ["--class", k]
    if size is not None:
        if not app.size_option:
            raise TiersError(f"{app.name} takes no --size")
        # each item a count (K/M suffixes allowed); grid apps multiply up to
        # three of them, so an axis stays below 2^20 points: no 64-bit overflow
        grid = app.name in GRID_APPS
        top = GRID_AXIS_MAX if grid else validate.INT_MAX
        for item in validate.split_list(str(size), "--size", max_items=3):
            n = validate.parse_size(item, "--size")
            if n < 1:
                raise TiersError(f"--size: {item} must be at least 1")
            if n > top:
                raise TiersError(f"--size: {item} is more than the limit of {top}"
                                 + (" grid points per axis" if grid else ""))
        args += ["--size", str(size)]
    if iters is not None:
        if not app.iters_option:
            raise TiersError(f"{app.name} takes no --iters")
        if int(iters) < 1:
            raise TiersError(f"--iters must be positive (got {iters})")
        args += ["--iters", str(int(iters))]
    if overlap:
        if not app.overlap_option:
            raise TiersError(f"{app.name} has no halo exchange to overlap")
        args.append("--overlap")
    if verify is True:
        args.append("--verify")
    elif verify is False:
        args.append("--no-verify")
    return args + [str(a) for a in extra]


def available_cores(hostfile=None, vcluster: bool = False) -> int:
    """Return the cores a grid cell may use without oversubscribing: the
    slots of ``hostfile`` (a host without ``slots=`` counts one), else the
    cores of this machine (also with ``vcluster``: its nodes share them)."""
    if hostfile is not None and not vcluster:
        from .validate import hostfile_slots

        slots = hostfile_slots(hostfile)
        if slots:
            return slots
    return launch.local_slots()


def grid(rlist: Sequence[int], tlist: Sequence[int], cores: int, *,
         fit_only: bool) -> list[tuple[int, int, bool]]:
    """Return the cells ``(ranks, threads, oversubscribed)`` to run: every
    pair of ``rlist`` x ``tlist``, ``oversubscribed`` when ranks x threads
    exceeds ``cores``; with ``fit_only`` those cells are left out (the
    default grid runs only what fits the cores)."""
    cells = [(r, t, r * t > cores) for r in rlist for t in tlist]
    return [c for c in cells if not (fit_only and c[2])]


def launch_plan(ranks: int, threads: int, slots: int | None = None) -> dict:
    """Return how one configuration is launched: ``oversubscribed`` (more
    ranks x threads than ``slots``, default :func:`tiers.launch.local_slots`)
    and the :func:`tiers.launch.build_command` options (``cpus_per_rank``
    and ``bind_to`` core when every thread has a core, else ``bind_to``
    none and yielding MPI ranks)."""
    slots = launch.local_slots() if slots is None else slots
    if ranks * threads <= slots:
        return {"oversubscribed": False,
                "options": {"cpus_per_rank": threads, "bind_to": "core"}}
    return {"oversubscribed": True,
            "options": {"bind_to": "none", "oversubscribe": True}}


def run_config(app: App, ranks: int, threads: int, args: Sequence[str], *,
               pin: str | None = None, launcher=None, hostfile=None, vcluster: bool = False,
               launcher_args: Sequence[str] = (), timeout: float = DEFAULT_TIMEOUT_S) -> dict:
    """Run ``app`` once on ``ranks`` ranks of ``threads`` threads and return
    ``{"plan", "command", "wall_s", "doc"}`` where ``doc`` is the
    application's ``tiers.app/1`` document.  Raise
    :class:`tiers.launch.LaunchError` (one line: bad input, failed
    verification with its margin, crash, time limit).  ``vcluster`` runs it
    on the virtual cluster of ``tiers vcluster up``, unbound (every node
    shares this machine's cores)."""
    lau = launcher if isinstance(launcher, launch.Launcher) else launch.detect(launcher)
    if vcluster:
        plan = {"oversubscribed": ranks * threads > launch.local_slots(), "options": {}}
    elif hostfile is None:
        plan = launch_plan(ranks, threads)
    else:
        plan = {"oversubscribed": False, "options": {"cpus_per_rank": threads}}
    thread_pin = pin or ("none" if plan["oversubscribed"] else "compact")
    program = [str(native.tool_path(app.tool)), "--threads", str(threads), "--pin", thread_pin,
               *args]
    options = dict(plan["options"])
    if plan["oversubscribed"] and lau.kind == "openmpi":
        options["mca"] = {"mpi_yield_when_idle": "1"}
    if lau.kind != "openmpi":
        options.pop("oversubscribe", None)
    env = {"OMP_NUM_THREADS": str(threads)}
    if vcluster:
        from . import vcluster as vcl

        command = vcl.command(program, ranks, launcher=lau, env=env, mca=options.get("mca"),
                              extra=list(launcher_args))
    else:
        command = launch.build_command(lau, program, ranks, env=env, hostfile=hostfile,
                                       extra=list(launcher_args), **options)
    run = launch.run_command(command, timeout=timeout, label=app.tool, ranks=ranks)
    doc = run.json(app.tool)
    if not isinstance(doc, dict) or doc.get("schema") != "tiers.app/1":
        raise TiersError(f"{app.tool} printed no tiers.app/1 document")
    return {"plan": {"oversubscribed": plan["oversubscribed"], "pin": thread_pin},
            "command": command, "wall_s": round(run.elapsed_s, 3), "doc": doc}


def analyse(samples: list[dict]) -> dict:
    """Return the summary of the runs in ``samples`` (each ``{"ranks",
    "threads", "doc"}``): the baseline (1 x 1, else the fewest cores) and,
    per configuration, time, speed-up against the baseline, efficiency =
    speed-up / (ranks x threads), the mean compute / comm / sync seconds
    per rank, the figure of merit and whether its verification passed.
    Samples marked ``"oversubscribed": True`` never serve as the baseline
    (unless all are), and their rows carry ``"oversubscribed": True,
    "reliable": False`` and ``"why"``."""
    if not samples:
        return {"baseline": None, "rows": []}
    fitting = [s for s in samples if not s.get("oversubscribed")] or samples
    base = min(fitting, key=lambda s: (s["ranks"] * s["threads"], s["ranks"]))
    base_cores = base["ranks"] * base["threads"]
    base_time = base["repeats"]["median"] if base.get("repeats") else base["doc"]["time_s"]
    rows = []
    for s in samples:
        doc = s["doc"]
        cores = s["ranks"] * s["threads"]
        rep = s.get("repeats")  # repeated runs (repeat_time_s): their median time
        t = rep["median"] if rep else doc["time_s"]
        # Speed-up against the baseline; when the baseline is not 1 x 1 it is
        # taken as perfectly parallel on its own cores (scaled, as usual).
        speedup = base_time / t * base_cores if t and t > 0 else None
        row = {"ranks": s["ranks"], "threads": s["threads"], "cores": cores, "time_s": t,
               "speedup": speedup,
               "efficiency": speedup / cores if speedup is not None else None}
        if rep:
            row.update(runs=rep["n"], time_min_s=rep["min"], time_ci_s=(
                [rep["ci_low"], rep["ci_high"]] if rep["ci_low"] is not None else None),
                noisy=rep["noisy"], stopped=rep["stopped"])
        if s.get("oversubscribed"):
            row.update(oversubscribed=True, reliable=False,
                       why=f"{cores} ranks x threads on fewer cores: the time shows "
                       "contention, not scaling")
        for phase in PHASES:
            row[f"{phase}_s"] = doc["breakdown"][f"{phase}_s"]["mean"]
        fom = doc.get("figure_of_merit", {})
        row["merit"] = fom.get("value")
        row["merit_name"] = fom.get("name")
        row["merit_unit"] = fom.get("unit")
        row["verified"] = bool(doc.get("verification", {}).get("passed"))
        rows.append(row)
    rows.sort(key=lambda r: (r["ranks"], r["threads"]))
    best = min(rows, key=lambda r: r["time_s"])
    return {"baseline": {"ranks": base["ranks"], "threads": base["threads"],
                         "time_s": base_time},
            "rows": rows,
            "best": {"ranks": best["ranks"], "threads": best["threads"],
                     "time_s": best["time_s"]},
            "all_verified": all(r["verified"] for r in rows)}


def compare_comms(samples: list[dict], by_comm: dict) -> list[dict]:
    """Return the MPI/MBCF paper's Tables 4-10 for the samples of both modes: per
    (ranks, threads) that ran over MPI and over MBC, ``time_mpi_s``,
    ``time_mbc_s``, ``speedup_mpi`` and ``speedup_mbc`` (each against its
    own mode's baseline, from ``by_comm[mode]["rows"]``), ``ratio`` =
    time_mbc_s / time_mpi_s, and from the MBC run's ``mbc`` statistics
    ``remote_write_share`` (None when it sent no bytes), ``transport``,
    ``direct_available``, ``msgs_sent`` and ``bytes_sent`` (None when the
    run had no layer)."""
    rows_of = {m: {(r["ranks"], r["threads"]): r for r in by_comm[m]["rows"]}
               for m in ("mpi", "mbc") if m in by_comm}
    if len(rows_of) < 2:
        return []
    mbc_doc = {(s["ranks"], s["threads"]): s["doc"] for s in samples if s["comm"] == "mbc"}
    out = []
    for key in sorted(set(rows_of["mpi"]) & set(rows_of["mbc"])):
        a, b = rows_of["mpi"][key], rows_of["mbc"][key]
        st = mbc_doc[key].get("mbc") or {}
        ta, tb = a["time_s"], b["time_s"]
        out.append({"ranks": key[0], "threads": key[1], "cores": key[0] * key[1],
                    "time_mpi_s": ta, "time_mbc_s": tb,
                    "speedup_mpi": a["speedup"], "speedup_mbc": b["speedup"],
                    "ratio": tb / ta if ta and ta > 0 and tb is not None else None,
                    # no bytes sent (one process): no share to speak of
                    "remote_write_share": st.get("remote_write_share")
                    if st.get("bytes_sent") else None,
                    "transport": st.get("transport"),
                    "direct_available": st.get("direct_available"),
                    "msgs_sent": st.get("msgs_sent"), "bytes_sent": st.get("bytes_sent"),
                    "verified": a["verified"] and b["verified"]})
    return out


def measure(app_name: str, ranks=None, threads=None, *, oversubscribe: bool = False,
            quick: bool = False, klass: str | None = None, size=None, iters=None,
            overlap: bool = False, pin: str | None = None, verify: bool | None = None,
            app_extra: Sequence[str] = (), launcher=None, hostfile=None,
            vcluster: bool = False, comm=None,
            launcher_args: Sequence[str] | str = (), timeout: float | None = None,
            progress=None, argv: list[str] | None = None,
            repeat_time_s: float | None = None, repeat_max: int = 30) -> dict:
    """Run ``app_name`` for every (ranks, threads) of the grid and return
    the ``tiers.bench/1`` result document.

    ``ranks`` and ``threads`` are lists or text ("1,2,4"); None gives
    :data:`DEFAULT_RANKS` and :data:`DEFAULT_THREADS`.  A cell whose ranks
    x threads exceed the cores (:func:`available_cores`) is oversubscribed:
    with both lists left to their defaults and no ``oversubscribe`` it is
    not run; otherwise it runs, and its sample and row carry
    ``"oversubscribed": true`` (left out of the baseline and of the plot's
    speed-up lines) and ``doc["warnings"]`` says so.  ``quick``,
    ``klass``, ``size``, ``iters``, ``overlap``, ``verify`` and
    ``app_extra`` become application options; ``pin`` (none, compact,
    scatter) pins the threads (default compact, none when oversubscribed).
    ``launcher``, ``hostfile`` and ``launcher_args`` go to
    :mod:`tiers.launch`; ``vcluster`` runs on the virtual cluster; ``timeout`` bounds each run (default 600 s).
    ``comm`` lists the messaging modes (``"mpi"`` default, ``"mbc"``,
    ``"mpi,mbc"``): the grid runs once per mode, each sample records its
    ``comm``, ``summary["by_comm"]`` holds each mode's analysis and, with
    both modes, ``summary["comm_comparison"]`` the rows of
    :func:`compare_comms`; the top-level summary is the first mode's.
    ``progress(ranks, threads)`` is called before each run (with a third
    argument, the mode, when more than one mode runs).  ``repeat_time_s``
    applies the statistics layer's repeat-until rule to every cell: runs
    repeat until the 95 % CI of the median time is within +-5 %, that many
    seconds pass or ``repeat_max`` runs were made; the cell's time is then
    the median run time, its sample keeps every run's time under
    ``repeats`` and its row ``runs``, ``time_ci_s`` and ``noisy``.  Raise
    TiersError (one line) on bad input or a failed run."""
    app = app_info(app_name)
    fit_only = ranks is None and threads is None and not oversubscribe
    rlist = parse_counts(DEFAULT_RANKS if ranks is None else ranks, "ranks")
    tlist = parse_counts(DEFAULT_THREADS if threads is None else threads, "threads")
    if pin is not None and pin not in ("none", "compact", "scatter"):
        raise TiersError(f"--pin must be none, compact or scatter (got {pin})")
    if vcluster and hostfile is not None:
        raise TiersError("--vcluster brings its own hostfile: do not give --hostfile too")
    if hostfile is None and not vcluster:
        cpus = usable_cpus()
        over = [t for t in tlist if t > cpus]
        if over:
            raise TiersError(f"{over[0]} threads per rank exceed the {cpus} CPUs this "
                             "machine lets tiers use")
    modes = parse_comms(comm, app)
    args = app_args(app, quick=quick, size=size, iters=iters, overlap=overlap, klass=klass,
                    verify=verify, extra=app_extra)
    extra = shlex.split(launcher_args) if isinstance(launcher_args, str) else \
        list(launcher_args)
    lau = launcher if isinstance(launcher, launch.Launcher) else launch.detect(launcher)
    limit = float(timeout) if timeout is not None else DEFAULT_TIMEOUT_S
    cores = available_cores(hostfile, vcluster)
    cells = grid(rlist, tlist, cores, fit_only=fit_only)
    samples = []
    for mode in modes:
        margs = ["--comm", mode, *args] if app.comm_option else list(args)

        def runner(r, t, margs=margs, announce=False):
            first = [announce]

            def run():
                if first[0] and progress:  # said once, at the cell's first run
                    progress(r, t, *([mode] if len(modes) > 1 else []))
                first[0] = False
                return run_config(app, r, t, margs, pin=pin, launcher=lau,
                                  hostfile=hostfile, vcluster=vcluster,
                                  launcher_args=extra, timeout=limit)
            return run

        if repeat_time_s is not None and len(cells) > 1:
            # repeated cells run in interleaved rounds (one run of every cell
            # per round), so that each cell's runs spread over the whole
            # section and a slow change of the machine reaches every cell alike
            results = _run_cells_interleaved(
                [runner(r, t, announce=True) for r, t, _ in cells], repeat_time_s, repeat_max)
        else:
            results = []
            for r, t, _ in cells:
                if progress:
                    progress(r, t, *([mode] if len(modes) > 1 else []))
                results.append(_run_cell(runner(r, t), repeat_time_s, repeat_max))
        for (r, t, over), (out, repeats) in zip(cells, results):
            samples.append({"ranks": r, "threads": t, "comm": mode, "oversubscribed": over,
                            **out, **({"repeats": repeats} if repeats else {})})
    by_comm = {m: analyse([s for s in samples if s["comm"] == m]) for m in modes}
    summary = dict(by_comm[modes[0]])
    summary["comm"] = modes[0]
    summary["by_comm"] = by_comm
    if len(modes) > 1:
        summary["comm_comparison"] = compare_comms(samples, by_comm)
    params = {"app": app.name, "tool": app.tool, "ranks": rlist, "threads": tlist,
              "comm": modes, "quick": quick, "class": klass, "size": size, "iters": iters,
              "overlap": overlap, "pin": pin, "app_args": args,
              "launcher": lau.to_dict(), "slots": launch.local_slots(), "vcluster": vcluster,
              "cores": cores, "oversubscribe": oversubscribe,
              "skipped": [[r, t] for r in rlist for t in tlist
                          if (r, t) not in {(c[0], c[1]) for c in cells}]}
    doc = result.new_document("bench", params=params, samples=samples, summary=summary,
                              argv=argv)
    over = sorted({(s["ranks"], s["threads"]) for s in samples if s["oversubscribed"]})
    if over:
        doc.setdefault("warnings", []).append(
            f"{len(over)} configuration{'s' if len(over) > 1 else ''} ("
            + ", ".join(f"{r}x{t}" for r, t in over) + f") ran more ranks x threads than the "
            f"{cores} cores: oversubscribed, their times show contention, not scaling, and "
            "they are left out of the speed-up lines")
    return doc


def stats_legend() -> str:
    """The legend of the "~" mark (tiers.stats.LEGEND)."""
    from . import stats

    return stats.LEGEND


def _run_cell(run, repeat_time_s: float | None, repeat_max: int) -> tuple[dict, dict | None]:
    """Run one cell once (``repeat_time_s`` None), or by the repeat-until
    rule (tiers.stats.Driver); return the run whose time is nearest the
    median and the summary of every run's time (None for one run)."""
    if repeat_time_s is None:
        return run(), None
    from . import stats

    driver = stats.Driver(repeat_time_s, repeat_max)
    outs = []
    while True:
        outs.append(run())
        driver.add(outs[-1]["doc"]["time_s"])
        if driver.stop() is not None:
            break
    summary = driver.summary()
    summary["times_s"] = list(driver.samples)
    summary["time_limit_s"] = driver.time_limit_s
    med = summary["median"]
    return min(outs, key=lambda o: abs(o["doc"]["time_s"] - med)), summary


def _run_cells_interleaved(runs: Sequence, repeat_time_s: float,
                           repeat_max: int) -> list[tuple[dict, dict]]:
    """Run several cells by the repeat-until rule in interleaved rounds: each
    round runs every cell that has not stopped once.  Each cell has its own
    tiers.stats.Driver with the time of all cells (``repeat_time_s`` x the
    cells), so the section takes no longer than cell after cell would.
    Return, per cell, what :func:`_run_cell` returns (the run nearest the
    median and the summary, with ``interleaved`` True)."""
    from . import stats

    drivers = [stats.Driver(repeat_time_s * len(runs), repeat_max) for _ in runs]
    outs: list[list[dict]] = [[] for _ in runs]
    active = list(range(len(runs)))
    while active:
        for i in list(active):
            outs[i].append(runs[i]())
            drivers[i].add(outs[i][-1]["doc"]["time_s"])
            if drivers[i].stop() is not None:
                active.remove(i)
    results = []
    for d, o in zip(drivers, outs):
        summary = d.summary()
        summary.update(times_s=list(d.samples), time_limit_s=d.time_limit_s, interleaved=True)
        med = summary["median"]
        results.append((min(o, key=lambda x: abs(x["doc"]["time_s"] - med)), summary))
    return results


def _fmt(v, spec: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, spec)


def _merit(v) -> str:
    if v is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{v:.3g}"


def _render_grid(p: dict, s: dict, console: Console, label: str) -> None:
    """Print one mode's Table 5 and breakdown from its analysis ``s``."""
    rows = s["rows"]
    if not rows:
        return
    base = s["baseline"]
    t = Table(title=f"tiers bench {p['app']}{label}: time, speed-up and efficiency "
              f"(baseline {base['ranks']}x{base['threads']})")
    t.add_column("ranks", justify="right")
    for th in p["threads"]:
        t.add_column(f"{th} thread{'s' if th > 1 else ''}", justify="right")
    by = {(r["ranks"], r["threads"]): r for r in rows}
    for rk in [rk for rk in p["ranks"] if any(r["ranks"] == rk for r in rows)]:
        cells = []
        for th in p["threads"]:
            r = by.get((rk, th))
            cells.append("-" if r is None else
                         f"{_fmt(r['time_s'], '.3g')} s  S={_fmt(r['speedup'], '.2f')}  "
                         f"E={_fmt(r['efficiency'] and 100 * r['efficiency'], '.0f')}%"
                         + ("~" if r.get("noisy") else "")
                         + (f" {OVER_MARK}" if r.get("oversubscribed") else ""))
        t.add_row(str(rk), *cells)
    console.print(t)
    b = Table(title="time breakdown per rank (mean of the ranks' master threads)")
    for col in ("config", "time s", "compute s", "comm s", "sync s",
                rows[0]["merit_unit"] or "merit", "verified"):
        b.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        b.add_row(f"{r['ranks']}x{r['threads']}"
                  + (f" {OVER_MARK}" if r.get("oversubscribed") else ""),
                  _fmt(r["time_s"], ".3g") + ("~" if r.get("noisy") else ""),
                  _fmt(r["compute_s"], ".3g"), _fmt(r["comm_s"], ".3g"),
                  _fmt(r["sync_s"], ".3g"), _merit(r["merit"]),
                  "yes" if r["verified"] else "NO")
    console.print(b)
    if any(r.get("runs") for r in rows):
        console.print("times: the median over repeated runs (until the 95 % CI of the median is "
                      "within +-5 % or the time per cell passes)"
                      + ("; " + stats_legend() if any(r.get("noisy") for r in rows) else ""))


def _render_app_results(doc: dict, console: Console) -> None:
    """Print what the application itself measured, per configuration:
    zblas's GFLOP/s per kernel, cg's zeta against NPB's reference value."""
    samples = [smp for smp in doc["samples"] if isinstance(smp.get("doc"), dict)]
    if not samples:
        return
    app = doc["params"]["app"]
    multi = len(doc["params"].get("comm") or []) > 1

    def label(smp):
        return (f"{smp['ranks']}x{smp['threads']}"
                + (f" {smp['comm']}" if multi else "")
                + (f" {OVER_MARK}" if smp.get("oversubscribed") else ""))

    if app == "zblas":
        kernels: list[str] = []
        per: list[dict] = []
        for smp in samples:
            ks = {k["name"]: k for k in smp["doc"].get("result", {}).get("kernels", [])}
            per.append(ks)
            kernels += [k for k in ks if k not in kernels]
        if not kernels:
            return
        first = samples[0]["doc"]["result"]
        t = Table(title=f"zblas: GFLOP/s per kernel (N = {first.get('length')}, "
                  f"M = {first.get('matrix')}, {first.get('iters')} calls, "
                  f"{first.get('simd')} kernels)")
        t.add_column("kernel")
        for smp in samples:
            t.add_column(label(smp), justify="right", no_wrap=True)
        for name in kernels:
            t.add_row(name, *(_fmt(ks[name].get("gflops_per_s"), ".2f") if name in ks else "-"
                              for ks in per))
        console.print(t)
    elif app == "cg":
        rows = [(smp, smp["doc"].get("result", {})) for smp in samples]
        rows = [(smp, r) for smp, r in rows if r.get("zeta") is not None]
        if not rows:
            return
        t = Table(title="cg: zeta against NPB's reference value")
        for col in ("config", "class", "zeta", "NPB zeta", "rel. error", "verified"):
            t.add_column(col, justify="right", no_wrap=True)
        for smp, r in rows:
            ok = bool(smp["doc"].get("verification", {}).get("passed"))
            t.add_row(label(smp), str(r.get("class", "-")), _fmt(r.get("zeta"), ".13f"),
                      _fmt(r.get("zeta_reference"), ".13f"), _fmt(r.get("zeta_rel_error"), ".2e"),
                      "yes" if ok else "NO")
        console.print(t)


def render(doc: dict, console: Console) -> None:
    """Print the seed-004 Table 5 layout (ranks down, threads across: time,
    speed-up, efficiency) and the per-configuration breakdown, once per
    messaging mode, the application's own figures (zblas: GFLOP/s per
    kernel; cg: zeta and its verification), then the MPI vs MBC comparison
    when both ran."""
    s = doc["summary"]
    p = doc["params"]
    if not s["rows"]:
        console.print("no runs")
        return
    modes = p.get("comm") or []
    if len(modes) > 1:
        for mode in modes:
            _render_grid(p, s["by_comm"][mode], console, f" over {mode.upper()}")
    else:
        _render_grid(p, s, console, f" over {modes[0].upper()}" if modes == ["mbc"] else "")
    _render_app_results(doc, console)
    comp = s.get("comm_comparison")
    if comp:
        c = Table(title=f"{p['app']}: MPI vs MBC (the MPI/MBCF paper's Tables 4-10; S = speed-up "
                  "against the mode's own baseline, direct = remote-write share of bytes)")
        for col in ("config", "MPI s", "S MPI", "MBC s", "S MBC", "MBC/MPI", "direct %",
                    "path"):
            c.add_column(col, justify="right", no_wrap=True)
        for r in comp:
            share = r["remote_write_share"]
            c.add_row(f"{r['ranks']}x{r['threads']}", _fmt(r["time_mpi_s"], ".3g"),
                      _fmt(r["speedup_mpi"], ".2f"), _fmt(r["time_mbc_s"], ".3g"),
                      _fmt(r["speedup_mbc"], ".2f"), _fmt(r["ratio"], ".2f"),
                      _fmt(share if share is None else 100 * share, ".1f"),
                      r["transport"] or "-")
        console.print(c)
        if any(r["direct_available"] == 0 for r in comp if r["ranks"] > 1):
            console.print("[dim]The direct remote write (process_vm_writev) was not available: "
                          "every MBC message went through the FIFOs.[/dim]")
    if any(smp.get("oversubscribed", smp["plan"]["oversubscribed"])
           for smp in doc["samples"]):
        cores = p.get("cores") or p.get("slots")
        console.print(f"{OVER_MARK} oversubscribed: more ranks x threads than the {cores} "
                      "cores; the time shows contention, not scaling (left out of the "
                      "speed-up lines of the plot).", markup=False)
    if p.get("skipped"):
        console.print("Not run (more ranks x threads than the cores; ask with "
                      "--oversubscribe or explicit --ranks/--threads): "
                      + ", ".join(f"{r}x{t}" for r, t in p["skipped"]), markup=False)


def plot(doc: dict, path) -> Path | None:
    """Draw speed-up against cores (one line per thread count, with the
    ideal line) and the stacked compute / comm / sync breakdown per
    configuration (the COMPaS paper's Figs. 8-13); return the PNG path."""
    rows = doc["summary"]["rows"]
    if not rows:
        return None
    from . import plot as tplot  # matplotlib only when a plot is drawn

    fig, axes = tplot.figure(ncols=2)
    ax = axes[0][0]
    hollow = False
    for i, th in enumerate(doc["params"]["threads"]):
        colour = f"C{i}"
        pts = sorted((r["cores"], r["speedup"]) for r in rows if r["threads"] == th
                     and r["speedup"] is not None and not r.get("oversubscribed"))
        over = sorted((r["cores"], r["speedup"]) for r in rows if r["threads"] == th
                      and r["speedup"] is not None and r.get("oversubscribed"))
        if pts:
            ax.plot([c for c, _ in pts], [v for _, v in pts], marker="o", color=colour,
                    label=f"{th} thread{'s' if th > 1 else ''}/rank")
        if over:  # not joined to the line: contention, not scaling
            ax.plot([c for c, _ in over], [v for _, v in over], linestyle="none", marker="o",
                    markerfacecolor="none", color=colour)
            hollow = True
    if hollow:
        ax.plot([], [], linestyle="none", marker="o", markerfacecolor="none", color="grey",
                label="oversubscribed (not scaling)")
    noisy = [(r["cores"], r["speedup"]) for r in rows if r.get("noisy") and r["speedup"]]
    if noisy:  # the median run time's 95 % CI stayed wider than +-5 %
        ax.scatter([c for c, _ in noisy], [v for _, v in noisy], s=90, facecolors="none",
                   edgecolors="red", zorder=3, label="noisy (~)")
    top = max(r["cores"] for r in rows)
    ax.plot([1, top], [1, top], color="grey", linestyle="--", label="ideal")
    ax.set_xlabel("cores (ranks x threads)")
    ax.set_ylabel("speed-up")
    ax.set_title(f"{doc['params']['app']}: speed-up")
    ax.legend()
    ax = axes[0][1]
    labels = [f"{r['ranks']}x{r['threads']}" + ("~" if r.get("noisy") else "") for r in rows]
    bottom = [0.0] * len(rows)
    hatch = ["//" if r.get("oversubscribed") else "" for r in rows]
    for phase in PHASES:
        vals = [r[f"{phase}_s"] or 0.0 for r in rows]
        for bar, h in zip(ax.bar(labels, vals, bottom=bottom, label=phase), hatch):
            bar.set_hatch(h)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("ranks x threads (hatched: oversubscribed)" if any(hatch)
                  else "ranks x threads")
    ax.set_ylabel("seconds per rank")
    ax.set_title("time breakdown")
    ax.legend()
    return tplot.save(fig, path)


def main(args, argv: list[str]) -> int:
    """``tiers bench``: run the grid, print the tables, write the document
    (--json) and the plot (--plot, or next to --json); return the exit status."""
    from .render import console as tiers_console, plural
    console = tiers_console()
    try:
        extra = shlex.split(args.app_args or "")
    except ValueError as exc:
        raise TiersError(f"bad --app-args: {exc}") from None

    def progress(r, t, mode=None):
        over = f" over {mode.upper()}" if mode else ""
        console.print(f"[dim]running {args.app} on {plural(r, 'rank')} x "
                      f"{plural(t, 'thread')}{over}...[/dim]")

    doc = measure(args.app, args.ranks, args.threads,
                  oversubscribe=getattr(args, "oversubscribe", False),
                  quick=args.quick, klass=args.klass, size=args.size, iters=args.iters,
                  overlap=args.overlap, pin=args.pin, app_extra=extra,
                  launcher=args.launcher, hostfile=args.hostfile,
                  vcluster=getattr(args, "vcluster", False),
                  comm=getattr(args, "comm", None),
                  launcher_args=args.launcher_args or (), timeout=args.timeout,
                  progress=progress, argv=argv)
    render(doc, console)
    if args.json:
        result.write(doc, args.json)
        console.print(f"Wrote {args.json}")
    from . import plot as tplot

    plot_path = tplot.default_plot_path(args.json, getattr(args, "plot", None))
    if plot_path is not None:
        with tplot.stamping(doc):
            written = plot(doc, plot_path)
        if written is not None:
            console.print(f"Wrote {written}")
    return 0
