"""``tiers probe sync``: every requested construct and thread count is
measured, the statistics agree with the raw samples they were computed from,
cycles are microseconds times the reported clock, the 3-sigma filter and the
95% interval are right on known inputs, the schedule sweep covers exactly the
requested chunks, and bad input ends in one line.  No timing thresholds: the
machine is shared."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess

import pytest

from conftest import assert_one_line_error, run_tiers

SYNC = ["parallel", "for", "parallel_for", "barrier", "single", "critical", "lock", "atomic",
        "reduction"]
SCHED = ["static", "dynamic", "guided"]
BARRIERS = ["spin", "pthread", "condvar"]
REFERENCE = {"parallel": "delay", "for": "delay", "parallel_for": "delay", "barrier": "delay",
             "single": "delay", "critical": "delay", "lock": "delay", "atomic": "atomic",
             "reduction": "reduction", "static": "sched", "dynamic": "sched", "guided": "sched"}
CHUNKS = [1, 4, 32]
REPS = 12

# Student's t, 0.975 quantile, from a printed table.
T95 = {1: 12.706, 4: 2.776, 11: 2.201, 19: 2.093, 30: 2.042}


def _pus() -> int:
    return len(os.sched_getaffinity(0))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One quick run of all three groups at 1 and 2 threads (1 alone on a
    one-PU machine), written to JSON with its plot."""
    out = tmp_path_factory.mktemp("sync")
    threads = [1, 2] if _pus() >= 2 else [1]
    path = out / "sync.json"
    r = run_tiers("probe", "sync", "--quick", "--threads", ",".join(map(str, threads)),
                  "--reps", str(REPS), "--test-time", "100", "--chunks",
                  ",".join(map(str, reversed(CHUNKS))), "--json", str(path))
    assert r.returncode == 0, r.stderr
    doc = json.loads(path.read_text())
    return {"doc": doc, "stdout": r.stdout, "threads": threads, "json": path,
            "png": path.with_suffix(".png")}


def _filter(x: list[float], sigma: float = 3.0) -> tuple[list[float], list[float]]:
    n = len(x)
    m = sum(x) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in x) / (n - 1)) if n > 1 else 0.0
    kept = [v for v in x if not (sd > 0 and abs(v - m) > sigma * sd)]
    dropped = [v for v in x if sd > 0 and abs(v - m) > sigma * sd]
    return kept, dropped


def _check_stats(samples: list[float], st: dict, hz: float) -> None:
    kept, dropped = _filter(samples)
    assert st["n"] == len(samples)
    assert st["kept"] == len(kept) and st["dropped"] == len(dropped)
    assert st["dropped_us"] == pytest.approx(dropped)
    k = len(kept)
    mean = sum(kept) / k
    sd = math.sqrt(sum((v - mean) ** 2 for v in kept) / (k - 1)) if k > 1 else 0.0
    s = sorted(kept)
    median = s[k // 2] if k % 2 else (s[k // 2 - 1] + s[k // 2]) / 2
    scale = max(1e-9, abs(mean), max(abs(v) for v in kept))
    assert st["mean_us"] == pytest.approx(mean, abs=1e-12 * scale)
    assert st["median_us"] == pytest.approx(median, abs=1e-12 * scale)
    assert st["stddev_us"] == pytest.approx(sd, rel=1e-9, abs=1e-12 * scale)
    if min(kept) > 0:
        assert st["min_us"] == min(kept)
    else:  # an overhead at or below the noise is not a cost (probe/sync.py)
        assert st["min_us"] is None and st["min_reliable"] is False
    assert st["max_us"] == max(kept)
    half = st["t95"] * sd / math.sqrt(k) if k > 1 else 0.0
    assert st["ci95_us"] == pytest.approx([mean - half, mean + half], abs=1e-9 * scale)
    if k - 1 in T95:
        assert st["t95"] == pytest.approx(T95[k - 1], abs=5e-4)
    c = hz * 1e-6
    for key in ("mean", "median", "stddev", "min", "max"):
        if st[f"{key}_us"] is None:
            assert st[f"{key}_cycles"] is None
            continue
        assert st[f"{key}_cycles"] == pytest.approx(st[f"{key}_us"] * c, rel=1e-12, abs=1e-9)
    assert st["ci95_cycles"] == pytest.approx([v * c for v in st["ci95_us"]], rel=1e-12,
                                              abs=1e-9)


def test_document_and_params(run):
    doc = run["doc"]
    assert doc["schema"] == "tiers.probe.sync/1"
    p = doc["params"]
    assert p["threads"] == run["threads"]
    assert p["tests"] == SYNC + SCHED + BARRIERS
    assert p["chunks"] == CHUNKS  # sorted, exactly the requested ones
    assert p["reps"] == REPS and p["test_time_us"] == 100 and p["pin"] == "compact"
    assert p["delay_length"] >= 1 and p["delay_measured_us"] > 0
    assert p["cycles_per_second"] > 0 and p["outlier_sigma"] == 3
    assert doc["command"][:3] == ["tiers", "probe", "sync"]


def test_every_test_at_every_thread_count(run):
    runs = run["doc"]["samples"]
    assert [r["threads"] for r in runs] == run["threads"]
    for r in runs:
        assert len(r["pus"]) == r["threads"] == len(set(r["pus"]))
        assert all(0 <= pu < _pus() for pu in r["pus"])
        names = [t["name"] for t in r["tests"]]
        assert names == SYNC + [s for s in SCHED for _ in CHUNKS] + BARRIERS
        for s in SCHED:
            assert [t["chunk"] for t in r["tests"] if t["name"] == s] == CHUNKS
        for t in r["tests"]:
            assert len(t["times_us"]) == len(t["overheads_us"]) == REPS
            assert t["innerreps"] >= 1
            if t["name"] in ("critical", "lock", "atomic"):
                assert t["innerreps"] % r["threads"] == 0
        assert {x["name"] for x in r["references"]} == {"delay", "atomic", "reduction",
                                                        "sched"}


def test_overheads_are_times_minus_reference(run):
    for r in run["doc"]["samples"]:
        refs = {x["name"]: x for x in r["references"]}
        for t in r["tests"]:
            if t["group"] == "barriers":
                assert t["reference"] is None and t["reference_us"] == 0
                assert t["overheads_us"] == t["times_us"]
                continue
            assert t["reference"] == REFERENCE[t["name"]]
            assert t["reference_us"] == refs[t["reference"]]["stats"]["mean_us"]
            assert t["overheads_us"] == pytest.approx(
                [v - t["reference_us"] for v in t["times_us"]], abs=1e-12)


def test_statistics_agree_with_samples(run):
    hz = run["doc"]["params"]["cycles_per_second"]
    for r in run["doc"]["samples"]:
        for x in r["references"]:
            _check_stats(x["times_us"], x["stats"], hz)
        for t in r["tests"]:
            _check_stats(t["overheads_us"], t["stats"], hz)


def test_summary_rows_and_headline(run):
    doc = run["doc"]
    summary = doc["summary"]
    rows = summary["rows"]
    assert summary["cycles_per_second"] == doc["params"]["cycles_per_second"]
    n_per = len(SYNC) + len(SCHED) * len(CHUNKS) + len(BARRIERS)
    assert len(rows) == n_per * len(run["threads"])
    for r in doc["samples"]:
        for t in r["tests"]:
            match = [w for w in rows if w["threads"] == r["threads"] and w["name"] == t["name"]
                     and w.get("chunk") == t.get("chunk")]
            assert len(match) == 1
            assert match[0]["mean_us"] == t["stats"]["mean_us"]
            assert match[0]["mean_cycles"] == t["stats"]["mean_cycles"]
    head = summary["headline"]
    at = 2 if 2 in run["threads"] else 1
    assert head["threads"] == at
    for key, name in (("spin_barrier", "spin"), ("pthread_barrier", "pthread"),
                      ("condvar_barrier", "condvar"), ("omp_barrier", "barrier"),
                      ("omp_parallel", "parallel")):
        row = next(w for w in rows if w["threads"] == at and w["name"] == name)
        assert head[key]["mean_us"] == row["mean_us"]
        assert head[key]["median_cycles"] == row["median_cycles"]


def test_printed_tables_and_headline(run):
    out = run["stdout"]
    head = run["doc"]["summary"]["headline"]
    for title in ("EPCC overhead per construct", "Schedule overhead", "Barrier time"):
        assert title in out
    flat = " ".join(out.split())
    assert f"At {head['threads']} threads, mean and median:" in flat
    for key in ("spin_barrier", "pthread_barrier", "condvar_barrier", "omp_barrier",
                "omp_parallel"):
        v = head[key]
        assert (f"{v['label']} {v['mean_us']:.3f} µs ({v['mean_cycles']:,.0f} cycles), median "
                f"{v['median_us']:.3f} µs ({v['median_cycles']:,.0f} cycles)") in flat
    png = run["png"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def _stats(native_bin, values):
    text = ",".join(repr(float(v)) for v in values)
    proc = subprocess.run([native_bin("tiers-probe-sync"), "--stats", text],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_three_sigma_filter_on_known_input(native_bin):
    # One far sample among twenty equal ones: dropped, the rest exact.
    d = _stats(native_bin, [10.0] * 20 + [1000.0])
    st = d["stats"]
    assert (st["n"], st["kept"], st["dropped"]) == (21, 20, 1)
    assert st["dropped_us"] == [1000.0]
    assert st["mean_us"] == 10 and st["median_us"] == 10 and st["stddev_us"] == 0
    assert st["ci95_us"] == [10, 10]
    assert st["mean_cycles"] == pytest.approx(10 * 1e9 * 1e-6)
    # Five samples can never be 3 sigma away (max z = 4/sqrt(5)): all kept.
    d = _stats(native_bin, [1, 2, 3, 4, 100])
    assert d["stats"]["dropped"] == 0
    # One odd sample among n lies (n-1)/sqrt(n) deviations out: 2.85 for
    # n = 10 (kept), 3.015 for n = 11 (dropped) -- the filter's edge.
    values = [0.0] * 9 + [1.0]
    assert _filter(values)[1] == []
    assert _stats(native_bin, values)["stats"]["dropped"] == 0
    values = [0.0] * 10 + [1.0]
    assert _filter(values)[1] == [1.0]
    st = _stats(native_bin, values)["stats"]
    assert st["dropped_us"] == [1.0] and st["kept"] == 10 and st["mean_us"] == 0


def test_statistics_on_known_input(native_bin):
    st = _stats(native_bin, [5, 1, 4, 2, 3])["stats"]
    assert st["mean_us"] == 3 and st["median_us"] == 3
    assert st["stddev_us"] == pytest.approx(math.sqrt(2.5))
    assert st["t95"] == pytest.approx(2.776, abs=5e-4)
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)
    assert st["ci95_us"] == pytest.approx([3 - half, 3 + half], abs=1e-3)
    st = _stats(native_bin, [4, -1, 3, 2])["stats"]
    assert st["median_us"] == 2.5 and st["min_us"] == -1 and st["max_us"] == 4
    assert _stats(native_bin, [1] * 31)["stats"]["t95"] == pytest.approx(2.042, abs=5e-4)
    assert _stats(native_bin, list(range(101)))["stats"]["t95"] == pytest.approx(1.984,
                                                                                 abs=5e-4)
    st = _stats(native_bin, [7.5])["stats"]
    assert (st["mean_us"], st["median_us"], st["stddev_us"], st["ci95_us"]) == (7.5, 7.5, 0,
                                                                               [7.5, 7.5])


def test_single_tests_and_python_api(tmp_path):
    from rich.console import Console

    from tiers.probe import sync

    doc = sync.measure(threads=[1], tests=["spin", "barrier", "guided"], reps=3,
                       test_time=50, chunks=[2], quick=True)
    (run,) = doc["samples"]
    assert [(t["name"], t.get("chunk")) for t in run["tests"]] == [
        ("barrier", None), ("guided", 2), ("spin", None)]
    assert {x["name"] for x in run["references"]} == {"delay", "sched"}
    buf = io.StringIO()
    sync.render(doc, Console(file=buf, width=120))
    assert "spin barrier" in buf.getvalue() and "GUIDED 2" in buf.getvalue()
    path = sync.plot(doc, tmp_path / "p.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, fragment", [
    (["--tests", "sync,bogus"], "unknown test group or test 'bogus'"),
    (["--tests", ""], "--tests is empty"),
    (["--threads", "4096"], "--threads: 4096 is more than the limit of 1024"),
    (["--threads", "2,x"], "--threads: 'x' is not a count"),
    (["--threads", "0"], "--threads: 0 is below the minimum of 1"),
    (["--chunks", "1,,4"], "--chunks: '1,,4' has an empty item"),
    (["--chunks", "-3"], "--chunks: -3 is below the minimum of 1"),
    (["--reps", "0"], "--reps: 0 is below the minimum of 2"),
    (["--reps", "-5"], "--reps: -5 is below the minimum of 2"),
    (["--test-time", "-1"], "--test-time: -1 must be above 0"),
    (["--delay-time", "0"], "--delay-time: 0 must be above 0"),
    (["--test-time", "inf"], "--test-time: 'inf' is not a finite number"),
    (["--pin", "none"], "invalid choice: 'none'"),
    (["--reps", "many"], "--reps: 'many' is not a count"),
])
def test_bad_input_is_one_line(args, fragment):
    r = run_tiers("probe", "sync", *args)
    assert_one_line_error(r, fragment)


def test_native_tool_bad_input(native_bin):
    for args, fragment in ((["--pin", "none"], "--pin must be compact or scatter"),
                           (["--bogus"], "unknown option '--bogus'"),
                           (["--stats", "1,x"], "bad number list"),
                           (["--reps"], "needs a value")):
        proc = subprocess.run([native_bin("tiers-probe-sync"), *args], capture_output=True,
                              text=True, timeout=30)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith("tiers-probe-sync: error: ") and fragment in lines[0]
        assert proc.stdout == ""


def _raw_with(stats_by_name: dict) -> dict:
    """A tiers-probe-sync output of one run at 2 threads with these tests."""
    tests = []
    for name, (mean, low) in stats_by_name.items():
        st = {"mean_us": mean, "median_us": mean, "stddev_us": 0.01,
              "ci95_us": [mean - 0.005, mean + 0.005], "min_us": low, "max_us": mean + 0.02,
              "mean_cycles": mean * 2600, "median_cycles": mean * 2600,
              "stddev_cycles": 26.0, "ci95_cycles": [0.0, 1.0], "kept": 20, "dropped": 0,
              "noisy": False}
        tests.append({"group": "sync", "name": name, "label": name.upper(), "stats": st})
    return {"runs": [{"threads": 2, "tests": tests}], "params": {"cycles_per_second": 2.6e9}}


def test_a_minimum_overhead_at_or_below_zero_is_not_stored_as_a_cost():
    from tiers.probe import sync

    raw = _raw_with({"atomic": (0.02, -0.066), "barrier": (0.3, 0.25), "critical": (0.01, 0.0)})
    rows = {r["name"]: r for r in sync.summarise(raw)["rows"]}
    assert rows["barrier"]["min_us"] == 0.25 and "min_why" not in rows["barrier"]
    for name in ("atomic", "critical"):
        assert rows[name]["min_us"] is None
        assert "timing noise" in rows[name]["min_why"]
    # the raw samples kept in the document carry the same mark
    st = raw["runs"][0]["tests"][0]["stats"]
    assert st["min_us"] is None and st["min_reliable"] is False


def test_a_mean_overhead_at_or_below_zero_prints_below_noise():
    from tiers.probe import sync

    raw = _raw_with({"atomic": (-0.004, -0.03), "barrier": (0.3, 0.25)})
    rows = {r["name"]: r for r in sync.summarise(raw)["rows"]}
    assert "below noise" in sync._cell(rows["atomic"])
    assert "-0.004" not in sync._cell(rows["atomic"])
    assert sync._cell(rows["barrier"]).startswith("0.300 ±0.005")
