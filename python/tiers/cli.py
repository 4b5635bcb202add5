"""The ``tiers`` command line: argument parsing only.  Each command calls
plain functions of its part's module, which take and return plain data."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from . import registry
from . import validate as V
from .errors import TiersError


class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option, kept for one release: it works as the
    new one does, is hidden from --help and prints a one-line note."""

    def __init__(self, option_strings, dest, new: str = "", const=None, **kwargs):
        self.new = new
        self.value = const
        if const is not None:
            kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"tiers: note: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, self.value if self.value is not None else values)


def _deprecated(p: argparse.ArgumentParser, old: str, new: str, *, dest: str,
                const=None, **kwargs) -> None:
    """Add ``old`` as a hidden, deprecated spelling of option ``new``."""
    p.add_argument(old, dest=dest, action=_DeprecatedAlias, new=new, const=const,
                   help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kwargs)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr, exit status 2."""

    def error(self, message):  # noqa: D401 - argparse's signature
        raise TiersError(f"{message} (see '{self.prog} --help')", code=2)


def _add_output(p: argparse.ArgumentParser, plot: bool = False) -> None:
    p.add_argument("--json", metavar="FILE", help="write the result document to FILE "
                   "('-': standard output)")
    p.add_argument("--follow-symlinks", action="store_true",
                   help="write output files through symbolic links (refused otherwise)")
    if plot:
        p.add_argument("--plot", metavar="FILE",
                       help="write the plot to FILE (default: next to --json, as .png)")
    _add_format(p)


def _add_format(p: argparse.ArgumentParser, json: bool = True) -> None:
    from .render import FORMATS
    choices = FORMATS if json else tuple(f for f in FORMATS if f != "json")
    p.add_argument("--format", choices=choices, default="table",
                   help="how tables are printed: table (boxes, default), plain (aligned "
                   "columns, no boxes), csv (each table after a '# title' line; other text "
                   "on stderr)" + (", json (the result document on stdout)" if json else ""))


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of the whole command line."""
    parser = _Parser(prog="tiers", description="Measure, trace, place and program the "
                     "layers of parallel machines.")
    parser.add_argument("--version", action="version", version=f"tiers {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("topo", help="show the machine model: hwloc tree and processor graph")
    p.add_argument("--input", metavar="SRC", default="this", type=V.path("--input"),
                   help="'this' (default), an hwloc XML file, or 'synthetic:DESC'")
    p.add_argument("--no-matrix", action="store_true",
                   help="do not print the PU-pair depth matrix")
    p.add_argument("--matrix", action="store_true",
                   help="print the PU-pair depth matrix even above 32 PUs")
    _add_output(p)

    probe = sub.add_parser("probe", help="measure what a layer costs")
    psub = probe.add_subparsers(dest="probe", metavar="PROBE", parser_class=_Parser)
    psub.required = True

    p = psub.add_parser("mem", help="memory bandwidth per thread count, pinning and placement "
                        "(STREAM kernels, read, write, memcpy)")
    p.add_argument("--threads", metavar="LIST", type=V.count_list("--threads", maximum=1024),
                   help="thread counts, e.g. 1,2 or 1-8 "
                   "(default: 1 to all PUs)")
    p.add_argument("--pin", metavar="LIST",
                   type=V.word_list("--pin", ("none", "compact", "scatter")),
                   help="pinning policies among none, compact, scatter (default: all three; "
                   "compact with --quick)")
    p.add_argument("--placement", metavar="LIST",
                   type=V.word_list("--placement", ("first-touch", "master")),
                   help="data placement: first-touch, master, or both (default; first-touch "
                   "with --quick)")
    p.add_argument("--kernels", metavar="LIST", type=V.word_list(
                   "--kernels", ("copy", "scale", "add", "triad", "read", "write", "memcpy")),
                   help="among copy, scale, add, triad, read, write, memcpy (default: all)")
    p.add_argument("--size", metavar="BYTES", type=V.buffer_size("--size"),
                   help="bytes per array, e.g. 512M (default: 4x the last-level caches, "
                   "at least 64M)")
    p.add_argument("--ntimes", type=V.count("--ntimes", 2, 200), metavar="N", default=None,
                   help="repetitions per kernel; the first is dropped as in STREAM (default 10)")
    p.add_argument("--stores", choices=["auto", "regular", "nt"], default=None,
                   help="regular stores, non-temporal (streaming) stores, or auto: both, "
                   "each kernel reporting the one with the shorter mean time (default)")
    p.add_argument("--quick", action="store_true", help="small sweep that ends in seconds")
    _add_output(p, plot=True)

    p = psub.add_parser("sync", help="OpenMP synchronisation and scheduling overheads (EPCC "
                        "method) and spin / pthread / condvar barriers")
    p.add_argument("--threads", metavar="LIST", type=V.count_list("--threads", maximum=1024),
                   help="thread counts (default: 2 to all PUs)")
    p.add_argument("--tests", metavar="LIST", default="sync,sched,barriers",
                   help="groups among sync, sched, barriers (default: all)")
    p.add_argument("--reps", type=V.count("--reps", 2, 100000),
                   metavar="N", help="outer repetitions at least (default 20)")
    p.add_argument("--figure-time", type=V.real("--figure-time", above=0, maximum=3600),
                   metavar="S", help="repeat each figure until the 95 %% CI of its median is "
                   "within +-5 %% or S seconds pass (default 1, --quick 0.2)")
    p.add_argument("--test-time", type=V.real("--test-time", above=0, maximum=1e7), metavar="US",
                   help="target time of one test in microseconds (default 1000)")
    p.add_argument("--delay-time", type=V.real("--delay-time", above=0, maximum=1e5), metavar="US",
                   help="length of delay() in microseconds (default 0.1)")
    p.add_argument("--chunks", metavar="LIST", type=V.count_list("--chunks", maximum=1000000),
                   help="chunk sizes for scheduling "
                   "(default 1,2,4,...,128)")
    p.add_argument("--pin", choices=["compact", "scatter"], default="compact",
                   help="pinning of the threads (default compact)")
    p.add_argument("--launches", type=V.count("--launches", 1, 100), metavar="N",
                   help="separate launches of the measurement (default 3); each figure is "
                   "the median of the launches' medians, noisy when they disagree")
    p.add_argument("--quick", action="store_true", help="fewer repetitions, ends in seconds")
    _add_output(p, plot=True)

    p = psub.add_parser("noise", help="is this machine quiet enough to measure on: a fixed-"
                        "work-quantum jitter test on every PU, the machine's load, and "
                        "whether the host moves the PUs (a cache line's round trip)")
    p.add_argument("--quick", action="store_true", help="0.25 s of quanta instead of 1 s")
    p.add_argument("--quantum-us", type=V.real("--quantum-us", minimum=1, maximum=1e5),
                   metavar="US", help="work per quantum, in microseconds (default 100)")
    p.add_argument("--duration", type=V.real("--duration", minimum=0.001, maximum=600),
                   metavar="S", help="seconds of quanta per PU (default 1, --quick 0.25)")
    p.add_argument("--pus", metavar="LIST", type=V.count_list("--pus", minimum=0),
                   help="PUs to test, e.g. 0,1 or 0-3 (default all)")
    p.add_argument("--pair-samples", type=V.integer("--pair-samples", minimum=0, maximum=100),
                   metavar="N", help="samples of each pair of PUs (each with the next): a "
                   "cache line's round trip between them, to see whether the host moves them "
                   "(default 5, --quick 3; 0: none)")
    _add_output(p)

    p = psub.add_parser("net", help="message costs between processes: ping-pong latency and "
                        "bandwidth, all pairs in parallel (XOR schedule), MPI_Barrier")
    p.add_argument("-n", "--ranks", type=V.ranks("--ranks", minimum=2), metavar="N",
                   help="MPI ranks (default: the cores of this machine, at least 2)")
    p.add_argument("--all-pairs", action="store_true",
                   help="also measure every pair of ranks in parallel and fit latency and "
                   "bandwidth per pair (XOR all-pairs schedule; see docs/references.md)")
    p.add_argument("--tests", metavar="LIST",
                   type=V.word_list("--tests", ("pingpong", "allpairs", "barrier", "allreduce")),
                   help="among pingpong, allpairs, barrier, allreduce (default: "
                   "pingpong,barrier)")
    p.add_argument("--sizes", metavar="LIST", type=V.size_list(
                   "--sizes", maximum=V.INT_MAX, limit_name="the largest MPI message"),
                   help="ping-pong sizes, e.g. 0,8,1K,4M (default: 0 and powers of two up to "
                   "4 MiB; powers of four with --quick)")
    p.add_argument("--iters", type=V.count("--iters"), metavar="N",
                   help="ping-pong round trips per timed block (default 200, 20 above 8 KiB; "
                   "blocks repeat until the median is steady, docs/statistics.md)")
    p.add_argument("--window", type=V.count("--window", 1, 4096), metavar="N",
                   help="non-blocking sends per window for the streaming bandwidth (default 64)")
    p.add_argument("--pair", metavar="A,B", type=V.pair("--pair"),
                   help="the two ranks of the ping-pong (default 0,1)")
    p.add_argument("--center", metavar="BYTES", type=V.size(
                   "--center", minimum=1, maximum=V.INT_MAX, limit_name="the largest MPI message"),
                   help="all-pairs centre message size (default 1500000)")
    p.add_argument("--factors", metavar="LIST",
                   type=V.real_list("--factors", above=0, maximum=1e6),
                   help="all-pairs sizes as factors of the centre (default "
                   "0.667,0.8,1,1.25,1.5)")
    p.add_argument("--reps", type=V.count("--reps", 1, 100000), metavar="N",
                   help="all-pairs repetitions per size, at most (default 50; 20 with "
                   "--quick; they repeat until the median is steady, docs/statistics.md)")
    p.add_argument("--launches", type=V.count("--launches", 1, 100), metavar="N",
                   help="separate launches of the ping-pong, all-pairs and MPI_Barrier "
                   "tests, run in interleaved rounds; each figure is the median over them "
                   "(default 3)")
    p.add_argument("--cores-per-node", type=V.count("--cores-per-node"), metavar="C",
                   help="cores per node measuring different steps between nodes at once "
                   "(default 1)")
    p.add_argument("--node-size", type=V.count("--node-size"), metavar="P",
                   help="treat every P consecutive ranks as one node (default: by host name)")
    p.add_argument("--flat", action="store_true",
                   help="one XOR schedule over all ranks, ignoring nodes (every rank pair "
                   "measured directly, as mpiGraph)")
    p.add_argument("--barrier-iters", type=V.count("--barrier-iters"), metavar="N",
                   help="MPI_Barrier calls timed per process count (default 1000)")
    p.add_argument("--barrier-threads", type=V.count("--barrier-threads", 1, 1024), metavar="T",
                   help="threads per process of the hybrid barrier (default 2 where every "
                   "rank has 2 PUs of its own, else 1)")
    p.add_argument("--timeout", dest="time_limit", type=V.duration("--timeout"), metavar="S",
                   help="time limit of the whole run, in seconds (default 1800)")
    p.add_argument("--wait-timeout", dest="timeout", type=V.duration("--wait-timeout"),
                   metavar="S", help="time limit of every wait inside the probe, in seconds "
                   "(default 60)")
    _deprecated(p, "--time-limit", "--timeout", dest="time_limit",
                type=V.duration("--time-limit"))
    p.add_argument("--launcher", metavar="KIND", type=V.launcher_kind(),
                   help="openmpi, mpich or slurm (default: "
                   "$TIERS_LAUNCHER, else detected)")
    p.add_argument("--hostfile", metavar="FILE", type=V.input_file("--hostfile"),
                   help="hostfile for the launcher")
    p.add_argument("--launcher-args", metavar="ARGS", type=V.args_string("--launcher-args"),
                   help="extra launcher options, one quoted string, e.g. "
                   "\"--mca btl self,vader\"")
    p.add_argument("--quick", action="store_true", help="few sizes and repetitions, ends in "
                   "seconds")
    p.add_argument("--vcluster", action="store_true",
                   help="run on the virtual cluster of 'tiers vcluster up' (Open MPI)")
    _add_output(p, plot=True)

    p = sub.add_parser("map", help="place ranks so that heavy traffic stays on fast layers "
                       "(AFC mapping: Scotch grouping and tleaf mapping)")
    p.add_argument("--comm", metavar="FILE", type=lambda t: t if os.path.isdir(t) else
                   V.input_file("--comm")(t),
                   help="communication pattern: a tiers trace folder or its "
                   "summary.json, a CSV or Matrix Market matrix of bytes, or a METIS/Scotch graph")
    p.add_argument("--placement", metavar="NAME", help="write/launch this placement instead "
                   "of the model's best: afc, afc-nb, block, map-by-node, map-by-package, "
                   "geometric, random")
    p.add_argument("--stencil", metavar="SPEC", help="structured grid: 3d:NX,NY,NZ:gx,gy,gz or "
                   "2d:NX,NY:gx,gy (subdomains per axis : grid points per subdomain)")
    p.add_argument("--numbering", choices=["x-fastest", "cart"], default="x-fastest",
                   help="how the program numbers the stencil's subdomains: x-fastest "
                   "(default, as the AFC mapping code) or cart (last axis fastest, as MPI_Cart_create)")
    p.add_argument("--machine", metavar="SRC", default="this",
                   help="one node: 'this' (default), an hwloc XML file, or 'synthetic:DESC'")
    p.add_argument("--nodes", type=V.count("--nodes", 1, 1 << 20),
                   metavar="N", help="number of such nodes (default 1)")
    p.add_argument("--hostfile", metavar="FILE", type=V.input_file("--hostfile"),
                   help="hosts and their slots (Open MPI syntax)")
    p.add_argument("--links", metavar="FILE", type=V.input_file("--links"),
                   help="measured inter-node costs: a 'tiers probe "
                   "net --all-pairs' JSON; groups go to cheap node pairs when costs differ")
    p.add_argument("--layer-cost", metavar="LIST", help="per-layer LAYER=LAT_US/BW_MBPS for the "
                   "predicted time, e.g. node=77/2227 (node: one node's link; default: the AFC mapping paper's Table 5)")
    p.add_argument("--seed", type=V.seed("--seed"),
                   default=1, help="seed of Scotch and of the random "
                   "placement (default 1)")
    p.add_argument("--oversubscribe", action="store_true",
                   help="allow more ranks than cores (cores are shared evenly)")
    p.add_argument("--allow-disconnected", action="store_true",
                   help="map a communication graph made of separate pieces")
    p.add_argument("--rankfile", metavar="FILE", help="write an Open MPI rankfile")
    p.add_argument("--hydra", metavar="FILE", help="write an MPICH Hydra machine file "
                   "(one host per rank)")
    p.add_argument("--slurm", metavar="FILE", help="write a SLURM_HOSTFILE for "
                   "--distribution=arbitrary")
    p.add_argument("--table", metavar="FILE", help="write the JSON table rank -> (host, PU)")
    p.add_argument("--permutation", metavar="FILE",
                   help="write the renumbering old rank -> new rank, one per line")
    p.add_argument("--launch", action="store_true",
                   help="then run the command after -- with the placement applied: a "
                   "launcher line (mpirun/mpiexec/srun ... ./app) or the program alone "
                   "(tiers launches it)")
    p.add_argument("--launcher", metavar="KIND", type=V.launcher_kind(),
                   help="openmpi, mpich or slurm: the launcher "
                   "for a program given alone to --launch (default: detected)")
    p.add_argument("--dry-run", action="store_true",
                   help="with --launch: print the command line that would run, ready to "
                   "paste, and keep the placement files it names; run nothing")
    p.add_argument("--vcluster", action="store_true",
                   help="map onto the nodes of 'tiers vcluster up' and launch the program "
                   "(given alone to --launch) there")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...",
                   help="with --launch: the command to run, e.g. -- mpirun -n 8 ./app")
    _add_output(p)

    p = sub.add_parser("tune", help="trace a run, map it, then measure the program under "
                       "the launcher's default placement and under the mapped one",
                       usage="tiers tune [--vcluster | --hostfile FILE] -n N [--rounds R] "
                       "[options] -- PROGRAM [ARGS...]")
    p.add_argument("-n", "--ranks", type=V.ranks("--ranks"), metavar="N",
                   help="ranks (with --vcluster default: every slot of the cluster)")
    p.add_argument("--vcluster", action="store_true",
                   help="run on the virtual cluster of 'tiers vcluster up' and map onto "
                   "its nodes")
    p.add_argument("--hostfile", metavar="FILE", type=V.input_file("--hostfile"),
                   help="run on these hosts (Open MPI syntax) and map onto them")
    p.add_argument("--rounds", type=V.count("--rounds", 3, 1000), default=6, metavar="R",
                   help="interleaved rounds, each one run of both placements (default 6, "
                   "the fewest with a 95%% interval of the median; at least 3)")
    p.add_argument("--launcher", metavar="KIND", type=V.launcher_kind(),
                   help="openmpi, mpich or slurm (default: $TIERS_LAUNCHER, else detected)")
    p.add_argument("--timeout", type=V.duration("--timeout"), metavar="S",
                   help="time limit of each run in seconds")
    p.add_argument("--seed", type=V.seed("--seed"), default=1,
                   help="seed of the mapping (default 1)")
    p.add_argument("--keep", action="store_true",
                   help="keep the temporary folder (trace, rankfile) and print its path")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- PROGRAM...",
                   help="the program alone and its arguments (no launcher)")
    _add_output(p)

    p = sub.add_parser("trace", help="record what an MPI program communicates, in bounded "
                       "memory (OTF2 archive + summary); also 'trace stats DIR', "
                       "'trace export DIR --format chrome'",
                       usage="tiers trace [options] -- CMD...\n"
                       "       tiers trace stats DIR [--sort time|calls|bytes|name] [--top N]\n"
                       "       tiers trace export DIR --format chrome [-o FILE]")
    p.add_argument("--budget", metavar="BYTES", default="64M",
                   type=V.buffer_size("--budget", minimum=64 << 10),
                   help="trace buffer per rank, e.g. 64M (default 64M, at least 64K)")
    p.add_argument("--policy", choices=["auto", "sync", "full", "off"], default="auto",
                   help="swap-out policy: auto (default: as sync, and a rank whose buffer "
                   "fills between collectives swaps out alone there, marked; no event lost), "
                   "sync (after collectives on MPI_COMM_WORLD, padded to tau; tracing stops "
                   "when the buffer fills between them), full (when a rank's buffer is "
                   "full), off (keep all in memory)")
    p.add_argument("--tau", type=V.duration("--tau", maximum=3600, allow_zero=True), metavar="S",
                   help="sync: length of every swap-out in seconds (default: automatic)")
    p.add_argument("--threshold", type=V.real("--threshold", above=0, maximum=1), metavar="F",
                   help="sync: buffer fill fraction that triggers a swap-out (default 0.5)")
    p.add_argument("--swap-every", type=V.count("--swap-every"), metavar="N",
                   help="sync: swap out at every N-th collective on MPI_COMM_WORLD, whatever "
                   "the fill (the seed's fixed schedule)")
    p.add_argument("--filter", metavar="include=F,...|exclude=F,...",
                   help="record only these MPI functions, or all but these, e.g. "
                   "include=MPI_Send,MPI_Recv (MPI_Init and MPI_Finalize always)")
    p.add_argument("--out", metavar="DIR", type=V.path("--out"),
                   help="output folder (default: a new tiers-trace-<date> folder)")
    p.add_argument("--force", action="store_true",
                   help="replace the trace in an existing output folder")
    p.add_argument("--timeout", type=V.duration("--timeout"), metavar="S",
                   help="stop the program after S seconds")
    p.add_argument("--vcluster", action="store_true",
                   help="run the program (give it alone after --) on the virtual cluster of "
                   "'tiers vcluster up'")
    p.add_argument("-n", "--ranks", type=V.ranks("--ranks"), metavar="N",
                   help="with --vcluster: ranks (default: every slot of the cluster)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...",
                   help="the command to trace, e.g. -- mpirun -n 4 ./app")

    mbc = sub.add_parser("mbc", help="memory-based messaging under unmodified MPI programs")
    msub = mbc.add_subparsers(dest="mbc_action", metavar="ACTION", parser_class=_Parser)
    msub.required = True
    p = msub.add_parser("run", help="run an MPI program with its messages carried by "
                        "libtiers-mbc (libtiers-mbc-mpi.so preloaded)",
                        usage="tiers mbc run [--stats] [--json FILE|-] [--timeout S] "
                        "-- LAUNCHER ... PROGRAM [ARGS...]")
    p.add_argument("--stats", action="store_true",
                   help="print the traffic per message size: messages, bytes, share carried "
                   "by remote writes and by the FIFO, unexpected messages, wildcard receives, "
                   "calls passed to MPI (implied by --json)")
    p.add_argument("--timeout", type=V.duration("--timeout"), metavar="S",
                   help="stop the program after S seconds")
    _add_output(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...",
                   help="the command to run, e.g. -- mpirun -n 4 ./app")

    vc = sub.add_parser("vcluster", help="a virtual cluster on this machine: network "
                        "namespaces joined by shaped links, with Open MPI across them (root)")
    vsub = vc.add_subparsers(dest="vcluster_action", metavar="ACTION", parser_class=_Parser)
    vsub.required = True
    p = vsub.add_parser("up", help="build the cluster (idempotent)")
    p.add_argument("--nodes", type=V.count("--nodes", 1, 64),
                   default=2, metavar="N", help="nodes (default 2)")
    p.add_argument("--slots", type=V.count("--slots", 1, 1024), default=1, metavar="S",
                   help="MPI slots per node (default 1)")
    p.add_argument("--link", default="1gbit", metavar="RATE",
                   help="bandwidth of every node's link, tc units: 100mbit, 1gbit, 10gbit, "
                   "or 'none' for unshaped (default 1gbit)")
    p.add_argument("--subnet", default="10.77.0.0/24", metavar="CIDR",
                   help="private subnet of the nodes (default 10.77.0.0/24)")
    p.add_argument("--slurm", action="store_true",
                   help="run Slurm on it too: munged, slurmctld and one slurmd per node "
                   "(packages slurm-wlm and munge)")
    p.add_argument("--slurm-timeout", type=V.duration("--slurm-timeout", maximum=600),
                   metavar="S", help="with --slurm: seconds to wait for every node to be "
                   "idle in sinfo (default 30)")
    _add_output(p)
    p = vsub.add_parser("down", help="remove everything 'up' created")
    _add_output(p)
    p = vsub.add_parser("status", help="show the nodes, their links and what runs on them")
    _add_output(p)
    p = vsub.add_parser("mpirun", help="run an MPI program across the nodes with Open MPI",
                        usage="tiers vcluster mpirun [-n N] [options] -- PROGRAM [ARGS...]")
    p.add_argument("-n", "--ranks", type=V.ranks("--ranks"), metavar="N",
                   help="ranks (default: all slots of the cluster)")
    p.add_argument("--map-by", metavar="OBJ", help="Open MPI --map-by (default: fill each "
                   "node's slots in turn); 'node' puts consecutive ranks on different nodes")
    p.add_argument("--oversubscribe", action="store_true",
                   help="allow more ranks than slots (automatic when -n exceeds them)")
    p.add_argument("--rankfile", metavar="FILE", type=V.input_file("--rankfile"),
                   help="an Open MPI rankfile naming the nodes (tiers map --vcluster "
                   "--rankfile writes one): every rank on its node and core")
    p.add_argument("-x", "--env", action="append", metavar="NAME[=VALUE]",
                   help="set NAME in every rank (repeatable)")
    p.add_argument("--timeout", type=V.duration("--timeout"), metavar="S",
                   help="stop the run after S seconds")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- PROGRAM...",
                   help="the program and its arguments")
    for name, what in (("srun", "start an MPI program on the nodes through Slurm's srun"),
                       ("salloc", "run a command in a Slurm allocation of the nodes "
                        "(e.g. mpirun)"),
                       ("sinfo", "Slurm's view of the nodes")):
        p = vsub.add_parser(name, help=f"{what} (after 'up --slurm')",
                            usage=f"tiers vcluster {name} [--mpi M] [--timeout S] -- "
                            f"[{name.upper()} OPTIONS] {'' if name == 'sinfo' else 'PROGRAM'}")
        p.add_argument("--mpi", choices=("openmpi", "mpich"),
                       help="the MPI of the program, which picks srun's PMI (pmix for "
                       "Open MPI, pmi2 for MPICH; default: the MPI tiers was built with)")
        p.add_argument("--timeout", type=V.duration("--timeout"), metavar="S",
                       help="stop it after S seconds")
        p.add_argument("cmd", nargs=argparse.REMAINDER, metavar=f"-- {name.upper()} ARGS...",
                       help=f"{name}'s own options and the program")
    p = vsub.add_parser("env", help="print the exports that make srun, salloc and sinfo "
                        "use the cluster's Slurm: eval \"$(tiers vcluster env)\"")
    p.add_argument("--mpi", choices=("openmpi", "mpich"),
                   help="the MPI of the programs (picks SLURM_MPI_TYPE)")

    p = sub.add_parser("bench", help="run a reference application of the hybrid runtime, "
                       "flat and hybrid, over ranks x threads: time, speed-up, efficiency "
                       "and the compute/comm/sync breakdown (COMPaS hybrid model)")
    p.add_argument("app", metavar="APP", choices=registry.app_names(),
                   help="the application: " + "; ".join(
                       f"{a.name}: {a.description}" for a in registry.APPS.values()))
    p.add_argument("--ranks", metavar="LIST", type=V.count_list("--ranks"),
                   help="MPI ranks, e.g. 1,2,4 (default 1,2,4)")
    p.add_argument("--threads", metavar="LIST", type=V.count_list("--threads", maximum=1024),
                   help="threads per rank, e.g. 1,2 (default 1,2)")
    p.add_argument("--class", dest="klass", metavar="C", help="problem class (cg: S, W, A, B)")
    p.add_argument("--size", metavar="N", help="problem size passed to the app, e.g. 96 or "
                   "96,96,48")
    p.add_argument("--iters", type=V.count("--iters"), metavar="K", help="iterations")
    p.add_argument("--overlap", action="store_true",
                   help="overlap the halo exchange with interior computation")
    p.add_argument("--oversubscribe", action="store_true",
                   help="also run the cells of the default grid whose ranks x threads exceed "
                   "the cores (marked oversubscribed, left out of the speed-up lines)")
    p.add_argument("--pin", choices=["none", "compact", "scatter"],
                   help="pinning of each rank's threads within its cpuset (default compact; "
                   "none when oversubscribed)")
    p.add_argument("--timeout", type=V.duration("--timeout"), metavar="S",
                   help="time limit of each run in seconds (default 600)")
    p.add_argument("--launcher", metavar="KIND", type=V.launcher_kind(),
                   help="openmpi, mpich or slurm (default: "
                   "$TIERS_LAUNCHER, else detected)")
    p.add_argument("--hostfile", metavar="FILE", type=V.input_file("--hostfile"),
                   help="hostfile for the launcher")
    p.add_argument("--vcluster", action="store_true",
                   help="run on the virtual cluster of 'tiers vcluster up' (Open MPI)")
    p.add_argument("--launcher-args", metavar="ARGS", type=V.args_string("--launcher-args"),
                   help="extra launcher options, one quoted string")
    p.add_argument("--quick", action="store_true", help="small problems that end in seconds")
    p.add_argument("--comm", metavar="LIST",
                   help="messaging of the app: mpi, mbc (tiers' memory-based layer; "
                   + ", ".join(registry.mbc_apps()) + ") or mpi,mbc to run both and "
                   "compare them (default mpi)")
    p.add_argument("--app-args", metavar="ARGS", type=V.args_string("--app-args"),
                   help="more application options, one quoted string, e.g. \"--grid 2,1,1\"")
    _add_output(p, plot=True)

    p = sub.add_parser("survey", help="the whole picture: topology and a quick run of every "
                       "probe, with JSON and plots in one folder")
    p.add_argument("--out", metavar="DIR", default="tiers-survey", type=V.path("--out"),
                   help="output folder (default ./tiers-survey)")
    p.add_argument("--full", action="store_true",
                   help="full probes instead of their quick modes")
    p.add_argument("--no-report", action="store_true",
                   help="do not write report.html into the output folder")
    _add_format(p, json=False)

    p = sub.add_parser("show", help="print result documents again, as the command that "
                       "made them printed them")
    p.add_argument("files", nargs="+", metavar="FILE.json", help="tiers result documents")
    _add_format(p, json=False)

    p = sub.add_parser("report", help="one self-contained HTML file from result documents "
                       "(tables, plots, machine, versions, commands, warnings)")
    p.add_argument("inputs", nargs="+", metavar="DIR|FILE",
                   help="result documents, or folders of them (a survey folder)")
    p.add_argument("-o", "--output", metavar="FILE", default="report.html",
                   help="the HTML file to write (default report.html)")
    p.add_argument("--follow-symlinks", action="store_true",
                   help="write the output file through a symbolic link (refused otherwise)")
    p = sub.add_parser("config", help="compiler and linker flags for C programs that use "
                       "libtiers (pkg-config, CMake)",
                       description="Print what a Makefile or CMakeLists.txt needs to build a "
                       "C program against the installed libtiers (docs/c-api.md).",
                       epilog="example:\n  cc app.c $(tiers config --cflags --libs --pkg "
                       "tiers-mbc) -o app\n  export PKG_CONFIG_PATH=$(tiers config "
                       "--pkgconfig-path)\n  cmake -DCMAKE_PREFIX_PATH=$(tiers config "
                       "--cmake-prefix) ...",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cflags", action="store_true", help="print the compiler flags")
    p.add_argument("--libs", action="store_true",
                   help="print the linker flags (with an rpath: no LD_LIBRARY_PATH needed)")
    p.add_argument("--pkg", choices=["tiers", "tiers-hybrid", "tiers-mbc"], default="tiers",
                   help="which library: tiers (default), tiers-hybrid (MPI+threads "
                   "runtime) or tiers-mbc (memory-based messaging)")
    p.add_argument("--pkgconfig-path", action="store_true",
                   help="print the folder of tiers.pc, tiers-hybrid.pc and tiers-mbc.pc")
    p.add_argument("--cmake-prefix", action="store_true",
                   help="print the prefix for CMAKE_PREFIX_PATH (find_package(tiers))")
    registry.describe(parser)  # every subcommand's description and example
    return parser


def _dispatch(args: argparse.Namespace, argv: list[str]) -> int:
    full_argv = ["tiers", *argv]
    from . import output, render
    render.configure_from_args(args)  # --format json means --json -
    V.check_args(args)  # limits that depend on the machine or on several options
    output.check_outputs(args)  # bad output paths fail before any measurement
    if args.command == "topo":
        from . import topo
        return topo.main(args, full_argv)
    if args.command == "probe" and args.probe == "mem":
        from .probe import mem
        return mem.main(args, full_argv)
    if args.command == "probe" and args.probe == "sync":
        from .probe import sync
        return sync.main(args, full_argv)
    if args.command == "probe" and args.probe == "noise":
        from . import noise
        return noise.main(args, full_argv)
    if args.command == "probe" and args.probe == "net":
        from .probe import net
        return net.main(args, full_argv)
    if args.command == "map":
        from . import map as map_cmd
        return map_cmd.main(args, full_argv)
    if args.command == "tune":
        from . import tune
        return tune.main(args, full_argv)
    if args.command == "trace":
        from . import trace
        return trace.main(args, full_argv)
    if args.command == "mbc" and args.mbc_action == "run":
        from . import mbcrun
        return mbcrun.main(args, full_argv)
    if args.command == "vcluster":
        from . import vcluster
        return vcluster.main(args, full_argv)
    if args.command == "bench":
        from . import bench
        return bench.main(args, full_argv)
    if args.command == "survey":
        from . import survey
        return survey.main(args, full_argv)
    if args.command == "show":
        from . import show
        return show.main(args, full_argv)
    if args.command == "report":
        from . import report
        return report.main(args, full_argv)
    if args.command == "config":
        from . import config
        return config.main(args, full_argv)
    raise TiersError(f"unknown command {args.command}")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tiers`` console command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    from .render import setup_streams
    setup_streams()  # an ASCII locale gets '?' rather than a traceback
    try:
        args = build_parser().parse_args(argv)
        return _dispatch(args, argv) or 0
    except TiersError as exc:
        print(f"tiers: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt as exc:  # also launch.Interrupted: SIGTERM/SIGHUP, 128+sig
        print(f"tiers: {exc or 'interrupted'}", file=sys.stderr)
        return getattr(exc, "code", 130)
    except BrokenPipeError:  # the reader left (tiers topo | head): not an error
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
