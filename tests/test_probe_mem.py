"""tiers probe mem: STREAM accounting, validation, the sweep grid, thread
binding read back from the OS, and one-line errors for bad input.

No test asserts a bandwidth: the machine is shared and noisy (speed claims
live in bench/mem_vs_likwid)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from rich.console import Console

from conftest import assert_one_line_error, run_tiers

STREAM_BYTES = {"copy": 16, "scale": 16, "add": 24, "triad": 24, "read": 8, "write": 8,
                "memcpy": 16}
ORDER = list(STREAM_BYTES)

# Small arrays keep the tests fast; accounting and validation do not depend on size.
SMALL = ["--size", "4M", "--ntimes", "3"]


def _probe(tmp_path, *args, env=None, name="mem.json"):
    out = tmp_path / name
    run = run_tiers("probe", "mem", *args, "--json", str(out), env=env)
    return run, out


def _doc(tmp_path, *args, name="mem.json"):
    run, out = _probe(tmp_path, *args, name=name)
    assert run.returncode == 0, run.stderr
    return json.loads(out.read_text())


def _replay(kernels, ntimes, n):
    """The kernels that ran, replayed on scalars (a=1, b=2, c=0).  Each
    kernel runs its repetitions back to back and reads only arrays it does
    not write, so one pass in STREAM's order gives the final values, and
    every read repetition sums the same a."""
    a, b, c = 1.0, 2.0, 0.0
    sums = []
    for k in ORDER:
        if k not in kernels:
            continue
        if k in ("copy", "memcpy"):
            c = a
        elif k == "scale":
            b = 3.0 * c
        elif k == "add":
            c = a + b
        elif k == "triad":
            a = b + 3.0 * c
        elif k == "read":
            sums = [a * n] * ntimes
        elif k == "write":
            c = 7.0
    return {"a": a, "b": b, "c": c}, sums


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One --quick run shared by the accounting tests."""
    tmp = tmp_path_factory.mktemp("quick")
    run, out = _probe(tmp, "--quick")
    assert run.returncode == 0, run.stderr
    return run, json.loads(out.read_text()), out


def test_quick_is_stream_sized_and_validates(quick):
    run, doc, out = quick
    p = doc["params"]
    assert doc["schema"] == "tiers.probe.mem/1"
    assert p["quick"] is True
    # Arrays at least 4x the last-level caches, as STREAM asks.
    assert p["array_bytes"] >= 4 * p["llc_total_bytes"]
    assert p["array_bytes"] == p["array_elements"] * 8
    assert p["total_bytes"] == 3 * p["array_bytes"]
    assert p["size_meets_stream_rule"] is True
    npus = p["num_pus"]
    want = [1] if npus == 1 else [1, npus]
    assert [c["threads"] for c in doc["samples"]] == want
    assert {(c["pin"], c["placement"]) for c in doc["samples"]} == {("compact", "first-touch")}
    assert all(c["validation"]["passed"] for c in doc["samples"])
    assert doc["summary"]["validation_passed"] is True
    assert "Solution Validates" in run.stdout and "Best Rate MB/s" in run.stdout
    # The plot lands next to the JSON.
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stream_byte_accounting(quick):
    """rate x min time = bytes moved, with STREAM's bytes per element; the
    first repetition is dropped from min/avg/max; per thread = total/threads."""
    _, doc, _ = quick
    n = doc["params"]["array_elements"]
    for cfg in doc["samples"]:
        assert [r["kernel"] for r in cfg["results"]] == ORDER
        for r in cfg["results"]:
            bpe = STREAM_BYTES[r["kernel"]]
            assert r["bytes_per_element"] == bpe
            assert r["bytes"] == bpe * n
            timed = r["times_s"][1:]
            assert len(r["times_s"]) == doc["params"]["ntimes"]
            assert r["min_time_s"] == pytest.approx(min(timed), rel=1e-12)
            assert r["max_time_s"] == pytest.approx(max(timed), rel=1e-12)
            assert r["avg_time_s"] == pytest.approx(sum(timed) / len(timed), rel=1e-9)
            assert r["best_rate_mbps"] * 1e6 * r["min_time_s"] == pytest.approx(bpe * n, rel=1e-9)
            assert r["per_thread_mbps"] * cfg["threads"] == pytest.approx(r["best_rate_mbps"],
                                                                         rel=1e-12)


def test_validation_matches_scalar_replay(tmp_path):
    """The expected values are the kernels that ran replayed on scalars;
    every read sum is n times the value of a when read ran."""
    for kernels, ntimes in (("copy,scale,add,triad,read,write,memcpy", 4), ("triad,read", 3)):
        doc = _doc(tmp_path, "--threads", "1", "--pin", "compact", "--placement", "first-touch",
                   "--kernels", kernels, "--size", "1M", "--ntimes", str(ntimes))
        n = doc["params"]["array_elements"]
        want, sums = _replay(kernels.split(","), ntimes, n)
        v = doc["samples"][0]["validation"]
        assert v["passed"] is True
        assert {a["array"]: a["expected"] for a in v["arrays"]} == pytest.approx(want, rel=1e-15)
        assert all(a["rel_error"] <= v["epsilon"] for a in v["arrays"])
        assert v["read"]["expected_sums"] == pytest.approx(sums, rel=1e-15)
        assert v["read"]["sums"] == pytest.approx(sums, rel=1e-9)


@pytest.mark.parametrize("stores", ["regular", "nt"])
def test_both_store_kinds_validate_on_odd_sizes(tmp_path, stores):
    # 3 threads on odd element counts exercise the slices' remainders.
    doc = _doc(tmp_path, "--threads", "1,3", "--pin", "none", "--placement", "first-touch",
               "--size", "1000008", "--ntimes", "3", "--stores", stores)
    assert doc["params"]["stores"] == stores
    for cfg in doc["samples"]:
        assert cfg["validation"]["passed"] is True
        kinds = {r["kernel"]: r["stores"] for r in cfg["results"]}
        assert kinds["triad"] == kinds["copy"] == kinds["write"] == stores
        assert kinds["read"] == "none" and kinds["memcpy"] == "libc"
    assert [len(c["thread_binding"]) for c in doc["samples"]] == [1, 3]


def test_grid_is_complete(tmp_path):
    doc = _doc(tmp_path, "--threads", "1,2", "--pin", "none,compact,scatter",
               "--placement", "first-touch,master", "--kernels", "copy,triad", *SMALL)
    if doc["params"]["num_pus"] < 2:
        pytest.skip("needs 2 PUs")
    got = [(c["threads"], c["pin"], c["placement"]) for c in doc["samples"]]
    want = [(t, p, pl) for t in (1, 2) for p in ("none", "compact", "scatter")
            for pl in ("first-touch", "master")]
    assert sorted(got) == sorted(want) and len(got) == len(want)
    for cfg in doc["samples"]:
        assert [r["kernel"] for r in cfg["results"]] == ["copy", "triad"]
    # The summary has one series per kernel, pin and placement, with both thread counts.
    series = doc["summary"]["series"]
    assert len(series) == 2 * 3 * 2
    assert all(s["threads"] == [1, 2] for s in series)


def test_pinned_threads_run_where_the_pin_order_says(tmp_path):
    doc = _doc(tmp_path, "--pin", "compact,scatter", "--placement", "first-touch",
               "--kernels", "read", *SMALL)
    npus = doc["params"]["num_pus"]
    for cfg in doc["samples"]:
        binding = cfg["thread_binding"]
        assert [b["thread"] for b in binding] == list(range(cfg["threads"]))
        pus = [b["pin_pu"] for b in binding]
        assert len(set(pus)) == len(pus) and all(0 <= p < npus for p in pus)
        if cfg["pin"] == "compact":
            assert pus == list(range(cfg["threads"]))
        for b in binding:
            # Read back from the OS after the measurement: bound to one PU, ran there.
            assert b["bound_pus"] == [b["pin_pu"]]
            assert b["ran_on_pu"] == b["pin_pu"]


def test_none_unbinds_threads_pinned_before(tmp_path):
    """libgomp keeps its threads between regions: after compact, 'none' must
    bind every thread back to the cpuset the process started with."""
    doc = _doc(tmp_path, "--pin", "compact,none", "--placement", "master",
               "--kernels", "copy", *SMALL)
    initial = doc["params"]["initial_binding"]
    assert len(initial) >= 1
    none_cfgs = [c for c in doc["samples"] if c["pin"] == "none"]
    assert none_cfgs
    for cfg in none_cfgs:
        for b in cfg["thread_binding"]:
            assert b["pin_pu"] is None
            assert b["bound_pus"] == initial
            assert b["ran_on_pu"] in initial


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset")
def test_none_keeps_the_process_cpuset(tmp_path):
    out = tmp_path / "m.json"
    import subprocess
    import sys

    proc = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "tiers", "probe", "mem",
                           "--threads", "2", "--pin", "none", "--placement", "first-touch",
                           "--kernels", "copy", *SMALL, "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["params"]["initial_binding"] == [0]
    assert [b["bound_pus"] for b in doc["samples"][0]["thread_binding"]] == [[0], [0]]


def test_failed_validation_is_reported_and_exits_nonzero(tmp_path):
    run, out = _probe(tmp_path, "--threads", "1", "--pin", "compact", "--placement",
                      "first-touch", "--kernels", "copy,scale", *SMALL,
                      env={"TIERS_PROBE_MEM_CORRUPT": "1"})
    assert_one_line_error(run, "validation failed")
    assert "array b" in run.stderr
    doc = json.loads(out.read_text())
    assert doc["summary"]["validation_passed"] is False
    arrays = {a["array"]: a["passed"] for a in doc["samples"][0]["validation"]["arrays"]}
    assert arrays == {"a": True, "b": False, "c": True}


def test_oversubscription_is_allowed_without_pinning(tmp_path):
    doc = _doc(tmp_path, "--threads", "3", "--pin", "none", "--placement", "first-touch",
               "--kernels", "triad", *SMALL)
    cfg = doc["samples"][0]
    assert cfg["threads"] == 3 and len(cfg["thread_binding"]) == 3
    assert cfg["validation"]["passed"]


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 40


@pytest.mark.parametrize("args, fragment", [
    (["--threads", str((os.cpu_count() or 1) + 1), "--pin", "compact"], "cannot be pinned"),
    (["--threads", "1,4096", "--pin", "none"], "--threads: 4096 is more than the limit of 1024"),
    (["--threads", "0"], "--threads"),
    (["--threads", "1,x"], "--threads"),
    (["--threads", "2-1"], "--threads"),
    (["--size", "abc"], "--size"),
    (["--size", "100"], "too small"),
    (["--size", "-5M"], "--size"),
    (["--kernels", "copy,foo"], "--kernels: unknown value 'foo'"),
    (["--kernels", "copy,,triad"], "empty item"),
    (["--pin", "bogus"], "--pin: unknown value 'bogus'"),
    (["--placement", "nowhere"], "--placement: unknown value 'nowhere'"),
    (["--ntimes", "1"], "--ntimes"),
    (["--ntimes", "abc"], "--ntimes"),
    (["--stores", "weird"], "--stores"),
])
def test_bad_input_gives_one_line(args, fragment):
    assert_one_line_error(run_tiers("probe", "mem", *args), fragment)


def test_arrays_larger_than_memory_are_refused():
    # Each array as large as all available memory: the three cannot fit.
    run = run_tiers("probe", "mem", "--size", str(_available_bytes()))
    assert_one_line_error(run, "memory is available")


def test_python_api_render_and_plot(tmp_path):
    from tiers.probe import mem

    calls = []
    doc = mem.measure(threads=[1], pin=["compact"], placement="master", kernels=["copy", "triad"],
                      size=1 << 20, ntimes=3, stores="regular",
                      progress=lambda done, total: calls.append((done, total)))
    assert doc["schema"] == "tiers.probe.mem/1"
    assert calls == [(1, 1)]
    assert [r["kernel"] for r in doc["summary"]["rows"]] == ["copy", "triad"]
    console = Console(record=True, width=140)
    mem.render(doc, console)
    text = console.export_text()
    for word in ("Function", "Best Rate MB/s", "Avg time", "Min time", "Max time", "Copy:",
                 "Triad:", "Solution Validates"):
        assert word in text
    path = mem.plot(doc, tmp_path / "p.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_saturation_point_of_a_series():
    """The saturation point is the fewest threads reaching 90% of the best rate."""
    from tiers.probe import mem

    def cfg(threads, rate):
        return {"threads": threads, "pin": "compact", "placement": "first-touch",
                "validation": {"passed": True},
                "results": [{"kernel": "triad", "stores": "nt", "best_rate_mbps": rate,
                             "per_thread_mbps": rate / threads, "min_time_s": 1.0,
                             "avg_time_s": 1.0, "max_time_s": 1.0}]}

    raw = {"validation_passed": True, "configs": [cfg(4, 20.0), cfg(1, 10.0), cfg(2, 19.0)]}
    (s,) = mem.summarise(raw)["series"]
    assert s["threads"] == [1, 2, 4]
    assert s["per_thread_mbps"] == [10.0, 9.5, 5.0]
    assert s["speedup"] == [1.0, 1.9, 2.0]
    assert s["saturation_threads"] == 2
    assert mem.summarise(raw)["best"]["triad"]["threads"] == 4


def test_native_tool_prints_one_json_object(native_bin):
    import subprocess

    proc = subprocess.run([native_bin("tiers-probe-mem"), "--threads", "1", "--pin", "compact",
                           "--placement", "first-touch", "--kernels", "write", "--size", "64K",
                           "--ntimes", "2"], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    raw = json.loads(proc.stdout)
    assert raw["native"]["tool"] == "tiers-probe-mem"
    assert raw["params"]["size_meets_stream_rule"] is False  # 64 KiB is cache-sized
    assert raw["validation_passed"] is True


def test_auto_stores_report_each_kernels_faster_variant(tmp_path):
    # the default runs both store kinds side by side in every repetition:
    # each storing kernel reports the variant with the shorter mean time,
    # its figures are that variant's, and the other one's stand beside it;
    # the arrays still validate (each kernel leaves the same values twice)
    doc = _doc(tmp_path, "--threads", "1,2", "--pin", "compact", "--placement", "first-touch",
               "--size", "1000008", "--ntimes", "4")
    assert doc["params"]["stores"] == "auto" and doc["params"]["default_stores"] == "auto"
    for cfg in doc["samples"]:
        assert cfg["validation"]["passed"] is True and cfg["stores"] == "auto"
        for r in cfg["results"]:
            timed = r["times_s"][1:]
            assert r["avg_time_s"] == pytest.approx(sum(timed) / len(timed), rel=1e-12)
            assert r["mean_rate_mbps"] == pytest.approx(r["bytes"] / r["avg_time_s"] / 1e6,
                                                        rel=1e-12)
            assert r["best_rate_mbps"] == pytest.approx(r["bytes"] / min(timed) / 1e6,
                                                        rel=1e-12)
            if r["kernel"] in ("read", "memcpy"):
                assert "variants" not in r and "variant" not in r
                continue
            assert r["stores"] == "auto"
            variants = r["variants"]
            assert sorted(v["stores"] for v in variants) == ["nt", "regular"]
            chosen = variants[0]
            assert chosen["stores"] == r["variant"]
            assert chosen["times_s"] == r["times_s"]
            assert chosen["avg_time_s"] <= variants[1]["avg_time_s"]
            for v in variants:
                vt = v["times_s"][1:]
                assert v["avg_time_s"] == pytest.approx(sum(vt) / len(vt), rel=1e-12)
                assert v["mean_rate_mbps"] == pytest.approx(r["bytes"] / v["avg_time_s"] / 1e6,
                                                            rel=1e-12)
    rows = doc["summary"]["rows"]
    assert all(row["mean_rate_mbps"] is not None for row in rows)
    assert {row["variant"] for row in rows if row["kernel"] == "triad"} <= {"regular", "nt"}


def test_slices_follow_huge_pages_when_every_thread_gets_eight(tmp_path):
    # 4 MiB arrays are two huge pages: 4 KiB slices; 64 MiB are 32: 2 MiB
    # slices at 1 and 2 threads (8 or more each), 4 KiB at 8 threads
    for size, want in (("4M", {1: 4096, 2: 4096}), ("64M", {1: 2 << 20, 2: 2 << 20, 8: 4096})):
        doc = _doc(tmp_path, "--threads", ",".join(map(str, want)), "--pin", "none",
                   "--placement", "first-touch", "--kernels", "copy,read", "--size", size,
                   "--ntimes", "2")
        p = doc["params"]
        assert p["array_alignment_bytes"] == 2 << 20
        assert p["huge_pages"] in ("advised", "unavailable")
        got = {cfg["threads"]: cfg["slice_unit_bytes"] for cfg in doc["samples"]}
        assert got == want
        for cfg in doc["samples"]:
            assert cfg["validation"]["passed"] is True
            hp = cfg["huge_page_bytes"]
            assert hp is None or (isinstance(hp, int) and hp >= 0)


def _linked_cfg(threads, pin, rate, rtt=None):
    return {"threads": threads, "pin": pin, "placement": "first-touch",
            "validation": {"passed": True},
            "pu_link": {"pus": [0, 1], "rtt_ns": rtt} if rtt else None,
            "results": [{"kernel": "triad", "stores": "nt", "best_rate_mbps": rate,
                         "per_thread_mbps": rate / threads, "min_time_s": 1.0,
                         "avg_time_s": 1.0, "max_time_s": 1.0}]}


def test_best_rates_per_placement_of_the_first_two_pus():
    """Where the host placed the two PUs (round trips before and after a
    configuration) sorts the configurations; one thread has no pair and
    counts in every placement; a configuration during which the PUs moved
    counts in none."""
    from tiers.probe import mem

    raw = {"validation_passed": True, "configs": [
        _linked_cfg(1, "compact", 20_000.0),
        _linked_cfg(2, "compact", 25_000.0, [100.0, 104.0]),   # near
        _linked_cfg(2, "scatter", 37_000.0, [460.0, 450.0]),   # far
        {**_linked_cfg(3, "compact", 40_000.0, [104.0, 455.0])}]}  # moved during it
    s = mem.summarise(raw)
    rows = {(r["threads"], r["pin"]): r for r in s["rows"]}
    assert "pu_placement" not in rows[(1, "compact")]
    assert rows[(2, "compact")]["pu_placement"] == 0
    assert rows[(2, "scatter")]["pu_placement"] == 1
    assert rows[(3, "compact")]["pu_placement"] is None
    assert [p["rtt_range_ns"] for p in s["pu_link"]["placements"]] == [[100.0, 104.0],
                                                                       [450.0, 460.0]]
    assert s["pu_link"]["moved"] is True
    near, far = s["best_by_placement"]
    assert near["best"]["triad"]["best_rate_mbps"] == 25_000.0
    assert far["best"]["triad"]["best_rate_mbps"] == 37_000.0
    # the overall best is the configuration that moved: in no placement
    assert s["best"]["triad"]["best_rate_mbps"] == 40_000.0
    warning = mem.placement_warning(s)
    assert "moved PUs 0 and 1" in warning and "25,000.0 MB/s at ~104 ns" in warning \
        and "37,000.0 MB/s at ~455 ns" in warning
    # one placement throughout: no warning, one class
    raw["configs"] = raw["configs"][:2]
    s = mem.summarise(raw)
    assert s["pu_link"]["moved"] is False and mem.placement_warning(s) is None
    assert s["best_by_placement"][0]["best"]["triad"]["best_rate_mbps"] == 25_000.0


def test_pinned_pairs_carry_where_their_pus_were(tmp_path):
    doc = _doc(tmp_path, "--threads", "1,2", "--pin", "none,compact", "--placement",
               "first-touch", "--kernels", "triad", *SMALL)
    if doc["params"]["num_pus"] < 2:
        pytest.skip("needs 2 PUs")
    for cfg in doc["samples"]:
        pins = [b["pin_pu"] for b in cfg["thread_binding"]]
        if cfg["threads"] >= 2 and cfg["pin"] != "none":
            link = cfg["pu_link"]
            assert link["pus"] == pins[:2]
            assert len(link["rtt_ns"]) == 2
            # a round trip measured, or 0 where a busy PU made it run out of time
            assert all(x == 0 or 10 < x < 1e6 for x in link["rtt_ns"])
        else:
            assert cfg["pu_link"] is None
    rows = [r for r in doc["summary"]["rows"] if "pu_link_ns" in r]
    assert [(r["threads"], r["pin"]) for r in rows] == [(2, "compact")]
