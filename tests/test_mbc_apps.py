"""Reference applications over the memory-based layer (--comm mbc): the
halo exchanges of jacobi3d and laplace2d go through tiers/mbc.h and must
give exactly what MPI point-to-point gives, with the Table 3 statistics of
seed 001 (remote-write share, data and message rates) in the document."""

from __future__ import annotations

import pytest

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
