"""How the trace buffer is made resident, under real mpirun.

The budget is reserved at MPI_Init and made resident as the records reach
it: 1 MiB at first, doubling up to 4 MiB, then 4 MiB at a time.  The fixed
steps keep what is made resident ahead of the records below 4 MiB however
long the run (doubling up to the budget would make a 10 MiB trace hold
16 MiB, and pay for the pages inside traced calls).
"""

from __future__ import annotations

import json

import pytest

from conftest import build_program, needs_mpicc, run_tiers

pytestmark = needs_mpicc

MIB = 1 << 20
STEP = 4 * MIB


@pytest.fixture(scope="module")
def pingpong(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("grow-programs"), "trace_pingpong")


@pytest.mark.parametrize("n", [2, 3])
def test_resident_buffer_grows_in_steps_past_the_first_chunks(tmp_path, pingpong, n):
    # 60,000 round trips with no collective before MPI_Finalize: ranks 0
    # and 1 record about 10 MiB each (Enter, message and Leave per call),
    # all kept in memory at a 64M budget (no swap-out)
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--budget", "64M", "--",
                    "mpirun", "--oversubscribe", "-n", str(n), pingpong, "60000", "8", "0")
    assert run.returncode == 0, run.stderr
    doc = json.loads((folder / "summary.json").read_text())
    for r in doc["samples"]["ranks"]:
        mem = r["memory"]
        assert mem["buffer_reserved_bytes"] == 64 * MIB
        resident = mem["buffer_resident_bytes"]
        if r["rank"] > 1:   # an idle rank keeps its first chunk
            assert resident == MIB
            continue
        assert r["swapouts"]["count"] == 0
        assert r["functions"]["MPI_Send"]["calls"] == 60000
        recorded = (folder / "raw" / f"rank-{r['rank']:06d}.tev").stat().st_size
        # past the doubling (1, 2, 4 MiB), a multiple of the step, and less
        # than one step (plus the tracer's headroom) ahead of the records
        assert recorded > STEP
        assert resident % STEP == 0
        assert recorded <= resident < recorded + STEP + 4096
