"""tiers probe net: MPI_Barrier and the all-pairs test in separate launches.

What one launch starts with (where the ranks and their buffers land) moved
the MPI_Barrier mean and the all-pairs figures between runs by more than
their intervals inside one launch, so both run in several launches and are
merged (docs/statistics.md, "Independent blocks").  The merge rules get
synthetic launches whose answer is known; the real program runs under real
mpirun at 2 and 3 ranks (barrier) and 2 and 4 ranks (all pairs).
"""

from __future__ import annotations

import json
import statistics

import pytest

from conftest import run_tiers
from tiers import stats
from tiers.probe import net, netfit


# --------------------------------------------------------------------------
# The agreement rule


def test_launches_that_agree_are_not_noisy():
    a = stats.launch_agreement([0.40, 0.41, 0.42])
    assert a["median"] == pytest.approx(0.41)
    assert a["launches"] == 3
    assert a["spread"] == pytest.approx(0.02 / 0.41)
    assert a["rel"] == pytest.approx(0.01 / 0.41)
    assert a["noisy"] is False and a["why"] is None


def test_launches_that_disagree_are_noisy_and_say_by_how_much():
    a = stats.launch_agreement([0.33, 0.43, 0.41], lambda v: f"{v:.2f} us")
    assert a["median"] == pytest.approx(0.41)
    assert a["rel"] == pytest.approx(0.08 / 0.41)  # 0.33 is 19.5 % below
    assert a["noisy"] is True
    assert "3 launches disagree" in a["why"] and "0.33 us" in a["why"] \
        and "0.43 us" in a["why"] and "19.5 %" in a["why"]


def test_agreement_leaves_out_missing_figures_and_one_launch_cannot_disagree():
    a = stats.launch_agreement([None, 5.0, float("nan")])
    assert a == {"median": 5.0, "launches": 1, "spread": None, "rel": None, "noisy": False,
                 "why": None}
    assert stats.launch_agreement([])["median"] is None
    # within +-5 % of the median agrees; further does not
    assert stats.launch_agreement([0.96, 1.0, 1.04])["noisy"] is False
    assert stats.launch_agreement([0.94, 1.0, 1.0])["noisy"] is True


# --------------------------------------------------------------------------
# MPI_Barrier rows merged over launches


def _brow(ranks, lo, avg, hi, blocks, stopped="converged"):
    return {"ranks": ranks, "min_us": lo, "avg_us": avg, "max_us": hi, "blocks_us": blocks,
            "block_n": len(blocks), "stopped": stopped}


def test_barrier_rows_take_the_median_launch_of_each_figure():
    steady = [0.31, 0.32, 0.31, 0.32, 0.31, 0.32, 0.31]
    launches = [[_brow(2, 0.30, 0.31, 0.32, steady)],
                # one launch disturbed by a long pause: its mean is far off
                [_brow(2, 0.50, 8.50, 16.5, steady + [74.0], "max samples")],
                [_brow(2, 0.31, 0.32, 0.33, steady)]]
    (row,) = net.merge_collective(launches)
    assert row["ranks"] == 2 and row["launches"] == 3
    assert (row["min_us"], row["avg_us"], row["max_us"]) == (0.31, 0.32, 0.33)
    assert row["avg_launches_us"] == [0.31, 8.50, 0.32]
    assert row["avg_launch_spread"] == pytest.approx((8.50 - 0.31) / 0.32)
    # the launches' means disagree: flagged, and the reason names them
    assert row["block_noisy"] is True
    assert row["block_why"].startswith("mean per call: 3 launches disagree")
    # the blocks of every launch are pooled; the median block is the median
    # of the launches' median blocks
    assert row["blocks_us"] == steady + steady + [74.0] + steady
    assert row["block_n"] == 22
    assert row["block_median"] == pytest.approx(0.31)
    # (the disturbed block is outside the fences of its launch: left out)
    assert row["block_launch_medians_us"] == pytest.approx([0.31, 0.31, 0.31])
    assert row["stopped"] == "max samples"
    assert row["stopped_launches"] == ["converged", "max samples", "converged"]


def test_barrier_rows_that_agree_are_not_flagged():
    launches = [[_brow(p, 0.30 * p, 0.31 * p, 0.32 * p, [0.31 * p + 0.001 * i for i in range(8)])
                 for p in (2, 3)] for _ in range(3)]
    rows = net.merge_collective(launches)
    assert [r["ranks"] for r in rows] == [2, 3]
    for r, p in zip(rows, (2, 3)):
        assert r["avg_us"] == pytest.approx(0.31 * p)
        assert r["block_noisy"] is False and r["block_why"] is None
        assert r["min_us"] <= r["avg_us"] <= r["max_us"]


def test_one_barrier_launch_is_kept_as_it_is():
    rows = [_brow(2, 0.3, 0.31, 0.32, [0.31] * 6)]
    assert net.merge_collective([rows]) == rows


# --------------------------------------------------------------------------
# All pairs merged over launches

SIZES = [1000, 2000, 3000, 4000]


def _apdoc(pus, times, lat, pairs=((0, 1),)):
    """A native all-pairs output: ranks on ``pus``, every pair with the
    same per-size ``times`` and latency blocks ``lat``."""
    return {"placement": [{"rank": i, "host": "h", "pus": str(p)} for i, p in enumerate(pus)],
            "allpairs": {"sizes": SIZES, "reps": 3, "schedule": [],
                         "phases": [{"phase": "intra", "steps": 1, "rounds": 1,
                                     "seconds": 0.5}],
                         "pairs": [{"a": a, "b": b, "phase": "intra",
                                    "times_us": [list(t) for t in times],
                                    "latency_samples_us": list(lat)} for a, b in pairs]}}


def _line(lat_us, mbps, scale=1.0):
    # one-way times on the line latency + size / bandwidth, 3 repetitions
    return [[(lat_us + s / mbps) * scale * k for k in (1.0, 1.1, 1.2)] for s in SIZES]


def test_all_pairs_pools_the_launches_and_keeps_each_launch_fit():
    docs = [_apdoc([0, 1], _line(5.0, 1000.0), [0.30, 0.31]),
            _apdoc([0, 1], _line(5.0, 1000.0, 1.5), [0.25, 0.40]),
            _apdoc([0, 1], _line(5.0, 1000.0, 1.02), [0.29])]
    ap = net.merge_allpairs(docs)
    assert ap["launches"] == 3 and ap["launches_run"] == 3
    assert ap["phases"][0]["seconds"] == pytest.approx(1.5)
    (p,) = ap["pairs"]
    assert [len(t) for t in p["times_us"]] == [9] * len(SIZES)
    assert p["latency_samples_us"] == [0.30, 0.31, 0.25, 0.40, 0.29]
    assert [f["bandwidth_mbps"] for f in p["launch_fits"]] == \
        pytest.approx([1000.0, 1000.0 / 1.5, 1000.0 / 1.02])
    # the fit through the pooled data takes the best time per size: the
    # first launch's line, and the best latency block of all
    fit = netfit.robust_fit(ap["sizes"], p["times_us"], p["latency_samples_us"])
    assert fit["bandwidth_mbps"] == pytest.approx(1000.0)
    agree = netfit.launch_agreement(p["launch_fits"])
    assert agree["noisy"] is True and "bandwidth: 3 launches disagree" in agree["noisy_why"]
    assert agree["bandwidth_launch_spread"] == pytest.approx(
        (1000.0 - 1000.0 / 1.5) / (1000.0 / 1.02))


def test_all_pairs_figures_are_the_median_launch_not_the_best():
    # one launch of three in another state (0-byte latency 0.17 us against
    # 0.28 us, a faster line): the best of all would take it, the median not
    # (lines with a negative intercept: the latency comes from the 0-byte blocks)
    docs = [_apdoc([0, 1], _line(-0.5, 1000.0), [0.28, 0.29]),
            _apdoc([0, 1], _line(-0.5, 1500.0), [0.17, 0.18]),
            _apdoc([0, 1], _line(-0.5, 980.0), [0.285, 0.30])]
    raw = {"params": {"ranks": 2}, "placement": docs[0]["placement"],
           "allpairs": net.merge_allpairs(docs)}
    samples, summary = net.analyse(raw)
    (p,) = samples["allpairs"]["pairs"]
    assert p["latency_us"] == pytest.approx(0.28)  # the 3 launches' best: 0.28, 0.17, 0.285
    assert p["latency_source"] == "pingpong"
    assert p["bandwidth_mbps"] == pytest.approx(1000.0)
    assert p["bandwidth_source"] == "fit"
    # the pooled fit (best of everything) is kept beside them
    assert p["pooled_latency_us"] == pytest.approx(0.17)
    assert p["pooled_bandwidth_mbps"] == pytest.approx(1500.0)
    assert p["reliable"] is True and p["noisy"] is True
    assert summary["allpairs"]["matrices"]["latency_us"][0][1] == pytest.approx(0.28)


def test_all_pairs_launches_whose_ranks_sat_elsewhere_are_not_pooled():
    docs = [_apdoc([0, 1], _line(5.0, 1000.0), [0.3]),
            _apdoc([1, 0], _line(5.0, 500.0), [0.1])]
    ap = net.merge_allpairs(docs)
    assert ap["launches"] == 1 and ap["launches_run"] == 2
    (p,) = ap["pairs"]
    assert p["latency_samples_us"] == [0.3]
    assert len(p["launch_fits"]) == 1


def test_all_pairs_summary_counts_noisy_pairs_and_flags_their_layer():
    same = [_apdoc([0, 1, 2, 3], _line(5.0, 1000.0), [0.3], pairs=((0, 1), (2, 3)))
            for _ in range(3)]
    # pair 2-3 moves by 30 % in one launch
    same[1]["allpairs"]["pairs"][1]["times_us"] = _line(5.0, 1000.0, 1.3)
    raw = {"params": {"ranks": 4}, "placement": same[0]["placement"],
           "allpairs": net.merge_allpairs(same)}
    layers = [["pu" if i == j else "L3 cache" if i // 2 == j // 2 else "machine"
               for j in range(4)] for i in range(4)]
    _, summary = net.analyse(raw, layers, [[3] * 4 for _ in range(4)])
    ap = summary["allpairs"]
    assert ap["launches"] == 3 and ap["noisy_pairs"] == 1
    (layer,) = ap["layers"]
    assert layer["layer"] == "L3 cache" and layer["pairs"] == 2 and layer["noisy"] is True


# --------------------------------------------------------------------------
# Real runs


def _doc(tmp_path, *args):
    path = tmp_path / "net.json"
    run = run_tiers("probe", "net", *args, "--json", str(path))
    assert run.returncode == 0, run.stderr
    return json.loads(path.read_text()), run


@pytest.mark.parametrize("ranks", [2, 3])
def test_barrier_runs_in_separate_launches(tmp_path, ranks):
    doc, run = _doc(tmp_path, "-n", str(ranks), "--tests", "barrier", "--launches", "2",
                    "--barrier-threads", "1", "--quick")
    pb = doc["params"]["barrier"]
    assert pb["launches"] == 2
    assert pb["block_calls"] >= 100  # blocks long enough to hold steady calls
    rows = doc["samples"]["barrier"]["mpi"]
    assert [r["ranks"] for r in rows] == list(range(2, ranks + 1))
    for r in rows:
        assert r["launches"] == 2 and len(r["avg_launches_us"]) == 2
        assert r["avg_us"] == pytest.approx(statistics.median(r["avg_launches_us"]))
        assert 0 < r["min_us"] <= r["avg_us"] * (1 + 1e-12) <= r["max_us"] * (1 + 1e-12)
        assert len(r["block_launch_medians_us"]) == 2
        assert r["block_n"] == len(r["blocks_us"])
    assert "median over 2 separate launches" in run.stdout


@pytest.mark.parametrize("ranks", [2, 4])
def test_all_pairs_runs_in_separate_launches(tmp_path, ranks):
    doc, run = _doc(tmp_path, "-n", str(ranks), "--tests", "allpairs", "--center", "64K",
                    "--reps", "2", "--launches", "2")
    ap = doc["samples"]["allpairs"]
    pairs = ap["pairs"]
    assert len(pairs) == ranks * (ranks - 1) // 2
    assert doc["summary"]["allpairs"]["launches"] == 2
    assert doc["params"]["allpairs"]["launches"] == 2
    for p in pairs:
        # both launches' repetitions are pooled, and each launch's own fit kept
        assert len(p["launch_fits"]) == 2
        assert all(1 <= len(t) <= 2 * 2 for t in p["times_us"])
        assert p["latency_us"] is None or p["latency_us"] > 0
        # the figures are the medians of the two launches' own fits
        lats = [f["latency_us"] for f in p["launch_fits"] if f["latency_us"] is not None]
        if lats:
            assert p["latency_us"] == pytest.approx(statistics.median(lats))
        bws = [f["bandwidth_mbps"] for f in p["launch_fits"] if f["bandwidth_mbps"] is not None]
        if bws:
            assert p["bandwidth_mbps"] == pytest.approx(statistics.median(bws))
        for f in p["launch_fits"]:
            if f["latency_source"] == "pingpong":
                # that launch's best 0-byte block: one of the pooled ones
                assert f["latency_us"] in p["latency_samples_us"]
        assert isinstance(p["noisy"], bool)
    assert doc["summary"]["allpairs"]["noisy_pairs"] == sum(p["noisy"] for p in pairs)
    assert "separate launches" in run.stdout


# --------------------------------------------------------------------------
# Launches of the repeated tests in interleaved rounds


def test_launch_order_is_rounds_of_one_launch_of_each_test():
    assert net.launch_order(["barrier", "allpairs", "pingpong", "allreduce"], 3) == \
        ["pingpong", "allpairs", "barrier"] * 3
    assert net.launch_order(["pingpong", "barrier"], 2) == ["pingpong", "barrier"] * 2
    assert net.launch_order(["allpairs"], 3) == ["allpairs"] * 3
    assert net.launch_order(["allreduce"], 3) == []


def _figures_under_a_passing_state(order, start, length, normal, fast):
    """Each test's figure (median over its launches) when a state of the
    machine that gives ``fast`` instead of ``normal`` covers launches
    start .. start + length - 1 of ``order``."""
    per_test: dict[str, list[float]] = {}
    for i, test in enumerate(order):
        hit = start <= i < start + length
        per_test.setdefault(test, []).append(fast[test] if hit else normal[test])
    return {t: stats.launch_agreement(v) for t, v in per_test.items()}


def test_interleaved_launches_keep_a_state_shorter_than_a_round_out_of_every_figure():
    # a state of the machine (0-byte latency 0.19 against 0.28 us, MPI_Barrier
    # 0.22 against 0.39 us) that lasts as long as three launches, wherever it
    # starts: interleaved, it reaches at most one launch of each test, which the
    # median over 3 launches leaves out, and the disagreement is flagged
    normal = {"pingpong": 0.26, "allpairs": 0.28, "barrier": 0.39}
    fast = {"pingpong": 0.17, "allpairs": 0.19, "barrier": 0.22}
    tests = ["pingpong", "allpairs", "barrier"]
    order = net.launch_order(tests, 3)
    for start in range(len(order) - 2):
        got = _figures_under_a_passing_state(order, start, 3, normal, fast)
        for t in tests:
            assert got[t]["median"] == pytest.approx(normal[t]), (start, t)
        assert any(a["noisy"] for a in got.values())
    # one test's launches back to back: the same state takes two or three of
    # the all-pairs launches and moves the figure (what the survey saw)
    back_to_back = [t for t in tests for _ in range(3)]
    got = _figures_under_a_passing_state(back_to_back, 3, 3, normal, fast)
    assert got["allpairs"]["median"] == pytest.approx(fast["allpairs"])
    assert got["allpairs"]["noisy"] is False  # its launches agree: nothing flags it


@pytest.mark.parametrize("ranks", [2, 3])
def test_repeated_tests_run_in_interleaved_rounds(tmp_path, ranks):
    doc, run = _doc(tmp_path, "-n", str(ranks), "--tests", "pingpong,allpairs,barrier",
                    "--launches", "2", "--sizes", "0,1K", "--center", "64K", "--reps", "2",
                    "--barrier-threads", "1", "--quick")
    assert doc["params"]["launch_order"] == ["pingpong", "allpairs", "barrier"] * 2
    assert doc["params"]["pingpong"]["launches"] == 2
    assert doc["params"]["allpairs"]["launches"] == 2
    assert doc["params"]["barrier"]["launches"] == 2
    rows = doc["samples"]["pingpong"]["rows"]
    assert [r["bytes"] for r in rows] == [0, 1024]
    assert all(len(r["rtt_launch_medians_us"]) == 2 for r in rows)
    assert all(len(p["launch_fits"]) == 2 for p in doc["samples"]["allpairs"]["pairs"])
    assert all(r["launches"] == 2 for r in doc["samples"]["barrier"]["mpi"])
    # every pair's 0-byte latency blocks are positive one-way times; a
    # launch's latency taken from them is its best block, and the pair's the
    # median over the launches
    for p in doc["samples"]["allpairs"]["pairs"]:
        assert p["latency_samples_us"] and min(p["latency_samples_us"]) > 0
        lats = [f["latency_us"] for f in p["launch_fits"] if f["latency_source"] == "pingpong"]
        for v in lats:
            assert v in p["latency_samples_us"]
        if p["latency_source"] == "pingpong" and len(lats) == 2:
            assert p["latency_us"] == pytest.approx(statistics.median(lats))
