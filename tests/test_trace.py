"""tiers trace: real MPI programs traced under mpirun at 2 and 4 ranks.

The traced programs live in tests/programs/ and are compiled by this module
with mpicc into a temporary folder (so no test binary is installed).  Every
check compares with what the programs are known to send: exact call counts,
byte counts and the communication matrix; the OTF2 archive is read back by
Debian's otf2-print and by the otf2 Python reader, event for event.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_tiers

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = Path(__file__).resolve().parent / "programs"
MPIRUN = ["mpirun", "--oversubscribe"]

needs_mpi = pytest.mark.skipif(not shutil.which("mpicc") or not shutil.which("mpirun"),
                               reason="needs mpicc and mpirun")


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """Compile the traced test programs; return {name: path}."""
    out = tmp_path_factory.mktemp("trace-programs")
    built = {}
    for name, flags in (("trace_mix", []), ("trace_pingpong", []),
                        ("trace_threads", ["-fopenmp"])):
        exe = out / name
        subprocess.run(["mpicc", "-O1", *flags, "-o", str(exe), str(PROGRAMS / f"{name}.c")],
                       check=True, capture_output=True)
        built[name] = str(exe)
    return built


def build_fortran(tmp_path_factory, name):
    """Compile tests/programs/NAME.f90 with mpif90; return its path (skip
    when there is no Fortran MPI compiler or it cannot build NAME)."""
    fc = shutil.which("mpif90") or shutil.which("mpifort")
    if not fc:
        pytest.skip("needs mpif90 (gfortran and the MPI Fortran bindings)")
    exe = tmp_path_factory.mktemp("trace-fortran") / name
    proc = subprocess.run([fc, "-O1", "-o", str(exe), str(PROGRAMS / f"{name}.f90")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mpif90 cannot build {name} here: {proc.stderr.strip()[:200]}")
    return str(exe)


@pytest.fixture(scope="module")
def fortran_program(tmp_path_factory):
    """tests/programs/trace_f.f90 (`use mpi`), compiled."""
    return build_fortran(tmp_path_factory, "trace_f")


@pytest.fixture(scope="module")
def fortran08_program(tmp_path_factory):
    """tests/programs/trace_f08.f90 (`use mpi_f08`), compiled."""
    return build_fortran(tmp_path_factory, "trace_f08")


def trace(tmp_path, *args, out="trace"):
    folder = tmp_path / out
    run = run_tiers("trace", "--out", str(folder), *args)
    return run, folder


def summary(folder):
    import json
    return json.loads((folder / "summary.json").read_text())


# --------------------------------------------------------------------------
# What trace_mix sends, computed independently of the tracer


def mix_expected(n):
    """Return (bytes matrix, messages matrix, per-rank call counts) of trace_mix on n ranks."""
    b = [[0] * n for _ in range(n)]
    m = [[0] * n for _ in range(n)]

    def add(i, j, nbytes, count=1):
        b[i][j] += nbytes * count
        m[i][j] += count

    calls = [collections.Counter() for _ in range(n)]
    for r in range(n):
        add(r, r ^ 1, 1024 * 8, 5)                  # blocking pairs
        calls[r].update({"MPI_Send": 5, "MPI_Recv": 5})
        add(r, (r + 1) % n, 256 * 4, 3)             # non-blocking ring
        calls[r].update({"MPI_Irecv": 3, "MPI_Isend": 3, "MPI_Waitall": 3})
        if r > 0:                                   # wildcard receives at rank 0
            add(r, 0, 10 * r * 4)
            calls[r]["MPI_Send"] += 1
            calls[0]["MPI_Recv"] += 1
        calls[r].update({"MPI_Barrier": 1, "MPI_Bcast": 1, "MPI_Allreduce": 2, "MPI_Gather": 1,
                         "MPI_Alltoall": 1, "MPI_Comm_split": 1, "MPI_Comm_free": 1,
                         "MPI_Init": 1, "MPI_Finalize": 1})
    members = {c: [r for r in range(n) if r % 2 == c] for c in (0, 1)}
    for c, ranks in members.items():               # one Send inside each sub-communicator
        if len(ranks) >= 2:
            add(ranks[0], ranks[1], 2 * 8)
            calls[ranks[0]]["MPI_Send"] += 1
            calls[ranks[1]]["MPI_Recv"] += 1
    return b, m, calls


def fortran_expected(n):
    """Return (bytes matrix, messages matrix, per-rank call counts) of trace_f on n ranks."""
    b = [[0] * n for _ in range(n)]
    m = [[0] * n for _ in range(n)]

    def add(i, j, nbytes, count=1):
        b[i][j] += nbytes * count
        m[i][j] += count

    calls = [collections.Counter() for _ in range(n)]
    for r in range(n):
        right = (r + 1) % n
        add(r, r ^ 1, 512 * 8, 4)                   # blocking pairs
        calls[r].update({"MPI_Send": 4, "MPI_Recv": 4})
        add(r, right, 100 * 4, 2)                   # ring, MPI_STATUSES_IGNORE
        add(r, right, 50 * 4)                       # ring, a statuses array
        calls[r].update({"MPI_Irecv": 3, "MPI_Isend": 3, "MPI_Waitall": 3})
        add(r, r ^ 1, 7 * 8)                        # Irecv + Send + Wait
        calls[r].update({"MPI_Irecv": 1, "MPI_Send": 1, "MPI_Wait": 1})
        if r > 0:                                   # wildcard receives at rank 0
            add(r, 0, 5 * r * 4)
            calls[r]["MPI_Send"] += 1
            calls[0]["MPI_Recv"] += 1
        add(r, right, 6 * 4)                        # Sendrecv
        calls[r].update({"MPI_Sendrecv": 1, "MPI_Barrier": 1, "MPI_Bcast": 1,
                         "MPI_Allreduce": 2, "MPI_Gather": 1, "MPI_Reduce": 1,
                         "MPI_Comm_split": 1, "MPI_Comm_free": 1, "MPI_Init": 1,
                         "MPI_Finalize": 1})
    for c in (0, 1):                                # one Send inside each sub-communicator
        ranks = [r for r in range(n) if r % 2 == c]
        if len(ranks) >= 2:
            add(ranks[0], ranks[1], 3 * 8)
            calls[ranks[0]]["MPI_Send"] += 1
            calls[ranks[1]]["MPI_Recv"] += 1
    return b, m, calls


def threads_expected(n, nthreads, rounds):
    """Return (bytes matrix, messages matrix, per-rank call counts) of trace_threads."""
    b = [[0] * n for _ in range(n)]
    m = [[0] * n for _ in range(n)]
    calls = [collections.Counter() for _ in range(n)]
    for r in range(n):
        for t in range(nthreads):
            b[r][r ^ 1] += rounds * (t + 1) * 100 * 4 + (t + 1) * 10 * 4
            m[r][r ^ 1] += rounds + 1
        calls[r].update({"MPI_Send": rounds * nthreads, "MPI_Recv": rounds * nthreads,
                         "MPI_Irecv": nthreads, "MPI_Isend": nthreads, "MPI_Waitall": nthreads,
                         "MPI_Barrier": 1, "MPI_Allreduce": 1, "MPI_Init_thread": 1,
                         "MPI_Finalize": 1})
    return b, m, calls


def assert_counts_and_matrix(doc, expected):
    """The summary holds exactly the expected matrix and per-rank call counts."""
    b, m, calls = expected
    s = doc["summary"]
    assert s["comm_matrix"]["bytes"] == b
    assert s["comm_matrix"]["messages"] == m
    assert s["p2p_bytes"] == sum(map(sum, b))
    assert s["matched_p2p_bytes"] == s["p2p_bytes"]   # every send found its receive
    for rank in doc["samples"]["ranks"]:
        got = {f: e["calls"] for f, e in rank["functions"].items()}
        assert got == dict(calls[rank["rank"]]), rank["rank"]
        assert rank["finalized"] and rank["stopped"] is None


def otf2_print_counts(anchor):
    out = subprocess.run(["otf2-print", str(anchor)], capture_output=True, text=True,
                         check=True).stdout
    counts = collections.Counter()
    started = False
    for line in out.splitlines():
        if line.startswith("-----"):
            started = True
            continue
        if started and line.strip():
            counts[line.split()[0]] += 1
    return counts


# --------------------------------------------------------------------------


def test_wrappers_regenerate_without_diff():
    proc = subprocess.run([sys.executable, str(ROOT / "native/src/trace/wrapgen.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_mix_counts_bytes_and_matrix(tmp_path, programs, n):
    run, folder = trace(tmp_path, "--", *MPIRUN, "-n", str(n), programs["trace_mix"])
    assert run.returncode == 0, run.stderr
    doc = summary(folder)
    assert doc["schema"] == "tiers.trace/1"
    s = doc["summary"]
    b, m, calls = mix_expected(n)
    assert s["comm_matrix"]["bytes"] == b
    assert s["comm_matrix"]["messages"] == m
    assert s["p2p_bytes"] == sum(map(sum, b))
    assert s["p2p_messages"] == sum(map(sum, m))
    assert s["matched_p2p_bytes"] == s["p2p_bytes"]   # every send found its receive
    for rank in doc["samples"]["ranks"]:
        got = {f: e["calls"] for f, e in rank["functions"].items()}
        assert got == dict(calls[rank["rank"]]), rank["rank"]
        assert rank["finalized"] and rank["stopped"] is None
    # bytes of the calls: a send at the send call, a non-blocking receive where it completes
    per_rank0 = doc["samples"]["ranks"][0]["functions"]
    assert per_rank0["MPI_Isend"]["bytes"] == 3 * 1024
    assert per_rank0["MPI_Waitall"]["bytes"] == 3 * 1024
    assert per_rank0["MPI_Bcast"]["bytes"] == 800      # root sends 100 doubles
    assert per_rank0["MPI_Gather"]["bytes"] == 4 + 4 * n
    assert per_rank0["MPI_Alltoall"]["bytes"] == 2 * (2 * 4 * n)

    # The archive, read back by otf2-print and by the otf2 Python reader.
    anchor = folder / "traces.otf2"
    printed = otf2_print_counts(anchor)
    sends = sum(c["MPI_Send"] for c in calls)
    recvs = sum(c["MPI_Recv"] for c in calls)
    total_calls = sum(sum(c.values()) for c in calls)
    assert printed["ENTER"] == printed["LEAVE"] == total_calls
    assert printed["MPI_SEND"] == sends
    assert printed["MPI_RECV"] == recvs
    assert printed["MPI_ISEND"] == printed["MPI_ISEND_COMPLETE"] == 3 * n
    assert printed["MPI_IRECV_REQUEST"] == printed["MPI_IRECV"] == 3 * n
    colls = sum(c[f] for c in calls for f in ("MPI_Barrier", "MPI_Bcast", "MPI_Allreduce",
                                              "MPI_Gather", "MPI_Alltoall"))
    assert printed["MPI_COLLECTIVE_BEGIN"] == printed["MPI_COLLECTIVE_END"] == colls

    otf2 = pytest.importorskip("otf2")
    kinds = collections.Counter()
    matrix = [[0] * n for _ in range(n)]
    with otf2.reader.open(str(anchor)) as tr:
        assert len(tr.definitions.location_groups) == n
        for location, event in tr.events:
            kinds[type(event).__name__] += 1
            if isinstance(event, (otf2.events.MpiSend, otf2.events.MpiIsend)):
                src = int(location.group.name.split()[-1])
                dst = event.communicator.group.members[event.receiver].group.name.split()[-1]
                matrix[src][int(dst)] += event.msg_length
    assert kinds["MpiSend"] == sends and kinds["MpiRecv"] == recvs
    assert matrix == b


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_fortran_program_counts_bytes_and_matrix(tmp_path, fortran_program, n):
    # mpif.h / `use mpi` calls reach the Fortran entry points of the tracer,
    # each recorded exactly once (the Fortran library's pmpi_ calls PMPI_ in C)
    run, folder = trace(tmp_path, "--", *MPIRUN, "-n", str(n), fortran_program)
    assert run.returncode == 0, run.stderr
    doc = summary(folder)
    expected = fortran_expected(n)
    assert_counts_and_matrix(doc, expected)
    r0 = doc["samples"]["ranks"][0]["functions"]
    assert r0["MPI_Send"]["bytes"] == 4 * 4096 + 56 + (24 if n >= 4 else 0)
    assert r0["MPI_Recv"]["bytes"] == 4 * 4096 + sum(20 * r for r in range(1, n))
    assert r0["MPI_Isend"]["bytes"] == 2 * 400 + 200
    # Irecv completions (statuses ignored, a statuses array, a status) carry their bytes
    assert r0["MPI_Waitall"]["bytes"] == 2 * 400 + 200
    assert r0["MPI_Wait"]["bytes"] == 56
    assert r0["MPI_Sendrecv"]["bytes"] == 48
    assert r0["MPI_Bcast"]["bytes"] == 400
    # Fortran's MPI_IN_PLACE is seen: the root's Gather sends its recvcount, not 0
    assert r0["MPI_Gather"]["bytes"] == 4 + 4 * n
    assert r0["MPI_Allreduce"]["bytes"] == 2 * 40 + 2 * 40
    assert r0["MPI_Reduce"]["bytes"] == 48
    assert doc["samples"]["ranks"][1]["functions"]["MPI_Gather"]["bytes"] == 4

    printed = otf2_print_counts(folder / "traces.otf2")
    _, _, calls = expected
    assert printed["ENTER"] == printed["LEAVE"] == sum(sum(c.values()) for c in calls)
    assert printed["MPI_SEND"] == sum(c["MPI_Send"] + c["MPI_Sendrecv"] for c in calls)
    assert printed["MPI_IRECV"] == printed["MPI_IRECV_REQUEST"] == 4 * n
    assert printed["MPI_ISEND"] == printed["MPI_ISEND_COMPLETE"] == 3 * n


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_fortran2008_program_counts_bytes_and_matrix(tmp_path, fortran08_program, n):
    # `use mpi_f08` calls reach mpi_send_f08_ & co., which Open MPI routes to
    # PMPI_ in C past every other wrapper; the tracer's own mpi_*_f08_ entry
    # points record them, with or without the optional ierror argument
    run, folder = trace(tmp_path, "--", *MPIRUN, "-n", str(n), fortran08_program)
    assert run.returncode == 0, run.stderr
    doc = summary(folder)
    expected = fortran_expected(n)
    assert_counts_and_matrix(doc, expected)
    r0 = doc["samples"]["ranks"][0]["functions"]
    assert r0["MPI_Recv"]["bytes"] == 4 * 4096 + sum(20 * r for r in range(1, n))
    assert r0["MPI_Waitall"]["bytes"] == 2 * 400 + 200
    assert r0["MPI_Gather"]["bytes"] == 4 + 4 * n      # MPI_IN_PLACE seen at the root
    assert r0["MPI_Allreduce"]["bytes"] == 2 * 40 + 2 * 40
    printed = otf2_print_counts(folder / "traces.otf2")
    assert printed["ENTER"] == printed["LEAVE"] == sum(sum(c.values()) for c in expected[2])
    assert printed["MPI_IRECV"] == printed["MPI_IRECV_REQUEST"] == 4 * n


@needs_mpi
@pytest.mark.parametrize("n, nthreads, policy", [(2, 4, "full"), (4, 2, "sync")])
def test_thread_multiple_one_location_per_thread(tmp_path, programs, n, nthreads, policy):
    # full: a 64K buffer that the threads fill about twice (160 bytes a round trip)
    rounds = 120 if policy == "full" else 20
    budget = ["--budget", "64K"] if policy == "full" else []
    run, folder = trace(tmp_path, *budget, "--policy", policy, "--", *MPIRUN, "-n", str(n),
                        "-x", "OMP_WAIT_POLICY=passive", programs["trace_threads"],
                        str(nthreads), str(rounds))
    if run.returncode == 77:
        pytest.skip("this MPI library does not provide MPI_THREAD_MULTIPLE")
    assert run.returncode == 0, run.stderr
    doc = summary(folder)
    expected = threads_expected(n, nthreads, rounds)
    assert_counts_and_matrix(doc, expected)
    for rank in doc["samples"]["ranks"]:
        assert rank["thread_level"] == 3            # MPI_THREAD_MULTIPLE
        assert rank["functions"]["MPI_Send"]["bytes"] == sum(
            rounds * (t + 1) * 400 for t in range(nthreads))
    if policy == "full":
        assert doc["summary"]["swapouts"]["count"] >= n   # swapped out while threads recorded

    printed = otf2_print_counts(folder / "traces.otf2")
    swaps = doc["summary"]["swapouts"]["count"]     # each swap-out is a region too
    assert printed["ENTER"] == printed["LEAVE"] == sum(sum(c.values()) for c in expected[2]) + swaps
    assert printed["MPI_SEND"] == printed["MPI_RECV"] == n * nthreads * rounds

    otf2 = pytest.importorskip("otf2")
    per_loc = collections.defaultdict(collections.Counter)
    tags = collections.defaultdict(set)
    with otf2.reader.open(str(folder / "traces.otf2")) as tr:
        assert len(tr.definitions.location_groups) == n
        assert len(tr.definitions.locations) == n * nthreads
        for location, event in tr.events:
            key = (location.group.name, location.name)
            per_loc[key][type(event).__name__] += 1
            if isinstance(event, (otf2.events.MpiSend, otf2.events.MpiRecv)):
                tags[key].add(event.msg_tag)
    assert len(per_loc) == n * nthreads
    by_rank = collections.defaultdict(list)
    for key, counts in per_loc.items():
        assert counts["MpiSend"] == counts["MpiRecv"] == rounds, key
        assert counts["MpiIsend"] == counts["MpiIrecv"] == 1, key
        assert len(tags[key]) == 1, key             # a thread's messages stay on its location
        by_rank[key[0]].append(next(iter(tags[key])))
    for group, thread_tags in by_rank.items():
        assert sorted(thread_tags) == list(range(nthreads)), group


@needs_mpi
@pytest.mark.parametrize("policy", ["sync", "full", "off"])
def test_policies_keep_every_event_in_bounded_memory(tmp_path, programs, policy):
    iters = 3000
    run, folder = trace(tmp_path, "--budget", "64K", "--policy", policy, "--",
                        *MPIRUN, "-n", "2", programs["trace_pingpong"], str(iters), "16", "10")
    assert run.returncode == 0, run.stderr
    doc = summary(folder)
    ranks = doc["samples"]["ranks"]
    for r in ranks:
        assert r["functions"]["MPI_Send"]["calls"] == iters
        assert r["functions"]["MPI_Recv"]["calls"] == iters
        assert r["functions"]["MPI_Send"]["bytes"] == 16 * iters
        assert r["functions"]["MPI_Barrier"]["calls"] == iters // 10 + 1
    swaps = [r["swapouts"]["count"] for r in ranks]
    if policy == "off":
        assert swaps == [0, 0]
    else:
        # ~9 events (about 200 bytes) a round trip: 3000 of them need several 64K buffers
        assert min(swaps) >= 5
    if policy == "sync":
        # condition C: every rank swaps out at the same points, as often
        assert swaps[0] == swaps[1]
    assert doc["summary"]["swapouts"]["count"] == sum(swaps)
    printed = otf2_print_counts(folder / "traces.otf2")
    assert printed["MPI_SEND"] == 2 * iters
    assert printed["ENTER"] == printed["LEAVE"]
    text = subprocess.run(["otf2-print", str(folder / "traces.otf2")], capture_output=True,
                          text=True, check=True).stdout
    # each swap-out is a region of its own in the archive
    assert text.count('Region: "tiers_swapout"') == 2 * sum(swaps)


@needs_mpi
def test_sync_overflow_stops_tracing_and_the_program_finishes(tmp_path, programs):
    # No collective for 3000 round trips: the 64K buffer fills between two
    # collectives, tracing stops with one message, the program runs on.
    run, folder = trace(tmp_path, "--budget", "64K", "--policy", "sync", "--",
                        *MPIRUN, "-n", "2", programs["trace_pingpong"], "3000", "8", "0")
    assert run.returncode == 0, run.stderr
    assert "filled up between two collectives" in run.stderr
    ranks = summary(folder)["samples"]["ranks"]
    assert any(r["stopped"] == "buffer overflow between collectives" for r in ranks)
    assert all(r["functions"]["MPI_Send"]["calls"] < 3000 for r in ranks)


@needs_mpi
@pytest.mark.parametrize("end, code", [("exit3", 3), ("abort5", 5), ("kill9", 137)])
def test_failing_program_exit_code_and_partial_trace(tmp_path, programs, end, code):
    iters = 2000
    run, folder = trace(tmp_path, "--budget", "64K", "--policy", "full", "--",
                        *MPIRUN, "-n", "2", programs["trace_pingpong"], str(iters), "8", "0", end)
    assert run.returncode == code, run.stderr
    assert f"exited with code {code}" in run.stderr
    ranks = summary(folder)["samples"]["ranks"]
    assert not any(r["finalized"] for r in ranks)
    sends = {r["rank"]: r["functions"]["MPI_Send"]["calls"] for r in ranks}
    if end == "kill9":
        # rank 0 keeps what it swapped out before it was killed: whole swap-outs only
        assert 0 < sends[0] < iters
        assert ranks[0]["swapouts"]["count"] >= 1
    else:
        # exit() and MPI_Abort write the buffer out: nothing is lost
        assert sends[0] == iters
    assert (folder / "traces.otf2").is_file()


def test_bad_budget(tmp_path):
    run = run_tiers("trace", "--budget", "1K", "--out", str(tmp_path / "t"), "--", "true")
    assert_one_line_error(run, "below the minimum of 64K")
    run = run_tiers("trace", "--budget", "lots", "--out", str(tmp_path / "t"), "--", "true")
    assert_one_line_error(run, "is not a size")


def test_existing_folder_needs_force(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "summary.json").write_text("{}")
    run = run_tiers("trace", "--out", str(tmp_path / "t"), "--", "true")
    assert_one_line_error(run, "add --force")


def test_unwritable_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    run = run_tiers("trace", "--out", str(tmp_path / "file" / "t"), "--", "true")
    assert_one_line_error(run, "cannot write to")


def test_not_an_mpi_program(tmp_path):
    run = run_tiers("trace", "--out", str(tmp_path / "t"), "--", "true")
    assert_one_line_error(run, "is it an MPI program?")


def test_no_command(tmp_path):
    run = run_tiers("trace", "--out", str(tmp_path / "t"))
    assert_one_line_error(run, "no command to trace")


@needs_mpi
def test_stats_and_chrome_export(tmp_path, programs):
    run, folder = trace(tmp_path, "--", *MPIRUN, "-n", "2", programs["trace_mix"])
    assert run.returncode == 0, run.stderr
    st = run_tiers("trace", "stats", str(folder))
    assert st.returncode == 0, st.stderr
    b, m, calls = mix_expected(2)
    line = next(ln for ln in st.stdout.splitlines() if ln.startswith("MPI_Send "))
    assert int(line.split()[1]) == sum(c["MPI_Send"] for c in calls)
    assert "receiver-first share" in st.stdout
    ex = run_tiers("trace", "export", str(folder), "--format", "chrome")
    assert ex.returncode == 0, ex.stderr
    import json
    events = json.loads((folder / "trace.chrome.json").read_text())["traceEvents"]
    complete = collections.Counter(e["name"] for e in events if e["ph"] == "B")
    assert complete["MPI_Send"] == sum(c["MPI_Send"] for c in calls)
    assert complete["MPI_Alltoall"] == 2
    bad = run_tiers("trace", "stats", str(tmp_path))
    assert_one_line_error(bad, "not a tiers trace folder")
