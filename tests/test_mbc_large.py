"""Long messages through libtiers-mbc-mpi, byte by byte, on every path.

tests/programs/mbcmpi_large.c sends windows of 20 KB .. 3 MiB messages
around a ring with the receives posted first (answered by remote write;
from 64 KiB the split copy, half by each side) and with the sends first
(the receiver copies them out of the send buffers), into a strided
datatype and into receive buffers shorter than the message; it checks
each message's pattern, status and the guard bytes after each buffer.
TIERS_MBC_DEBUG_COUNTERS=1 makes the library print which paths the
messages took, so that each run shows it exercised the one it names.

Set TIERS_MBC_MPI_ASAN_LIB to a libtiers-mbc-mpi.so built with
-DTIERS_SANITIZE=ON to run the program under AddressSanitizer too.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import build_program, needs_mpicc
from tiers import launch, native

pytestmark = needs_mpicc

RANKS = [2, 4]
ROUNDS = 2
# checks per message: payload and status, but one per truncated receive
# plus its error; the strided one has two
CHECKS_PER_RANK_ROUND = 6 * 6 * 2 * 2 + 2 + 2 * 2
COUNTERS = re.compile(
    r"tiers mbc: rank (\d+) of (\d+): sent (\d+) \(remote write (\d+), of them split (\d+); "
    r"read (\d+); fifo (\d+); answered (\d+)\)")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("mbclarge"), "mbcmpi_large")


def _run(program: str, ranks: int, env: dict[str, str], args=(), preload: str | None = None,
         timeout: float = 300):
    full = {"LD_PRELOAD": preload if preload is not None else str(native.lib_path(
        "libtiers-mbc-mpi.so")), "TIERS_MBC_DEBUG_COUNTERS": "1", **env}
    kwargs = dict(bind_to="none", oversubscribe=True, timeout=timeout, env=full, check=False)
    if launch.detect().kind == "openmpi":
        kwargs["mca"] = {"mpi_yield_when_idle": "1"}
    return launch.launch([program, str(ROUNDS), *args], ranks, **kwargs)


def _checks(stdout: str) -> tuple[int, int]:
    m = re.search(r"checks (\d+) failed (\d+)", stdout)
    assert m, stdout
    return int(m.group(1)), int(m.group(2))


def _paths(stderr: str, ranks: int) -> list[dict]:
    """The counters of each rank's MPI_COMM_WORLD (the communicator of
    `ranks` processes), rank order."""
    rows = {}
    for m in COUNTERS.finditer(stderr):
        if int(m.group(2)) == ranks:
            v = [int(x) for x in m.groups()]
            rows[v[0]] = dict(sent=v[2], direct=v[3], split=v[4], read=v[5], fifo=v[6],
                              answered=v[7])
    assert sorted(rows) == list(range(ranks)), stderr
    return [rows[r] for r in range(ranks)]


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("mode", ["default", "no-split", "two-copy"])
def test_long_messages_arrive_whole_on_every_path(program, ranks, mode):
    """Posted first and sent first, at 2 and 4 ranks, with the split copy
    (default), without it (TIERS_MBC_SPLIT=0: the sender writes the whole
    message) and without the receiver's copy (TIERS_MBC_SINGLE_COPY=0: late
    messages through the FIFO): every byte, status and guard right."""
    env = {"no-split": {"TIERS_MBC_SPLIT": "0"},
           "two-copy": {"TIERS_MBC_SINGLE_COPY": "0"}}.get(mode, {})
    res = _run(program, ranks, env)
    assert res.returncode == 0, res.stdout + res.stderr
    checks, failed = _checks(res.stdout)
    assert failed == 0, res.stdout + res.stderr
    assert checks == ranks * ROUNDS * CHECKS_PER_RANK_ROUND
    paths = _paths(res.stderr, ranks)
    for p in paths:
        # the receives posted first asked for a remote write (a request
        # may be overtaken by a barrier message and go unused, rarely)
        assert p["direct"] > 0
        if mode == "no-split":
            assert p["split"] == 0
        else:
            # every posted-first message of 64 KiB or more that went by
            # remote write went split, both halves copied at once
            assert 0 < p["split"] <= p["direct"]
        if mode == "two-copy":
            assert p["read"] == 0 and p["fifo"] >= ROUNDS * 6 * 6
        else:
            # the late ones were left in the send buffer to be read
            assert p["read"] > 0


@pytest.mark.parametrize("ranks", RANKS)
def test_split_threshold_moves_with_the_environment(program, ranks):
    """TIERS_MBC_SPLIT_MIN=16384 splits the 20 KB window too: more split
    messages than at the default (64 KiB), the same bytes."""
    low = _run(program, ranks, {"TIERS_MBC_SPLIT_MIN": "16384"})
    default = _run(program, ranks, {})
    for res in (low, default):
        assert res.returncode == 0, res.stdout + res.stderr
        assert _checks(res.stdout)[1] == 0
    lows, defaults = _paths(low.stderr, ranks), _paths(default.stderr, ranks)
    assert sum(p["split"] for p in lows) > sum(p["split"] for p in defaults)


def test_split_environment_is_checked(program):
    res = _run(program, 2, {"TIERS_MBC_SPLIT": "maybe"}, timeout=120)
    assert res.returncode != 0
    assert "TIERS_MBC_SPLIT=maybe is not 0 or 1" in res.stderr


@pytest.mark.parametrize("ranks", RANKS)
def test_program_valid_without_library(program, ranks):
    """Plain MPI passes the same checks (the truncation phase left out:
    Open MPI 4.1's own single-copy path writes past a short receive
    buffer)."""
    res = _run(program, ranks, {}, args=("notrunc",), preload="")
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout)[1] == 0


ASAN_LIB = os.environ.get("TIERS_MBC_MPI_ASAN_LIB")


@pytest.mark.skipif(not ASAN_LIB, reason="TIERS_MBC_MPI_ASAN_LIB (an ASan build) not set")
@pytest.mark.parametrize("ranks", RANKS)
def test_long_messages_under_address_sanitizer(program, ranks):
    out = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True)
    libasan = os.path.realpath(out.stdout.strip())
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:verify_asan_link_order=0"}
    res = _run(program, ranks, env, preload=f"{libasan}:{ASAN_LIB}", timeout=400)
    assert "AddressSanitizer" not in res.stderr and "runtime error" not in res.stderr, res.stderr
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout)[1] == 0
    assert all(p["split"] > 0 for p in _paths(res.stderr, ranks))
