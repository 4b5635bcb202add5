"""tiers probe net per placement of the ping-pong pair's PUs: on a virtual
machine the host moves its CPUs, and figures between two ranks can follow
the distance between their PUs.  tiers measures a cache line's round trip
between the two PUs before the first launch and after every launch, and
gives the ping-pong and MPI_Barrier figures per placement
(docs/schemas/probe-net.md, pu_link).

Synthetic launches check the classification and the figures per placement;
real launches under mpirun check what a run records."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from conftest import run_tiers
from tiers import noise
from tiers.probe import net


def _link(*rtts, tests=None):
    """pu_link of launches whose round trips are consecutive measures: the
    one after a launch is the one before the next."""
    tests = tests or ["pingpong"] * (len(rtts) - 1)
    return {"pus": [0, 1], "ranks": [0, 1],
            "launches": [{"test": t, "rtt_ns": [rtts[i], rtts[i + 1]]}
                         for i, t in enumerate(tests)]}


def test_placement_classes_split_where_round_trips_jump():
    assert noise.placement_classes([100, 470, None, 0, 98, 480, 120]) == [(98, 120), (470, 480)]
    classes = noise.placement_classes([100, 470])
    assert noise.class_of(470, classes) == 1 and noise.class_of(300, classes) is None
    assert noise.class_of(None, classes) is None


def test_a_launch_belongs_to_a_placement_only_when_both_ends_fall_in_it():
    classes, of = net.launch_placements(_link(100, 105, 460, 470, 108, None))
    assert classes == [(100, 108), (460, 470)]
    # 100->105 near; 105->460 moved; 460->470 far; 470->108 moved; 108->None unknown
    assert of == [0, None, 1, None, None]


def _pp(lat_us, bw_us):
    """A ping-pong launch's native output: sizes 0 B and 1 MiB, every block
    at the given one-way time (0 B) and streaming window time (1 MiB: 4
    messages a window), with the figures the tool derives from them."""
    return {"pingpong": {"pair": [0, 1], "seconds": 1.0, "rows": [
        {"bytes": 0, "rtt_samples_us": [2 * lat_us] * 5, "rtt_us": 2 * lat_us,
         "rtt_median_us": 2 * lat_us, "latency_us": lat_us, "latency_median_us": lat_us},
        {"bytes": 2**20, "rtt_samples_us": [400.0] * 5, "rtt_us": 400.0,
         "rtt_median_us": 400.0, "latency_us": 200.0, "latency_median_us": 200.0,
         "bw_window": 4, "bw_window_samples_us": [bw_us] * 5,
         "bw_mbps": 4 * 2**20 / bw_us, "bw_median_mbps": 4 * 2**20 / bw_us}]}}


def _bar(avg):
    blocks = [avg] * 5
    return {"barrier": {"mpi": [{"ranks": 2, "min_us": avg, "avg_us": avg, "max_us": avg,
                                 "blocks_us": blocks, "block_n": 5, "stopped": "converged"}]}}


def _split(link, pp_docs, bar_docs):
    summary = {"pingpong": {"rows": [{"bytes": 0}, {"bytes": 2**20}]},
               "barrier": {"mpi": []}}
    net.split_by_placement(summary, link, {"pingpong": pp_docs, "barrier": bar_docs})
    return summary


def test_figures_per_placement_come_from_the_launches_in_it():
    # interleaved rounds: ping-pong, barrier, ping-pong, barrier, ping-pong, barrier;
    # the host moves the PUs apart after the third launch
    link = _link(100, 104, 102, 450, 460, 455, 458,
                 tests=["pingpong", "barrier"] * 3)
    pp = [_pp(0.20, 800.0), _pp(0.21, 820.0), _pp(0.50, 1600.0)]
    bar = [_bar(0.25), _bar(0.45), _bar(0.47)]
    s = _split(link, pp, bar)
    link_out = s["pu_link"]
    assert [p["rtt_range_ns"] for p in link_out["placements"]] == [[100, 104], [450, 460]]
    assert [ln["placement"] for ln in link_out["launches"]] == [0, 0, None, 1, 1, 1]
    assert [ln["moved_during"] for ln in link_out["launches"]] == [False, False, True, False,
                                                                    False, False]
    assert link_out["moved"] is True
    # ping-pong: near, moved during the launch (left out), far
    near, far = s["pingpong"]["by_placement"]
    assert (near["launches"], far["launches"]) == (1, 1)
    assert near["rows"][0]["latency_us"] == pytest.approx(0.20)
    assert far["rows"][0]["latency_us"] == pytest.approx(0.50)
    # 1 MiB streaming: 4 messages of 1 MiB a window
    assert near["rows"][1]["bw_mbps"] == pytest.approx(4 * 2**20 / 800.0)
    assert far["rows"][1]["bw_mbps"] == pytest.approx(4 * 2**20 / 1600.0)
    # MPI_Barrier: near, far, far (the median of the far launches')
    bnear, bfar = s["barrier"]["by_placement"]
    assert (bnear["launches"], bfar["launches"]) == (1, 2)
    assert bnear["mpi"][0]["avg_us"] == pytest.approx(0.25)
    assert bfar["mpi"][0]["avg_us"] == pytest.approx(0.46)
    warning = net.pu_link_warning(s)
    # each measure counted once: 100, 104, 102 near; 450, 460, 455, 458 far
    assert [p["rtt_ns"] for p in link_out["placements"]] == [102, 456.5]
    assert "moved PUs 0 and 1" in warning and "~102 ns" in warning and "~456 ns" in warning
    assert "changed during 1 launch" in warning
    assert "0.20" in warning and "0.50" in warning


def test_the_two_rank_all_pairs_figures_per_placement():
    link = _link(100, 104, 102, 460, 455, tests=["allpairs"] * 4)
    fits = [{"latency_us": lat, "bandwidth_mbps": bw} for lat, bw in
            ((0.21, 5000.0), (0.23, 5200.0), (0.40, 4000.0), (0.50, 3000.0))]
    samples = {"allpairs": {"pairs": [{"a": 0, "b": 1, "layer": "cache",
                                       "launch_fits": fits}]}}
    summary = {"ranks": 2, "allpairs": {}}
    net.split_by_placement(summary, link, {"allpairs": [{}] * 4}, None, samples)
    near, far = summary["allpairs"]["by_placement"]
    # launches: near, near, moved during it (left out), far
    assert (near["launches"], far["launches"]) == (2, 1)
    assert near["latency_us"] == pytest.approx(0.22) and near["bandwidth_mbps"] == 5100.0
    assert far["latency_us"] == 0.50 and far["layer"] == "cache"
    # more ranks: other pairs than the measured one, no split
    summary = {"ranks": 3, "allpairs": {}}
    net.split_by_placement(summary, link, {"allpairs": [{}] * 4}, None, samples)
    assert "by_placement" not in summary["allpairs"]


def test_one_placement_throughout_gives_no_warning_and_one_line():
    s = _split(_link(100, 104, 102, 101), [_pp(0.2, 800.0)] * 3, [])
    assert s["pu_link"]["moved"] is False
    assert len(s["pingpong"]["by_placement"]) == 1
    assert s["pingpong"]["by_placement"][0]["launches"] == 3
    assert net.pu_link_warning(s) is None
    out = io.StringIO()
    net._render_placements(s, Console(file=out, width=200))
    assert "one placement throughout" in out.getvalue() and "~102 ns" in out.getvalue()  # 101.5


def test_a_round_trip_not_measured_is_not_a_move():
    # the sample before the first launch ran out of time: that launch has no
    # placement, but nothing moved
    s = _split(_link(None, 104, 102, 101), [_pp(0.2, 800.0)] * 3, [])
    assert [ln["placement"] for ln in s["pu_link"]["launches"]] == [None, 0, 0]
    assert s["pu_link"]["moved"] is False
    assert s["pingpong"]["by_placement"][0]["launches"] == 2


def _rendered(s):
    out = io.StringIO()
    net._render_placements(s, Console(file=out, width=400))
    return out.getvalue()


def test_no_round_trip_measured_says_the_placement_is_unknown():
    # a busy neighbour on one PU: every sample ran out of time
    s = _split(_link(None, None, None), [_pp(0.2, 800.0)] * 2, [])
    assert s["pu_link"]["placements"] == [] and s["pu_link"]["moved"] is False
    assert s["pingpong"]["by_placement"] == []
    text = _rendered(s)
    assert "PUs 0 and 1 (ranks 0 and 1): where the host placed them was not measured" in text
    assert "ran out of time" in text and len(text.strip().splitlines()) == 1


def test_launches_whose_round_trips_ran_out_of_time_are_counted():
    s = _split(_link(100, None, 104, 102), [_pp(0.2, 800.0)] * 3, [])
    assert [ln["placement"] for ln in s["pu_link"]["launches"]] == [None, None, 0]
    text = _rendered(s)
    assert "one placement throughout" in text
    assert "2 launches whose round trips ran out of time" in text


def test_moved_during_every_launch_gives_one_line_not_an_empty_table():
    s = _split(_link(79, 110, 80, 112), [_pp(0.2, 800.0)] * 3, [])
    assert s["pu_link"]["moved"] is True
    assert all(ln["placement"] is None for ln in s["pu_link"]["launches"])
    text = _rendered(s)
    assert "moved them during every launch" in text and "~79 to ~112 ns" in text
    assert "│" not in text and "no figure per placement" in text


def test_the_table_prints_each_placement_s_figures():
    link = _link(100, 104, 450, 460, tests=["pingpong", "barrier", "pingpong"])  # 102, 455
    s = _split(link, [_pp(0.20, 800.0), _pp(0.50, 1600.0)], [_bar(0.33)])
    out = io.StringIO()
    net._render_placements(s, Console(file=out, width=200))
    text = out.getvalue()
    assert "Per placement of PUs 0 and 1" in text
    lines = [ln for ln in text.splitlines() if "│" in ln]
    near = next(ln for ln in lines if ln.split("│")[1].strip() == "102")
    far = next(ln for ln in lines if ln.split("│")[1].strip() == "455")
    assert "0.20" in near and "0.50" in far
    assert "1 launch during which they moved left out" in text


def test_on_a_busy_machine_a_changed_round_trip_is_not_called_a_move():
    # beside other work the round trip measures that work too: the text
    # must not say the host moved the PUs, and must say why it may differ
    link = _link(100, 104, 450, 460, tests=["pingpong", "barrier", "pingpong"])
    s = _split(link, [_pp(0.20, 800.0), _pp(0.50, 1600.0)], [_bar(0.33)])
    quiet, busy = io.StringIO(), io.StringIO()
    net._render_placements(s, Console(file=quiet, width=400))
    net._render_placements(s, Console(file=busy, width=400), busy=True)
    assert "the host moved them" in quiet.getvalue()
    text = busy.getvalue()
    assert "host moved" not in text and "their round trip changed during the run" in text
    assert "may be the other work on these PUs" in text
    assert "0.20" in text and "0.50" in text        # the same figures per placement
    warning = net.pu_link_warning(s, busy=True)
    assert warning.startswith("probe net: the round trip between PUs 0 and 1")
    assert "busy machine" in warning and "~102 ns" in warning and "~455 ns" in warning
    assert "the host moved" not in warning
    every = _split(_link(79, 110, 80, 112), [_pp(0.2, 800.0)] * 3, [])
    out = io.StringIO()
    net._render_placements(every, Console(file=out, width=400), busy=True)
    assert "their round trip changed during every launch" in out.getvalue()
    assert "host moved" not in out.getvalue()


def _doc(tmp_path, *args):
    path = tmp_path / "net.json"
    run = run_tiers("probe", "net", *args, "--json", str(path))
    assert run.returncode == 0, run.stderr
    return json.loads(path.read_text()), run


def test_a_local_run_records_the_pairs_placement_around_every_launch(tmp_path):
    doc, run = _doc(tmp_path, "-n", "2", "--tests", "pingpong,barrier", "--launches", "2",
                    "--sizes", "0,1K", "--barrier-threads", "1", "--quick")
    link = doc["params"]["pu_link"]
    place = {p["rank"]: int(p["pus"]) for p in doc["samples"]["placement"]}
    assert link["pus"] == [place[0], place[1]] and link["ranks"] == [0, 1]
    assert [ln["test"] for ln in link["launches"]] == doc["params"]["launch_order"]
    measured = [x for ln in link["launches"] for x in ln["rtt_ns"] if x is not None]
    assert measured and all(10 < x < 1e6 for x in measured)
    # one measure between two launches serves both
    for a, b in zip(link["launches"], link["launches"][1:]):
        assert a["rtt_ns"][1] == b["rtt_ns"][0]
    s = doc["summary"]["pu_link"]
    classes = [tuple(p["rtt_range_ns"]) for p in s["placements"]]
    assert classes == noise.placement_classes(measured)
    for ln in s["launches"]:
        ends = [noise.class_of(x, classes) for x in ln["rtt_ns"]]
        assert ln["placement"] == (ends[0] if ends[0] is not None and ends[0] == ends[1]
                                   else None)
    in_place = sum(1 for ln in s["launches"] if ln["test"] == "pingpong"
                   and ln["placement"] is not None)
    assert sum(b["launches"] for b in doc["summary"]["pingpong"]["by_placement"]) == in_place
    if not s["moved"]:
        assert "one placement throughout" in run.stdout


def test_an_oversubscribed_run_has_no_pair_of_pus_to_measure(tmp_path):
    # one rank more than the cores: they are not bound to a PU each
    from tiers import launch

    doc, run = _doc(tmp_path, "-n", str(launch.local_slots() + 1), "--tests", "pingpong",
                    "--launches", "2", "--sizes", "0", "--quick")
    assert doc["params"]["oversubscribed"] is True
    assert "pu_link" not in doc["params"] and "pu_link" not in doc["summary"]
    assert "by_placement" not in doc["summary"]["pingpong"]
    assert "Per placement" not in run.stdout and "placement throughout" not in run.stdout
