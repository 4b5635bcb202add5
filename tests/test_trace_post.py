"""tiers-trace-post, the native post-processing of a trace folder.

Its outputs are checked against an independent reference, the Python
converter (python/tiers/trace/convert.py, which it replaces): the same
summary and per-rank figures, the same messages per size bucket, and an OTF2
archive with the same definitions and the same events, read back by the otf2
Python reader.  Traces come from real programs under real mpirun (2 and 4
ranks, threads, a killed rank) and from raw files written in the tracer's
format (raw.write_synthetic); memory is checked to stay flat as the trace
grows, and the external merge of messages to give the same figures whatever
its run size."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import build_program, needs_mpicc, run_tiers

MPIRUN = ["mpirun", "--oversubscribe"]


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    d = tmp_path_factory.mktemp("post-programs")
    return {"trace_mix": build_program(d, "trace_mix"),
            "trace_killmid": build_program(d, "trace_killmid"),
            "trace_threads": build_program(d, "trace_threads", "-fopenmp")}


@pytest.fixture(scope="module")
def post(native_bin):
    return native_bin("tiers-trace-post")


def run_post(tool, folder, *args, env=None):
    """Run tiers-trace-post; return (exit status, stdout, stderr)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.Popen([tool, str(folder), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full_env)
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out, err


def reference(folder: Path, into: Path):
    """The Python converter's summary, buckets and archive for folder's raw files."""
    from tiers.trace import convert, profile, raw

    shutil.rmtree(into, ignore_errors=True)
    into.mkdir()
    shutil.copytree(folder / "raw", into / "raw")
    logs = raw.read_all(into)
    summary = convert.summarize(logs)
    convert.write_otf2(logs, into)
    return summary, profile.size_buckets(into)


def otf2_content(folder: Path):
    """Definitions (by name) and every event (location, type, time,
    attributes resolved to names) of the archive in folder."""
    import otf2

    events = []
    with otf2.reader.open(str(folder / "traces.otf2")) as tr:
        d = tr.definitions
        defs = {
            "locations": sorted((x.name, x.group.name, x.number_of_events) for x in d.locations),
            "regions": sorted((x.name, str(x.region_role), str(x.paradigm)) for x in d.regions),
            "comms": sorted((c.name, c.group.name, len(c.group.members),
                             c.parent.name if c.parent else None) for c in d.comms),
            "groups": sorted((g.name, str(g.group_type)) for g in d.groups),
            "clock": (d.clock_properties.timer_resolution, d.clock_properties.global_offset,
                      d.clock_properties.trace_length),
        }
        for loc, ev in tr.events:
            attrs = []
            for k in ("region", "receiver", "sender", "msg_tag", "msg_length", "request_id",
                      "collective_op", "root", "size_sent", "size_received", "communicator"):
                if hasattr(ev, k):
                    v = getattr(ev, k)
                    attrs.append((k, v.name if hasattr(v, "name") else str(v)))
            events.append((loc.group.name, loc.name, type(ev).__name__, ev.time, tuple(attrs)))
    return defs, events


def assert_same_as_reference(folder: Path, tmp_path: Path):
    doc = json.loads((folder / "summary.json").read_text())
    assert doc["samples"]["post"]["tool"] == "tiers-trace-post"
    ref, ref_buckets = reference(folder, tmp_path / "reference")
    ref_ranks = ref.pop("per_rank")
    got = dict(doc["summary"])
    got.pop("archive")
    assert json.dumps(got, sort_keys=True) == json.dumps(ref, sort_keys=True)
    assert doc["samples"]["ranks"] == ref_ranks
    assert doc["samples"]["buckets"] == ref_buckets
    ref_defs, ref_events = otf2_content(tmp_path / "reference")
    defs, events = otf2_content(folder)
    assert defs == ref_defs
    assert len(events) == len(ref_events) == doc["summary"]["events"]
    assert events == ref_events
    return doc


@needs_mpicc
@pytest.mark.parametrize("n", [2, 4])
def test_mix_same_as_python_converter(tmp_path, programs, n):
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", *MPIRUN, "-n", str(n),
                    programs["trace_mix"])
    assert run.returncode == 0, run.stderr
    doc = assert_same_as_reference(folder, tmp_path)
    # what trace_mix.c does: 5 exchanges of 1024 doubles each way per pair
    assert doc["summary"]["functions"]["MPI_Send"]["calls"] >= 5 * n


@needs_mpicc
def test_threads_and_swapouts_same_as_python_converter(tmp_path, programs):
    folder = tmp_path / "trace"
    # the default policy at 64K: swap-outs at collectives and between them
    run = run_tiers("trace", "--budget", "64K", "--out", str(folder), "--",
                    *MPIRUN, "-n", "2", "-x", "OMP_WAIT_POLICY=passive",
                    programs["trace_threads"], "3", "400")
    if run.returncode == 77:
        pytest.skip("this MPI library does not provide MPI_THREAD_MULTIPLE")
    assert run.returncode == 0, run.stderr
    doc = assert_same_as_reference(folder, tmp_path)
    assert doc["summary"]["swapouts"]["count"] > doc["summary"]["swapouts"]["unsynchronised"] > 0
    locations = otf2_content(folder)[0]["locations"]
    # every rank's threads are locations of their own (3 threads: 2 beside the master)
    assert sum(1 for name, _, _ in locations if name != "Master thread") == 2 * 2


@needs_mpicc
def test_killed_rank_same_as_python_converter(tmp_path, programs):
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--budget", "64K", "--out", str(folder), "--", *MPIRUN, "-n", "3",
                    programs["trace_killmid"], "100000", "6000", "1")
    assert run.returncode != 0
    doc = assert_same_as_reference(folder, tmp_path)
    assert 1 in doc["summary"]["stopped_ranks"]


@needs_mpicc
def test_merge_run_size_does_not_change_figures(tmp_path, programs, post):
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", *MPIRUN, "-n", "4",
                    programs["trace_mix"])
    assert run.returncode == 0, run.stderr
    rc, out, err = run_post(post, folder, "--no-otf2", env={"TIERS_TRACE_POST_RUN": "16"})
    assert rc == 0, err
    small = json.loads(out)
    assert small["post"]["message_runs"] >= 2 * 4     # one run per rank and kind at least
    doc = json.loads((folder / "summary.json").read_text())
    for key in ("receiver_first_share", "matched_p2p_bytes", "p2p_bytes", "comm_matrix"):
        assert small["summary"][key] == doc["summary"][key], key
    assert doc["summary"]["matched_p2p_bytes"] > 0


def test_synthetic_exact_counts_and_flat_memory(tmp_path, post):
    from tiers.trace import raw

    sizes = {}
    for events in (2_400_000, 7_200_000):
        folder = tmp_path / f"syn{events}"
        raw.write_synthetic(folder, events)
        rounds = events // 12
        rc, out, err = run_post(post, folder, "--no-otf2")
        assert rc == 0, err
        s = json.loads(out)["summary"]
        # 6 events a round trip and rank, plus MPI_Init's and MPI_Finalize's Enter/Leave
        assert s["events"] == 2 * (6 * rounds + 4)
        assert s["p2p_messages"] == 2 * rounds and s["p2p_bytes"] == 2 * rounds * 8
        assert s["matched_p2p_bytes"] == 2 * rounds * 8
        assert s["functions"]["MPI_Send"]["calls"] == 2 * rounds
        rc, out, err = run_post(post, folder)        # with the archive this time
        assert rc == 0, err
        assert (folder / "traces.otf2").is_file()
        sizes[events] = json.loads(out)["post"]["peak_rss_kib"]   # the tool's own VmHWM
    # three times the events (the larger raw files are 190 MB), the same
    # memory: both traces fill every fixed-size buffer (message runs, OTF2
    # chunk pools, read blocks)
    assert sizes[7_200_000] < sizes[2_400_000] + 8 * 1024, sizes
    assert sizes[7_200_000] < 80 * 1024, sizes


def test_synthetic_archive_same_as_python_converter(tmp_path, post):
    from tiers.trace import raw

    folder = tmp_path / "syn"
    raw.write_synthetic(folder, 30_000, ranks=4, nbytes=100)
    rc, out, err = run_post(post, folder)
    assert rc == 0, err
    got = json.loads(out)
    ref, ref_buckets = reference(folder, tmp_path / "reference")
    ref.pop("per_rank")
    assert json.dumps(got["summary"], sort_keys=True) == json.dumps(ref, sort_keys=True)
    assert got["buckets"] == ref_buckets == {"MPI_Send": {"65 B-1 KiB": 30_000 // 24 * 4},
                                             "MPI_Recv": {"65 B-1 KiB": 30_000 // 24 * 4}}
    assert otf2_content(folder) == otf2_content(tmp_path / "reference")
    # runs of 100 messages: 13 a rank and kind, merged to the same figures
    rc, out, err = run_post(post, folder, "--no-otf2", env={"TIERS_TRACE_POST_RUN": "100"})
    assert rc == 0, err
    small = json.loads(out)
    assert small["post"]["message_runs"] == 2 * 4 * 13
    assert small["summary"] == got["summary"]


def test_damaged_file_same_message_as_reader(tmp_path, post):
    from tiers.errors import TiersError
    from tiers.trace import raw

    folder = tmp_path / "syn"
    f = raw.write_synthetic(folder, 1200)[1]
    data = bytearray(f.read_bytes())
    hlen = int.from_bytes(data[12:16], "little")
    data[hlen + 208 + 160] = 99        # the second round trip's first record: an unknown kind
    f.write_bytes(bytes(data))
    with pytest.raises(TiersError) as exc:
        raw.read(f)
    rc, out, err = run_post(post, folder, "--no-otf2")
    assert rc == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"tiers-trace-post: error: {exc.value}"
    # and through the command line: one line, the reader's words
    run = run_tiers("trace", "stats", str(folder))
    assert run.returncode == 2          # as with the Python reader: bad input
    assert run.stderr.strip().splitlines() == [f"tiers: error: {exc.value}"]


def test_stats_of_a_folder_without_summary(tmp_path):
    from tiers.trace import raw

    folder = tmp_path / "syn"
    raw.write_synthetic(folder, 24_000)
    run = run_tiers("trace", "stats", str(folder))
    assert run.returncode == 0, run.stderr
    rows = {ln.split()[0]: ln.split() for ln in run.stdout.splitlines() if ln.startswith("MPI_")}
    assert rows["MPI_Send"][1] == str(2 * 2000) and rows["MPI_Recv"][1] == str(2 * 2000)
    assert "1-64 B" in run.stdout
