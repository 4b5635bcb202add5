"""tiers trace stats as a profile (python/tiers/trace/profile.py), on real
traced runs of tests/programs/trace_pingpong.c at 2 and 3 ranks and
trace_mix.c at 2 ranks: calls per function equal what the programs did,
the order holds for every --sort key, time % sums to 100 and the size
buckets count each message once."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import assert_one_line_error, build_program, needs_mpicc, run_tiers

MPIRUN = ["mpirun", "--oversubscribe"]
ITERS, BYTES, EVERY = 40, 3000, 10

pytestmark = needs_mpicc


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile-programs")
    return {name: build_program(out, name) for name in ("trace_pingpong", "trace_mix")}


def _trace(folder: Path, ranks: int, program: str, *args: str) -> Path:
    run = run_tiers("trace", "--out", str(folder), "--", *MPIRUN, "-n", str(ranks),
                    program, *args, timeout=240)
    assert run.returncode == 0, run.stderr
    return folder


@pytest.fixture(scope="module", params=[2, 3])
def pingpong(request, programs, tmp_path_factory):
    n = request.param
    folder = _trace(tmp_path_factory.mktemp(f"pp{n}") / "trace", n, programs["trace_pingpong"],
                    str(ITERS), str(BYTES), str(EVERY))
    return n, folder


def _pingpong_calls(n: int) -> dict[str, int]:
    """What trace_pingpong ITERS BYTES EVERY calls, summed over n ranks."""
    return {"MPI_Send": 2 * ITERS, "MPI_Recv": 2 * ITERS,
            "MPI_Barrier": n * (ITERS // EVERY + 1), "MPI_Init": n, "MPI_Finalize": n}


def _profile(folder, **kwargs):
    from tiers.trace import load, profile
    return profile.profile(load(folder), folder, **kwargs)


def test_calls_per_function_equal_what_the_program_did(pingpong):
    n, folder = pingpong
    prof = _profile(folder)
    got = {r["name"]: r["calls"] for r in prof["functions"]}
    assert got == _pingpong_calls(n)
    rows = {r["name"]: r for r in prof["functions"]}
    assert rows["MPI_Send"]["bytes"] == 2 * ITERS * BYTES
    # ranks 0 and 1 send; a third rank only meets the barriers
    assert rows["MPI_Send"]["ranks_calling"] == 2
    assert rows["MPI_Send"]["calls_max"] == ITERS
    assert rows["MPI_Send"]["calls_min"] == (0 if n > 2 else ITERS)
    assert rows["MPI_Barrier"]["ranks_calling"] == n
    assert prof["ranks"] == n and prof["times"] == "summed over ranks"


def test_time_order_percentages_and_per_rank_spread(pingpong):
    _, folder = pingpong
    prof = _profile(folder)
    rows = prof["functions"]
    times = [r["time_s"] for r in rows]
    assert times == sorted(times, reverse=True)
    assert sum(r["time_pct"] for r in rows) == pytest.approx(100.0, abs=1e-6)
    assert prof["mpi_time_s"] == pytest.approx(sum(times))
    for r in rows:
        assert r["time_min_s"] <= r["time_mean_s"] <= r["time_max_s"]
        assert r["time_mean_s"] * prof["ranks"] == pytest.approx(r["time_s"], rel=1e-9)
        assert r["time_per_call_s"] == pytest.approx(r["time_s"] / r["calls"])


def test_every_sort_key_orders_the_rows(pingpong):
    _, folder = pingpong
    for key, field, reverse in (("calls", "calls", True), ("bytes", "bytes", True),
                                ("name", "name", False)):
        rows = _profile(folder, sort=key)["functions"]
        values = [r[field] for r in rows]
        assert values == sorted(values, reverse=reverse), key


def test_size_buckets_count_each_message(pingpong):
    n, folder = pingpong
    buckets = _profile(folder)["buckets"]
    # BYTES = 3000 lies in 1-64 KiB: every send and every receive once
    assert buckets["MPI_Send"] == {"1-64 KiB": 2 * ITERS}
    assert buckets["MPI_Recv"] == {"1-64 KiB": 2 * ITERS}
    assert buckets["MPI_Barrier"] == {"0 B": n * (ITERS // EVERY + 1)}


def _table_rows(text: str) -> list[list[str]]:
    """The rows of the function table printed by tiers trace stats."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("function ") and "time %" in ln)
    rows = []
    for ln in lines[start + 1:]:
        if not ln.strip():
            break
        rows.append(re.split(r"\s{2,}", ln.strip()))
    return rows


def test_command_line_sort_and_top(pingpong):
    n, folder = pingpong
    run = run_tiers("trace", "stats", str(folder))
    assert run.returncode == 0, run.stderr
    assert f"summed over {n} ranks" in run.stdout
    rows = _table_rows(run.stdout)
    assert {r[0]: int(r[1]) for r in rows} == _pingpong_calls(n)
    assert sum(float(r[3]) for r in rows) == pytest.approx(100.0, abs=0.3)
    top = run_tiers("trace", "stats", str(folder), "--sort", "calls", "--top", "2")
    assert top.returncode == 0, top.stderr
    rows = _table_rows(top.stdout)
    assert [r[0] for r in rows] == ["MPI_Recv", "MPI_Send"] or \
        [r[0] for r in rows] == ["MPI_Send", "MPI_Recv"]
    assert "top 2 of 5 functions" in top.stdout
    by_name = _table_rows(run_tiers("trace", "stats", str(folder), "--sort", "name").stdout)
    assert [r[0] for r in by_name] == sorted(_pingpong_calls(n))


def test_mix_profile_matches_the_program(programs, tmp_path):
    folder = _trace(tmp_path / "mix", 2, programs["trace_mix"])
    prof = _profile(folder)
    got = {r["name"]: r["calls"] for r in prof["functions"]}
    # trace_mix at 2 ranks (tests/test_trace.py's mix_expected, summed)
    assert got["MPI_Send"] == 2 * 5 + 1     # pairs, and rank 1's wildcard message
    assert got["MPI_Recv"] == 2 * 5 + 1
    assert got["MPI_Isend"] == got["MPI_Irecv"] == got["MPI_Waitall"] == 2 * 3
    assert got["MPI_Allreduce"] == 4 and got["MPI_Alltoall"] == 2
    buckets = prof["buckets"]
    assert buckets["MPI_Send"].get("1-64 KiB") == 2 * 5      # 1024 doubles
    assert buckets["MPI_Isend"] == {"65 B-1 KiB": 2 * 3}      # 256 ints
    summary = json.loads((folder / "summary.json").read_text())["summary"]["functions"]
    assert {k: v["calls"] for k, v in summary.items()} == got


def test_bad_options_are_one_line(pingpong):
    _, folder = pingpong
    assert_one_line_error(run_tiers("trace", "stats", str(folder), "--sort", "speed"), "--sort")
    assert_one_line_error(run_tiers("trace", "stats", str(folder), "--top", "0"), "--top")


@pytest.mark.parametrize("summary", [
    {"schema": "tiers.trace/1"},
    {"schema": "tiers.trace/1", "summary": {"ranks": 2}},
    {"schema": "tiers.trace/1", "summary": []},
    {"schema": "tiers.trace/1", "summary": {"ranks": "two", "events": None}},
])
def test_stats_of_an_incomplete_summary_is_one_line(tmp_path, summary):
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert_one_line_error(run_tiers("trace", "stats", str(tmp_path)),
                          "not a complete tiers trace summary")
