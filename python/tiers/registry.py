"""One source of truth for the choices tiers offers.

The command line (choices, help, descriptions, examples), ``tiers bench``
and docs/formats.md (``scripts/gen-docs.py``) all read these tables:

``APPS``      the reference applications of ``tiers bench``
``KINDS``     the kinds of result documents: schema, writer, renderer
``TOOLS``     the native programs installed in ``tiers/_native/bin``
``COMMANDS``  every subcommand: a description and an example
``error_codes()``  the libtiers error codes of ``tiers/error.h``
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path


# ---------------------------------------------------------------------------
# reference applications


@dataclass(frozen=True)
class App:
    """A reference application: its native tool, what it solves, and the
    options ``tiers bench`` may pass to it."""

    name: str
    tool: str
    description: str
    classes: tuple[str, ...] = ()
    size_option: bool = True
    iters_option: bool = True
    overlap_option: bool = True
    comm_option: bool = False


APPS: dict[str, App] = {
    "jacobi3d": App("jacobi3d", "tiers-jacobi3d",
                    "3-D Poisson heat problem, Jacobi, face halos (the AFC mapping "
                    "benchmark)", comm_option=True),
    "laplace2d": App("laplace2d", "tiers-laplace2d",
                     "2-D Laplace equation, Jacobi, 640 x 640 (COMPaS hybrid model)",
                     comm_option=True),
    "matmul": App("matmul", "tiers-matmul",
                  "dense matrix multiply, blocked / tiled / column broadcast, 1800 x 1800 "
                  "(COMPaS hybrid model)", overlap_option=False),
    "radixsort": App("radixsort", "tiers-radixsort",
                     "parallel radix sort of 4M integers, all-to-all key exchange "
                     "(COMPaS hybrid model)",
                     iters_option=False, overlap_option=False, comm_option=True),
    "cg": App("cg", "tiers-cg", "NPB CG: conjugate gradient, smallest eigenvalue estimate "
              "(classes S-B; --app-args '--matrix F.mtx' solves a Matrix Market file)",
              classes=("S", "W", "A", "B"), size_option=False, iters_option=False,
              overlap_option=False, comm_option=True),
    "zblas": App("zblas", "tiers-zblas",
                 "complex level-1/2 kernels zaxpy, zdotc, dznrm2, zgemv (fine-grained "
                 "OpenMP BLAS)", overlap_option=False),
}


def app_names() -> list[str]:
    """Return the names of the reference applications, in registry order."""
    return list(APPS)


def mbc_apps() -> list[str]:
    """Return the applications that run over ``--comm mbc``."""
    return [a.name for a in APPS.values() if a.comm_option]


# ---------------------------------------------------------------------------
# result documents


@dataclass(frozen=True)
class Kind:
    """A kind of result document."""

    kind: str           # "probe.mem"
    title: str          # what it holds
    written_by: str     # the command that writes it
    rendered_by: str    # the commands that display it
    page: str = ""      # its page under docs/, if any

    @property
    def schema(self) -> str:
        """The document's ``schema`` string, e.g. ``tiers.probe.mem/1``."""
        return f"tiers.{self.kind}/1"


_SHOWN = "tiers show, tiers report"
KINDS: dict[str, Kind] = {k.kind: k for k in (
    Kind("topo", "machine model: hwloc tree, processor graph", "tiers topo --json",
         _SHOWN, "schemas/topo.md"),
    Kind("probe.mem", "memory bandwidth per threads, pinning and placement",
         "tiers probe mem --json", _SHOWN, "schemas/probe-mem.md"),
    Kind("probe.sync", "OpenMP synchronisation and scheduling overheads, barriers",
         "tiers probe sync --json", _SHOWN, "schemas/probe-sync.md"),
    Kind("probe.net", "ping-pong, all-pairs latency/bandwidth fit, barriers",
         "tiers probe net --json", _SHOWN, "schemas/probe-net.md"),
    Kind("probe.noise", "machine-noise check: jitter per PU and load",
         "tiers probe noise --json", _SHOWN, "schemas/probe-noise.md"),
    Kind("map", "placement: groups, rank to (host, PU), predicted costs",
         "tiers map --json", _SHOWN, "schemas/map.md"),
    Kind("tune", "default vs mapped placement: measured times and the model's prediction",
         "tiers tune --json", "tiers tune", "map.md"),
    Kind("trace", "trace summary: per-function profile, messages, comm matrix",
         "tiers trace (summary.json in the trace folder)",
         "tiers trace stats, tiers show, tiers report", "schemas/trace.md"),
    Kind("mbc.run", "traffic of a program under tiers mbc run: messages per size bucket, "
         "remote write vs FIFO, unexpected messages, wildcard receives",
         "tiers mbc run --stats --json", _SHOWN, "mbc.md"),
    Kind("bench", "reference application over ranks x threads: times, speed-up",
         "tiers bench --json", _SHOWN, "schemas/bench.md"),
    Kind("survey", "index of a survey folder", "tiers survey (survey.json)", _SHOWN),
    Kind("vcluster", "virtual cluster: nodes, links, what runs on them",
         "tiers vcluster up, down, status --json", _SHOWN, "vcluster.md"),
)}


# ---------------------------------------------------------------------------
# native programs


@dataclass(frozen=True)
class Tool:
    """A native program installed in ``tiers/_native/bin`` (or a library
    in ``lib/``)."""

    name: str
    purpose: str
    prints: str = ""    # the schema of the JSON it prints on stdout, if any
    mpi: bool = False   # runs under mpirun


TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("tiers-topo", "the machine model of hwloc as JSON (tiers topo)", "topo", False),
    Tool("tiers-probe-mem", "memory bandwidth: STREAM kernels, read, write, memcpy "
         "(tiers probe mem)", "probe.mem"),
    Tool("tiers-probe-sync", "OpenMP overheads (EPCC method) and barriers "
         "(tiers probe sync)", "probe.sync"),
    Tool("tiers-probe-noise", "fixed-work-quantum noise check on every PU "
         "(tiers probe noise)", "probe.noise"),
    Tool("tiers-probe-net", "ping-pong, XOR-schedule all-pairs, MPI and hybrid barriers "
         "(tiers probe net)", "probe.net", True),
    Tool("tiers-bind", "binds a rank to its PUs, then runs the program (tiers map --launch)"),
    Tool("tiers-whoami", "each rank's host, binding and environment (launch checks)",
         "whoami", True),
    Tool("tiers-mbc-check", "multi-rank self-test of memory-based messaging", "mbc-check",
         True),
    Tool("tiers-mbc-bench", "round trip, bandwidth and barrier: MBC and MPI side by side",
         "mbc-bench", True),
    Tool("tiers-hybrid-check", "multi-rank self-test of the hybrid runtime", "hybrid-check",
         True),
    Tool("tiers-mbc-mpi-bench", "plain-MPI round trip and bandwidth that bench/mbc_vs_mpi "
         "runs with and without libtiers-mbc-mpi.so", "", True),
    Tool("tiers-trace-post", "raw trace files to OTF2, summary, call sites and Chrome JSON in "
         "one bounded-memory pass, a thread per rank (tiers trace)"),
    *(Tool(a.tool, f"reference application: {a.description.split(' (')[0]} (tiers bench "
           f"{a.name})", "app", True) for a in APPS.values()),
    Tool("libtiers-trace.so", "the PMPI tracer that tiers trace preloads (a library)"),
    Tool("libtiers-mbc-mpi.so", "the MPI interposition library that tiers mbc run preloads: "
         "an unmodified program's messages over libtiers-mbc (a library)"),
)}


def executables() -> list[str]:
    """Return the names of the native executables (not libraries)."""
    return [n for n in TOOLS if not n.endswith(".so")]


# ---------------------------------------------------------------------------
# error codes


def _header() -> Path:
    """Return tiers/error.h: installed with the package, else in this checkout."""
    from . import native

    installed = native.native_dir() / "include" / "tiers" / "error.h"
    if installed.is_file():
        return installed
    return Path(__file__).resolve().parents[2] / "native" / "include" / "tiers" / "error.h"


_CODE_RE = re.compile(r"^\s*(TIERS_(?:OK|ERR_[A-Z_]+))\s*=\s*(\d+),?\s*/\*\*<\s*(.*?)\s*\*/")


def error_codes(header: str | Path | None = None) -> list[dict]:
    """Return the libtiers error codes of ``tiers/error.h``, in order: dicts
    with ``code``, ``name`` and ``meaning`` (the header's comment)."""
    text = Path(header or _header()).read_text(encoding="utf-8")
    out = []
    for line in text.splitlines():
        m = _CODE_RE.match(line)
        if m:
            out.append({"code": int(m.group(2)), "name": m.group(1), "meaning": m.group(3)})
    return out


def strerror(code: int) -> str:
    """Return libtiers' ``tiers_strerror(code)`` (the installed library)."""
    import ctypes

    from . import native

    lib = ctypes.CDLL(str(native.lib_path("libtiers.so")))
    lib.tiers_strerror.restype = ctypes.c_char_p
    lib.tiers_strerror.argtypes = [ctypes.c_int]
    return lib.tiers_strerror(code).decode()


# ---------------------------------------------------------------------------
# subcommands: description and example


@dataclass(frozen=True)
class Command:
    """A subcommand's description (what it does, first paragraph of its
    --help) and one example command line."""

    description: str
    example: str


COMMANDS: dict[str, Command] = {
    "topo": Command(
        "Show the machine model: the hwloc tree, the layers and the processor graph "
        "(PU-pair depth matrix) that tiers map places onto.",
        "tiers topo --input 'synthetic:pack:2 numa:2 core:4 pu:1' --json topo.json"),
    "probe": Command(
        "Measure what each layer of this machine costs: memory bandwidth, "
        "synchronisation, messages between processes, machine noise.",
        "tiers probe mem --quick"),
    "probe mem": Command(
        "Memory bandwidth per thread count, pinning policy and data placement, with the "
        "STREAM kernels and read, write and memcpy kernels.",
        "tiers probe mem --threads 1,2 --pin compact --quick --json mem.json"),
    "probe sync": Command(
        "OpenMP synchronisation and loop-scheduling overheads measured with the EPCC "
        "method, and spin, pthread and condition-variable barriers.",
        "tiers probe sync --threads 2 --tests sync,barriers --quick"),
    "probe noise": Command(
        "Is this machine quiet enough to measure on: a fixed-work-quantum jitter test on "
        "every PU, and the machine's load.",
        "tiers probe noise --quick --json noise.json"),
    "probe net": Command(
        "Message costs between MPI processes: ping-pong latency and bandwidth, every pair "
        "in parallel with the XOR all-pairs schedule and a least-squares fit, "
        "MPI_Barrier and the hybrid barrier.",
        "tiers probe net -n 2 --quick --json net.json"),
    "map": Command(
        "Place ranks so that heavy traffic stays on fast layers: group the communication "
        "graph with Scotch and map each group onto its node's cores (AFC mapping, Scotch "
        "tleaf); write rankfiles, host files or launch the program.",
        "tiers map --stencil 3d:2,2,2:32,32,32 --machine 'synthetic:pack:2 core:4 pu:1' "
        "--rankfile rf.txt"),
    "tune": Command(
        "From a trace to a measured gain: trace a run of the program, map it onto the "
        "machine the runs use, then run it under the launcher's default placement and "
        "under the mapped one in interleaved rounds and print the measured times next to "
        "the model's prediction.",
        "tiers tune -n 4 --rounds 3 --json tune.json -- ./app"),
    "trace": Command(
        "Record what an MPI program communicates, in bounded memory per rank (swap-out at "
        "collectives padded to an equal overhead, the equal-overhead swap-out), into an "
        "OTF2 archive and a summary. 'tiers trace stats DIR' shows the profile; "
        "'tiers trace export DIR --format chrome' writes Chrome trace-event JSON.",
        "tiers trace --out tr -- mpirun -n 4 ./app"),
    "trace stats": Command(
        "Show the profile of a trace folder as MPI profilers do: functions sorted by "
        "time with time %, calls, time per call, bytes and min/mean/max over ranks; "
        "messages per size bucket; per-rank swap-outs and the communication matrix.",
        "tiers trace stats tr --sort time --top 10"),
    "trace export": Command(
        "Export a trace folder in another format: Chrome trace-event JSON (open it in "
        "chrome://tracing or Perfetto).",
        "tiers trace export tr --format chrome -o tr.chrome.json"),
    "mbc": Command(
        "Memory-based messaging under unmodified MPI programs: their point-to-point "
        "messages travel as remote writes into the receiver's memory (or its per-sender "
        "FIFO when the receive was not posted yet) through libtiers-mbc.",
        "tiers mbc run --stats -- mpirun -n 4 ./app"),
    "mbc run": Command(
        "Run an MPI program, unchanged, with libtiers-mbc-mpi.so preloaded in every rank: "
        "its messages are carried by libtiers-mbc, the rest goes to MPI. --stats prints "
        "the traffic per message size, the share sent by remote write and by the FIFO, "
        "unexpected messages, wildcard receives and the calls passed to MPI.",
        "tiers mbc run --stats --json mbc.json -- mpirun -n 4 ./app"),
    "vcluster": Command(
        "A virtual cluster on this machine: Linux network namespaces joined by shaped "
        "links, with Open MPI across them, to show multi-node effects (root).",
        "tiers vcluster up --nodes 2 --link 1gbit"),
    "vcluster up": Command("Build the virtual cluster (idempotent).",
                           "tiers vcluster up --nodes 2 --slots 2 --link 100mbit"),
    "vcluster down": Command("Remove everything 'tiers vcluster up' created.",
                             "tiers vcluster down"),
    "vcluster status": Command("Show the nodes, their links and what runs on them.",
                               "tiers vcluster status --json vc.json"),
    "vcluster mpirun": Command("Run an MPI program across the virtual cluster's nodes "
                               "with Open MPI.",
                               "tiers vcluster mpirun -n 4 -- ./app"),
    "vcluster srun": Command("Start an MPI program on the virtual cluster's nodes through "
                             "Slurm's srun (after 'tiers vcluster up --slurm').",
                             "tiers vcluster srun -- -n 4 ./app"),
    "vcluster salloc": Command("Run a command, such as mpirun, in a Slurm allocation of the "
                               "virtual cluster's nodes.",
                               "tiers vcluster salloc -- -n 4 mpirun ./app"),
    "vcluster sinfo": Command("Show Slurm's view of the virtual cluster's nodes.",
                              "tiers vcluster sinfo -- -N -l"),
    "vcluster env": Command("Print the exports that make srun, salloc and sinfo use the "
                            "virtual cluster's Slurm.",
                            "tiers vcluster env --mpi mpich"),
    "bench": Command(
        "Run a reference application of the hybrid runtime, flat and hybrid, over ranks "
        "x threads: time, speed-up, efficiency and the compute/comm/sync breakdown "
        "(COMPaS hybrid model).",
        "tiers bench jacobi3d --ranks 1,2 --threads 1,2 --quick --json b.json"),
    "survey": Command(
        "The whole picture in one folder: topology, a quick run of every probe, JSON "
        "documents, plots and report.html.",
        "tiers survey --out tiers-survey"),
    "show": Command("Print result documents again, as the command that made them "
                    "printed them.",
                    "tiers show tiers-survey/mem.json --format plain"),
    "report": Command("Write one self-contained HTML file from result documents or "
                      "folders of them: tables, plots, machine, versions, commands, "
                      "warnings.",
                      "tiers report tiers-survey -o report.html"),
    "config": Command("Print what a Makefile or CMakeLists.txt needs to build a C program "
                      "against the installed libtiers (docs/c-api.md).",
                      "cc app.c $(tiers config --cflags --libs --pkg tiers-mbc) -o app"),
}


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that epilog lines starting with two
    spaces (example command lines) are printed as they are."""

    def _fill_text(self, text, width, indent):
        out = []
        for para in text.split("\n"):
            if para.startswith("  ") or not para.strip():
                out.append(indent + para)
            else:
                out.append(super()._fill_text(para, width, indent))
        return "\n".join(out)


def epilog(name: str) -> str:
    """Return the ``example:`` epilog of subcommand ``name``."""
    return f"example:\n  {COMMANDS[name].example}"


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:  # noqa: SLF001 - argparse keeps no public list
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            yield from action.choices.items()


def describe(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """Give every subparser of ``parser`` (recursively) the description and
    example of :data:`COMMANDS`, keeping a description it already has."""
    for name, sub in _subparsers(parser):
        full = f"{prefix} {name}".strip()
        cmd = COMMANDS.get(full)
        if cmd is not None:
            if not sub.description:
                sub.description = cmd.description
            if not sub.epilog:
                sub.epilog = epilog(full)
            sub.formatter_class = HelpFormatter
        describe(sub, full)


def walk(parser: argparse.ArgumentParser, prefix: str = ""):
    """Yield ``(name, parser)`` for every subcommand of ``parser``, depth first."""
    for name, sub in _subparsers(parser):
        full = f"{prefix} {name}".strip()
        yield full, sub
        yield from walk(sub, full)
