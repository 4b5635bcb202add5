"""Every benchmark script under bench/ starts, parses its options and uses
the installed tiers.

``make bench`` and ``make bench-quick`` run each bench/*/run with the venv on
PATH; here each script runs the same way (this interpreter's folder first on
PATH) but only with --help, a bad option and --dry-run, which measure
nothing.  The benchmarks themselves are not run.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(ROOT.glob("bench/*/run"))

# A path into the source tree's python/ folder (sys.path.insert of
# .../python, "../python", python/tiers/_native): a script that has one runs
# the source tree's tiers, whose _native holds no tools in a fresh clone.
SOURCE_TREE = re.compile(r"""(/\s*|,\s*)["']python["']|["'](\.\./)+python\b|python/tiers/_native""")


def _env(drop_pythonpath: bool = False) -> dict:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("TIERS_BENCH_REEXEC", None)
    if drop_pythonpath:
        env.pop("PYTHONPATH", None)
    return env


def _run(script: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=120,
                          env=env or _env(), cwd=ROOT)


def _settings(stdout: str) -> dict:
    """The "  --option: value" lines of a dry run."""
    return dict(m.groups() for m in re.finditer(r"^  --([\w-]+): (.*)$", stdout, re.M))


def _ids(paths):
    return [p.parent.name for p in paths]


# Scripts known to import the source tree's python/ (a fix belongs to their
# owner): strict, so the mark must go when the script is fixed.
SOURCE_TREE_KNOWN: set[str] = set()


def _known_source_tree(paths):
    return [pytest.param(p, id=p.parent.name, marks=pytest.mark.xfail(
        strict=True, reason="inserts the source tree's python/ into sys.path"))
        if p.parent.name in SOURCE_TREE_KNOWN else pytest.param(p, id=p.parent.name)
        for p in paths]


def test_every_bench_folder_has_a_run_script():
    folders = [p for p in (ROOT / "bench").iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert folders
    assert sorted(f.name for f in folders) == _ids(SCRIPTS)
    for s in SCRIPTS:
        assert os.access(s, os.X_OK), f"{s} is not executable"


@pytest.mark.parametrize("script", SCRIPTS, ids=_ids(SCRIPTS))
def test_help_prints_usage_and_the_common_options(script):
    r = _run(script, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage:")
    for opt in ("--quick", "--dry-run"):
        assert opt in r.stdout


@pytest.mark.parametrize("script", SCRIPTS, ids=_ids(SCRIPTS))
def test_bad_option_is_one_line_and_exit_2(script):
    r = _run(script, "--no-such-option")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"{script.parent.name}: error: ")
    assert "--no-such-option" in lines[0]
    assert r.stdout == ""


@functools.lru_cache(maxsize=None)
def _installed_tiers() -> bool:
    """Whether this interpreter imports tiers without PYTHONPATH (make build
    installed it); then the scripts must find that one, not the source tree."""
    return subprocess.run([sys.executable, "-c", "import tiers"], env=_env(True),
                          capture_output=True).returncode == 0


@pytest.mark.parametrize("script", _known_source_tree(SCRIPTS))
def test_dry_run_prints_the_plan_and_quick_reduces_it(script):
    installed = _installed_tiers()
    full = _run(script, "--dry-run", env=_env(drop_pythonpath=installed))
    assert full.returncode == 0, full.stderr
    assert f"{script.parent.name}: dry run, nothing measured" in full.stdout
    assert re.search(r"^  would run: \S", full.stdout, re.M), full.stdout
    # which tiers it would use: the installed package (or tiers on PATH) and its tools
    package = re.search(r"^  tiers package: (.*)$", full.stdout, re.M)
    command = re.search(r"^  tiers command: (.*)$", full.stdout, re.M)
    assert package or command, full.stdout
    if package and installed:
        assert Path(package.group(1)).resolve() != (ROOT / "python" / "tiers").resolve()
    for tool, path in re.findall(r"^  tool (\S+): (.*)$", full.stdout, re.M):
        assert os.access(path, os.X_OK), f"{tool}: {path}"
        if installed:
            assert not Path(path).resolve().is_relative_to(ROOT / "python")
    quick = _run(script, "--quick", "--dry-run")
    assert quick.returncode == 0, quick.stderr
    a, b = _settings(full.stdout), _settings(quick.stdout)
    assert a.get("quick") == "False" and b.get("quick") == "True"
    assert {k for k in a if k != "quick" and a[k] != b.get(k)}, \
        f"--quick changes no setting of {script}"


def test_an_explicit_option_wins_over_quick():
    script = ROOT / "bench" / "mbc_vs_mpi" / "run"
    r = _run(script, "--quick", "--rounds", "7", "--dry-run")
    assert r.returncode == 0, r.stderr
    got = _settings(r.stdout)
    assert got["rounds"] == "7" and got["quick"] == "True"
    assert got["scale"] != "1.0"  # the other reduced defaults still apply


@pytest.mark.parametrize("script", _known_source_tree(SCRIPTS))
def test_script_does_not_import_the_source_tree(script):
    for f in [script, *script.parent.glob("*.py")]:
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            assert not SOURCE_TREE.search(line), f"{f.relative_to(ROOT)}:{n}: {line.strip()}"


def test_benchlib_source_tree_pattern_catches_an_import_of_python_folder():
    assert SOURCE_TREE.search('sys.path.insert(0, str(HERE.parent.parent / "python"))')
    assert SOURCE_TREE.search('sys.path.insert(0, os.path.join(ROOT, "python"))')
    assert not SOURCE_TREE.search('cmd = [sys.executable, "-m", "tiers"]')


def _make_bench(target: str, bench: str, args: str) -> subprocess.CompletedProcess:
    """``make TARGET`` on the scripts ``bench`` with BENCH_ARGS ``args``,
    without remaking setup/build (-o: the venv is already built)."""
    return subprocess.run(["make", "-s", "-o", "build", "-o", "setup", target,
                           f"BENCH={bench}", f"BENCH_ARGS={args}"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("target,quick", [("bench", ""), ("bench-quick", " --quick")])
def test_make_bench_times_each_script_and_the_whole_run(target, quick):
    r = _make_bench(target, "trace_latency sync_*", "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    names = ["trace_latency", *sorted(p.parent.name for p in ROOT.glob("bench/sync_*/run"))]
    ended = re.findall(r"^== bench/(\w+)/run(.*): ok \((\d+) s\)$", r.stdout, re.M)
    assert [n for n, _, _ in ended] == names
    assert all(opts == f"{quick} --dry-run" for _, opts, _ in ended)
    total = re.search(rf"^== {target}: (\d+) scripts in (\d+) s$", r.stdout, re.M)
    assert total and int(total.group(1)) == len(names), r.stdout
    assert int(total.group(2)) >= max(int(s) for _, _, s in ended)
    # each script's dry run really ran, with --quick when asked
    assert r.stdout.count("dry run, nothing measured") == len(names)
    assert r.stdout.count("  --quick: True") == (len(names) if quick else 0)


def test_make_bench_quick_fails_naming_the_scripts_that_failed():
    r = _make_bench("bench-quick", "trace_latency sync_vs_epcc no_such_bench", "--no-such-option")
    assert r.returncode != 0
    for name in ("trace_latency", "sync_vs_epcc"):
        assert re.search(rf"^== bench/{name}/run --quick --no-such-option: FAILED \(exit 2\)",
                         r.stdout, re.M), r.stdout
        assert f"{name}: error: unrecognized arguments: --no-such-option" in r.stderr
    assert "no script bench/no_such_bench/run" in r.stdout
    assert re.search(r"^bench-quick: failed: bench/trace_latency/run bench/sync_vs_epcc/run "
                     r"bench/no_such_bench/run$", r.stdout, re.M), r.stdout


def test_quick_run_says_it_is_not_a_measurement(capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import benchlib
    finally:
        sys.path.remove(str(ROOT / "bench"))
    import argparse

    def parse(*argv):
        ap = argparse.ArgumentParser()
        ap.add_argument("--rounds", type=int, default=5)
        return benchlib.parse_args(ap, {"rounds": 2}, list(argv))

    assert parse("--quick").rounds == 2
    assert "quick: reduced sizes and rounds" in capsys.readouterr().out
    assert parse("--quick", "--rounds", "3").rounds == 3
    assert "not a measurement" in capsys.readouterr().out
    assert parse("--quick", "--dry-run").rounds == 2
    assert parse().rounds == 5
    assert capsys.readouterr().out == ""  # neither a dry run nor a full run says it
