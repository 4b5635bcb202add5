"""Reading the tracer's raw event files (``DIR/raw/rank-NNNNNN.tev``).

The layout is written by native/src/trace/trace.c and described in
docs/trace.md.  A file cut short (kill -9, full disk) reads back up to its
last whole record."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TiersError

MAGIC = b"TIERSTEV"
VERSION = 1

ENTER, LEAVE, SEND, RECV, ISEND, ISEND_DONE, IRECV_POST, IRECV_DONE, COLL_BEGIN, \
    COLL_END, COMM, SWAP, CLOCK, STOP, INFO, MEM, XFER, NAME, MAP = range(1, 20)
FN_SWAPOUT = 0xFFFF
SWAPOUT_NAME = "tiers_swapout"
POLICIES = {0: "sync", 1: "full", 2: "off", 3: "auto"}
#: SWAP flags: padded to tau, equalised across ranks, unsynchronised (the
#: auto policy's swap-out alone when the buffer filled between collectives)
SWAP_PADDED, SWAP_EQUAL, SWAP_UNSYNC = 1, 2, 4
STOP_REASONS = {1: "write error", 2: "buffer overflow between collectives", 3: "out of memory",
                4: "signal", 5: "MPI_Abort", 6: "another rank stopped"}

_HEAD = struct.Struct("<BBHHHq")
_MSG = struct.Struct("<iiiiQQ")
_REQ = struct.Struct("<Q")
_COLL = struct.Struct("<iiIIQQ")
_COMM = struct.Struct("<iiii")
_SWAP = struct.Struct("<QQQ")
_CLOCK = struct.Struct("<qqii")
_STOP = struct.Struct("<ii")
_INFO = struct.Struct("<iiQdd")
_U64 = struct.Struct("<Q")
_MEM = struct.Struct("<QQ")
_XFER = struct.Struct("<iiIIQ")
#: XFER kinds: one-sided transfers and file reads/writes
XFER_KINDS = {1: "put", 2: "get", 3: "accumulate", 4: "get_accumulate", 5: "fetch_and_op",
              6: "compare_and_swap", 7: "read", 8: "write", 9: "neighbor"}


@dataclass
class RankLog:
    """Everything one rank's raw file holds: header fields, definitions
    (communicators, clock offsets, settings) and the event list.

    ``events`` is a list of tuples ``(kind, thread, func, t_ns, payload)``
    in file order, with ``payload`` a tuple whose meaning depends on kind:
    SEND/RECV/ISEND/IRECV_DONE ``(comm, peer, tag, bytes, req)``,
    ISEND_DONE/IRECV_POST ``(req,)``, COLL_END ``(comm, root, op, sent,
    recvd)``, XFER ``(what, target world rank or -1, bytes, flags)`` (a
    one-sided transfer or a file read/write, see XFER_KINDS; flags bit 0: a
    collective file call), SWAP ``(bytes, write_ns, total_ns, flags, tau_ns)`` (flags: 1
    padded to tau, 2 equalised across ranks, 4 unsynchronised; tau_ns None
    in files of older tracers), others ``()``.  ``memory`` holds the trace
    buffer's bytes resident at the end and reserved (the budget), when the
    rank finalized."""

    rank: int
    size: int
    host: str
    functions: list[str]
    events: list = field(default_factory=list)
    comms: dict = field(default_factory=dict)   # local id -> (parent, members, flags)
    comm_order: list = field(default_factory=list)  # local ids in definition order
    clocks: dict = field(default_factory=dict)  # phase -> (offset_ns, rtt_ns, t_ns)
    info: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    comm_names: dict = field(default_factory=dict)  # local id -> name (MPI_Comm_set_name)
    maps: list = field(default_factory=list)    # (start, end, file offset, path) at MPI_Init
    stopped: str | None = None
    truncated: bool = False

    def region_name(self, func: int) -> str:
        """Return the name of region ``func`` (an MPI function or the swap-out)."""
        if func == FN_SWAPOUT:
            return SWAPOUT_NAME
        return self.functions[func] if 0 <= func < len(self.functions) else f"region{func}"

    def to_global(self, t_ns: int) -> int:
        """Return local time ``t_ns`` on rank 0's clock: the offsets measured
        at MPI_Init and MPI_Finalize, interpolated linearly (only the first
        when the run did not finalize)."""
        if 0 not in self.clocks:
            return t_ns
        o0, _, t0 = self.clocks[0]
        if 1 not in self.clocks:
            return t_ns + o0
        o1, _, t1 = self.clocks[1]
        if t1 <= t0:
            return t_ns + o0
        return t_ns + int(round(o0 + (o1 - o0) * (t_ns - t0) / (t1 - t0)))


#: The smallest payload (bytes after the 16-byte head) of each record kind.
_PAYLOAD = {ENTER: 0, LEAVE: 0, COLL_BEGIN: 0, SEND: _MSG.size, RECV: _MSG.size,
            ISEND: _MSG.size, IRECV_DONE: _MSG.size, ISEND_DONE: _REQ.size,
            IRECV_POST: _REQ.size, COLL_END: _COLL.size, COMM: _COMM.size,
            SWAP: _SWAP.size, CLOCK: _CLOCK.size, STOP: _STOP.size, INFO: _INFO.size,
            MEM: _MEM.size, XFER: _XFER.size, NAME: 8, MAP: 24}


def read(path: str | Path) -> RankLog:
    """Return the :class:`RankLog` of one raw file.  A file cut short reads
    up to its last whole record (``truncated`` is then set); anything else
    that is not what the tracer writes raises TiersError naming the file and
    the byte offset at fault."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise TiersError(f"cannot read {p}: {exc.strerror or exc}") from None
    if len(data) < 32 or data[:8] != MAGIC:
        raise TiersError(f"{p} is not a tiers raw trace file")
    version, hlen, rank, size, nfn, hostlen = struct.unpack_from("<6I", data, 8)
    if version != VERSION:
        raise TiersError(f"{p}: raw trace version {version}, this tiers reads {VERSION}")

    def bad(at: int, why: str) -> TiersError:
        return TiersError(f"{p}: byte {at}: {why} (the file is damaged or not a tiers raw file)")

    if hlen > len(data):
        raise bad(12, f"the header is {hlen} bytes but the file only {len(data)}")
    if hlen % 8 or hlen < 32:
        raise bad(12, f"header length {hlen} is not a multiple of 8 of at least 32")
    if size < 1 or rank >= size:
        raise bad(16, f"rank {rank} of {size} ranks")
    if nfn > hlen - 32:
        raise bad(24, f"{nfn} function names do not fit in a {hlen}-byte header")
    off = 32
    names = []
    for _ in range(nfn):
        end = data.find(b"\0", off, hlen)
        if end < 0:
            raise bad(off, "a function name runs past the header")
        names.append(data[off:end].decode("utf-8", errors="replace"))
        off = end + 1
    if hostlen < 1 or off + hostlen > hlen:
        raise bad(28, f"the host name ({hostlen} bytes) does not fit in the header")
    host = data[off:off + hostlen - 1].decode("utf-8", errors="replace")
    log = RankLog(rank=rank, size=size, host=host, functions=names)
    pos, n = hlen, len(data)
    ev = log.events
    while pos + 16 <= n:
        kind, flags, thread, func, words, t = _HEAD.unpack_from(data, pos)
        length = words * 8
        if length < 16:
            if not data[pos:].strip(b"\0"):
                log.truncated = True    # a zero-filled tail: the rest was never written
                break
            raise bad(pos, f"a record of {length} bytes")
        if pos + length > n:
            log.truncated = True
            break
        need = _PAYLOAD.get(kind)
        if need is None:
            raise bad(pos, f"unknown record kind {kind}")
        if length - 16 < need:
            raise bad(pos, f"a record of kind {kind} needs {16 + need} bytes, it has {length}")
        b = pos + 16
        if kind in (ENTER, LEAVE, COLL_BEGIN):
            ev.append((kind, thread, func, t, ()))
        elif kind in (SEND, RECV, ISEND, IRECV_DONE):
            comm, peer, tag, _, nbytes, req = _MSG.unpack_from(data, b)
            ev.append((kind, thread, func, t, (comm, peer, tag, nbytes, req)))
        elif kind in (ISEND_DONE, IRECV_POST):
            ev.append((kind, thread, func, t, (_REQ.unpack_from(data, b)[0], flags)))
        elif kind == COLL_END:
            comm, root, op, _, sent, recvd = _COLL.unpack_from(data, b)
            ev.append((kind, thread, func, t, (comm, root, op, sent, recvd)))
        elif kind == COMM:
            cid, parent, csize, cflags = _COMM.unpack_from(data, b)
            if cflags & 2:
                members = []
            elif 0 <= csize <= (length - 16 - _COMM.size) // 4:
                members = list(struct.unpack_from(f"<{csize}i", data, b + _COMM.size))
            else:
                raise bad(pos, f"a communicator of {csize} members in a {length}-byte record")
            log.comms[cid] = (parent, members, cflags)
            log.comm_order.append(cid)
        elif kind == SWAP:
            nbytes, wns, tns = _SWAP.unpack_from(data, b)
            tau_ns = _U64.unpack_from(data, b + 24)[0] if length >= 16 + 32 else None
            ev.append((kind, thread, func, t, (nbytes, wns, tns, flags, tau_ns)))
        elif kind == CLOCK:
            off_ns, rtt, phase, _ = _CLOCK.unpack_from(data, b)
            log.clocks[phase] = (off_ns, rtt, t)
        elif kind == STOP:
            reason = _STOP.unpack_from(data, b)[0]
            log.stopped = STOP_REASONS.get(reason, f"reason {reason}")
        elif kind == INFO:
            provided, policy, budget, tau, threshold = _INFO.unpack_from(data, b)
            log.info = {"thread_level": provided, "policy": POLICIES.get(policy, str(policy)),
                        "budget": budget, "tau_s": tau, "threshold": threshold, "t0": t,
                        "swap_every": (_U64.unpack_from(data, b + 32)[0]
                                       if length >= 16 + 40 else 0)}
        elif kind == XFER:
            what, target, xflags, _, nbytes = _XFER.unpack_from(data, b)
            ev.append((kind, thread, func, t, (what, target, nbytes, xflags)))
        elif kind == NAME:
            cid, nlen = struct.unpack_from("<ii", data, b)
            if not 0 <= nlen <= length - 24:
                raise bad(pos, f"a name of {nlen} bytes in a {length}-byte record")
            log.comm_names[cid] = data[b + 8:b + 8 + nlen].decode("utf-8", errors="replace")
        elif kind == MAP:
            start, end, moff = struct.unpack_from("<QQQ", data, b)
            path = data[b + 24:pos + length].split(b"\0", 1)[0].decode("utf-8", errors="replace")
            log.maps.append((start, end, moff, path))
        elif kind == MEM:
            resident, reserved = _MEM.unpack_from(data, b)
            log.memory = {"buffer_resident_bytes": resident, "buffer_reserved_bytes": reserved}
        pos += length
    if 0 < n - pos < 16:
        log.truncated = True        # cut inside a record's head
    return log


def read_all(folder: str | Path) -> list[RankLog]:
    """Return the logs of every rank in ``folder/raw``, ordered by rank.
    Raise TiersError when the files are not those of one run (ranks given
    twice, different rank counts)."""
    raw = Path(folder) / "raw"
    files = sorted(raw.glob("rank-*.tev")) if raw.is_dir() else []
    logs = sorted((read(f) for f in files), key=lambda log: log.rank)
    seen = {}
    for log in logs:
        if log.rank in seen:
            raise TiersError(f"{raw}: two raw files hold rank {log.rank}: the folder mixes runs")
        seen[log.rank] = log
        if log.size != logs[0].size:
            raise TiersError(f"{raw}: rank {log.rank} ran with {log.size} ranks, rank "
                             f"{logs[0].rank} with {logs[0].size}: the folder mixes runs")
    return logs


def write_synthetic(folder: str | Path, events: int, *, ranks: int = 2, nbytes: int = 8,
                    step_ns: int = 250, block: int = 1 << 16) -> list[Path]:
    """Write the raw files of a ping-pong run of about ``events`` events in
    all (ranks 2k and 2k+1 exchange ``nbytes``-byte messages with MPI_Send
    and MPI_Recv, 6 events a round trip and rank) into ``folder/raw``, in the
    tracer's record format, without running anything: the input of the
    post-processing benchmarks and tests.  The files hold what a finalized
    run holds (INFO, MPI_COMM_WORLD and MPI_COMM_SELF, both clock steps).
    Written in blocks of ``block`` round trips; return the files written."""
    import numpy as np

    if ranks < 2 or ranks % 2:
        raise TiersError("write_synthetic: ranks must be even and at least 2")
    raw_dir = Path(folder) / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    fns = ["MPI_Init", "MPI_Finalize", "MPI_Send", "MPI_Recv"]
    rounds = max(1, events // (6 * ranks))

    def head(kind, func, size, flags=0, thread=0):
        return kind | flags << 8 | thread << 16 | func << 32 | (size // 8) << 48

    rt = np.dtype([("e1", "<u8"), ("t1", "<i8"), ("m1", "<u8"), ("tm1", "<i8"),
                   ("c1", "<i4"), ("p1", "<i4"), ("g1", "<i4"), ("x1", "<i4"),
                   ("b1", "<u8"), ("r1", "<u8"), ("l1", "<u8"), ("tl1", "<i8"),
                   ("e2", "<u8"), ("t2", "<i8"), ("m2", "<u8"), ("tm2", "<i8"),
                   ("c2", "<i4"), ("p2", "<i4"), ("g2", "<i4"), ("x2", "<i4"),
                   ("b2", "<u8"), ("r2", "<u8"), ("l2", "<u8"), ("tl2", "<i8")])
    files = []
    for rank in range(ranks):
        host = b"synthetic\0"
        names = b"".join(n.encode() + b"\0" for n in fns)
        hlen = (32 + len(names) + len(host) + 7) & ~7
        hdr = MAGIC + struct.pack("<6I", VERSION, hlen, rank, ranks, len(fns), len(host))
        hdr = (hdr + names + host).ljust(hlen, b"\0")
        peer = rank ^ 1
        first, second = (2, 3) if rank % 2 == 0 else (3, 2)    # even ranks send first
        kinds = {2: SEND, 3: RECV}
        t0 = 1_000_000
        pre = _HEAD.pack(INFO, 0, 0, 0, (16 + 40) // 8, t0) + struct.pack(
            "<iiQddQ", 0, 3, 1 << 20, 0.0, 0.5, 0)
        members = struct.pack(f"<{ranks}i", *range(ranks))
        members = members.ljust((len(members) + 7) & ~7, b"\0")
        pre += _HEAD.pack(COMM, 0, 0, 0, (32 + len(members)) // 8, t0) + \
            _COMM.pack(0, -1, ranks, 0) + members
        pre += _HEAD.pack(COMM, 0, 0, 0, 40 // 8, t0) + _COMM.pack(1, -1, 1, 0) + \
            struct.pack("<ii", rank, 0)
        pre += _HEAD.pack(ENTER, 0, 0, 0, 2, t0) + _HEAD.pack(CLOCK, 0, 0, 0, 5, t0 + 10) + \
            _CLOCK.pack(0, 100, 0, 0) + _HEAD.pack(LEAVE, 0, 0, 0, 2, t0 + 20)
        path = raw_dir / f"rank-{rank:06d}.tev"
        t = t0 + 1000
        with open(path, "wb") as f:
            f.write(hdr + pre)
            done = 0
            while done < rounds:
                k = min(block, rounds - done)
                a = np.zeros(k, dtype=rt)
                base = t + step_ns * 6 * np.arange(k, dtype=np.int64)
                for i, fn in ((1, first), (2, second)):
                    a[f"e{i}"] = head(ENTER, fn, 16)
                    a[f"m{i}"] = head(kinds[fn], fn, 48)
                    a[f"l{i}"] = head(LEAVE, fn, 16)
                    a[f"c{i}"] = 0
                    a[f"p{i}"] = peer
                    a[f"g{i}"] = 1
                    a[f"b{i}"] = nbytes
                    off = 3 * (i - 1) * step_ns
                    a[f"t{i}"] = base + off
                    a[f"tm{i}"] = base + off + step_ns
                    a[f"tl{i}"] = base + off + 2 * step_ns
                a.tofile(f)
                done += k
                t += step_ns * 6 * k
            f.write(_HEAD.pack(ENTER, 0, 0, 1, 2, t) + _HEAD.pack(CLOCK, 0, 0, 0, 5, t + 10) +
                    _CLOCK.pack(0, 100, 1, 0) + _HEAD.pack(LEAVE, 0, 0, 1, 2, t + 20) +
                    _HEAD.pack(MEM, 0, 0, 0, 4, t + 30) + _MEM.pack(1 << 20, 1 << 20))
        files.append(path)
    return files
