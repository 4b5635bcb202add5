"""``tiers mbc run``: an unmodified MPI program over memory-based messaging.

    tiers mbc run [--stats] [--json FILE|-] [--timeout S] -- LAUNCHER ... PROGRAM ARGS

The command runs a launcher line (``mpirun -n 4 ./app``) with
``libtiers-mbc-mpi.so`` preloaded in every rank: the library carries the
program's point-to-point traffic (and the collectives it builds on it) over
libtiers-mbc and passes the rest to the MPI library.  Any ``LD_PRELOAD`` the
environment or the command line already sets is kept, after it; so under
``tiers trace`` (either way round: ``tiers trace -- tiers mbc run -- mpirun
...`` or ``tiers mbc run -- tiers trace -- mpirun ...``) both libraries are
loaded, the tracer first, and the trace shows the program's own calls.

With ``--stats`` (or ``--json``) every rank writes its traffic counters at
``MPI_Finalize`` into a temporary folder (removed afterwards); they are added
up into one ``tiers.mbc.run/1`` document: messages and bytes per size bucket,
the share carried by direct remote writes (receive posted first) and by the
per-sender memory FIFO, unexpected messages, wildcard receives, and which
calls were carried and which were passed to MPI.  See docs/mbc.md.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from . import launch, native, result
from .errors import TiersError

LIBRARY = "libtiers-mbc-mpi.so"
#: Overrides the library's path (tests, or a library built elsewhere).
LIBRARY_ENV = "TIERS_MBC_MPI_LIB"
STATS_ENV = "TIERS_MBC_MPI_STATS"
#: Upper bounds of the size buckets, in bytes (None: larger).
BUCKETS = (0, 64, 1 << 10, 16 << 10, 256 << 10, 4 << 20, None)


def library_path() -> Path:
    """Return the path of the interposition library (``$TIERS_MBC_MPI_LIB``
    when set, else the installed one); raise TiersError when it is missing."""
    override = os.environ.get(LIBRARY_ENV)
    lib = Path(override) if override else native.lib_path(LIBRARY)
    if not lib.is_file():
        if override:
            raise TiersError(f"{LIBRARY_ENV}={override}: no such file")
        raise TiersError(f"the MBC interposition library {lib} is missing; reinstall tiers "
                         "with 'make build'")
    return lib


def split_command(words: list[str]) -> list[str]:
    """Return the command after ``tiers mbc run [options]``, without a
    leading ``--``."""
    words = [str(w) for w in words]
    return words[1:] if words and words[0] == "--" else words


def command_preload(command: list[str]) -> str | None:
    """Return the ``LD_PRELOAD`` value a launcher command line sets for its
    ranks (``-x LD_PRELOAD=V``, ``-x LD_PRELOAD`` meaning this environment's,
    ``-genv``/``-env LD_PRELOAD V``, ``--export=...,LD_PRELOAD=V``), or None."""
    i = launch.find_launcher_word(command)
    if i is None:
        return None
    words = [str(w) for w in command[i + 1:]]
    words = words[: launch._program_index(words)]  # noqa: SLF001 - the launcher's own options
    found = None
    for j, w in enumerate(words):
        nxt = words[j + 1] if j + 1 < len(words) else ""
        if w in ("-x", "--x") and nxt.split("=", 1)[0] == "LD_PRELOAD":
            found = nxt.split("=", 1)[1] if "=" in nxt else os.environ.get("LD_PRELOAD")
        elif w in ("-genv", "-env") and nxt == "LD_PRELOAD" and j + 2 < len(words):
            found = words[j + 2]
        elif w.startswith("--export="):
            for item in w.split("=", 1)[1].split(","):
                if item.startswith("LD_PRELOAD="):
                    found = item.split("=", 1)[1]
    return found or None


def compose_preload(existing: str | None, lib: str) -> str:
    """Return ``existing`` (an ``LD_PRELOAD`` value, e.g. the tracer's) with
    ``lib`` after it; ``lib`` is not added twice."""
    parts = [p for p in (existing or "").replace(" ", ":").split(":") if p]
    if lib not in parts:
        parts.append(lib)
    return ":".join(parts)


def _runs_tiers(command: list[str]) -> bool:
    """Return whether the command starts another tiers command in front of
    its launcher (``tiers trace -- mpirun ...``): that one sets the ranks'
    ``LD_PRELOAD`` itself, from its own environment."""
    i = launch.find_launcher_word(command)
    head = command[: i if i is not None else len(command)]
    return any(os.path.basename(w) == "tiers" or w in ("tiers", "tiers.cli") for w in head)


def run(command: list[str], *, stats: bool = False, timeout: float | None = None,
        argv: list[str] | None = None, stream=True) -> tuple[int, dict | None]:
    """Run ``command`` with the interposition library preloaded in every
    rank; return ``(exit status of the command, statistics document or
    None)``.  The document (``tiers.mbc.run/1``) is made with ``stats`` and
    only when at least one rank wrote its counters.  Raise TiersError on a
    bad command or a missing library; an interrupted run raises
    :class:`launch.Interrupted` after the job is stopped."""
    from .trace import _check_program

    command = split_command(command)
    if not command:
        raise TiersError("no command to run: tiers mbc run [--stats] -- mpirun -n N ./app",
                         code=2)
    _check_program(command, False)
    lib = str(library_path())
    existing = command_preload(command) or os.environ.get("LD_PRELOAD")
    env = {"LD_PRELOAD": compose_preload(existing, lib)}
    folder = Path(tempfile.mkdtemp(prefix="tiers-mbc-stats-")) if stats else None
    try:
        if folder is not None:
            env[STATS_ENV] = str(folder / "rank")
        cmd = launch.inject_env(command, env)
        # An inner 'tiers trace' replaces the ranks' LD_PRELOAD with the
        # tracer followed by its own environment's: give it ours there.
        launcher_env = dict(env) if _runs_tiers(command) else None
        label = launch.guess_program(command)
        stopped = None
        try:
            res = launch.run_command(cmd, timeout=timeout, stream=stream, check=False,
                                     env=launcher_env, label=label)
            rc = res.returncode
        except launch.LaunchError as exc:
            if not exc.timed_out:
                raise
            stopped, rc = f"timed out after {timeout:g} s and was stopped", exc.returncode
        if folder is None:
            if stopped:
                raise TiersError(f"{label} {stopped}", code=1)
            return rc, None
        per_rank = read_rank_files(folder)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    if not per_rank:
        if stopped:
            raise TiersError(f"{label} {stopped} before any rank wrote its statistics", code=1)
        if rc == 0:
            raise TiersError(f"no rank wrote MBC statistics: {label} made no MPI calls "
                             f"through {LIBRARY} (is it an MPI program built with the MPI "
                             "tiers was built with?)", code=1)
        return rc, None
    params = {"command": list(command), "library": lib, "returncode": rc}
    warnings = []
    if stopped:
        params["stopped"] = stopped
        warnings.append(f"{label} {stopped}: the statistics are those of the ranks that "
                        "reached MPI_Finalize")
    summary = aggregate(per_rank)
    missing = summary.get("missing_ranks") or []
    if missing:
        warnings.append(f"{len(missing)} of {summary['size']} ranks wrote no statistics "
                        f"(first: rank {missing[0]}): the totals cover the others only")
    extra = {"warnings": warnings} if warnings else {}
    if warnings:
        summary["reliable"] = False
        summary["why"] = warnings[0]
    doc = result.new_document("mbc.run", params=params, samples={"ranks": per_rank},
                              summary=summary, argv=argv, **extra)
    return rc, doc


def read_rank_files(folder: Path) -> list[dict]:
    """Return the per-rank statistics the library wrote into ``folder``
    (``rank.R.json``), ordered by rank.  A file that is not a statistics
    object raises TiersError naming it."""
    out = []
    for path in sorted(folder.glob("rank.*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TiersError(f"cannot read the statistics of {path.name}: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("rank"), int) or \
                not isinstance(data.get("buckets"), list):
            raise TiersError(f"{path.name} is not a statistics file of {LIBRARY}")
        out.append(data)
    out.sort(key=lambda d: d["rank"])
    return out


def _bucket_index(max_bytes) -> int:
    try:
        return BUCKETS.index(max_bytes)
    except ValueError:
        raise TiersError(f"unknown size bucket {max_bytes!r} in the statistics") from None


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def aggregate(per_rank: list[dict]) -> dict:
    """Return the totals over ranks of per-rank statistics: ``buckets``
    (``max_bytes``, ``messages``, ``bytes``, ``remote_write``, ``fifo`` and
    their shares of the bucket's messages), ``messages``, ``bytes``,
    ``remote_write_share``, ``fifo_share``, ``unexpected``,
    ``wildcard_receives``, ``carried`` and ``passed_to_mpi`` (call: count,
    largest first), ``ranks`` (how many wrote statistics), ``size`` (the
    job's rank count) and ``missing_ranks``."""
    buckets = [{"max_bytes": b, "messages": 0, "bytes": 0, "remote_write": 0, "fifo": 0}
               for b in BUCKETS]
    unexpected = wildcard = 0
    carried: dict[str, int] = {}
    passed: dict[str, int] = {}
    size = 0
    for r in per_rank:
        size = max(size, int(r.get("size") or 0), r["rank"] + 1)
        for b in r["buckets"]:
            t = buckets[_bucket_index(b.get("max_bytes"))]
            for key in ("messages", "bytes", "remote_write", "fifo"):
                t[key] += int(b.get(key) or 0)
        unexpected += int(r.get("unexpected") or 0)
        wildcard += int(r.get("wildcard_receives") or 0)
        for name, into in (("carried", carried), ("passed_to_mpi", passed)):
            for call, k in (r.get(name) or {}).items():
                into[call] = into.get(call, 0) + int(k)
    for t in buckets:
        t["remote_write_share"] = _share(t["remote_write"], t["messages"])
        t["fifo_share"] = _share(t["fifo"], t["messages"])
    messages = sum(t["messages"] for t in buckets)
    seen = {r["rank"] for r in per_rank}

    def ordered(d):
        return dict(sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))

    return {"ranks": len(per_rank), "size": size,
            "missing_ranks": [r for r in range(size) if r not in seen],
            "messages": messages, "bytes": sum(t["bytes"] for t in buckets),
            "remote_write_share": _share(sum(t["remote_write"] for t in buckets), messages),
            "fifo_share": _share(sum(t["fifo"] for t in buckets), messages),
            "buckets": buckets, "unexpected": unexpected, "wildcard_receives": wildcard,
            "carried": ordered(carried), "passed_to_mpi": ordered(passed)}


#: The size range of each bucket (upper bounds included).
BUCKET_LABELS = ("0 B", "1 - 64 B", "65 B - 1 KiB", "1 - 16 KiB", "16 - 256 KiB",
                 "256 KiB - 4 MiB", "> 4 MiB")


def bucket_label(i: int) -> str:
    """Return the size range of bucket ``i``, e.g. ``1 - 16 KiB`` (more
    than 1 KiB, at most 16 KiB)."""
    return BUCKET_LABELS[i]


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _bytes(n: int) -> str:
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n / f:.1f} {unit}"
    return f"{n} B"


def render(doc: dict, console) -> None:
    """Print a ``tiers.mbc.run/1`` document: the traffic per size bucket,
    the unexpected messages and wildcard receives, and the calls carried
    and passed to MPI.  Returns nothing."""
    from rich.table import Table

    s = doc["summary"]
    table = Table(title=f"Point-to-point traffic under tiers mbc ({s['ranks']} of "
                  f"{s['size']} ranks)")
    for col in ("size", "messages", "bytes", "remote write", "FIFO"):
        table.add_column(col, justify="right")
    for i, b in enumerate(s["buckets"]):
        table.add_row(bucket_label(i), str(b["messages"]), _bytes(b["bytes"]),
                      _pct(b["remote_write_share"]), _pct(b["fifo_share"]))
    table.add_row("all", str(s["messages"]), _bytes(s["bytes"]),
                  _pct(s["remote_write_share"]), _pct(s["fifo_share"]))
    console.print(table)
    console.print(f"unexpected messages {s['unexpected']}   wildcard receives "
                  f"{s['wildcard_receives']}", markup=False)
    calls = sorted(set(s["carried"]) | set(s["passed_to_mpi"]),
                   key=lambda c: (-(s["carried"].get(c, 0) + s["passed_to_mpi"].get(c, 0)), c))
    if calls:
        t2 = Table(title="MPI calls")
        for col, how in (("call", "left"), ("carried by MBC", "right"),
                         ("passed to MPI", "right")):
            t2.add_column(col, justify=how)
        for c in calls:
            t2.add_row(c, str(s["carried"].get(c, 0)), str(s["passed_to_mpi"].get(c, 0)))
        console.print(t2)
    for w in doc.get("warnings") or []:
        console.print(f"warning: {w}", markup=False, style="yellow")


def main(args, argv: list[str]) -> int:
    """``tiers mbc run``: run the command; with ``--stats`` or ``--json``
    print the traffic table and write the document.  Return the program's
    exit status (128 + N when a signal N ended it)."""
    from . import plot as tplot
    from .render import console as tiers_console, doc_on_stdout

    stats = bool(args.stats or args.json)
    def to_stderr(name, line):
        sys.stderr.write(line)
        sys.stderr.flush()

    # With the document on stdout, stdout holds it alone: the program's output goes to stderr.
    stream = to_stderr if doc_on_stdout() else True
    rc, doc = run(list(args.cmd), stats=stats, timeout=args.timeout, argv=argv, stream=stream)
    if doc is not None:
        console = tiers_console()
        render(doc, console)
        tplot.write_outputs(doc, args.json, None, lambda d, p: None, console)
    elif stats:
        print(f"tiers mbc: the program exited with code {rc} before any rank wrote its "
              "statistics", file=sys.stderr)
    if rc < 0:
        return 128 - rc
    return rc if rc < 256 else 1
