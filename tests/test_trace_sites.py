"""The profile per call site and --filter, under real mpirun at 2 and 3 ranks.

tests/programs/trace_sites.c, built with debug information, calls MPI_Send,
MPI_Recv and MPI_Barrier from lines marked SITE-x; the tracer records each
call's return address, tiers-trace-post attributes calls, time and bytes to
it, and tiers resolves it to file:line with addr2line.  The test finds the
marked lines in the source and expects exactly the calls the program makes
there.  --filter include=/exclude= decides at record time which functions
are traced at all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import build_program, needs_mpicc, run_tiers

MPIRUN = ["mpirun", "--oversubscribe"]
SOURCE = Path(__file__).resolve().parent / "programs" / "trace_sites.c"
ITERS = 40

pytestmark = [needs_mpicc, pytest.mark.skipif(not shutil.which("addr2line"),
                                              reason="needs binutils' addr2line")]


@pytest.fixture(scope="module")
def sites_program(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("sites"), "trace_sites", "-g", "-O0")


def line_of(mark: str) -> int:
    for n, text in enumerate(SOURCE.read_text().splitlines(), 1):
        if f"/* SITE-{mark} */" in text:
            return n
    raise AssertionError(mark)


@pytest.mark.parametrize("n", [2, 3])
def test_call_sites_resolve_to_the_source_lines(tmp_path, sites_program, n):
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", *MPIRUN, "-n", str(n), sites_program,
                    str(ITERS))
    assert run.returncode == 0, run.stderr
    doc = json.loads((folder / "summary.json").read_text())
    got = {(Path(s["site"].rsplit(":", 1)[0]).name, int(s["site"].rsplit(":", 1)[1]),
            s["function"]): s for s in doc["samples"]["sites"] if ".c:" in s["site"]}
    name = SOURCE.name
    want = {(name, line_of("send0"), "MPI_Send"): (ITERS, {"0"}),
            (name, line_of("recv0"), "MPI_Recv"): (ITERS, {"0"}),
            (name, line_of("recv1"), "MPI_Recv"): (ITERS, {"1"}),
            (name, line_of("send1"), "MPI_Send"): (ITERS, {"1"}),
            (name, line_of("barrier"), "MPI_Barrier"): (n, {str(r) for r in range(n)})}
    for key, (calls, ranks) in want.items():
        assert key in got, (key, sorted(got))
        assert got[key]["calls"] == calls
        assert set(got[key]["times"]) == ranks
    # 4 ints a message: the bytes of each Send and Recv site
    for key in want:
        if key[2] in ("MPI_Send", "MPI_Recv"):
            assert got[key]["bytes"] == ITERS * 16
    # per function, the sites add up to the function's figures
    for fn in ("MPI_Send", "MPI_Recv"):
        total = doc["summary"]["functions"][fn]
        assert sum(s["calls"] for k, s in got.items() if k[2] == fn) == total["calls"]
    st = run_tiers("trace", "stats", str(folder), "--sort", "calls")
    assert st.returncode == 0, st.stderr
    assert f"{name}:{line_of('send0')}" in st.stdout and "call sites" in st.stdout


@pytest.mark.parametrize("spec,kept,dropped", [
    ("include=MPI_Send,MPI_Barrier", {"MPI_Send", "MPI_Barrier"}, {"MPI_Recv"}),
    ("exclude=MPI_Recv,MPI_Comm_rank", {"MPI_Send", "MPI_Barrier"}, {"MPI_Recv", "MPI_Comm_rank"}),
])
def test_filter_decides_what_is_recorded(tmp_path, sites_program, spec, kept, dropped):
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--filter", spec, "--out", str(folder), "--", *MPIRUN, "-n", "2",
                    sites_program, str(ITERS))
    assert run.returncode == 0, run.stderr
    doc = json.loads((folder / "summary.json").read_text())
    fns = doc["summary"]["functions"]
    assert kept <= set(fns) and not dropped & set(fns)
    assert {"MPI_Init", "MPI_Finalize"} <= set(fns)          # always recorded
    assert fns["MPI_Send"]["calls"] == 2 * ITERS
    # the messages of the filtered-out receives are not in the trace either
    assert doc["summary"]["p2p_messages"] == 2 * ITERS
    assert doc["params"]["filter"] == spec


def test_bad_filter_is_one_line(tmp_path, sites_program):
    run = run_tiers("trace", "--filter", "only=MPI_Send", "--out", str(tmp_path / "t"), "--",
                    *MPIRUN, "-n", "2", sites_program)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "tiers: error: --filter: 'only=MPI_Send' is not include=MPI_X,... or exclude=MPI_X,..."]
    assert not (tmp_path / "t").exists()
