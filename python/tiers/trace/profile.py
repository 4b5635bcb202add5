"""The profile of a trace, as MPI profilers (mpiP, Score-P's scorep-score,
IPM) show it: MPI functions sorted by time, with the time share, calls,
time per call, bytes and the spread over ranks, and the messages of each
function per size bucket.

Times are wall time inside each MPI function, **summed over ranks** (a
function that takes 1 s on each of 4 ranks counts 4 s); ``min``, ``mean``
and ``max`` are taken over the ranks of the run (a rank that never called
the function counts 0 s).  ``time %`` is the share of the MPI time of all
ranks, so the column sums to 100.

``profile(doc, folder)`` returns plain data; ``format_profile`` the text
tables that ``tiers trace stats`` prints.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TiersError
from . import raw

SORT_KEYS = ("time", "calls", "bytes", "name")

#: Message size buckets: (label, largest size in bytes of the bucket).
BUCKETS = (("0 B", 0), ("1-64 B", 64), ("65 B-1 KiB", 1 << 10), ("1-64 KiB", 64 << 10),
           ("64 KiB-1 MiB", 1 << 20), ("> 1 MiB", None))


def bucket_of(nbytes: int) -> str:
    """Return the label of the size bucket holding a message of ``nbytes``."""
    for label, top in BUCKETS:
        if top is None or nbytes <= top:
            return label
    return BUCKETS[-1][0]


def size_buckets(folder: str | Path) -> dict[str, dict[str, int]]:
    """Return ``{function: {bucket: messages}}`` from the raw event files of
    trace folder ``folder``: every point-to-point message a rank sent or
    received, and every collective by the bytes this rank sent, counted for
    the MPI function it happened in; {} when the folder has no raw files."""
    from . import has_raw, post_native, post_tool

    if post_tool() is not None and has_raw(folder):
        return post_native(Path(folder), otf2=False)["buckets"]
    out: dict[str, dict[str, int]] = {}
    for log in raw.read_all(folder):
        stacks: dict[int, list[int]] = {}
        for kind, th, func, _t, p in log.events:
            st = stacks.setdefault(th, [])
            if kind == raw.ENTER:
                st.append(func)
                continue
            if kind == raw.LEAVE:
                if st and st[-1] == func:
                    st.pop()
                continue
            if kind in (raw.SEND, raw.ISEND, raw.RECV, raw.IRECV_DONE):
                nbytes = p[3]
            elif kind == raw.COLL_END:
                nbytes = p[3]
            else:
                continue
            current = next((f for f in reversed(st) if f != raw.FN_SWAPOUT), None)
            if current is None:
                continue
            row = out.setdefault(log.region_name(current), {})
            label = bucket_of(nbytes)
            row[label] = row.get(label, 0) + 1
    return out


def profile(doc: dict, folder: str | Path | None = None, *, sort: str = "time",
            top: int | None = None) -> dict:
    """Return the profile of trace summary ``doc`` (a ``tiers.trace/1``
    document): ``functions`` (a list of rows sorted by ``sort``, at most
    ``top``), ``mpi_time_s`` (all functions, all ranks), ``ranks``,
    ``duration_s``, ``mpi_share`` (MPI time / (duration x ranks)),
    ``times`` ("summed over ranks") and, when ``folder`` holds the raw
    files, ``buckets`` ({function: {bucket: messages}})."""
    if sort not in SORT_KEYS:
        raise TiersError(f"--sort: unknown key '{sort}' (choose from {', '.join(SORT_KEYS)})")
    s = doc.get("summary") or {}
    ranks = (doc.get("samples") or {}).get("ranks") or []
    nranks = int(s.get("ranks") or len(ranks) or 1)
    names = sorted({name for r in ranks for name in r.get("functions", {})}
                   | set(s.get("functions", {})))
    rows = []
    for name in names:
        per = [r.get("functions", {}).get(name, {}) for r in ranks]
        times = [float(e.get("time_s", 0.0)) for e in per] + [0.0] * (nranks - len(per))
        calls = [int(e.get("calls", 0)) for e in per] + [0] * (nranks - len(per))
        tot = s.get("functions", {}).get(name)
        total_calls = int(tot["calls"]) if tot else sum(calls)
        total_time = float(tot["time_s"]) if tot else sum(times)
        total_bytes = int(tot["bytes"]) if tot else sum(int(e.get("bytes", 0)) for e in per)
        rows.append({
            "name": name, "calls": total_calls, "time_s": total_time, "bytes": total_bytes,
            "time_per_call_s": total_time / total_calls if total_calls else None,
            "time_min_s": min(times), "time_mean_s": sum(times) / len(times),
            "time_max_s": max(times), "calls_min": min(calls), "calls_max": max(calls),
            "ranks_calling": sum(1 for c in calls if c),
        })
    mpi_time = sum(r["time_s"] for r in rows)
    for r in rows:
        r["time_pct"] = 100.0 * r["time_s"] / mpi_time if mpi_time > 0 else 0.0
    key = {"time": lambda r: (-r["time_s"], r["name"]),
           "calls": lambda r: (-r["calls"], -r["time_s"], r["name"]),
           "bytes": lambda r: (-r["bytes"], -r["time_s"], r["name"]),
           "name": lambda r: r["name"]}[sort]
    rows.sort(key=key)
    duration = float(s.get("duration_s") or 0.0)
    out = {"sort": sort, "ranks": nranks, "duration_s": duration, "mpi_time_s": mpi_time,
           "mpi_share": mpi_time / (duration * nranks) if duration > 0 else None,
           "times": "summed over ranks", "functions": rows[:top] if top else rows,
           "shown": min(len(rows), top) if top else len(rows), "total_functions": len(rows)}
    sites = (doc.get("samples") or {}).get("sites")
    if isinstance(sites, list) and sites:
        srows = []
        for site in sites:
            times = [float(site.get("times", {}).get(str(r), 0.0)) for r in range(nranks)]
            calls = int(site["calls"])
            srows.append({
                "site": site["site"], "function": site["function"], "calls": calls,
                "time_s": float(site["time_s"]), "bytes": int(site["bytes"]),
                "time_pct": 100.0 * float(site["time_s"]) / mpi_time if mpi_time > 0 else 0.0,
                "time_per_call_s": float(site["time_s"]) / calls if calls else None,
                "time_min_s": min(times), "time_mean_s": sum(times) / len(times),
                "time_max_s": max(times)})
        skey = {"time": lambda r: (-r["time_s"], r["site"]),
                "calls": lambda r: (-r["calls"], -r["time_s"], r["site"]),
                "bytes": lambda r: (-r["bytes"], -r["time_s"], r["site"]),
                "name": lambda r: (r["function"], r["site"])}[sort]
        srows.sort(key=skey)
        out["sites"] = srows[:top] if top else srows
    kept = (doc.get("samples") or {}).get("buckets")
    if isinstance(kept, dict):
        out["buckets"] = kept           # counted by tiers-trace-post with the summary
    elif folder is not None and (Path(folder) / "raw").is_dir():
        out["buckets"] = size_buckets(folder)
    return out


def _time(seconds: float | None, micro: str) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} {micro}s"


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]

    def line(cells):
        return "  ".join(c.ljust(w) if i < left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header)] + [line(r) for r in rows]


def format_profile(prof: dict, micro: str | None = None) -> str:
    """Return the profile as text: the function table, then the messages
    per size bucket (when known).  ``micro`` is the micro sign to use
    (default: what standard output can encode)."""
    if micro is None:
        from ..render import MICRO as micro
    n = prof["ranks"]
    head = (f"MPI time {_time(prof['mpi_time_s'], micro)}, summed over {n} "
            f"rank{'s' if n != 1 else ''}")
    if prof.get("mpi_share") is not None:
        head += f" ({100 * prof['mpi_share']:.1f} % of the run's rank time)"
    head += f"; sorted by {prof['sort']}"
    if prof["shown"] < prof["total_functions"]:
        head += f", top {prof['shown']} of {prof['total_functions']} functions"
    rows = [[r["name"], str(r["calls"]), _time(r["time_s"], micro), f"{r['time_pct']:.1f}",
             _time(r["time_per_call_s"], micro), str(r["bytes"]),
             _time(r["time_min_s"], micro), _time(r["time_mean_s"], micro),
             _time(r["time_max_s"], micro)] for r in prof["functions"]]
    lines = [head, ""] + _table(["function", "calls", "time", "time %", "per call", "bytes",
                                 "min/rank", "mean/rank", "max/rank"], rows)
    if prof.get("sites"):
        lines += ["", "call sites (file:line where the program has debug information)", ""]
        lines += _table(["site", "function", "calls", "time", "time %", "per call", "bytes",
                         "min/rank", "mean/rank", "max/rank"],
                        [[r["site"], r["function"], str(r["calls"]), _time(r["time_s"], micro),
                          f"{r['time_pct']:.1f}", _time(r["time_per_call_s"], micro),
                          str(r["bytes"]), _time(r["time_min_s"], micro),
                          _time(r["time_mean_s"], micro), _time(r["time_max_s"], micro)]
                         for r in prof["sites"]], left=2)
    buckets = prof.get("buckets")
    if buckets and any(f in buckets for f in (r["name"] for r in prof["functions"])):
        labels = [b for b, _ in BUCKETS if any(b in row for row in buckets.values())]
        shown = {r["name"] for r in prof["functions"]}
        order = sorted((f for f in buckets if f in shown),
                       key=lambda f: (-sum(buckets[f].values()), f))
        brows = [[f, str(sum(buckets[f].values()))] + [str(buckets[f].get(b, 0)) for b in labels]
                 for f in order]
        lines += ["", "messages per size bucket (sent and received, all ranks; collectives "
                  "by bytes sent)", ""]
        lines += _table(["function", "messages", *labels], brows)
        tops = []
        for b in labels:
            best = max(order, key=lambda f: buckets[f].get(b, 0))  # first of equals
            if buckets[best].get(b, 0):
                tops.append(f"{b}: {best} ({buckets[best][b]})")
        lines += ["", "top caller per bucket: " + "; ".join(tops)]
    return "\n".join(lines)


def _elf_is_exec(path: str) -> bool:
    """Whether ``path`` is a fixed-address ELF executable (ET_EXEC), whose
    addresses need no load bias; False for PIE and shared objects."""
    try:
        with open(path, "rb") as f:
            head = f.read(18)
    except OSError:
        return False
    if len(head) < 18 or head[:4] != b"\x7fELF":
        return False
    order = "little" if head[5] == 1 else "big"
    return int.from_bytes(head[16:18], order) == 2


def _addr2line(obj: str, addrs: list[int]) -> dict[int, str]:
    """Return {address: "file:line"} for the addresses of ``obj`` that its
    debug information places (binutils' addr2line); {} when there is none."""
    import shutil
    import subprocess

    tool = shutil.which("addr2line")
    if not tool or not addrs:
        return {}
    try:
        proc = subprocess.run([tool, "-e", obj, "-a", *(hex(a) for a in addrs)],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    lines = proc.stdout.splitlines()
    out = {}
    for i in range(0, len(lines) - 1, 2):
        try:
            a = int(lines[i], 16)
        except ValueError:
            continue
        where = lines[i + 1].strip()
        if where and not where.startswith("??"):
            where = where.split(" (discriminator")[0]
            out[a] = where
    return out


def resolve_sites(sites: list[dict]) -> list[dict]:
    """Return the call sites of a trace (``sites`` as tiers-trace-post
    prints them: one entry per rank, function and return address) merged
    over ranks and resolved to ``file:line`` where the program's debug
    information says (else ``object+0xOFFSET``): rows with ``site``,
    ``function``, ``calls``, ``time_s``, ``bytes`` and per-rank ``times``
    ({rank: seconds})."""
    per_obj: dict[str, set[int]] = {}
    keyed = []
    for s in sites:
        obj = s.get("object")
        if obj:
            vaddr = s["address"] if _elf_is_exec(obj) else s["address"] - s["load_bias"]
            vaddr -= 1                      # inside the call instruction, not after it
            per_obj.setdefault(obj, set()).add(vaddr)
        else:
            vaddr = s["address"]
        keyed.append((obj, vaddr, s))
    names = {obj: _addr2line(obj, sorted(addrs)) for obj, addrs in per_obj.items()}
    rows: dict[tuple, dict] = {}
    for obj, vaddr, s in keyed:
        if obj and vaddr in names.get(obj, {}):
            where = names[obj][vaddr]
        elif obj:
            where = f"{Path(obj).name}+{vaddr:#x}"
        else:
            where = f"{s['address']:#x}"
        row = rows.setdefault((where, s["function"]), {
            "site": where, "function": s["function"], "calls": 0, "time_s": 0.0, "bytes": 0,
            "times": {}})
        row["calls"] += s["calls"]
        row["time_s"] += s["time_s"]
        row["bytes"] += s["bytes"]
        row["times"][str(s["rank"])] = row["times"].get(str(s["rank"]), 0.0) + s["time_s"]
    return sorted(rows.values(), key=lambda r: (-r["time_s"], r["site"], r["function"]))
