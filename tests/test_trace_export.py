"""tiers trace export --format chrome: Chrome/Perfetto trace-event JSON.

The export of trace_mix (tests/programs/trace_mix.c) at 2 and 4 ranks is
validated against a JSON Schema of the trace-event format
(TRACE_EVENT_SCHEMA: phases, ts, pid, tid, flow ids and bind points, process
and thread name metadata) and checked against its rules (every B has its E on the
same thread, in order; time stamps non-decreasing per thread; every flow
start has exactly one finish with the same id, each inside a call; names
for every process and thread) and against what the program did: one flow
arrow per point-to-point message, from the sending rank to the receiving
one, and the root and bytes of its collectives."""

from __future__ import annotations

import collections
import json
import shutil

import pytest

from conftest import build_program, needs_mpicc, run_tiers

MPIRUN = ["mpirun", "--oversubscribe"]

pytestmark = needs_mpicc


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("export-programs"), "trace_mix")


def _phase(ph: str, required: list[str], props: dict) -> dict:
    return {"if": {"properties": {"ph": {"const": ph}}, "required": ["ph"]},
            "then": {"required": required, "properties": props}}


_NUM, _INT, _STR = {"type": "number"}, {"type": "integer", "minimum": 0}, {"type": "string",
                                                                          "minLength": 1}
_ID = {"oneOf": [{"type": "string", "minLength": 1}, {"type": "integer"}]}

#: The trace-event format (Chrome's "Trace Event Format" document, the JSON
#: object form that chrome://tracing and ui.perfetto.dev load) as a JSON
#: Schema, for the phases tiers writes: duration slices B/E, instants i
#: (scope g, p or t), flow starts s and finishes f (an id; f binds to its
#: enclosing slice, "bp": "e"), and metadata M naming processes and threads.
TRACE_EVENT_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "traceEvents": {"type": "array", "items": {
            "type": "object",
            "required": ["ph", "name", "pid"],
            "properties": {"ph": {"enum": ["B", "E", "i", "s", "f", "M"]}, "name": _STR,
                           "pid": _INT, "tid": _INT, "ts": _NUM, "cat": _STR,
                           "args": {"type": "object"}},
            "allOf": [
                _phase("B", ["ts", "tid", "cat"], {}),
                _phase("E", ["ts", "tid", "cat"], {}),
                _phase("i", ["ts", "tid", "s"], {"s": {"enum": ["g", "p", "t"]}}),
                _phase("s", ["ts", "tid", "cat", "id"], {"id": _ID}),
                _phase("f", ["ts", "tid", "cat", "id", "bp"], {"id": _ID, "bp": {"const": "e"}}),
                _phase("M", ["args"], {
                    "name": {"enum": ["process_name", "process_sort_index", "thread_name",
                                      "thread_sort_index", "process_labels"]},
                    "args": {"type": "object", "minProperties": 1, "properties": {
                        "name": _STR, "sort_index": {"type": "integer"}}}}),
                {"if": {"properties": {"name": {"enum": ["thread_name", "thread_sort_index"]},
                                       "ph": {"const": "M"}}, "required": ["name", "ph"]},
                 "then": {"required": ["tid"]}},
                {"if": {"properties": {"name": {"enum": ["process_name", "thread_name"]},
                                       "ph": {"const": "M"}}, "required": ["name", "ph"]},
                 "then": {"properties": {"args": {"required": ["name"]}}}},
            ]}},
    },
}


def check_schema(doc):
    """Validate a whole export against TRACE_EVENT_SCHEMA (jsonschema)."""
    import jsonschema

    jsonschema.validate(doc, TRACE_EVENT_SCHEMA,
                        format_checker=jsonschema.FormatChecker())


def test_schema_rejects_what_viewers_reject():
    """The schema is not vacuous: each broken event below fails it."""
    import jsonschema

    good = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0 (h)"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "Master thread"}},
        {"ph": "B", "name": "MPI_Send", "cat": "MPI", "pid": 0, "tid": 0, "ts": 1.5},
        {"ph": "s", "name": "message", "cat": "p2p", "pid": 0, "tid": 0, "ts": 1.6, "id": "0x1"},
        {"ph": "E", "name": "MPI_Send", "cat": "MPI", "pid": 0, "tid": 0, "ts": 2.0},
        {"ph": "f", "name": "message", "cat": "p2p", "pid": 0, "tid": 0, "ts": 2.5, "id": "0x1",
         "bp": "e"},
        {"ph": "i", "name": "send", "pid": 0, "tid": 0, "ts": 2.5, "s": "t"}],
        "displayTimeUnit": "ns"}
    check_schema(good)
    broken = [
        ("f", lambda e: e.pop("bp")), ("f", lambda e: e.update(bp="x")),
        ("s", lambda e: e.pop("id")), ("B", lambda e: e.pop("ts")),
        ("B", lambda e: e.update(ts="1.5")), ("E", lambda e: e.update(pid=-1)),
        ("i", lambda e: e.update(s="q")), ("M", lambda e: e.update(args={})),
        ("M", lambda e: e.pop("args")), ("B", lambda e: e.update(ph="X")),
    ]
    for ph, spoil in broken:
        doc = json.loads(json.dumps(good))
        spoil(next(e for e in doc["traceEvents"] if e["ph"] == ph))
        with pytest.raises(jsonschema.ValidationError):
            check_schema(doc)
    doc = json.loads(json.dumps(good))
    del doc["traceEvents"][1]["tid"]                      # a thread name needs its thread
    with pytest.raises(jsonschema.ValidationError):
        check_schema(doc)


def check_format(events):
    """Assert the trace-event rules; return (slices per name, flows as
    {id: (s event, f event)})."""
    check_schema({"traceEvents": events})
    procs = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in events:
        assert isinstance(e.get("name"), str) and e["name"], e
        assert e["ph"] in "BEisfM", e
    stacks = collections.defaultdict(list)
    last = {}
    slices = collections.Counter()
    starts, finishes = {}, {}
    for e in events:
        if e["ph"] == "M":
            assert isinstance(e["args"]["name"] if "name" in e["args"] else
                              e["args"]["sort_index"], (str, int))
            continue
        key = (e["pid"], e["tid"])
        assert e["pid"] in procs and key in threads, e      # named process and thread
        assert isinstance(e["ts"], (int, float))
        assert e["ts"] >= last.get(key, float("-inf")), e    # monotonic per thread
        last[key] = e["ts"]
        st = stacks[key]
        if e["ph"] == "B":
            st.append(e["name"])
        elif e["ph"] == "E":
            assert st and st[-1] == e["name"], (e, st)      # every E closes its B
            st.pop()
            slices[e["name"]] += 1
        elif e["ph"] in "sf":
            assert st, e                                     # bound to an enclosing call
            (starts if e["ph"] == "s" else finishes).setdefault(e["id"], []).append((e, st[-1]))
    assert not any(stacks.values()), {k: v for k, v in stacks.items() if v}  # every B has an E
    assert starts.keys() == finishes.keys()
    assert all(len(v) == 1 for v in starts.values()) and all(len(v) == 1 for v in finishes.values())
    for e in events:
        if e["ph"] == "f":
            assert e.get("bp") == "e", e
    return slices, {i: (starts[i][0], finishes[i][0]) for i in starts}  # (event, its call)


@pytest.mark.parametrize("n", [2, 4])
def test_chrome_export_follows_the_format_and_the_program(tmp_path, mix, n):
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", *MPIRUN, "-n", str(n), mix)
    assert run.returncode == 0, run.stderr
    out = tmp_path / "mix.json"
    ex = run_tiers("trace", "export", str(folder), "--format", "chrome", "-o", str(out))
    assert ex.returncode == 0, ex.stderr
    assert ex.stdout.strip() == str(out)
    whole = json.loads(out.read_text())
    check_schema(whole)
    events = whole["traceEvents"]
    slices, flows = check_format(events)
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names) == list(range(n)) and all(v.startswith(f"rank {r} (")
                                                   for r, v in names.items())
    # one arrow per message, from sender to receiver, as trace_mix sends them:
    # 5 blocking and 3 ring messages per rank, n-1 wildcard ones to rank 0,
    # one inside each sub-communicator of two or more ranks
    arrows = collections.Counter((s["pid"], f["pid"]) for (s, _), (f, _) in flows.values())
    want = collections.Counter()
    for r in range(n):
        want[(r, r ^ 1)] += 5
        want[(r, (r + 1) % n)] += 3
        if r > 0:
            want[(r, 0)] += 1
    for c in (0, 1):
        ranks = [r for r in range(n) if r % 2 == c]
        if len(ranks) >= 2:
            want[(ranks[0], ranks[1])] += 1
    assert arrows == want
    # the calls the arrows leave and reach
    assert {call for (_, call), _ in flows.values()} == {"MPI_Send", "MPI_Isend"}
    assert {call for _, (_, call) in flows.values()} == {"MPI_Recv", "MPI_Waitall"}
    assert slices["MPI_Send"] == 5 * n + (n - 1) + sum(1 for c in (0, 1)
                                                       if len(range(c, n, 2)) >= 2)
    # collectives: root and bytes on the slice's end
    coll = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "E" and "args" in e:
            coll[e["name"]].append((e["pid"], e["args"]))
    assert len(coll["MPI_Bcast"]) == n
    for pid, a in coll["MPI_Bcast"]:
        assert a["root"] == 0 and a["comm"] == 0
        assert a["bytes_sent"] == (100 * 8 if pid == 0 else 0)
        assert a["bytes_received"] == (0 if pid == 0 else 100 * 8)
    for pid, a in coll["MPI_Alltoall"]:
        assert a["root"] is None and a["bytes_sent"] == a["bytes_received"] == 2 * 4 * n
    for pid, a in coll["MPI_Gather"]:
        assert a["root"] == 0


def test_chrome_export_to_stdout(tmp_path, mix):
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", *MPIRUN, "-n", "2", mix)
    assert run.returncode == 0, run.stderr
    ex = run_tiers("trace", "export", str(folder), "--format", "chrome", "-o", "-")
    assert ex.returncode == 0, ex.stderr
    text = ex.stdout[:ex.stdout.rindex("}") + 1]
    check_format(json.loads(text)["traceEvents"])
    leftovers = list(folder.glob(".tiers-chrome*")) + list(folder.glob(".tiers-trace-*"))
    assert not leftovers and not (folder / "trace.chrome.json").exists()
