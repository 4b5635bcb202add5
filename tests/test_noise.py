"""The machine-noise check (``tiers probe noise``, tiers.noise): the shape of
its document and the arithmetic of its figures, its verdict with a busy
process pinned to the PU it tests, how a busy verdict reaches a document's
warnings, and bad input in one line.  A quiet verdict is not asserted: the
test machine is shared."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import assert_one_line_error, run_tiers

FIELDS = ("pu", "os_index", "min_us", "median_us", "p99_us", "max_us", "mean_us",
          "noise_fraction", "lost_fraction")


def _noise(*args: str) -> dict:
    run = run_tiers("probe", "noise", *args, "--json", "-", "--format", "json", timeout=120)
    assert run.returncode == 0, run.stderr
    return run.json()


def test_document_shape_and_figures():
    doc = _noise("--quick", "--duration", "0.05", "--quantum-us", "50")
    assert doc["schema"] == "tiers.probe.noise/1"
    params = doc["params"]
    assert params["quantum_us"] == 50
    assert params["quanta"] == 1000                     # 50 ms of 50 us quanta
    noise = doc["noise"]
    assert noise["verdict"] in ("quiet", "busy", "moving")
    assert isinstance(noise["summary"], str) and "\n" not in noise["summary"]
    assert noise["summary"].startswith(f"machine {noise['verdict']}")
    pus = noise["fwq"]["pus"]
    assert len(pus) >= 1 and [p["pu"] for p in pus] == list(range(len(pus)))
    for p in pus:
        assert set(FIELDS) <= set(p)
        assert 0 < p["min_us"] <= p["median_us"] <= p["p99_us"] <= p["max_us"]
        assert p["min_us"] <= p["mean_us"] <= p["max_us"]
        assert 0 <= p["noise_fraction"] <= 1
        # lost = sum(t - min) / sum(t) = 1 - min / mean
        assert p["lost_fraction"] == pytest.approx(1 - p["min_us"] / p["mean_us"], abs=1e-9)
    worst = max(pus, key=lambda p: p["lost_fraction"])
    assert noise["fwq"]["worst_pu"] == worst["pu"]
    assert noise["fwq"]["lost_fraction"] == worst["lost_fraction"]
    la = noise["loadavg"]
    assert len(la) == 3 and all(x >= 0 for x in la)
    assert noise["load"]["online_cpus"] == os.cpu_count()
    # pairs of PUs: each with the next, 3 samples each with --quick
    assert params["pair_samples"] == (3 if len(pus) > 1 else 0)
    pairs = noise["pairs"]
    assert [p["pus"] for p in pairs] == [[i, i + 1] for i in range(min(len(pus) - 1, 32))]
    for p in pairs:
        # samples that ran out of time (a PU taken by other work) are left out
        assert len(p["rtt_ns"]) + p["timed_out"] == 3
        # a round trip of a cache line: above 1 ns, and bounded by the
        # tool's deadline (20 ms) even on a busy machine
        assert all(1 < x < 2e7 for x in p["rtt_ns"]), p
        if p["rtt_ns"]:
            assert p["min_ns"] == min(p["rtt_ns"]) and p["max_ns"] == max(p["rtt_ns"])
            assert p["moved"] == (p["max_ns"] > 1.5 * p["min_ns"])
        assert p["layer"] in ("core", "cache", "numa", "package", "machine")
    # the verdict follows from the figures by the documented rule
    from tiers import noise as tnoise
    raw_pairs = [{"pu_a": p["pus"][0], "pu_b": p["pus"][1], "layer": p["layer"],
                  "samples": [{"rtt_ns": x} for x in p["rtt_ns"]] +
                  [{"rtt_ns": 1.0, "timed_out": True}] * p["timed_out"]} for p in pairs]
    expect, reasons = tnoise.verdict({"pus": pus, "load": noise["load"], "pairs": raw_pairs})
    assert noise["verdict"] == expect and noise["reasons"] == reasons
    if expect != "quiet":
        assert noise["summary"] in doc["warnings"]


def test_pair_samples_option():
    doc = _noise("--quick", "--duration", "0.02", "--pair-samples", "0")
    assert doc["params"]["pair_samples"] == 0 and doc["noise"]["pairs"] == []
    if os.cpu_count() > 1:
        doc = _noise("--quick", "--duration", "0.02", "--pus", "0,1", "--pair-samples", "5")
        (pair,) = doc["noise"]["pairs"]
        assert pair["pus"] == [0, 1] and len(pair["rtt_ns"]) + pair["timed_out"] == 5


def test_busy_process_on_the_tested_pu_makes_it_busy():
    first = _noise("--pus", "0", "--duration", "0.02")
    cpu = first["noise"]["fwq"]["pus"][0]["os_index"]
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {cpu})
        # 2 ms quanta: a time slice of the neighbour falls inside a large
        # share of them; the fair scheduler gives the neighbour about half
        # of the PU.
        doc = _noise("--pus", "0", "--duration", "0.4", "--quantum-us", "2000")
    finally:
        hog.kill()
        hog.wait()
    pu = doc["noise"]["fwq"]["pus"][0]
    assert pu["os_index"] == cpu
    assert pu["lost_fraction"] >= 0.25, pu
    assert pu["noise_fraction"] >= 0.2, pu
    assert pu["max_us"] >= 1.5 * pu["min_us"]
    assert doc["noise"]["verdict"] == "busy"
    assert "PU 0" in doc["noise"]["summary"]
    assert doc["noise"]["summary"] in doc["warnings"]


def _raw(lost: float, noisy: float, other: float | None = 0.0, rtt=None) -> dict:
    return {"params": {"quantum_us": 100, "quanta": 10, "method": "FWQ",
                       "noise_threshold": 1.5},
            "pairs": [] if rtt is None else
            [{"pu_a": 0, "pu_b": 1, "layer": "cache",
              "samples": [{"rtt_ns": x, "timed_out": False} for x in rtt]}],
            "load": {"loadavg": [0.5, 0.4, 0.3], "procs_running": 0,
                     "other_cpu_fraction": other},
            "pus": [{"pu": 0, "os_index": 0, "min_us": 100, "median_us": 100, "p99_us": 100,
                     "max_us": 100, "mean_us": 100, "noise_fraction": 0.0,
                     "lost_fraction": 0.0},
                    {"pu": 1, "os_index": 1, "min_us": 100, "median_us": 100, "p99_us": 300,
                     "max_us": 900, "mean_us": 100 / (1 - lost), "noise_fraction": noisy,
                     "lost_fraction": lost}]}


def test_verdict_rule_and_attach():
    from tiers import noise

    quiet = noise.block(_raw(0.02, 0.01))
    assert quiet["verdict"] == "quiet" and quiet["reasons"] == []
    assert quiet["fwq"]["worst_pu"] == 1
    lost = noise.block(_raw(0.4, 0.01))
    assert lost["verdict"] == "busy" and "PU 1 lost 40%" in lost["reasons"][0]
    noisy = noise.block(_raw(0.05, 0.2))
    assert noisy["verdict"] == "busy" and "20%" in noisy["reasons"][0]
    other = noise.block(_raw(0.01, 0.0, other=0.6))
    assert other["verdict"] == "busy" and "other processes" in other["reasons"][0]

    # pairs: samples within 1.5x of each other are one placement
    steady = noise.block(_raw(0.02, 0.01, rtt=[100, 140, 110]))
    assert steady["verdict"] == "quiet" and steady["reasons"] == []
    assert steady["summary"].endswith("; cache-line round trip PU 0-1 100-140 ns")
    assert steady["pairs"] == [{"pus": [0, 1], "layer": "cache", "rtt_ns": [100, 140, 110],
                                "min_ns": 100, "max_ns": 140, "moved": False,
                                "timed_out": 0}]
    # a sample that ran out of time (the second PU taken) is left out: its
    # round trip is a time slice, not a move
    slow = _raw(0.02, 0.01, rtt=[100, 110])
    slow["pairs"][0]["samples"].append({"rtt_ns": 2.1e7, "timed_out": True})
    blk = noise.block(slow)
    assert blk["verdict"] == "quiet" and blk["pairs"][0]["rtt_ns"] == [100, 110]
    assert blk["pairs"][0]["timed_out"] == 1 and blk["pairs"][0]["moved"] is False
    # a round trip 4.7x longer in one sample: the host moved the PUs
    moved = noise.block(_raw(0.02, 0.01, rtt=[100, 470, 105]))
    assert moved["verdict"] == "moving" and moved["pairs"][0]["moved"] is True
    assert moved["reasons"] == [
        "PUs 0 and 1 moved during the check: a cache line's round trip between them went "
        "between 100 and 470 ns (on a virtual machine, the host placing its CPUs elsewhere), "
        "and figures between PUs move with it"]
    assert moved["summary"].startswith("machine moving: PUs 0 and 1 moved during the check")
    assert moved["summary"].endswith("figures between PUs of this run may differ from other "
                                     "runs'")
    doc3 = noise.attach({}, moved)
    assert doc3["warnings"] == [moved["summary"]]
    # a busy PU comes first; the move is among the reasons
    both = noise.block(_raw(0.4, 0.01, rtt=[100, 470, 105]))
    assert both["verdict"] == "busy" and len(both["reasons"]) == 2
    assert both["reasons"][0].startswith("PU 1 lost 40%")
    assert both["reasons"][1].startswith("PUs 0 and 1 moved during the check")
    # a pair that could not be measured says why and moves nothing
    failed = _raw(0.02, 0.01)
    failed["pairs"] = [{"pu_a": 0, "pu_b": 1, "layer": "cache", "error": "cannot pin"}]
    blk = noise.block(failed)
    assert blk["verdict"] == "quiet" and blk["pairs"] == [
        {"pus": [0, 1], "layer": "cache", "error": "cannot pin"}]

    doc = {"warnings": ["an earlier warning"]}
    noise.attach(doc, lost)
    noise.attach(doc, lost)        # once only
    assert doc["noise"] is lost
    assert doc["warnings"] == ["an earlier warning", lost["summary"]]
    doc2 = noise.attach({}, quiet)
    assert doc2["noise"] is quiet and "warnings" not in doc2
    assert noise.attach({}, None) == {}


@pytest.mark.parametrize("args,fragment", [
    (["--quantum-us", "0"], "--quantum-us"),
    (["--duration", "-1"], "--duration"),
    (["--pus", "x"], "--pus"),
    (["--pus", "4096"], "does not exist"),
    (["--bogus"], "unrecognized arguments"),
    (["--pair-samples", "-1"], "--pair-samples"),
    (["--pair-samples", "101"], "--pair-samples"),
    (["--pair-samples", "x"], "--pair-samples"),
])
def test_bad_option_is_one_line(args, fragment):
    assert_one_line_error(run_tiers("probe", "noise", *args), fragment)
