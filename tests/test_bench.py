"""``tiers bench`` and the reference applications under real mpirun: each
app verifies itself at 1, 2 and 4 ranks x 1 and 2 threads, the results are
the same whatever the decomposition, and bad input ends in one line."""

from __future__ import annotations

import json
import math
import os

import pytest

from conftest import assert_one_line_error

from tiers import bench
from tiers.errors import TiersError

# Figures that are exact (maxima of bit-identical fields) and must not
# depend on the decomposition or the thread count.
EXACT = {"jacobi3d": ("error_max",), "laplace2d": ("u_max", "u_center")}


@pytest.fixture(scope="module", params=["jacobi3d", "laplace2d"])
def grid_doc(request, tmp_path_factory):
    from conftest import run_tiers

    out = tmp_path_factory.mktemp("bench") / f"{request.param}.json"
    run = run_tiers("bench", request.param, "--quick", "--ranks", "1,2,4", "--threads", "1,2",
                    "--json", str(out), timeout=900)
    assert run.returncode == 0, run.stderr
    assert "time, speed-up and efficiency" in run.stdout
    return request.param, json.loads(out.read_text()), out


def test_every_configuration_verified(grid_doc):
    app, doc, _ = grid_doc
    assert doc["schema"] == "tiers.bench/1"
    assert doc["params"]["app"] == app
    got = {(s["ranks"], s["threads"]) for s in doc["samples"]}
    assert got == {(r, t) for r in (1, 2, 4) for t in (1, 2)}
    for s in doc["samples"]:
        d = s["doc"]
        assert d["schema"] == "tiers.app/1"
        assert d["ranks"] == s["ranks"] and d["threads"] == s["threads"]
        v = d["verification"]
        assert v["passed"] is True and v["serial_compared"] is True
        assert v["max_diff_serial"] == 0          # bit for bit equal to the serial run
        assert d["result"]["residual"] < d["result"]["residual_initial"]
        assert len(d["breakdown"]["compute_s"]["per_rank"]) == s["ranks"]
    assert doc["summary"]["all_verified"] is True


def test_results_identical_across_decompositions(grid_doc):
    app, doc, _ = grid_doc
    results = [s["doc"]["result"] for s in doc["samples"]]
    for key in EXACT[app]:
        assert len({r[key] for r in results}) == 1, [r[key] for r in results]
    # Sums of squares are rounded in a different order per decomposition.
    ref = results[0]["residual"]
    for r in results:
        assert math.isclose(r["residual"], ref, rel_tol=1e-12)
        assert r["iterations"] == results[0]["iterations"]


def test_speedup_and_efficiency_follow_their_definitions(grid_doc):
    _, doc, out = grid_doc
    s = doc["summary"]
    assert (s["baseline"]["ranks"], s["baseline"]["threads"]) == (1, 1)
    base = s["baseline"]["time_s"]
    for row in s["rows"]:
        cores = row["ranks"] * row["threads"]
        assert row["cores"] == cores
        assert row["speedup"] == pytest.approx(base / row["time_s"])
        assert row["efficiency"] == pytest.approx(row["speedup"] / cores)
        sample = next(x for x in doc["samples"]
                      if (x["ranks"], x["threads"]) == (row["ranks"], row["threads"]))
        assert row["comm_s"] == sample["doc"]["breakdown"]["comm_s"]["mean"]
    assert out.with_suffix(".png").stat().st_size > 0


def test_single_rank_has_no_messages(grid_doc):
    _, doc, _ = grid_doc
    for smp in doc["samples"]:
        if smp["ranks"] == 1 and smp["threads"] == 1:
            b = smp["doc"]["breakdown"]
            assert b["sync_s"]["max"] == 0.0     # no barrier waits with one thread
            assert b["compute_s"]["max"] > 0.0


@pytest.mark.parametrize("app", ["jacobi3d", "laplace2d"])
def test_overlap_gives_the_same_field(app):
    plain = bench.measure(app, [2], [2], quick=True, argv=["test"])
    over = bench.measure(app, [4, 2], [1], quick=True, overlap=True, argv=["test"])
    ref = plain["samples"][0]["doc"]["result"]
    for s in over["samples"]:
        assert s["doc"]["overlap"] is True
        assert s["doc"]["verification"]["passed"] is True
        for key in EXACT[app]:
            assert s["doc"]["result"][key] == ref[key]


def test_analyse_without_1x1_scales_the_baseline():
    def doc(t):
        return {"time_s": t, "breakdown": {f"{p}_s": {"mean": 0.0} for p in bench.PHASES},
                "figure_of_merit": {}, "verification": {"passed": True}}
    s = bench.analyse([{"ranks": 2, "threads": 1, "doc": doc(4.0)},
                       {"ranks": 4, "threads": 1, "doc": doc(2.0)}])
    assert s["baseline"] == {"ranks": 2, "threads": 1, "time_s": 4.0}
    row = s["rows"][1]
    assert row["speedup"] == pytest.approx(4.0) and row["efficiency"] == pytest.approx(1.0)


def test_grid_that_does_not_divide_is_one_line(tiers):
    run = tiers("bench", "jacobi3d", "--quick", "--ranks", "2", "--threads", "1",
                "--size", "25")
    assert_one_line_error(run, "2 processes along x do not divide its 25 grid points")


def test_grid_not_matching_ranks_is_one_line(tiers):
    run = tiers("bench", "laplace2d", "--quick", "--ranks", "4", "--threads", "1",
                "--app-args", "--grid 3,1")
    assert_one_line_error(run, "does not match the 4 processes")


def test_too_many_threads_is_one_line(tiers):
    cpus = len(os.sched_getaffinity(0))
    run = tiers("bench", "jacobi3d", "--quick", "--ranks", "1", "--threads", str(cpus + 1))
    assert_one_line_error(run, f"{cpus + 1} threads per rank exceed the {cpus} CPUs")


def test_unknown_app_and_class_are_one_line(tiers):
    assert_one_line_error(tiers("bench", "nosuch", "--quick"), "invalid choice: 'nosuch'")
    assert_one_line_error(tiers("bench", "jacobi3d", "--class", "A"), "has no problem classes")


def test_parse_counts():
    assert bench.parse_counts("4,1,2,2", "ranks") == [1, 2, 4]
    assert bench.parse_counts("1-3", "ranks") == [1, 2, 3]
    for bad in ("0", "a", "3-1", ""):
        with pytest.raises(TiersError):
            bench.parse_counts(bad, "ranks")


def test_launch_plan_gives_cores_or_oversubscribes():
    assert bench.launch_plan(2, 2, slots=4) == {
        "oversubscribed": False, "options": {"cpus_per_rank": 2, "bind_to": "core"}}
    plan = bench.launch_plan(4, 2, slots=2)
    assert plan["oversubscribed"] is True and plan["options"]["bind_to"] == "none"


def _sample(ranks, threads, t, over=False):
    doc = {"time_s": t, "breakdown": {f"{p}_s": {"mean": 0.0} for p in bench.PHASES},
           "figure_of_merit": {}, "verification": {"passed": True}}
    return {"ranks": ranks, "threads": threads, "doc": doc, "oversubscribed": over}


def test_grid_leaves_out_or_marks_cells_beyond_the_cores():
    cells = bench.grid([1, 2, 4], [1, 2], 2, fit_only=True)
    assert cells == [(1, 1, False), (1, 2, False), (2, 1, False)]
    cells = bench.grid([1, 2, 4], [1, 2], 2, fit_only=False)
    assert [(r, t) for r, t, over in cells if over] == [(2, 2), (4, 1), (4, 2)]
    assert len(cells) == 6
    assert all(not over for _, _, over in bench.grid([1, 2, 4], [1, 2], 8, fit_only=False))


def test_oversubscribed_rows_are_marked_and_never_the_baseline():
    # the 1x1 cell has the fewest cores and would be the baseline, but it is
    # marked oversubscribed: the baseline must be a fitting cell (1x2)
    s = bench.analyse([_sample(2, 1, 4.0), _sample(1, 1, 1.0, over=True),
                       _sample(1, 2, 3.0)])
    assert (s["baseline"]["ranks"], s["baseline"]["threads"]) == (1, 2)
    rows = {(r["ranks"], r["threads"]): r for r in s["rows"]}
    assert rows[(1, 1)]["oversubscribed"] is True and rows[(1, 1)]["reliable"] is False
    assert "contention" in rows[(1, 1)]["why"]
    assert rows[(2, 1)]["speedup"] == pytest.approx(3.0 / 4.0 * 2)
    assert "oversubscribed" not in rows[(2, 1)] and "reliable" not in rows[(1, 2)]


def _cores():
    from tiers import launch
    return launch.local_slots()


def test_default_grid_runs_only_what_fits(tiers, tmp_path):
    out = tmp_path / "b.json"
    run = tiers("bench", "laplace2d", "--quick", "--json", str(out), timeout=600)
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    cores = _cores()
    ran = {(s["ranks"], s["threads"]) for s in doc["samples"]}
    expected = {(r, t) for r in bench.DEFAULT_RANKS for t in bench.DEFAULT_THREADS
                if r * t <= cores}
    assert ran == expected
    assert {tuple(c) for c in doc["params"]["skipped"]} == \
        {(r, t) for r in bench.DEFAULT_RANKS for t in bench.DEFAULT_THREADS} - expected
    assert not any(s["oversubscribed"] for s in doc["samples"])
    assert not doc.get("warnings")
    if doc["params"]["skipped"]:
        assert "Not run" in run.stdout


def test_explicit_ranks_beyond_the_cores_run_marked(tiers, tmp_path):
    out = tmp_path / "b.json"
    over = 1 << _cores().bit_length()  # a power of two above the cores: divides the grid
    run = tiers("bench", "laplace2d", "--quick", "--ranks", f"1,{over}", "--threads", "1",
                "--json", str(out), timeout=600)
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    marks = {(s["ranks"], s["threads"]): s["oversubscribed"] for s in doc["samples"]}
    assert marks == {(1, 1): False, (over, 1): True}
    row = next(r for r in doc["summary"]["rows"] if r["ranks"] == over)
    assert row["oversubscribed"] is True and row["reliable"] is False
    assert (doc["summary"]["baseline"]["ranks"], doc["summary"]["baseline"]["threads"]) == (1, 1)
    assert len(doc["warnings"]) == 1 and f"{over}x1" in doc["warnings"][0]
    assert f"{over}x1 (over)" in run.stdout and "(over) oversubscribed" in run.stdout
