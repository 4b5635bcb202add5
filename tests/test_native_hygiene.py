"""A native tool that tiers started never outlives tiers."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest


def _tools_with_marker(marker: str) -> list[int]:
    """PIDs of live processes whose environment holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in env and state != b"Z":
            found.append(int(entry))
    return found


def _wait_for(predicate, limit: float) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_probe_mem_tool_dies_with_tiers(sig):
    marker = f"TIERS_TEST_MARKER={uuid.uuid4().hex}"
    env = dict(os.environ)
    env[marker.split("=")[0]] = marker.split("=")[1]
    # A sweep long enough that it is still running when tiers is killed.
    proc = subprocess.Popen([sys.executable, "-m", "tiers", "probe", "mem", "--threads", "1",
                             "--pin", "compact", "--placement", "first-touch",
                             "--size", "512M", "--ntimes", "200"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def tool_started():
            return any(pid != proc.pid for pid in _tools_with_marker(marker))
        assert _wait_for(tool_started, 60), "tiers-probe-mem never started"
        proc.send_signal(sig)
        proc.wait(timeout=30)
        assert _wait_for(lambda: not _tools_with_marker(marker), 10), \
            f"processes survived tiers: {_tools_with_marker(marker)}"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _tools_with_marker(marker):
            os.kill(pid, signal.SIGKILL)
