"""Reference applications over the memory-based layer (--comm mbc): the
halo exchanges and residual reductions of jacobi3d and laplace2d, the
vector exchange and dot products of cg and the count and key exchanges of
radixsort go through tiers/mbc.h and must give what MPI gives (bit for bit
where the arithmetic does not depend on a reduction order, within 1e-12
where MPI chooses its own summation order), with the Table 3 statistics of
the MPI/MBCF paper (remote-write share, data and message rates) in the document."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error, run_app



def _run(app: str, ranks: int, *args: str, check: bool = True, threads: int = 1):
    return run_app(f"tiers-{app}", ranks, threads, *args, check=check, pin="compact",
                   env={"TIERS_MBC_TRANSPORT": "auto"})


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
    assert mbc["result"]["iterations"] == mpi["result"]["iterations"] == 20
    # same arithmetic on the same ghosts: the field is identical to the last
    # bit (the serial comparison passed in both modes), and so is everything
    # computed from it with exact reductions (MAX)
    for key in ("error_max", "u_max", "u_center"):
        if key in mpi["result"]:
            assert mbc["result"][key] == mpi["result"][key]
    # the residual sums: the layer adds in rank order; MPI at 2 processes
    # does the same single commutative addition, at 4 it picks its own order
    for key in ("residual", "residual_initial"):
        if ranks == 2:
            assert mbc["result"][key] == mpi["result"][key]
        else:
            assert mbc["result"][key] == pytest.approx(mpi["result"][key], rel=1e-12)
    assert mbc["verification"]["passed"] is True and mpi["verification"]["passed"] is True
    st = mbc["mbc"]
    assert st["transport"] == "shm"
    # per iteration: one face per neighbour (at least a chain of the ranks,
    # both ways, each face >= 16 KiB) and one residual reduction (every
    # process to rank 0 and back: 2 (ranks - 1) messages of 8 bytes)
    halo_msgs = 20 * 2 * (ranks - 1)
    assert st["msgs_sent"] >= halo_msgs + 20 * 2 * (ranks - 1)
    assert st["bytes_sent"] >= halo_msgs * 16384
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
    """the MPI/MBCF paper's Tables 4-10: the grid runs once per messaging mode and the
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
    (["zblas", "--comm", "mpi,mbc"], "zblas has no --comm mbc"),
    (["jacobi3d", "--comm", "foo"], "unknown --comm mode 'foo'"),
    (["jacobi3d", "--comm", ","], "the --comm list is empty"),
])
def test_bench_bad_comm_is_one_line(tiers, args, fragment):
    run = tiers("bench", *args, "--quick", "--ranks", "1", "--threads", "1", timeout=60)
    assert_one_line_error(run, fragment)


# ---------------------------------------------------------------- cg and radixsort

NPB_S = {"na": 1400, "niter": 15, "cgit": 25}


@pytest.mark.parametrize("ranks", [2, 4])
def test_cg_over_mbc_verifies_and_agrees_with_mpi(ranks):
    """NPB CG class S: the vector exchange and the dot products over the
    layer.  zeta verifies in both modes and agrees within 1e-12; the message
    counts are those of the algorithm, exactly."""
    mpi = _run("cg", ranks, "--class", "S", "--comm", "mpi")
    mbc = _run("cg", ranks, "--class", "S", "--comm", "mbc")
    assert mpi["comm"] == "mpi" and "mbc" not in mpi and mbc["comm"] == "mbc"
    for doc in (mpi, mbc):
        assert doc["verification"]["passed"] is True
        assert doc["result"]["zeta_rel_error"] <= 1e-10
    zm, zb = mpi["result"]["zeta"], mbc["result"]["zeta"]
    assert abs(zb - zm) <= 1e-12 * abs(zm)
    if ranks == 2:   # one commutative addition per reduction: the same bits
        assert zb == zm and mbc["result"]["rnorm"] == mpi["result"]["rnorm"]
    assert "mbc" in mbc["params"]["distribution"]
    st = mbc["mbc"]
    assert st["transport"] == "shm"
    P, n, it = ranks, NPB_S["niter"], NPB_S["cgit"]
    # per outer iteration: cgit + 1 exchanges of p/z (each process sends its
    # block to every other one) and 2 cgit + 3 reductions (each 2 (P-1)
    # messages: every process to rank 0 and back), one of them of 2 values
    exchanges, reductions = it + 1, 2 * it + 3
    assert st["msgs_sent"] == n * (exchanges * P * (P - 1) + reductions * 2 * (P - 1))
    assert st["bytes_sent"] == n * (exchanges * (P - 1) * NPB_S["na"] * 8
                                    + 2 * (P - 1) * 8 * (reductions + 1))
    assert 0 <= st["remote_write_share"] <= 1
    # blocks of 1400 / P doubles are below the 16 KiB direct-write threshold
    assert st["bytes_direct"] == 0 and st["remote_write_share"] == 0
    assert st["data_rate_Bps"] > 0 and st["msg_rate_per_s"] > 0


def test_cg_class_w_over_mbc_writes_blocks_directly():
    """Class W at 2 processes: blocks of 3500 doubles (28 KiB) reach the
    direct-write threshold, so the remote-write share is what the
    statistics' own bytes say, and zeta still verifies and equals MPI's."""
    mpi = _run("cg", 2, "--class", "W", "--comm", "mpi")
    mbc = _run("cg", 2, "--class", "W", "--comm", "mbc")
    assert mbc["verification"]["passed"] is True and mpi["verification"]["passed"] is True
    assert mbc["result"]["zeta"] == mpi["result"]["zeta"]
    st = mbc["mbc"]
    assert 0 <= st["remote_write_share"] <= 1
    assert st["remote_write_share"] == pytest.approx(st["bytes_direct"] / st["bytes_sent"])
    if st["direct_available"]:
        assert st["msgs_direct"] > 0 and st["bytes_direct"] % (3500 * 8) == 0


def test_cg_team_reduction_over_mbc_with_threads():
    """2 threads per process: the team combines its threads' parts first,
    then one process-level reduction over the layer (app_allreduce)."""
    mpi = _run("cg", 2, "--class", "S", "--comm", "mpi", threads=2)
    mbc = _run("cg", 2, "--class", "S", "--comm", "mbc", threads=2)
    assert mbc["threads"] == 2
    assert mbc["verification"]["passed"] is True
    assert mbc["result"]["zeta"] == mpi["result"]["zeta"]
    assert mbc["result"]["rnorm_per_iteration"] == mpi["result"]["rnorm_per_iteration"]


@pytest.mark.parametrize("ranks", [2, 4])
def test_radixsort_over_mbc_sorts_like_mpi(ranks):
    """The histogram allgather, the count exchange and the key exchange over
    the layer: the same sorted result and checksums as MPI; the bytes sent
    are the histograms, the counts and exactly the keys that left each
    process."""
    args = ["--quick", "--verify"]
    mpi = _run("radixsort", ranks, *args, "--comm", "mpi")
    mbc = _run("radixsort", ranks, *args, "--comm", "mbc")
    assert mbc["comm"] == "mbc" and "mbc" not in mpi
    for doc in (mpi, mbc):
        v = doc["verification"]
        assert v["passed"] is True and v["serial_equal"] is True and v["multiset_equal"] is True
    for key in ("checksum", "checksum_xor", "min_key", "max_key", "exchange_bytes_mean"):
        assert mbc["result"][key] == mpi["result"][key]
    st = mbc["mbc"]
    P, passes, radix = ranks, mbc["result"]["passes"], 1 << mbc["result"]["bits"]
    keys_bytes = round(mbc["result"]["exchange_bytes_mean"] * P)
    assert keys_bytes > 0
    # per pass: a histogram (radix longs) and a count (one int) to every other process
    assert st["bytes_sent"] == passes * P * (P - 1) * (radix * 8 + 4) + keys_bytes
    assert 2 * passes * P * (P - 1) < st["msgs_sent"] <= 3 * passes * P * (P - 1)
    assert 0 <= st["remote_write_share"] <= 1
    assert st["remote_write_share"] == pytest.approx(st["bytes_direct"] / st["bytes_sent"])
    # only key runs (2^18 / P^2 keys, >= 16 KiB) can go direct, never more than them
    assert st["bytes_direct"] <= keys_bytes


def test_bench_compares_cg_over_mpi_and_mbc(tiers, tmp_path):
    """tiers bench cg --comm mpi,mbc: both modes run and verify, and the
    comparison row carries the mbc run's own statistics."""
    out = tmp_path / "bench.json"
    run = tiers("bench", "cg", "--class", "S", "--ranks", "2", "--threads", "1",
                "--comm", "mpi,mbc", "--json", str(out), timeout=300)
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    by = {s["comm"]: s["doc"] for s in doc["samples"]}
    assert sorted(by) == ["mbc", "mpi"]
    assert all(d["verification"]["passed"] for d in by.values())
    comp = doc["summary"]["comm_comparison"]
    assert [(c["ranks"], c["threads"]) for c in comp] == [(2, 1)]
    assert comp[0]["bytes_sent"] == by["mbc"]["mbc"]["bytes_sent"] > 0
