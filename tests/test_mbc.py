"""Memory-based message passing (libtiers-mbc) under real mpirun: ordering,
wildcards, sizes, many outstanding requests, full and wrapping FIFOs, the
forced stale-request race, mixed paths, the single-copy rendezvous, barrier,
allreduce, truncation and bad arguments, checked by tiers-mbc-check (native/tests/mpi/test_mbc.c),
which verifies every payload byte and reports the per-path counters.

Set TIERS_MBC_ASAN_CHECK to a tiers-mbc-check built with
-DTIERS_SANITIZE=ON to run the suite under AddressSanitizer too (see
docs/mbc.md)."""

from __future__ import annotations

import json
import os

import pytest

from tiers import launch, native

CHECK = "tiers-mbc-check"
RANKS = [2, 3, 4]
TESTS = ["ordering", "wildcards", "sizes", "many", "fifo", "race", "mixed", "single",
         "barrier", "allreduce", "truncate", "badargs", "timeout"]
# sizes the sizes test sends, and how many of them reach direct_min_bytes (16384)
SIZES = [0, 1, 7, 8, 63, 4095, 4096, 4097, 65536, 65537, 1 << 20, (4 << 20) + 3]
BIG = sum(1 for s in SIZES if s >= 16384)


def _kwargs():
    kwargs = dict(bind_to="none", oversubscribe=True, timeout=240)
    if launch.detect().kind == "openmpi":
        kwargs["mca"] = {"mpi_yield_when_idle": "1"}
    return kwargs


def _run(test: str, ranks: int, *args: str, program: str | None = None,
         single_copy: bool = True):
    prog = program or str(native.tool_path(CHECK))
    kwargs = _kwargs()
    # the suite's transport is what the arguments say, whatever the caller's
    # environment; single_copy=False turns the single-copy rendezvous off
    kwargs["env"] = {"TIERS_MBC_TRANSPORT": "auto",
                     "TIERS_MBC_SINGLE_COPY": "1" if single_copy else "0"}
    doc = launch.launch_json([prog, test, *args], ranks, **kwargs)
    assert doc["schema"] == "tiers.mbc-check/1"
    assert doc["test"] == test and doc["ranks"] == ranks
    assert doc["failures"] == [] and doc["wrong"] == 0, doc["failures"]
    assert doc["ok"] is True
    assert len(doc["stats"]) == ranks
    return doc


def _sum(doc, key):
    return sum(s[key] for s in doc["stats"])


def _paths_add_up(s):
    """Every message sent took exactly one path."""
    assert s["msgs_sent"] == (s["msgs_direct"] + s["msgs_fifo"] + s["msgs_answered_fifo"]
                              + s["msgs_read"])
    assert s["bytes_sent"] == (s["bytes_direct"] + s["bytes_fifo"] + s["bytes_answered_fifo"]
                               + s["bytes_read"])


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("test", TESTS)
def test_check_passes(test, ranks):
    doc = _run(test, ranks)
    assert doc["checked"] > 0
    # every message sent was received, and the global counters are the sums
    assert doc["total"]["msgs_sent"] == _sum(doc, "msgs_sent")
    assert _sum(doc, "msgs_sent") == _sum(doc, "msgs_received")
    for s in doc["stats"]:
        _paths_add_up(s)
        assert s["requests_used"] + s["requests_stale"] <= s["requests_received"]


@pytest.mark.parametrize("ranks", RANKS)
def test_payload_checks_cover_every_message(ranks):
    doc = _run("ordering", ranks, "--count", "40")
    # each rank verifies 40 messages from every rank (itself included)
    assert doc["checked"] >= ranks * ranks * 40
    assert doc["total"]["msgs_received"] == ranks * ranks * 40


@pytest.mark.parametrize("ranks", RANKS)
def test_forced_stale_request_is_dropped_and_fifo_copy_delivered(ranks):
    doc = _run("race", ranks)
    forced = doc["after_forced_phase"]
    # phase 1: rank 0 asked (one send request), rank 1 wrote into the FIFO
    # before reading it
    assert forced[0]["requests_sent"] == 1
    assert forced[1]["msgs_direct"] == 0
    # unasked: left to be read (32 KiB, single copy) where direct copies work
    unasked = "msgs_read" if doc["direct_available"] else "msgs_fifo"
    assert forced[1][unasked] == 1
    assert forced[1]["msgs_fifo"] + forced[1]["msgs_read"] == 1
    assert forced[0]["msgs_received"] == 1 and forced[0]["bytes_received"] == 32768
    assert forced[0]["msgs_unexpected"] == 0        # matched to the posted receive
    final = doc["stats"]
    # the request was recognised as stale and dropped, exactly once
    assert final[1]["requests_stale"] == 1
    assert final[0]["requests_sent"] == 2
    assert doc["total"]["msgs_sent"] == 2 and doc["total"]["bytes_sent"] == 2 * 32768
    if doc["direct_available"]:
        # phase 2 (no hook): the fresh request was used for a direct write
        assert final[1]["requests_used"] == 1 and final[1]["msgs_direct"] == 1
        assert final[1]["bytes_direct"] == 32768
        assert doc["total"]["direct_share"] == pytest.approx(0.5)
    for s in final[2:]:
        assert s["msgs_sent"] == 0 and s["requests_sent"] == 0


@pytest.mark.parametrize("ranks", RANKS)
def test_sizes_take_the_expected_paths(ranks):
    doc = _run("sizes", ranks)
    n = len(SIZES)
    big_bytes = sum(x for x in SIZES if x >= 16384)
    for s in doc["stats"]:
        assert s["msgs_sent"] == 2 * n
        assert s["bytes_sent"] == 2 * sum(SIZES)
        if doc["direct_available"]:
            # posted first: the big ones written direct; posted late: the
            # big ones left in the send buffer and copied by the receiver
            # (single copy); the small ones (receive buffer below
            # direct_min_bytes) never asked: through the FIFO unasked
            assert s["msgs_direct"] == BIG and s["bytes_direct"] == big_bytes
            assert s["msgs_read"] == BIG and s["bytes_read"] == big_bytes
            assert s["msgs_answered_fifo"] == 0
            assert s["msgs_fifo"] == 2 * n - 2 * BIG
            # nothing long went through the FIFO: one entry per message
            assert s["fifo_chunks"] == s["msgs_fifo"]
        else:
            # the 4 MiB message cannot fit a 64 KiB FIFO whole
            assert s["fifo_chunks"] > s["msgs_fifo"] + s["msgs_answered_fifo"]


@pytest.mark.parametrize("ranks", [2, 4])
def test_sizes_without_single_copy_go_through_the_fifo(ranks):
    """TIERS_MBC_SINGLE_COPY=0: the two-copy path, the same bytes arrive."""
    doc = _run("sizes", ranks, single_copy=False)
    n = len(SIZES)
    for s in doc["stats"]:
        assert s["msgs_read"] == 0 and s["bytes_read"] == 0
        assert s["msgs_sent"] == 2 * n
        if doc["direct_available"]:
            assert s["msgs_direct"] == BIG
            assert s["msgs_fifo"] == 2 * n - BIG
        # the late 4 MiB message cannot fit a 64 KiB FIFO whole
        assert s["fifo_chunks"] > s["msgs_fifo"] + s["msgs_answered_fifo"]


@pytest.mark.parametrize("single_copy", [True, False])
@pytest.mark.parametrize("ranks", RANKS)
def test_single_copy_rendezvous_keeps_order_and_holds_the_send(ranks, single_copy):
    """Long and short messages of one tag, all sent before any receive,
    arrive whole and in order through source, ANY_SOURCE and ANY_TAG
    receives (tiers-mbc-check verifies every byte and that a long send left
    to be read does not complete before its receive is posted); with the
    rendezvous on, the 7 long ones and the held one go by single copy."""
    doc = _run("single", ranks, single_copy=single_copy)
    for s in doc["stats"]:
        _paths_add_up(s)
        assert s["msgs_sent"] == 16 and s["msgs_received"] == 16
        if single_copy and doc["direct_available"]:
            assert s["msgs_read"] == 8
            assert s["bytes_read"] == 100000 + 70000 + 20000 + 300000 + 16384 + 2 * (1 << 20) \
                + 256 * 1024
            assert s["msgs_fifo"] == 8      # the 7 short ones and the send to itself
        else:
            assert s["msgs_read"] == 0 and s["msgs_fifo"] == 16


def test_single_copy_environment_is_checked():
    prog = str(native.tool_path(CHECK))
    kwargs = _kwargs()
    kwargs["env"] = {"TIERS_MBC_SINGLE_COPY": "maybe"}
    res = launch.launch([prog, "ordering"], 2, check=False, **kwargs)
    assert res.returncode != 0
    assert "TIERS_MBC_SINGLE_COPY=maybe is not 0 or 1" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("ranks", [2, 4])
def test_direct_off_sends_everything_through_the_fifo(ranks):
    for test in ("sizes", "mixed", "ordering"):
        doc = _run(test, ranks, "--direct", "off")
        assert doc["direct_available"] == 0
        assert doc["total"]["msgs_direct"] == 0 and doc["total"]["msgs_read"] == 0
        assert doc["total"]["requests_sent"] == 0
        assert doc["total"]["msgs_fifo"] == doc["total"]["msgs_sent"]


@pytest.mark.parametrize("ranks", RANKS)
def test_full_fifo_makes_senders_wait_without_loss(ranks):
    doc = _run("fifo", ranks)
    assert doc["fifo_bytes"] == 4096
    # 50 messages of 1000 B into a 4 KiB FIFO whose reader comes late
    assert _sum(doc, "fifo_full_waits") >= ranks
    assert _sum(doc, "msgs_sent") == ranks * 50 + 2


@pytest.mark.parametrize("ranks", RANKS)
def test_truncation_reported_on_every_path(ranks):
    doc = _run("truncate", ranks)
    assert doc["stats"][0]["truncations"] == 4
    assert doc["stats"][0]["bytes_received"] == 40000 + 60 + 40000 + 60
    if doc["direct_available"]:
        # big posted: written direct; big late: copied by the receiver
        assert doc["stats"][1]["msgs_direct"] == 1 and doc["stats"][1]["msgs_read"] == 1


def test_usage_error_is_one_line():
    prog = str(native.tool_path(CHECK))
    res = launch.launch([prog, "no-such-test"], 2, check=False, **_kwargs())
    assert res.returncode != 0
    assert "usage: tiers-mbc-check" in res.stderr


ASAN = os.environ.get("TIERS_MBC_ASAN_CHECK")


@pytest.mark.skipif(not ASAN, reason="TIERS_MBC_ASAN_CHECK (an ASan build) not set")
@pytest.mark.parametrize("transport", ["auto", "rma"])
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("test", TESTS)
def test_under_address_sanitizer(test, ranks, transport, monkeypatch):
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
    kwargs = _kwargs()
    kwargs["env"] = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1"}
    res = launch.launch([ASAN, test, "--transport", transport], ranks, **kwargs)
    assert "AddressSanitizer" not in res.stderr and "runtime error" not in res.stderr
    doc = res.json(CHECK)
    assert doc["ok"] is True and doc["wrong"] == 0


@pytest.mark.parametrize("ranks", [2, 4])
def test_mixed_uses_every_path(ranks):
    doc = _run("mixed", ranks)
    sender = doc["stats"][1]
    if doc["direct_available"]:
        # 8 KiB messages asked for go direct, 100 B and 0 B ones asked for
        # are answered through the FIFO, the rest go unasked
        assert sender["msgs_direct"] > 0
        assert sender["msgs_answered_fifo"] > 0
    assert sender["msgs_fifo"] > 0
    assert sender["msgs_sent"] == 50


# -- the inter-node transport (MPI-3 RMA), forced for every pair ---------------

@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("test", TESTS)
def test_rma_transport_passes_the_suite(test, ranks):
    doc = _run(test, ranks, "--transport", "rma")
    assert doc["transport"] == "rma"
    assert doc["direct_available"] == 0
    assert doc["checked"] > 0
    tot = doc["total"]
    # every message took the RMA path, and none was written directly
    assert tot["msgs_rma"] == tot["msgs_sent"] and tot["bytes_rma"] == tot["bytes_sent"]
    assert tot["msgs_shm"] == 0 and tot["msgs_direct"] == 0 and tot["requests_sent"] == 0
    assert tot["msgs_read"] == 0
    assert tot["msgs_sent"] == tot["msgs_received"]


@pytest.mark.parametrize("ranks", [2, 3])
def test_shm_transport_counts_its_path(ranks):
    doc = _run("ordering", ranks, "--transport", "shm")
    assert doc["transport"] == "shm"
    tot = doc["total"]
    assert tot["msgs_shm"] == tot["msgs_sent"] == ranks * ranks * 50
    assert tot["msgs_rma"] == 0


def test_transport_environment_is_checked():
    prog = str(native.tool_path(CHECK))
    kwargs = _kwargs()
    kwargs["env"] = {"TIERS_MBC_TRANSPORT": "carrier-pigeon"}
    res = launch.launch([prog, "ordering"], 2, check=False, **kwargs)
    assert res.returncode != 0
    assert "TIERS_MBC_TRANSPORT=carrier-pigeon" in res.stderr
    assert "Traceback" not in res.stderr


# -- failure: a peer that exits without destroying the layer -------------------

@pytest.mark.parametrize("ranks", [2, 3])
def test_peer_exit_ends_waits_with_an_error(ranks):
    prog = str(native.tool_path(CHECK))
    kwargs = _kwargs()
    kwargs["timeout"] = 120
    if launch.detect().kind == "openmpi":
        kwargs["mca"] = dict(kwargs.get("mca", {}), orte_allowed_exit_without_sync="1")
    # a time limit far above what the liveness check needs: the wait must
    # end because the peer is gone, not because the limit passed
    res = launch.launch([prog, "peer-exit", "--timeout", "60"], ranks, check=False, **kwargs)
    lines = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert sorted(d["rank"] for d in lines) == list(range(ranks - 1))
    for d in lines:
        assert d["victim"] == ranks - 1
        assert d["rc"] == 7                      # TIERS_ERR_STATE
        assert f"rank {ranks - 1} exited" in d["message"]
        assert d["seconds"] < 30
        assert d["destroy_rc"] == 7 and d["handle_cleared"] is True


# -- across the nodes of a tiers vcluster: shared memory inside, RMA between -----

VC_LOCK = "/tmp/tiers-vcluster.lock"
# the check's barrier test counts arrivals in one shared window over the
# node, which assumes a single node; every other test runs across nodes
VC_TESTS = [t for t in TESTS if t != "barrier"]
VC_K = 50     # messages per pair of the ordering test (its default)


def _vcluster_skip_reason():
    import shutil

    from tiers import vcluster
    why = vcluster.unavailable_reason()
    if why is None and shutil.which("mpirun") is None:
        why = "Open MPI's mpirun is not on PATH"
    if why is None and (vcluster.state_path().exists() or vcluster.leftovers()):
        why = "a virtual cluster is up already; the tests leave it alone"
    return why


@pytest.fixture(scope="module")
def two_nodes_locked():
    """2 nodes x 2 slots, built and always taken down under an exclusive
    lock on /tmp/tiers-vcluster.lock (the cluster is one per machine)."""
    import fcntl

    from conftest import run_tiers
    from tiers import vcluster
    why = _vcluster_skip_reason()
    if why:
        pytest.skip(why)
    with open(VC_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            why = _vcluster_skip_reason()    # someone may have built one meanwhile
            if why:
                pytest.skip(why)
            try:
                run = run_tiers("vcluster", "up", "--nodes", "2", "--slots", "2", timeout=120)
                assert run.returncode == 0, run.stderr
                yield vcluster.load_state()
            finally:
                run = run_tiers("vcluster", "down", timeout=120)
                assert run.returncode == 0, run.stderr
                assert vcluster.leftovers() == []
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _vc_check(test: str) -> dict:
    from conftest import run_tiers
    # Debian's Open MPI disables osc/pt2pt, the one-sided component that
    # works over TCP: the RMA transport needs it between the nodes
    run = run_tiers("vcluster", "mpirun", "-n", "4", "--timeout", "120", "--",
                    str(native.tool_path(CHECK)), test, "--transport", "auto",
                    env={"OMPI_MCA_osc": "^ucx"}, timeout=180)
    assert run.returncode == 0, run.stderr
    doc = json.loads([ln for ln in run.stdout.splitlines() if ln.startswith("{")][-1])
    assert doc["schema"] == "tiers.mbc-check/1" and doc["test"] == test and doc["ranks"] == 4
    assert doc["failures"] == [] and doc["wrong"] == 0 and doc["ok"] is True, doc["failures"]
    return doc


def test_suite_across_vcluster_nodes_uses_both_transports(two_nodes_locked):
    """4 ranks on 2 nodes (ranks 0,1 on one, 2,3 on the other): every test
    of the suite passes; messages between node peers go by shared memory,
    between nodes by MPI-3 RMA, and only node peers are written directly."""
    shm = rma = 0
    for test in VC_TESTS:
        doc = _vc_check(test)
        assert doc["transport"] == "shm+rma"
        tot = doc["total"]
        assert tot["msgs_sent"] == tot["msgs_received"]
        assert tot["msgs_shm"] + tot["msgs_rma"] == tot["msgs_sent"]
        assert tot["bytes_shm"] + tot["bytes_rma"] == tot["bytes_sent"]
        for s in doc["stats"]:
            _paths_add_up(s)
            # direct remote writes and reads exist on the shared-memory path only
            assert s["msgs_direct"] + s["msgs_read"] <= s["msgs_shm"]
        shm += tot["msgs_shm"]
        rma += tot["msgs_rma"]
        if test == "ordering":
            # each rank sends VC_K messages to each of the 4 ranks: to itself
            # and its node peer by shared memory, to the 2 others by RMA
            for s in doc["stats"]:
                assert s["msgs_shm"] == 2 * VC_K and s["msgs_rma"] == 2 * VC_K
        if test == "sizes":
            # rank r sends to r+1: 0->1 and 2->3 inside a node, 1->2 and 3->0 across
            st = doc["stats"]
            assert st[0]["msgs_rma"] == st[2]["msgs_rma"] == 0
            assert st[1]["msgs_shm"] == st[3]["msgs_shm"] == 0
            assert st[1]["msgs_direct"] == st[3]["msgs_direct"] == 0
            if doc["direct_available"]:
                assert st[0]["msgs_direct"] == st[2]["msgs_direct"] == BIG
    assert shm > 0 and rma > 0
