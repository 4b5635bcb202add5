"""What the benchmark scripts that drive the tiers command share: finding
tiers, running a command that writes --json, tiers probe mem's Triad rate,
one tiers bench configuration, the machine's name, and where the host placed
two PUs (a cache line's round trip between them, and placements told apart).

A script imports it with its own folder's parent on sys.path:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import benchlib
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys

#: the name error lines start with; a script sets it (benchlib.NAME = "...")
NAME = "bench"


def fail(msg: str) -> None:
    """Print one error line and exit 2."""
    print(f"{NAME}: error: {msg}", file=sys.stderr)
    sys.exit(2)


def skip(why: str) -> None:
    """Print one line saying why this benchmark cannot run here and exit 0
    (a skipped benchmark does not stop ``make bench``)."""
    print(f"{NAME}: skipped: {why}")
    sys.exit(0)


def parse_args(ap: argparse.ArgumentParser, quick: dict, argv: list[str] | None = None):
    """Add the options every benchmark script has and parse the command line.

    ``--quick`` first sets the reduced defaults in ``quick`` (option dest ->
    value; options given explicitly still win), so the run ends in about a
    minute, and a run with it starts with a line saying it is not a
    measurement; ``--dry-run`` is for :func:`dry_run`.  A bad option prints
    one line ``NAME: error: ...`` and exits 2.  Returns the parsed namespace."""
    global NAME
    if NAME == "bench":
        NAME = os.path.basename(os.path.dirname(os.path.abspath(sys.argv[0])))
    shown = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}")
                     for k, v in quick.items())
    ap.add_argument("--quick", action="store_true",
                    help=f"a reduced run of about a minute ({shown})")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the settings, the tiers and the native tools it would "
                         "use and what it would run; measure nothing")
    ap.error = fail  # one line, exit 2, no usage block
    argv = sys.argv[1:] if argv is None else argv
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--quick", action="store_true")
    if pre.parse_known_args(argv)[0].quick:
        ap.set_defaults(**quick)
    args = ap.parse_args(argv)
    if args.quick and not args.dry_run:
        print(f"{NAME}: quick: reduced sizes and rounds to check that every step runs; "
              "not a measurement", flush=True)
    return args


def import_tiers():
    """Import the installed tiers package (the one of the python that runs
    this script, else the interpreter of tiers on PATH / $TIERS through
    :func:`reexec_with_tiers`); returns the module.  Never the source tree's
    python/ folder unless PYTHONPATH says so."""
    try:
        import tiers
    except ImportError:
        reexec_with_tiers()
    return tiers


def dry_run(args, tools=(), steps=(), command: bool = False) -> None:
    """Print what the script would do with ``args`` and exit 0: every
    setting, the tiers package (or ``tiers`` command when ``command``) and
    the path of each native tool in ``tools`` (one error line and exit 2 when
    one is missing), then each step of ``steps``."""
    print(f"{NAME}: dry run, nothing measured")
    for key, val in sorted(vars(args).items()):
        if key != "dry_run":
            print(f"  --{key.replace('_', '-')}: {val}")
    if command:
        print(f"  tiers command: {' '.join(tiers_command())}")
    if tools or not command:
        tiers = import_tiers()
        print(f"  tiers package: {os.path.dirname(os.path.abspath(tiers.__file__))}")
    if tools:
        from tiers import native
        from tiers.errors import TiersError
        for tool in tools:
            try:
                print(f"  tool {tool}: {native.tool_path(tool)}")
            except TiersError as exc:
                fail(str(exc))
    for step in steps:
        print(f"  would run: {step}")
    sys.exit(0)


def tiers_command() -> list[str]:
    """The tiers command line: $TIERS (e.g. "env PYTHONPATH=... .venv/bin/python
    -m tiers") or tiers on PATH."""
    cmd = os.environ.get("TIERS")
    if cmd:
        return shlex.split(cmd)
    found = shutil.which("tiers")
    if not found:
        fail("tiers is not on PATH; set TIERS to its command line")
    return [found]


def run_json(cmd: list[str], path: str, timeout: float) -> dict:
    """Run a tiers command that writes --json PATH; return the document."""
    import json

    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        fail(f"timed out after {timeout:.0f} s: {' '.join(cmd)}")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        fail(f"{' '.join(cmd[-12:])} failed: {last}")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def triad(tiers: list[str], threads: list[int], tmp: str, timeout: float,
          size: str | None = None) -> tuple[dict, int]:
    """STREAM Triad best rate in B/s per thread count (tiers probe mem,
    regular stores, compact pinning, first touch; arrays of ``size`` bytes,
    default probe mem's own), and the LLC bytes."""
    path = os.path.join(tmp, "mem.json")
    doc = run_json([*tiers, "probe", "mem", *(["--size", size] if size else []),
                    "--threads", ",".join(map(str, threads)),
                    "--pin", "compact", "--placement", "first-touch", "--kernels", "triad",
                    "--stores", "regular", "--ntimes", "10", "--json", path,
                    "--plot", os.path.join(tmp, "mem.png")], path, timeout)
    rates = {}
    for s in doc["samples"]:
        for r in s["results"]:
            if r["kernel"] == "triad":
                rates[s["threads"]] = r["best_rate_mbps"] * 1e6
    return rates, int(doc["params"].get("llc_total_bytes") or 0)


def bench_app(tiers: list[str], app: str, ranks: int, threads: int, extra: list[str],
              tmp: str, timeout: float) -> dict:
    """One configuration through tiers bench; returns the tiers.app/1 document
    (exits when it failed its verification)."""
    path = os.path.join(tmp, f"{app}.json")
    doc = run_json([*tiers, "bench", app, "--ranks", str(ranks), "--threads", str(threads),
                    "--timeout", str(int(timeout)), *extra, "--json", path,
                    "--plot", os.path.join(tmp, f"{app}.png")], path, timeout + 60)
    app_doc = doc["samples"][0]["doc"]
    if not app_doc["verification"]["passed"]:
        fail(f"{app} {ranks}x{threads} failed its verification")
    return app_doc


def parse_configs(text: str) -> list[tuple[int, int]]:
    """"1x1,2x1,1x2" -> [(1, 1), (2, 1), (1, 2)] (ranks x threads)."""
    out = []
    for word in text.split(","):
        try:
            r, t = (int(x) for x in word.lower().split("x"))
            if r < 1 or t < 1:
                raise ValueError
        except ValueError:
            fail(f"bad configuration '{word}' (use RANKSxTHREADS, e.g. 2x1)")
        out.append((r, t))
    return out


def check_cpus(configs: list[tuple[int, int]]) -> None:
    """Refuse configurations that would oversubscribe this machine."""
    cpus = len(os.sched_getaffinity(0))
    over = [f"{r}x{t}" for r, t in configs if r * t > cpus]
    if over:
        fail(f"{', '.join(over)} need more than the {cpus} CPUs here (oversubscribed runs "
             "measure contention, not bandwidth)")


def machine() -> str:
    """The CPU model and count, for the printed header."""
    cpu = platform.processor() or "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            key, _, val = line.partition(":")
            if key.strip() == "Model name":
                cpu = val.strip()
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs"


#: Round trips (sorted) more than this factor apart are different placements
#: of two PUs (tiers.noise.PLACEMENT_GAP, recomputed here).
PLACEMENT_GAP = 1.25


def rtt_classes(rtts) -> list[list[float]]:
    """Cluster round trips (ns) of a cache line between two PUs into the
    placements the host gave them: sorted, a new class wherever one is more
    than :data:`PLACEMENT_GAP` times the one before.  Returns each class's
    values, lowest class first; values that are not above zero are left out."""
    classes: list[list[float]] = []
    for x in sorted(v for v in rtts if v is not None and v > 0):
        if classes and x <= PLACEMENT_GAP * classes[-1][-1]:
            classes[-1].append(x)
        else:
            classes.append([x])
    return classes


def class_of(x, classes: list[list[float]]) -> int | None:
    """The index of the class of :func:`rtt_classes` that holds ``x`` (None
    for no value or none)."""
    if x is None:
        return None
    for k, cl in enumerate(classes):
        if cl[0] <= x <= cl[-1]:
            return k
    return None


def pu_round_trip(a: int, b: int) -> float | None:
    """The round trip (ns) of a cache line between two threads pinned to
    PUs ``a`` and ``b`` (logical indices), measured as tiers measures it
    around its own launches (tiers.noise.pair_round_trip: one quick sample
    of tiers-probe-noise, a few tens of milliseconds): where the host has
    placed the two PUs now.  None when it was not measured."""
    import_tiers()
    from tiers import noise

    return noise.pair_round_trip(a, b)


def mode(r: int, t: int) -> str:
    """serial, flat (ranks only) or hybrid (ranks x threads)."""
    return "serial" if r * t == 1 else ("flat" if t == 1 else "hybrid")


def reexec_with_tiers() -> None:
    """For a script that imports tiers: re-run it with the interpreter of
    $TIERS (a script path) or of tiers on PATH, once; exit when there is
    none."""
    path = os.environ.get("TIERS") or shutil.which("tiers")
    if path and os.path.isfile(path):
        with open(path, "rb") as f:
            first = f.readline().decode("utf-8", "replace").strip()
        if first.startswith("#!") and "python" in first and "TIERS_BENCH_REEXEC" not in os.environ:
            os.environ["TIERS_BENCH_REEXEC"] = "1"
            sys.exit(subprocess.call(first[2:].split() + sys.argv))
    sys.exit(f"{NAME}: cannot import tiers; put tiers on PATH or set TIERS")


def compile_with_openblas(source, exe, extra=()) -> None:
    """Compile the C anchor ``source`` into ``exe`` against OpenBLAS
    (cblas.h, -lopenblas); exit with one line when that fails."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        fail("no C compiler (cc) on PATH")
    proc = subprocess.run([cc, "-O2", "-o", str(exe), str(source), "-lopenblas", *extra],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"cannot compile {os.path.basename(str(source))} against OpenBLAS "
             "(libopenblas-dev): " + (proc.stderr.strip().splitlines() or ["?"])[-1])


# OpenBLAS cores it falls back to when it does not know the CPU (Debian's
# 0.3.21 takes a 2023 Xeon for a Prescott: SSE3 kernels, a weak anchor).
OPENBLAS_FALLBACK_CORES = {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom",
                           "katmai", "coppermine", "northwood", "banias", "unknown"}


def openblas_core(cmd: list[str]) -> dict:
    """The OpenBLAS kernels an anchor should run with: ``{"detected",
    "coretype", "env"}``.  ``cmd`` is a short run of the anchor; with
    OPENBLAS_VERBOSE=2 OpenBLAS prints the core it picked.  When that is a
    fallback core while the CPU has AVX-512 (SkylakeX kernels) or AVX2+FMA
    (Haswell kernels), ``coretype`` names the better one and ``env`` sets
    OPENBLAS_CORETYPE to it, so that tiers is compared with OpenBLAS at its
    best on this CPU.  An OPENBLAS_CORETYPE already set is kept."""
    env = dict(os.environ, OPENBLAS_VERBOSE="2", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    m = re.search(r"Core:\s*(\w+)", proc.stdout + proc.stderr)
    detected = m.group(1) if m else None
    if os.environ.get("OPENBLAS_CORETYPE"):
        return {"detected": detected, "coretype": os.environ["OPENBLAS_CORETYPE"], "env": {}}
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    better = None
    if detected is not None and detected.lower() in OPENBLAS_FALLBACK_CORES:
        if {"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512cd"} <= flags:
            better = "SkylakeX"
        elif {"avx2", "fma"} <= flags:
            better = "Haswell"
    return {"detected": detected, "coretype": better or detected,
            "env": {"OPENBLAS_CORETYPE": better} if better else {}}
