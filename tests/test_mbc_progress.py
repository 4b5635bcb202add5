"""Transport progress while a process is inside a blocking MPI call that
libtiers-mbc-mpi passes to MPI.

tests/programs/mbcmpi_progress.c pairs the ranks: each round the sender
sends a long message with MPI_Send and then enters a blocking call; the
receiver posts MPI_Irecv, enters the same call and only after it waits for
the message.  Plain MPI finishes it (its progress engine runs inside the
call); under ``tiers mbc run`` the receiver's side of the transport must
make progress while the receiver is inside MPI, or the sender never
leaves MPI_Send and both wait for ever.  Each run must finish before its
timeout (a hang fails the test) with every byte, the window values and the
file's contents right.

Set TIERS_MBC_MPI_ASAN_LIB to a libtiers-mbc-mpi.so built with
-DTIERS_SANITIZE=ON to run the program under AddressSanitizer too.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import build_fortran_program, build_program, needs_mpicc, run_tiers
from tiers import launch

pytestmark = needs_mpicc

ROUNDS = 3  # as in the program
MODES = ["fence", "pscw", "io", "dup"]
PATHS = {"default": {}, "no-split": {"TIERS_MBC_SPLIT": "0"},
         "two-copy": {"TIERS_MBC_SINGLE_COPY": "0"}}


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("mbcprogress"), "mbcmpi_progress")


def _launcher(ranks: int) -> list[str]:
    if launch.detect().kind == "mpich":
        return ["mpiexec", "-n", str(ranks)]
    return ["mpirun", "--oversubscribe", "-n", str(ranks)]


def expected_checks(mode: str, ranks: int) -> int:
    """Checks summed over ranks: one per received message, plus the window
    value each receiver (fence) or target (pscw) reads, each rank's block
    of the file (io) or each rank's duplicate's size (dup)."""
    pairs = ranks // 2
    per_round = pairs + (pairs if mode in ("fence", "pscw") else ranks)
    return per_round * ROUNDS


def _checks(stdout: str) -> tuple[int, int]:
    m = re.search(r"checks (\d+) failed (\d+)", stdout)
    assert m, stdout
    return int(m.group(1)), int(m.group(2))


def _run_mbc(program, mode, nbytes, order, ranks, env, folder, timeout=120):
    cmd = ["mbc", "run", "--", *_launcher(ranks), program, mode, str(nbytes), order,
           str(folder)]
    try:
        return run_tiers(*cmd, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{mode} {nbytes} B {order} first at {ranks} ranks did not finish "
                    f"in {timeout} s (hang)")


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("order", ["posted", "sent"])
@pytest.mark.parametrize("nbytes", [1 << 20, 32768])
@pytest.mark.parametrize("mode", MODES)
def test_long_send_facing_a_blocking_call_finishes(program, tmp_path, mode, nbytes, order,
                                                   ranks):
    """The default paths: every message, window value and file block right."""
    res = _run_mbc(program, mode, nbytes, order, ranks, {}, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout) == (expected_checks(mode, ranks), 0), res.stdout + res.stderr


@pytest.mark.parametrize("path", ["no-split", "two-copy"])
@pytest.mark.parametrize("order", ["posted", "sent"])
@pytest.mark.parametrize("mode", MODES)
def test_long_send_facing_a_blocking_call_on_other_paths(program, tmp_path, mode, order, path):
    """Without the split copy (the sender writes the whole posted-first
    message) and without the single copy (1 MiB through the FIFO, which
    does not hold it): the same, at 2 and 4 ranks."""
    for ranks in (2, 4):
        res = _run_mbc(program, mode, 1 << 20, order, ranks, PATHS[path], tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        assert _checks(res.stdout) == (expected_checks(mode, ranks), 0), res.stdout + res.stderr


@pytest.mark.parametrize("path", ["default", "two-copy"])
@pytest.mark.parametrize("ranks", [2, 3])
def test_fortran_send_facing_a_fence_finishes(tmp_path, ranks, path):
    """mbcmpi_progress_f.f90 (`use mpi`): Open MPI's and MPICH's Fortran
    bindings call the PMPI_ names, which the library defines; every byte
    right, no hang."""
    exe = build_fortran_program(tmp_path, "mbcmpi_progress_f", required=True)
    cmd = ["mbc", "run", "--", *_launcher(ranks), exe]
    try:
        res = run_tiers(*cmd, env=PATHS[path], timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the Fortran program at {ranks} ranks did not finish in 120 s (hang)")
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout) == ((ranks // 2) * ROUNDS, 0), res.stdout + res.stderr


def test_program_valid_without_library(program, tmp_path):
    """Plain MPI finishes every mode with the same checks (the program is
    valid MPI: the hang is the transport's, not the program's)."""
    for mode in MODES:
        for order in ("posted", "sent"):
            res = launch.launch([program, mode, str(1 << 20), order, str(tmp_path)], 2,
                                oversubscribe=True, timeout=120, check=False)
            assert res.returncode == 0, res.stdout + res.stderr
            assert _checks(res.stdout) == (expected_checks(mode, 2), 0)


ASAN_LIB = os.environ.get("TIERS_MBC_MPI_ASAN_LIB")


@pytest.mark.skipif(not ASAN_LIB, reason="TIERS_MBC_MPI_ASAN_LIB (an ASan build) not set")
@pytest.mark.parametrize("mode", MODES)
def test_progress_under_address_sanitizer(program, tmp_path, mode):
    out = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True)
    libasan = os.path.realpath(out.stdout.strip())
    env = {"LD_PRELOAD": f"{libasan}:{ASAN_LIB}",
           "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:verify_asan_link_order=0"}
    kwargs = dict(bind_to="none", oversubscribe=True, timeout=300, env=env, check=False)
    for order in ("posted", "sent"):
        res = launch.launch([program, mode, str(1 << 20), order, str(tmp_path)], 3, **kwargs)
        assert "AddressSanitizer" not in res.stderr and "runtime error" not in res.stderr, \
            res.stderr
        assert res.returncode == 0, res.stdout + res.stderr
        assert _checks(res.stdout) == (expected_checks(mode, 3), 0)
