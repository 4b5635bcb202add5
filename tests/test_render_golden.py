"""Golden output: what tiers prints for fixed documents, at 80 columns and
piped, in the table, plain and csv formats (as hwloc tests lstopo's output).

The documents: ``tiers topo`` of a synthetic hwloc topology and ``tiers map``
of a stencil onto synthetic nodes, made when the tests run (their output
is deterministic; the map's measured mapping time is set to 0), and probe
documents kept in tests/data/docs/ (real runs of ``tiers probe mem|sync|net
--quick``).  Piped output goes through ``tiers show`` in a subprocess; the
80-column output renders in-process on a console forced to be an
80-column terminal.

After a deliberate change of what tiers prints, regenerate the golden files
with ``TIERS_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import os
from pathlib import Path

import pytest

from conftest import run_tiers

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
DOCS = HERE / "data" / "docs"
UPDATE = os.environ.get("TIERS_UPDATE_GOLDEN") == "1"

TOPO_INPUT = "synthetic:pack:2 numa:2 core:2 pu:2"
MAP_ARGS = ("--stencil", "3d:2,2,2:24,12,6", "--machine", "synthetic:pack:2 core:2 pu:1",
            "--nodes", "2")
NAMES = ("topo", "map", "probe-sync", "probe-net", "probe-mem")
FORMATS = ("table", "plain", "csv")
BOX = set("│┃━─┏┓┗┛┡┩╇┳┻┼├┤┬┴└┘┌┐═║")


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> dict[str, Path]:
    """Path of each document by name."""
    folder = tmp_path_factory.mktemp("docs")
    out = {}
    topo = run_tiers("topo", "--input", TOPO_INPUT, "--format", "json")
    assert topo.returncode == 0, topo.stderr
    out["topo"] = folder / "topo.json"
    out["topo"].write_text(topo.stdout)
    mapped = run_tiers("map", *MAP_ARGS, "--json", "-")
    assert mapped.returncode == 0, mapped.stderr
    doc = mapped.json()
    # measured: the figures that vary
    doc["summary"]["map_seconds"] = doc["summary"]["map_cpu_seconds"] = 0.0
    out["map"] = folder / "map.json"
    out["map"].write_text(json.dumps(doc))
    for name in ("probe-sync", "probe-net", "probe-mem"):
        out[name] = DOCS / f"{name}.json"
    return out


def _compare(text: str, golden: Path) -> None:
    if UPDATE or not golden.exists():
        if not UPDATE:
            pytest.fail(f"{golden.name} is missing: run with TIERS_UPDATE_GOLDEN=1 to write it")
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
        return
    want = golden.read_text(encoding="utf-8")
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True),
                                            f"golden/{golden.name}", "printed"))
        pytest.fail(f"output differs from {golden.name} (TIERS_UPDATE_GOLDEN=1 rewrites "
                    f"it):\n{diff[:6000]}")


def _tables(doc: dict):
    """The tables the document's render function prints, as plain cells."""
    from tiers import render, show

    rec = render.RecordingConsole()
    assert show.render_doc(doc, rec)
    return [(render.cell_text(t.title) if t.title else None, *render.table_cells(t))
            for kind, t in rec.blocks if kind == "table"]


def _render_80(doc: dict, fmt: str) -> str:
    """What the document prints on an 80-column terminal in ``fmt``."""
    from tiers import render, show

    buf = io.StringIO()
    render.configure(fmt)
    try:
        console = render.console(file=buf, width=80, force_terminal=True, color_system=None)
        assert show.render_doc(doc, console)
    finally:
        render.configure("table")
    return buf.getvalue()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", NAMES)
def test_piped(documents, name, fmt):
    """Off a terminal: the golden text, and no table cell cut or wrapped."""
    run = run_tiers("show", str(documents[name]), "--format", fmt)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    _compare(run.stdout, GOLDEN / f"{name}-{fmt}-piped.txt")
    assert "…" not in run.stdout
    tables = _tables(json.loads(documents[name].read_text()))
    assert tables, f"{name}: the render function printed no table"
    if fmt == "csv":
        # standard output holds the tables alone: each one parses back to its cells
        blocks = [b for b in run.stdout.split("\n\n") if b.strip()]
        assert len(blocks) == len(tables)
        for block, (title, headers, rows) in zip(blocks, tables):
            first, rest = block.split("\n", 1)
            assert first.startswith("# ")
            if title:
                assert first == "# " + title.replace("\n", " ")
            parsed = list(csv.reader(io.StringIO(rest)))
            assert parsed[0] == [h.replace("\n", " ") for h in headers]
            assert parsed[1:] == [[c.replace("\n", " / ") for c in row] for row in rows]
        return
    lines = run.stdout.splitlines()
    for title, headers, rows in tables:
        for cell in [*headers, *(c for row in rows for c in row)]:
            for part in cell.split("\n"):
                assert any(part in line for line in lines), \
                    f"{name}: cell {part!r} is not whole on any line"
        if title and fmt == "plain":
            assert title in lines
    if fmt == "plain":
        assert not BOX & set(run.stdout), "box characters in plain output"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", NAMES)
def test_80_columns(documents, name, fmt):
    """On an 80-column terminal: tables fit in 80 columns (rich wraps their
    cells); plain and csv do not depend on the width."""
    doc = json.loads(documents[name].read_text())
    text = _render_80(doc, fmt)
    if fmt == "table":
        _compare(text, GOLDEN / f"{name}-table-80.txt")
        table_lines = [ln for ln in text.splitlines() if BOX & set(ln)]
        assert table_lines and all(len(ln) <= 80 for ln in table_lines)
    else:
        piped = run_tiers("show", str(documents[name]), "--format", fmt)
        assert text == piped.stdout


def test_terminal_width_differs_from_piped(documents):
    """The map's table is wider than 80 columns: cut on an 80-column
    terminal, whole off a terminal (the bug this rendering fixes)."""
    doc = json.loads(documents["map"].read_text())
    narrow = _render_80(doc, "table")
    piped = run_tiers("show", str(documents["map"])).stdout
    assert "map-by-package" in piped and "map-by-node" in piped
    assert max(len(ln) for ln in piped.splitlines()) > 80
    assert max(len(ln) for ln in narrow.splitlines()) <= 80
