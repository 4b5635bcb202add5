"""Finding and running the native tools that pip installed inside the package.

The native tools (``tiers-topo``, ``tiers-probe-mem``, ...) print one JSON
object on stdout; on bad input they print one line ``TOOL: error: ...`` on
stderr and exit with status 2.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from .errors import TiersError

_PACKAGE_NATIVE = Path(__file__).resolve().parent / "_native"


def native_dir() -> Path:
    """Return the folder holding the native ``bin/`` and ``lib/`` (the
    package's ``_native``, or ``$TIERS_NATIVE_DIR`` when set)."""
    override = os.environ.get("TIERS_NATIVE_DIR")
    return Path(override) if override else _PACKAGE_NATIVE


_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """Return the preexec_fn of every native tool: the kernel sends the tool
    SIGTERM when tiers dies, however tiers dies, so a killed tiers leaves no
    tool running.  A tiers that died before the tool armed it ends it too."""
    parent = os.getpid()

    def arm() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:
            os._exit(128 + signal.SIGTERM)

    return arm


def tool_path(name: str) -> Path:
    """Return the path of native executable ``name``; raise TiersError when
    the package was installed without it."""
    path = native_dir() / "bin" / name
    if not path.is_file():
        found = shutil.which(name)
        if found:
            return Path(found)
        raise TiersError(f"native tool {name} is missing from {path.parent}; "
                         "reinstall tiers with 'make build'")
    return path


def lib_path(name: str) -> Path:
    """Return the path of native library ``name`` (e.g. ``libtiers.so``)."""
    return native_dir() / "lib" / name


def tool_error(name: str, stderr: str, returncode: int) -> TiersError:
    """Turn a failed native tool's stderr into a one-line TiersError."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for line in reversed(lines):
        if ": error: " in line:
            return TiersError(line.split(": error: ", 1)[1])
    if returncode < 0:
        return TiersError(f"{name} was killed by signal {-returncode}")
    last = lines[-1] if lines else "no message"
    return TiersError(f"{name} failed with exit code {returncode}: {last}")


def run_json(name: str, args: list[str], *, timeout: float | None = None,
             env: dict[str, str] | None = None) -> dict:
    """Run native tool ``name`` with ``args`` and return the JSON object it
    prints.  Raise TiersError with the tool's own message on failure."""
    cmd = [str(tool_path(name)), *args]
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env,
                              preexec_fn=_die_with_parent())
    except subprocess.TimeoutExpired:
        raise TiersError(f"{name} did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        raise tool_error(name, proc.stderr, proc.returncode)
    return parse_json(name, proc.stdout)


def run_with_progress(name: str, args: list[str],
                      progress: Callable[[int, int], None] | None) -> tuple[int, str, str]:
    """Run native tool ``name`` with ``args`` plus ``--progress``, calling
    ``progress(done, total)`` for every ``progress DONE TOTAL`` line it prints
    on stderr.  Return (exit status, stdout, the other stderr lines)."""
    cmd = [str(tool_path(name)), *args, "--progress"]
    other: list[str] = []
    # stdout goes to a file: a large JSON document must not block on a pipe
    # while stderr is being read.
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as out:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True,
                                    preexec_fn=_die_with_parent())
        except OSError as exc:
            raise TiersError(f"cannot run {name}: {exc.strerror or exc}") from None
        try:
            for line in proc.stderr:
                words = line.split()
                if len(words) == 3 and words[0] == "progress":
                    if progress is not None:
                        progress(int(words[1]), int(words[2]))
                elif line.strip():
                    other.append(line)
            proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        out.seek(0)
        return proc.returncode, out.read(), "".join(other)


def parse_json(name: str, stdout: str) -> dict:
    """Return the JSON object a native tool printed; TiersError if it is not JSON."""
    try:
        return json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise TiersError(f"{name} printed invalid JSON ({exc})") from None


def list_arg(value) -> str | None:
    """Return a list option as a native tool's comma-separated text: a list
    or other iterable is joined, text is kept, None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, Iterable):
        return ",".join(str(v) for v in value)
    return str(value)
