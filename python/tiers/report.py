"""``tiers report DIR|FILE... -o report.html``: one self-contained HTML file.

The report is built from result documents only, so it can be rebuilt later
or on another machine.  It has a header (hosts, date, tiers version, the
commands that made the documents), a table of contents, and one section per
document: what ran where (command, machine, versions), its warnings (the
document's ``warnings``, its machine-noise check ``noise`` and every figure
flagged ``"reliable": false``), its tables and text as the command printed
them -- the part's own ``render`` function is run on a recording console and
its rich tables become HTML tables -- and its plot, redrawn from the
document by the part's ``plot`` function and inlined as PNG.  The CSS is
inline and nothing is loaded from anywhere else.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import shlex
import tempfile
from pathlib import Path

from . import __version__, result
from .errors import TiersError
from .render import RecordingConsole, cell_text, table_cells
from .show import KINDS, kind_of, render_doc

_CSS = """
:root { --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --bg2: #f6f8fa; --warn: #9a6700; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--fg); max-width: 1100px; margin: 0 auto; padding: 1.5em 2em 4em; }
h1 { font-size: 1.8em; margin: 0 0 .2em; }
h2 { font-size: 1.35em; border-bottom: 2px solid var(--line); padding-bottom: .2em;
     margin-top: 2.2em; }
h3 { font-size: 1.05em; margin: 1.4em 0 .4em; }
a { color: #0969da; text-decoration: none; }
a:hover { text-decoration: underline; }
.muted, .file { color: var(--muted); font-weight: normal; font-size: .85em; }
code, pre, td.num { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace;
                    font-size: .88em; }
pre { background: var(--bg2); padding: .6em .8em; border-radius: 6px;
      white-space: pre-wrap; overflow-wrap: anywhere; margin: .5em 0; }
table { border-collapse: collapse; margin: .6em 0 1em; }
caption { text-align: left; font-weight: 600; padding: .2em 0 .4em; white-space: nowrap; }
th, td { border: 1px solid var(--line); padding: .25em .6em; vertical-align: top; }
th { background: var(--bg2); text-align: left; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
td.c, th.c { text-align: center; }
table.meta th { width: 9em; }
table.meta td { font-size: .9em; }
nav ol { columns: 2; column-gap: 2em; padding-left: 1.5em; }
.warnings { border-left: 4px solid var(--warn); background: #fff8c5; padding: .4em 1em;
            margin: .8em 0; }
.warnings h3 { margin: .2em 0; color: var(--warn); }
.noise-quiet { border-left-color: #1a7f37; background: #dafbe1; }
.noise-quiet h3 { color: #1a7f37; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: .85em; }
.top { font-size: .8em; float: right; font-weight: normal; }
@media print {
  body { max-width: none; padding: 0; font-size: 11pt; }
  a { color: inherit; }
  .top { display: none; }
  h2 { break-after: avoid; }
  table, figure { break-inside: avoid; }
  pre { white-space: pre-wrap; }
}
"""


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _read_dir(folder: Path) -> list[tuple[Path, dict]]:
    """The documents of a folder: survey.json first, then its sections in
    the order the survey ran them, then any other document by name.  Files
    that are not tiers result documents are passed over."""
    docs: dict[Path, dict] = {}
    order: list[Path] = []
    survey = folder / "survey.json"
    if survey.is_file():
        doc = result.read(survey)
        docs[survey] = doc
        order.append(survey)
        for rec in doc.get("samples") or []:
            if isinstance(rec, dict) and rec.get("json"):
                order.append(folder / rec["json"])
    for path in sorted(folder.glob("*.json")):
        if path not in order:
            order.append(path)
    out = []
    for path in order:
        if path in docs:
            out.append((path, docs[path]))
            continue
        if not path.is_file():
            continue
        try:
            out.append((path, result.read(path)))
        except TiersError:
            continue  # a rankfile table, a plot's data...: not a result document
    return out


def collect(inputs: list[str | Path]) -> list[tuple[Path, dict]]:
    """Return the (path, document) pairs of ``inputs``: files are read as
    result documents (one-line TiersError otherwise), folders give the
    documents they hold.  Raise TiersError when there is none."""
    found: list[tuple[Path, dict]] = []
    seen = set()
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            pairs = _read_dir(path)
            if not pairs:
                raise TiersError(f"{path}: no tiers result documents in this folder")
        elif path.exists():
            pairs = [(path, result.read(path))]
        else:
            raise TiersError(f"{path}: no such file or folder")
        for p, doc in pairs:
            key = p.resolve()
            if key not in seen:
                seen.add(key)
                found.append((p, doc))
    return found


def unreliable(doc: dict) -> list[str]:
    """Return one line per figure of ``doc`` flagged ``"reliable": false``:
    where it is in the document and why."""
    out = []

    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            if node.get("reliable") is False:
                out.append(f"{where or 'document'}: not reliable"
                           + (f" ({node['why']})" if node.get("why") else ""))
            for key, value in node.items():
                walk(value, f"{where}.{key}" if where else str(key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    walk(doc.get("summary"), "summary")
    return out


def _table_html(table) -> str:
    headers, rows = table_cells(table)
    align = [{"right": "r", "center": "c"}.get(col.justify, "") for col in table.columns]

    def cell(tag: str, text: str, i: int) -> str:
        cls = f' class="{align[i]}"' if align[i] else ""
        return f"<{tag}{cls}>{'<br>'.join(_esc(x) for x in text.split(chr(10)))}</{tag}>"

    parts = ["<table class=\"data\">"]
    if table.title:
        parts.append(f"<caption>{_esc(cell_text(table.title))}</caption>")
    if table.show_header:
        parts.append("<thead><tr>" + "".join(cell("th", h, i) for i, h in enumerate(headers))
                     + "</tr></thead>")
    parts.append("<tbody>")
    for row in rows:
        parts.append("<tr>" + "".join(cell("td", c, i) for i, c in enumerate(row)) + "</tr>")
    parts.append("</tbody></table>")
    return "\n".join(parts)


def _blocks_html(blocks: list[tuple[str, object]]) -> str:
    """HTML of what a render function printed: tables, headings, and runs
    of text lines as preformatted blocks (they hold trees and matrices)."""
    parts: list[str] = []
    text: list[str] = []

    def flush() -> None:
        while text and not text[-1].strip():
            text.pop()
        if text:
            parts.append(f"<pre>{_esc(chr(10).join(text))}</pre>")
        text.clear()

    for kind, value in blocks:
        if kind == "text":
            if text or str(value).strip():
                text.append(str(value))
            continue
        flush()
        if kind == "table":
            parts.append(_table_html(value))
        elif kind == "rule":
            parts.append(f"<h3>{_esc(value)}</h3>")
    flush()
    return "\n".join(parts)


def _plot_html(doc: dict, title: str) -> str:
    """The document's plot, redrawn and inlined as PNG; "" when its kind has
    no plot or the document has nothing to draw."""
    kind = KINDS.get(kind_of(doc))
    fn = kind.plotter() if kind else None
    if fn is None:
        return ""
    from . import plot as tplot

    with tempfile.TemporaryDirectory(prefix="tiers-report-") as tmp:
        target = Path(tmp) / "plot.png"
        try:
            with tplot.stamping(doc):
                drawn = fn(doc, target)
        except (TiersError, KeyError, TypeError, ValueError, IndexError) as exc:
            return f"<p class=\"muted\">The plot could not be drawn: {_esc(exc)}</p>"
        if drawn is None or not Path(drawn).is_file():
            return ""
        data = base64.b64encode(Path(drawn).read_bytes()).decode("ascii")
    return (f"<figure><img src=\"data:image/png;base64,{data}\" alt=\"plot: {_esc(title)}\">"
            f"<figcaption>{_esc(title)}, drawn from the document</figcaption></figure>")


def _meta_html(doc: dict) -> str:
    machine = doc.get("machine") or {}
    versions = doc.get("versions") or {}
    rows = [("command", f"<code>{_esc(shlex.join(str(w) for w in doc.get('command') or []))}"
                        "</code>"),
            ("created", _esc(doc.get("created", "-"))),
            ("schema", _esc(doc.get("schema", "-")))]
    if machine:
        mem = machine.get("memory_bytes")
        hw = machine.get("hwloc") if isinstance(machine.get("hwloc"), dict) else {}
        desc = [machine.get("hostname"), machine.get("cpu_model"), machine.get("os"),
                machine.get("arch"),
                f"{mem / 2**30:.1f} GiB" if isinstance(mem, (int, float)) and mem else None,
                hw.get("summary")]
        rows.append(("machine", _esc(", ".join(str(d) for d in desc if d))))
    if versions:
        rows.append(("versions", _esc(", ".join(f"{k} {v}" for k, v in versions.items()
                                                if v is not None))))
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table class=\"meta\">{body}</table>"


def _warnings_html(doc: dict) -> str:
    parts = []
    noise = doc.get("noise")
    if isinstance(noise, dict) and noise:
        verdict = str(noise.get("verdict", "unknown"))
        cls = "warnings noise-quiet" if verdict == "quiet" else "warnings"
        parts.append(f"<div class=\"{cls}\"><h3>Machine noise: {_esc(verdict)}</h3>"
                     f"<p>{_esc(noise.get('summary', ''))}</p></div>")
    lines = [str(w) for w in doc.get("warnings") or []] + unreliable(doc)
    if lines:
        items = "".join(f"<li>{_esc(w)}</li>" for w in lines)
        parts.append(f"<div class=\"warnings\"><h3>Warnings</h3><ul>{items}</ul></div>")
    return "\n".join(parts)


def _survey_links(doc: dict, anchors: dict[str, str]) -> str:
    """Links from a survey index to the sections of its documents."""
    items = []
    for rec in doc.get("samples") or []:
        if not isinstance(rec, dict):
            continue
        anchor = anchors.get(rec.get("json") or "")
        name = _esc(rec.get("title") or rec.get("name"))
        link = f"<a href=\"#{anchor}\">{name}</a>" if anchor else name
        extra = f": {_esc(rec['error'])}" if rec.get("error") else ""
        items.append(f"<li>{link} <span class=\"muted\">{_esc(rec.get('status', ''))}"
                     f"{extra}</span></li>")
    return f"<h3>Sections of this survey</h3><ul>{''.join(items)}</ul>" if items else ""


def _section_html(number: int, anchor: str, path: Path, doc: dict,
                  anchors: dict[str, str]) -> tuple[str, str]:
    """Return (table-of-contents title, HTML) of one document's section."""
    kind = KINDS.get(kind_of(doc))
    title = kind.title if kind else str(doc.get("schema", "unknown document"))
    parts = [f"<section id=\"{anchor}\">",
             f"<h2>{number}. {_esc(title)} <span class=\"file\">{_esc(path.name)}</span>"
             "<a class=\"top\" href=\"#contents\">contents</a></h2>",
             _meta_html(doc), _warnings_html(doc)]
    if kind_of(doc) == "survey":
        parts.append(_survey_links(doc, anchors))
    rec = RecordingConsole()
    try:
        shown = render_doc(doc, rec)
    except TiersError as exc:
        shown = True
        parts.append(f"<p class=\"muted\">{_esc(exc)}</p>")
    if shown:
        parts.append(_blocks_html(rec.blocks))
    else:
        parts.append("<p class=\"muted\">tiers has no view of this kind of document; its "
                     "summary:</p>")
        parts.append(f"<pre>{_esc(json.dumps(doc.get('summary'), indent=1))}</pre>")
    parts.append(_plot_html(doc, title))
    parts.append("</section>")
    return title, "\n".join(p for p in parts if p)


def build_html(docs: list[tuple[Path, dict]]) -> str:
    """Return the whole report of ``docs`` (path, document) as one HTML page."""
    anchors = {path.name: f"sec-{i}" for i, (path, _) in enumerate(docs, 1)}
    sections, toc = [], []
    for i, (path, doc) in enumerate(docs, 1):
        title, body = _section_html(i, f"sec-{i}", path, doc, anchors)
        sections.append(body)
        toc.append(f"<li><a href=\"#sec-{i}\">{_esc(title)}</a> "
                   f"<span class=\"muted\">{_esc(path.name)}</span></li>")
    hosts = sorted({str((d.get("machine") or {}).get("hostname")) for _, d in docs
                    if (d.get("machine") or {}).get("hostname")})
    made = sorted(str(d.get("created")) for _, d in docs if d.get("created"))
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [shlex.join(str(w) for w in d.get("command") or []) for _, d in docs]
    commands = "".join(f"<li><code>{_esc(c)}</code></li>"
                       for c in dict.fromkeys(c for c in lines if c))  # each once, in order
    span = f"{made[0]} to {made[-1]}" if len(made) > 1 and made[0] != made[-1] else \
        (made[0] if made else "-")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tiers {_esc(__version__)}">
<title>tiers report: {_esc(", ".join(hosts) or "results")}</title>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>tiers report</h1>
<table class="meta">
<tr><th>host</th><td>{_esc(", ".join(hosts) or "-")}</td></tr>
<tr><th>measured</th><td>{_esc(span)}</td></tr>
<tr><th>report</th><td>written {_esc(when)} by tiers {_esc(__version__)} from
{len(docs)} result document{"" if len(docs) == 1 else "s"}</td></tr>
</table>
<h3>Commands</h3>
<ol>{commands}</ol>
</header>
<nav id="contents">
<h2>Contents</h2>
<ol>{"".join(toc)}</ol>
</nav>
{chr(10).join(sections)}
</body>
</html>
"""


def write_report(inputs: list[str | Path], output: str | Path, *,
                 follow_symlinks: bool = False) -> Path:
    """Build the report of ``inputs`` (documents or folders of them) and
    write it to ``output`` (atomically; "-" is standard output).  Return
    the path written."""
    from . import output as out

    text = build_html(collect(inputs))
    out.write_text(output, text, follow_symlinks=follow_symlinks)
    return Path(output)


def main(args, argv: list[str]) -> int:
    """``tiers report``: write the HTML report and print its path; return 0."""
    from .render import console as tiers_console

    path = write_report(args.inputs, args.output,
                        follow_symlinks=getattr(args, "follow_symlinks", False))
    if str(path) != "-":
        tiers_console(stderr=str(args.output) == "-").print(f"Wrote {path}", markup=False)
    return 0
