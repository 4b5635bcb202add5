"""The one result format: every command's JSON document.

A document is a dict with these top-level keys (see docs/formats.md):

``schema``   ``"tiers.<kind>/1"``, e.g. ``tiers.probe.mem/1``
``created``  UTC time, ISO 8601
``command``  the exact command line, as a list of words
``machine``  hostname, CPU model, OS, memory and the hwloc summary of the
             machine that ran the command
``versions`` tiers (and ``tiers_commit``, the git commit), Python, numpy,
             hwloc, compiler, MPI
``params``   the parameters the measurement ran with
``samples``  the raw samples
``summary``  the figures derived from the samples
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import platform
import socket
import sys
from pathlib import Path

from . import __version__
from .errors import TiersError

SCHEMA_VERSION = 1


def schema_name(kind: str) -> str:
    """Return the schema string of a document kind: ``tiers.<kind>/1``."""
    return f"tiers.{kind}/{SCHEMA_VERSION}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


@functools.lru_cache(maxsize=1)
def machine_info() -> dict:
    """Return the description of the machine running tiers: hostname, CPU
    model, OS, memory and the hwloc summary (``tiers-topo --summary``)."""
    from . import native  # late: keeps import of this module cheap

    info = {
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "arch": platform.machine(),
        "memory_bytes": _memory_bytes(),
    }
    try:
        info["hwloc"] = native.run_json("tiers-topo", ["--summary"], timeout=60)
    except TiersError as exc:
        info["hwloc"] = {"error": str(exc)}
    return info


def _commit_of_checkout() -> dict | None:
    """Return ``{"commit", "modified"}`` when this package runs from a git
    checkout of tiers (``python/tiers`` inside the work tree), else None."""
    import subprocess

    pkg = Path(__file__).resolve().parent
    try:
        top = subprocess.run(["git", "-C", str(pkg), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=10)
        if top.returncode != 0 or \
                Path(top.stdout.strip()).resolve() / "python" / "tiers" != pkg:
            return None
        head = subprocess.run(["git", "-C", str(pkg), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        st = subprocess.run(["git", "-C", str(pkg), "status", "--porcelain",
                             "--untracked-files=no"], capture_output=True, text=True,
                            timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": head.stdout.strip(),
            "modified": bool(st.stdout.strip()) if st.returncode == 0 else None}


def build_info() -> dict:
    """Return the git commit tiers runs from: ``{"commit": SHA or None,
    "modified": bool or None, "from": "checkout"|"build"|None}``.  A git
    checkout answers for itself; an installed package answers with the
    commit CMake baked into ``_native/share/tiers/build_info.json``."""
    live = _commit_of_checkout()
    if live is not None:
        return {**live, "from": "checkout"}
    from . import native

    try:
        baked = json.loads((native.native_dir() / "share" / "tiers" / "build_info.json")
                           .read_text(encoding="utf-8"))
        if isinstance(baked, dict) and baked.get("commit"):
            return {"commit": str(baked["commit"]), "modified": baked.get("modified"),
                    "from": "build"}
    except (OSError, ValueError):
        pass
    return {"commit": None, "modified": None, "from": None}


@functools.lru_cache(maxsize=1)
def versions() -> dict:
    """Return the versions of tiers and the software it measures with."""
    import numpy

    out = {
        "tiers": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
    }
    info = build_info()
    out["tiers_commit"] = info["commit"]
    if info["commit"] is not None:
        out["tiers_commit_modified"] = info["modified"]
    hw = machine_info().get("hwloc", {})
    native_block = hw.get("native", {}) if isinstance(hw, dict) else {}
    for key in ("hwloc_version", "compiler"):
        if key in native_block:
            out[key.replace("_version", "")] = native_block[key]
    try:
        from . import launch

        out["mpi"] = launch.detect().describe()
    except TiersError:
        out["mpi"] = None
    return out


def new_document(kind: str, *, params: dict, samples, summary: dict,
                 argv: list[str] | None = None, **extra) -> dict:
    """Return a result document of ``kind`` with the machine, the command
    line and the versions filled in; ``extra`` adds more top-level keys."""
    doc = {
        "schema": schema_name(kind),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": list(argv if argv is not None else sys.argv),
        "machine": machine_info(),
        "versions": versions(),
        "params": params,
        "samples": samples,
        "summary": summary,
    }
    doc.update(extra)
    return doc


def write(doc: dict, path: str | os.PathLike, *, follow_symlinks: bool = False) -> Path:
    """Write ``doc`` as JSON to ``path`` (folders are created) through
    ``output.write_text``: atomically, never through a device, FIFO or
    symbolic link; ``"-"`` writes to standard output.  Return the path."""
    from . import output

    output.write_text(path, json.dumps(doc, indent=1) + "\n",
                      follow_symlinks=follow_symlinks)
    return Path(path)


def read(path: str | os.PathLike, kind: str | None = None) -> dict:
    """Read a result document; check its schema (and its kind when given)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TiersError(f"cannot read {p}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise TiersError(f"{p} is not JSON: {exc}") from None
    except UnicodeDecodeError as exc:
        raise TiersError(f"{p} is not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise TiersError(f"{p}: JSON nested too deeply to read") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if not isinstance(schema, str) or not schema.startswith("tiers."):
        raise TiersError(f"{p} is not a tiers result document (no tiers schema)")
    if kind is not None and schema != schema_name(kind):
        raise TiersError(f"{p} holds {schema}, expected {schema_name(kind)}")
    return doc
