"""``tiers config``: what a C or C++ build needs to use the installed libtiers.

    tiers config --cflags --libs [--pkg tiers|tiers-hybrid|tiers-mbc]
    tiers config --pkgconfig-path      # for PKG_CONFIG_PATH
    tiers config --cmake-prefix        # for CMAKE_PREFIX_PATH (find_package(tiers))

The headers, libraries, pkg-config files and the CMake package config are
installed inside the Python package (``tiers/_native``); see docs/c-api.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from . import native
from .errors import TiersError

#: The pkg-config packages tiers installs, and what each one is for.
PACKAGES = {
    "tiers": "libtiers: topology, placement, the spin barrier, error codes",
    "tiers-hybrid": "libtiers-hybrid: thread teams, hybrid collectives, halo exchange "
                    "(MPI + OpenMP)",
    "tiers-mbc": "libtiers-mbc: memory-based messaging between MPI processes",
}


def pkgconfig_dir() -> Path:
    """Return the folder of the installed ``tiers*.pc`` files; raise
    TiersError when this installation has none."""
    d = native.native_dir() / "lib" / "pkgconfig"
    if not (d / "tiers.pc").is_file():
        raise TiersError(f"no pkg-config files in {d}: this tiers was installed without "
                         "them; reinstall it with 'make build'")
    return d


def cmake_prefix() -> Path:
    """Return the prefix to put in ``CMAKE_PREFIX_PATH`` so that
    ``find_package(tiers)`` finds ``lib/cmake/tiers/tiersConfig.cmake``."""
    prefix = native.native_dir()
    if not (prefix / "lib" / "cmake" / "tiers" / "tiersConfig.cmake").is_file():
        raise TiersError(f"no CMake package config in {prefix / 'lib' / 'cmake' / 'tiers'}: "
                         "this tiers was installed without it; reinstall it with 'make build'")
    return prefix.resolve()


def flags(package: str, cflags: bool, libs: bool) -> str:
    """Return the compiler and/or linker flags of pkg-config ``package``
    (one line, as ``pkg-config --cflags --libs`` prints it)."""
    if package not in PACKAGES:
        raise TiersError(f"--pkg: unknown package '{package}' (choose from "
                         f"{', '.join(PACKAGES)})")
    d = pkgconfig_dir()
    if not (d / f"{package}.pc").is_file():
        raise TiersError(f"--pkg: {package} is not installed in {d} (tiers was built "
                         "without MPI)")
    exe = shutil.which("pkg-config") or shutil.which("pkgconf")
    if exe is None:
        raise TiersError("pkg-config is not installed (Debian: apt-get install pkg-config)")
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.pathsep.join(
        p for p in (str(d), env.get("PKG_CONFIG_PATH", "")) if p)
    words = [exe] + (["--cflags"] if cflags else []) + (["--libs"] if libs else []) + [package]
    proc = subprocess.run(words, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise TiersError(f"pkg-config {package} failed: {last}")
    return " ".join(proc.stdout.split())


def main(args, argv: list[str]) -> int:
    """``tiers config``: print flags or paths, one line; return 0."""
    if args.pkgconfig_path:
        print(pkgconfig_dir().resolve())
        return 0
    if args.cmake_prefix:
        print(cmake_prefix())
        return 0
    if not (args.cflags or args.libs):
        raise TiersError("say what to print: --cflags, --libs, --pkgconfig-path or "
                         "--cmake-prefix (see 'tiers config --help')")
    print(flags(args.pkg, args.cflags, args.libs))
    return 0
