"""C users: the installed pkg-config files and CMake package config build
docs/examples/mbc_pingpong.c against the installed headers and libraries
only (where ``tiers config`` says they are), and the program runs under
real mpirun without LD_LIBRARY_PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_tiers

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "mbc_pingpong.c"
SIZES = [0, 1, 8, 1024, 65536, 1 << 20]


def _config(*args: str) -> str:
    run = run_tiers("config", *args)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 1, run.stdout
    return lines[0]


@pytest.fixture(scope="module")
def pc_path() -> str:
    path = _config("--pkgconfig-path")
    assert {"tiers.pc", "tiers-hybrid.pc", "tiers-mbc.pc"} <= set(os.listdir(path))
    return path


def _pkg_config(pc_path: str, *args: str) -> list[str]:
    env = dict(os.environ, PKG_CONFIG_PATH=pc_path)
    proc = subprocess.run(["pkg-config", *args], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def _no_source_tree(words: list[str]) -> None:
    """Flags name only installed files, never this checkout's sources."""
    for w in words:
        assert str(ROOT / "native") not in w, w


@pytest.fixture(scope="module")
def pingpong(pc_path, tmp_path_factory) -> Path:
    flags = _pkg_config(pc_path, "--cflags", "--libs", "tiers-mbc")
    _no_source_tree(flags)
    exe = tmp_path_factory.mktemp("pc") / "mbc_pingpong"
    proc = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(EXAMPLE),
                           *flags, "-o", str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


def _run(exe: Path, ranks: int, monkeypatch) -> str:
    from tiers import launch

    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)  # the rpath must be enough
    kwargs = dict(bind_to="none", oversubscribe=True, timeout=120)
    if launch.detect().kind == "openmpi":
        kwargs["mca"] = {"mpi_yield_when_idle": "1"}
    res = launch.launch([str(exe)], ranks, **kwargs)
    return res.stdout


def _check_output(out: str, ranks: int) -> None:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert lines[:len(SIZES)] == [f"size {n}: 100 round trips, data ok" for n in SIZES]
    assert lines[len(SIZES)].startswith(f"ranks {ranks}, transport ")
    assert lines[len(SIZES)].endswith(", errors 0")
    assert len(lines) == len(SIZES) + 1


@pytest.mark.parametrize("ranks", [2, 3])
def test_pkg_config_build_runs_under_mpirun(pingpong, ranks, monkeypatch):
    _check_output(_run(pingpong, ranks, monkeypatch), ranks)


def test_program_finds_installed_libraries_by_rpath(pingpong, pc_path):
    libdir = Path(_pkg_config(pc_path, "--variable=libdir", "tiers-mbc")[0]).resolve()
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run(["ldd", str(pingpong)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    found = {}
    for line in proc.stdout.splitlines():
        if "=>" in line:
            name, _, rest = line.strip().partition(" => ")
            found[name] = rest.split(" (")[0]
    for lib in ("libtiers-mbc.so", "libtiers.so"):
        assert Path(found[lib]).resolve() == libdir / lib, found


def test_tiers_config_flags_match_pkg_config(pc_path):
    for pkg in ("tiers", "tiers-hybrid", "tiers-mbc"):
        assert _config("--cflags", "--libs", "--pkg", pkg).split() == \
            _pkg_config(pc_path, "--cflags", "--libs", pkg)
    assert _config("--libs").split() == _pkg_config(pc_path, "--libs", "tiers")
    assert "-fopenmp" in _config("--cflags", "--pkg", "tiers-hybrid").split()
    assert any(w.startswith("-Wl,-rpath,") for w in _config("--libs", "--pkg", "tiers").split())


def test_versions_agree(pc_path):
    import tiers

    for pkg in ("tiers", "tiers-hybrid", "tiers-mbc"):
        assert _pkg_config(pc_path, "--modversion", pkg) == [tiers.__version__]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_package_config_builds_the_example(tmp_path, monkeypatch):
    prefix = _config("--cmake-prefix")
    build = tmp_path / "build"
    conf = subprocess.run(["cmake", "-S", str(EXAMPLE.parent), "-B", str(build),
                           f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"],
                          capture_output=True, text=True)
    assert conf.returncode == 0, conf.stdout + conf.stderr
    cache = (build / "CMakeCache.txt").read_text()
    assert f"tiers_DIR:PATH={Path(prefix) / 'lib' / 'cmake' / 'tiers'}" in cache
    built = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    _check_output(_run(build / "mbc_pingpong", 2, monkeypatch), 2)


def test_config_usage_errors():
    assert_one_line_error(run_tiers("config", "--pkg", "tiers-nope", "--libs"), "--pkg")
    run = run_tiers("config")
    assert_one_line_error(run, "--cflags")
    assert run.returncode == 2
