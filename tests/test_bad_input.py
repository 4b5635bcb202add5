"""Every bad input is refused up front, by every subcommand, the same way:
exactly one line ``tiers: error: ...`` on stderr that names the option or
the value, exit status 2 for bad usage (1 for a failed run), no Python
traceback, no file left in the working folder, no process left running,
and all of it before any MPI job starts (each case ends in seconds).

The cases run as real ``python -m tiers`` processes, a few at a time, each
in a fresh empty working folder; one parametrised test per case then
checks its outcome."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Each case must be refused within this many seconds.
FAST_S = 10.0
TB = "99999999999999999999T"
BIG = "99999999999999999999"

# (args, fragment of the one error line, exit status).  "{data}" is the
# folder of prepared input files (outside the working folder).
C = []


def case(fragment, *args, code=2, id=None, xfail=None):
    C.append(pytest.param(list(args), fragment, code,
                          id=id or " ".join(args)[:60] or "(none)",
                          marks=[pytest.mark.xfail(reason=xfail, strict=False)] if xfail
                          else []))


# ---- the command line itself ---------------------------------------------
case("COMMAND")
case("invalid choice", "nosuch")
case("unrecognized arguments", "--bogus", "survey")
case("PROBE", "probe")
case("invalid choice", "probe", "nosuch")
case("ACTION", "vcluster")
case("invalid choice", "vcluster", "nosuch")
case("unrecognized arguments", "topo", "--bogus")
case("unrecognized arguments", "probe", "mem", "--bogus")
case("unrecognized arguments", "survey", "--bogus")

# ---- topo ------------------------------------------------------------------
case("--input", "topo", "--input", "")
case("--input", "topo", "--input")
case("--input", "topo", "--input", "synthetic:pack:1000 core:1000 pu:1000")
case("--input", "topo", "--input", "synthetic:pack:100000000000000000000000 pu:2")
case("--input", "topo", "--input", "synthetic:pack:4096 core:4096 pu:4096 pu:4096")
case("rejects the synthetic topology", "topo", "--input", "synthetic:pack:2 bogus:3")
case("rejects the synthetic topology", "topo", "--input", "synthetic:pack:0 pu:2")
case("No such file", "topo", "--input", "/nonexistent/machine.xml")
case("not a valid hwloc XML", "topo", "--input", "{data}/garbage.xml")
case("Is a directory", "topo", "--input", "{data}")
case("--json", "topo", "--json", "")
case("--json", "topo", "--json", "{data}")
case("--json", "topo", "--json", "/dev/full")
case("--format", "topo", "--format", "bogus")

# ---- probe mem ---------------------------------------------------------------
for v in ("0", "-1", "1,,2", ",", "", "4294967298", "a", "1-", "3-1", "1.5", "1,1", "2000",
          "1-100000", BIG, "1,"):
    case("--threads", "probe", "mem", "--threads", v)
for opt, v in (("--pin", "bogus"), ("--pin", "compact,compact"), ("--pin", ""),
               ("--pin", "none,,scatter"), ("--placement", "bogus"), ("--placement", ""),
               ("--kernels", "bogus"), ("--kernels", "triad,,copy"), ("--kernels", "copy,copy")):
    case(opt, "probe", "mem", opt, v)
for v in ("", "abc", "-1", "nan", "inf", "1e3", TB, "1P", "100T", "1.5.5M", "0x10", "64Q"):
    case("--size", "probe", "mem", "--size", v)
for v in ("0", "1", "201", "x", "1.5", BIG, "-3"):
    case("--ntimes", "probe", "mem", "--ntimes", v)
case("--stores", "probe", "mem", "--stores", "bogus")
case("--json", "probe", "mem", "--json", "")
case("--plot", "probe", "mem", "--plot", "")

# ---- probe sync --------------------------------------------------------------
for v in ("0", "4294967298", "1,,2", "2000", "x"):
    case("--threads", "probe", "sync", "--threads", v)
for v in ("0", "1", "100001", "x", "-5", BIG):
    case("--reps", "probe", "sync", "--reps", v)
for v in ("0", "-1", "nan", "inf", "x", "1e8", "-inf"):
    case("--test-time", "probe", "sync", "--test-time", v)
for v in ("0", "nan", "1e6", "-0.1"):
    case("--delay-time", "probe", "sync", "--delay-time", v)
for v in ("4294967297", "0", "1,,2", "1000001", "1-", "8,8"):
    case("--chunks", "probe", "sync", "--chunks", v)
case("--pin", "probe", "sync", "--pin", "none")
case("--tests", "probe", "sync", "--tests", "bogus", "--quick")

# ---- probe net (refused before mpirun starts) --------------------------------
for v in ("0", "1", "-1", "100000", "x", "1.5", BIG, ""):
    case("--ranks", "probe", "net", "-n", v)
case("--ranks", "probe", "net", "--ranks", "100000")
for v in ("a,b", "0", "0,0", "0,1,2", "-1,0", "", "0,", "1.5,2"):
    case("--pair", "probe", "net", "--pair", v)
for v in ("x", "0", "-1", "nan", "inf", "1,,2", "1,1", "1e9"):
    case("--factors", "probe", "net", "--factors", v)
for v in ("", "1K,,2", "-1", "3G", "x", "nan", "1,1", TB):
    case("--sizes", "probe", "net", "--sizes", v)
for v in ("0", "3G", "x", "-1"):
    case("--center", "probe", "net", "--center", v)
for opt, v in (("--iters", "0"), ("--iters", "x"), ("--iters", "-1"), ("--iters", BIG),
               ("--window", "0"), ("--window", "5000"), ("--reps", "0"), ("--reps", "100001"),
               ("--cores-per-node", "0"), ("--node-size", "0"), ("--node-size", "x"),
               ("--barrier-iters", "0"), ("--barrier-threads", "0"),
               ("--barrier-threads", "2000")):
    case(opt, "probe", "net", opt, v)
for v in ("-1", "0", "nan", "inf", "x", "1e9"):
    case("--timeout", "probe", "net", "--timeout", v)
for v in ("0", "nan", "-5"):
    case("--time-limit", "probe", "net", "--time-limit", v)
case("--launcher-args", "probe", "net", "--launcher-args", '"x')
case("--hostfile", "probe", "net", "--hostfile", "")
case("--hostfile", "probe", "net", "--hostfile", "/nonexistent/hosts")
case("--hostfile", "probe", "net", "--hostfile", "{data}")
case("--tests", "probe", "net", "--tests", "bogus")
case("--tests", "probe", "net", "--tests", "pingpong,,barrier")
case("--launcher", "probe", "net", "--launcher", "bogus")
case("--launcher", "bench", "jacobi3d", "--launcher", "lam")
case("--ranks", "probe", "net", "-n", "1000", "--hostfile", "{data}/hosts2")

# ---- map ---------------------------------------------------------------------
ST = ["--stencil", "2d:2,1:4,4"]
for v in ("-1", "x", "1.5", "2147483648", BIG):
    case("--seed", "map", *ST, "--seed", v)
for v in ("0", "-1", "x", "2000000"):
    case("--nodes", "map", *ST, "--nodes", v)
case("--stencil", "map", "--stencil", "3d:1000,1000,1000:8,8,8", "--nodes", "4")
case("--stencil", "map", "--stencil", "3d:10,10,10:8,8,8", "--nodes", "4", "--oversubscribe")
case("--stencil", "map", "--stencil", f"3d:{BIG},2,2:8,8,8", "--oversubscribe")
case("bad stencil", "map", "--stencil", "bogus")
case("bad stencil", "map", "--stencil", "3d:2,2:4,4")
case("bad stencil", "map", "--stencil", "2d:0,2:4,4")
case("bad stencil", "map", "--stencil", "2d:2,2:-4,4")
case("either --comm", "map")
case("--comm", "map", "--comm", "")
case("--comm", "map", "--comm", "/nonexistent/comm.csv")
case("is a folder without summary.json", "map", "--comm", "{data}")
case("--machine", "map", *ST, "--machine", "synthetic:pack:100000 pu:100000")
case("--machine", "map", *ST, "--machine", "")
case("either --nodes or --hostfile", "map", *ST, "--nodes", "2", "--hostfile", "{data}/hosts2")
case("--links", "map", *ST, "--links", "")
case("--links", "map", *ST, "--links", "/nonexistent/links.json")
case("--json", "map", *ST, "--json", "")
case("--rankfile", "map", *ST, "--rankfile", "")
case("--launch needs a command", "map", *ST, "--launch")
case("goes with --launch", "map", *ST, "--", "./app")
case("--numbering", "map", *ST, "--numbering", "bogus")
# readers of communication files (hardened by their own tests; a handful here)
case("hugerows.mtx", "map", "--comm", "{data}/hugerows.mtx")
case("nan.csv", "map", "--comm", "{data}/nan.csv")
case("garbage.grf", "map", "--comm", "{data}/garbage.grf")
case("vector.mtx", "map", "--comm", "{data}/vector.mtx")
case("summary.json", "map", "--comm", "{data}/badtrace/summary.json")

# ---- trace -------------------------------------------------------------------
for v in (TB, "1K", "0", "x", "-1", "nan", "100T", "", "1e3"):
    case("--budget", "trace", "--budget", v, "--", "true")
for v in ("nan", "inf", "-1", "x", "99999"):
    case("--tau", "trace", "--tau", v, "--", "true")
for v in ("0", "1.5", "nan", "-0.5"):
    case("--threshold", "trace", "--threshold", v, "--", "true")
for v in ("0", "-1", "x"):
    case("--swap-every", "trace", "--swap-every", v, "--", "true")
for v in ("0", "-1", "nan"):
    case("--timeout", "trace", "--timeout", v, "--", "true")
case("--out", "trace", "--out", "", "--", "true")
case("--ranks", "trace", "-n", "0", "--", "true")
case("--ranks", "trace", "-n", "100000", "--", "true")
case("--policy", "trace", "--policy", "bogus", "--", "true")
case("no command to trace", "trace")
case("no such program", "trace", "--", "/nonexistent/program")
case("dir", "trace", "stats")
case("not a tiers trace folder", "trace", "stats", "/nonexistent/trace")
case("not a tiers trace folder", "trace", "stats", "{data}")
case("summary.json", "trace", "stats", "{data}/badtrace")
case("--chrome", "trace", "export", "{data}")
case("not a tiers trace folder", "trace", "export", "--format", "chrome", "/nonexistent/trace")

# ---- vcluster (all refused before anything is built: safe without root) ----
for v in ("0", "65", "x", "-1"):
    case("--nodes", "vcluster", "up", "--nodes", v)
for v in ("0", "2000", "x"):
    case("--slots", "vcluster", "up", "--slots", v)
case("link rate 'bogus'", "vcluster", "up", "--link", "bogus")
case("subnet 'bogus'", "vcluster", "up", "--subnet", "bogus")
case("--ranks", "vcluster", "mpirun", "-n", "0", "--", "true")
case("--ranks", "vcluster", "mpirun", "-n", "x", "--", "true")
case("--timeout", "vcluster", "mpirun", "--timeout", "nan", "--", "true")
case("--timeout", "vcluster", "mpirun", "--timeout", "0", "--", "true")
case("no program given", "vcluster", "mpirun", "-n", "2")
case("unrecognized arguments", "vcluster", "status", "--bogus")
case("unrecognized arguments", "vcluster", "down", "--bogus")

# ---- bench -------------------------------------------------------------------
for v in ("1,,2", "0", "100000", "x", "4294967297", "", "1-", "2,2", "1,100000"):
    case("--ranks", "bench", "jacobi3d", "--ranks", v)
for v in ("0", "2000", "1,,2", "x"):
    case("--threads", "bench", "jacobi3d", "--threads", v)
for v in ("0", "x", "-1"):
    case("--iters", "bench", "jacobi3d", "--iters", v)
for v in ("0", "nan", "-1", "inf"):
    case("--timeout", "bench", "jacobi3d", "--timeout", v)
case("--comm", "bench", "jacobi3d", "--comm", "bogus")
case("the --comm list is empty", "bench", "jacobi3d", "--comm", ",")
case("--app-args", "bench", "jacobi3d", "--app-args", '"x')
case("--launcher-args", "bench", "jacobi3d", "--launcher-args", '"x')
case("unknown class 'Z'", "bench", "cg", "--class", "Z")
case("has no problem classes", "bench", "jacobi3d", "--class", "A")
case("invalid choice: 'nosuch'", "bench", "nosuch")
case("--pin", "bench", "jacobi3d", "--pin", "bogus")
case("--hostfile", "bench", "jacobi3d", "--hostfile", "")
case("--hostfile", "bench", "jacobi3d", "--hostfile", "/nonexistent/hosts")
case("do not give --hostfile", "bench", "jacobi3d", "--vcluster", "--hostfile", "{data}/hosts2")
case("--ranks", "bench", "jacobi3d", "--ranks", "1000", "--hostfile", "{data}/hosts2")
case("threads per rank exceed", "bench", "jacobi3d", "--threads", "1000")
for v in ("99999999999", "99999999999,2,2", "0", "1,,2", "2,2,2,2", "x", "-4"):
    case("--size", "bench", "jacobi3d", "--size", v)
case("--size", "bench", "laplace2d", "--size", "2000000,2")
case("--size", "bench", "radixsort", "--size", "99999999999")
case("--json", "bench", "jacobi3d", "--json", "")
case("APP", "bench")

# ---- survey --------------------------------------------------------------------
case("--out", "survey", "--out", "")
case("--out /dev/null", "survey", "--out", "/dev/null")


@dataclass
class Outcome:
    returncode: int
    stderr: str
    seconds: float
    leftovers: list
    survivors: list


def _procs_in(folder: str) -> list[str]:
    """Processes whose working folder is ``folder`` (what a refused case
    might have left running)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{pid}/cwd") == folder:
                out.append(pid)
        except OSError:
            continue
    return out


def _run(args: list[str], data: str) -> Outcome:
    args = [a.replace("{data}", data) for a in args]
    cwd = tempfile.mkdtemp(prefix="tiers-bad-input-")
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "tiers", *args], cwd=cwd,
                              capture_output=True, text=True, timeout=3 * FAST_S,
                              env={**os.environ, "COLUMNS": "200"})
        code, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, err = 124, (exc.stderr or b"").decode(errors="replace") + "\n(timed out)"
    seconds = time.monotonic() - start
    survivors = _procs_in(cwd)
    leftovers = sorted(os.listdir(cwd))
    shutil.rmtree(cwd, ignore_errors=True)
    return Outcome(code, err, seconds, leftovers, survivors)


def _write_data(d: Path) -> None:
    (d / "garbage.xml").write_text("<not hwloc")
    (d / "hosts2").write_text("localhost slots=2\n")
    (d / "hugerows.mtx").write_text("%%MatrixMarket matrix coordinate real general\n"
                                    "1000000000 1000000000 1\n1 2 5\n")
    (d / "vector.mtx").write_text("%%MatrixMarket vector coordinate real general\n3 1\n1 1\n")
    (d / "nan.csv").write_text("0,nan\nnan,0\n")
    (d / "garbage.grf").write_bytes(b"0\n\xff\xfe 9 9\n")
    bad = d / "badtrace"
    bad.mkdir()
    (bad / "summary.json").write_bytes(b'{"schema": "tiers.trace/1", \xff\xfe')


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Run every case, four at a time; return {case id: Outcome}."""
    data = tmp_path_factory.mktemp("bad-input-data")
    _write_data(data)
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {p.id: pool.submit(_run, p.values[0], str(data)) for p in C}
        return {k: f.result() for k, f in futures.items()}


def test_there_are_enough_cases():
    assert len(C) >= 200
    assert len({p.id for p in C}) == len(C), "case ids must be unique"
    commands = {p.values[0][0] for p in C if p.values[0]}
    assert commands >= {"topo", "probe", "map", "trace", "vcluster", "bench", "survey"}


@pytest.mark.parametrize("args, fragment, code", C)
def test_refused_in_one_line(outcomes, request, args, fragment, code):
    out = outcomes[request.node.callspec.id]
    assert "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("tiers: error: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert out.returncode == code, (out.returncode, lines[0])
    assert out.leftovers == [], out.leftovers
    assert out.survivors == [], out.survivors
    # a loaded machine (load above the CPU count) stretches every case alike
    limit = FAST_S * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    assert out.seconds < limit, f"took {out.seconds:.1f} s: refused too late"


@pytest.mark.skipif(not shutil.which("mpicc") or not shutil.which("mpirun"),
                    reason="needs mpicc and mpirun")
@pytest.mark.parametrize("ranks", [2, 3])
def test_trace_buffer_that_cannot_be_allocated_is_an_error(tmp_path, ranks):
    """A --budget the ranks cannot allocate (address space limited below it)
    is a failed trace: exit 1, one tiers line naming --budget, where it used
    to be an empty trace and exit 0."""
    exe = tmp_path / "pingpong"
    subprocess.run(["mpicc", "-O1", "-o", str(exe),
                    str(Path(__file__).parent / "programs" / "trace_pingpong.c")],
                   check=True, capture_output=True)
    job = (f"ulimit -v 3000000; exec mpirun --oversubscribe --allow-run-as-root "
           f"-n {ranks} {exe} 10 8 0")
    proc = subprocess.run([sys.executable, "-m", "tiers", "trace", "--budget", "4G",
                           "--out", str(tmp_path / "t"), "--", "sh", "-c", job],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    mine = [ln for ln in proc.stderr.splitlines() if ln.startswith("tiers: error: ")]
    assert len(mine) == 1, proc.stderr
    assert "could not allocate its trace buffer of 4.0 GiB (--budget)" in mine[0]
    # each rank said why, once
    said = [ln for ln in proc.stderr.splitlines() if "cannot allocate the trace buffer" in ln]
    assert len(said) == ranks, proc.stderr
