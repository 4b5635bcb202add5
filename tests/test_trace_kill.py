"""tiers trace of a run in which one rank is killed (SIGKILL) mid-loop.

The killed rank's raw file ends at its last swap-out, inside open calls;
the converter closes what it left open at the rank's last time stamp and
marks the rank stopped (``stopped_ranks`` in summary.json, and a zero-length
``tiers_rank_stopped`` region in the archive).  The archive is read back by
Debian's otf2-print and by the otf2 Python reader: Enter and Leave counts
match per location, and the summary's event count is the archive's.
"""

from __future__ import annotations

import collections
import json
import shutil
import subprocess

import pytest

from conftest import build_program, run_tiers

MPIRUN = ["mpirun", "--oversubscribe"]

pytestmark = pytest.mark.skipif(
    not shutil.which("mpicc") or not shutil.which("mpirun") or not shutil.which("otf2-print"),
    reason="needs mpicc, mpirun and otf2-print")


@pytest.fixture(scope="module")
def killmid(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("kill-programs"), "trace_killmid")


def otf2_print_per_location(anchor):
    """Return {location: Counter(ENTER=, LEAVE=, ...)} and the set of region
    names entered, from otf2-print's event lines."""
    out = subprocess.run(["otf2-print", str(anchor)], capture_output=True, text=True,
                         check=True).stdout
    counts = collections.defaultdict(collections.Counter)
    regions = set()
    started = False
    for line in out.splitlines():
        if line.startswith("-----"):
            started = True
            continue
        if started and line.strip():
            parts = line.split()
            counts[parts[1]][parts[0]] += 1
            if parts[0] == "ENTER" and "Region:" in line:
                regions.add(line.split('"')[1])
    return counts, regions


@pytest.mark.parametrize("n, killer", [(2, 0), (3, 1)])
def test_killed_rank_has_matched_regions_and_is_marked_stopped(tmp_path, killmid, n, killer):
    import otf2

    folder = tmp_path / "trace"
    # 64K buffers: the killed rank has swapped out (alone, between
    # collectives) many times before it dies, so its file holds events
    run = run_tiers("trace", "--budget", "64K", "--out", str(folder), "--", *MPIRUN, "-n",
                    str(n), killmid, "100000", "6000", str(killer))
    assert run.returncode != 0
    doc = json.loads((folder / "summary.json").read_text())
    s = doc["summary"]
    assert killer in s["stopped_ranks"]
    ranks = {r["rank"]: r for r in doc["samples"]["ranks"]}
    assert not ranks[killer]["finalized"]
    # the killed rank's file kept what it swapped out: thousands of calls
    assert ranks[killer]["functions"]["MPI_Send"]["calls"] > 1000
    assert ranks[killer]["swapouts"]["unsynchronised"] > 0

    anchor = folder / "traces.otf2"
    printed, regions = otf2_print_per_location(anchor)
    assert printed, "otf2-print printed no events"
    for loc, c in printed.items():
        assert c["ENTER"] == c["LEAVE"], (loc, c)
    assert "tiers_rank_stopped" in regions

    per_loc = collections.defaultdict(collections.Counter)
    stopped_groups = set()
    total = 0
    with otf2.reader.open(str(anchor)) as tr:
        for location, event in tr.events:
            total += 1
            key = (location.group.name, location.name)
            per_loc[key][type(event).__name__] += 1
            if isinstance(event, otf2.events.Enter) and event.region.name == "tiers_rank_stopped":
                stopped_groups.add(location.group.name)
    for key, c in per_loc.items():
        assert c["Enter"] == c["Leave"], (key, c)
    assert f"MPI Rank {killer}" in stopped_groups
    assert {f"MPI Rank {r}" for r in s["stopped_ranks"]} == stopped_groups
    # summary events: exactly the archive's events (swap-out statistics are
    # not events; the closing Leaves and the stopped marks are)
    assert s["events"] == total == sum(sum(c.values()) for c in per_loc.values())
