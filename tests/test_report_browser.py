"""The HTML report in a real browser: headless Chromium loads a report made
from real documents; the rendered DOM holds the expected sections, links
and table cells, and a screenshot of the page is not blank.

Skipped, with the reason, only where Chromium is not installed
(scripts/install-deps.sh installs the Debian package ``chromium``).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_tiers

DOCS = Path(__file__).parent / "data" / "docs"
TOPO_INPUT = "synthetic:pack:2 numa:2 core:2 pu:2"
MAP_ARGS = ("--stencil", "3d:2,2,2:24,12,6", "--machine", "synthetic:pack:2 core:2 pu:1",
            "--nodes", "2")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("Chromium is not installed (Debian package 'chromium'; "
                "scripts/install-deps.sh installs it): the report's browser test cannot run")


def _browser(profile: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A report of a topology, a map and a probe run (with its plot)."""
    folder = tmp_path_factory.mktemp("report")
    docs = folder / "docs"
    docs.mkdir()
    run = run_tiers("topo", "--input", TOPO_INPUT, "--json", str(docs / "topo.json"))
    assert run.returncode == 0, run.stderr
    run = run_tiers("map", *MAP_ARGS, "--json", str(docs / "map.json"))
    assert run.returncode == 0, run.stderr
    net = json.loads((DOCS / "probe-net.json").read_text())
    net["warnings"] = ["ranks 0 and 1 share one core: oversubscribed"]
    (docs / "probe-net.json").write_text(json.dumps(net))
    out = folder / "report.html"
    run = run_tiers("report", str(docs), "-o", str(out))
    assert run.returncode == 0, run.stderr
    return out


def test_report_dom(report, tmp_path):
    run = _browser(tmp_path / "profile", "--dump-dom", report.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    assert "<html" in dom[:200] and dom.rstrip().endswith("</html>"), dom[:200]
    heads = [html.unescape(re.sub(r"<[^>]+>", "", h)).strip()
             for h in re.findall(r"<h2>(.*?)</h2>", dom, re.S)]
    assert heads[0] == "Contents"
    assert [re.sub(r"\s*contents$", "", h) for h in heads[1:]] == [
        "1. Placement (tiers map) map.json",
        "2. Messages between processes (tiers probe net) probe-net.json",
        "3. Machine model (tiers topo) topo.json"]
    # the table of contents links to every section
    for i in (1, 2, 3):
        assert f'href="#sec-{i}"' in dom and f'id="sec-{i}"' in dom
    cells = {html.unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", dom)}
    # the map's placements, whole (they were cut to "map-by-…" in 80 columns)
    assert {"afc", "afc-nb", "map-by-node", "map-by-package", "random"} <= cells
    assert {"core", "numa", "machine"} <= cells  # the topology's layers
    assert "4,194,304" in cells  # the largest ping-pong message
    assert "ranks 0 and 1 share one core: oversubscribed" in dom
    assert re.search(r'<img src="data:image/png;base64,', dom)
    assert "Traceback" not in dom


def test_report_screenshot_is_not_blank(report, tmp_path):
    import matplotlib.image as mpimg
    import numpy as np

    shot = tmp_path / "report.png"
    run = _browser(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,2000",
                   "--hide-scrollbars", report.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    img = mpimg.imread(shot)
    assert img.shape[:2] == (2000, 1200)
    rgb = (img[..., :3] * 255).round().astype(np.uint8).reshape(-1, 3)
    colours = np.unique(rgb, axis=0)
    assert len(colours) > 50, f"only {len(colours)} colours: a blank or broken page"
    inked = np.any(rgb < 200, axis=1).mean()
    assert inked > 0.01, f"only {inked:.2%} of the page is drawn on"


def test_survey_report_renders_every_section(survey, tmp_path):
    """tiers survey ends with the path of its report.html, and Chromium
    renders a section for the index and for every section of the survey,
    each linked from the contents."""
    _chromium()
    run, out = survey
    page = out / "report.html"
    assert run.stdout.rstrip().splitlines()[-1] == f"Report: {page.resolve()}", run.stderr
    index = json.loads((out / "survey.json").read_text())
    # a section that fails is reported (and is test_survey's business); the
    # report still covers the others and names the failure
    failed = [s for s in index["samples"] if s["status"] != "ok"]
    assert run.returncode == (1 if failed else 0), run.stderr
    shown = _browser(tmp_path / "profile", "--dump-dom", page.as_uri())
    assert shown.returncode == 0, shown.stderr[-2000:]
    files = re.findall(r'<h2>\d+\. [^<]*<span class="file">([^<]+)</span>', shown.stdout)
    assert files == ["survey.json", *(s["json"] for s in index["samples"] if s["json"])]
    for s in failed:
        assert html.escape(s["error"]) in shown.stdout
    for i in range(1, len(files) + 1):
        assert f'href="#sec-{i}"' in shown.stdout
    # every survey section's own title is in the index's links
    for s in index["samples"]:
        if s["json"]:
            assert f'>{html.escape(s["title"])}</a>' in shown.stdout
    assert shown.stdout.count('<img src="data:image/png;base64,') == \
        sum(1 for s in index["samples"] if s["plot"])
