"""Property tests of the Python readers: communication files (CSV, Matrix
Market, METIS, Scotch, summary JSON) and raw trace files.

For each reader: a random valid input, written by a small writer here,
reads back as the same graph or the same events; and random bytes, or a
valid file with random damage, either read as something consistent or
raise TiersError, never another exception.  Each example has a deadline,
so a reader that hangs or grows without bound fails too."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiers.errors import TiersError
from tiers.map import graph as G
from tiers.trace import convert, raw

SETTINGS = settings(max_examples=60, deadline=3000, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --------------------------------------------------------------------------
# Random byte matrices and the files that hold them

@st.composite
def byte_matrices(draw, max_n: int = 7):
    """An n x n matrix of non-negative byte counts (integers or halves, so
    that every format writes them exactly), zero diagonal."""
    n = draw(st.integers(1, max_n))
    vals = draw(st.lists(st.integers(0, 2**40) | st.sampled_from([0, 0, 0, 0.5, 1e12]),
                         min_size=n * n, max_size=n * n))
    m = np.array(vals, dtype=np.float64).reshape(n, n)
    np.fill_diagonal(m, 0)
    return m


def num(x: float) -> str:
    return repr(float(x)) if x != int(x) else str(int(x))


def write_csv(m: np.ndarray, sep: str = ",") -> str:
    return "# bytes from row rank to column rank\n" + \
        "".join(sep.join(num(x) for x in row) + "\n" for row in m)


def write_mtx_coordinate(m: np.ndarray) -> str:
    r, c = np.nonzero(m)
    return (f"%%MatrixMarket matrix coordinate real general\n% a comment\n{m.shape[0]} "
            f"{m.shape[1]} {r.size}\n" +
            "".join(f"{i + 1} {j + 1} {num(m[i, j])}\n" for i, j in zip(r, c)))


def write_mtx_array(m: np.ndarray) -> str:
    n = m.shape[0]
    return f"%%MatrixMarket matrix array real general\n{n} {n}\n" + \
        "".join(f"{num(m[i, j])}\n" for j in range(n) for i in range(n))


def write_mtx_symmetric(m: np.ndarray) -> str:
    """The symmetric matrix with the same pair totals as m, lower triangle."""
    half = (m + m.T) / 2
    n = m.shape[0]
    nz = [(i, j) for j in range(n) for i in range(j, n) if half[i, j]]
    return (f"%%MatrixMarket matrix coordinate real symmetric\n{n} {n} {len(nz)}\n" +
            "".join(f"{i + 1} {j + 1} {num(half[i, j])}\n" for i, j in nz))


def write_json(m: np.ndarray) -> str:
    rows = [[int(x) if x == int(x) else float(x) for x in row] for row in m]
    return json.dumps({"schema": "tiers.trace/1",
                       "summary": {"comm_matrix": {"ranks": m.shape[0], "bytes": rows}}})


def write_metis(m: np.ndarray) -> str:
    sym = m + m.T
    n = m.shape[0]
    edges = int((sym > 0).sum() // 2)
    lines = [" ".join(f"{j + 1} {num(sym[i, j])}" for j in range(n) if sym[i, j])
             for i in range(n)]
    return f"% METIS graph\n{n} {edges} 001\n" + "\n".join(lines) + "\n"


def write_scotch(m: np.ndarray, base: int) -> str:
    sym = m + m.T
    n = m.shape[0]
    arcs = int((sym > 0).sum())
    lines = [f"{i + base} {int((sym[i] > 0).sum())} " +
             " ".join(f"{num(sym[i, j])} {j + base}" for j in range(n) if sym[i, j])
             for i in range(n)]
    return f"0\n{n} {arcs}\n{base} 110\n" + "\n".join(lines) + "\n"


WRITERS = {
    "m.csv": write_csv,
    "m.txt": lambda m: write_csv(m, " "),
    "m.mtx": write_mtx_coordinate,
    "a.mtx": write_mtx_array,
    "s.mtx": write_mtx_symmetric,
    "s.json": write_json,
    "g.graph": write_metis,
    "g0.grf": lambda m: write_scotch(m, 0),
    "g1.grf": lambda m: write_scotch(m, 1),
}


def read_file(name: str, data: bytes):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / name
        p.write_bytes(data)
        return G.read(str(p))


def assert_same_graph(g, m: np.ndarray, name: str) -> None:
    want = G.from_dense(m)
    assert g.n == want.n, name
    assert np.array_equal(g.xadj, want.xadj), name
    assert np.array_equal(g.adjncy, want.adjncy), name
    assert np.allclose(g.adjwgt, want.adjwgt, rtol=1e-12), name


def assert_consistent(g) -> None:
    """What every graph a reader returns must be: CSR arrays that agree,
    ranks in range, finite positive weights, symmetric."""
    assert 1 <= g.n <= G.max_ranks()
    assert g.xadj.shape == (g.n + 1,) and g.xadj[0] == 0
    assert np.all(np.diff(g.xadj) >= 0) and g.xadj[-1] == g.adjncy.size == g.adjwgt.size
    if g.adjncy.size:
        assert g.adjncy.min() >= 0 and g.adjncy.max() < g.n
    assert np.all(np.isfinite(g.adjwgt)) and np.all(g.adjwgt > 0)
    u, v, w = g.edge_list()
    src = np.repeat(np.arange(g.n), np.diff(g.xadj))
    pairs = dict(zip(zip(src.tolist(), g.adjncy.tolist()), g.adjwgt.tolist()))
    for (a, b), x in pairs.items():
        assert a != b and pairs[(b, a)] == x


@pytest.mark.parametrize("name", sorted(WRITERS))
@SETTINGS
@given(m=byte_matrices())
def test_valid_files_read_back_as_the_same_graph(name, m):
    assert_same_graph(read_file(name, WRITERS[name](m).encode()), m, name)


@st.composite
def damaged(draw, name: str):
    """A valid file with a few random edits: bytes replaced, inserted or
    deleted, tokens swapped for awkward numbers, or the file cut short."""
    data = bytearray(WRITERS[name](draw(byte_matrices(5))).encode())
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["byte", "insert", "delete", "token", "cut"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if how == "byte" and data:
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif how == "delete":
            del data[at:at + draw(st.integers(1, 8))]
        elif how == "token":
            tok = draw(st.sampled_from([b"nan", b"inf", b"-inf", b"1e999", b"-1", b"1.5",
                                        b"18446744073709551617", b"1000000000", b"0x10",
                                        b"1_0", b"\xff\xfe", b"[[[[", b"}", b"%", b"\0"]))
            end = at
            while end < len(data) and data[end:end + 1] not in (b" ", b"\n", b","):
                end += 1
            data[at:end] = tok
        else:
            del data[at:]
    return bytes(data)


@pytest.mark.parametrize("name", sorted(WRITERS))
@SETTINGS
@given(data=st.data())
def test_damaged_files_are_a_graph_or_one_error(name, data):
    blob = data.draw(damaged(name))
    try:
        g = read_file(name, blob)
    except TiersError as exc:
        assert "\n" not in str(exc) and str(exc)
    else:
        assert_consistent(g)


@pytest.mark.parametrize("name", ["x.csv", "x.mtx", "x.json", "x.graph", "x.grf"])
@SETTINGS
@given(blob=st.binary(max_size=300) | st.text(alphabet="0123456789 .,-e\n%[]{}\":naif",
                                               max_size=200).map(str.encode))
def test_garbage_is_a_graph_or_one_error(name, blob):
    try:
        g = read_file(name, blob)
    except TiersError as exc:
        assert "\n" not in str(exc) and str(exc)
    else:
        assert_consistent(g)


def test_headers_claiming_huge_sizes_allocate_nothing():
    """A header's counts are checked against the file and the rank limit
    before anything is allocated (each of these would need gigabytes)."""
    big = G.max_ranks() + 1
    cases = {
        "a.mtx": f"%%MatrixMarket matrix coordinate real general\n{big} {big} 1\n1 2 1\n",
        "b.mtx": "%%MatrixMarket matrix coordinate real general\n4 4 1000000000\n1 2 1\n",
        "c.mtx": f"%%MatrixMarket matrix array real general\n{big} {big}\n1\n",
        "d.graph": f"{big} 1\n2\n1\n",
        "e.grf": f"0\n{big} 2\n0 000\n1 1\n1 0\n",
        "f.graph": "2 1000000000000\n2\n1\n",
    }
    for name, text in cases.items():
        with pytest.raises(TiersError) as exc:
            read_file(name, text.encode())
        assert name in str(exc.value)


# --------------------------------------------------------------------------
# Raw trace files

HEAD = struct.Struct("<BBHHHq")


def record(kind: int, t: int, payload: bytes = b"", *, flags=0, thread=0, func=0) -> bytes:
    payload += b"\0" * (-len(payload) % 8)
    return HEAD.pack(kind, flags, thread, func, 2 + len(payload) // 8, t) + payload


def raw_file(rank: int, size: int, names: list[str], host: str, records: list[bytes]) -> bytes:
    strings = b"".join(n.encode() + b"\0" for n in names) + host.encode() + b"\0"
    strings += b"\0" * (-len(strings) % 8)
    hlen = 32 + len(strings)
    head = raw.MAGIC + struct.pack("<6I", raw.VERSION, hlen, rank, size, len(names),
                                   len(host.encode()) + 1)
    return head + strings + b"".join(records)


@st.composite
def rank_logs(draw):
    """A raw file of one rank of a run of ``size`` ranks, and the events,
    communicators and clocks it must read back as."""
    size = draw(st.integers(1, 6))
    rank = draw(st.integers(0, size - 1))
    names = draw(st.lists(st.sampled_from(["MPI_Send", "MPI_Recv", "MPI_Allreduce",
                                           "MPI_Isend", "MPI_Wait"]), min_size=1, max_size=5))
    host = draw(st.text(alphabet="abcxyz-0123", min_size=1, max_size=12))
    recs = [record(raw.COMM, 0, struct.pack("<iiii", 0, -1, size, 0) +
                   struct.pack(f"<{size}i", *range(size)))]
    events, t = [], 0
    for _ in range(draw(st.integers(0, 25))):
        t += draw(st.integers(0, 10**6))
        kind = draw(st.sampled_from([raw.ENTER, raw.LEAVE, raw.SEND, raw.RECV, raw.ISEND_DONE,
                                     raw.COLL_END, raw.SWAP]))
        th = draw(st.integers(0, 3))
        fn = draw(st.integers(0, len(names) - 1))
        if kind in (raw.ENTER, raw.LEAVE):
            recs.append(record(kind, t, thread=th, func=fn))
            events.append((kind, th, fn, t, ()))
        elif kind in (raw.SEND, raw.RECV):
            peer, tag = draw(st.integers(0, size - 1)), draw(st.integers(0, 99))
            nbytes, req = draw(st.integers(0, 2**40)), draw(st.integers(0, 2**63))
            recs.append(record(kind, t, struct.pack("<iiiiQQ", 0, peer, tag, 0, nbytes, req),
                               thread=th, func=fn))
            events.append((kind, th, fn, t, (0, peer, tag, nbytes, req)))
        elif kind == raw.ISEND_DONE:
            req = draw(st.integers(0, 2**64 - 1))
            recs.append(record(kind, t, struct.pack("<Q", req), flags=1, thread=th, func=fn))
            events.append((kind, th, fn, t, (req, 1)))
        elif kind == raw.COLL_END:
            sent, recvd = draw(st.integers(0, 2**40)), draw(st.integers(0, 2**40))
            recs.append(record(kind, t, struct.pack("<iiIIQQ", 0, -1, 3, 0, sent, recvd),
                               thread=th, func=fn))
            events.append((kind, th, fn, t, (0, -1, 3, sent, recvd)))
        else:
            b, w, tot, tau = (draw(st.integers(0, 2**40)) for _ in range(4))
            recs.append(record(kind, t, struct.pack("<QQQQ", b, w, tot, tau), flags=1,
                               thread=th, func=raw.FN_SWAPOUT))
            events.append((kind, th, raw.FN_SWAPOUT, t, (b, w, tot, 1, tau)))
    recs.append(record(raw.CLOCK, 5, struct.pack("<qqii", -1234, 99, 0, 0)))
    return raw_file(rank, size, names, host, recs), rank, size, names, host, events


def read_raw(blob: bytes):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "rank-000000.tev"
        p.write_bytes(blob)
        return raw.read(p)


@SETTINGS
@given(case=rank_logs())
def test_raw_files_read_back_as_the_same_events(case):
    blob, rank, size, names, host, events = case
    log = read_raw(blob)
    assert (log.rank, log.size, log.host, log.functions) == (rank, size, host, names)
    assert log.events == events
    assert log.comms == {0: (-1, list(range(size)), 0)}
    assert log.clocks == {0: (-1234, 99, 5)}
    assert not log.truncated and log.stopped is None
    s = convert.summarize([log])
    sent = sum(p[3] for k, _, _, _, p in events if k == raw.SEND)
    assert s["p2p_bytes"] == sent
    assert sum(map(sum, s["comm_matrix"]["bytes"])) == sent


@SETTINGS
@given(case=rank_logs(), cut=st.integers(1, 15))
def test_a_raw_file_cut_short_reads_up_to_its_last_whole_record(case, cut):
    blob, *_, events = case
    log = read_raw(blob[:-cut])
    assert log.truncated
    assert log.events == events[:len(log.events)]


@SETTINGS
@given(case=rank_logs(), data=st.data())
def test_damaged_raw_files_are_a_trace_or_one_error(case, data):
    blob = bytearray(case[0])
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(8, len(blob) - 1))
        if data.draw(st.booleans()):
            blob[at] = data.draw(st.integers(0, 255))
        else:
            blob[at:at + 4] = data.draw(st.sampled_from(
                [b"\xff\xff\xff\xff", b"\0\0\0\0", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x80"]))
    try:
        log = read_raw(bytes(blob))
        convert.summarize([log])
    except TiersError as exc:
        assert "\n" not in str(exc) and str(exc)


@SETTINGS
@given(blob=st.binary(max_size=400).map(lambda b: raw.MAGIC + b) | st.binary(max_size=100))
def test_garbage_raw_files_are_a_trace_or_one_error(blob):
    try:
        convert.summarize([read_raw(blob)])
    except TiersError as exc:
        assert "\n" not in str(exc) and str(exc)


# --------------------------------------------------------------------------
# JSON nesting

@pytest.mark.parametrize("depth", [G.MAX_JSON_DEPTH + 1, 100_000])
def test_deeply_nested_json_is_one_error(depth):
    with pytest.raises(TiersError, match="nested"):
        read_file("deep.json", ("[" * depth + "]" * depth).encode())
    with pytest.raises(TiersError, match="nested"):
        read_file("deep.json", ('{"a":' * depth + "1" + "}" * depth).encode())
