"""``tiers survey``: the whole picture of a machine in one folder.

A survey runs a list of sections -- the topology report, then the quick mode
of every probe -- writes each section's result document (and plot) into the
output folder, prints each section's summary, and writes ``survey.json``, an
index of what ran, what it produced and how long it took.  A section that
fails is reported and the others still run.  Later parts of tiers add their
sections to ``SECTIONS``.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.rule import Rule
from rich.table import Table

from . import result
from .errors import TiersError


@dataclass(frozen=True)
class Section:
    """One step of the survey.

    ``measure(quick, out)`` returns a result document (``out``: the survey
    folder, for sections that leave more files, or read an earlier
    section's); ``render(doc, console)`` prints it; ``plot(doc, path)``,
    when given, draws it.
    """

    name: str
    title: str
    measure: Callable[[bool, Path], dict]
    render: Callable[[dict, Console], None]
    plot: Callable[[dict, Path], object] | None = None


def _topo_section() -> Section:
    from . import topo

    return Section("topo", "Machine model (hwloc)", lambda quick, out: topo.measure("this"),
                   topo.render)


def _mem_section() -> Section:
    from .probe import mem

    return Section("probe-mem", "Memory bandwidth (tiers probe mem)",
                   lambda quick, out: mem.measure(quick=quick), mem.render, mem.plot)


def _sync_section() -> Section:
    from .probe import sync

    return Section("probe-sync", "Synchronisation costs (tiers probe sync)",
                   lambda quick, out: sync.measure(quick=quick), sync.render, sync.plot)


def _net_section() -> Section:
    from .probe import net

    return Section("probe-net", "Messages between processes (tiers probe net)",
                   lambda quick, out: net.measure(quick=quick, all_pairs=True), net.render, net.plot)


#: The built-in application the last sections run, trace and map, and its
#: run: 8 ranks on a 2 x 2 x 2 process grid (oversubscribed here), a
#: small flat domain whose z faces are 4x the x faces, so that where ranks
#: sit matters; no verification gather, so the matrix is the halo exchange
#: alone.  The map section places it on MAP_NODES nodes like this one.
APP = "jacobi3d"
APP_RANKS = 8
APP_TRACED = ["--size", "48,24,12", "--grid", "2,2,2", "--iters", "20", "--no-verify"]
APP_STENCIL = "3d:2,2,2:24,12,6"
MAP_NODES = 4
TRACE_FOLDER = "trace-jacobi3d"
#: grid points per axis of the quick survey's bench cells (as the app's default)
QUICK_APP_SIZE = 96
#: time limit per bench cell of the repeat-until rule: {quick: seconds}
BENCH_CELL_S = {True: 8.0, False: 30.0}


def _bench_section() -> Section:
    from . import bench

    def measure(quick: bool, out: Path) -> dict:
        # quick: 96^3 points (the app's default size), 40 sweeps (about 40 ms
        # a run on one core here).  Not 64^3: split over 2 ranks, each rank's
        # two grids were 1.2 MB each -- below one 2 MiB huge page, so in 4 KiB
        # pages that land anywhere -- and 2.4 MB together, about a core's L2
        # (2 MiB here): how well they fitted changed from launch to launch,
        # and the 2x1 cell's median moved by 28 % between quiet surveys
        # (1x2, whose threads share one process's huge-page grids, 5 %).
        # At 96^3 every cell's grids are several times a core's L2.
        size, iters = (QUICK_APP_SIZE, 40) if quick else (None, None)
        # every cell repeats by the statistics layer's rule (median run time,
        # until its 95 % CI is within +-5 %); quick shortens the time per cell
        return bench.measure(APP, ranks=(1, 2), threads=(1, 2), size=size, iters=iters,
                             timeout=300 if quick else None,
                             repeat_time_s=BENCH_CELL_S[quick])

    return Section("bench-jacobi3d", "jacobi3d flat vs hybrid (tiers bench)", measure,
                   bench.render, bench.plot)


def _app_command() -> list[str]:
    """The launch line of the traced application run."""
    from . import launch, native

    return launch.build_command(None, [str(native.tool_path(f"tiers-{APP}")), *APP_TRACED,
                                       "--threads", "1"], APP_RANKS, oversubscribe=True)


def _trace_section() -> Section:
    from . import trace

    def measure(quick: bool, out: Path) -> dict:
        rc, doc, _ = trace.run(_app_command(), out=str(out / TRACE_FOLDER), budget="4M",
                               force=True, stream=False, timeout=300)
        if rc != 0:
            raise TiersError(f"the traced {APP} run exited with code {rc}")
        return doc

    def render(doc: dict, console: Console) -> None:
        from rich.table import Table

        s = doc["summary"]
        cm = s["comm_matrix"]
        console.print(f"tiers-{APP} {' '.join(APP_TRACED)} on {s['ranks']} ranks: "
                      f"{s['p2p_messages']} "
                      f"messages, {s['p2p_bytes']} B point to point, receiver-first share "
                      + ("-" if s.get("receiver_first_share") is None else
                         f"{100 * s['receiver_first_share']:.1f} %")
                      + f"; trace in {TRACE_FOLDER}/")
        console.print("bytes sent (row: from rank, column: to rank)")
        t = Table()
        t.add_column("rank", justify="right")
        for j in range(cm["ranks"]):
            t.add_column(str(j), justify="right")
        for i, row in enumerate(cm["bytes"]):
            t.add_row(str(i), *[str(v) if v else "." for v in row])
        console.print(t)

    return Section("trace-jacobi3d", "What jacobi3d communicates (tiers trace)", measure, render)


def _map_section() -> Section:
    from . import map as tmap, topo

    def measure(quick: bool, out: Path) -> dict:
        summary = out / TRACE_FOLDER / "summary.json"
        # the traced matrix when the trace section ran; the same decomposition
        # as a stencil otherwise
        comm, stencil = (str(summary), None) if summary.is_file() else (None, APP_STENCIL)
        g = tmap.load_graph(comm, stencil)
        node = topo.measure("this")
        nodes = MAP_NODES
        res = tmap.plan(g, node, nodes=nodes, oversubscribe=True)
        params = {"comm": comm, "stencil": stencil, "machine": "this", "nodes": nodes,
                  "oversubscribe": True}
        return tmap.document(g, res, params, None)

    return Section("map-jacobi3d", f"Placing jacobi3d on {MAP_NODES} such nodes (tiers map)", measure,
                   tmap.render)


#: The sections in the order they run; each entry builds its Section lazily.
SECTIONS: list[Callable[[], Section]] = [_topo_section, _mem_section, _sync_section, _net_section,
                                         _bench_section, _trace_section, _map_section]


def run(out_dir: str | Path, *, quick: bool = True, console: Console | None = None,
        argv: list[str] | None = None) -> dict:
    """Run every section, write its files into ``out_dir`` and return the
    survey index document (schema ``tiers.survey/1``); its ``summary`` says
    how many sections ran and failed."""
    from .render import console as tiers_console, current_format

    console = console or tiers_console()
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TiersError(f"cannot create output folder {out}: {exc.strerror or exc}") from None

    from . import noise
    noise_block = noise.check_quietly(quick)  # first: is the machine quiet enough?
    if noise_block:
        console.print(noise_block["summary"], markup=False)
    records = []
    sections = [build() for build in SECTIONS]
    progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                        console=console, transient=True)
    # the bar only where it is drawn over a terminal's table output
    live = console.is_terminal and current_format() == "table"
    with progress if live else contextlib.nullcontext():
        task = progress.add_task("survey", total=len(sections))
        for section in sections:
            progress.update(task, description=section.title)
            records.append(_run_section(section, out, quick, console, noise_block,
                                        argv=argv))
            progress.advance(task)

    failed = [r["name"] for r in records if r["status"] != "ok"]
    doc = result.new_document(
        "survey",
        params={"out": str(out), "quick": quick},
        samples=records,
        summary={"sections": len(records), "failed": failed,
                 "seconds": round(sum(r["seconds"] for r in records), 3)},
        argv=argv,
    )
    noise.attach(doc, noise_block)
    result.write(doc, out / "survey.json")
    return doc


def _run_section(section: Section, out: Path, quick: bool, console: Console,
                 noise_block: dict | None = None, *, argv: list[str] | None = None) -> dict:
    """Run one section; print it; return its index record.  ``argv``, the
    survey's command line, becomes the command of the section's document."""
    record = {"name": section.name, "title": section.title, "status": "ok",
              "json": None, "plot": None, "seconds": 0.0, "error": None}
    start = time.monotonic()
    try:
        doc = section.measure(quick, out)
        if argv and isinstance(doc, dict):
            doc["command"] = list(argv)
        if noise_block and isinstance(doc, dict):
            from . import noise
            noise.attach(doc, noise_block)
        json_path = result.write(doc, out / f"{section.name}.json")
        record["json"] = json_path.name
        if section.plot is not None:
            from . import plot as tplot

            with tplot.stamping(doc):
                plot_path = section.plot(doc, out / f"{section.name}.png")
            record["plot"] = Path(plot_path).name if plot_path else None
        console.print(Rule(section.title))
        section.render(doc, console)
    except TiersError as exc:
        record["status"] = "failed"
        record["error"] = str(exc)
        console.print(Rule(section.title))
        console.print(f"[red]failed:[/red] {exc}")
    record["seconds"] = round(time.monotonic() - start, 3)
    return record


def files_table(doc: dict, title: str | None = "Files") -> Table:
    """Return the table of a survey's sections: title, status, seconds and
    the files each one wrote."""
    t = Table(title=title, title_justify="left")
    for col, justify in (("section", "left"), ("status", "left"), ("seconds", "right"),
                         ("files", "left")):
        t.add_column(col, justify=justify)
    for rec in doc["samples"]:
        files = ", ".join(f for f in (rec.get("json"), rec.get("plot")) if f) or "-"
        t.add_row(rec["title"], rec["status"], f"{rec['seconds']:.1f}", files)
    return t


def render(doc: dict, console: Console) -> None:
    """Print a ``tiers.survey/1`` index: its sections, their status and files,
    and the error of each section that failed.  Returns nothing."""
    console.print(files_table(doc))
    for rec in doc["samples"]:
        if rec.get("error"):
            console.print(f"{rec['name']}: {rec['error']}", markup=False)


def main(args, argv: list[str]) -> int:
    """``tiers survey``: run the survey, write report.html beside its JSON
    (unless --no-report), print where its files are and end with the
    report's path; return 0 when every section succeeded, 1 otherwise."""
    from .render import console as tiers_console, plural

    console = tiers_console()
    doc = run(args.out, quick=not args.full, console=console, argv=argv)
    summary = doc["summary"]
    console.print(Rule("Files"))
    console.print(files_table(doc, title=None))
    console.print(f"Results are in {Path(args.out).resolve()} (index: survey.json)",
                  markup=False)
    report_path = None
    if not getattr(args, "no_report", False):
        from . import report

        report_path = report.write_report([args.out], Path(args.out) / "report.html")
    status = 0
    if summary["failed"]:
        console.print(f"[red]{plural(len(summary['failed']), 'section')} failed: "
                      f"{', '.join(summary['failed'])}[/red]")
        status = 1
    if report_path is not None:
        console.print(f"Report: {Path(report_path).resolve()}", markup=False)
    return status
