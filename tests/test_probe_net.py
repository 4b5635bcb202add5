"""tiers probe net: ping-pong, the parallel all-pairs schedule, the fit and the
per-layer classification.

The multi-rank tests run the real MPI program under real mpirun (through
the command line and the launching module) at 2, 3, 4 and 6 ranks; with
more ranks than the machine's cores the launching module oversubscribes and
the ranks yield when idle.  Sizes and repetitions are small: these tests
check what was measured and how, never how fast (timings belong in bench/).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import statistics

import pytest

from conftest import assert_one_line_error, run_tiers


# Small all-pairs runs: 5 sizes around 64 KiB, 2 repetitions each.
AP = ["--tests", "allpairs", "--center", "64K", "--reps", "2"]


def _doc(tmp_path, *args, name="net.json"):
    path = tmp_path / name
    run = run_tiers("probe", "net", *args, "--json", str(path))
    assert run.returncode == 0, run.stderr
    return json.loads(path.read_text()), run


def _xor_pairs(n, k):
    return sorted((i, i ^ k) for i in range(n) if i < (i ^ k) < n)


# --------------------------------------------------------------------------
# Ping-pong


def test_pingpong_rows_at_two_ranks(tmp_path):
    doc, run = _doc(tmp_path, "-n", "2", "--tests", "pingpong", "--sizes", "0,8,1K,64K",
                    "--iters", "50")
    assert doc["schema"] == "tiers.probe.net/1"
    rows = doc["summary"]["pingpong"]["rows"]
    assert [r["bytes"] for r in rows] == [0, 8, 1024, 65536]
    for r in rows:
        assert r["rtt_us"] > 0
        assert r["latency_us"] == pytest.approx(r["rtt_us"] / 2)
        if r["bytes"] == 0:
            assert r["bw_mbps"] is None and r["pingpong_mbps"] is None
        else:
            # bytes per one-way microsecond is MB/s
            assert r["pingpong_mbps"] == pytest.approx(r["bytes"] / r["latency_us"])
            assert r["bw_mbps"] > 0
    raw = doc["samples"]["pingpong"]["rows"]
    assert all(r["iters"] == 50 for r in raw)
    assert all(r["bw_window"] == 64 for r in raw)
    placement = doc["samples"]["placement"]
    assert [p["rank"] for p in placement] == [0, 1]
    assert all(p["host"] and p["pus"] for p in placement)
    assert "allpairs" not in doc["summary"]
    # the barrier table is not asked for; the ping-pong table is printed
    assert "barrier" not in doc["summary"]
    assert "Round-trip time between rank 0" in run.stdout
    assert (tmp_path / "net.png").is_file()


# --------------------------------------------------------------------------
# All pairs


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_all_pairs_schedule(tmp_path, ranks):
    doc, run = _doc(tmp_path, "-n", str(ranks), *AP)
    ap = doc["samples"]["allpairs"]
    m = (ranks - 1).bit_length()
    steps = 2**m - 1
    intra = next(p for p in ap["phases"] if p["phase"] == "intra")
    assert intra["steps"] == steps and intra["rounds"] == steps
    assert doc["summary"]["allpairs"]["steps"]["intra"] == steps
    # the schedule that ran: step k paired i with i XOR k, partners >= n sat out
    sched = [s for s in ap["schedule"] if s["phase"] == "intra"]
    ran = {s["step"]: sorted(tuple(p) for p in s["pairs"]) for s in sched}
    for k in range(1, steps + 1):
        assert ran.get(k, []) == _xor_pairs(ranks, k)
    # every pair exactly once, with every size and repetition
    seen = [(p["a"], p["b"]) for p in ap["pairs"]]
    assert sorted(seen) == [(i, j) for i in range(ranks) for j in range(i + 1, ranks)]
    # in 3 separate launches (the default), each pair's times pooled over them
    launches = doc["params"]["allpairs"]["launches"]
    assert launches == doc["summary"]["allpairs"]["launches"] == 3
    for p in ap["pairs"]:
        assert len(p["times_us"]) == 5 and all(len(t) == 2 * launches for t in p["times_us"])
        assert len(p["launch_fits"]) == launches
        assert all(t > 0 for ts in p["times_us"] for t in ts)
        # the fit goes through the best time of each of the 5 sizes
        assert len(p["residuals_us"]) == 5 and p["points"] == 5
        assert p["best_us"] == [min(ts) for ts in p["times_us"]]
        # repeated by the statistics layer's rule: at most --reps times per
        # size and launch (2 here, too few to converge: exactly 2), at most
        # latency_blocks latency blocks per launch
        assert launches <= len(p["latency_samples_us"]) \
            <= launches * doc["params"]["allpairs"]["latency_blocks"]
    assert ap["sizes"] == [round(65536 * f) for f in (0.667, 0.8, 1.0, 1.25, 1.5)]
    # symmetric matrices with the right shape, nothing on the diagonal
    mat = doc["summary"]["allpairs"]["matrices"]
    assert mat["ranks"] == ranks
    for key in ("latency_us", "bandwidth_mbps"):
        a = mat[key]
        assert len(a) == ranks and all(len(row) == ranks for row in a)
        for i in range(ranks):
            assert a[i][i] is None
            for j in range(ranks):
                assert a[i][j] == a[j][i]
    for p in ap["pairs"]:
        assert mat["latency_us"][p["a"]][p["b"]] == p["latency_us"]
    # every pair classified; placement recorded for every rank
    assert all("layer" in p for p in ap["pairs"])
    assert sum(r["pairs"] for r in doc["summary"]["allpairs"]["layers"]) == len(seen)
    assert len(doc["samples"]["placement"]) == ranks
    assert (tmp_path / "net.png").is_file()
    assert "XOR schedule" in run.stdout


_NEGATIVE = re.compile(r"(?<![\w.,+])-\d")  # a minus sign before a digit, not "+-5 %"


@pytest.mark.parametrize("ranks", [2, 3])
def test_only_physically_possible_values(tmp_path, ranks):
    # A real run on a busy machine: whatever the noise, no latency below 0,
    # no bandwidth at or below 0, in the JSON or in the printed tables; a
    # figure that cannot be given is None with the reason beside it.
    doc, run = _doc(tmp_path, "-n", str(ranks), "--tests", "pingpong,allpairs",
                    "--sizes", "0,8,1K,64K,1M", "--center", "64K", "--reps", "3", "--quick")
    for r in doc["summary"]["pingpong"]["rows"]:
        assert r["rtt_us"] > 0 and r["latency_us"] > 0
        assert r["rtt_median_us"] >= r["rtt_us"]  # the best block is never above the median
        assert isinstance(r["rtt_noisy"], bool)
        # the row flag covers every figure of the row and says why
        assert r["noisy"] == bool(r["why"])
        assert r["noisy"] >= bool(r["rtt_noisy"] or r["bw_noisy"])
        if r["bytes"] > 0:
            assert r["bw_mbps"] > 0 and r["bw_median_mbps"] > 0
            assert r["bw_mbps"] >= r["bw_median_mbps"]
    for raw in doc["samples"]["pingpong"]["rows"]:
        # every block was kept as a sample, and the best is the lowest one
        assert raw["rtt_n"] == len(raw["rtt_samples_us"]) >= 1
        assert raw["rtt_us"] == pytest.approx(_best(raw))
        assert raw["rtt_stopped"] in ("converged", "time limit", "max samples")
    for p in doc["samples"]["allpairs"]["pairs"]:
        assert p["latency_us"] is None or p["latency_us"] >= 0
        assert p["bandwidth_mbps"] is None or p["bandwidth_mbps"] > 0
        if not p["reliable"]:
            assert p["why"]
    mat = doc["summary"]["allpairs"]["matrices"]
    for i in range(ranks):
        for j in range(ranks):
            if i != j:
                assert mat["latency_us"][i][j] is None or mat["latency_us"][i][j] >= 0
                assert mat["bandwidth_mbps"][i][j] is None or mat["bandwidth_mbps"][i][j] > 0
    for row in doc["summary"]["allpairs"]["layers"]:
        assert row["latency_mean_us"] is None or row["latency_mean_us"] >= 0
        assert row["bandwidth_mean_mbps"] is None or row["bandwidth_mean_mbps"] > 0
    assert not _NEGATIVE.search(run.stdout), run.stdout


def _best(raw: dict, what: str = "rtt") -> float:
    """The best block time a ping-pong row must report (``rtt``: round
    trip, ``bw_window``: streaming window): its lowest block in one
    launch, the median of the launches' lowest blocks over several."""
    bests = raw.get(f"{what}_launch_best_us") or [min(raw[f"{what}_samples_us"])]
    return statistics.median(bests)


def _synthetic_row(nbytes, rtt_blocks, bw_blocks):
    """A tiers-probe-net ping-pong row built from given block samples with the
    statistics layer, as the tool writes it (best = the fastest block)."""
    from tiers import stats

    rt, bw = stats.summarize(rtt_blocks), stats.summarize(bw_blocks) if bw_blocks else None
    row = {"bytes": nbytes, "rtt_us": rt["min"], "rtt_median_us": rt["median"],
           "latency_us": rt["min"] / 2, "latency_median_us": rt["median"] / 2,
           "pingpong_mbps": nbytes / (rt["min"] / 2) if nbytes else None,
           "pingpong_median_mbps": nbytes / (rt["median"] / 2) if nbytes else None,
           "rtt_noisy": rt["noisy"], "rtt_ci_low": rt["ci_low"], "rtt_ci_high": rt["ci_high"],
           "rtt_n": rt["n"]}
    if bw:
        row.update(bw_mbps=max(bw_blocks), bw_median_mbps=bw["median"], bw_noisy=bw["noisy"],
                   bw_window_n=bw["n"])
    return row


def test_a_row_with_best_far_below_median_is_flagged_in_every_column():
    """4 MiB under a busy neighbour: one quiet block of 755 us among blocks
    of 2,700 us.  The CI of the median alone is narrow (the disturbed blocks
    agree with each other), but best and median are far apart: the row is
    noisy, and the table marks every one of its figures."""
    import io

    from rich.console import Console

    from tiers.probe import net

    rtt = [755.55] + [2717.93 + 5 * (i % 3) for i in range(11)]
    stream = [5630.0 + 3 * i for i in range(10)]
    busy = net._pingpong_row(_synthetic_row(4 << 20, rtt, stream))
    assert busy["rtt_noisy"] is False  # the layer alone would not flag it
    assert busy["noisy"] is True and "below the median" in busy["why"]
    quiet = net._pingpong_row(_synthetic_row(1024, [2.0 + 0.01 * (i % 3) for i in range(12)],
                                             [1500.0 + i for i in range(12)]))
    assert quiet["noisy"] is False and quiet["why"] is None
    # streaming far below the ping-pong bandwidth of the same size: flagged
    slow = net._pingpong_row(_synthetic_row(1 << 20, [119.6 + 0.1 * (i % 2) for i in range(12)],
                                            [5630.0 + i for i in range(12)]))
    assert slow["pingpong_mbps"] > 17000 and slow["bw_mbps"] < 6000
    assert slow["noisy"] is True and "below ping-pong" in slow["why"]
    assert not slow["rtt_noisy"] and not slow["bw_noisy"]
    doc = {"params": {"ranks": 2, "mpi_library": "Open MPI", "launcher": {},
                      "pingpong": {"iters": 200, "iters_large": 20, "large_above_bytes": 8192,
                                   "skip": 10, "skip_large": 2, "window": 64,
                                   "figure_time_s": 0.5}},
           "samples": {"placement": [{"rank": 0, "host": "h", "pus": [0]},
                                     {"rank": 1, "host": "h", "pus": [1]}]},
           "summary": {"pingpong": {"pair": [0, 1], "rows": [quiet, slow, busy]}}}
    buf = io.StringIO()
    net.render(doc, Console(file=buf, width=200))
    lines = {ln.split("│")[1].strip(): ln for ln in buf.getvalue().splitlines()
             if ln.count("│") > 6}
    for size in ("1,048,576", "4,194,304"):
        cells = [c.strip() for c in lines[size].split("│")[2:-1]]
        assert len(cells) == 6 and all(c.endswith("~") for c in cells), cells
    assert not any(c.strip().endswith("~") for c in lines["1,024"].split("│")[2:-1])
    assert "~ 4 MiB: best round trip 72 % below the median" in buf.getvalue()
    assert any("3 ping-pong" in w or "2 ping-pong" in w
               for w in net.noisy_warnings({"pingpong": {"rows": [quiet, slow, busy]}}))


def test_pingpong_between_ranks_other_than_rank_0(tmp_path):
    # rank 2 measures and decides when to stop, rank 1 answers, rank 0 only
    # reports: every block's sample must reach rank 0's document
    doc, run = _doc(tmp_path, "-n", "3", "--tests", "pingpong", "--pair", "2,1",
                    "--sizes", "0,64K", "--quick")
    assert doc["samples"]["pingpong"]["pair"] == [2, 1]
    for raw in doc["samples"]["pingpong"]["rows"]:
        assert raw["rtt_n"] == len(raw["rtt_samples_us"]) >= 1
        assert all(x > 0 for x in raw["rtt_samples_us"])
        assert raw["rtt_us"] == pytest.approx(_best(raw))
        if raw["bytes"]:
            assert raw["bw_window_n"] == len(raw["bw_window_samples_us"]) >= 1
            window = raw["bytes"] * raw["bw_window"]
            assert raw["bw_mbps"] == pytest.approx(window / _best(raw, "bw_window"))
    assert "rank 2" in run.stdout


@pytest.mark.parametrize("cores", [1, 2])
def test_cores_per_node_rounds(tmp_path, cores):
    # 6 ranks as 3 nodes of 2 (--node-size): between nodes 2^2 - 1 = 3 steps,
    # run by `cores` cores per node in ceil(3 / cores) rounds
    doc, _ = _doc(tmp_path, "-n", "6", *AP, "--node-size", "2",
                  "--cores-per-node", str(cores))
    ap = doc["samples"]["allpairs"]
    inter = next(p for p in ap["phases"] if p["phase"] == "inter")
    assert inter["units"] == 3 and inter["steps"] == 3
    assert inter["rounds"] == math.ceil(3 / cores)
    node_of = {p["rank"]: p["node"] for p in doc["samples"]["placement"]}
    local_of = {p["rank"]: p["local"] for p in doc["samples"]["placement"]}
    inter_pairs = [p for p in ap["pairs"] if p["phase"] == "inter"]
    # every node pair exactly once, by cores of the same local index
    assert sorted(tuple(sorted((node_of[p["a"]], node_of[p["b"]]))) for p in inter_pairs) == \
        [(0, 1), (0, 2), (1, 2)]
    for p in inter_pairs:
        assert local_of[p["a"]] == local_of[p["b"]] == (p["step"] - 1) % cores
        assert node_of[p["a"]] ^ node_of[p["b"]] == p["step"]
        assert p["round"] == (p["step"] - 1) // cores + 1
    # inside each node: 1 step, the node's two ranks
    intra_pairs = sorted((p["a"], p["b"]) for p in ap["pairs"] if p["phase"] == "intra")
    assert intra_pairs == [(0, 1), (2, 3), (4, 5)]
    # the rank matrix is complete: pairs across nodes take their node pair's value
    mat = doc["summary"]["allpairs"]["matrices"]
    assert all(mat["latency_us"][i][j] is not None
               for i in range(6) for j in range(6) if i != j)
    nm = doc["summary"]["allpairs"]["node_matrices"]
    assert nm["ranks"] == 3


# --------------------------------------------------------------------------
# Barrier: MPI_Barrier and the hybrid barrier (team spin barrier, MPI_Barrier
# by the master thread, team barrier again), side by side


def _ordered(r):
    # min <= avg <= max, allowing the last bit of the mean's rounding
    eps = 1e-12 * r["max_us"]
    return 0 < r["min_us"] <= r["avg_us"] + eps and r["avg_us"] <= r["max_us"] + eps


@pytest.mark.parametrize("ranks", [2, 4])
def test_barrier_mpi_and_hybrid_rows(tmp_path, ranks):
    from tiers import launch

    doc, run = _doc(tmp_path, "-n", str(ranks), "--tests", "barrier", "--barrier-iters", "20",
                    "--barrier-threads", "2")
    b = doc["samples"]["barrier"]
    counts = list(range(2, ranks + 1))
    # one row per process count, for both barriers
    assert [r["ranks"] for r in b["mpi"]] == counts
    assert [r["ranks"] for r in b["hybrid"]] == counts
    assert all(_ordered(r) for r in b["mpi"])
    for r in b["hybrid"]:
        assert r["threads"] == 2
        assert _ordered(r), r
    pb = doc["params"]["barrier"]
    assert pb["iters"] == 20 and pb["threads"] == 2 and pb["hybrid_warmup"] >= 1
    assert pb["pin"] in ("compact", "none")
    # the summary pairs them by process count
    rows = doc["summary"]["barrier"]["rows"]
    assert [r["ranks"] for r in rows] == counts
    for r, m, h in zip(rows, b["mpi"], b["hybrid"]):
        assert r["hybrid_threads"] == 2
        assert r["hybrid_over_mpi"] == pytest.approx(h["avg_us"] / m["avg_us"])
    # MPI_Barrier as a flat MPI program sees it (MPI_THREAD_SINGLE, a launch
    # of its own), and again in the hybrid barrier's MPI_THREAD_FUNNELED launch
    assert b["thread_level"] == "single"
    assert [r["ranks"] for r in b["mpi_funneled"]] == counts
    assert all(_ordered(r) for r in b["mpi_funneled"])
    for r in b["mpi"]:  # timed in blocks repeated by the statistics layer's rule
        assert r["block_n"] == len(r["blocks_us"]) >= 1
        assert r["stopped"] in ("converged", "max samples", "time limit")
    assert set(doc["params"]["launch_commands"]) == {"barrier", "hybrid barrier"}
    assert "--barrier-kinds mpi" in " ".join(doc["params"]["launch_commands"]["barrier"])
    # room for the threads: 2 cores per rank where the machine has them, else unbound
    command = " ".join(doc["params"]["barrier_launch_command"])
    if ranks * 2 <= launch.local_slots():
        assert "PE=2" in command
    else:
        assert "--bind-to none" in command
    assert "hybrid barrier" in run.stdout
    assert (tmp_path / "net.png").is_file()


@pytest.mark.parametrize("ranks", [2, 3])
def test_allreduce_rows(tmp_path, ranks):
    """MPI_Allreduce of 8 B: one row per process count 2..n, positive and
    finite times ordered min <= avg <= max, the statistics layer's summary
    of the blocks, and the table."""
    doc, run = _doc(tmp_path, "-n", str(ranks), "--tests", "allreduce", "--barrier-iters", "100",
                    "--quick")
    raw = doc["samples"]["allreduce"]
    counts = list(range(2, ranks + 1))
    assert raw["bytes"] == 8
    assert [r["ranks"] for r in raw["rows"]] == counts
    for r in raw["rows"]:
        assert _ordered(r), r
        assert r["block_n"] == len(r["blocks_us"]) >= 1
        assert all(math.isfinite(b) and b > 0 for b in r["blocks_us"])
        assert min(r["blocks_us"]) == pytest.approx(r["block_min"])
        assert r["block_min"] <= r["block_median"] <= max(r["blocks_us"])
        assert r["stopped"] in ("converged", "max samples", "time limit")
    rows = doc["summary"]["allreduce"]["rows"]
    assert [r["ranks"] for r in rows] == counts
    for r, s in zip(rows, raw["rows"]):
        assert r["bytes"] == 8 and r["avg_us"] == s["avg_us"] and r["median_us"] == s["block_median"]
        assert r["noisy"] == s["block_noisy"] and "reliable" not in r
    # only what was asked for ran
    assert doc["params"]["tests"] == ["allreduce"]
    assert "pingpong" not in doc["summary"] and "barrier" not in doc["summary"]
    assert "MPI_Allreduce of 8 B" in run.stdout


def test_barrier_threads_default_follows_the_cpusets(tmp_path):
    # default: 2 threads where every rank has 2 PUs of its own (its cpuset's
    # PUs over the ranks of its host whose cpusets overlap it), else 1
    doc, _ = _doc(tmp_path, "-n", "2", "--tests", "barrier", "--barrier-iters", "20")

    def pu_set(text):
        out = set()
        for part in str(text).split(","):
            lo, _, hi = part.partition("-")
            if lo:
                out.update(range(int(lo), int(hi or lo) + 1))
        return out

    places = doc["samples"]["placement"]

    def own_pus(p):
        mine = pu_set(p["cpuset"])
        sharing = sum(1 for q in places
                      if q["host"] == p["host"] and mine & pu_set(q["cpuset"]))
        return len(pu_set(p["pus"])) // max(sharing, 1)

    want = 2 if all(own_pus(p) >= 2 for p in places) else 1
    assert doc["params"]["barrier"]["threads"] == want
    assert [r["threads"] for r in doc["samples"]["barrier"]["hybrid"]] == [want]


def test_bad_barrier_threads_are_refused():
    run = run_tiers("probe", "net", "-n", "2", "--tests", "barrier", "--barrier-threads", "0")
    assert_one_line_error(run, "--barrier-threads")
    # the native tool checks too, on every rank
    from tiers import launch
    from tiers.probe import net

    with pytest.raises(launch.LaunchError) as err:
        net.measure(2, tests="barrier", barrier_iters=5, time_limit=120,
                    native_extra=["--barrier-threads", "0"])
    assert "\n" not in str(err.value) and "bad --barrier-threads '0'" in str(err.value)
    # more threads than a rank has PUs: the team cannot start
    run = run_tiers("probe", "net", "-n", "2", "--tests", "barrier", "--barrier-iters", "5",
                    "--barrier-threads", "64")
    assert_one_line_error(run, "64 threads")


# --------------------------------------------------------------------------
# The fit, on synthetic timings


def test_fit_recovers_latency_and_bandwidth():
    from tiers.probe.netfit import fit_line

    latency, bandwidth = 3.5, 12000.0  # us, MB/s
    sizes = [round(1.5e6 * f) for f in (0.667, 0.8, 1.0, 1.25, 1.5)]
    exact = [[latency + s / bandwidth] * 7 for s in sizes]
    fit = fit_line(sizes, exact)
    assert fit["latency_us"] == pytest.approx(latency, rel=1e-9)
    assert fit["bandwidth_mbps"] == pytest.approx(bandwidth, rel=1e-9)
    assert fit["r2"] == pytest.approx(1.0)
    assert all(abs(r) < 1e-9 for row in fit["residuals_us"] for r in row)
    assert fit["points"] == 35

    rng = random.Random(7)
    noisy = [[latency + s / bandwidth + rng.gauss(0, 0.5) for _ in range(7)] for s in sizes]
    fit = fit_line(sizes, noisy)
    assert fit["bandwidth_mbps"] == pytest.approx(bandwidth, rel=0.02)
    assert fit["latency_us"] == pytest.approx(latency, abs=2.0)
    # R^2 and residuals as their definitions say
    ys = [t for row in noisy for t in row]
    mean = sum(ys) / len(ys)
    res = [t - (fit["latency_us"] + s * fit["slope_us_per_byte"])
           for s, row in zip(sizes, noisy) for t in row]
    assert [r for row in fit["residuals_us"] for r in row] == pytest.approx(res)
    r2 = 1 - sum(r * r for r in res) / sum((y - mean) ** 2 for y in ys)
    assert fit["r2"] == pytest.approx(r2)
    assert 0.9 < fit["r2"] < 1.0
    assert fit["reliable"]


def test_fit_marks_impossible_or_poor_fits_unreliable():
    from tiers.probe.netfit import MIN_RELIABLE_R2, fit_line

    sizes = [1_000_000, 1_500_000, 2_000_000]
    # Times whose line crosses zero latency below the sizes: intercept < 0.
    negative = fit_line(sizes, [[50.0], [100.0], [150.0]])
    assert negative["latency_us"] < 0 and not negative["reliable"]
    # Pure scatter: R^2 far below the bar.
    scatter = fit_line(sizes, [[100.0, 300.0], [350.0, 50.0], [110.0, 290.0]])
    assert scatter["r2"] < MIN_RELIABLE_R2 and not scatter["reliable"]
    # Falling times: no bandwidth at all.
    assert not fit_line(sizes, [[3.0], [2.0], [1.0]])["reliable"]


def test_fit_refuses_degenerate_input():
    from tiers.errors import TiersError
    from tiers.probe.netfit import fit_line

    with pytest.raises(TiersError, match="two different sizes"):
        fit_line([1000, 1000], [[1.0], [2.0]])
    with pytest.raises(TiersError, match="positive"):
        fit_line([0, 1000], [[1.0], [2.0]])
    # times that fall with size: no positive bandwidth
    assert fit_line([1000, 2000], [[2.0], [1.0]])["bandwidth_mbps"] is None


# --------------------------------------------------------------------------
# Per-layer classification, on synthetic topologies


def test_classification_on_synthetic_topology():
    from tiers import topo
    from tiers.probe.netfit import classify, layer_summary

    t = topo.measure("synthetic:pack:2 core:2 pu:1")
    layers, caches = t["samples"]["layer_matrix"], t["samples"]["cache_level_matrix"]
    hosts = ["a", "a", "a", "a", "b", "b"]
    pus = [0, 1, 2, 3, 0, 1]
    place = [{"host": h, "pus": str(p)} for h, p in zip(hosts, pus)]

    def layer(i, j):
        return classify(place[i], place[j], layers, caches)["layer"]

    assert layer(0, 1) == "package"   # two cores of one package
    assert layer(2, 3) == "package"
    assert layer(0, 2) == "machine"   # different packages, same host
    assert layer(1, 3) == "machine"
    assert layer(0, 4) == "network"   # different hosts, even on "the same" PU
    assert layer(4, 5) == "package"
    # a rank bound to several PUs: the farthest layer it may use, marked unbound
    loose = classify({"host": "a", "pus": "0-3"}, place[1], layers, caches)
    assert loose == {"layer": "machine", "bound": False}
    assert classify(place[0], place[1], layers, caches)["bound"] is True

    t = topo.measure("synthetic:pack:1 l3:1 core:2 pu:2")
    layers, caches = t["samples"]["layer_matrix"], t["samples"]["cache_level_matrix"]
    same = [{"host": "h", "pus": [p]} for p in range(4)]
    assert classify(same[0], same[1], layers, caches)["layer"] == "core"
    assert classify(same[0], same[2], layers, caches)["layer"] == "L3 cache"

    pairs = [{"layer": "network", "bandwidth_mbps": 100.0, "latency_us": 10.0},
             {"layer": "package", "bandwidth_mbps": 900.0, "latency_us": 1.0},
             {"layer": "network", "bandwidth_mbps": 300.0, "latency_us": 30.0},
             {"layer": "L3 cache", "bandwidth_mbps": 2000.0, "latency_us": 0.5}]
    rows = layer_summary(pairs)
    assert [r["layer"] for r in rows] == ["L3 cache", "package", "network"]
    net = rows[-1]
    assert net["pairs"] == 2 and net["title"] == "between nodes"
    assert net["bandwidth_mean_mbps"] == pytest.approx(200.0)
    assert net["bandwidth_sd_mbps"] == pytest.approx(100.0)
    assert net["latency_mean_us"] == pytest.approx(20.0)
    assert net["latency_sd_us"] == pytest.approx(10.0)


def test_xor_schedule_reference():
    from tiers.probe.netfit import xor_schedule, xor_steps

    assert [xor_steps(n) for n in (1, 2, 3, 4, 5, 8, 9)] == [0, 1, 3, 3, 7, 7, 15]
    for n in (2, 3, 5, 8):
        for c in (1, 2, 3):
            rounds = xor_schedule(n, c)
            assert len(rounds) == math.ceil(xor_steps(n) / c)
            pairs = [p for r in rounds for _, ps in r for p in ps]
            assert sorted(pairs) == [(i, j) for i in range(n) for j in range(i + 1, n)]


# --------------------------------------------------------------------------
# Bad input and failures: one line, non-zero exit, no hang


def test_one_rank_is_refused():
    assert_one_line_error(run_tiers("probe", "net", "-n", "1"), "minimum of 2")


def test_zero_size_for_the_fit_is_refused():
    run = run_tiers("probe", "net", "-n", "2", "--all-pairs", "--center", "0")
    assert_one_line_error(run, "--center: '0' is below the minimum of 1 B")
    run = run_tiers("probe", "net", "-n", "2", "--all-pairs", "--factors", "1")
    assert_one_line_error(run, "two different sizes")


def test_huge_size_is_refused():
    run = run_tiers("probe", "net", "-n", "2", "--sizes", "0,100G")
    assert_one_line_error(run, "the largest MPI message")


def test_size_larger_than_memory_is_refused():
    # Every rank of a host needs two buffers of the largest size: with enough
    # ranks of 2000 MiB messages that is more than this machine's free
    # memory, which the native tool checks on every rank before allocating.
    size = 2000 * 2**20
    avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    ranks = max(2, avail // (2 * size) + 1)
    if ranks > 8:
        pytest.skip("this machine has too much free memory to exhaust with 8 ranks")
    run = run_tiers("probe", "net", "-n", str(ranks), "--tests", "pingpong", "--sizes", "2000M")
    assert_one_line_error(run, "free memory")


def test_unknown_option_is_refused():
    assert_one_line_error(run_tiers("probe", "net", "--bogus"), "--bogus")


def test_missing_launcher(tmp_path):
    import shutil
    # a PATH holding Open MPI's mpirun only, whether MPICH is installed or not
    only = tmp_path / "ompi"
    only.mkdir()
    (only / "mpirun").symlink_to(shutil.which("mpirun.openmpi") or shutil.which("mpirun"))
    run = run_tiers("probe", "net", "-n", "2", env={"TIERS_LAUNCHER": "mpich",
                                                    "PATH": str(only)})
    assert_one_line_error(run, "MPICH")
    run = run_tiers("probe", "net", "-n", "2", env={"PATH": str(tmp_path),
                                                    "TIERS_LAUNCHER": ""})
    assert_one_line_error(run, "no MPI launcher")


def test_rank_dying_mid_measurement():
    from tiers import launch
    from tiers.probe import net

    with pytest.raises(launch.LaunchError) as err:
        net.measure(3, tests="allpairs", center="64K", reps=2, timeout=20, time_limit=120,
                    native_extra=["--die", "1:allpairs"])
    message = str(err.value)
    assert "\n" not in message
    assert "rank 1" in message and "code 3" in message
    assert err.value.elapsed_s < 60


def test_stalled_rank_hits_the_timeout():
    from tiers import launch
    from tiers.probe import net

    with pytest.raises(launch.LaunchError) as err:
        net.measure(2, tests="allpairs", center="64K", reps=2, timeout=2, time_limit=120,
                    native_extra=["--stall", "1:allpairs"])
    message = str(err.value)
    assert "\n" not in message
    assert "within 2 s" in message and "--timeout" in message
    assert not err.value.timed_out  # the probe's own deadline, not the outer limit
    assert err.value.elapsed_s < 60


def test_stalled_rank_in_a_small_message_ping_pong_hits_the_series_deadline():
    """Small round trips block in MPI_Wait under one SIGALRM per series: a
    stalled peer still ends the run with the probe's own one line, naming
    the rank it waited for."""
    from tiers import launch
    from tiers.probe import net

    with pytest.raises(launch.LaunchError) as err:
        net.measure(2, tests="pingpong", sizes="8", timeout=2, time_limit=120,
                    native_extra=["--stall", "1:pingpong"])
    message = str(err.value)
    assert "\n" not in message
    assert "no answer from rank 1 within 2 s (ping-pong)" in message
    assert not err.value.timed_out
    assert err.value.elapsed_s < 60


def test_streaming_at_the_l2_edge_says_why():
    """A streaming size whose two buffers are about a core's L2 cache: a noisy
    row names the cache among its reasons; a steady one is only marked."""
    from tiers.probe import net

    l2 = 2 << 20
    assert net.cache_edge(1 << 20, l2) and net.cache_edge(512 << 10, l2)
    assert not net.cache_edge(4 << 20, l2) and not net.cache_edge(64 << 10, l2)
    assert not net.cache_edge(1 << 20, None)
    raw = {"bytes": 1 << 20, "rtt_us": 120.0, "rtt_median_us": 121.0, "latency_us": 60.0,
           "latency_median_us": 60.5, "pingpong_mbps": 17476.0, "pingpong_median_mbps": 17331.0,
           "bw_mbps": 18000.0, "bw_median_mbps": 12000.0, "rtt_noisy": False,
           "bw_noisy": False}
    row = net._pingpong_row(raw, l2)
    assert row["noisy"] and row["cache_edge"]
    assert "best streaming block 33 % above the median" in row["why"]
    assert "L2 cache (2 MiB)" in row["why"]
    steady = net._pingpong_row(dict(raw, bw_median_mbps=17900.0), l2)
    assert steady["cache_edge"] and not steady["noisy"] and steady["why"] is None
    far = net._pingpong_row(dict(raw, bytes=4 << 20), l2)
    assert "cache_edge" not in far and "L2" not in far["why"]
    assert net.l2_bytes() is None or net.l2_bytes() > 0
