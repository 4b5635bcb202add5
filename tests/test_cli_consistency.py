"""The command line, the docs and the native programs agree with the
registry (python/tiers/registry.py): every subcommand has a description and
an example, no help text speaks of seed numbers, choices come from the
registry, old option spellings still work with a one-line note, every
native program answers --help, and docs/formats.md is what
scripts/gen-docs.py generates."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_tiers

ROOT = Path(__file__).resolve().parent.parent


def _parser():
    from tiers import cli
    return cli.build_parser()


def _all_parsers():
    from tiers import registry
    return list(registry.walk(_parser()))


def test_every_subcommand_has_a_description_and_an_example():
    from tiers import registry
    names = []
    for name, p in _all_parsers():
        names.append(name)
        assert p.description and len(p.description) > 20, name
        assert p.epilog and p.epilog.startswith("example:\n  tiers ") or \
            name == "config" and "tiers config" in (p.epilog or ""), name
        text = p.format_help()
        assert "example:" in text, name
    for name in ("topo", "probe mem", "probe net", "map", "trace", "bench", "survey",
                 "show", "report", "config", "vcluster up"):
        assert name in names
    # trace stats/export have their own parsers; the registry describes them too
    for sub in ("stats", "export"):
        run = run_tiers("trace", sub, "--help")
        assert run.returncode == 0, run.stderr
        assert registry.COMMANDS[f"trace {sub}"].example in run.stdout


def test_no_help_text_names_seed_numbers():
    texts = [_parser().format_help()] + [p.format_help() for _, p in _all_parsers()]
    for sub in ("stats", "export"):
        texts.append(run_tiers("trace", sub, "--help").stdout)
    for text in texts:
        assert "seed 0" not in text.lower(), text
        assert "seeds 0" not in text.lower(), text


def test_bench_choices_are_the_registry_apps():
    from tiers import bench, registry
    p = dict(_all_parsers())["bench"]
    app = next(a for a in p._actions if a.dest == "app")
    assert list(app.choices) == list(registry.APPS) == \
        ["jacobi3d", "laplace2d", "matmul", "radixsort", "cg", "zblas"]
    assert bench.APPS is registry.APPS
    help_text = p.format_help()
    for name in registry.APPS:
        assert name in help_text
    comm = next(a for a in p._actions if a.dest == "comm")
    assert registry.mbc_apps() == ["jacobi3d", "laplace2d", "radixsort", "cg"]
    assert all(name in comm.help for name in registry.mbc_apps())
    # every app's native tool really takes --comm mbc exactly when the registry says so
    run = run_tiers("bench", "matmul", "--comm", "mbc", "--ranks", "1", "--threads", "1")
    assert run.returncode != 0 and "--comm mbc is for jacobi3d, laplace2d, radixsort, cg" \
        in run.stderr


def test_deprecated_aliases_work_and_print_one_note(capsys):
    p = _parser()
    args = p.parse_args(["probe", "net", "--time-limit", "7"])
    assert args.time_limit == 7.0 and args.timeout is None
    assert capsys.readouterr().err.strip() == \
        "tiers: note: --time-limit is deprecated; use --timeout"
    args = p.parse_args(["probe", "net", "--timeout", "9", "--wait-timeout", "3"])
    assert (args.time_limit, args.timeout) == (9.0, 3.0)
    assert capsys.readouterr().err == ""
    assert "--time-limit" not in dict(_all_parsers())["probe net"].format_help()
    run = run_tiers("trace", "export", "/nonexistent/trace", "--chrome")
    lines = run.stderr.splitlines()
    assert lines[0] == "tiers: note: --chrome is deprecated; use --format chrome"
    assert lines[1].startswith("tiers: error: ") and "not a tiers trace folder" in lines[1]
    assert len(lines) == 2 and run.returncode != 0


def test_export_needs_a_format():
    run = run_tiers("trace", "export", "/nonexistent/trace")
    assert run.returncode == 2
    assert run.stderr.strip().startswith("tiers: error: no format given: add --format chrome")


def test_every_native_program_answers_help():
    from tiers import native, registry
    for name in registry.executables():
        proc = subprocess.run([str(native.tool_path(name)), "--help"], capture_output=True,
                              text=True, timeout=30, stdin=subprocess.DEVNULL)
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0, (name, text)
        assert f"usage: " in text and name in text.splitlines()[0], (name, text)
        assert "error" not in text.splitlines()[0] and ".c)" not in text, (name, text)


def test_formats_doc_is_generated_from_the_registry():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-docs.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (ROOT / "docs" / "formats.md").read_text()
    from tiers import registry
    for kind in registry.KINDS.values():
        assert f"`{kind.schema}`" in text
    for tool in registry.TOOLS:
        assert f"`{tool}`" in text


def test_error_codes_match_tiers_strerror():
    from tiers import registry
    codes = registry.error_codes()
    assert [c["code"] for c in codes] == list(range(len(codes)))
    assert codes[0]["name"] == "TIERS_OK" and len(codes) >= 9
    names = {registry.strerror(c["code"]) for c in codes}
    assert len(names) == len(codes) and "unknown error" not in names
    assert registry.strerror(len(codes) + 100) == "unknown error"


def test_documents_record_the_commit_and_vcluster_has_the_envelope(tmp_path):
    import json
    import shutil
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    out = tmp_path / "topo.json"
    run = run_tiers("topo", "--input", "synthetic:pack:2 core:2 pu:1", "--json", str(out))
    assert run.returncode == 0, run.stderr
    versions = json.loads(out.read_text())["versions"]
    from tiers import __version__
    assert versions["tiers"] == __version__
    if head.returncode == 0 and (ROOT / "python" / "tiers").resolve() == \
            Path(__import__("tiers").__file__).resolve().parent:
        assert versions["tiers_commit"] == head.stdout.strip()   # runs from this checkout
    else:
        assert versions["tiers_commit"] is None or len(versions["tiers_commit"]) == 40
    if shutil.which("ip") is None:
        return
    vc = tmp_path / "vc.json"
    run = run_tiers("vcluster", "status", "--json", str(vc))
    assert run.returncode == 0, run.stderr
    doc = json.loads(vc.read_text())
    assert doc["schema"] == "tiers.vcluster/1"
    assert {"created", "command", "machine", "versions", "params", "samples", "summary"} <= \
        set(doc)
    assert doc["command"][:3] == ["tiers", "vcluster", "status"]
    assert doc["params"] == {"action": "status"} and "up" in doc["summary"]


def test_version_lives_in_one_place():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and "\nversion =" not in text
    assert 'file(STRINGS "${CMAKE_CURRENT_SOURCE_DIR}/python/tiers/__init__.py"' in \
        (ROOT / "CMakeLists.txt").read_text()
    assert "BSD 3-Clause" in (ROOT / "LICENSE").read_text()
