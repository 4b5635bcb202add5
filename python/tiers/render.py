"""How every command prints: one Console, four output formats, one unit style.

``console()`` returns the rich Console a command prints on.  What it does
with what is printed depends on where standard output goes and on
``--format``:

* On a terminal, tables fit the terminal's width (rich wraps cells).
* Off a terminal (a pipe, a file, a CI log) nothing is ever cut or wrapped:
  the console is as wide as the widest line, so a table has its natural width.
* ``--format table`` (default) draws rich tables with boxes; ``plain`` prints
  each table as aligned columns without box characters and no colours (good
  in logs and diffs); ``csv`` prints each table as CSV after a ``# title``
  line, and everything that is not a table goes to standard error, so that
  standard output holds only the tables; ``json`` prints the result document
  on standard output.
* When the result document goes to standard output (``--json -`` or
  ``--format json``), everything a command would print for people goes to
  standard error instead, so that standard output is the document alone.

Where standard output cannot encode the characters tiers prints (an ASCII
locale, ``PYTHONIOENCODING=ascii``), ``µ`` becomes ``u``, ``±`` ``+/-`` and so
on, and table boxes are drawn in ASCII.  ``MICRO`` is the micro sign to put in
units (``f"{MICRO}s"``).  Rates are MB/s with MB = 10**6 bytes throughout.

A command's ``render(doc, console)`` does not need to know any of this: the
console converts the tables it is given.
"""

from __future__ import annotations

import csv
import io
import sys

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

#: The output formats of ``--format``.
FORMATS = ("table", "plain", "csv", "json")

#: Width of the console when standard output is not a terminal: wider than
#: any table tiers prints, so that nothing is wrapped or cut.
NATURAL_WIDTH = 100_000

#: Width of horizontal rules (section headings) off a terminal.
RULE_WIDTH = 80

# Replacements for characters an ASCII-only stream cannot take.
_ASCII = str.maketrans({"µ": "u", "μ": "u", "±": "+/-", "σ": "sigma", "×": "x", "…": "...",
                        "–": "-", "—": "-", "≈": "~", "≤": "<=", "≥": ">=", "→": "->",
                        "←": "<-", "·": ".", "°": " deg", "\u00a0": " "})

_state = {"format": "table", "doc_on_stdout": False}


def _encodes(text: str, stream) -> bool:
    """Return whether ``stream``'s encoding can encode ``text``."""
    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


#: The micro sign for units: "µ", or "u" where standard output cannot encode it.
MICRO = "µ" if _encodes("µ", sys.stdout) else "u"


def ascii_fallback(text: str) -> str:
    """Return ``text`` with the characters tiers prints (µ, ±, σ, ×, ...)
    replaced by ASCII spellings."""
    return text.translate(_ASCII)


def plural(n: int, word: str, many: str | None = None) -> str:
    """Return ``"1 thread"``, ``"2 threads"``: the count and the word in the
    right number (``many``: the plural when it is not ``word + "s"``)."""
    form = word if n == 1 else (many or word + "s")
    return f"{n:,} {form}" if isinstance(n, int) else f"{n} {form}"


class _Fallback:
    """A text stream that writes through ``raw``, spelling out in ASCII what
    ``raw``'s encoding cannot encode (and replacing whatever is left)."""

    def __init__(self, raw):
        self._raw = raw

    def write(self, text: str) -> int:
        encoding = getattr(self._raw, "encoding", None) or "ascii"
        safe = ascii_fallback(text).encode(encoding, "replace").decode(encoding)
        return self._raw.write(safe)

    def __getattr__(self, name):
        return getattr(self._raw, name)


def setup_streams() -> None:
    """Make standard output and error safe for any locale: where they
    cannot encode what tiers prints, unencodable characters are replaced
    instead of raising.  Returns nothing."""
    for stream in (sys.stdout, sys.stderr):
        if not _encodes("µ±σ×…", stream) and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):
                pass


def configure(fmt: str = "table", *, doc_on_stdout: bool = False) -> None:
    """Set the output format of this run (one of FORMATS) and whether the
    result document goes to standard output (then the consoles print on
    standard error).  Returns nothing."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    _state["format"] = fmt
    _state["doc_on_stdout"] = doc_on_stdout or fmt == "json"


def configure_from_args(args) -> None:
    """Configure from a parsed command line: ``--format`` and ``--json``.
    ``--format json`` sends the document to standard output (``--json -``).
    Raise TiersError (exit status 2) when ``--format json`` meets ``--json FILE``."""
    from .errors import TiersError

    fmt = getattr(args, "format", None) or "table"
    json_path = getattr(args, "json", None)
    if fmt == "json":
        if json_path not in (None, "-"):
            raise TiersError("--format json writes the document on standard output; "
                             f"give it or --json {json_path}, not both", code=2)
        args.json = "-"
        json_path = "-"
    configure(fmt, doc_on_stdout=json_path == "-")


def current_format() -> str:
    """Return the output format of this run: "table", "plain", "csv" or "json"."""
    return _state["format"]


def doc_on_stdout() -> bool:
    """Return whether the result document of this run goes to standard output."""
    return _state["doc_on_stdout"]


# ---------------------------------------------------------------------------
# Tables as plain text and as CSV


def cell_text(cell) -> str:
    """Return the text of one table cell or heading without styles: markup
    strings are parsed, Text objects give their plain text, other
    renderables are rendered at their natural width."""
    if cell is None:
        return ""
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        try:
            return Text.from_markup(cell).plain
        except Exception:  # noqa: BLE001 - rich raises MarkupError on stray brackets
            return cell
    buf = io.StringIO()
    Console(file=buf, width=NATURAL_WIDTH, color_system=None, highlight=False).print(cell)
    return buf.getvalue().rstrip("\n")


def table_cells(table: Table) -> tuple[list[str], list[list[str]]]:
    """Return a rich Table's headings and rows as plain strings."""
    headers = [cell_text(col.header) for col in table.columns]
    columns = [[cell_text(c) for c in col._cells] for col in table.columns]
    nrows = max((len(c) for c in columns), default=0)
    rows = [[col[i] if i < len(col) else "" for col in columns] for i in range(nrows)]
    return headers, rows


def _justify(text: str, width: int, how: str) -> str:
    if how == "right":
        return text.rjust(width)
    if how == "center":
        return text.center(width)
    return text.ljust(width)


def table_to_plain(table: Table) -> str:
    """Return a rich Table as aligned columns of plain text: the title, the
    headings underlined with dashes, one line per row (cells of several
    lines take several lines), columns two spaces apart; no box characters."""
    headers, rows = table_cells(table)
    how = [col.justify for col in table.columns]
    split_rows = [[cell.split("\n") for cell in row] for row in rows]
    split_head = [h.split("\n") for h in headers] if table.show_header else []
    widths = [0] * len(headers)
    for row in ([split_head] if split_head else []) + split_rows:
        for i, lines in enumerate(row):
            widths[i] = max(widths[i], *(len(x) for x in lines))

    def emit(row: list[list[str]]) -> list[str]:
        height = max((len(lines) for lines in row), default=1)
        out = []
        for k in range(height):
            parts = [_justify(lines[k] if k < len(lines) else "", widths[i], how[i])
                     for i, lines in enumerate(row)]
            out.append("  ".join(parts).rstrip())
        return out

    lines = []
    if table.title:
        lines.append(cell_text(table.title))
    if split_head:
        lines.extend(emit(split_head))
        lines.append("  ".join("-" * w for w in widths))
    for row in split_rows:
        lines.extend(emit(row))
    if table.caption:
        lines.append(cell_text(table.caption))
    return "\n".join(lines)


def table_to_csv(table: Table, number: int = 1) -> str:
    """Return a rich Table as CSV after a ``# title`` line (``# table N``
    when it has no title); lines of a multi-line cell are joined by " / "."""
    headers, rows = table_cells(table)
    buf = io.StringIO()
    title = cell_text(table.title).replace("\n", " ") if table.title else f"table {number}"
    buf.write(f"# {title}\n")
    writer = csv.writer(buf, lineterminator="\n")
    if table.show_header:
        writer.writerow([h.replace("\n", " ") for h in headers])
    for row in rows:
        writer.writerow([c.replace("\n", " / ") for c in row])
    return buf.getvalue().rstrip("\n")


# ---------------------------------------------------------------------------
# The console


class TiersConsole(Console):
    """A rich Console that prints tables in the run's format and, off a
    terminal, at their natural width.  ``tiers_format`` is the format it
    prints in; ``natural`` whether it never wraps (not a terminal)."""

    def __init__(self, *, tiers_format: str | None = None, **kw):
        fmt = tiers_format or _state["format"]
        if fmt == "json":  # the document is on stdout; people's text is as for a table
            fmt = "table"
        if fmt in ("plain", "csv"):
            kw.setdefault("color_system", None)
            kw.setdefault("highlight", False)
        width_given = kw.get("width") is not None
        if not kw.get("file") and not kw.get("stderr") and _state["doc_on_stdout"]:
            kw["stderr"] = True
        if kw.get("file") is None:
            stream = sys.stderr if kw.get("stderr") else sys.stdout
            if not _encodes("µ±σ×…", stream):
                kw["file"] = _Fallback(stream)
                kw.pop("stderr", None)
        super().__init__(**kw)
        self.tiers_format = fmt
        # plain and csv are for logs and files: never wrapped, even on a terminal
        self.natural = fmt in ("plain", "csv") or (not width_given and not self.is_terminal)
        if self.natural:
            self.width = NATURAL_WIDTH
        self._tables = 0
        self._aside: Console | None = None

    def on_broken_pipe(self) -> None:
        """The reader went away (``tiers topo | head``): stop printing and let
        the command line end quietly (rich would exit with status 1)."""
        self.quiet = True
        raise BrokenPipeError("the output pipe was closed")

    def _side(self) -> Console:
        """The console for what is not a table in csv format: standard error."""
        if self._aside is None:
            self._aside = TiersConsole(tiers_format="plain", stderr=True)
        return self._aside

    def print(self, *objects, **kw):  # noqa: A003 - rich's name
        """Print as rich does, except that tables are drawn in this
        console's format and nothing is cut off a terminal."""
        if self.natural:
            kw.setdefault("crop", False)
        if not objects:
            if self.tiers_format == "csv":
                return None
            return super().print(**kw)
        for obj in objects:
            self._print_one(obj, kw)
        return None

    def _print_one(self, obj, kw: dict) -> None:
        fmt = self.tiers_format
        if isinstance(obj, Table) and fmt in ("plain", "csv"):
            self._tables += 1
            text = table_to_plain(obj) if fmt == "plain" else table_to_csv(obj, self._tables)
            if fmt == "csv" and self._tables > 1:
                text = "\n" + text
            super().print(Text(text), no_wrap=True, crop=False, soft_wrap=True,
                          highlight=False)
            return
        if fmt == "csv":
            self._side().print(obj, **kw)
            return
        if isinstance(obj, Table) and self.natural and obj.title:
            # rich wraps a title to the table's width; off a terminal it
            # gets a line of its own, as wide as it is
            title, obj.title = obj.title, None
            try:
                super().print(title if isinstance(title, Text) else
                              Text.from_markup(str(title), style=obj.title_style or
                                               "table.title"),
                              no_wrap=True, crop=False, soft_wrap=True)
                super().print(obj, **kw)
            finally:
                obj.title = title
            return
        if isinstance(obj, Rule):
            if fmt == "plain":
                title = cell_text(obj.title)
                line = f"== {title} ==" if title else "=" * RULE_WIDTH
                super().print(Text(line), no_wrap=True, crop=False, soft_wrap=True)
                return
            if self.natural:
                kw = dict(kw, width=RULE_WIDTH)
        super().print(obj, **kw)


def console(**kw) -> TiersConsole:
    """Return the Console every command prints on (keyword arguments go to
    rich's Console): natural width off a terminal, the terminal's width on
    one, tables drawn in the ``--format`` of this run, and standard error
    instead of standard output when the result document goes there."""
    return TiersConsole(**kw)


class RecordingConsole(Console):
    """A Console that keeps what is printed instead of drawing it:
    ``blocks`` is a list of ``("table", Table)``, ``("rule", title)`` and
    ``("text", str)`` in print order.  Used to turn a command's render
    function into HTML."""

    def __init__(self):
        super().__init__(file=io.StringIO(), width=NATURAL_WIDTH, color_system=None,
                         highlight=False)
        self.tiers_format = "table"
        self.natural = True
        self.blocks: list[tuple[str, object]] = []

    def print(self, *objects, **kw):  # noqa: A003 - rich's name
        """Record ``objects``: tables and rules as they are, the rest as text."""
        if not objects:
            self.blocks.append(("text", ""))
        for obj in objects:
            if isinstance(obj, Table):
                self.blocks.append(("table", obj))
            elif isinstance(obj, Rule):
                self.blocks.append(("rule", cell_text(obj.title)))
            else:
                self.blocks.append(("text", cell_text(obj)))
