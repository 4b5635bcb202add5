"""The robust all-pairs fit (tiers.probe.netfit.robust_fit) on synthetic
per-pair samples: a naive least-squares fit through every repetition can
give a negative latency or no bandwidth; the robust one must never report
an impossible value, must take the latency from the pair's small-message
ping-pong when the intercept is not meaningful, and must not be moved by
outliers among the repetitions."""

from __future__ import annotations

import random

import pytest

from tiers.errors import TiersError
from tiers.probe import net, netfit

SIZES = [round(1.5e6 * f) for f in (0.667, 0.8, 1.0, 1.25, 1.5)]
PINGPONG = [0.52, 0.50, 0.55, 0.51, 0.53, 0.50, 0.54, 0.52, 0.51, 0.60]  # us, one way


def line(lat, bw, s):
    return lat + s / bw


def test_exact_line_gives_its_latency_and_bandwidth():
    times = [[line(20.0, 5000.0, s)] * 3 for s in SIZES]
    fit = netfit.robust_fit(SIZES, times, PINGPONG)
    assert fit["latency_us"] == pytest.approx(20.0)
    assert fit["bandwidth_mbps"] == pytest.approx(5000.0)
    assert fit["latency_source"] == "fit" and fit["bandwidth_source"] == "fit"
    assert fit["reliable"] and fit["line_holds"] and fit["why"] is None


def test_negative_naive_intercept_takes_the_pingpong_latency():
    # Repetitions disturbed more at large sizes than at small ones: the
    # naive fit through every repetition is too steep and crosses zero
    # above size 0.
    rng = random.Random(7)
    times = []
    for i, s in enumerate(SIZES):
        base = line(0.5, 5000.0, s)
        slow = 300.0 * i / (len(SIZES) - 1)
        times.append([base * (1 + rng.uniform(0, 0.002)) + slow * (k > 0) for k in range(3)])
    naive = netfit.fit_line(SIZES, times)
    assert naive["latency_us"] < 0  # the input is what the issue describes
    fit = netfit.robust_fit(SIZES, times, PINGPONG)
    assert fit["latency_us"] is not None and fit["latency_us"] >= 0
    # the best times lie on the true line: the bandwidth is the true one
    assert fit["bandwidth_mbps"] == pytest.approx(5000.0, rel=0.01)
    # the intercept of the best times (0.5 us) is lost in their spread: the
    # latency is the best block of the 0-byte ping-pong
    assert fit["latency_source"] == "pingpong"
    assert fit["latency_us"] == min(PINGPONG)
    assert "0-byte ping-pong" in fit["why"]


def test_negative_intercept_without_pingpong_is_unreliable_not_negative():
    times = [[50.0], [100.0], [150.0], [200.0], [250.0]]
    sizes = [1_000_000, 1_500_000, 2_000_000, 2_500_000, 3_000_000]  # intercept -50 us
    assert netfit.fit_line(sizes, times)["latency_us"] < 0
    fit = netfit.robust_fit(sizes, times, None)
    assert fit["latency_us"] is None and not fit["reliable"]
    assert "intercept is negative" in fit["why"]
    assert fit["bandwidth_mbps"] == pytest.approx(10_000.0)
    with_pp = netfit.robust_fit(sizes, times, PINGPONG)
    assert with_pp["latency_us"] == min(PINGPONG) and with_pp["reliable"]


def test_outliers_in_repetitions_do_not_move_the_fit():
    rng = random.Random(3)
    clean = [[line(30.0, 8000.0, s) * (1 + rng.uniform(0, 1e-4)) for _ in range(7)]
             for s in SIZES]
    dirty = [list(row) for row in clean]
    for i, row in enumerate(dirty):
        row[i % 7] *= 100  # one 100x repetition per size
        row[(i + 3) % 7] *= 5
    a = netfit.robust_fit(SIZES, clean, PINGPONG)
    b = netfit.robust_fit(SIZES, dirty, PINGPONG)
    # the repetitions spread by 1e-4 at most: removing one changes the best by no more
    assert b["latency_us"] == pytest.approx(a["latency_us"], rel=1e-3)
    assert b["bandwidth_mbps"] == pytest.approx(a["bandwidth_mbps"], rel=1e-3)
    assert b["bandwidth_mbps"] == pytest.approx(8000.0, rel=1e-3)
    assert b["latency_us"] == pytest.approx(30.0, rel=1e-2) and b["latency_source"] == "fit"
    # the naive fit is moved by the same outliers
    assert netfit.fit_line(SIZES, dirty)["bandwidth_mbps"] != pytest.approx(8000.0, rel=0.1)


def test_times_that_do_not_grow_give_the_largest_size_bandwidth():
    times = [[300.0], [290.0], [280.0], [285.0], [270.0]]  # slope < 0
    fit = netfit.robust_fit(SIZES, times, PINGPONG)
    assert not fit["line_holds"]
    assert fit["bandwidth_source"] == "largest size"
    assert fit["bandwidth_mbps"] == pytest.approx(SIZES[-1] / 270.0)
    assert fit["latency_source"] == "pingpong" and fit["latency_us"] > 0
    assert "do not grow" in fit["why"]


def test_scattered_best_times_fail_the_residual_check():
    times = [[line(10.0, 5000.0, s) * f] for s, f in zip(SIZES, (1.0, 1.3, 1.0, 0.8, 1.0))]
    fit = netfit.robust_fit(SIZES, times, PINGPONG)
    assert fit["max_residual"] > netfit.MAX_RESIDUAL and not fit["line_holds"]
    assert fit["bandwidth_source"] == "largest size"
    assert fit["latency_source"] == "pingpong"


def test_degenerate_input_is_refused():
    with pytest.raises(TiersError, match="two different sizes"):
        netfit.robust_fit([1000, 1000], [[1.0], [2.0]])
    with pytest.raises(TiersError, match="must be positive"):
        netfit.robust_fit([0, 1000], [[1.0], [2.0]])


def _raw(pairs, n=3):
    """A native all-pairs output with the given (a, b, times, latency samples)."""
    return {"params": {"ranks": n},
            "placement": [{"rank": r, "host": "h", "pus": str(r), "node": 0} for r in range(n)],
            "nodes": [{"node": 0, "host": "h", "ranks": list(range(n))}],
            "allpairs": {"sizes": SIZES, "reps": 3,
                         "phases": [{"phase": "intra", "units": n, "m": 2, "steps": 3,
                                     "cores_per_node": 1, "rounds": 3, "seconds": 0.1}],
                         "schedule": [],
                         "pairs": [{"a": a, "b": b, "phase": "intra", "step": 1, "round": 1,
                                    "times_us": t, "latency_samples_us": lat}
                                   for a, b, t, lat in pairs]}}


def test_matrices_and_layers_hold_no_impossible_value():
    bad = [[50.0 + 100.0 * i] for i in range(len(SIZES))]  # negative naive intercept
    good = [[line(5.0, 4000.0, s)] for s in SIZES]
    raw = _raw([(0, 1, bad, None), (0, 2, good, PINGPONG), (1, 2, bad, PINGPONG)])
    layers = [["machine"] * 3 for _ in range(3)]
    samples, summary = net.analyse(raw, layers, None)
    m = summary["allpairs"]["matrices"]
    for i in range(3):
        for j in range(3):
            if i != j:
                lat, bw = m["latency_us"][i][j], m["bandwidth_mbps"][i][j]
                assert lat is None or lat >= 0
                assert bw is None or bw > 0
    assert m["latency_us"][0][1] is None  # no ping-pong samples: unreliable
    assert m["latency_us"][1][2] == min(PINGPONG)
    pairs = {(p["a"], p["b"]): p for p in samples["allpairs"]["pairs"]}
    assert not pairs[(0, 1)]["reliable"] and pairs[(0, 1)]["why"]
    assert summary["allpairs"]["unreliable_pairs"] == 1
    row = summary["allpairs"]["layers"][0]
    assert row["latency_mean_us"] >= 0 and row["bandwidth_mean_mbps"] > 0
    warnings = net.noisy_warnings(summary)
    assert any("1 of 3 all-pairs fits are unreliable" in w for w in warnings)
