"""``tiers trace``: bounded-memory MPI tracing of unmodified programs.

    tiers trace [--budget 64M] [--policy auto|sync|full|off] [--tau S] [--swap-every F]
                [--out DIR] -- CMD...
    tiers trace stats DIR [--sort time|calls|bytes|name] [--top N]
    tiers trace export DIR --format chrome [-o FILE]

The command runs CMD (a launcher line such as ``mpirun -n 4 ./app``, or a
single program) with libtiers-trace.so preloaded in every rank, then turns
the per-rank raw event files into an OTF2 archive and ``summary.json``
(schema ``tiers.trace/1``).  See docs/trace.md.

Post-processing runs in the native tool ``tiers-trace-post``
(native/src/trace/post.c): one streaming pass per rank file, in bounded
memory, ranks in parallel.  The Python converter (convert.py, raw.py) is
kept only as a fallback for a tiers built without that tool, and for reading
raw files in tests and small tools: it holds a whole trace in memory.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import sys
from pathlib import Path

from .. import launch, native, output, result
from ..errors import TiersError
from . import convert, raw

MIN_BUDGET = 64 * 1024          # TIERS_TRACE_MIN_BUDGET in tiers/trace.h
DEFAULT_BUDGET = "64M"
POLICIES = ("auto", "sync", "full", "off")
LIBRARY = "libtiers-trace.so"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Return the byte count of a size such as ``64M``, ``512K``, ``1G``
    or ``100000`` (binary units; a trailing ``B``/``iB`` is accepted)."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", str(text), re.IGNORECASE)
    if not m:
        raise TiersError(f"'{text}' is not a size (use e.g. 64M, 512K, 1G)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def split_command(words: list[str]) -> tuple[str | None, list[str]]:
    """Return ``(subcommand, rest)`` for the words after ``tiers trace``:
    ``("stats", [DIR])``, ``("export", [...])``, or ``(None, CMD)`` for a
    command to trace (a leading ``--`` dropped)."""
    words = list(words)
    if words and words[0] == "--":
        return None, words[1:]
    if words and words[0] in ("stats", "export"):
        return words[0], words[1:]
    return None, words


MARKER = ".tiers-trace"           # in every folder tiers trace made


def _mark(folder: Path) -> None:
    output.write_text(str(folder / MARKER), json.dumps(
        {"made_by": "tiers trace", "created":
         _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}) + "\n")


def _new_default_folder() -> Path:
    """Create (exclusively) and return ``./tiers-trace-DATE-TIME``, with a
    ``-2``, ``-3`` ... suffix when that name is taken (two traces started in
    the same second)."""
    base = f"tiers-trace-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    for k in range(1, 1000):
        folder = Path(base if k == 1 else f"{base}-{k}").absolute()
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
        except OSError as exc:
            raise TiersError(f"cannot create {folder}: {exc.strerror or exc}") from None
    raise TiersError(f"cannot find a free folder name like {base}: give --out")


def _prepare(out: str | None, force: bool) -> tuple[Path, bool]:
    """Create the output folder; return ``(folder, created)``.  An existing,
    non-empty folder is refused unless ``force``, and ``force`` only ever
    clears a folder that tiers trace made (one holding the marker file)."""
    if out is None:
        folder, created = _new_default_folder(), True
    else:
        folder, created = Path(out).absolute(), False
        if folder.is_symlink():
            raise TiersError(f"--out {out} is a symbolic link; give the folder itself")
        if folder.exists() and not folder.is_dir():
            raise TiersError(f"--out {out} exists and is not a folder")
        if folder.is_dir() and any(folder.iterdir()):
            if not force:
                raise TiersError(f"{out} already exists and is not empty: choose another "
                                 "--out or add --force to replace the trace in it")
            if not (folder / MARKER).is_file():
                raise TiersError(f"--force: {out} was not made by tiers trace (no {MARKER} "
                                 "in it); refusing to remove anything from it")
            for name in ("raw", convert.ARCHIVE_NAME):
                shutil.rmtree(folder / name, ignore_errors=True)
            for name in (f"{convert.ARCHIVE_NAME}.otf2", f"{convert.ARCHIVE_NAME}.def",
                         "summary.json", "trace.chrome.json"):
                (folder / name).unlink(missing_ok=True)
        elif not folder.exists():
            try:
                folder.mkdir(parents=True)
                created = True
            except FileExistsError:
                pass
            except OSError as exc:
                raise TiersError(f"cannot create {out}: {exc.strerror or exc}") from None
    try:
        _mark(folder)
        (folder / "raw").mkdir(exist_ok=True)
    except (OSError, TiersError) as exc:
        _unprepare(folder, created)
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise TiersError(f"cannot write to {folder}: {why or exc}") from None
    return folder, created


def _unprepare(folder: Path, created: bool) -> None:
    """Remove what ``_prepare`` made when the run left no trace: the empty
    raw/ folder, the marker (unless an older trace is still there), and the
    folder itself when tiers created it."""
    try:
        (folder / "raw").rmdir()
    except OSError:
        pass
    try:
        only_marker = [p.name for p in folder.iterdir()] == [MARKER]
    except OSError:
        only_marker = False
    if created or only_marker:
        (folder / MARKER).unlink(missing_ok=True)
    if created:
        try:
            folder.rmdir()
        except OSError:
            pass


def prepare_folder(out: str | None, force: bool) -> Path:
    """Create and return the output folder (see ``_prepare``)."""
    return _prepare(out, force)[0]


def _check_program(command: list[str], vcluster: bool) -> None:
    """Refuse, before any folder is made, a command whose first word or
    whose program path (a word with a '/') does not exist."""
    first = str(command[0])
    if ("/" in first and not os.path.exists(first)) or \
            ("/" not in first and shutil.which(first) is None):
        raise TiersError(f"{first}: no such program")
    if vcluster or launch.find_launcher_word(command) is None:
        return
    words = [str(w) for w in command]
    if launch.program_index(words) < len(words):
        return     # a program that exists was found
    i = launch.find_launcher_word(words)
    for w in words[i + 1:]:
        if not w.startswith("-") and "/" in w and not os.path.exists(w):
            raise TiersError(f"{w}: no such program")


def parse_filter(text: str | None) -> str | None:
    """Return the tracer's TIERS_TRACE_FILTER for ``--filter`` text
    (``include=MPI_Send,MPI_Recv`` or ``exclude=MPI_Comm_rank``), or None;
    raise TiersError (bad usage) on anything else."""
    if text is None:
        return None
    m = re.fullmatch(r"(include|exclude)=(.*)", text.strip())
    names = [n.strip() for n in m.group(2).split(",")] if m else []
    if not m or not names or not all(re.fullmatch(r"[Mm][Pp][Ii]_\w+", n) for n in names):
        raise TiersError(f"--filter: '{text}' is not include=MPI_X,... or exclude=MPI_X,...",
                         code=2)
    return f"{m.group(1)}=" + ",".join(names)


def trace_env(folder: Path, budget: int, policy: str, tau: float | None,
              threshold: float | None, swap_every: int | None = None,
              filter_spec: str | None = None) -> dict[str, str]:
    """Return the environment that turns the tracer on in every rank."""
    lib = native.lib_path(LIBRARY)
    if not lib.is_file():
        raise TiersError(f"the tracer library {lib} is missing; reinstall tiers with 'make build'")
    preload = str(lib)
    if os.environ.get("LD_PRELOAD"):
        preload += ":" + os.environ["LD_PRELOAD"]
    env = {"LD_PRELOAD": preload, "TIERS_TRACE_DIR": str(folder),
           "TIERS_TRACE_BUDGET": str(budget), "TIERS_TRACE_POLICY": policy}
    if tau is not None:
        env["TIERS_TRACE_TAU"] = repr(float(tau))
    if threshold is not None:
        env["TIERS_TRACE_THRESHOLD"] = repr(float(threshold))
    if swap_every:
        env["TIERS_TRACE_SWAP_EVERY"] = str(int(swap_every))
    if filter_spec:
        env["TIERS_TRACE_FILTER"] = filter_spec
    return env


def _remove_archive(folder: Path) -> None:
    shutil.rmtree(folder / convert.ARCHIVE_NAME, ignore_errors=True)
    for name in (f"{convert.ARCHIVE_NAME}.otf2", f"{convert.ARCHIVE_NAME}.def"):
        (folder / name).unlink(missing_ok=True)


POST_TOOL = "tiers-trace-post"


def post_tool() -> Path | None:
    """Return the path of the native post-processing tool, or None when
    this tiers was built without it (the Python converter is used then)."""
    if os.environ.get("TIERS_TRACE_POST") == "python":
        return None
    try:
        return native.tool_path(POST_TOOL)
    except TiersError:
        return None


def _check_room(folder: Path) -> None:
    need = sum(f.stat().st_size for f in (folder / "raw").glob("rank-*.tev"))
    free = shutil.disk_usage(folder).free
    if free < 1.5 * need + (1 << 20):
        raise TiersError(f"no space left in {folder} for the OTF2 archive "
                         f"({_human(free)} free, about {_human(1.5 * need)} needed)")


def post_native(folder: Path, otf2: bool = True, jobs: int | None = None,
                chrome: str | None = None) -> dict:
    """Run ``tiers-trace-post`` on ``folder``: write the OTF2 archive (when
    ``otf2``) and return its JSON: ``summary`` (as convert.summarize, less
    ``per_rank``), ``per_rank``, ``buckets`` ({function: {bucket:
    messages}}) and ``post`` (how long it took, on how many threads).
    Raise TiersError with the tool's message, leaving no partial archive."""
    import subprocess
    import tempfile

    tool = post_tool()
    if tool is None:
        raise TiersError(f"native tool {POST_TOOL} is missing; reinstall tiers with 'make build'")
    folder = Path(os.path.normpath(folder))
    if otf2:
        _check_room(folder)
    args = [str(tool), str(folder)] + ([] if otf2 else ["--no-otf2"])
    if chrome is not None:
        args += ["--chrome", chrome]
    if jobs:
        args += ["--jobs", str(jobs)]
    # stdout to a file: the document can be large (the matrices)
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as out:
        proc = subprocess.run(args, stdout=out, stderr=subprocess.PIPE, text=True,
                              preexec_fn=native._die_with_parent())
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        if otf2:
            _remove_archive(folder)
        raise native.tool_error(POST_TOOL, proc.stderr, proc.returncode)
    return native.parse_json(POST_TOOL, text)


def has_raw(folder: str | Path) -> bool:
    """Return whether ``folder/raw`` holds any rank file (without reading them)."""
    raw_dir = Path(folder) / "raw"
    return raw_dir.is_dir() and any(raw_dir.glob("rank-*.tev"))


def write_archive(logs: list, folder: Path) -> str:
    """Write the OTF2 archive of ``logs`` into ``folder``; return its anchor
    file's name.  Raise TiersError, leaving no partial archive, when there is
    not enough room or the OTF2 library fails (its own messages, taken
    through OTF2's error callback, stay off the terminal and the first one
    goes into the error; nothing of the process's stderr is redirected)."""
    _check_room(folder)
    said: list[str] = []
    try:
        anchor = convert.write_otf2(logs, folder, messages=said)
    except TiersError:
        raise
    except Exception as exc:  # the otf2 package raises its own error types
        _remove_archive(folder)
        why = said[0] if said else str(exc)
        raise TiersError(f"cannot write the OTF2 archive in {folder}: {why}") from None
    for line in said:
        print(f"tiers trace: OTF2 said: {line}", file=sys.stderr)
    return anchor.name


def build_summary(folder: Path, params: dict, argv: list[str] | None = None,
                  otf2: bool = True, strict: bool = True,
                  warnings: list[str] | None = None) -> dict:
    """Convert ``folder``'s raw files: write the OTF2 archive (when ``otf2``)
    and ``summary.json``; return the summary document.  With ``strict``
    False a failure to write them (a full disk) does not raise: the
    document then says why in ``summary["archive_error"]`` (and
    ``summary["archive"]`` is None).  The native tool does the work when
    installed (see :func:`post_native`), the Python converter otherwise."""
    if post_tool() is not None:
        return _build_summary_native(folder, params, argv, otf2, strict, warnings)
    logs = raw.read_all(folder)
    if not logs:
        raise TiersError(f"{folder} holds no raw trace files")
    summary = convert.summarize(logs)
    per_rank = summary.pop("per_rank")
    summary["archive"] = None
    doc = result.new_document("trace", params=params, samples={"ranks": per_rank},
                              summary=summary, argv=argv,
                              **({"warnings": list(warnings)} if warnings else {}))
    try:
        if otf2:
            summary["archive"] = write_archive(logs, folder)
        result.write(doc, folder / "summary.json")
    except TiersError as exc:
        (folder / "summary.json.tmp").unlink(missing_ok=True)
        if strict:
            raise
        summary["archive_error"] = str(exc)
    return doc


def _build_summary_native(folder: Path, params: dict, argv: list[str] | None, otf2: bool,
                          strict: bool, warnings: list[str] | None) -> dict:
    if not has_raw(folder):
        raise TiersError(f"{folder} holds no raw trace files")
    archive_error = None
    try:
        post = post_native(folder, otf2=otf2)
    except TiersError as exc:
        if not otf2 or strict or "OTF2 archive" not in str(exc):
            raise
        # the archive could not be written (a full disk): the summary alone
        archive_error = str(exc)
        post = post_native(folder, otf2=False)
    summary = post["summary"]
    summary["archive"] = f"{convert.ARCHIVE_NAME}.otf2" if otf2 and archive_error is None \
        else None
    from . import profile

    doc = result.new_document("trace", params=params,
                              samples={"ranks": post["per_rank"], "buckets": post["buckets"],
                                       "sites": profile.resolve_sites(post.get("sites", [])),
                                       "post": post.get("post")},
                              summary=summary, argv=argv,
                              **({"warnings": list(warnings)} if warnings else {}))
    if post.get("post", {}).get("receiver_first", "computed") != "computed":
        doc.setdefault("warnings", []).append(
            "receiver_first_share " + post["post"]["receiver_first"])
    if archive_error is None:
        try:
            result.write(doc, folder / "summary.json")
        except TiersError as exc:
            (folder / "summary.json.tmp").unlink(missing_ok=True)
            if strict:
                raise
            archive_error = str(exc)
    if archive_error is not None:
        summary["archive_error"] = archive_error
    return doc


def run(command: list[str], *, out: str | None = None, budget: str = DEFAULT_BUDGET,
        policy: str = "auto", tau: float | None = None, threshold: float | None = None,
        swap_every: int | None = None, force: bool = False, timeout: float | None = None, argv: list[str] | None = None,
        stream: bool = True, vcluster: bool = False,
        ranks: int | None = None, filter: str | None = None) -> tuple[int, dict | None, Path]:
    """Trace ``command``; return ``(exit status of the command, summary
    document or None, output folder)``.  ``command`` is a launcher command
    line, or with ``vcluster`` the program alone, started on ``ranks`` ranks
    (default: every slot) of the virtual cluster of ``tiers vcluster up``.
    Raise TiersError on bad input or when no rank was traced."""
    if not command:
        raise TiersError("no command to trace: tiers trace [options] -- mpirun -n N ./app")
    nbytes = parse_size(budget)
    if nbytes < MIN_BUDGET:
        raise TiersError(f"--budget {budget} is below the minimum of {MIN_BUDGET // 1024}K")
    if policy not in POLICIES:
        raise TiersError(f"unknown --policy {policy}: use one of {', '.join(POLICIES)}")
    if tau is not None and tau < 0:
        raise TiersError("--tau must be zero (automatic) or positive")
    if threshold is not None and not 0 < threshold <= 1:
        raise TiersError("--threshold must lie in (0, 1]")
    if swap_every is not None:
        if swap_every < 1:
            raise TiersError(f"--swap-every must be a positive count (got {swap_every})")
        if policy not in ("sync", "auto"):
            raise TiersError("--swap-every goes with --policy auto or sync")
    filter_spec = parse_filter(filter)
    if ranks is not None and not vcluster:
        raise TiersError("-n goes with --vcluster; otherwise give it to your launcher")
    if vcluster:
        from .. import vcluster as vcl

        ranks = ranks if ranks is not None else vcl.slots_total()
        if ranks < 1:
            raise TiersError(f"-n must be positive (got {ranks})")
    _check_program(list(command), vcluster)
    folder, created = _prepare(out, force)
    try:
        env = trace_env(folder, nbytes, policy, tau, threshold, swap_every, filter_spec)
        if vcluster:
            cmd = vcl.command(list(command), ranks, env=env)
        else:
            cmd = launch.inject_env(command, env)
    except BaseException:
        _unprepare(folder, created)
        raise
    label = launch.guess_program(command)
    stopped, interrupted = None, None
    try:
        res = launch.run_command(cmd, timeout=timeout, stream=stream, check=False,
                                 label=label)
        rc = res.returncode
    except launch.LaunchError as exc:
        if not exc.timed_out:
            raise
        stopped, rc = f"timed out after {timeout:g} s", exc.returncode
    except launch.Interrupted as exc:
        stopped, rc, interrupted = f"stopped by {exc.signame}", -exc.signum, exc
    if not has_raw(folder):
        _unprepare(folder, created)
        if interrupted is not None:
            raise launch.Interrupted(interrupted.signum, label, message=(
                f"{stopped} before any rank was traced"))
        if stopped is not None:
            raise TiersError(f"{label} {stopped} before any rank was traced", code=1)
        if rc != 0:
            raise TiersError(f"{label} exited with code {rc} before any rank was traced",
                             code=rc if 0 < rc < 256 else 128 - rc if rc < 0 else 1)
        raise TiersError(f"no rank was traced: {label} made no MPI calls through the MPI "
                         "library tiers was built with (is it an MPI program?)")
    params = {"command": list(command), "budget": nbytes, "policy": policy, "tau_s": tau,
              "threshold": threshold, "swap_every": swap_every, "filter": filter_spec,
              "returncode": rc,
              "vcluster": vcluster}
    if stopped is not None:
        params["stopped"] = stopped
        params["complete"] = False
    doc = build_summary(folder, params, argv, strict=False,
                        warnings=None if stopped is None else
                        [f"{stopped}: the trace is incomplete"])
    if stopped is not None:
        where = "summary.json says so" if doc["summary"].get("archive_error") is None \
            else f"raw files in {folder / 'raw'}"
        line = f"{stopped}; the trace in {folder} is incomplete ({where})"
        if interrupted is not None:
            raise launch.Interrupted(interrupted.signum, label, message=line)
        raise TiersError(f"{label} {line}", code=1)
    return rc, doc, folder


# --------------------------------------------------------------------------
# stats and export


#: what a summary rebuilt from the OTF2 archive alone cannot hold
ARCHIVE_ONLY = ("rebuilt from the OTF2 archive (the raw files are gone): call sites, one-sided "
                "and file transfer bytes, the neighbourhood collectives' blocks in the "
                "communication matrix, swap-out sizes, the buffer's memory and the tracing "
                "settings are not in it")


def has_archive(folder: str | Path) -> bool:
    """Return whether ``folder`` holds an OTF2 archive written by tiers trace."""
    return (Path(folder) / f"{convert.ARCHIVE_NAME}.otf2").is_file()


@contextlib.contextmanager
def raw_from_archive(folder: str | Path):
    """Yield a temporary folder whose ``raw/`` rank files tiers-trace-post
    rebuilt from ``folder``'s OTF2 archive (in memory bounded by the
    archive's definitions; see native/src/trace/otf2raw.c), removed
    afterwards.  What the archive does not hold (ARCHIVE_ONLY) is left out."""
    import subprocess
    import tempfile

    tool = post_tool()
    if tool is None:
        raise TiersError(f"native tool {POST_TOOL} is missing; reinstall tiers with 'make build'")
    with tempfile.TemporaryDirectory(prefix="tiers-trace-otf2-") as tmp:
        proc = subprocess.run([str(tool), str(folder), "--from-otf2", tmp],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              preexec_fn=native._die_with_parent())
        if proc.returncode != 0:
            raise native.tool_error(POST_TOOL, proc.stderr, proc.returncode)
        yield Path(tmp)


def load(folder: str | Path) -> dict:
    """Return the summary document of trace folder ``folder``: its
    summary.json, else one made from its raw files, else one made from its
    OTF2 archive (with the warning ARCHIVE_ONLY)."""
    p = Path(folder)
    if not (p / "summary.json").is_file():
        if not has_raw(p) and has_archive(p) and post_tool() is not None:
            with raw_from_archive(p) as tmp:
                return build_summary(tmp, {"rebuilt": True, "from": "otf2"}, otf2=False,
                                     strict=False, warnings=[ARCHIVE_ONLY])
        if (p / "raw").is_dir():
            return build_summary(p, {"rebuilt": True}, otf2=False, strict=False)
        raise TiersError(f"{folder} is not a tiers trace folder (no summary.json)")
    return result.read(p / "summary.json", "trace")


def format_stats(doc: dict, folder: str | Path | None = None, *, sort: str = "time",
                 top: int | None = None) -> str:
    """Return the summary as plain-text tables: the totals, the profile of
    MPI functions (trace/profile.py; messages per size bucket when
    ``folder`` holds the raw files), the ranks and the comm matrix."""
    from . import profile
    s = doc["summary"]
    lines = [f"ranks {s['ranks']}   events {s['events']}   duration {s['duration_s']:.6f} s",
             f"point-to-point {_human(s['p2p_bytes'])} in {s['p2p_messages']} messages"
             + (f"   {_human(s['data_rate_bytes_per_s'])}/s, {s['message_rate_per_s']:.0f} msg/s"
                if s.get("data_rate_bytes_per_s") else ""),
             "receiver-first share of p2p bytes: "
             + ("-" if s.get("receiver_first_share") is None
                else f"{100 * s['receiver_first_share']:.1f} %"),
             f"collective bytes {_human(s['coll_bytes'])}"
             + (f"   (neighbourhood collectives: {_human(s['neighbor_bytes'])} in "
                f"{s['neighbor_messages']} blocks, in the comm matrix)"
                if s.get("neighbor_bytes") else ""),
             f"swap-outs {s['swapouts']['count']}   {_human(s['swapouts']['bytes'])}   "
             f"{s['swapouts']['time_s']:.6f} s"
             + (f"   {s['swapouts']['unsynchronised']} unsynchronised (buffer full between "
                "collectives)" if s["swapouts"].get("unsynchronised") else "")
             + ("" if s["swapouts"].get("spread_s") is None or not s["swapouts"]["count"] else
                f"   spread between ranks {1e6 * s['swapouts']['spread_s']:.0f} us"
                + ("" if s["swapouts"].get("spread_share") is None else
                   f" ({100 * s['swapouts']['spread_share']:.3f} % of the run)")), ""]
    lines.append(profile.format_profile(profile.profile(doc, folder, sort=sort, top=top)))
    lines.append("")
    lines.append(f"{'rank':>6}{'events':>10}{'swap-outs':>11}{'swap bytes':>14}{'swap s':>12}  note")
    for r in doc["samples"]["ranks"]:
        sw = r["swapouts"]
        note = f"stopped: {r['stopped']} (incomplete)" if r["stopped"] else (
            "file cut short (incomplete)" if r.get("truncated") else
            "" if r["finalized"] else "did not finalize")
        lines.append(f"{r['rank']:>6}{r['events']:>10}{sw['count']:>11}{sw['bytes']:>14}"
                     f"{sw['time_s']:>12.6f}  {note}")
    cm = s["comm_matrix"]
    if cm["ranks"] <= 16:
        lines.append("")
        lines.append("bytes sent (row: from rank, column: to rank)")
        lines.append("      " + "".join(f"{j:>12}" for j in range(cm["ranks"])))
        for i, row in enumerate(cm["bytes"]):
            lines.append(f"{i:>6}" + "".join(f"{v:>12}" for v in row))
    return "\n".join(lines)


def export_chrome(folder: str | Path, output_path: str | Path | None = None) -> Path:
    """Write the trace as Chrome/Perfetto trace-event JSON; return the file
    written (``-``: standard output).  tiers-trace-post writes it in one
    bounded pass: a B/E slice per MPI call, send and receive instants joined
    by flow arrows (``s``/``f`` events with one id per message), the
    communicator, root and bytes of collectives in their slice's end
    ``args``, process and thread names.  Without the tool, the Python
    fallback writes complete events and message instants only."""
    folder = Path(folder)
    out = str(output_path) if output_path else str(folder / "trace.chrome.json")
    if not has_raw(folder):
        if has_archive(folder) and post_tool() is not None:
            # the raw files are gone: the same export from the archive's events
            output.check_writable(out, "--output")
            with raw_from_archive(folder) as tmp:
                return _export_chrome_native(tmp, out)
        raise TiersError(f"{folder} is not a tiers trace folder (no raw/ files)")
    if post_tool() is None:
        return _export_chrome_python(folder, out)
    output.check_writable(out, "--output")
    return _export_chrome_native(folder, out)


def _export_chrome_native(folder: Path, out: str) -> Path:
    import tempfile

    target = Path(tempfile.gettempdir()) if out == output.STDOUT else Path(out).resolve().parent
    target.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target, prefix=".tiers-chrome.", suffix=".tmp")
    os.close(fd)
    try:
        post_native(folder, otf2=False, chrome=tmp)
        if out == output.STDOUT:
            sys.stdout.flush()
            with open(tmp, "rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer)
            sys.stdout.flush()
        else:
            os.chmod(tmp, 0o644)
            os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return Path(out)


def _export_chrome_python(folder: Path, out: str) -> Path:
    logs = raw.read_all(folder)
    if not logs:
        raise TiersError(f"{folder} is not a tiers trace folder (no raw/ files)")
    t0 = min((log.to_global(e[3]) for log in logs for e in log.events[:1]), default=0)
    events = []
    for log in logs:
        events.append({"ph": "M", "name": "process_name", "pid": log.rank,
                       "args": {"name": f"rank {log.rank} ({log.host})"}})
        stacks = {}
        for kind, th, func, t, p in log.events:
            us = (log.to_global(t) - t0) / 1000.0
            st = stacks.setdefault(th, [])
            if kind == raw.ENTER:
                st.append((func, us))
            elif kind == raw.LEAVE and st and st[-1][0] == func:
                _, start = st.pop()
                events.append({"ph": "X", "name": log.region_name(func), "pid": log.rank,
                               "tid": th, "ts": start, "dur": max(us - start, 0.0),
                               "cat": "tiers" if func == raw.FN_SWAPOUT else "MPI"})
            elif kind in (raw.SEND, raw.ISEND, raw.RECV, raw.IRECV_DONE):
                name = "send" if kind in (raw.SEND, raw.ISEND) else "recv"
                events.append({"ph": "i", "s": "t", "name": name, "pid": log.rank, "tid": th,
                               "ts": us, "args": {"peer": p[1], "tag": p[2], "bytes": p[3],
                                                  "comm": p[0]}})
    output.write_text(out, json.dumps({"traceEvents": events, "displayTimeUnit": "ns"})
                      + "\n", option="--output")
    return Path(out)


def _sub_parser(name: str) -> argparse.ArgumentParser:
    from ..cli import _Parser
    from .. import registry
    return _Parser(prog=f"tiers trace {name}",
                   description=registry.COMMANDS[f"trace {name}"].description,
                   epilog=registry.epilog(f"trace {name}"),
                   formatter_class=registry.HelpFormatter)


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Run ``tiers trace`` from parsed arguments; return the exit status."""
    sub, rest = split_command(args.cmd)
    if sub == "stats":
        from . import profile
        from .. import validate as V
        p = _sub_parser("stats")
        p.add_argument("dir", help="a trace folder (DIR)")
        p.add_argument("--sort", choices=profile.SORT_KEYS, default="time",
                       help="order of the functions: time (default), calls, bytes or name")
        p.add_argument("--top", type=V.count("--top"), metavar="N",
                       help="show only the first N functions")
        a = p.parse_args(rest)
        doc = load(a.dir)
        try:
            text = format_stats(doc, a.dir, sort=a.sort, top=a.top)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            # A summary.json with the right schema whose fields are missing
            # or of the wrong type (edited by hand, written by another tool).
            what = f"no field {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
            raise TiersError(f"{a.dir}: summary.json is not a complete tiers trace "
                             f"summary ({what})") from None
        print(text)
        if (doc.get("params") or {}).get("from") == "otf2":
            print(f"tiers trace stats: {ARCHIVE_ONLY}", file=sys.stderr)
        return 0
    if sub == "export":
        from ..cli import _deprecated
        p = _sub_parser("export")
        p.add_argument("--format", choices=["chrome"], default=None,
                       help="chrome: Chrome trace-event JSON (chrome://tracing, Perfetto)")
        _deprecated(p, "--chrome", "--format chrome", dest="format", const="chrome")
        p.add_argument("--output", "-o", metavar="FILE",
                       help="the file to write (default DIR/trace.chrome.json)")
        p.add_argument("dir", help="a trace folder (DIR)")
        a = p.parse_args(rest)
        if a.format is None:
            raise TiersError("no format given: add --format chrome (the old --chrome "
                             "works too)", code=2)
        output.check_outputs(a)
        print(export_chrome(a.dir, a.output))
        return 0
    rc, doc, folder = run(rest, out=args.out, budget=args.budget, policy=args.policy,
                          tau=args.tau, threshold=args.threshold,
                          swap_every=getattr(args, "swap_every", None), force=args.force,
                          timeout=args.timeout, argv=argv,
                          vcluster=getattr(args, "vcluster", False),
                          ranks=getattr(args, "ranks", None),
                          filter=getattr(args, "filter", None))
    s = doc["summary"]
    nomem = [r["rank"] for r in doc["samples"]["ranks"] if r["stopped"] == "out of memory"]
    if nomem:  # a trace buffer that could not be allocated is a failed trace
        raise TiersError(f"rank {nomem[0]} could not allocate its trace buffer of "
                         f"{_human(doc['params']['budget'])} (--budget); the trace in {folder} "
                         "is incomplete: give a smaller --budget", code=1)
    print(f"tiers trace: {folder}: {s['ranks']} ranks, {s['events']} events, "
          f"{_human(s['p2p_bytes'])} point-to-point, {s['swapouts']['count']} swap-outs",
          file=sys.stderr)
    stopped = [r for r in doc["samples"]["ranks"] if r["stopped"] or r["truncated"]]
    if stopped:
        r = stopped[0]
        print(f"tiers trace: rank {r['rank']}: tracing stopped early "
              f"({r['stopped'] or 'file cut short'}); the trace is incomplete"
              + (f"; {s['archive_error']}; the raw trace (whole records up to the stop) "
                 f"stays in {folder / 'raw'}" if s.get("archive_error") else ""),
              file=sys.stderr)
    elif s.get("archive_error"):
        print(f"tiers trace: {s['archive_error']}; the raw trace stays in {folder / 'raw'}",
              file=sys.stderr)
    if rc != 0:
        print(f"tiers trace: the program exited with code {rc}; the trace holds what was "
              "recorded until then", file=sys.stderr)
    if rc < 0:       # killed by a signal: the shell's convention
        return 128 - rc
    return rc if rc < 256 else 1
