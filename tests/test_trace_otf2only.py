"""tiers trace stats and export on a trace folder whose raw files were
deleted: the OTF2 archive alone is read back (tiers-trace-post --from-otf2,
native/src/trace/otf2raw.c) and gives the same figures as the raw files,
in memory that does not grow with the events.

trace_mix (tests/programs/trace_mix.c) at 2 and 4 ranks under real mpirun:
the stats printed from the archive alone are those printed from the raw
files alone, less the call-site table (call sites are not in the archive),
the summary's per-function calls, bytes and times and the comm matrix are
equal, and the Chrome export is the same document.  A ping-pong killed
with SIGKILL keeps its stopped rank.  The rebuild's peak memory is the same
for 24 thousand and 1.2 million events."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import build_program, needs_mpicc, run_tiers

MPIRUN = ["mpirun", "--oversubscribe"]

pytestmark = needs_mpicc


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("otf2only")
    return {name: build_program(folder, name) for name in ("trace_mix", "trace_pingpong")}


def trace(folder, *cmd, ok=True):
    run = run_tiers("trace", "--out", str(folder), "--", *MPIRUN, *cmd, timeout=300)
    if ok:
        assert run.returncode == 0, run.stderr
    assert (folder / "traces.otf2").is_file(), run.stderr
    return run


def split(folder, tmp_path):
    """Two copies of trace ``folder``: raw files only, and OTF2 archive only."""
    raw_only, otf2_only = tmp_path / "raw-only", tmp_path / "otf2-only"
    shutil.copytree(folder, raw_only)
    shutil.copytree(folder, otf2_only)
    for name in ("summary.json", "traces.otf2", "traces.def"):
        (raw_only / name).unlink()
    shutil.rmtree(raw_only / "traces")
    (otf2_only / "summary.json").unlink()
    shutil.rmtree(otf2_only / "raw")
    return raw_only, otf2_only


def stats(folder):
    run = run_tiers("trace", "stats", str(folder))
    assert run.returncode == 0, run.stderr
    return run


def without_sites(text):
    """The stats text less its call-site table (up to the next blank line after it)."""
    out, skip = [], False
    for line in text.splitlines():
        if line.startswith("call sites"):
            skip = True
            continue
        if skip and line.startswith("messages per size bucket"):
            skip = False
        if not skip:
            out.append(line)
    return "\n".join(out)


def figures(doc):
    return ({r["rank"]: {f: (e["calls"], e["bytes"], e["time_s"]) for f, e in r["functions"].items()}
             for r in doc["samples"]["ranks"]},
            doc["summary"]["comm_matrix"], doc["summary"]["p2p_bytes"],
            doc["summary"]["p2p_messages"], doc["summary"]["coll_bytes"],
            doc["summary"]["events"], doc["summary"].get("stopped_ranks"),
            doc["samples"]["buckets"])


@pytest.mark.parametrize("n", [2, 4])
def test_stats_and_export_from_the_archive_alone(tmp_path, programs, n):
    from tiers import trace as tr

    folder = tmp_path / "trace"
    trace(folder, "-n", str(n), programs["trace_mix"])
    raw_only, otf2_only = split(folder, tmp_path)

    from_raw, from_otf2 = stats(raw_only), stats(otf2_only)
    assert "call sites" in from_raw.stdout and "call sites" not in from_otf2.stdout
    assert without_sites(from_otf2.stdout) == without_sites(from_raw.stdout)
    assert "MPI_Send" in from_otf2.stdout and f"ranks {n}" in from_otf2.stdout
    # one line says what the archive cannot hold; the folder is left as it was
    assert [ln for ln in from_otf2.stderr.splitlines() if ln.strip()] == \
        [f"tiers trace stats: {tr.ARCHIVE_ONLY}"]
    assert not (otf2_only / "summary.json").exists() and not (otf2_only / "raw").exists()

    doc_raw, doc_otf2 = tr.load(raw_only), tr.load(otf2_only)
    assert figures(doc_otf2) == figures(doc_raw)
    assert doc_otf2["warnings"] == [tr.ARCHIVE_ONLY]
    assert doc_otf2["params"]["from"] == "otf2"

    # the Chrome export: the same document from the archive as from the raw files
    a, b = tmp_path / "raw.json", tmp_path / "otf2.json"
    for src, out in ((folder, a), (otf2_only, b)):
        run = run_tiers("trace", "export", "--format", "chrome", str(src), "-o", str(out))
        assert run.returncode == 0, run.stderr
    assert json.loads(b.read_text()) == json.loads(a.read_text())
    sends = [e for e in json.loads(b.read_text())["traceEvents"] if e["ph"] == "s"]
    assert len(sends) == doc_raw["summary"]["p2p_messages"]


def test_a_killed_rank_stays_stopped(tmp_path, programs):
    from tiers import trace as tr

    folder = tmp_path / "trace"
    trace(folder, "-n", "2", programs["trace_pingpong"], "3000", "64", "100", "kill9", ok=False)
    raw_only, otf2_only = split(folder, tmp_path)
    doc_raw, doc_otf2 = tr.load(raw_only), tr.load(otf2_only)
    assert doc_raw["summary"]["stopped_ranks"]          # the killed run left a stopped rank
    assert figures(doc_otf2) == figures(doc_raw)


def test_threads_and_swapouts(tmp_path, tmp_path_factory):
    """Three threads a rank, each its own location, and swap-outs at and
    between collectives (--budget 64K): the same calls, bytes, messages and
    swap-outs (count, kind, time in them; their sizes are not in the archive)."""
    from tiers import trace as tr

    exe = build_program(tmp_path_factory.mktemp("threads"), "trace_threads", "-fopenmp")
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--budget", "64K", "--out", str(folder), "--", *MPIRUN, "-n", "2",
                    "-x", "OMP_WAIT_POLICY=passive", exe, "3", "400", timeout=300)
    if run.returncode == 77:
        pytest.skip("this MPI library does not provide MPI_THREAD_MULTIPLE")
    assert run.returncode == 0, run.stderr
    raw_only, otf2_only = split(folder, tmp_path)
    doc_raw, doc_otf2 = tr.load(raw_only), tr.load(otf2_only)

    def counts(doc):
        s = doc["summary"]
        return ({r["rank"]: {f: (e["calls"], e["bytes"]) for f, e in r["functions"].items()}
                 for r in doc["samples"]["ranks"]},
                s["comm_matrix"], s["p2p_messages"], s["matched_p2p_bytes"], s["events"],
                s["swapouts"]["count"], s["swapouts"]["unsynchronised"])
    assert counts(doc_otf2) == counts(doc_raw)
    assert doc_raw["summary"]["swapouts"]["count"] > 0
    assert doc_otf2["summary"]["swapouts"]["time_s"] == \
        pytest.approx(doc_raw["summary"]["swapouts"]["time_s"], abs=1e-6 * 16)
    assert doc_otf2["summary"]["swapouts"]["bytes"] == 0      # not in the archive


def test_rebuild_memory_does_not_grow_with_the_events(tmp_path, programs, native_bin):
    peaks = {}
    for iters in (2000, 100000):
        folder = tmp_path / f"pp{iters}"
        trace(folder, "-n", "2", programs["trace_pingpong"], str(iters), "8", "1000")
        out = tmp_path / f"re{iters}"
        out.mkdir()
        proc = subprocess.run([native_bin("tiers-trace-post"), str(folder), "--from-otf2",
                               str(out)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)
        # 2 ranks x (Enter + message + Leave) x 2 calls per round trip, plus the barriers'
        assert got["ranks"] == 2 and got["events"] >= 2 * 6 * iters
        assert len(list((out / "raw").glob("rank-*.tev"))) == 2
        peaks[iters] = got["peak_rss_kib"]
    # 50 times the events: 1.2 million events held would take 30 MiB and more
    assert peaks[100000] <= peaks[2000] + 4096, peaks


def test_an_empty_folder_is_refused_in_one_line(tmp_path):
    run = run_tiers("trace", "stats", str(tmp_path))
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert run.returncode != 0 and len(lines) == 1 and lines[0].startswith("tiers: error: ")
