"""Debian's hpcc, unchanged, traced by ``tiers trace`` at 2 and 4 ranks.

hpcc is a program nobody here wrote: a tiny input (tests/programs/
hpccinf.txt, N=400) runs every one of its tests in seconds.  Traced, it
must still verify (its own Success=1, no FAILED check, no residual
failure), and the trace must read back whole: every rank finalized and
not stopped, every send matched by its receive, the OTF2 archive's ENTER
and LEAVE counts equal to the calls the summary counted, the archive's
send records equal to the summary's point-to-point messages, and
``tiers trace stats`` lists every function the summary holds.
"""

from __future__ import annotations

import os
import re
import shutil

import pytest

from conftest import PROGRAMS, run_tiers
from test_trace import otf2_print_counts, summary

pytestmark = pytest.mark.skipif(
    not shutil.which("hpcc") or not shutil.which("mpirun") or not shutil.which("otf2-print"),
    reason="needs Debian's hpcc, mpirun and otf2-print")


def _input(folder, n: int) -> None:
    """hpccinf.txt for an n-rank process grid (1x2 or 2x2)."""
    p, q = (1, 2) if n == 2 else (2, 2)
    text = (PROGRAMS / "hpccinf.txt").read_text()
    text = re.sub(r"^\d+(\s+Ps)", rf"{p}\1", text, flags=re.M)
    text = re.sub(r"^\d+(\s+Qs)", rf"{q}\1", text, flags=re.M)
    (folder / "hpccinf.txt").write_text(text)


@pytest.mark.parametrize("n", [2, 4])
def test_hpcc_traced_verifies_and_reads_back(tmp_path, n):
    work = tmp_path / "work"
    work.mkdir()
    _input(work, n)
    folder = tmp_path / "trace"
    run = run_tiers("trace", "--out", str(folder), "--", "mpirun", "--oversubscribe",
                    "-n", str(n), "hpcc", cwd=work, timeout=300,
                    env={"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    assert run.returncode == 0, run.stderr[-3000:]

    # hpcc's own verdicts under the tracer
    out = (work / "hpccoutf.txt").read_text()
    assert "Success=1" in out
    assert not re.search(r"\bFAILED\b", out), [l for l in out.splitlines() if "FAILED" in l]
    assert "0 tests completed and failed residual checks." in out

    # the summary: whole, every message matched
    doc = summary(folder)
    ranks = doc["samples"]["ranks"]
    assert sorted(r["rank"] for r in ranks) == list(range(n))
    for r in ranks:
        assert r["finalized"] and r["stopped"] is None, r["rank"]
    s = doc["summary"]
    assert s["p2p_messages"] > 0
    assert s["matched_p2p_bytes"] == s["p2p_bytes"]
    assert sum(map(sum, s["comm_matrix"]["bytes"])) == s["p2p_bytes"]
    calls = sum(e["calls"] for r in ranks for e in r["functions"].values())
    sends = sum(r["functions"].get("MPI_Send", {}).get("calls", 0) for r in ranks)
    assert sends > 0

    # the OTF2 archive, read by OTF2's own printer
    printed = otf2_print_counts(folder / "traces.otf2")
    # every call's region, and the tracer's own swap-out regions (hpcc's
    # millions of events outgrow the default budget)
    assert printed["ENTER"] == printed["LEAVE"] == calls + s["swapouts"]["count"], \
        (printed, calls, s["swapouts"])
    # every message the summary counted is one send record (blocking, from
    # MPI_Send/Sendrecv/..., or non-blocking) in the archive
    assert printed["MPI_SEND"] + printed["MPI_ISEND"] == s["p2p_messages"], printed
    assert printed["MPI_SEND"] >= sends

    # and the profile view reads the same folder back
    stats = run_tiers("trace", "stats", "--top", "1000", str(folder), env={"COLUMNS": "200"})
    assert stats.returncode == 0, stats.stderr
    for name in {f for r in ranks for f in r["functions"]}:
        assert name in stats.stdout, name
    assert os.listdir(folder / "raw")
