"""Every file tiers writes goes through here.

Two promises to the user:

* **No surprise after a long run.**  ``check_writable`` (and ``check_outputs``
  for a whole command line) refuses a bad output path *before* any
  measurement starts, in one line that names the option and the path.
* **No damage.**  ``write_text`` / ``write_bytes`` never write through a
  device, a FIFO, a socket or a symbolic link (unless asked to follow it),
  never follow a file planted at a predictable temporary name, and never leave
  a half-written file: the data goes to a fresh temporary file created with
  ``O_EXCL`` under an unpredictable name in the target's folder, is flushed
  and fsync'ed, and then renamed onto the target in one step.  On any failure
  the temporary file is removed and the target is left as it was.

``"-"`` means standard output everywhere.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

from .errors import TiersError

STDOUT = "-"

# Options that name one output FILE, by their argparse attribute.
FILE_OPTIONS = {
    "json": "--json",
    "plot": "--plot",
    "rankfile": "--rankfile",
    "hydra": "--hydra",
    "slurm": "--slurm",
    "table": "--table",
    "permutation": "--permutation",
    "output": "--output",
}
# Paths the user allowed to be symbolic links (``--follow-symlinks``), as
# given on the command line: ``check_outputs`` fills it, the writers read it.
_follow: set[str] = set()

# Options that name one output FOLDER.
FOLDER_OPTIONS = {
    "out": "--out",
}


def _show(path) -> str:
    """Return ``path`` as printable text on one line (control characters escaped)."""
    text = os.fsdecode(path)
    if text.isprintable():
        return text
    return ascii(text)[1:-1]


def _fail(option: str | None, path, why: str, code: int = 2) -> TiersError:
    """One-line error naming the option and the path: exit status 2 for a
    path refused up front, 1 for a write that failed on the way."""
    where = f"{option} {_show(path)}" if option else _show(path)
    return TiersError(f"{where}: {why}", code=code)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO, not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file"
    if stat.S_ISLNK(mode):
        return "is a symbolic link (give --follow-symlinks to write through it)"
    return "is not a regular file"


def _check_new_parent(p: Path, option: str | None, shown) -> None:
    """A path that does not exist yet: its nearest existing ancestor must be a
    folder we may create entries in."""
    anc = p.parent
    while True:
        try:
            st = os.stat(anc)
            break
        except FileNotFoundError:
            if anc == anc.parent:
                raise _fail(option, shown, "no existing folder above it") from None
            anc = anc.parent
        except OSError as exc:
            raise _fail(option, shown, f"cannot look at {_show(anc)}: "
                        f"{exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise _fail(option, shown, f"{_show(anc)} is not a folder")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise _fail(option, shown, f"folder {_show(anc)} is not writable")


def _resolve(path, option: str | None, follow_symlinks: bool) -> Path:
    """Check ``path`` as a target of a file write and return the path to
    replace (the link's target when following a symbolic link)."""
    if path is None or os.fspath(path) == "":
        raise _fail(option, "''", "empty file name")
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if text.endswith("/"):
        raise _fail(option, text, "names a folder, not a file")
    p = Path(text)
    follow_symlinks = follow_symlinks or text in _follow
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _fail(option, text, f"cannot write to it: {exc.strerror or exc}") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        if not follow_symlinks:
            raise _fail(option, text, _kind(st.st_mode))
        p = Path(os.path.realpath(p))
        try:
            st = os.stat(p)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise _fail(option, text, f"cannot write to it: {exc.strerror or exc}") from None
    if st is None:
        _check_new_parent(p, option, text)
        return p
    if not stat.S_ISREG(st.st_mode):
        raise _fail(option, text, _kind(st.st_mode))
    if not os.access(p.parent, os.W_OK | os.X_OK):
        raise _fail(option, text, f"folder {_show(p.parent)} is not writable")
    return p


def check_writable(path, option: str | None = "--json", *,
                   follow_symlinks: bool = False) -> None:
    """Raise TiersError (exit code 2, one line naming ``option`` and ``path``)
    unless ``path`` is ``"-"`` (standard output), a new file whose folder
    exists or can be created and is writable, or an existing regular file we
    may replace.  Devices, FIFOs, sockets, folders, symbolic links (unless
    ``follow_symlinks``) and the empty string are refused.  Writes nothing."""
    if path is not None and os.fspath(path) == STDOUT:
        return
    _resolve(path, option, follow_symlinks)


def check_folder(path, option: str | None = "--out", *,
                 follow_symlinks: bool = False) -> None:
    """Raise TiersError (exit code 2, one line) unless ``path`` is an existing
    writable folder or a new one that can be created.  Writes nothing."""
    if path is None or os.fspath(path) == "":
        raise _fail(option, "''", "empty folder name")
    text = os.fsdecode(os.fspath(path))
    p = Path(text)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        _check_new_parent(p, option, text)
        return
    except OSError as exc:
        raise _fail(option, text, f"cannot write to it: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        if not follow_symlinks:
            raise _fail(option, text, "is a symbolic link (give --follow-symlinks "
                        "to use the folder it points to)")
        try:
            st = os.stat(p)
        except OSError as exc:
            raise _fail(option, text, f"cannot write to it: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise _fail(option, text, "exists and is not a folder")
    if not os.access(p, os.W_OK | os.X_OK):
        raise _fail(option, text, "folder is not writable")


def check_outputs(args) -> None:
    """Check every output option set in the parsed command line ``args``
    (``--json``, ``--plot`` and the plot next to ``--json``, ``--rankfile``,
    ``--hydra``, ``--slurm``, ``--table``, ``--permutation``, ``--output``,
    and the ``--out`` folder); raise TiersError on the first bad one.
    With ``args.follow_symlinks`` the writers later follow those paths'
    symbolic links.  Call it before any measurement starts."""
    follow = bool(getattr(args, "follow_symlinks", False))
    for attr, option in FILE_OPTIONS.items():
        value = getattr(args, attr, None)
        if value is not None and not isinstance(value, bool):
            check_writable(value, option, follow_symlinks=follow)
            if follow:
                _follow.add(os.fsdecode(os.fspath(value)))
    json_path = getattr(args, "json", None)
    if (hasattr(args, "plot") and getattr(args, "plot", None) is None
            and isinstance(json_path, str) and json_path not in ("", STDOUT)):
        png = str(Path(json_path).with_suffix(".png"))
        check_writable(png, "--plot (next to --json)", follow_symlinks=follow)
        if follow:
            _follow.add(png)
    for attr, option in FOLDER_OPTIONS.items():
        value = getattr(args, attr, None)
        if value is not None and not isinstance(value, bool):
            check_folder(value, option, follow_symlinks=follow)


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no other way to read it
    os.umask(mask)
    return mask


def _write_stdout(data: bytes) -> None:
    try:
        sys.stdout.flush()
        out = getattr(sys.stdout, "buffer", None)
        if out is None:
            sys.stdout.write(data.decode("utf-8", errors="replace"))
        else:
            out.write(data)
        sys.stdout.flush()
    except OSError as exc:
        raise TiersError(f"cannot write to standard output: {exc.strerror or exc}",
                         code=1) from None


def write_bytes(path, data: bytes, *, follow_symlinks: bool = False,
                option: str | None = None) -> Path | None:
    """Write ``data`` to ``path`` atomically (see the module docstring):
    folders are created, the file's mode follows the umask, and on any
    failure no temporary file is left and the target is untouched.  ``"-"``
    writes to standard output.  Return the path written (None for stdout);
    raise TiersError with one line on failure."""
    if path is not None and os.fspath(path) == STDOUT:
        _write_stdout(bytes(data))
        return None
    target = _resolve(path, option, follow_symlinks)
    shown = os.fspath(path)
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(option, shown, f"cannot create folder {_show(folder)}: "
                    f"{exc.strerror or exc}", code=1) from None
    # NAME_MAX is 255: keep the temporary name within it.
    prefix = "." + target.name[:200] + "."
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
    except OSError as exc:
        raise _fail(option, shown, f"cannot write: {exc.strerror or exc}",
                    code=1) from None
    try:
        try:
            os.fchmod(fd, 0o666 & ~_umask())
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise _fail(option, shown, f"cannot write: {exc.strerror or exc}",
                        code=1) from None
        raise
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass  # the data is in place; some file systems cannot sync a folder
    return target


def write_text(path, text: str, *, follow_symlinks: bool = False,
               option: str | None = None) -> Path | None:
    """Write ``text`` (UTF-8) to ``path`` like ``write_bytes``; return the
    path written (None for ``"-"``, standard output)."""
    if path is not None and os.fspath(path) == STDOUT:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except OSError as exc:
            raise TiersError(f"cannot write to standard output: {exc.strerror or exc}",
                             code=1) from None
        return None
    return write_bytes(path, text.encode("utf-8"), follow_symlinks=follow_symlinks,
                       option=option)
