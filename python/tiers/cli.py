"""The ``tiers`` command line: argument parsing only.  Each command calls
plain functions of its part's module, which take and return plain data."""

from __future__ import annotations

import argparse
import sys

from . import __version__
from .errors import TiersError


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr, exit status 2."""

    def error(self, message):  # noqa: D401 - argparse's signature
        raise TiersError(f"{message} (see '{self.prog} --help')", code=2)


def _add_output(p: argparse.ArgumentParser, plot: bool = False) -> None:
    p.add_argument("--json", metavar="FILE", help="write the result document to FILE")
    if plot:
        p.add_argument("--plot", metavar="FILE",
                       help="write the plot to FILE (default: next to --json, as .png)")


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of the whole command line."""
    parser = _Parser(prog="tiers", description="Measure, trace, place and program the "
                     "layers of parallel machines.")
    parser.add_argument("--version", action="version", version=f"tiers {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("topo", help="show the machine model: hwloc tree and processor graph")
    p.add_argument("--input", metavar="SRC", default="this",
                   help="'this' (default), an hwloc XML file, or 'synthetic:DESC'")
    p.add_argument("--no-matrix", action="store_true",
                   help="do not print the PU-pair depth matrix")
    _add_output(p)

    probe = sub.add_parser("probe", help="measure what a layer costs")
    psub = probe.add_subparsers(dest="probe", metavar="PROBE", parser_class=_Parser)
    psub.required = True

    p = psub.add_parser("mem", help="memory bandwidth per thread count, pinning and placement "
                        "(STREAM kernels, read, write, memcpy)")
    p.add_argument("--threads", metavar="LIST", help="thread counts, e.g. 1,2 or 1-8 "
                   "(default: 1 to all PUs)")
    p.add_argument("--pin", metavar="LIST", default="none,compact,scatter",
                   help="pinning policies among none, compact, scatter (default: all three)")
    p.add_argument("--placement", metavar="LIST", default="first-touch,master",
                   help="data placement: first-touch, master, or both (default)")
    p.add_argument("--kernels", metavar="LIST",
                   help="among copy, scale, add, triad, read, write, memcpy (default: all)")
    p.add_argument("--size", metavar="BYTES",
                   help="bytes per array, e.g. 512M (default: 4x the last-level caches, "
                   "at least 64M)")
    p.add_argument("--ntimes", type=int, metavar="N", default=None,
                   help="repetitions per kernel; the first is dropped as in STREAM (default 10)")
    p.add_argument("--stores", choices=["regular", "nt"], default=None,
                   help="regular stores or non-temporal (streaming) stores")
    p.add_argument("--quick", action="store_true", help="small sweep that ends in seconds")
    _add_output(p, plot=True)

    p = psub.add_parser("sync", help="OpenMP synchronisation and scheduling overheads (EPCC "
                        "method) and spin / pthread / condvar barriers")
    p.add_argument("--threads", metavar="LIST", help="thread counts (default: 2 to all PUs)")
    p.add_argument("--tests", metavar="LIST", default="sync,sched,barriers",
                   help="groups among sync, sched, barriers (default: all)")
    p.add_argument("--reps", type=int, metavar="N", help="outer repetitions (default 20)")
    p.add_argument("--test-time", type=float, metavar="US",
                   help="target time of one test in microseconds (default 1000)")
    p.add_argument("--delay-time", type=float, metavar="US",
                   help="length of delay() in microseconds (default 0.1)")
    p.add_argument("--chunks", metavar="LIST", help="chunk sizes for scheduling "
                   "(default 1,2,4,...,128)")
    p.add_argument("--pin", choices=["compact", "scatter"], default="compact",
                   help="pinning of the threads (default compact)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions, ends in seconds")
    _add_output(p, plot=True)

    p = sub.add_parser("survey", help="the whole picture: topology and a quick run of every "
                       "probe, with JSON and plots in one folder")
    p.add_argument("--out", metavar="DIR", default="tiers-survey",
                   help="output folder (default ./tiers-survey)")
    p.add_argument("--full", action="store_true",
                   help="full probes instead of their quick modes")
    return parser


def _dispatch(args: argparse.Namespace, argv: list[str]) -> int:
    full_argv = ["tiers", *argv]
    if args.command == "topo":
        from . import topo
        return topo.main(args, full_argv)
    if args.command == "probe" and args.probe == "mem":
        from .probe import mem
        return mem.main(args, full_argv)
    if args.command == "probe" and args.probe == "sync":
        from .probe import sync
        return sync.main(args, full_argv)
    if args.command == "survey":
        from . import survey
        return survey.main(args, full_argv)
    raise TiersError(f"unknown command {args.command}")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tiers`` console command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        return _dispatch(args, argv) or 0
    except TiersError as exc:
        print(f"tiers: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("tiers: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
