"""``tiers survey``: the whole picture of a machine in one folder.

A survey runs a list of sections -- the topology report, then the quick mode
of every probe -- writes each section's result document (and plot) into the
output folder, prints each section's summary, and writes ``survey.json``, an
index of what ran, what it produced and how long it took.  A section that
fails is reported and the others still run.  Later parts of tiers add their
sections to ``SECTIONS``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.rule import Rule

from . import result
from .errors import TiersError


@dataclass(frozen=True)
class Section:
    """One step of the survey.

    ``measure(quick)`` returns a result document; ``render(doc, console)``
    prints it; ``plot(doc, path)``, when given, draws it.
    """

    name: str
    title: str
    measure: Callable[[bool], dict]
    render: Callable[[dict, Console], None]
    plot: Callable[[dict, Path], object] | None = None


def _topo_section() -> Section:
    from . import topo

    return Section("topo", "Machine model (hwloc)", lambda quick: topo.measure("this"),
                   topo.render)


def _mem_section() -> Section:
    from .probe import mem

    return Section("probe-mem", "Memory bandwidth (tiers probe mem)",
                   lambda quick: mem.measure(quick=quick), mem.render, mem.plot)


def _sync_section() -> Section:
    from .probe import sync

    return Section("probe-sync", "Synchronisation costs (tiers probe sync)",
                   lambda quick: sync.measure(quick=quick), sync.render, sync.plot)


def _net_section() -> Section:
    from .probe import net

    return Section("probe-net", "Messages between processes (tiers probe net)",
                   lambda quick: net.measure(quick=quick, all_pairs=True), net.render, net.plot)


#: The sections in the order they run; each entry builds its Section lazily.
SECTIONS: list[Callable[[], Section]] = [_topo_section, _mem_section, _sync_section, _net_section]


def run(out_dir: str | Path, *, quick: bool = True, console: Console | None = None,
        argv: list[str] | None = None) -> dict:
    """Run every section, write its files into ``out_dir`` and return the
    survey index document (schema ``tiers.survey/1``); its ``summary`` says
    how many sections ran and failed."""
    console = console or Console()
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TiersError(f"cannot create output folder {out}: {exc.strerror or exc}") from None

    records = []
    sections = [build() for build in SECTIONS]
    progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                        console=console, transient=True)
    with progress:
        task = progress.add_task("survey", total=len(sections))
        for section in sections:
            progress.update(task, description=section.title)
            records.append(_run_section(section, out, quick, progress.console))
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
    result.write(doc, out / "survey.json")
    return doc


def _run_section(section: Section, out: Path, quick: bool, console: Console) -> dict:
    """Run one section; print it; return its index record."""
    record = {"name": section.name, "title": section.title, "status": "ok",
              "json": None, "plot": None, "seconds": 0.0, "error": None}
    start = time.monotonic()
    try:
        doc = section.measure(quick)
        json_path = result.write(doc, out / f"{section.name}.json")
        record["json"] = json_path.name
        if section.plot is not None:
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


def main(args, argv: list[str]) -> int:
    """``tiers survey``: run the survey and print where its files are;
    return 0 when every section succeeded, 1 otherwise."""
    console = Console()
    doc = run(args.out, quick=not args.full, console=console, argv=argv)
    summary = doc["summary"]
    console.print(Rule("Files"))
    for rec in doc["samples"]:
        files = ", ".join(f for f in (rec["json"], rec["plot"]) if f) or "-"
        console.print(f"{rec['title']:<45} {rec['status']:<7} {rec['seconds']:7.1f} s  {files}")
    console.print(f"Results are in {Path(args.out).resolve()} (index: survey.json)")
    if summary["failed"]:
        console.print(f"[red]{len(summary['failed'])} section(s) failed: "
                      f"{', '.join(summary['failed'])}[/red]")
        return 1
    return 0
