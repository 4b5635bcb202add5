"""Bad input files through the command line: communication files for
`tiers map --comm`, trace folders for `tiers trace stats`, and hwloc XML
files for `tiers topo --input`.  Each one is exactly one line
`tiers: error: ...` naming the file (and the line, field or byte at fault),
exit status 2, no traceback, and nothing allocated beyond the file's size
(each run is bounded by a timeout and the headers below claim gigabytes)."""

from __future__ import annotations

import json
import struct
import subprocess

import pytest

from conftest import assert_one_line_error, run_tiers

MACHINE = ["--nodes", "2", "--machine", "synthetic:core:2 pu:1"]
MM = "%%MatrixMarket matrix coordinate real general\n"

# (file name, contents, fragment of the error line)
COMM_CASES = [
    ("nan.csv", "0,nan\nnan,0\n", "nan.csv, line 1: value 'nan' is not a finite number"),
    ("inf.csv", "0,1\ninf,0\n", "line 2: value 'inf' is not a finite number"),
    ("big.csv", "0,1e999\n1,0\n", "'1e999' is not a finite number"),
    ("neg.csv", "0,1\n-1,0\n", "line 2: negative weight -1"),
    ("ragged.csv", "0,1,2\n1,0\n", "line 2: rows have different lengths"),
    ("tall.csv", "0,1\n1,0\n1,1\n", "not square"),
    ("empty.csv", "# nothing\n", "holds no matrix"),
    ("latin1.csv", b"0,1\n1,0 # caf\xe9\n", "latin1.csv, line 2: not UTF-8 text (byte 0xe9)"),
    ("nan.mtx", MM + "2 2 1\n1 2 nan\n", "nan.mtx, line 3: weight 'nan' is not a finite number"),
    ("inf.mtx", MM + "2 2 1\n1 2 -inf\n", "line 3: weight '-inf' is not a finite number"),
    ("e999.mtx", MM + "2 2 1\n1 2 1e999\n", "'1e999' is not a finite number"),
    ("index64.mtx", MM + "2 2 1\n1 18446744073709551617 1\n",
     "line 3: the column index 18446744073709551617 is outside 1..2"),
    ("frac.mtx", MM + "3 3 1\n1.5 2 1\n", "line 3: the row index '1.5' is not a whole number"),
    ("zero.mtx", MM + "3 3 1\n0 2 1\n", "the row index 0 is outside 1..3"),
    ("negnnz.mtx", MM + "2 2 -1\n", "line 2: the entry count -1 is less than 0"),
    ("hugerows.mtx", MM + "1000000000 1000000000 1\n1 2 1\n",
     "line 2: the row count 1000000000 is outside"),
    ("hugennz.mtx", MM + "4 4 1000000000\n1 2 1\n",
     "the size line says 1000000000 entries, the file has 1"),
    ("rows1e999.mtx", MM + "1e999 1e999 1\n1 2 1\n", "'1e999' is not a whole number"),
    ("shortsize.mtx", MM + "4 4\n1 2 1\n", "line 2: the size line must be"),
    ("nosize.mtx", MM + "% only a comment\n", "no size line"),
    ("shorthead.mtx", "%%MatrixMarket matrix\n2 2 1\n1 2 1\n", "line 1: the header must be"),
    ("nohead.mtx", "2 2 1\n1 2 1\n", "no %%MatrixMarket header"),
    ("vector.mtx", "%%MatrixMarket vector coordinate real general\n3 1\n1 1\n",
     "line 1: a Matrix Market vector, not a matrix"),
    ("pattern.mtx", "%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 2\n",
     "pattern matrix"),
    ("twovals.mtx", MM + "2 2 1\n1 2\n", "line 3: 2 values: an entry is"),
    ("arrayshort.mtx", "%%MatrixMarket matrix array real general\n3 3\n1\n2\n",
     "2 values for a 3 x 3 matrix"),
    ("arraybig.mtx", "%%MatrixMarket matrix array real general\n100000 100000\n1\n",
     "1 values for a 100000 x 100000 matrix"),
    ("binary.mtx", b"%%MatrixMarket matrix coordinate real general\n2 2 1\n\xff\xfe\x00\n",
     "binary.mtx, line 3: not UTF-8 text"),
    ("ranks.json", '{"comm_matrix": {"ranks": "x", "bytes": [[0,1],[1,0]]}}',
     "comm_matrix.ranks is x, not a whole number"),
    ("nanjson.json", '{"comm_matrix": {"bytes": [[0, NaN],[1,0]]}}',
     "comm_matrix.bytes[0][1] is nan"),
    ("infjson.json", '{"comm_matrix": {"bytes": [[0, 1e999],[1,0]]}}',
     "comm_matrix.bytes[0][1] is inf"),
    ("str.json", '{"comm_matrix": {"bytes": [[0, "1"],[1,0]]}}',
     "comm_matrix.bytes[0][1] is 1: non-numeric"),
    ("negjson.json", '{"comm_matrix": {"bytes": [[0, -5],[1,0]]}}', "negative weight"),
    ("bigint.json", '{"comm_matrix": {"bytes": [[0, 1' + "0" * 400 + '],[1,0]]}}',
     "comm_matrix.bytes[0][1] is 1000"),
    ("ragged.json", '{"comm_matrix": {"bytes": [[0, 1],[1]]}}',
     "comm_matrix.bytes[1] is 1 values, not a row of 2"),
    ("flat.json", '{"comm_matrix": {"bytes": [1, 2]}}', "comm_matrix.bytes[0] is int"),
    ("deep.json", "[" * 100000 + "]" * 100000, "JSON nested 100000 levels deep"),
    ("deepobj.json", '{"a":' * 5000 + "1" + "}" * 5000, "JSON nested 5000 levels deep"),
    ("notjson.json", '{"comm_matrix": ', "is not JSON"),
    ("latin1.json", b'{"comm_matrix": {"bytes": [[0]]}, "host": "caf\xe9"}',
     "latin1.json, line 1: not UTF-8 text (byte 0xe9)"),
    ("shorthead.graph", "3\n", "line 1: the header must be"),
    ("short.graph", "3 2\n2\n1 3\n", "has 2 vertex lines for 3 vertices"),
    ("nan.graph", "2 1 001\n2 nan\n1 nan\n", "line 2: weight 'nan' is not a finite number"),
    ("edges.graph", "2 1e999\n2\n1\n", "line 1: the edge count '1e999' is not a whole number"),
    ("hugen.graph", "1000000000 1\n2\n1\n", "the vertex count 1000000000 is outside"),
    ("hugem.graph", "2 100000000000\n2\n1\n", "the header says 100000000000 edges"),
    ("fmt.graph", "2 1 021\n2 1\n1 1\n", "fmt '021'"),
    ("nbr.graph", "2 1\n3\n1\n", "line 2: a neighbour 3 is outside 1..2"),
    ("frac.graph", "2 1\n1.5\n1\n", "a neighbour '1.5' is not a whole number"),
    ("odd.graph", "2 1 001\n2\n1 1\n", "line 2: vertex 1: neighbours and edge weights"),
    ("extra.graph", "2 1\n2\n1\n1\n", "line 4: more lines than the 2 vertices"),
    ("garbage.grf", b"0\n\xff\xfe 9 9\n", "garbage.grf, line 2: not UTF-8 text"),
    ("tiny.grf", "0\n2\n", "too short for a Scotch graph"),
    ("hugen.grf", "0\n99999999999 2\n0 000\n1 1\n1 0\n", "the vertex count 99999999999"),
    ("claims.grf", "0\n1000 1000000\n0 000\n1 1\n1 0\n",
     "the file ends before its 1000 vertices and 1000000 arcs"),
    ("base.grf", "0\n2 2\n7 000\n1 1\n1 0\n", "line 3: the base 7 is outside 0..1"),
    ("flags.grf", "0\n2 2\n0 0x1\n1 1\n1 0\n", "flags '0x1'"),
    ("label.grf", "0\n2 2\n0 100\n5 1 1\n1 1 0\n", "line 4: a vertex label 5 is outside 0..1"),
    ("frac.grf", "0\n2 2\n0 000\n1 1.5\n1 0\n", "line 4: a neighbour '1.5' is not a whole"),
    ("load.grf", "0\n2 2\n0 010\n1 nan 1\n1 1 0\n", "line 4: edge load 'nan' is not"),
    ("arcs.grf", "0\n2 3\n0 000\n1 1\n1 0\n", "the file ends before its 2 vertices and 3"),
    ("fewarcs.grf", "0\n2 1\n0 000\n1 1\n1 0\n", "header says 1 arcs, found 2"),
    ("bool.json", '{"comm_matrix": {"bytes": [[false, true],[true, false]]}}',
     "comm_matrix.bytes[0][0] is False: non-numeric"),
    ("tail.grf", "0\n2 2\n0 000\n1 1\n1 0\n7\n", "line 6: more values than its 2 vertices"),
]


@pytest.mark.parametrize("name,content,fragment", COMM_CASES,
                         ids=[c[0] for c in COMM_CASES])
def test_bad_communication_file_is_one_line(tmp_path, name, content, fragment):
    f = tmp_path / name
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    r = run_tiers("map", "--comm", str(f), *MACHINE, timeout=120)
    assert_one_line_error(r, fragment)
    assert name in r.stderr
    assert r.returncode == 2


# --------------------------------------------------------------------------
# Trace folders

HEAD = struct.Struct("<BBHHHq")


def record(kind: int, payload: bytes = b"", *, t: int = 0, words: int | None = None) -> bytes:
    payload += b"\0" * (-len(payload) % 8)
    return HEAD.pack(kind, 0, 0, 0, 2 + len(payload) // 8 if words is None else words,
                     t) + payload


def raw_file(records: list[bytes], *, rank: int = 0, size: int = 2, hlen: int | None = None,
             nfn: int = 1, hostlen: int = 5) -> bytes:
    strings = b"MPI_Send\0host\0"
    strings += b"\0" * (-len(strings) % 8)
    head = b"TIERSTEV" + struct.pack("<6I", 1, 32 + len(strings) if hlen is None else hlen,
                                     rank, size, nfn, hostlen)
    return head + strings + b"".join(records)


WORLD = record(11, struct.pack("<iiii", 0, -1, 2, 0) + struct.pack("<2i", 0, 1))
SEND = record(3, struct.pack("<iiiiQQ", 0, 1, 7, 0, 64, 0), t=10)

# (files under raw/ or at the top, fragment)
TRACE_CASES = {
    "random": ({"raw/rank-000000.tev": bytes(range(256)) * 2}, "is not a tiers raw trace file"),
    "magic-only": ({"raw/rank-000000.tev": b"TIERSTEV"}, "is not a tiers raw trace file"),
    "version": ({"raw/rank-000000.tev": b"TIERSTEV" + struct.pack("<6I", 9, 32, 0, 1, 0, 1)},
                "raw trace version 9"),
    "header-past-end": ({"raw/rank-000000.tev": raw_file([], hlen=4096)},
                        "byte 12: the header is 4096 bytes but the file only"),
    "rank-past-size": ({"raw/rank-000000.tev": raw_file([], rank=5, size=2)},
                       "byte 16: rank 5 of 2 ranks"),
    "names-past-header": ({"raw/rank-000000.tev": raw_file([], nfn=4_000_000_000)},
                          "function names do not fit"),
    "host-past-header": ({"raw/rank-000000.tev": raw_file([], hostlen=100000)},
                         "byte 28: the host name (100000 bytes) does not fit"),
    "short-record": ({"raw/rank-000000.tev": raw_file([WORLD, record(3, t=1)])},
                     "a record of kind 3 needs 48 bytes, it has 16"),
    "unknown-kind": ({"raw/rank-000000.tev": raw_file([WORLD, record(99)])},
                     "unknown record kind 99"),
    "zero-length": ({"raw/rank-000000.tev": raw_file([WORLD, record(1, words=0) + b"x" * 8])},
                    "a record of 0 bytes"),
    "huge-comm": ({"raw/rank-000000.tev": raw_file(
        [record(11, struct.pack("<iiii", 0, -1, 2_000_000_000, 0))])},
        "a communicator of 2000000000 members"),
    "undefined-comm": ({"raw/rank-000000.tev": raw_file([SEND])},
                       "uses communicator 0, which the file never defines"),
    "member-outside": ({"raw/rank-000000.tev": raw_file(
        [record(11, struct.pack("<iiii", 0, -1, 2, 0) + struct.pack("<2i", 0, 9)), SEND])},
        "communicator 0 has a member outside ranks 0..1"),
    "huge-size": ({"raw/rank-000000.tev": raw_file([WORLD], size=4_000_000_000)},
                  "4000000000 ranks"),
    "same-rank-twice": ({"raw/rank-000000.tev": raw_file([WORLD]),
                         "raw/rank-000001.tev": raw_file([WORLD])},
                        "two raw files hold rank 0"),
    "sizes-differ": ({"raw/rank-000000.tev": raw_file([WORLD]),
                      "raw/rank-000001.tev": raw_file([WORLD], rank=1, size=3)},
                     "rank 1 ran with 3 ranks"),
    "summary-latin1": ({"summary.json": b'{"schema": "tiers.trace/1", "x": "caf\xe9"}'},
                       "summary.json is not UTF-8 text"),
    "summary-deep": ({"summary.json": b"[" * 100000 + b"]" * 100000},
                     "summary.json: JSON nested too deeply"),
    "summary-not-json": ({"summary.json": b'{"schema": '}, "summary.json is not JSON"),
}


@pytest.mark.parametrize("case", sorted(TRACE_CASES))
def test_bad_trace_folder_is_one_line(tmp_path, case):
    files, fragment = TRACE_CASES[case]
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    r = run_tiers("trace", "stats", str(tmp_path), timeout=120)
    assert_one_line_error(r, fragment)
    assert r.returncode == 2


def test_a_raw_file_cut_inside_a_record_still_reads(tmp_path):
    """A file cut short (kill -9, a full disk) reads up to its last whole
    record and is reported as cut short, not refused."""
    (tmp_path / "raw").mkdir()
    full = raw_file([WORLD, SEND, SEND])
    (tmp_path / "raw" / "rank-000000.tev").write_bytes(full[:-20])
    r = run_tiers("trace", "stats", str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "cut short" in r.stdout
    # one whole send of 64 bytes from rank 0 to rank 1 was kept
    assert "64" in r.stdout


# --------------------------------------------------------------------------
# hwloc XML topologies: files on which hwloc 2.9 itself crashes or asserts

XML_CASES = {
    "complete-without-cpuset": '<topology><object type="Machine" complete_cpuset="0x1">'
                               '</object></topology>',
    "cpuset-without-complete": '<topology version="2.0"><object type="Machine" cpuset="0x1">'
                               '<object type="PU" os_index="0" cpuset="0x1" '
                               'complete_cpuset="0x1"/></object></topology>',
    "complete-nodeset-alone": '<topology><object type="Machine" complete_nodeset="">'
                              '</object></topology>',
    "bad-bitmap": '<topology version="2.0"><object type="Machine" cpuset=",0x00000004" '
                  'complete_cpuset="0x1"></object></topology>',
}


@pytest.mark.parametrize("case", sorted(XML_CASES))
def test_damaged_xml_topology_is_one_line(tmp_path, case):
    f = tmp_path / f"{case}.xml"
    f.write_text(XML_CASES[case])
    r = run_tiers("topo", "--input", str(f), timeout=120)
    assert_one_line_error(r, "is not a valid hwloc XML topology")
    assert f.name in r.stderr
    assert r.returncode == 2


def test_huge_synthetic_topology_is_refused_at_once(native_bin):
    """The native loader refuses a synthetic tree of more than 8192 objects
    before hwloc starts building it (it would never finish)."""
    for desc in ("pack:1000 core:1000 pu:1000", "core:6000 pu:1", "99999999999 2"):
        r = subprocess.run([str(native_bin("tiers-topo")), "--input", f"synthetic:{desc}"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("tiers-topo: error: "), r.stderr
        assert f'"{desc}" has more than 8192 objects' in lines[0]
    # a tree below the limit still loads
    r = subprocess.run([str(native_bin("tiers-topo")), "--input", "synthetic:pack:2 core:8 pu:2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["pus"] == 32, r.stderr
