"""Turning the tracer's raw event files into an OTF2 archive and a summary.

The tracer writes compact records during the run (native/src/trace); this
module, run by ``tiers trace`` after the program ended, converts them:

- :func:`write_otf2` writes ``DIR/traces.otf2`` (+ ``traces.def`` and
  ``traces/``) with the ``otf2`` package (the OTF2 3.x library's Python
  bindings): one location group per rank, one location per thread, one
  communicator per MPI communicator (the same one on every member rank),
  timestamps in nanoseconds on rank 0's clock;
- :func:`summarize` returns the per-rank and per-function figures, the
  point-to-point communication matrix and the receiver-first share.
"""

from __future__ import annotations

import collections
import math
from pathlib import Path

from ..errors import TiersError
from . import raw
from .raw import (COLL_BEGIN, COLL_END, ENTER, FN_SWAPOUT, IRECV_DONE, IRECV_POST, ISEND,
                  ISEND_DONE, LEAVE, RECV, SEND, SWAP, SWAP_UNSYNC, XFER)

#: Records that carry figures for the summary but are no OTF2 event.
NOT_EVENTS = (SWAP, XFER)

ARCHIVE_NAME = "traces"
#: The zero-length region that marks, at its last time stamp, a rank whose
#: tracing ended early (stopped, killed, or no MPI_Finalize).
STOPPED_NAME = "tiers_rank_stopped"
#: The region of a swap-out the auto policy made alone, because the buffer
#: filled between two collectives on MPI_COMM_WORLD (the others are
#: ``tiers_swapout``).
UNSYNC_NAME = "tiers_swapout_unsynchronised"


def rank_stopped(log: raw.RankLog) -> bool:
    """Return whether ``log``'s rank stopped tracing before MPI_Finalize
    ended it: a STOP record, or no finalize clock step (killed)."""
    return bool(log.stopped) or (1 not in log.clocks and bool(log.events))


def close_open(log: raw.RankLog) -> tuple[list, int]:
    """Return ``(closing, last)``: the regions still open at the end of
    ``log`` (a rank killed inside calls), as ``(thread, func)`` innermost
    first per thread, and the rank's last local time stamp, where they are
    closed."""
    stacks = collections.defaultdict(list)
    last = None
    for kind, th, func, t, _ in log.events:
        last = t if last is None or t > last else last
        if kind == ENTER:
            stacks[th].append(func)
        elif kind == LEAVE and stacks[th] and stacks[th][-1] == func:
            stacks[th].pop()
    closing = [(th, f) for th in sorted(stacks) for f in reversed(stacks[th])]
    return closing, last if last is not None else 0


def otf2_event_count(log: raw.RankLog) -> int:
    """Return how many OTF2 events :func:`write_otf2` writes for ``log``:
    every event record but the swap-out statistics, plus the Leaves that
    close regions left open and the stopped mark (an Enter and a Leave)."""
    n = sum(1 for e in log.events if e[0] not in NOT_EVENTS)
    n += len(close_open(log)[0])
    return n + (2 if rank_stopped(log) else 0)


def unify_comms(logs: list[raw.RankLog]) -> tuple[dict, dict]:
    """Return ``(gid_of, comms)``: ``gid_of[(rank, local_id)]`` is the global
    id of a rank's communicator, and ``comms[gid] = (members, parent_gid)``
    with members as world ranks.  Communicators are the same when their
    members are the same and they are the k-th such one each member
    defined (communicators are created collectively, in the same order)."""
    gid_of, comms, key_gid = {}, {}, {}
    for log in logs:
        seen = collections.Counter()
        for cid in log.comm_order:
            parent, members, flags = log.comms[cid]
            key = (tuple(members), flags & 1)
            k = (key, seen[key])
            seen[key] += 1
            if k not in key_gid:
                key_gid[k] = len(comms)
                comms[key_gid[k]] = (list(members), None if parent < 0 else (log.rank, parent))
            gid_of[(log.rank, cid)] = key_gid[k]
    for gid, (members, parent) in list(comms.items()):
        comms[gid] = (members, gid_of.get(parent) if parent is not None else None)
    return gid_of, comms


def max_matrix_ranks() -> int:
    """Return the most ranks whose dense communication matrices (bytes and
    messages, n x n each, as the summary holds them) fit in an eighth of
    this machine's memory, at 64 bytes per entry while they are built."""
    from .. import validate

    return max(256, math.isqrt(validate.machine_memory() // 8 // (2 * 64)))


def check(logs: list[raw.RankLog]) -> None:
    """Raise TiersError, naming the rank and event, when the logs do not
    describe one run the converters can follow: a rank count too large for
    the summary's matrices, an event on a communicator its rank never
    defined, or a communicator member outside the run's ranks."""
    if not logs:
        return
    size = max(log.size for log in logs)
    limit = max_matrix_ranks()
    if size > limit:
        raise TiersError(f"rank {logs[0].rank}'s raw file says the run had {size} ranks: more "
                         f"than the {limit} whose communication matrix fits in memory here")
    for log in logs:
        for cid in log.comm_order:
            members = log.comms[cid][1]
            if members and (min(members) < 0 or max(members) >= size):
                raise TiersError(f"rank {log.rank}'s raw file: communicator {cid} has a member "
                                 f"outside ranks 0..{size - 1}")
        for k, (kind, _, _, _, p) in enumerate(log.events):
            if kind in (SEND, RECV, ISEND, IRECV_DONE, COLL_END) and p[0] not in log.comms:
                raise TiersError(f"rank {log.rank}'s raw file: event {k} uses communicator "
                                 f"{p[0]}, which the file never defines")


def _world(comms: dict, gid: int, peer: int) -> int | None:
    members = comms[gid][0]
    return members[peer] if 0 <= peer < len(members) else None


class _OTF2Messages:
    """While active, OTF2's error messages go to ``said`` through its error
    callback (``OTF2_Error_RegisterCallback``) instead of its default
    handler, which prints them to the process's stderr; the callback that
    was registered before is put back on exit.  Nothing else of the process
    (its file descriptors, other threads' output) is touched."""

    def __init__(self, said: list[str] | None = None) -> None:
        self.said: list[str] = said if said is not None else []
        self._lib = None
        self._cb = None
        self._old = None

    def __enter__(self) -> "_OTF2Messages":
        import ctypes

        try:
            from _otf2.Config import conf
            lib = conf.lib  # the libotf2 that otf2's bindings call
            reg = lib.OTF2_Error_RegisterCallback
        except (ImportError, AttributeError, OSError):
            return self  # an otf2 build without it: its default handler prints
        # OTF2_ErrorCode (*)(void *user, const char *file, uint64_t line,
        #                    const char *function, OTF2_ErrorCode code,
        #                    const char *format, va_list va); a va_list
        # parameter is a pointer in the x86-64 and AArch64 calling conventions
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int,
                                 ctypes.c_char_p, ctypes.c_void_p)
        libc = ctypes.CDLL(None)
        libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                   ctypes.c_void_p]
        try:
            name = lib.OTF2_Error_GetName
            name.restype = ctypes.c_char_p
            name.argtypes = [ctypes.c_int]
        except AttributeError:
            name = None

        def record(user, file, line, function, code, fmt, va):
            buf = ctypes.create_string_buffer(512)
            if fmt:
                libc.vsnprintf(buf, len(buf), fmt, va)
            what = buf.value.decode(errors="replace").strip()
            kind = name(code).decode(errors="replace") if name and name(code) else str(code)
            self.said.append(f"{kind}: {what}" if what else kind)
            return code

        self._cb = proto(record)
        reg.restype = ctypes.c_void_p
        reg.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._old = reg(ctypes.cast(self._cb, ctypes.c_void_p), None)
        self._lib = lib
        return self

    def __exit__(self, *exc) -> None:
        if self._lib is not None:
            self._lib.OTF2_Error_RegisterCallback(self._old, None)
            self._lib = None


def _writer_class():
    """otf2's archive writer, except that an archive that failed to open is
    not closed again when the object is collected: otf2's own ``__del__``
    then fails on the definitions it never made and Python prints that
    failure as a traceback after tiers' error."""
    import otf2

    class Writer(otf2.writer.Writer):
        def __del__(self):
            try:
                super().__del__()
            except Exception:  # noqa: BLE001 - the open failed, and said so already
                pass

    return Writer


def write_otf2(logs: list[raw.RankLog], folder: str | Path,
               messages: list[str] | None = None) -> Path:
    """Write the OTF2 archive of ``logs`` into ``folder``; return the path of
    its anchor file (``traces.otf2``).  Raise TiersError when the otf2
    package is missing.  OTF2's own messages go into ``messages`` (when
    given) instead of the process's stderr."""
    try:
        import otf2
        from otf2.enums import (CollectiveOp, GroupType, LocationGroupType, LocationType,
                                Paradigm, RegionRole)
    except ImportError:
        raise TiersError("the Python package otf2 is missing: pip install otf2 "
                         "(the OTF2 archive needs it)") from None
    folder = Path(folder)
    check(logs)
    gid_of, comms = unify_comms(logs)
    undefined_root = 0xFFFFFFFF
    import contextlib

    said = _OTF2Messages(messages)
    with said, contextlib.closing(_writer_class()(str(folder), archive_name=ARCHIVE_NAME,
                                                  timer_resolution=1_000_000_000)) as trace:
        defs = trace.definitions
        machine = defs.system_tree_node("machine")
        nodes, groups, locations = {}, {}, {}
        for log in logs:
            if log.host not in nodes:
                nodes[log.host] = defs.system_tree_node(log.host, class_name="node",
                                                        parent=machine)
            groups[log.rank] = defs.location_group(
                f"MPI Rank {log.rank}", location_group_type=LocationGroupType.PROCESS,
                system_tree_parent=nodes[log.host])
        for log in logs:
            threads = sorted({e[1] for e in log.events} | {0})
            for th in threads:
                name = "Master thread" if th == 0 else f"Thread {th}"
                locations[(log.rank, th)] = defs.location(
                    name, type=LocationType.CPU_THREAD, group=groups[log.rank])
        rank_locs = [locations[(log.rank, 0)] for log in logs]
        defs.group("MPI_COMM_WORLD locations", group_type=GroupType.COMM_LOCATIONS,
                   paradigm=Paradigm.MPI, members=rank_locs)
        rank_index = {log.rank: i for i, log in enumerate(logs)}
        given = {}                      # gid -> the name MPI_Comm_set_name gave it
        for log in logs:
            for cid, cname in log.comm_names.items():
                if (log.rank, cid) in gid_of:
                    given.setdefault(gid_of[(log.rank, cid)], cname)
        otf2_comms = {}
        for gid in sorted(comms):
            members, parent = comms[gid]
            name = "MPI_COMM_WORLD" if gid == 0 else (
                "MPI_COMM_SELF" if len(members) == 1 and gid in
                {gid_of.get((r, 1)) for r in rank_index} else given.get(gid, f"MPI_Comm {gid}"))
            grp = defs.group(f"{name} group", group_type=GroupType.COMM_GROUP,
                             paradigm=Paradigm.MPI,
                             members=[rank_index[m] for m in members if m in rank_index])
            otf2_comms[gid] = defs.comm(name, group=grp,
                                        parent=otf2_comms.get(parent) if parent is not None
                                        else None)
        regions = {}

        def region(log, func, unsync=False):
            name = UNSYNC_NAME if unsync else log.region_name(func)
            if name not in regions:
                if func == FN_SWAPOUT:
                    regions[name] = defs.region(name, region_role=RegionRole.ARTIFICIAL,
                                                paradigm=Paradigm.MEASUREMENT_SYSTEM)
                else:
                    regions[name] = defs.region(name, region_role=RegionRole.FUNCTION,
                                                paradigm=Paradigm.MPI)
            return regions[name]

        for log in logs:
            writers = {th: trace.event_writer_from_location(loc)
                       for (r, th), loc in locations.items() if r == log.rank}
            g = log.to_global
            last = collections.defaultdict(int)
            # the k-th swap-out region is the k-th SWAP record's (written
            # after its Leave): unsynchronised ones get their own region
            unsync = [bool(e[4][3] & SWAP_UNSYNC) for e in log.events if e[0] == SWAP]
            swap_in = swap_out = 0
            for kind, th, func, t, p in log.events:
                if kind in NOT_EVENTS:
                    continue
                w = writers[th]
                ts = max(g(t), last[th])  # OTF2 wants non-decreasing time per location
                last[th] = ts
                if kind == ENTER:
                    u = False
                    if func == FN_SWAPOUT:
                        u = swap_in < len(unsync) and unsync[swap_in]
                        swap_in += 1
                    w.enter(ts, region(log, func, u))
                elif kind == LEAVE:
                    u = False
                    if func == FN_SWAPOUT:
                        u = swap_out < len(unsync) and unsync[swap_out]
                        swap_out += 1
                    w.leave(ts, region(log, func, u))
                elif kind == SEND:
                    w.mpi_send(ts, p[1], otf2_comms[gid_of[(log.rank, p[0])]], p[2], p[3])
                elif kind == RECV:
                    w.mpi_recv(ts, p[1], otf2_comms[gid_of[(log.rank, p[0])]], p[2], p[3])
                elif kind == ISEND:
                    w.mpi_isend(ts, p[1], otf2_comms[gid_of[(log.rank, p[0])]], p[2], p[3], p[4])
                elif kind == ISEND_DONE:
                    w.mpi_isend_complete(ts, p[0])
                elif kind == IRECV_POST:
                    w.mpi_irecv_request(ts, p[0])
                elif kind == IRECV_DONE:
                    w.mpi_irecv(ts, p[1], otf2_comms[gid_of[(log.rank, p[0])]], p[2], p[3], p[4])
                elif kind == COLL_BEGIN:
                    w.mpi_collective_begin(ts)
                elif kind == COLL_END:
                    root = p[1] if p[1] >= 0 else undefined_root
                    w.mpi_collective_end(ts, CollectiveOp(p[2]),
                                         otf2_comms[gid_of[(log.rank, p[0])]], root, p[3], p[4])
            # a killed rank: close what it left open at its last time stamp
            closing, t_last = close_open(log)
            end = max([g(t_last)] + list(last.values()))
            for th, func in closing:
                writers[th].leave(max(end, last[th]), region(log, func))
                last[th] = max(end, last[th])
            if rank_stopped(log):
                if STOPPED_NAME not in regions:
                    regions[STOPPED_NAME] = defs.region(
                        STOPPED_NAME, region_role=RegionRole.ARTIFICIAL,
                        paradigm=Paradigm.MEASUREMENT_SYSTEM)
                ts = max(end, last[0])
                writers[0].enter(ts, regions[STOPPED_NAME])
                writers[0].leave(ts, regions[STOPPED_NAME])
    return folder / f"{ARCHIVE_NAME}.otf2"


def overhead_spread(logs: list[raw.RankLog], accumulated: dict, duration: float) -> dict:
    """Return how far apart the ranks' accumulated swap-out times are under
    the sync policy, where every rank swaps out at the same points:
    ``spread_s`` is the largest difference between ranks of the swap-out
    time accumulated up to and including the k-th swap-out, over all k;
    ``spread_share`` is that as a share of the trace's duration.  Both are
    None unless the policy is sync and every rank made the same number of
    swap-outs (otherwise the k-th swap-outs are not the same point)."""
    seqs = [accumulated.get(log.rank, []) for log in logs]
    if (not seqs or any(log.info.get("policy") not in ("sync", "auto") for log in logs)
            or len({len(s) for s in seqs}) != 1):
        return {"spread_s": None, "spread_share": None}
    worst = max((max(s[k] for s in seqs) - min(s[k] for s in seqs)
                 for k in range(len(seqs[0]))), default=0)
    spread = worst * 1e-9
    return {"spread_s": spread, "spread_share": spread / duration if duration > 0 else None}


def summarize(logs: list[raw.RankLog]) -> dict:
    """Return the figures of a trace as plain data:

    ``ranks``     per rank: events, per-function calls/bytes/time, swap-outs,
                  clock offsets, whether tracing stopped early and why
    ``functions`` the same per-function figures summed over ranks
    ``comm_matrix`` point-to-point ``bytes`` and ``messages`` from row rank
                  to column rank (world ranks, counted at the sender)
    and the totals: p2p bytes and messages, collective bytes, duration,
    data and message rates, receiver-first share, swap-outs (with the
    spread of accumulated swap-out time between ranks, see
    :func:`overhead_spread`)."""
    if not logs:
        raise TiersError("no rank left a trace")
    check(logs)
    n = max(log.size for log in logs)
    gid_of, comms = unify_comms(logs)
    mbytes = [[0] * n for _ in range(n)]
    mmsgs = [[0] * n for _ in range(n)]
    total_fn = {}
    ranks_out = []
    sends = collections.defaultdict(list)   # (src, dst, gid, tag) -> [(start, bytes)]
    recvs = collections.defaultdict(list)   # (src, dst, gid, tag) -> [posted]
    first, last = None, None
    coll_bytes = 0
    nbr = [0, 0]                            # neighbourhood collectives' blocks in the matrix
    accumulated = {}                        # rank -> swap-out time so far, at each swap-out
    for log in logs:
        g = log.to_global
        fn = {}
        stacks = collections.defaultdict(list)  # thread -> [(func, t_enter)]
        posted = {}
        swaps = {"count": 0, "bytes": 0, "time_s": 0.0, "write_s": 0.0, "unsynchronised": 0}
        acc = accumulated.setdefault(log.rank, [])
        rma_to = collections.Counter()          # target world rank -> bytes
        rma_ops = collections.Counter()
        io = {"read_bytes": 0, "write_bytes": 0, "reads": 0, "writes": 0, "collective_calls": 0}
        for kind, th, func, t, p in log.events:
            gt = g(t)
            first = gt if first is None or gt < first else first
            last = gt if last is None or gt > last else last
            st = stacks[th]
            if kind == ENTER:
                st.append((func, gt))
                continue
            if kind == LEAVE:
                if st and st[-1][0] == func:
                    f, t0 = st.pop()
                    if f != FN_SWAPOUT:
                        e = fn.setdefault(log.region_name(f), {"calls": 0, "bytes": 0, "time_s": 0.0})
                        e["calls"] += 1
                        e["time_s"] += (gt - t0) * 1e-9
                continue
            current = next((f for f, _ in reversed(st) if f != FN_SWAPOUT), None)
            start = st[-1][1] if st else gt
            nbytes = 0
            if kind in (SEND, ISEND):
                gid = gid_of[(log.rank, p[0])]
                dst = _world(comms, gid, p[1])
                nbytes = p[3]
                if dst is not None and 0 <= dst < n:
                    mbytes[log.rank][dst] += nbytes
                    mmsgs[log.rank][dst] += 1
                    sends[(log.rank, dst, gid, p[2])].append((start, nbytes))
            elif kind == IRECV_POST:
                posted[p[0]] = start
            elif kind in (RECV, IRECV_DONE):
                gid = gid_of[(log.rank, p[0])]
                src = _world(comms, gid, p[1])
                nbytes = p[3]
                when = start if kind == RECV else posted.pop(p[4], start)
                if src is not None:
                    recvs[(src, log.rank, gid, p[2])].append(when)
            elif kind == COLL_END:
                nbytes = p[3] + p[4]
                coll_bytes += nbytes
            elif kind == XFER:
                what = raw.XFER_KINDS.get(p[0], str(p[0]))
                nbytes = p[2]
                if what == "neighbor":      # a neighbourhood collective's block
                    if 0 <= p[1] < n:
                        mbytes[log.rank][p[1]] += nbytes
                        mmsgs[log.rank][p[1]] += 1
                        nbr[0] += nbytes
                        nbr[1] += 1
                    nbytes = 0                 # counted at its COLL_END
                elif what in ("read", "write"):
                    io[f"{what}_bytes"] += nbytes
                    io[f"{what}s"] += 1
                    io["collective_calls"] += p[3] & 1
                else:
                    rma_ops[what] += 1
                    rma_to[p[1]] += nbytes
            elif kind == SWAP:
                swaps["count"] += 1
                swaps["bytes"] += p[0]
                swaps["write_s"] += p[1] * 1e-9
                swaps["time_s"] += p[2] * 1e-9
                if p[3] & SWAP_UNSYNC:
                    swaps["unsynchronised"] += 1
                acc.append((acc[-1] if acc else 0) + p[2])
            if nbytes and current is not None:
                e = fn.setdefault(log.region_name(current), {"calls": 0, "bytes": 0, "time_s": 0.0})
                e["bytes"] += nbytes
        for name, e in fn.items():
            t = total_fn.setdefault(name, {"calls": 0, "bytes": 0, "time_s": 0.0})
            for k in t:
                t[k] += e[k]
        ranks_out.append({
            "rank": log.rank, "host": log.host, "events": otf2_event_count(log),
            "functions": dict(sorted(fn.items())), "swapouts": swaps,
            "clock_offset_ns": {"init": log.clocks.get(0, (None,))[0],
                                "finalize": log.clocks.get(1, (None,))[0]},
            "thread_level": log.info.get("thread_level"),
            "stopped": log.stopped, "truncated": log.truncated,
            "finalized": 1 in log.clocks,
            "policy": log.info.get("policy"),
            "rma_bytes": {str(k): v for k, v in sorted(rma_to.items())},
            "rma_ops": dict(sorted(rma_ops.items())),
            "io_bytes": {"read": io["read_bytes"], "write": io["write_bytes"]},
            "io_calls": {"read": io["reads"], "write": io["writes"],
                         "collective": io["collective_calls"]},
            "memory": log.memory or None,
        })
    matched = rf_bytes = 0
    for key, slist in sends.items():
        rlist = sorted(recvs.get(key, []))
        for (start, nbytes), posted_at in zip(sorted(slist), rlist):
            matched += nbytes
            if posted_at < start:
                rf_bytes += nbytes
    p2p_bytes = sum(map(sum, mbytes)) - nbr[0]
    p2p_msgs = sum(map(sum, mmsgs)) - nbr[1]
    duration = ((last - first) * 1e-9) if first is not None else 0.0
    swap_tot = {k: sum(r["swapouts"][k] for r in ranks_out)
                for k in ("count", "bytes", "time_s", "write_s", "unsynchronised")}
    swap_tot.update(overhead_spread(logs, accumulated, duration))
    return {
        "ranks": n,
        "events": sum(r["events"] for r in ranks_out),
        "duration_s": duration,
        "p2p_bytes": p2p_bytes,
        "p2p_messages": p2p_msgs,
        "coll_bytes": coll_bytes,
        "neighbor_bytes": nbr[0],
        "neighbor_messages": nbr[1],
        "rma_bytes": sum(sum(r["rma_bytes"].values()) for r in ranks_out),
        "io_bytes": {k: sum(r["io_bytes"][k] for r in ranks_out) for k in ("read", "write")},
        "data_rate_bytes_per_s": p2p_bytes / duration if duration > 0 else None,
        "message_rate_per_s": p2p_msgs / duration if duration > 0 else None,
        "receiver_first_share": rf_bytes / matched if matched else None,
        "matched_p2p_bytes": matched,
        "swapouts": swap_tot,
        "stopped_ranks": [log.rank for log in logs if rank_stopped(log)],
        "functions": dict(sorted(total_fn.items())),
        "comm_matrix": {"ranks": n, "bytes": mbytes, "messages": mmsgs},
        "per_rank": ranks_out,
    }
