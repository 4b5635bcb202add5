"""tiers.stats.summarize_blocks: one figure measured in independent blocks
(separate launches), fed synthetic samples whose blocks agree, disagree, or
carry one disturbed block; and tiers.probe.net.merge_pingpong, which
summarises the launches of the ping-pong test with it."""

from __future__ import annotations

import math
import random

import pytest

from tiers import stats


def _block(center: float, n: int, rel: float, rng: random.Random) -> list[float]:
    """n samples uniformly within +-rel of center."""
    return [center * (1 + rel * (2 * rng.random() - 1)) for _ in range(n)]


def test_one_block_is_the_plain_summary():
    rng = random.Random(3)
    xs = _block(2.0, 30, 0.02, rng) + [200.0]  # one far outlier
    s = stats.summarize_blocks([xs])
    plain = stats.summarize(xs)
    for key in ("n", "kept", "outliers", "min", "median", "ci_low", "ci_high",
                "rel_halfwidth", "noisy"):
        assert s[key] == plain[key]
    assert s["blocks"] == 1 and s["block_medians"] == [plain["median"]]
    assert s["block_spread"] is None


def test_steady_blocks_that_disagree_are_noisy():
    # each block is steady within +-1 % (its own interval is narrow), but
    # the second block sits 20 % above the others: one launch of three moved
    rng = random.Random(5)
    blocks = [_block(1.00, 20, 0.01, rng), _block(1.20, 20, 0.01, rng),
              _block(1.01, 20, 0.01, rng)]
    assert not any(stats.summarize(b)["noisy"] for b in blocks)
    meds = [stats.summarize(b)["median"] for b in blocks]
    s = stats.summarize_blocks(blocks)
    assert s["blocks"] == 3 and s["block_medians"] == meds
    assert s["median"] == pytest.approx(sorted(meds)[1])  # median of the block medians
    assert s["min"] == min(min(b) for b in blocks)  # best of every sample
    assert s["n"] == 60
    # the interval covers every block's median, so it is wider than +-5 %
    assert s["ci_low"] <= min(meds) and s["ci_high"] >= max(meds)
    assert s["rel_halfwidth"] == pytest.approx(
        max(s["median"] - s["ci_low"], s["ci_high"] - s["median"]) / s["median"])
    assert s["noisy"] is True and "3 independent blocks disagree" in s["why"]
    assert s["block_spread"] == pytest.approx((max(meds) - min(meds)) / s["median"])
    # the pooled samples alone would have hidden it: their interval is narrow
    assert not stats.summarize([x for b in blocks for x in b])["noisy"]


def test_blocks_that_agree_are_not_noisy():
    rng = random.Random(7)
    blocks = [_block(c, 15, 0.01, rng) for c in (1.00, 1.02, 0.99)]
    s = stats.summarize_blocks(blocks)
    assert s["noisy"] is False and s["why"] is None
    assert s["rel_halfwidth"] <= stats.NOISY_REL
    meds = sorted(stats.summarize(b)["median"] for b in blocks)
    assert s["median"] == pytest.approx(meds[1])
    assert s["ci_low"] <= meds[0] and s["ci_high"] >= meds[2]


def test_many_blocks_interval_of_the_block_medians_drops_one_disturbed_block():
    # 10 blocks: with 6 or more the interval is the 95 % interval of the
    # median of the block medians (ranks 2 and 9 of 10), so one disturbed
    # block (3x slower) moves neither the figure nor the interval
    rng = random.Random(11)
    centers = [1.00 + 0.01 * i for i in range(9)] + [3.0]
    blocks = [_block(c, 9, 0.0005, rng) for c in centers]
    meds = sorted(stats.summarize(b)["median"] for b in blocks)
    assert stats.median_ci_ranks(10) == (2, 9)
    s = stats.summarize_blocks(blocks)
    assert s["median"] == pytest.approx((meds[4] + meds[5]) / 2)
    assert s["median"] == pytest.approx(1.045, rel=1e-3)
    assert s["ci_low"] == pytest.approx(meds[1]) and s["ci_high"] == pytest.approx(meds[8])
    assert s["noisy"] is False
    # the same with the disturbed block 30 % off in three blocks: noisy
    centers = [1.0] * 5 + [1.3] * 5
    s = stats.summarize_blocks([_block(c, 9, 0.0005, rng) for c in centers])
    assert s["noisy"] is True and "95 % interval" in s["why"]


def test_too_few_samples_and_empty_blocks():
    s = stats.summarize_blocks([[1.0], [1.0]])
    assert s["blocks"] == 2 and s["median"] == 1.0
    assert s["ci_low"] is None and s["noisy"] is True and "needs 6" in s["why"]
    # non-finite samples and empty blocks are no blocks
    rng = random.Random(1)
    xs = _block(5.0, 12, 0.01, rng)
    s = stats.summarize_blocks([[math.nan, None], [], xs])
    assert s["blocks"] == 1 and s["median"] == stats.summarize(xs)["median"]
    s = stats.summarize_blocks([])
    assert s["blocks"] == 0 and s["median"] is None and s["noisy"] is True


def _launch(rtt_center: float, window_us: float, rng: random.Random) -> dict:
    """A synthetic tiers-probe-net output of one launch: sizes 0 and 1 MiB."""
    rows = []
    for b in (0, 1 << 20):
        rtt = _block(rtt_center * (1 + b / 4e5), 8, 0.005, rng)
        row = {"bytes": b, "iters": 50, "skip": 20, "bw_window": 64,
               "rtt_samples_us": rtt, "rtt_stopped": "converged",
               "bw_window_samples_us": _block(window_us, 8, 0.005, rng) if b else []}
        rows.append(row)
    return {"pingpong": {"pair": [0, 1], "rows": rows, "seconds": 1.0},
            "params": {"pingpong": {}}}


def test_merge_pingpong_takes_the_median_of_the_launches():
    from tiers.probe import net

    rng = random.Random(2)
    docs = [_launch(0.50, 4000.0, rng), _launch(0.51, 4100.0, rng), _launch(0.70, 6000.0, rng)]
    pp = net.merge_pingpong(docs)
    assert pp["launches"] == 3 and pp["seconds"] == 3.0
    small, big = pp["rows"]
    meds = [stats.summarize(d["pingpong"]["rows"][0]["rtt_samples_us"])["median"] for d in docs]
    assert small["rtt_median"] == pytest.approx(sorted(meds)[1])
    assert small["rtt_median_us"] == small["rtt_median"]
    assert small["latency_median_us"] == pytest.approx(small["rtt_median"] / 2)
    allx = [x for d in docs for x in d["pingpong"]["rows"][0]["rtt_samples_us"]]
    assert small["rtt_n"] == 24 and small["rtt_min"] == min(allx)
    # the best figure is the median of the launches' best blocks, not the
    # best of all (which one launch alone could set)
    bests = [min(d["pingpong"]["rows"][0]["rtt_samples_us"]) for d in docs]
    assert small["rtt_launch_best_us"] == bests
    assert small["rtt_us"] == pytest.approx(sorted(bests)[1])
    assert small["latency_us"] == pytest.approx(sorted(bests)[1] / 2)
    assert small["rtt_launch_medians_us"] == meds
    # the third launch is 40 % off: the round trip is noisy, and says why
    assert small["rtt_noisy"] is True and "disagree" in small["rtt_why"]
    row = net._pingpong_row(small)
    assert row["noisy"] and "3 independent blocks disagree" in row["why"]
    assert row["launches"] == 3
    # streaming: bytes x window / time of the window, best and median
    win_bests = sorted(min(d["pingpong"]["rows"][1]["bw_window_samples_us"]) for d in docs)
    assert big["bw_mbps"] == pytest.approx((1 << 20) * 64 / win_bests[1])
    wmeds = sorted(stats.summarize(d["pingpong"]["rows"][1]["bw_window_samples_us"])["median"]
                   for d in docs)
    assert big["bw_median_mbps"] == pytest.approx((1 << 20) * 64 / wmeds[1])
    assert big["bw_noisy"] is True
    # one launch: returned as it was
    assert net.merge_pingpong(docs[:1]) is docs[0]["pingpong"]


def test_merge_pingpong_launches_that_agree_are_not_noisy():
    from tiers.probe import net

    rng = random.Random(4)
    docs = [_launch(0.50, 4000.0, rng) for _ in range(3)]
    small, big = net.merge_pingpong(docs)["rows"]
    assert small["rtt_noisy"] is False and small["rtt_why"] is None
    assert big["bw_noisy"] is False and small["rtt_stopped"] == "converged"


def test_bench_cells_run_in_interleaved_rounds():
    """tiers bench with repeat_time_s and several cells (the survey's
    jacobi3d cells): one run of every cell per round, each cell stopping by
    the statistics layer's rule on its own runs."""
    from tiers import bench

    order = []

    def cell(name, times):
        it = iter(times)

        def run():
            order.append(name)
            t = next(it)
            return {"doc": {"time_s": t}, "wall_s": t}
        return run

    steady = [0.100, 0.101, 0.099, 0.100, 0.102, 0.100]
    scattered = [0.1, 0.2, 0.3, 0.15, 0.25, 0.12, 0.28, 0.18]
    (a_out, a), (b_out, b) = bench._run_cells_interleaved(
        [cell("a", steady), cell("b", scattered)], 60.0, 8)
    # rounds: a b a b ... until a converges at its 6th run; b goes on to the cap
    assert order == ["a", "b"] * 6 + ["b", "b"]
    assert a["stopped"] == "converged" and a["n"] == 6 and not a["noisy"]
    assert a["median"] == pytest.approx(0.1) and a["interleaved"] is True
    assert a["time_limit_s"] == 120.0  # the time of both cells
    assert b["stopped"] == "max samples" and b["n"] == 8 and b["noisy"]
    assert b["times_s"] == scattered
    assert a_out["doc"]["time_s"] == 0.100
    assert b_out["doc"]["time_s"] == min(scattered, key=lambda t: abs(t - b["median"]))


def test_block_medians_are_worded_in_the_figures_unit():
    rng = random.Random(9)
    blocks = [_block(10.0, 8, 0.001, rng), _block(20.0, 8, 0.001, rng),
              _block(10.1, 8, 0.001, rng)]
    s = stats.summarize_blocks(blocks, lambda v: f"{1000 / v:,.0f} MB/s")
    assert s["noisy"] and "from 100 MB/s to 50 MB/s" in s["why"]
