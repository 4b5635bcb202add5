"""tiers show, tiers report, --json - / --format json, pipes that close early
and ASCII-only output."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_tiers

DOCS = Path(__file__).parent / "data" / "docs"
TOPO_INPUT = "synthetic:pack:2 numa:2 core:2 pu:2"


@pytest.fixture(scope="module")
def topo_doc(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("topo") / "topo.json"
    run = run_tiers("topo", "--input", TOPO_INPUT, "--json", str(path))
    assert run.returncode == 0, run.stderr
    return path


def test_show_prints_what_the_command_printed(topo_doc):
    """tiers show re-renders with the part's own function: the same text as
    the command itself, less the line that says where the JSON went."""
    direct = run_tiers("topo", "--input", TOPO_INPUT)
    shown = run_tiers("show", str(topo_doc))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == direct.stdout
    assert "Processor graph" in shown.stdout and "PU L#15 (P#15)" in shown.stdout


def test_show_several_documents(topo_doc):
    run = run_tiers("show", str(topo_doc), str(DOCS / "probe-sync.json"), "--format", "plain")
    assert run.returncode == 0, run.stderr
    heads = [ln for ln in run.stdout.splitlines() if ln.startswith("== ")]
    assert heads == [f"== {topo_doc} (tiers.topo/1) ==",
                     f"== {DOCS / 'probe-sync.json'} (tiers.probe.sync/1) =="]
    assert "EPCC overhead per construct" in run.stdout


def test_show_unknown_kind_is_one_line(tmp_path, topo_doc):
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"schema": "tiers.nosuchkind/1", "summary": {}}))
    run = run_tiers("show", str(odd))
    assert_one_line_error(run, "cannot show tiers.nosuchkind/1")
    assert run.returncode == 1
    # the known one is still shown
    run = run_tiers("show", str(topo_doc), str(odd))
    assert run.returncode == 1 and "Processor graph" in run.stdout


@pytest.mark.parametrize("content, fragment", [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ('{"a": 1}', "not a tiers result document"),
])
def test_show_bad_files(tmp_path, content, fragment):
    path = tmp_path / "doc.json"
    if content is not None:
        path.write_text(content)
    assert_one_line_error(run_tiers("show", str(path)), fragment)


def test_show_incomplete_document_is_one_line(tmp_path):
    path = tmp_path / "topo.json"
    path.write_text(json.dumps({"schema": "tiers.topo/1", "summary": {}}))
    assert_one_line_error(run_tiers("show", str(path)), "incomplete")


@pytest.mark.parametrize("how", [("--json", "-"), ("--format", "json")])
def test_document_on_stdout_and_people_text_on_stderr(how):
    run = run_tiers("topo", "--input", TOPO_INPUT, *how)
    assert run.returncode == 0, run.stderr
    doc = run.json()  # standard output is the document alone
    assert doc["schema"] == "tiers.topo/1" and doc["summary"]["pus"] == 16
    assert "Processor graph" in run.stderr
    assert not Path("-").exists()


def test_format_json_with_json_file_is_usage_error(tmp_path):
    run = run_tiers("topo", "--input", TOPO_INPUT, "--format", "json",
                    "--json", str(tmp_path / "x.json"))
    assert_one_line_error(run, "--format json")
    assert run.returncode == 2
    assert not (tmp_path / "x.json").exists()


def test_csv_keeps_stdout_for_tables(topo_doc):
    run = run_tiers("show", str(topo_doc), "--format", "csv")
    assert run.returncode == 0
    assert run.stdout.splitlines()[:2] == ["# Processor graph (weight 10^d, higher = closer)",
                                           "layer,depth d,weight 10^d,PU pairs"]
    assert "Machine (" not in run.stdout and "Machine (" in run.stderr


def test_pipe_closed_early_exits_zero():
    """tiers topo | head -3: status 0 and nothing on stderr."""
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c",
         f"{sys.executable} -m tiers topo --input 'synthetic:pack:4 core:16 pu:2' --matrix"
         " | head -3"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 3
    assert proc.stderr == ""


def test_ascii_output_spells_units_out():
    run = run_tiers("show", str(DOCS / "probe-sync.json"), env={"PYTHONIOENCODING": "ascii"})
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert "µ" not in run.stdout and re.search(r"\d us\b", run.stdout)
    assert "+/-" in run.stdout
    assert "+--" in run.stdout or "|" in run.stdout  # ASCII table boxes


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii"},
                                 {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"}])
def test_probe_sync_in_ascii_locale(env):
    """The probe that prints µ, ± and σ, measured for real in a locale that
    cannot print them."""
    run = run_tiers("probe", "sync", "--quick", "--threads", "2", "--tests", "barriers",
                    env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert "spin barrier" in run.stdout
    assert re.search(r"\d (us|µs)\b", run.stdout)


def _report(args, tmp_path) -> str:
    out = tmp_path / "report.html"
    run = run_tiers("report", *args, "-o", str(out))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"Wrote {out}"
    return out.read_text()


def test_report_sections_tables_and_plots(tmp_path, topo_doc):
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(topo_doc, folder / "topo.json")
    shutil.copy(DOCS / "probe-sync.json", folder / "probe-sync.json")
    (folder / "table.json").write_text('{"0": ["vm", 0]}')  # not a document: passed over
    page = _report([str(folder)], tmp_path)
    heads = re.findall(r'<h2>(\d+)\. ([^<]+) <span class="file">([^<]+)</span>', page)
    assert heads == [("1", "Synchronisation costs (tiers probe sync)", "probe-sync.json"),
                     ("2", "Machine model (tiers topo)", "topo.json")]
    assert '<a href="#sec-1">' in page and '<a href="#sec-2">' in page
    assert '<th class="r">weight 10^d</th>' in page
    assert "<td>machine</td>" in page
    # the sync plot, redrawn from the document, inline
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 1
    assert base64.b64decode(images[0]).startswith(b"\x89PNG")
    assert "tiers probe sync --quick" in page  # the command, in the header and the section
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing from elsewhere


def test_report_shows_warnings_noise_and_unreliable_figures(tmp_path):
    doc = json.loads((DOCS / "probe-net.json").read_text())
    doc["warnings"] = ["2 ranks on 1 core: oversubscribed"]
    doc["noise"] = {"verdict": "busy", "summary": "another process used 80% of a core"}
    doc["summary"]["pingpong"] = dict(doc["summary"].get("pingpong") or {}, reliable=False,
                                      why="spread above 20 %")
    path = tmp_path / "net.json"
    path.write_text(json.dumps(doc))
    page = _report([str(path)], tmp_path)
    assert "<h3>Machine noise: busy</h3>" in page
    assert "another process used 80% of a core" in page
    assert "<li>2 ranks on 1 core: oversubscribed</li>" in page
    assert "summary.pingpong: not reliable (spread above 20 %)" in page


def test_report_to_stdout_and_errors(tmp_path, topo_doc):
    run = run_tiers("report", str(topo_doc), "-o", "-")
    assert run.returncode == 0
    assert run.stdout.startswith("<!DOCTYPE html>") and "Machine model" in run.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(run_tiers("report", str(empty)), "no tiers result documents")
    assert_one_line_error(run_tiers("report", str(tmp_path / "nope")), "no such file")


def test_plot_stamp_names_host_date_and_command():
    from tiers import plot

    doc = json.loads((DOCS / "probe-sync.json").read_text())
    with plot.stamping(doc):
        fig, _ = plot.figure()
    texts = [t.get_text() for t in fig.texts]
    plot.pyplot().close(fig)
    assert len(texts) == 1
    assert texts[0].startswith(doc["machine"]["hostname"] + "  " + doc["created"][:10])
    assert "tiers probe sync --quick" in texts[0]
    fig, _ = plot.figure()  # outside stamping: no stamp
    assert not fig.texts
    plot.pyplot().close(fig)


def test_plural():
    from tiers.render import plural

    assert [plural(n, "thread") for n in (0, 1, 2)] == ["0 threads", "1 thread", "2 threads"]
    assert plural(1, "process", "processes") == "1 process"
    assert plural(1200, "rank") == "1,200 ranks"


def test_piped_width_is_natural(topo_doc):
    """COLUMNS does not narrow output that goes to a pipe."""
    run = run_tiers("show", str(DOCS / "probe-net.json"), env={"COLUMNS": "40"})
    assert max(len(ln) for ln in run.stdout.splitlines()) > 80
    assert "…" not in run.stdout


def test_show_vcluster_document(tmp_path):
    """A vcluster document (the state 'tiers vcluster up' plans) is shown as
    'tiers vcluster status' prints it."""
    from tiers import vcluster

    state = vcluster.plan(3, 2, "100mbit")
    path = tmp_path / "vc.json"
    path.write_text(json.dumps({"schema": "tiers.vcluster/1", "summary": state}))
    run = run_tiers("show", str(path))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("virtual cluster: 3 nodes x 2 slots, links 100mbit")
    assert [ln.split()[0] for ln in lines[1:4]] == [vcluster.node_name(i) for i in range(3)]
