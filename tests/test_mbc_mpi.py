"""libtiers-mbc-mpi: unmodified MPI programs over memory-based messaging.

The programs of tests/programs/mbcmpi_* are plain MPI (C and Fortran),
built with mpicc/mpif90 and run under the real launcher with the installed
libtiers-mbc-mpi.so in LD_PRELOAD, at 2 and 4 ranks.  They check every
payload themselves; the statistics file the library writes at MPI_Finalize
(TIERS_MBC_MPI_STATS) must count exactly what they sent, and shows that the
calls were carried by the library rather than passed to MPI.

Set TIERS_MBC_MPI_ASAN_LIB to a libtiers-mbc-mpi.so built with
-DTIERS_SANITIZE=ON (`make test` does, from build/asan) to run the
semantics program under AddressSanitizer too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import build_fortran_program, build_program, needs_mpicc
from tiers import launch, native

LIB = "libtiers-mbc-mpi.so"
RANKS = [2, 4]
# sizes the statistics program sends, one message of each per rank; the
# library's buckets are 0, <=64, <=1 KiB, <=16 KiB, <=256 KiB, <=4 MiB, larger
STATS_SIZES = [0, 5, 64, 65, 1024, 1025, 2000, 16384, 16385, 20000, 262144, 300000,
               4 << 20, (4 << 20) + 1]
BUCKET_MAX = [0, 64, 1024, 16384, 262144, 4 << 20, None]

pytestmark = needs_mpicc


def _lib() -> str:
    path = native.lib_path(LIB)
    if not path.is_file():
        pytest.fail(f"{path} is missing: build and install the native parts (make build)")
    return str(path)


def _kwargs(env: dict[str, str], timeout: float = 240) -> dict:
    kwargs = dict(bind_to="none", oversubscribe=True, timeout=timeout, env=env, check=False)
    if launch.detect().kind == "openmpi":
        kwargs["mca"] = {"mpi_yield_when_idle": "1"}
    return kwargs


def _run(program, ranks: int, env: dict[str, str] | None = None, preload: str | None = None,
         timeout: float = 240):
    full = {"LD_PRELOAD": preload or _lib(), **(env or {})}
    prog = [str(p) for p in program] if isinstance(program, list) else [str(program)]
    return launch.launch(prog, ranks, **_kwargs(full, timeout))


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mbcmpi")
    return {name: build_program(folder, name) for name in
            ("mbcmpi_p2p", "mbcmpi_stats", "mbcmpi_thread", "mbcmpi_small")}


def _stats(prefix: Path, ranks: int) -> list[dict]:
    docs = []
    for r in range(ranks):
        docs.append(json.loads(Path(f"{prefix}.{r}.json").read_text()))
    return docs


def _checks(stdout: str) -> tuple[int, int]:
    m = re.search(r"checks (\d+) failed (\d+)", stdout)
    assert m, stdout
    return int(m.group(1)), int(m.group(2))


# -- semantics ------------------------------------------------------------------

@pytest.mark.parametrize("ranks", RANKS)
def test_p2p_semantics_carried(programs, ranks, tmp_path):
    """Every point-to-point variant, wildcards, ordering, datatypes,
    persistent and mixed requests, communicators, cancel, truncation:
    all checks hold, and the calls went through the library."""
    prefix = tmp_path / "st"
    res = _run(programs["mbcmpi_p2p"], ranks, {"TIERS_MBC_MPI_STATS": str(prefix)})
    assert res.returncode == 0, res.stdout + res.stderr
    checks, failed = _checks(res.stdout)
    assert failed == 0 and checks > 40 * ranks, res.stdout
    docs = _stats(prefix, ranks)
    for r, doc in enumerate(docs):
        assert doc["rank"] == r and doc["size"] == ranks
        carried = doc["carried"]
        for call in ("MPI_Send", "MPI_Recv", "MPI_Isend", "MPI_Irecv", "MPI_Sendrecv",
                     "MPI_Probe", "MPI_Start", "MPI_Cancel", "MPI_Comm_split", "MPI_Comm_dup",
                     "MPI_Cart_create", "MPI_Waitall"):
            assert carried.get(call, 0) > 0, (r, call, carried)
        assert carried.get("MPI_Intercomm_merge") == 1
        # the choice table carries small barriers, broadcasts and allreduces
        assert carried.get("MPI_Barrier", 0) > 0 and carried.get("MPI_Bcast", 0) >= 2
        assert carried.get("MPI_Allreduce", 0) >= 3
        # of the point-to-point traffic only the intercommunicator's one
        # exchange went to MPI
        passed_p2p = {k: v for k, v in doc["passed_to_mpi"].items()
                      if "send" in k.lower() or "recv" in k.lower()}
        assert passed_p2p == {"MPI_Sendrecv": 1}, doc["passed_to_mpi"]
        # the 1 MiB ring message is larger than a FIFO: it went by remote write or in chunks
        assert sum(b["messages"] for b in doc["buckets"]) > 0


def test_p2p_semantics_over_the_rma_transport(programs):
    """The inter-node path (MPI-3 RMA, no direct writes: large messages go
    in FIFO chunks that need the receiver's progress, also while it waits
    on another communicator) forced for every pair."""
    res = _run(programs["mbcmpi_p2p"], 2, {"TIERS_MBC_TRANSPORT": "rma", "OMPI_MCA_osc": "^ucx"})
    assert res.returncode == 0, res.stdout + res.stderr
    checks, failed = _checks(res.stdout)
    assert failed == 0 and checks > 80, res.stdout


@pytest.mark.parametrize("ranks", RANKS)
def test_p2p_program_valid_without_library(programs, ranks):
    """The same program under plain MPI passes: the checks test MPI semantics."""
    res = _run(programs["mbcmpi_p2p"], ranks, {"TIERS_MBC_MPI_OFF": "1"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout)[1] == 0


def test_off_passes_everything_through(programs, tmp_path):
    """TIERS_MBC_MPI_OFF=1: no statistics, no verbose line, program unchanged."""
    prefix = tmp_path / "off"
    res = _run([programs["mbcmpi_stats"], "8"], 2,
               {"TIERS_MBC_MPI_OFF": "1", "TIERS_MBC_MPI_VERBOSE": "1",
                "TIERS_MBC_MPI_STATS": str(prefix)})
    assert res.returncode == 0, res.stderr
    assert "tiers mbc:" not in res.stderr
    assert not list(tmp_path.glob("off.*"))


def test_verbose_line_per_rank(programs):
    res = _run([programs["mbcmpi_stats"], "8"], 2, {"TIERS_MBC_MPI_VERBOSE": "1"})
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("tiers mbc: rank ")]
    assert sorted(ln.split()[3] for ln in lines) == ["0", "1"], res.stderr
    assert all("of 2" in ln and "memory-based" in ln for ln in lines)


# -- statistics -------------------------------------------------------------------

def _bucket(n: int) -> int:
    for i, top in enumerate(BUCKET_MAX):
        if top is None or n <= top:
            return i
    raise AssertionError(n)


@pytest.mark.parametrize("ranks", RANKS)
def test_stats_count_exactly_what_was_sent(programs, ranks, tmp_path):
    prefix = tmp_path / "stats"
    res = _run([programs["mbcmpi_stats"], *map(str, STATS_SIZES)], ranks,
               {"TIERS_MBC_MPI_STATS": str(prefix)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count(" bad 0") == ranks, res.stdout
    want_msgs = [0] * len(BUCKET_MAX)
    want_bytes = [0] * len(BUCKET_MAX)
    for n in STATS_SIZES:
        want_msgs[_bucket(n)] += 1
        want_bytes[_bucket(n)] += n
    # odd-numbered arguments are received with MPI_ANY_SOURCE
    wildcards = sum(1 for i in range(1, len(STATS_SIZES) + 1) if i % 2)
    for r, doc in enumerate(_stats(prefix, ranks)):
        assert doc["rank"] == r and doc["size"] == ranks
        assert [b["max_bytes"] for b in doc["buckets"]] == BUCKET_MAX
        assert [b["messages"] for b in doc["buckets"]] == want_msgs
        assert [b["bytes"] for b in doc["buckets"]] == want_bytes
        # every message went one of the two ways, and only large ones directly
        for b in doc["buckets"]:
            assert b["remote_write"] + b["fifo"] == b["messages"], b
        assert all(b["remote_write"] == 0 for b in doc["buckets"][:3]), doc["buckets"]
        assert doc["wildcard_receives"] == wildcards
        assert 0 <= doc["unexpected"] <= len(STATS_SIZES)
        sends = len(STATS_SIZES)
        assert doc["carried"]["MPI_Isend"] + doc["carried"]["MPI_Send"] == sends
        assert doc["carried"]["MPI_Recv"] == sends
        assert "MPI_Send" not in doc["passed_to_mpi"] and "MPI_Recv" not in doc["passed_to_mpi"]


# what each rank of tests/programs/mbcmpi_small.c sends, by bucket (0 B,
# <=64 B, <=1 KiB, <=16 KiB, <=256 KiB): sizes 0..70, 1024, 4096 and 4097,
# then the even rank of a pair 1 large + 3 + 2 + 3 + 1 small, a window of
# 64 (k % 49 bytes) and 2 more; the odd rank 2 small
SMALL_SENT = {0: [3, 137, 7, 2, 1, 0, 0], 1: [1, 66, 7, 2, 0, 0, 0]}


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_small_messages_fast_and_general_paths(programs, ranks, tmp_path):
    """Small messages where the fast send and receive must step aside for
    the general path: every size around the one-line and two-slot limits,
    a small send behind a queued large one, a receive posted earlier, a
    buffered message of another tag, truncation, a window of receives
    posted after their messages, a cancel of a receive that completed as
    it started.  Every payload and status is right, the statistics count
    every message in its bucket (all small ones through the FIFO), and
    nothing point-to-point went to MPI."""
    prefix = tmp_path / "small"
    res = _run(programs["mbcmpi_small"], ranks, {"TIERS_MBC_MPI_STATS": str(prefix)})
    assert res.returncode == 0, res.stdout + res.stderr
    checks, failed = _checks(res.stdout)
    pairs = ranks // 2
    assert failed == 0 and checks == 438 * pairs, res.stdout
    for r, doc in enumerate(_stats(prefix, ranks)):
        want = SMALL_SENT[r % 2] if r < 2 * pairs else [0] * 7
        assert [b["messages"] for b in doc["buckets"]] == want, (r, doc["buckets"])
        for b in doc["buckets"][:3]:
            assert b["fifo"] == b["messages"] and b["remote_write"] == 0, (r, b)
        passed_p2p = {k: v for k, v in doc["passed_to_mpi"].items()
                      if "send" in k.lower() or "recv" in k.lower()}
        assert passed_p2p == {}, doc["passed_to_mpi"]
        if r < 2 * pairs:
            assert doc["carried"]["MPI_Send"] > 70 and doc["carried"]["MPI_Recv"] > 70


def test_stats_file_is_written_whole(programs, tmp_path):
    """Written as temp + rename: no temporary files remain."""
    prefix = tmp_path / "w"
    res = _run([programs["mbcmpi_stats"], "1", "2"], 2, {"TIERS_MBC_MPI_STATS": str(prefix)})
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.0.json", "w.1.json"]


# -- unsupported calls ----------------------------------------------------------------

@pytest.mark.parametrize("ranks", RANKS)
def test_thread_multiple_is_refused_in_one_line(programs, ranks):
    res = _run(programs["mbcmpi_thread"], ranks, timeout=60)
    assert res.returncode != 0
    assert "provided" not in res.stdout
    ours = [ln for ln in res.stderr.splitlines() if ln.startswith("tiers mbc:")]
    assert ours, res.stderr
    # one line per rank that got that far, all the same line
    assert set(ours) == {"tiers mbc: MPI_Init_thread: not supported (MPI_THREAD_MULTIPLE: "
                         "memory-based messaging supports up to MPI_THREAD_SERIALIZED)"}
    assert len(ours) <= ranks
    # the same program without the library runs
    off = _run(programs["mbcmpi_thread"], ranks, {"TIERS_MBC_MPI_OFF": "1"}, timeout=60)
    assert off.returncode == 0 and off.stdout.count("provided") == ranks


# -- Fortran --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fortran_programs(tmp_path_factory):
    """mbcmpi_f.f90 (`use mpi`) and mbcmpi_f08.f90 (`use mpi_f08`), compiled."""
    folder = tmp_path_factory.mktemp("mbcmpi_f")
    return {name: build_fortran_program(folder, name, required=True)
            for name in ("mbcmpi_f", "mbcmpi_f08")}


@pytest.mark.parametrize("name,ok", [("mbcmpi_f", "fortran ok"), ("mbcmpi_f08", "f08 ok")])
@pytest.mark.parametrize("ranks", RANKS)
def test_fortran_wildcards_carried(fortran_programs, name, ok, ranks, tmp_path):
    prefix = tmp_path / "f"
    res = _run(fortran_programs[name], ranks, {"TIERS_MBC_MPI_STATS": str(prefix)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert ok in res.stdout, res.stdout
    docs = _stats(prefix, ranks)
    # rank 0 took ranks-1 wildcard receives plus its ring receive
    assert docs[0]["carried"]["MPI_Recv"] == ranks - 1
    assert docs[0]["wildcard_receives"] == ranks
    for doc in docs:
        assert doc["carried"]["MPI_Isend"] == 1 and doc["carried"]["MPI_Waitall"] == 1
    sent = sum(b["messages"] for d in docs for b in d["buckets"])
    assert sent == (ranks - 1) + ranks


# -- composition with the tracer ------------------------------------------------------

def test_composes_with_tracer(programs, tmp_path):
    """`tiers trace`'s tracer first in LD_PRELOAD, this library second: the
    program still passes and the library still carries its messages."""
    tracer = native.lib_path("libtiers-trace.so")
    if not tracer.is_file():
        pytest.fail(f"{tracer} missing")
    from tiers.trace import trace_env

    prefix = tmp_path / "tr"
    (tmp_path / "trace").mkdir()
    env = trace_env(tmp_path / "trace", 1 << 20, "auto", None, None)
    env["LD_PRELOAD"] = f"{tracer}:{_lib()}"
    env["TIERS_MBC_MPI_STATS"] = str(prefix)
    res = _run([programs["mbcmpi_stats"], "0", "100", "70000"], 2, env, preload=env["LD_PRELOAD"])
    assert res.returncode == 0, res.stdout + res.stderr
    docs = _stats(prefix, 2)
    # the program's 70000-byte message was carried (the tracer's own
    # messages, sent through PMPI_, are small and carried too)
    assert all(d["buckets"][4]["messages"] == 1 and d["buckets"][4]["bytes"] == 70000
               for d in docs), docs
    assert all(d["carried"]["MPI_Isend"] >= 2 for d in docs)
    raw = sorted(p.name for p in (tmp_path / "trace" / "raw").iterdir())
    assert len(raw) >= 2, raw


# -- AddressSanitizer -----------------------------------------------------------------

ASAN_LIB = os.environ.get("TIERS_MBC_MPI_ASAN_LIB")


def _libasan() -> str:
    out = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True)
    return os.path.realpath(out.stdout.strip())


@pytest.mark.skipif(not ASAN_LIB, reason="TIERS_MBC_MPI_ASAN_LIB (an ASan build) not set")
@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("program", ["mbcmpi_p2p", "mbcmpi_small"])
def test_p2p_under_address_sanitizer(programs, ranks, program):
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:verify_asan_link_order=0"}
    res = _run(programs[program], ranks, env, preload=f"{_libasan()}:{ASAN_LIB}",
               timeout=400)
    assert "AddressSanitizer" not in res.stderr and "runtime error" not in res.stderr, res.stderr
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout)[1] == 0


def test_exports_only_mpi_names():
    """The library lives inside someone else's program: it exports the MPI
    functions it stands in for and nothing else (libtiers-mbc compiled in
    stays hidden)."""
    out = subprocess.run(["nm", "-D", "--defined-only", _lib()], capture_output=True, text=True,
                         check=True).stdout
    names = [ln.split()[-1] for ln in out.splitlines() if ln.strip()]
    assert names
    assert [n for n in names if not n.startswith(("MPI_", "PMPI_"))] == []
    for fn in ("MPI_Send", "PMPI_Send", "MPI_Waitall", "PMPI_Comm_split", "MPI_Init_thread"):
        assert fn in names


# -- synchronous mode ------------------------------------------------------------

@pytest.fixture(scope="module")
def ssend_program(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("mbcmpi_ssend"), "mbcmpi_ssend")


def _ssend_checks(ranks: int) -> int:
    # per pair of ranks: 6 late-receiver cases (the MPI_Issend one checks
    # twice on the sender), 2 posted-first cases, 48 reversed-order
    # messages, 2 cancelled receives (2 checks each)
    return (2 * 6 + 1 + 2 * 2 + 48 + 2 * 2) * (ranks // 2)


@pytest.mark.parametrize("ranks", RANKS + [3])
def test_ssend_waits_for_the_matching_receive(ssend_program, ranks, tmp_path):
    """MPI_Ssend, MPI_Issend and MPI_Ssend_init to a receiver that posts its
    receive 0.3 s late do not complete before it (measured with MPI_Wtime,
    bound 0.2 s), in one FIFO line, several, in chunks and to a wildcard
    receive; a standard MPI_Send does not wait; posted-first receives
    (FIFO and remote write) and 48 synchronous sends taken in reverse
    order deliver the right data; a receive cancelled after it asked its
    sender for a remote write is cancelled, and the message sent afterwards
    reaches the next receive, not the cancelled buffer.  Every call was
    carried by the library."""
    prefix = tmp_path / "st"
    res = _run(ssend_program, ranks, {"TIERS_MBC_MPI_STATS": str(prefix)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout) == (_ssend_checks(ranks), 0), res.stdout
    for r, doc in enumerate(_stats(prefix, ranks)):
        if r % 2 == 0 and r + 1 >= ranks:
            continue  # the rank without a partner (3 ranks) only joins the barriers
        carried = doc["carried"]
        calls = ("MPI_Ssend", "MPI_Issend", "MPI_Ssend_init") if r % 2 == 0 else ("MPI_Recv",)
        for call in calls:
            assert carried.get(call, 0) > 0, (r, call, carried)
        assert not any("send" in k.lower() for k in doc["passed_to_mpi"]), doc["passed_to_mpi"]


def test_ssend_over_the_rma_transport(ssend_program):
    """The same synchronous semantics on the inter-node path (MPI-3 RMA)."""
    res = _run(ssend_program, 2, {"TIERS_MBC_TRANSPORT": "rma", "OMPI_MCA_osc": "^ucx"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout) == (_ssend_checks(2), 0), res.stdout


def test_ssend_program_valid_without_library(ssend_program):
    """The program's checks hold under the MPI library alone (so they test
    MPI's synchronous-mode rule, not an artefact of the library)."""
    res = launch.launch([ssend_program], 2, **_kwargs({}))
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout) == (_ssend_checks(2), 0), res.stdout


# -- matched probes --------------------------------------------------------------

@pytest.fixture(scope="module")
def mprobe_program(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("mbcmpi_mprobe"), "mbcmpi_mprobe")


def _mprobe_checks(ranks: int) -> int:
    # per pair: 24 ordered messages (probe and receive checks each), 2 on
    # the matching queue, 4 MPI_Improbe/MPI_Imrecv, 1 vector, 1 truncation,
    # 2 communicators; 4 MPI_PROC_NULL checks per rank; 1 wildcard check
    return (2 * 24 + 2 + 4 + 1 + 1 + 2) * (ranks // 2) + 4 * ranks + 1


@pytest.mark.parametrize("ranks", RANKS)
def test_matched_probes(mprobe_program, ranks, tmp_path):
    """MPI_Mprobe/MPI_Improbe with MPI_Mrecv/MPI_Imrecv: messages of mixed
    tags and sizes (0 B to 200 KB) come in the order sent with the right
    MPI_Get_count; a matched message is off the matching queue (the next
    MPI_Recv of that source and tag gets the following message); a vector
    receive type, truncation (MPI_ERR_TRUNCATE), a duplicate's message not
    matched on MPI_COMM_WORLD, MPI_MESSAGE_NO_PROC for MPI_PROC_NULL, and
    wildcard-source, wildcard-tag probes at rank 0 that take every rank's
    messages exactly once and in order.  Every matched probe and matched
    receive was carried by the library, none passed to MPI."""
    prefix = tmp_path / "st"
    res = _run(mprobe_program, ranks, {"TIERS_MBC_MPI_STATS": str(prefix)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout) == (_mprobe_checks(ranks), 0), res.stdout
    for r, doc in enumerate(_stats(prefix, ranks)):
        carried = doc["carried"]
        # odd ranks take 24 + 1 + 1 + 1 + 2 messages by MPI_Mprobe, plus the
        # MPI_PROC_NULL probe; rank 0 takes 2 per other rank
        want = 30 if r % 2 else 1 + (2 * (ranks - 1) if r == 0 else 0)
        assert carried.get("MPI_Mprobe") == want, (r, carried)
        assert carried.get("MPI_Mrecv") == want, (r, carried)
        assert carried.get("MPI_Imrecv") == (2 if r % 2 else 1), (r, carried)
        assert not [k for k in doc["passed_to_mpi"] if "probe" in k.lower() or "recv" in k.lower()]


def test_matched_probes_over_the_rma_transport(mprobe_program):
    """The same on the inter-node path (MPI-3 RMA)."""
    res = _run(mprobe_program, 2, {"TIERS_MBC_TRANSPORT": "rma", "OMPI_MCA_osc": "^ucx"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout) == (_mprobe_checks(2), 0), res.stdout


@pytest.mark.parametrize("ranks", [3])
def test_matched_probes_program_valid_without_library(mprobe_program, ranks):
    """The program's checks hold under the MPI library alone, at an odd
    rank count too (the last rank has no partner)."""
    res = launch.launch([mprobe_program], ranks, **_kwargs({}))
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout) == ((2 * 24 + 10) + 4 * 3 + 1, 0), res.stdout


@pytest.mark.skipif(not ASAN_LIB, reason="TIERS_MBC_MPI_ASAN_LIB (an ASan build) not set")
def test_ssend_and_cancel_under_address_sanitizer(ssend_program):
    """The acknowledgement and withdraw paths under AddressSanitizer."""
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:verify_asan_link_order=0"}
    res = _run(ssend_program, 2, env, preload=f"{_libasan()}:{ASAN_LIB}", timeout=400)
    assert "AddressSanitizer" not in res.stderr and "runtime error" not in res.stderr, res.stderr
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout) == (_ssend_checks(2), 0), res.stdout


@pytest.mark.skipif(not ASAN_LIB, reason="TIERS_MBC_MPI_ASAN_LIB (an ASan build) not set")
def test_matched_probes_under_address_sanitizer(mprobe_program):
    """The matched-message buffers (bound receives, MPI_Mrecv/MPI_Imrecv
    unpacking, truncation) under AddressSanitizer."""
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:verify_asan_link_order=0"}
    res = _run(mprobe_program, 2, env, preload=f"{_libasan()}:{ASAN_LIB}", timeout=400)
    assert "AddressSanitizer" not in res.stderr and "runtime error" not in res.stderr, res.stderr
    assert res.returncode == 0, res.stdout + res.stderr
    assert _checks(res.stdout) == (_mprobe_checks(2), 0), res.stdout
