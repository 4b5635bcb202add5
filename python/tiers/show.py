"""``tiers show FILE.json...``: print result documents again.

Every result document names its kind in ``schema`` (``tiers.<kind>/1``).
``KINDS`` maps each kind to the part that made it: a title, the part's
``render(doc, console)`` (the function the command itself printed with) and
its ``plot(doc, path)`` when it has one.  ``tiers report`` uses the same
table, so the terminal, the report and the command agree.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rich.rule import Rule
from rich.text import Text

from . import result
from .errors import TiersError


@dataclass(frozen=True)
class Kind:
    """How to show one kind of document: ``title``; ``module`` and the
    names of its render and plot functions (plot: None when it has none)."""

    title: str
    module: str
    render: str = "render"
    plot: str | None = None

    def renderer(self) -> Callable:
        """Return the part's ``render(doc, console)``."""
        return getattr(importlib.import_module(self.module, __package__), self.render)

    def plotter(self) -> Callable | None:
        """Return the part's ``plot(doc, path)``, or None."""
        if self.plot is None:
            return None
        return getattr(importlib.import_module(self.module, __package__), self.plot)


def _render_trace(doc: dict, console) -> None:
    """Print a ``tiers.trace/1`` summary with the trace part's renderer."""
    from . import trace

    fn = getattr(trace, "render", None)
    if fn is not None:
        fn(doc, console)
        return
    for line in trace.format_stats(doc).splitlines():
        console.print(Text(line), no_wrap=True, crop=False, soft_wrap=True)


def _render_vcluster(doc: dict, console) -> None:
    """Print a ``tiers.vcluster/1`` document as ``tiers vcluster status`` does."""
    from . import vcluster

    if isinstance(doc.get("summary"), dict):  # the envelope: the state is the summary
        doc = doc["summary"]
    state = doc.get("summary") if isinstance(doc.get("summary"), dict) else doc
    if "removed" in state:  # what 'down' removed
        console.print("removed: " + (", ".join(state["removed"]) or "nothing"), markup=False)
        for kept in state.get("kept") or []:
            console.print(f"left alone: {kept}", markup=False)
        return
    if "nodes" not in state:
        console.print("no virtual cluster was up")
        return
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        vcluster._print_state(state)  # noqa: SLF001 - the command's own printer
    for line in buf.getvalue().splitlines():
        console.print(Text(line), no_wrap=True, crop=False, soft_wrap=True)


#: Every kind of result document and how to show it.
KINDS: dict[str, Kind] = {
    "topo": Kind("Machine model (tiers topo)", ".topo"),
    "probe.mem": Kind("Memory bandwidth (tiers probe mem)", ".probe.mem", plot="plot"),
    "probe.sync": Kind("Synchronisation costs (tiers probe sync)", ".probe.sync", plot="plot"),
    "probe.net": Kind("Messages between processes (tiers probe net)", ".probe.net", plot="plot"),
    "probe.noise": Kind("Machine noise (tiers probe noise)", ".noise"),
    "map": Kind("Placement (tiers map)", ".map"),
    "bench": Kind("Reference application (tiers bench)", ".bench", plot="plot"),
    "trace": Kind("Trace summary (tiers trace)", ".show", render="_render_trace"),
    "mbc.run": Kind("Messages under memory-based messaging (tiers mbc run)", ".mbcrun"),
    "tune": Kind("Placement measured (tiers tune)", ".tune"),
    "survey": Kind("Survey index (tiers survey)", ".survey"),
    "vcluster": Kind("Virtual cluster (tiers vcluster)", ".show", render="_render_vcluster"),
}


def kind_of(doc: dict) -> str:
    """Return the kind of a document: ``"probe.mem"`` for ``tiers.probe.mem/1``."""
    schema = str(doc.get("schema", ""))
    return schema[len("tiers."):].rsplit("/", 1)[0] if schema.startswith("tiers.") else ""


def render_doc(doc: dict, console) -> bool:
    """Print ``doc`` on ``console`` with its part's render function; return
    False (printing nothing) when tiers has no renderer for its kind."""
    kind = KINDS.get(kind_of(doc))
    if kind is None:
        return False
    try:
        kind.renderer()(doc, console)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise TiersError(f"the {kind_of(doc)} document is incomplete or from another "
                         f"version of tiers ({type(exc).__name__}: {exc})") from None
    return True


def main(args, argv: list[str]) -> int:
    """``tiers show``: print each document; a document of a kind tiers
    cannot show gets one line.  Return 0, or 1 when some could not be shown."""
    from .render import console as tiers_console

    console = tiers_console()
    docs = [(Path(f), result.read(f)) for f in args.files]  # unreadable: one-line error
    status = 0
    for path, doc in docs:
        if len(docs) > 1:
            console.print(Rule(f"{path} ({doc['schema']})"))
        try:
            shown = render_doc(doc, console)
        except TiersError as exc:
            raise TiersError(f"{path}: {exc}") from None
        if not shown:
            print(f"tiers: error: {path}: tiers cannot show {doc['schema']} documents (it "
                  f"shows {', '.join(KINDS)})", file=sys.stderr)
            status = 1
    return status
