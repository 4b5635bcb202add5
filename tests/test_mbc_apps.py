"""Reference applications over the memory-based layer (--comm mbc): the
halo exchanges of jacobi3d and laplace2d go through tiers/mbc.h and must
give exactly what MPI point-to-point gives, with the Table 3 statistics of
seed 001 (remote-write share, data and message rates) in the document."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error

from tiers import launch, native


def _run(app: str, ranks: int, *args: str, check: bool = True):
    program = [str(native.tool_path(f"tiers-{app}")), "--threads", "1", *args]
    kwargs = dict(env={"OMP_NUM_THREADS": "1", "TIERS_MBC_TRANSPORT": "auto"}, bind_to="none",
                  oversubscribe=True, timeout=180)
    if launch.detect().kind == "openmpi":
        kwargs["mca"] = {"mpi_yield_when_idle": "1"}
    if check:
        return launch.launch_json(program, ranks, **kwargs)
    return launch.launch(program, ranks, check=False, **kwargs)


# problem sizes whose halo faces reach the layer's direct-write threshold
# (16 KiB), so that receives posted first can be written directly
CASES = {
    "jacobi3d": lambda ranks: ["--size", "80", "--iters", "20"],
    "laplace2d": lambda ranks: ["--size", "4096,64", "--grid", f"1,{ranks}", "--iters", "20"],
}


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("app", sorted(CASES))
def test_mbc_gives_the_mpi_result(app, ranks):
    args = CASES[app](ranks)
    mpi = _run(app, ranks, *args, "--comm", "mpi")
    mbc = _run(app, ranks, *args, "--comm", "mbc")
    assert mpi["comm"] == "mpi" and "mbc" not in mpi
    assert mbc["comm"] == "mbc"
    # same arithmetic on the same ghosts: identical to the last bit
    assert mbc["result"]["iterations"] == mpi["result"]["iterations"] == 20
    assert mbc["result"]["residual"] == mpi["result"]["residual"]
    assert mbc["result"]["residual_initial"] == mpi["result"]["residual_initial"]
    assert mbc["verification"]["passed"] is True and mpi["verification"]["passed"] is True
    st = mbc["mbc"]
    assert st["transport"] == "shm"
    # every process sends one face per neighbour per iteration (+1 for the
    # exchange of the final residual), and nothing else went through it
    assert st["msgs_sent"] >= 20 * 2 * (ranks - 1)
    assert st["bytes_sent"] >= st["msgs_sent"] * 16384
    assert st["data_rate_Bps"] > 0 and st["msg_rate_per_s"] > 0
    if st["direct_available"]:
        assert 0 < st["remote_write_share"] <= 1
        assert st["remote_write_share"] == pytest.approx(st["bytes_direct"] / st["bytes_sent"])


def test_bad_comm_value_is_one_line():
    run = _run("jacobi3d", 2, "--quick", "--comm", "carrier-pigeon", check=False)
    assert run.returncode != 0
    # one line from the application (the rest is mpirun's own report)
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("tiers-jacobi3d:")]
    assert lines == ["tiers-jacobi3d: error: --comm must be mpi or mbc (got carrier-pigeon)"]
    assert "Traceback" not in run.stderr


# ---------------------------------------------------------------- tiers bench --comm

def test_bench_compares_mpi_and_mbc(tiers, tmp_path):
    """seed 001 Tables 4-10: the grid runs once per messaging mode and the
    comparison rows are the samples' own figures."""
    out = tmp_path / "bench.json"
    # faces of 80 x 80 doubles (50 KiB) reach the direct-write threshold
    run = tiers("bench", "jacobi3d", "--quick", "--ranks", "1,2", "--threads", "1",
                "--size", "80", "--iters", "20", "--comm", "mpi,mbc", "--json", str(out),
                timeout=300)
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    assert doc["params"]["comm"] == ["mpi", "mbc"]
    got = sorted((s["comm"], s["ranks"], s["threads"]) for s in doc["samples"])
    assert got == [("mbc", 1, 1), ("mbc", 2, 1), ("mpi", 1, 1), ("mpi", 2, 1)]
    for s in doc["samples"]:
        # every sample ran in its own mode and passed its verification
        assert s["doc"]["comm"] == s["comm"]
        assert ("mbc" in s["doc"]) == (s["comm"] == "mbc")
        assert s["doc"]["verification"]["passed"] is True
        assert s["command"].count("--comm") == 1
        assert s["command"][s["command"].index("--comm") + 1] == s["comm"]
    by = {(s["comm"], s["ranks"]): s["doc"] for s in doc["samples"]}
    # same arithmetic whatever carried the halos
    for r in (1, 2):
        assert by["mbc", r]["result"]["residual"] == by["mpi", r]["result"]["residual"]
    summary = doc["summary"]
    assert summary["comm"] == "mpi"
    assert sorted(summary["by_comm"]) == ["mbc", "mpi"]
    assert [r["time_s"] for r in summary["rows"]] == \
        [by["mpi", 1]["time_s"], by["mpi", 2]["time_s"]]
    comp = summary["comm_comparison"]
    assert [(c["ranks"], c["threads"]) for c in comp] == [(1, 1), (2, 1)]
    for c in comp:
        r = c["ranks"]
        tm, tb = by["mpi", r]["time_s"], by["mbc", r]["time_s"]
        assert c["time_mpi_s"] == tm and c["time_mbc_s"] == tb
        assert c["ratio"] == pytest.approx(tb / tm, rel=1e-12)
        # speed-up of each mode against its own one-process run
        assert c["speedup_mpi"] == pytest.approx(by["mpi", 1]["time_s"] / tm, rel=1e-12)
        assert c["speedup_mbc"] == pytest.approx(by["mbc", 1]["time_s"] / tb, rel=1e-12)
        assert c["verified"] is True
    one, two = comp
    assert one["speedup_mpi"] == 1.0 and one["speedup_mbc"] == 1.0
    assert one["bytes_sent"] == 0 and one["remote_write_share"] is None
    st = by["mbc", 2]["mbc"]
    assert two["bytes_sent"] == st["bytes_sent"] > 0
    assert two["remote_write_share"] == st["remote_write_share"]
    assert 0 <= two["remote_write_share"] <= 1
    if st["direct_available"]:
        assert two["remote_write_share"] > 0
        assert two["remote_write_share"] == pytest.approx(st["bytes_direct"] / st["bytes_sent"])
    # the table of the comparison is printed
    assert "MPI vs MBC" in run.stdout and "MBC/MPI" in run.stdout


def test_bench_comm_default_is_mpi_only(tiers, tmp_path):
    out = tmp_path / "bench.json"
    run = tiers("bench", "laplace2d", "--quick", "--ranks", "2", "--threads", "1",
                "--json", str(out), timeout=300)
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    assert [s["comm"] for s in doc["samples"]] == ["mpi"]
    assert doc["samples"][0]["doc"]["comm"] == "mpi"
    assert "comm_comparison" not in doc["summary"]
    assert "MPI vs MBC" not in run.stdout


@pytest.mark.parametrize("args, fragment", [
    (["matmul", "--comm", "mbc"], "matmul has no --comm mbc"),
    (["radixsort", "--comm", "mpi,mbc"], "radixsort has no --comm mbc"),
    (["jacobi3d", "--comm", "foo"], "unknown --comm mode 'foo'"),
    (["jacobi3d", "--comm", ","], "the --comm list is empty"),
])
def test_bench_bad_comm_is_one_line(tiers, args, fragment):
    run = tiers("bench", *args, "--quick", "--ranks", "1", "--threads", "1", timeout=60)
    assert_one_line_error(run, fragment)
