"""``tiers probe net``: what messages cost between every pair of processes.

The native MPI program ``tiers-probe-net``, started through the launching
module (:mod:`tiers.launch`), measures

- **ping-pong** between two ranks for sizes 0 B .. 4 MiB: round-trip time,
  one-way latency (round trip / 2) and the streaming bandwidth of a window
  of non-blocking sends (as ``osu_latency`` and ``osu_bw`` do), warm-up
  iterations skipped;
- **all pairs in parallel** (``--all-pairs``; the AFC mapping paper's §3.2): at step k rank
  i exchanges with rank i XOR k, so every pair meets once in 2^m - 1 steps;
  between nodes one core per node takes part (``--cores-per-node c``: c
  steps at once); each pair exchanges sizes around a centre (1.5 MB x
  0.667, 0.8, 1, 1.25, 1.5) several times;
- **barrier**: ``MPI_Barrier`` time over 2..n ranks, and the hybrid
  barrier of ``libtiers-hybrid`` (a team of T threads per process: team
  spin barrier, ``MPI_Barrier`` by the master thread, team barrier again)
  over the same process counts (``--barrier-threads T``);
- **allreduce** (only when asked for): ``MPI_Allreduce`` of 8 B over the
  same process counts, as ``osu_allreduce`` times it, in blocks repeated
  under the statistics layer's rule.

This module fits time = latency + size / bandwidth for every pair
(:mod:`tiers.probe.netfit`), classifies each pair by the layer that joins it
(hwloc and host names), summarises per layer, builds the rank x rank
matrices ``tiers map`` takes as link costs, prints seed-001-style tables and
draws heat maps.  The document is ``tiers.probe.net/1``
(docs/schemas/probe-net.md).
"""

from __future__ import annotations

import math
import os
import shlex
import statistics
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.table import Table

from ..render import MICRO, plural

from .. import launch, native, noise, plot as tplot, result
from ..errors import TiersError
from . import netfit
from .. import stats

TOOL = "tiers-probe-net"
TESTS = ("pingpong", "allpairs", "barrier", "allreduce")
DEFAULT_CENTER = 1_500_000
DEFAULT_FACTORS = (0.667, 0.8, 1.0, 1.25, 1.5)
DEFAULT_TIMEOUT_S = 60.0
#: Separate launches of the ping-pong test; the figure is the median of their medians.
PINGPONG_LAUNCHES = 3
#: tiers-probe-net's time per ping-pong figure, {quick: seconds}, shared by the launches.
PINGPONG_FIGURE_S = {False: 1.0, True: 0.5}
MAX_MESSAGE = 2**31 - 1

_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text) -> int:
    """Return the bytes of a size: an int, or text such as ``"4096"``,
    ``"64K"``, ``"4M"`` (powers of 1024, as the native tools read them)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise TiersError(f"bad size {text}: sizes cannot be negative")
        return text
    t = str(text).strip().upper()
    for tail in ("IB", "B"):
        if t.endswith(tail) and len(t) > len(tail):
            t = t[: -len(tail)]
            break
    unit = t[-1] if t and t[-1] in _SUFFIX else ""
    number = t[: -1] if unit else t
    try:
        value = float(number)
    except ValueError:
        raise TiersError(f"bad size '{text}': use bytes such as 4096, 64K or 4M") from None
    if not value >= 0 or math.isinf(value):
        raise TiersError(f"bad size '{text}': sizes cannot be negative")
    return int(value * _SUFFIX[unit])


def _list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [w for w in value.split(",") if w.strip()]
    return [str(v) for v in value]


def default_ranks() -> int:
    """Return the rank count used when none is given: the cores of this
    machine, at least 2."""
    return max(2, launch.local_slots())


def native_args(*, tests=None, sizes=None, iters=None, window=None, pair=None, center=None,
                factors=None, reps=None, cores_per_node=None, node_size=None,
                flat=False, barrier_iters=None, barrier_threads=None, timeout=None,
                quick=False, yield_cpu=False, extra=()) -> list[str]:
    """Return the tiers-probe-net arguments for these options (lists as
    Python lists or comma-separated text; None: the tool's default) after
    checking them: one line of TiersError for sizes the tool cannot
    measure, an all-pairs size of zero, or fewer than two distinct
    all-pairs sizes."""
    args: list[str] = []
    tests_l = _list(tests)
    for t in tests_l:
        if t not in TESTS:
            raise TiersError(f"unknown test '{t}': choose among {', '.join(TESTS)}")
    if tests_l:
        args += ["--tests", ",".join(tests_l)]
    if sizes is not None:
        sz = [parse_size(s) for s in _list(sizes)]
        if not sz:
            raise TiersError("--sizes is empty")
        for s in sz:
            if s > MAX_MESSAGE:
                raise TiersError(f"message size {s} B is larger than one MPI message can be "
                                 f"(at most {MAX_MESSAGE} B)")
        args += ["--sizes", ",".join(str(s) for s in sz)]
    c = parse_size(center) if center is not None else DEFAULT_CENTER
    fs = [float(f) for f in _list(factors)] if factors is not None else list(DEFAULT_FACTORS)
    if any(not f > 0 for f in fs) or not fs:
        raise TiersError("all-pairs factors must be positive numbers")
    ap_sizes = [round(c * f) for f in fs]
    if not tests_l or "allpairs" in tests_l:
        if c == 0 or min(ap_sizes) < 1:
            raise TiersError(f"all-pairs message size {min(ap_sizes)} B is zero: the "
                             "latency/bandwidth fit needs messages of at least 1 byte")
        if max(ap_sizes) > MAX_MESSAGE:
            raise TiersError(f"all-pairs message size {max(ap_sizes)} B is larger than one MPI "
                             f"message can be (at most {MAX_MESSAGE} B)")
        if "allpairs" in tests_l and len(set(ap_sizes)) < 2:
            raise TiersError("the all-pairs fit needs at least two different sizes "
                             "(give --factors with two or more values)")
    if center is not None:
        args += ["--center", str(c)]
    if factors is not None:
        args += ["--factors", ",".join(f"{f:g}" for f in fs)]
    for flag, value, low in (("--iters", iters, 1), ("--window", window, 1), ("--reps", reps, 1),
                             ("--cores-per-node", cores_per_node, 1),
                             ("--node-size", node_size, 1),
                             ("--barrier-iters", barrier_iters, 1),
                             ("--barrier-threads", barrier_threads, 1)):
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise TiersError(f"{flag} must be a positive integer, not {value!r}")
        args += [flag, str(value)]
    if pair is not None:
        a, b = (int(x) for x in (_list(pair) if not isinstance(pair, (tuple, list)) else pair))
        args += ["--pair", f"{a},{b}"]
    if timeout is not None:
        if not timeout > 0:
            raise TiersError(f"--timeout must be a positive number of seconds, not {timeout}")
        args += ["--timeout", f"{float(timeout):g}"]
    if flat:
        args.append("--flat")
    if quick:
        args.append("--quick")
    if yield_cpu:
        args.append("--yield")
    return args + [str(e) for e in extra]


def _available_memory() -> int:
    """Bytes of memory this machine can give now (MemAvailable), or 0 if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _check_buffers_fit(ranks: int, largest: int) -> None:
    """Refuse, before anything is launched, a ping-pong whose ranks on this
    host would need more than its free memory: every rank holds a send and a
    receive buffer of the largest size."""
    need = 2 * largest * ranks
    avail = _available_memory()
    if avail and need > avail:
        raise TiersError(f"--sizes: {ranks} ranks x 2 buffers of {largest:,} B need "
                         f"{need / 2**30:.1f} GiB, more than the {avail / 2**30:.1f} GiB of "
                         "free memory on this machine")


def measure(ranks: int | None = None, *, tests=None, all_pairs: bool = False, sizes=None,
            iters=None, window=None, pair=None, center=None, factors=None, reps=None,
            cores_per_node=None, node_size=None, flat: bool = False, barrier_iters=None,
            barrier_threads: int | None = None, timeout: float | None = None, time_limit: float | None = None,
            quick: bool = False, launcher=None, hostfile=None,
            launcher_args: Sequence[str] | str = (), native_extra: Sequence[str] = (),
            topology: str = "this", vcluster: bool = False, launches: int | None = None,
            argv: list[str] | None = None, busy: bool = False) -> dict:
    """Run the message probe on ``ranks`` ranks (default: the cores, at
    least 2) and return its ``tiers.probe.net/1`` result document.

    ``tests`` picks among pingpong, allpairs, barrier, allreduce (default pingpong and
    barrier; ``all_pairs=True`` adds allpairs).  Ping-pong: ``sizes`` (list
    or "0,8,1K"), ``iters`` per size, streaming ``window``, ``pair`` of
    ranks.  All pairs: ``center`` bytes, ``factors``, ``reps`` per size,
    ``cores_per_node``, ``node_size`` (treat blocks of that many ranks as
    nodes), ``flat`` (one XOR schedule over all ranks).  Barrier:
    ``barrier_iters`` timed barriers per process count, ``barrier_threads``
    threads per process of the hybrid barrier (default 2, or 1 where a
    rank is bound to a single PU); when given and the run is local, ranks
    get that many cores each (``--map-by slot:PE=T``) where the machine
    has enough, else they run unbound.
    ``timeout`` bounds every wait inside the program (seconds, default 60);
    ``time_limit`` the whole run (default 1800 s).  ``launcher`` (kind or
    :class:`tiers.launch.Launcher`), ``hostfile`` and ``launcher_args``
    (extra launcher options, a list or one string) go to the launching
    module; with more ranks than cores Open MPI ranks yield the CPU when
    idle.  ``topology`` is the hwloc source used to classify pairs on one
    host ("this": the machine).  ``vcluster=True`` runs on the virtual
    cluster that ``tiers vcluster up`` built (:mod:`tiers.vcluster`).
    ``busy``: the noise check found other work (the warnings then do not
    call a changed round trip between the pair's PUs a move by the host).
    ``launches``: the ping-pong, the all-pairs test and MPI_Barrier run
    in this many separate launches (default :data:`PINGPONG_LAUNCHES`), in
    interleaved rounds (:func:`launch_order`); each figure is the median of
    the launches' figures, and is noisy when they disagree by more than
    +-5 % (:func:`tiers.stats.summarize_blocks`).  Every test runs in launches of
    its own (MPI_Barrier and MPI_Allreduce with MPI_THREAD_SINGLE; the
    hybrid barrier with MPI_THREAD_FUNNELED).
    Raise TiersError (one line) on bad input
    and :class:`tiers.launch.LaunchError` when a rank fails or stalls."""
    ranks = default_ranks() if ranks is None else ranks
    if not isinstance(ranks, int) or isinstance(ranks, bool):
        raise TiersError(f"the number of ranks must be an integer, not {ranks!r}")
    if ranks < 2:
        raise TiersError(f"tiers probe net needs at least 2 ranks (got {ranks}): a single "
                         "rank cannot measure anything")
    selected = _list(tests) or ["pingpong", "barrier"]
    if all_pairs and "allpairs" not in selected:
        selected.append("allpairs")
    selected = [t for t in TESTS if t in selected] + [t for t in selected if t not in TESTS]
    if pair is not None:
        pa, pb = (int(x) for x in (_list(pair) if not isinstance(pair, (tuple, list)) else pair))
        if pa == pb or not (0 <= pa < ranks and 0 <= pb < ranks):
            raise TiersError(f"--pair {pa},{pb} must name two different ranks below {ranks}")
        pair = (pa, pb)
    if vcluster and hostfile is not None:
        raise TiersError("--vcluster brings its own hostfile: do not give --hostfile too")
    oversubscribed = ranks > launch.local_slots() and (hostfile is None or vcluster)
    if hostfile is None and not vcluster and sizes is not None and "pingpong" in selected:
        _check_buffers_fit(ranks, max(parse_size(s) for s in _list(sizes)))
    lau = launcher if isinstance(launcher, launch.Launcher) else launch.detect(launcher)
    extra = shlex.split(launcher_args) if isinstance(launcher_args, str) else list(launcher_args)
    mca = {"mpi_yield_when_idle": "1"} if oversubscribed and lau.kind == "openmpi" else None
    limit = float(time_limit) if time_limit is not None else 1800.0

    def args_for(tests: list[str]) -> list[str]:
        return native_args(tests=tests, sizes=sizes, iters=iters, window=window, pair=pair,
                           center=center, factors=factors, reps=reps,
                           cores_per_node=cores_per_node, node_size=node_size, flat=flat,
                           barrier_iters=barrier_iters, barrier_threads=barrier_threads,
                           timeout=timeout, quick=quick, yield_cpu=oversubscribed,
                           extra=native_extra)

    args_for(selected)  # every option checked before anything starts
    if launches is None:
        n_launches = PINGPONG_LAUNCHES
    elif isinstance(launches, int) and not isinstance(launches, bool) and launches >= 1:
        n_launches = launches
    else:
        raise TiersError(f"--launches must be a positive integer, not {launches!r}")

    def run_tests(tests: list[str], placement: dict, more: Sequence[str] = ()):
        """Launch the native tool for ``tests``; return (its JSON, command, seconds)."""
        program = [str(native.tool_path(TOOL)), *args_for(tests), *more]
        if vcluster:
            from .. import vcluster as vcl

            command = vcl.command(program, ranks, launcher=lau, mca=mca, extra=extra)
        else:
            command = launch.build_command(lau, program, ranks, hostfile=hostfile, mca=mca,
                                           extra=extra, **placement)
        run = launch.run_command(command, timeout=limit, label=TOOL, ranks=ranks)
        return run.json(TOOL), command, run.elapsed_s

    # Each test runs in launches of its own, so that no test measures in the
    # state another one left (a collective timed after the ping-pong's large
    # messages read up to 1.3x slower):
    # - ping-pong in ``launches`` separate launches: what changes from one
    #   launch to the next (where the ranks and their buffers land) is then
    #   in the figure's interval (tiers.stats.summarize_blocks), not only the
    #   steadiness inside one launch;
    # - all pairs and MPI_Barrier in ``launches`` separate launches too;
    # - MPI_Barrier and MPI_Allreduce each in an MPI_THREAD_SINGLE launch,
    #   as a flat MPI program (and osu_barrier, osu_allreduce) sees them
    #   (Allreduce timed after the barrier series in the same launch read
    #   ~1.15x slower);
    # - the hybrid barrier in a launch of its own: it needs
    #   MPI_THREAD_FUNNELED (and room for its threads), which slows
    #   MPI_Barrier itself; that launch times MPI_Barrier too ("mpi_funneled").
    local = hostfile is None and not vcluster
    parts: list[tuple[str, dict, str, float]] = []  # (label, JSON, command, seconds)
    def share_time() -> list[str]:
        # the time per figure is shared between the launches, so that a test
        # takes no longer than one launch with the native default
        return ["--figure-time", f"{PINGPONG_FIGURE_S[bool(quick)] / n_launches:g}"] \
            if n_launches > 1 else []

    # the launches of the repeated tests run in interleaved rounds (one launch
    # of each test a round, launch_order), not one test's launches back to
    # back: a state of the machine that lasts a few seconds (on a 2-vCPU VM
    # the all-pairs 0-byte latency and MPI_Barrier read 0.19 and 0.22 us in
    # every launch of two surveys out of five, against 0.28 and 0.39 us in
    # the others, while the ping-pong launched just before did not move)
    # then falls on one launch of each test, which the median over the
    # launches leaves out, rather than on all of one test's launches
    repeated = {"pingpong": (["pingpong"], []),
                "allpairs": (["allpairs"], []),
                "barrier": (["barrier"], ["--barrier-kinds", "mpi"])}
    runs_of: dict[str, list] = {t: [] for t in repeated}
    order = launch_order(selected, n_launches)
    # where the host had placed the PUs of the ping-pong pair: on a virtual
    # machine it moves its CPUs every few seconds, and figures between them
    # can move with the distance (docs/schemas/probe-net.md, pu_link); a
    # cache line's round trip between the two PUs before the first launch
    # and after every launch (one measure between two launches serves both)
    link_pair = pair or (0, 1)
    tracking = local and not oversubscribed
    link_pus = _expected_pus(link_pair) if tracking else None
    link_rtt = [noise.pair_round_trip(*link_pus) if link_pus else None]
    for test in order:
        tests_l, more = repeated[test]
        runs_of[test].append(run_tests(tests_l, {}, [*more, *share_time()]))
        if tracking:
            got = _pair_pus(runs_of[test][-1][0], link_pair)
            if got != link_pus:
                # the ranks did not land where expected: the round trips so
                # far were between other PUs; measure from here on between
                # the PUs the launch reports (none when they share PUs)
                link_rtt = [None] * len(link_rtt)
                link_pus = got
            link_rtt.append(noise.pair_round_trip(*link_pus) if link_pus else None)
    if "pingpong" in selected:
        runs = runs_of["pingpong"]
        merged = runs[0][0]
        merged["pingpong"] = merge_pingpong([r[0] for r in runs])
        merged["params"]["pingpong"]["launches"] = n_launches
        if local:
            merged["params"]["l2_bytes"] = l2_bytes()
        parts.append(("pingpong", merged, runs[0][1], sum(r[2] for r in runs)))
    if "allpairs" in selected:
        # every pair in each launch; each pair's figures are the medians of
        # the launches' own fits (merge_allpairs, netfit.launch_figures): one
        # launch whose ranks' vCPUs sat closer or farther does not move them
        runs = runs_of["allpairs"]
        merged = runs[0][0]
        merged["allpairs"] = merge_allpairs([r[0] for r in runs])
        merged["params"]["allpairs"]["launches"] = merged["allpairs"].get("launches", 1)
        parts.append(("allpairs", merged, runs[0][1], sum(r[2] for r in runs)))
    if "barrier" in selected:
        # MPI_Barrier in separate launches too: what a launch starts with
        # moved its mean by more than its blocks' interval (merge_collective)
        runs = runs_of["barrier"]
        merged = runs[0][0]
        merged["barrier"] = dict(merged["barrier"],
                                 mpi=merge_collective([r[0]["barrier"]["mpi"] for r in runs]),
                                 launches=n_launches,
                                 seconds=sum(r[0]["barrier"].get("seconds") or 0 for r in runs))
        parts.append(("barrier", merged, runs[0][1], sum(r[2] for r in runs)))
    if "allreduce" in selected:
        parts.append(("allreduce", *run_tests(["allreduce"], {})))
    if "barrier" in selected:
        parts.append(("hybrid barrier", *run_tests(
            ["barrier"], _hybrid_placement(ranks, barrier_threads, local=local))))
    raw, command = parts[0][1], parts[0][2]
    wall = sum(p[3] for p in parts)
    by = {p[0]: p for p in parts}
    for label, key in (("allpairs", "allpairs"), ("allreduce", "allreduce")):
        if label in by and key in by[label][1]:
            raw[key] = by[label][1][key]
            if key in by[label][1]["params"]:  # its own launches' parameters
                raw["params"][key] = by[label][1]["params"][key]
    if "barrier" in selected:
        flat_b, hyb = by["barrier"][1], by["hybrid barrier"][1]
        raw["barrier"] = dict(flat_b["barrier"], hybrid=hyb["barrier"]["hybrid"],
                              mpi_funneled=hyb["barrier"]["mpi"])
        raw["params"]["barrier"] = dict(hyb["params"]["barrier"], kinds=["mpi", "hybrid"],
                                        launches=flat_b["barrier"].get("launches", 1))
        if "block_calls" in flat_b["params"].get("barrier", {}):
            raw["params"]["barrier"]["block_calls"] = flat_b["params"]["barrier"]["block_calls"]
        raw["params"]["barrier_launch_command"] = by["hybrid barrier"][2]
    raw["params"]["launch_commands"] = {p[0]: p[2] for p in parts}
    raw["params"]["launch_order"] = order
    if any(x is not None for x in link_rtt[1:]):
        raw["params"]["pu_link"] = {
            "pus": list(link_pus), "ranks": list(link_pair),
            "method": "a cache line's round trip between two threads pinned to the PUs "
                      "(tiers-probe-noise), before the first launch and after every launch",
            "launches": [{"test": t, "rtt_ns": [link_rtt[i], link_rtt[i + 1]]}
                         for i, t in enumerate(order)]}
    layer_matrix = cache_matrix = None
    if "allpairs" in raw:
        from .. import topo

        tdoc = topo.measure(topology)
        layer_matrix = tdoc["samples"]["layer_matrix"]
        cache_matrix = tdoc["samples"]["cache_level_matrix"]
    samples, summary = analyse(raw, layer_matrix, cache_matrix)
    if raw["params"].get("pu_link"):
        split_by_placement(summary, raw["params"]["pu_link"],
                           {t: [r[0] for r in runs_of[t]] for t in runs_of},
                           raw["params"].get("l2_bytes"), samples)
    warnings = noisy_warnings(summary, busy)
    params = dict(raw["params"])
    params.update({"launcher": lau.to_dict(), "launch_command": command,
                   "oversubscribed": oversubscribed, "topology": topology,
                   "vcluster": _vcluster_params() if vcluster else None,
                   "tests": selected, "wall_seconds": round(wall, 3)})
    extra = {"warnings": warnings} if warnings else {}
    return result.new_document("probe.net", params=params, samples=samples, summary=summary,
                               argv=argv, native=raw.get("native", {}), **extra)


def _expected_pus(pair: tuple[int, int]) -> tuple[int, int] | None:
    """The PUs two ranks of a local launch are expected on: Open MPI and
    Hydra bind rank r of a run that fits the cores to core r, which is PU r
    where every core has one PU and this process may use them all; None
    otherwise (the first launch then reports them).  Checked against the
    PUs the launch reports (:func:`_pair_pus`)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    slots = launch.local_slots()
    if slots != cpus or cpus != (os.cpu_count() or 0) or max(pair) >= slots:
        return None
    return pair[0], pair[1]


def _pair_pus(doc: dict, pair: tuple[int, int]) -> tuple[int, int] | None:
    """The PUs (logical) of the two ranks of ``pair`` as the launch's
    ``doc`` reports them, when both run on one host and each is bound to a
    single PU; None otherwise (no single pair of PUs to measure)."""
    places = {p.get("rank"): p for p in doc.get("placement") or []}
    a, b = places.get(pair[0]), places.get(pair[1])
    if not a or not b or a.get("host") != b.get("host"):
        return None
    try:
        pa, pb = int(str(a.get("pus"))), int(str(b.get("pus")))
    except ValueError:
        return None
    return (pa, pb) if pa != pb else None


def _measures(link: dict) -> list[float]:
    """The round trips of ``params.pu_link``, each measure once (the one
    after a launch is the one before the next), those not measured left out."""
    lns = link["launches"]
    return [x for x in ([lns[0]["rtt_ns"][0]] if lns else []) + [ln["rtt_ns"][1] for ln in lns]
            if x]


def launch_placements(link: dict) -> tuple[list[tuple[float, float]], list[int | None]]:
    """The placement classes of the ping-pong pair's PUs over a run's
    launches (``link``: ``params.pu_link``; :func:`tiers.noise.
    placement_classes` over every round trip) and each launch's class: the
    class of its round trips before and after, None when they fall in
    different classes (the host moved the PUs during the launch) or one was
    not measured."""
    classes = noise.placement_classes(_measures(link))
    out = []
    for ln in link["launches"]:
        a, b = (noise.class_of(x, classes) for x in ln["rtt_ns"])
        out.append(a if a is not None and a == b else None)
    return classes, out


def split_by_placement(summary: dict, link: dict, docs: dict, l2: int | None = None,
                       samples: dict | None = None) -> None:
    """Add to ``summary`` where the host placed the ping-pong pair's PUs
    during the run and the figures per placement: ``summary["pu_link"]``
    (the pair, every launch's round trips, class and ``moved_during``
    (its two round trips fall in different classes), the classes' median
    round trips, ``moved``: the launches ran in more than one placement or
    the PUs moved during one), ``pingpong.by_placement`` (per class, the
    ping-pong rows merged from the launches in it: :func:`merge_pingpong`,
    :func:`_pingpong_row`) and ``barrier.by_placement`` (per class, the
    MPI_Barrier rows of its launches: :func:`merge_collective`) and, for
    two ranks (whose one pair is the measured one), ``allpairs.
    by_placement`` (per class, the medians of the pair's own fits in the
    launches of that class, from ``samples``).  ``docs``: each repeated
    test's launch outputs in order."""
    classes, of = launch_placements(link)
    rtts = _measures(link)
    during = [all(ln["rtt_ns"]) and c is None for ln, c in zip(link["launches"], of)]
    summary["pu_link"] = {
        "pus": link["pus"], "ranks": link["ranks"],
        "placements": [{"rtt_ns": statistics.median([x for x in rtts if lo <= x <= hi]),
                        "rtt_range_ns": [lo, hi]} for lo, hi in classes],
        "launches": [dict(ln, placement=c, moved_during=m)
                     for ln, c, m in zip(link["launches"], of, during)],
        "moved": len(classes) > 1 or any(during)}
    test_class: dict[str, list[int | None]] = {t: [] for t in docs}
    for ln, c in zip(link["launches"], of):
        if ln["test"] in test_class:
            test_class[ln["test"]].append(c)
    pp = summary.get("pingpong")
    if pp is not None and docs.get("pingpong"):
        per = []
        for k in range(len(classes)):
            group = [d for d, c in zip(docs["pingpong"], test_class["pingpong"]) if c == k]
            if group:
                rows = [_pingpong_row(r, l2) for r in merge_pingpong(group)["rows"]]
                per.append({"placement": k, "launches": len(group),
                            "rtt_ns": summary["pu_link"]["placements"][k]["rtt_ns"],
                            "rows": [{key: r.get(key) for key in
                                      ("bytes", "latency_us", "latency_median_us", "bw_mbps",
                                       "bw_median_mbps", "noisy")} for r in rows]})
        pp["by_placement"] = per
    bar = summary.get("barrier")
    if bar is not None and docs.get("barrier"):
        per = []
        for k in range(len(classes)):
            group = [d["barrier"]["mpi"] for d, c in zip(docs["barrier"], test_class["barrier"])
                     if c == k]
            if group:
                per.append({"placement": k, "launches": len(group),
                            "rtt_ns": summary["pu_link"]["placements"][k]["rtt_ns"],
                            "mpi": [{"ranks": r["ranks"], "avg_us": _positive(r.get("avg_us"))}
                                    for r in merge_collective(group)]})
        bar["by_placement"] = per
    ap = summary.get("allpairs")
    pairs = ((samples or {}).get("allpairs") or {}).get("pairs") or []
    if ap is not None and summary.get("ranks") == 2 and len(pairs) == 1 \
            and len(pairs[0].get("launch_fits") or []) == len(test_class.get("allpairs", [])):
        per = []
        for k in range(len(classes)):
            fits = [f for f, c in zip(pairs[0]["launch_fits"], test_class["allpairs"]) if c == k]
            if fits:
                lat = [f["latency_us"] for f in fits if _positive(f.get("latency_us"))]
                bw = [f["bandwidth_mbps"] for f in fits if _positive(f.get("bandwidth_mbps"))]
                per.append({"placement": k, "launches": len(fits),
                            "rtt_ns": summary["pu_link"]["placements"][k]["rtt_ns"],
                            "layer": pairs[0].get("layer"),
                            "latency_us": statistics.median(lat) if lat else None,
                            "bandwidth_mbps": statistics.median(bw) if bw else None})
        ap["by_placement"] = per


def pu_link_warning(summary: dict, busy: bool = False) -> str | None:
    """One line when the ping-pong pair's PUs were not in one placement for
    the whole run (``summary["pu_link"]["moved"]``), naming the placements
    and the 0-byte-class latency in each; None otherwise.  ``busy`` (the
    noise check found other work): the change may be that work rather than
    the host moving the PUs, and the line says so."""
    link = summary.get("pu_link")
    if not link or not link.get("moved"):
        return None
    places = ", ".join(f"~{p['rtt_ns']:.0f} ns" for p in link["placements"])
    moved = sum(1 for ln in link["launches"] if ln.get("moved_during"))
    lat = []
    for b in (summary.get("pingpong") or {}).get("by_placement") or []:
        r = b["rows"][0] if b["rows"] else {}
        if r.get("latency_us") is not None:
            lat.append(f"{r['latency_us']:,.2f} {MICRO}s at ~{b['rtt_ns']:.0f} ns")
    a, b = link["pus"]
    who = (f"PUs {a} and {b} (ranks {link['ranks'][0]} and {link['ranks'][1]})")
    return (("probe net: the round trip between " + who + " changed during the run, on a busy "
             "machine (other work on these PUs, or the host moving them)" if busy else
             f"probe net: the host moved {who} during the run")
            + ": a cache line's round trip between them was "
            f"{places} between launches"
            + (f", and changed during {moved} launch{'es' if moved != 1 else ''}" if moved
               else "")
            + "; figures between the two ranks can follow it"
            + (f" (ping-pong {_smallest_size(summary)} latency {'; '.join(lat)})" if lat else "")
            + " -- compare runs per placement (pu_link in the JSON)")


def _smallest_size(summary: dict) -> str:
    """The smallest ping-pong size, as printed ("0 B"), or "" without rows."""
    rows = (summary.get("pingpong") or {}).get("rows") or []
    return _size(rows[0]["bytes"]) if rows else ""


#: The tests that run in several separate launches, in the order of a round.
REPEATED_TESTS = ("pingpong", "allpairs", "barrier")


def launch_order(selected: Sequence[str], launches: int) -> list[str]:
    """Return the order in which :func:`measure` launches the repeated tests
    (:data:`REPEATED_TESTS`) among ``selected``: ``launches`` rounds, each
    one launch of every selected test in :data:`REPEATED_TESTS` order
    (``["pingpong", "allpairs", "pingpong", "allpairs", ...]``), so that the
    launches of one test are spread over the whole run and a machine state
    lasting a few seconds reaches at most the launches of about one round."""
    tests = [t for t in REPEATED_TESTS if t in selected]
    return [t for _ in range(launches) for t in tests]


def _hybrid_placement(ranks: int, threads: int | None, *, local: bool) -> dict:
    """Return the :func:`tiers.launch.build_command` options that give
    every rank room for ``threads`` threads of the hybrid barrier: on this
    machine, ``threads`` cores per rank when ranks x threads fit in its
    cores, else no binding (the threads then share the cores).  Empty (the
    launcher's own placement) when no thread count was asked for, for one
    thread, or on other hosts."""
    if not local or threads is None or threads <= 1:
        return {}
    if ranks * threads <= launch.local_slots():
        return {"cpus_per_rank": threads, "bind_to": "core"}
    return {"bind_to": "none"}


def _vcluster_params() -> dict:
    """The virtual cluster a run used: nodes, slots and link shaping."""
    from .. import vcluster as vcl

    st = vcl.require_up()
    return {"nodes": len(st["nodes"]), "slots": st["slots"], "link": st["link"],
            "subnet": st["subnet"]}


def analyse(raw: dict, layer_matrix=None, cache_level_matrix=None) -> tuple[dict, dict]:
    """Return (samples, summary) of a document from the native tool's
    output: the fit and the layer of every all-pairs pair go into the
    samples; the ping-pong table, the matrices, the per-layer summary and
    the barrier table into the summary."""
    placement = raw.get("placement", [])
    samples = {"placement": placement, "nodes": raw.get("nodes", [])}
    summary: dict = {"ranks": raw["params"]["ranks"], "seconds": raw.get("seconds")}
    if "pingpong" in raw:
        pp = raw["pingpong"]
        samples["pingpong"] = pp
        l2 = raw["params"].get("l2_bytes")
        rows = [_pingpong_row(r, l2) for r in pp["rows"]]
        small = rows[0] if rows else None
        mib = next((r for r in rows if r["bytes"] == 2**20), None)
        summary["pingpong"] = {
            "pair": pp["pair"], "rows": rows,
            "small_bytes": small["bytes"] if small else None,
            "small_latency_us": small["latency_us"] if small else None,
            "bandwidth_1mib_mbps": mib["bw_mbps"] if mib else None,
            "pingpong_1mib_mbps": mib["pingpong_mbps"] if mib else None,
            "seconds": pp.get("seconds")}
    if "allpairs" in raw:
        ap = raw["allpairs"]
        sizes = ap["sizes"]
        pairs = []
        for p in ap["pairs"]:
            fit = netfit.robust_fit(sizes, p["times_us"], p.get("latency_samples_us"))
            rec = dict(p)
            rec.update(fit)
            if p.get("launch_fits"):
                # the figures: the median over the launches of each one's own
                # fit (the pooled fit's are kept as pooled_*)
                rec.update(netfit.launch_figures(fit, p["launch_fits"]))
            if layer_matrix is not None and placement:
                rec.update(netfit.classify(placement[p["a"]], placement[p["b"]], layer_matrix,
                                           cache_level_matrix))
            pairs.append(rec)
        samples["allpairs"] = {"sizes": sizes, "reps": ap["reps"], "phases": ap["phases"],
                               "schedule": ap["schedule"], "pairs": pairs}
        n = raw["params"]["ranks"]
        phases = {ph["phase"]: ph for ph in ap["phases"]}
        r2 = [p["r2"] for p in pairs]
        nodes = raw.get("nodes", [])
        node_matrices = None
        inter = [p for p in pairs if p["phase"] == "inter"]
        if len(nodes) > 1 and inter:
            node_of = {pl["rank"]: pl["node"] for pl in placement}
            node_pairs = [dict(p, a=node_of[p["a"]], b=node_of[p["b"]], phase="node")
                          for p in inter]
            node_matrices = netfit.pair_matrices(len(nodes), node_pairs)
            node_matrices["hosts"] = [nd["host"] for nd in nodes]
        summary["allpairs"] = {
            "steps": {k: v["steps"] for k, v in phases.items()},
            "rounds": {k: v["rounds"] for k, v in phases.items()},
            "total_steps": sum(v["steps"] for v in phases.values()),
            "total_rounds": sum(v["rounds"] for v in phases.values()),
            "pairs": len(pairs),
            "seconds": sum(v["seconds"] for v in phases.values()),
            "r2_min": min(r2) if r2 else None,
            "unreliable_pairs": sum(1 for p in pairs if not p["reliable"]),
            "noisy_pairs": sum(1 for p in pairs if p.get("noisy")),
            "launches": ap.get("launches", 1),
            "latency_sources": {src: sum(1 for p in pairs if p["latency_source"] == src)
                                for src in ("fit", "pingpong")},
            "bandwidth_sources": {src: sum(1 for p in pairs if p["bandwidth_source"] == src)
                                  for src in ("fit", "largest size")},
            "r2_mean": sum(r2) / len(r2) if r2 else None,
            "matrices": netfit.pair_matrices(n, pairs, placement),
            "node_matrices": node_matrices,
            "layers": netfit.layer_summary(pairs) if pairs and "layer" in pairs[0] else [],
        }
    if "barrier" in raw:
        samples["barrier"] = raw["barrier"]
        mpi = raw["barrier"]["mpi"]
        hybrid = raw["barrier"].get("hybrid")
        by_ranks = {r["ranks"]: r for r in hybrid or []}
        funneled = {r["ranks"]: r for r in raw["barrier"].get("mpi_funneled") or []}
        rows = []
        for r in mpi:
            h = by_ranks.get(r["ranks"])
            f = funneled.get(r["ranks"])
            rows.append({"ranks": r["ranks"], "mpi_avg_us": r["avg_us"],
                         "mpi_funneled_avg_us": f["avg_us"] if f else None,
                         "hybrid_threads": h["threads"] if h else None,
                         "hybrid_avg_us": h["avg_us"] if h else None,
                         "hybrid_over_mpi": (h["avg_us"] / r["avg_us"]
                                             if h and r["avg_us"] > 0 else None)})
        summary["barrier"] = {"mpi": mpi, "hybrid": hybrid,
                              "mpi_funneled": raw["barrier"].get("mpi_funneled"),
                              "threads": raw["params"].get("barrier", {}).get("threads"),
                              "rows": rows}
    if "allreduce" in raw:
        samples["allreduce"] = raw["allreduce"]
        rows = []
        for r in raw["allreduce"]["rows"]:
            avg = _positive(r.get("avg_us"))
            med = _positive(r.get("block_median"))
            row = {"ranks": r["ranks"], "bytes": raw["allreduce"]["bytes"],
                   "min_us": _positive(r.get("min_us")), "avg_us": avg,
                   "max_us": _positive(r.get("max_us")), "median_us": med,
                   "ci_low_us": r.get("block_ci_low"), "ci_high_us": r.get("block_ci_high"),
                   "blocks": r.get("block_n"), "noisy": bool(r.get("block_noisy")),
                   "stopped": r.get("stopped")}
            if avg is None or med is None:
                row.update({"reliable": False, "why": "a time per call that is not positive "
                                                      "and finite was measured"})
            rows.append(row)
        summary["allreduce"] = {"bytes": raw["allreduce"]["bytes"], "rows": rows}
    return samples, summary


def merge_pingpong(docs: Sequence[dict]) -> dict:
    """Return the ``pingpong`` section of the native tool's output for
    several launches of the same ping-pong test (``docs``, in order): per
    size, the blocks of every launch pooled, the figures from
    :func:`tiers.stats.summarize_blocks` over the launches (median = the
    median of the launches' medians, the interval covering every launch's
    median), the launches' medians under ``rtt_launch_medians_us`` /
    ``bw_launch_medians_mbps`` and why a figure is noisy under ``rtt_why``
    / ``bw_why``.  The best figure (``rtt_us``, ``latency_us``,
    ``bw_mbps``) is the median of the launches' best blocks, as the
    all-pairs latency is: the best block of all launches followed any one
    launch that started in a passing fast state of the machine (0.16 us
    against 0.27-0.30 us in the other launches of a survey on a 2-vCPU
    guest).  One document is returned as it is."""
    if len(docs) == 1:
        return docs[0]["pingpong"]
    first = docs[0]["pingpong"]
    rows = []
    for i, r0 in enumerate(first["rows"]):
        group = [d["pingpong"]["rows"][i] for d in docs]
        b = r0["bytes"]
        row = dict(r0)
        rtt_groups = [g.get("rtt_samples_us") or [] for g in group]
        rs = stats.summarize_blocks(rtt_groups, lambda v: f"{v:,.3g} {MICRO}s")
        rtt_best = _median_of_bests(rtt_groups)
        row.update(rtt_us=rtt_best, rtt_median_us=rs["median"],
                   latency_us=rtt_best / 2 if rtt_best else None,
                   latency_median_us=rs["median"] / 2 if rs["median"] else None,
                   pingpong_mbps=b / (rtt_best / 2) if b and rtt_best else None,
                   pingpong_median_mbps=b / (rs["median"] / 2) if b and rs["median"] else None,
                   rtt_samples_us=[x for g in group for x in g.get("rtt_samples_us") or []],
                   rtt_stopped=_stopped([g.get("rtt_stopped") for g in group]),
                   rtt_stopped_launches=[g.get("rtt_stopped") for g in group],
                   rtt_launch_medians_us=rs["block_medians"],
                   rtt_launch_best_us=[min(g) for g in rtt_groups if g],
                   rtt_launch_spread=rs["block_spread"], rtt_why=rs["why"])
        for key in ("min", "median", "ci_low", "ci_high", "rel_halfwidth", "n", "kept",
                    "noisy"):
            row[f"rtt_{key}"] = rs[key]
        bw_groups = [g.get("bw_window_samples_us") or [] for g in group]
        if b and any(bw_groups):
            per_window = b * row.get("bw_window", 64)
            bs = stats.summarize_blocks(bw_groups, lambda v: f"{per_window / v:,.0f} MB/s")
            row.update(bw_mbps=per_window / _median_of_bests(bw_groups),
                       bw_median_mbps=per_window / bs["median"],
                       bw_noisy=bs["noisy"], bw_why=bs["why"],
                       bw_stopped=_stopped([g.get("bw_stopped") for g in group]),
                       bw_stopped_launches=[g.get("bw_stopped") for g in group],
                       bw_window_samples_us=[x for g in bw_groups for x in g],
                       bw_window_launch_best_us=[min(g) for g in bw_groups if g],
                       bw_launch_medians_mbps=[per_window / m for m in bs["block_medians"]],
                       bw_launch_spread=bs["block_spread"])
            for key in ("min", "median", "ci_low", "ci_high", "rel_halfwidth", "n", "kept",
                        "noisy"):
                row[f"bw_window_{key}"] = bs[key]
        row["launches"] = len(group)
        rows.append(row)
    return dict(first, rows=rows, launches=len(docs),
                seconds=sum(d["pingpong"].get("seconds") or 0 for d in docs))


def _median_of_bests(groups: Sequence[Sequence[float]]) -> float | None:
    """The median over the launches of each launch's best (lowest) block
    time; None when no launch has a block."""
    bests = sorted(min(g) for g in groups if g)
    if not bests:
        return None
    mid = len(bests) // 2
    return bests[mid] if len(bests) % 2 else (bests[mid - 1] + bests[mid]) / 2


def merge_collective(launches: Sequence[Sequence[dict]]) -> list[dict]:
    """Return the rows of one collective test (MPI_Barrier) measured in
    several separate launches (``launches``: each launch's ``mpi`` rows, in
    order), one row per process count.

    Per launch, ``min_us`` / ``avg_us`` / ``max_us`` are osu_barrier's
    figures (min, mean and max over the processes of each one's mean time
    per call); the merged row's are the **medians over the launches** of
    each, so that one launch that started badly does not move them.  Its
    ``block_*`` members are :func:`tiers.stats.summarize_blocks` over the
    launches' timed blocks (the median of the launches' median blocks, the
    interval covering every launch's); ``block_noisy`` is also set when the
    launches' means disagree by more than +-5 %
    (:func:`tiers.stats.launch_agreement`), and ``block_why`` says why.
    ``avg_launches_us``, ``avg_launch_spread`` and ``launches`` keep what
    each launch gave; ``blocks_us`` pools every launch's blocks.  A row
    missing from a launch is merged from the launches that have it; one
    launch is returned as it is."""
    if len(launches) == 1:
        return list(launches[0])
    by_ranks: dict[int, list[dict]] = {}
    for rows in launches:
        for r in rows:
            by_ranks.setdefault(r["ranks"], []).append(r)
    out = []
    for p in sorted(by_ranks):
        group = by_ranks[p]
        row = dict(group[0])
        agree = {k: stats.launch_agreement([g.get(k) for g in group],
                                           lambda v: f"{v:,.3g} {MICRO}s")
                 for k in ("min_us", "avg_us", "max_us")}
        for k, a in agree.items():
            if a["median"] is not None:
                row[k] = a["median"]
        bs = stats.summarize_blocks([g.get("blocks_us") or [] for g in group],
                                    lambda v: f"{v:,.3g} {MICRO}s")
        for key in ("min", "median", "ci_low", "ci_high", "rel_halfwidth", "n", "kept",
                    "noisy"):
            row[f"block_{key}"] = bs[key]
        why = bs["why"]
        if agree["avg_us"]["noisy"]:
            row["block_noisy"] = True
            why = "mean per call: " + agree["avg_us"]["why"] + (f"; {why}" if why else "")
        row.update(block_why=why, block_launch_medians_us=bs["block_medians"],
                   block_launch_spread=bs["block_spread"],
                   avg_launches_us=[g.get("avg_us") for g in group],
                   avg_launch_spread=agree["avg_us"]["spread"],
                   blocks_us=[x for g in group for x in g.get("blocks_us") or []],
                   stopped=_stopped([g.get("stopped") for g in group]),
                   stopped_launches=[g.get("stopped") for g in group],
                   launches=len(group))
        out.append(row)
    return out


def _placement_key(doc: dict) -> list:
    return [(p.get("rank"), p.get("host"), str(p.get("pus"))) for p in doc.get("placement", [])]


def merge_allpairs(docs: Sequence[dict]) -> dict:
    """Return the ``allpairs`` section of the native tool's output for
    several launches of the all-pairs test (``docs``, in order): every
    pair's one-way times per size and its latency blocks pooled over the
    launches whose ranks sat where the first launch's did, each pair's
    figures per launch under ``launch_fits`` (latency, bandwidth and their
    sources from :func:`tiers.probe.netfit.robust_fit` on that launch
    alone: :func:`analyse` takes their medians), and ``launches`` (how many
    were pooled).  The phases' seconds
    are summed.  One document is returned as it is."""
    first = docs[0]["allpairs"]
    if len(docs) == 1:
        return first
    key = _placement_key(docs[0])
    same = [d for d in docs if _placement_key(d) == key
            and [(p["a"], p["b"]) for p in d["allpairs"]["pairs"]]
            == [(p["a"], p["b"]) for p in first["pairs"]]
            and d["allpairs"]["sizes"] == first["sizes"]]
    pairs = []
    for i, p0 in enumerate(first["pairs"]):
        group = [d["allpairs"]["pairs"][i] for d in same]
        pair = dict(p0)
        pair["times_us"] = [[t for g in group for t in g["times_us"][f]]
                            for f in range(len(first["sizes"]))]
        pair["latency_samples_us"] = [x for g in group
                                      for x in g.get("latency_samples_us") or []]
        fits = []
        for g in group:
            try:
                f = netfit.robust_fit(first["sizes"], g["times_us"], g.get("latency_samples_us"))
            except TiersError:
                f = {"latency_us": None, "bandwidth_mbps": None}
            fits.append({k: f.get(k) for k in ("latency_us", "latency_source", "bandwidth_mbps",
                                               "bandwidth_source")})
        pair["launch_fits"] = fits
        pairs.append(pair)
    phases = []
    for j, ph in enumerate(first["phases"]):
        phases.append(dict(ph, seconds=sum(d["allpairs"]["phases"][j]["seconds"] for d in same)))
    return dict(first, pairs=pairs, phases=phases, launches=len(same),
                launches_run=len(docs))


def _stopped(reasons: Sequence[str | None]) -> str | None:
    """Why the launches of one figure stopped, in one word: "converged" when
    every launch converged, else the first other reason."""
    return next((r for r in reasons if r != "converged"), "converged" if reasons else None)


def l2_bytes(cpu: int = 0) -> int | None:
    """Return the size in bytes of the level-2 cache of ``cpu`` on this
    machine (Linux sysfs), or None when it cannot be read."""
    base = Path(f"/sys/devices/system/cpu/cpu{cpu}/cache")
    try:
        for d in sorted(base.glob("index*")):
            if (d / "level").read_text().strip() == "2" and \
                    (d / "type").read_text().strip() in ("Unified", "Data"):
                text = (d / "size").read_text().strip().upper()
                mult = {"K": 2**10, "M": 2**20}.get(text[-1:], 1)
                return int(text.rstrip("KM")) * mult
    except (OSError, ValueError):
        return None
    return None


def cache_edge(nbytes: int, l2: int | None) -> bool:
    """Whether a streaming size sits at the edge of a core's L2 cache: the
    receiving core holds the message it reads and the one it writes, 2 x
    ``nbytes``, and from half to twice the L2 size how well they fit
    depends on where their pages land in the cache (a physically indexed
    cache), which changes from one launch to the next."""
    return bool(l2) and l2 / 2 <= 2 * nbytes <= 2 * l2


def _positive(v):
    """``v`` when it is a positive finite number, else None: an impossible
    time or rate is never reported."""
    return v if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None


def _pingpong_row(r: dict, l2: int | None = None) -> dict:
    """The summary row of one ping-pong size: best (fastest block) and
    median figures, and whether each is noisy (docs/statistics.md).  Rows
    of documents written before the statistics layer carry one mean per
    size: it stands as the best, with no median."""
    out = {"bytes": r["bytes"],
           "rtt_us": _positive(r.get("rtt_us")),
           "rtt_median_us": _positive(r.get("rtt_median_us")),
           "latency_us": _positive(r.get("latency_us")),
           "latency_median_us": _positive(r.get("latency_median_us")),
           "pingpong_mbps": _positive(r.get("pingpong_mbps")),
           "pingpong_median_mbps": _positive(r.get("pingpong_median_mbps")),
           "bw_mbps": _positive(r.get("bw_mbps")),
           "bw_median_mbps": _positive(r.get("bw_median_mbps")),
           "rtt_noisy": r.get("rtt_noisy"), "bw_noisy": r.get("bw_noisy"),
           "rtt_ci_us": ([r["rtt_ci_low"], r["rtt_ci_high"]]
                         if r.get("rtt_ci_low") is not None else None),
           "rtt_blocks": r.get("rtt_n"), "bw_blocks": r.get("bw_window_n"),
           "launches": r.get("launches", 1),
           "rtt_launch_spread": r.get("rtt_launch_spread"),
           "bw_launch_spread": r.get("bw_launch_spread")}
    out["noisy"], out["why"] = _row_noise(dict(out, rtt_why=r.get("rtt_why"),
                                               bw_why=r.get("bw_why")))
    if r["bytes"] and cache_edge(r["bytes"], l2):
        out["cache_edge"] = True
        if out["noisy"]:
            out["why"] += (f"; 2 x {_size(r['bytes'])} of buffers is about a core's L2 cache "
                           f"({_size(l2)}): how well they fit depends on where their pages "
                           "land, which changes from launch to launch")
    return out


#: The legend of the ping-pong table's "~" (a whole row is marked).
ROW_LEGEND = ("~ noisy row: a 95 % CI of the median wider than +-5 %, best and median more "
              "than 5 % apart, or streaming below ping-pong (the reason per size above)")

#: From this size on, streaming (many messages in flight) below the ping-pong
#: bandwidth of the same size means a disturbed measurement (below it, the
#: per-message costs of the two methods differ and either can be lower).
STREAM_CHECK_BYTES = 64 * 1024


def _row_noise(row: dict) -> tuple[bool, str | None]:
    """Whether a ping-pong row is noisy as a whole, and why: a row is one
    measurement of one size, so one disturbed figure makes every column of
    it suspect.  Noisy when the round trip's or the streaming bandwidth's
    95 % CI of the median is wider than +-5 % (the statistics layer), when
    the best block lies more than 5 % away from the median block (more than
    the CI rule allows of a steady figure), or, from 64 KiB on, when
    streaming, which keeps several messages in flight, is more than 5 %
    below the ping-pong bandwidth of the same size (one of them was
    disturbed)."""
    rel = stats.NOISY_REL
    why = []
    if row.get("rtt_noisy"):
        why.append(f"round trip: {row.get('rtt_why') or '95 % CI of the median wider than +-5 %'}")
    if row.get("bw_noisy"):
        why.append(f"streaming: {row.get('bw_why') or '95 % CI of the median wider than +-5 %'}")
    best, med = row.get("rtt_us"), row.get("rtt_median_us")
    if best and med and (med - best) / med > rel:
        why.append(f"best round trip {(med - best) / med * 100:.0f} % below the median")
    bw, bwm = row.get("bw_mbps"), row.get("bw_median_mbps")
    if bw and bwm and (bw - bwm) / bw > rel:
        why.append(f"best streaming block {(bw - bwm) / bw * 100:.0f} % above the median")
    pp = row.get("pingpong_mbps")
    if bw and pp and row.get("bytes", 0) >= STREAM_CHECK_BYTES and bw < pp * (1 - rel):
        why.append(f"streaming {bw:,.0f} MB/s below ping-pong {pp:,.0f} MB/s")
    return bool(why), "; ".join(why) or None


def noisy_warnings(summary: dict, busy: bool = False) -> list[str]:
    """Return the one-line warnings of a summary: noisy ping-pong figures,
    all-pairs figures that could not be given as measured, and the pair's
    PUs not in one placement (worded for a ``busy`` machine, see
    :func:`pu_link_warning`)."""
    out = []
    rows = (summary.get("pingpong") or {}).get("rows", [])
    noisy = [r["bytes"] for r in rows if r.get("noisy") or r.get("rtt_noisy")
             or r.get("bw_noisy")]
    if noisy:
        out.append(f"probe net: {len(noisy)} ping-pong size(s) are noisy (95 % CI of the "
                   f"median wider than +-5 %, best and median more than 5 % apart, or "
                   f"streaming below ping-pong); every figure of such a row is marked")
    noisy_ar = [r["ranks"] for r in (summary.get("allreduce") or {}).get("rows", [])
                if r.get("noisy")]
    if noisy_ar:
        out.append(f"probe net: the MPI_Allreduce time over {', '.join(map(str, noisy_ar))} "
                   "processes is noisy (95 % CI of the median block wider than +-5 %)")
    ap = summary.get("allpairs")
    if ap and ap.get("unreliable_pairs"):
        out.append(f"probe net: {ap['unreliable_pairs']} of {ap['pairs']} all-pairs fits are "
                   "unreliable; their values were replaced or left out (see 'why')")
    moved = pu_link_warning(summary, busy)
    if moved:
        out.append(moved)
    return out


# --------------------------------------------------------------------------
# Output


def _size(b: int) -> str:
    for unit, mult in (("MiB", 2**20), ("KiB", 2**10)):
        if b >= mult and b % mult == 0:
            return f"{b // mult} {unit}"
    return f"{b} B" if b < 10_000 else f"{b:,} B"


def _num(v, fmt="{:,.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _cell(v, fmt) -> str:
    """A matrix cell: the value, or "unreliable" where none could be given."""
    return "unreliable" if v is None else fmt.format(v)


def render(doc: dict, console: Console) -> None:
    """Print a document: the ping-pong round-trip and bandwidth tables (the
    layout of the MPI/MBCF paper's Tables 1 and 2), the all-pairs run and its
    per-layer summary (the AFC mapping paper's Table 5) and the barrier times over rank
    counts (the COMPaS paper's Tables 3 and 4)."""
    p = doc["params"]
    s = doc["summary"]
    console.print(f"{p['ranks']} ranks, {p.get('mpi_library', '').split(',')[0]}; "
                  f"launcher {p.get('launcher', {}).get('name', '')} "
                  f"{p.get('launcher', {}).get('version', '')}"
                  + (" (more ranks than cores: ranks yield when idle)"
                     if p.get("oversubscribed") else ""))
    if "pingpong" in s:
        pp = s["pingpong"]
        a, b = pp["pair"]
        hosts = {pl["rank"]: pl for pl in doc["samples"]["placement"]}
        where = f"rank {a} ({hosts[a]['host']}, PUs {hosts[a]['pus']}) and rank {b} " \
                f"({hosts[b]['host']}, PUs {hosts[b]['pus']})"
        t = Table(title=f"Round-trip time between {where}", title_justify="left")
        t.add_column("message size (byte)", justify="right")
        t.add_column(f"round-trip time ({MICRO}s)", justify="right")
        t.add_column(f"median ({MICRO}s)", justify="right")
        t.add_column(f"latency ({MICRO}s)", justify="right")
        t.add_column("ping-pong MB/s", justify="right")
        t.add_column("streaming MB/s", justify="right")
        t.add_column("median MB/s", justify="right")
        any_noisy = False
        for r in pp["rows"]:
            # one disturbed figure makes the whole row suspect: every column is marked
            rn = bool(r.get("noisy", r.get("rtt_noisy") or r.get("bw_noisy")))
            any_noisy = any_noisy or rn

            def cell(v, fmt="{:,.2f}"):
                return stats.mark(_num(v, fmt), rn and v is not None)

            t.add_row(f"{r['bytes']:,}", cell(r["rtt_us"]), cell(r.get("rtt_median_us")),
                      cell(r["latency_us"]), cell(r["pingpong_mbps"], "{:,.1f}"),
                      cell(r["bw_mbps"], "{:,.1f}"), cell(r.get("bw_median_mbps"), "{:,.1f}"))
        console.print(t)
        for r in pp["rows"]:
            if r.get("why"):
                console.print(f"~ {_size(r['bytes'])}: {r['why']}", markup=False)
        pr = doc["params"]["pingpong"]
        if "figure_time_s" in pr:
            launches = pr.get("launches", 1)
            console.print((f"{launches} separate launches, each: " if launches > 1 else "")
                          + f"per size: the best block of {pr['iters']} round trips "
                          f"({pr['iters_large']} above {pr['large_above_bytes']} B) after "
                          f"{pr['skip']} ({pr['skip_large']}) warm-up ones, the median block "
                          f"beside it; blocks repeat until the 95 % CI of the median is within "
                          f"+-5 % or {pr['figure_time_s']:.2g} s pass"
                          + ("; best = the median of the launches' best blocks, median = "
                             "the median of the launches' medians, noisy when they disagree "
                             "by more than +-5 %" if launches > 1 else "")
                          + "; latency = round trip / 2; "
                          f"streaming bandwidth: windows of {pr['window']} non-blocking sends; "
                          f"MB = 10^6 bytes.")
        else:
            console.print(f"latency = round trip / 2, mean over {pr['iters']} iterations "
                          f"({pr['iters_large']} above {pr['large_above_bytes']} B) after "
                          f"{pr['skip']} ({pr['skip_large']}) warm-up ones; streaming "
                          f"bandwidth: windows of {pr['window']} non-blocking sends; "
                          f"MB = 10^6 bytes.")
        if any_noisy:
            console.print(ROW_LEGEND)
        _render_placements(s, console,
                           busy=(doc.get("noise") or {}).get("verdict") == "busy")
    if "allpairs" in s:
        ap = s["allpairs"]
        pa = doc["params"]["allpairs"]
        phases = doc["samples"]["allpairs"]["phases"]
        words = []
        for ph in phases:
            if ph["steps"] == 0:
                continue
            unit = "ranks of a node" if ph["phase"] == "intra" else "nodes"
            extra = (f", {ph['cores_per_node']} cores per node -> {ph['rounds']} rounds"
                     if ph["phase"] == "inter" else "")
            words.append(f"{ph['phase']}: {ph['units']} {unit}, {ph['steps']} steps{extra}, "
                         f"{ph['seconds']:.3f} s")
        console.print(f"All pairs (XOR schedule): {ap['pairs']} pairs; " + "; ".join(words))
        console.print(f"sizes {', '.join(f'{x:,}' for x in doc['samples']['allpairs']['sizes'])} "
                      f"B (centre {pa['center_bytes']:,.0f} B), repeated until the median is "
                      f"steady (at most {pa['reps']} times); "
                      f"fit time = latency + size / bandwidth through the best time per size, "
                      f"R^2 min {_num(ap['r2_min'], '{:.4f}')}")
        src = ap.get("latency_sources") or {}
        if src.get("pingpong"):
            console.print(f"latency: {src.get('fit', 0)} pair(s) from the fit, {src['pingpong']} "
                          "from a 0-byte ping-pong of the pair (the fit's intercept was not "
                          "a meaningful latency)")
        bsrc = ap.get("bandwidth_sources") or {}
        if bsrc.get("largest size"):
            console.print(f"bandwidth: {bsrc.get('fit', 0)} pair(s) from the fit, "
                          f"{bsrc['largest size']} at the largest size (their best times per "
                          f"size are not on a line within {netfit.MAX_RESIDUAL * 100:.0f} %)")
        if ap["unreliable_pairs"]:
            console.print(f"[yellow]{ap['unreliable_pairs']} of {ap['pairs']} pair fits are "
                          "unreliable: the run was disturbed or the repetitions too few; "
                          "rerun with more --reps on a quiet machine[/yellow]")
            for p in doc["samples"]["allpairs"]["pairs"]:
                if not p["reliable"]:
                    console.print(f"  ranks {p['a']}-{p['b']}: unreliable: {p['why']}")
        if ap.get("launches", 1) > 1:
            console.print(f"every pair in {ap['launches']} separate launches: latency and "
                          "bandwidth are the medians of the launches' own fits")
        if ap.get("noisy_pairs"):
            console.print(f"~ {ap['noisy_pairs']} of {ap['pairs']} pairs: their launches "
                          "disagree by more than +-5 %", markup=False)
            for p in doc["samples"]["allpairs"]["pairs"]:
                if p.get("noisy") and p.get("noisy_why"):
                    console.print(f"  ranks {p['a']}-{p['b']}: {p['noisy_why']}", markup=False)
        if ap["layers"]:
            t = Table(title="Per layer (mean +- standard deviation over pairs)",
                      title_justify="left")
            t.add_column("layer")
            t.add_column("pairs", justify="right")
            t.add_column("bandwidth MB/s", justify="right")
            t.add_column(f"latency {MICRO}s", justify="right")
            for row in ap["layers"]:
                bw = "unreliable" if row["bandwidth_mean_mbps"] is None else stats.mark(
                    f"{row['bandwidth_mean_mbps']:,.1f} +- {row['bandwidth_sd_mbps']:,.1f}",
                    row.get("noisy"))
                lat = "unreliable" if row["latency_mean_us"] is None else stats.mark(
                    f"{row['latency_mean_us']:,.2f} +- {row['latency_sd_us']:,.2f}",
                    row.get("noisy"))
                name = row["title"] + ("" if row["bound"] else " (unbound: farthest possible)")
                t.add_row(name, str(row["pairs"]), bw, lat)
            console.print(t)
        m = ap["matrices"]
        if m["ranks"] <= 16:
            t = Table(title=f"Fitted bandwidth MB/s (upper right) and latency {MICRO}s (lower left)",
                      title_justify="left")
            t.add_column("rank")
            for j in range(m["ranks"]):
                t.add_column(str(j), justify="right")
            for i in range(m["ranks"]):
                cells = []
                for j in range(m["ranks"]):
                    if i == j:
                        cells.append("")
                    elif j > i:
                        cells.append(_cell(m["bandwidth_mbps"][i][j], "{:,.0f}"))
                    else:
                        cells.append(_cell(m["latency_us"][i][j], "{:,.2f}"))
                t.add_row(str(i), *cells)
            console.print(t)
    if "barrier" in s:
        b = s["barrier"]
        hybrid = {r["ranks"]: r for r in b.get("hybrid") or []}
        threads = b.get("threads")
        title = "MPI_Barrier and the hybrid barrier" + \
            (f" ({plural(threads, 'thread')} per process)" if hybrid and threads else "") + \
            " against processes"
        t = Table(title=title, title_justify="left")
        t.add_column("processes", justify="right")
        for head in (f"MPI min {MICRO}s", f"MPI avg {MICRO}s", f"MPI max {MICRO}s"):
            t.add_column(head, justify="right")
        if hybrid:
            for head in (f"hybrid min {MICRO}s", f"hybrid avg {MICRO}s", f"hybrid max {MICRO}s",
                         "hybrid / MPI"):
                t.add_column(head, justify="right")
        for r in b["mpi"]:
            bn = bool(r.get("block_noisy"))  # its blocks' 95 % CI wider than +-5 %
            cells = [str(r["ranks"]), _num(r["min_us"]), stats.mark(_num(r["avg_us"]), bn),
                     _num(r["max_us"])]
            h = hybrid.get(r["ranks"])
            if hybrid:
                cells += ([_num(h["min_us"]), _num(h["avg_us"]), _num(h["max_us"]),
                           _num(h["avg_us"] / r["avg_us"] if r["avg_us"] > 0 else None,
                                "{:,.1f}x")] if h else ["-"] * 4)
            t.add_row(*cells)
        console.print(t)
        pb = doc["params"].get("barrier", {})
        if pb.get("launches", 1) > 1:
            calls = f"blocks of {pb['block_calls']} calls, " if pb.get("block_calls") else ""
            console.print(f"MPI_Barrier: {calls}each figure the median over {pb['launches']} "
                          "separate launches (~: the launches or their blocks disagree by more "
                          "than +-5 %)")
            for r in b["mpi"]:
                if r.get("block_noisy") and r.get("block_why"):
                    console.print(f"  {r['ranks']} processes: {r['block_why']}", markup=False)
        if hybrid:
            console.print(f"min / avg / max over processes of each one's mean time per "
                          f"barrier (hybrid: {pb.get('iters')} episodes timed after "
                          f"{pb.get('warmup')} warm-up ones); hybrid barrier = team spin "
                          f"barrier, MPI_Barrier by "
                          f"the master thread, team barrier again, all episodes in one "
                          f"parallel region timed by the master (threads pinned: "
                          f"{pb.get('pin', 'none')}).")
        fun = [r for r in b.get("rows", []) if r.get("mpi_funneled_avg_us")]
        if fun:
            console.print("MPI: a launch with MPI_THREAD_SINGLE, as a flat MPI program; the "
                          "hybrid barrier needs MPI_THREAD_FUNNELED, under which MPI_Barrier "
                          "alone took " + ", ".join(
                              f"{r['mpi_funneled_avg_us']:,.2f} {MICRO}s ({r['ranks']})"
                              for r in fun) + ".")
        elif not hybrid:
            console.print("Hybrid barrier: not measured by this tiers-probe-net.")
    if "allreduce" in s:
        a = s["allreduce"]
        t = Table(title=f"MPI_Allreduce of {a['bytes']} B against processes",
                  title_justify="left")
        t.add_column("processes", justify="right")
        for head in (f"min {MICRO}s", f"avg {MICRO}s", f"max {MICRO}s",
                     f"median block {MICRO}s", "95 % CI", "blocks"):
            t.add_column(head, justify="right")
        for r in a["rows"]:
            ci = "-" if r.get("ci_low_us") is None else \
                f"{r['ci_low_us']:,.2f}-{r['ci_high_us']:,.2f}"
            if r.get("reliable") is False:
                cells = ["unreliable"] * 4 + ["-", str(r.get("blocks") or "-")]
            else:
                cells = [_num(r["min_us"]), _num(r["avg_us"]), _num(r["max_us"]),
                         _num(r["median_us"]) + (" noisy" if r.get("noisy") else ""), ci,
                         str(r.get("blocks") or "-")]
            t.add_row(str(r["ranks"]), *cells)
        console.print(t)
        console.print("min / avg / max over processes of each one's mean time per call "
                      "(osu_allreduce's figure); median block = median over timed blocks of "
                      "the mean over processes, with its 95 % confidence interval.")


def _render_placements(s: dict, console: Console, busy: bool = False) -> None:
    """Where the host had placed the ping-pong pair's PUs (``pu_link``): one
    line when every launch ran in one placement; otherwise a table of the
    figures per placement (the smallest size's latency, the largest
    streaming bandwidth, MPI_Barrier), the launches in each, and the
    launches during which the PUs moved.  ``busy`` (the noise check found
    other work): a changed round trip may be that work, not a move by the
    host, and the text says so instead of naming the host."""
    link = s.get("pu_link")
    if not link:
        return
    a, b = link["pus"]
    who = f"PUs {a} and {b} (ranks {link['ranks'][0]} and {link['ranks'][1]})"
    if not link["placements"]:
        console.print(f"{who}: where the host placed them was not measured: every round trip "
                      "of a cache line between them ran out of time (a PU taken by other "
                      "work); figures between the two ranks cannot be given per placement",
                      markup=False)
        return
    unmeasured = sum(1 for ln in link["launches"] if not all(ln["rtt_ns"]))
    gaps = (f"; {unmeasured} launch{'es' if unmeasured != 1 else ''} whose round trips ran out "
            "of time (a PU taken by other work) left out" if unmeasured else "")
    if not link.get("moved"):
        console.print(f"{who}: a cache line's round trip of ~{link['placements'][0]['rtt_ns']:.0f}"
                      " ns between them before and after every launch (one placement "
                      f"throughout){gaps}", markup=False)
        return
    # beside other work a cache line's round trip also waits for that work
    # on the two PUs: a change then need not be the host moving them
    moved = ("their round trip changed" if busy else "the host moved them")
    cause = ("; the machine was busy, so a changed round trip may be the other work on "
             "these PUs rather than a move by the host" if busy else "")
    if not any(ln.get("placement") is not None for ln in link["launches"]):
        lo = min(p["rtt_range_ns"][0] for p in link["placements"])
        hi = max(p["rtt_range_ns"][1] for p in link["placements"])
        console.print(f"{who}: {moved} during every launch (a cache line's round "
                      f"trip between them went from ~{lo:.0f} to ~{hi:.0f} ns): no figure per "
                      f"placement{gaps}{cause}", markup=False)
        return
    pp = {x["placement"]: x for x in (s.get("pingpong") or {}).get("by_placement") or []}
    bar = {x["placement"]: x for x in (s.get("barrier") or {}).get("by_placement") or []}
    rows = (s.get("pingpong") or {}).get("rows") or []
    small = _size(rows[0]["bytes"]) if rows else "-"
    big = next((r["bytes"] for r in reversed(rows) if r.get("bw_mbps")), None)
    t = Table(title=f"Per placement of {who}: {moved} during the run")
    t.add_column("round trip (ns)", justify="right")
    t.add_column("ping-pong launches", justify="right")
    t.add_column(f"{small} latency ({MICRO}s)", justify="right")
    if big:
        t.add_column(f"{_size(big)} streaming MB/s", justify="right")
    if "barrier" in s:
        t.add_column("MPI_Barrier launches", justify="right")
        t.add_column(f"MPI_Barrier avg ({MICRO}s)", justify="right")
    for k, place in enumerate(link["placements"]):
        p = pp.get(k) or {}
        prow = p["rows"][0] if p.get("rows") else {}
        brow = next((r for r in p.get("rows") or [] if r["bytes"] == big), {})
        bb = (bar.get(k) or {}).get("mpi") or []
        cells = [f"{place['rtt_ns']:,.0f}", str(p.get("launches", 0)),
                 _num(prow.get("latency_us"))]
        if big:
            cells.append(_num(brow.get("bw_mbps"), "{:,.1f}"))
        if "barrier" in s:
            cells += [str((bar.get(k) or {}).get("launches", 0)),
                      _num(bb[0].get("avg_us") if bb else None)]
        t.add_row(*cells)
    console.print(t)
    during = sum(1 for ln in link["launches"] if ln.get("moved_during"))
    console.print("round trip: of a cache line between threads pinned to the two PUs, before "
                  "and after every launch; a launch belongs to a placement when both fall in it"
                  + (f"; {during} launch{'es' if during != 1 else ''} during which they moved "
                     "left out" if during else "") + gaps + cause, markup=False)


def plot(doc: dict, path) -> Path | None:
    """Draw heat maps of the all-pairs bandwidth and latency, the ping-pong
    latency and bandwidth against message size, and the MPI and hybrid
    barrier times against processes (each when measured); save as PNG at
    ``path`` and return the path (None when there is nothing to draw)."""
    s = doc["summary"]
    rows = []
    if "allpairs" in s:
        rows.append("allpairs")
    if "pingpong" in s:
        rows.append("pingpong")
    if "barrier" in s and s["barrier"]["mpi"]:
        rows.append("barrier")
    if not rows:
        return None
    import numpy as np

    fig, axes = tplot.figure(ncols=2, nrows=len(rows), width=5.6, height=4.6)
    for r, kind in enumerate(rows):
        left, right = axes[r][0], axes[r][1]
        if kind == "allpairs":
            m = s["allpairs"]["matrices"]
            for ax, key, title, cmap in (
                    (left, "bandwidth_mbps", "bandwidth (MB/s)", "viridis"),
                    (right, "latency_us", "latency (us)", "magma_r")):
                data = np.array([[np.nan if v is None else v for v in row] for row in m[key]],
                                dtype=float)
                im = ax.imshow(data, cmap=cmap, interpolation="nearest")
                fig.colorbar(im, ax=ax, shrink=0.85)
                ax.set_title(f"all pairs: {title}")
                ax.set_xlabel("rank")
                ax.set_ylabel("rank")
                n = m["ranks"]
                if n <= 32:
                    ax.set_xticks(range(n))
                    ax.set_yticks(range(n))
        elif kind == "barrier":
            _plot_barrier(s["barrier"], left, right)
        else:
            pr = [x for x in s["pingpong"]["rows"] if x["bytes"] > 0]
            sizes = [x["bytes"] for x in pr]
            nan = float("nan")
            left.loglog(sizes, [nan if x["latency_us"] is None else x["latency_us"] for x in pr],
                        marker="o", markersize=3, label="best")
            if any(x.get("latency_median_us") for x in pr):
                left.loglog(sizes, [x.get("latency_median_us") or nan for x in pr],
                            linestyle=":", marker=".", markersize=3, label="median")
                left.legend(fontsize=8)
            left.set_xlabel("message size (bytes)")
            left.set_ylabel("one-way latency (µs)")
            left.set_title("ping-pong latency")
            right.semilogx(sizes, [x["bw_mbps"] or nan for x in pr], marker="o", markersize=3,
                           label="streaming (window), best")
            if any(x.get("bw_median_mbps") for x in pr):
                right.semilogx(sizes, [x.get("bw_median_mbps") or nan for x in pr],
                               linestyle=":", marker=".", markersize=3,
                               label="streaming, median")
            right.semilogx(sizes, [x["pingpong_mbps"] or nan for x in pr], marker="s",
                           markersize=3, label="ping-pong, best")
            # noisy figures (95 % CI of the median wider than +-5 %) circled in red
            # (every figure of a noisy row: the row is one measurement)
            labelled = set()
            for ax, key in ((left, "latency_us"), (left, "latency_median_us"),
                            (right, "bw_mbps"), (right, "bw_median_mbps"),
                            (right, "pingpong_mbps")):
                pts = [(x["bytes"], x[key]) for x in pr
                       if x.get("noisy", x.get("rtt_noisy") or x.get("bw_noisy"))
                       and x.get(key) is not None]
                if pts:
                    ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=60,
                               facecolors="none", edgecolors="red",
                               label=None if id(ax) in labelled else "noisy (~)", zorder=3)
                    labelled.add(id(ax))
            if any(x.get("noisy", x.get("rtt_noisy")) for x in pr):
                left.legend(fontsize=8)
            right.set_xlabel("message size (bytes)")
            right.set_ylabel("bandwidth (MB/s)")
            right.set_title("bandwidth")
            right.legend(fontsize=8)
            for ax in (left, right):
                ax.grid(True, alpha=0.3, which="both")
    return tplot.save(fig, path)


def _plot_barrier(b: dict, left, right) -> None:
    """Left: mean time per barrier against processes, MPI_Barrier and the
    hybrid barrier (min..max over processes shaded); right: hybrid / MPI."""
    mpi = b["mpi"]
    hybrid = b.get("hybrid") or []
    for rows, label, marker in ((mpi, "MPI_Barrier", "o"),
                                (hybrid, f"hybrid ({b.get('threads')} threads/process)", "s")):
        if not rows:
            continue
        xs = [r["ranks"] for r in rows]
        left.plot(xs, [r["avg_us"] for r in rows], marker=marker, markersize=3, label=label)
        left.fill_between(xs, [r["min_us"] for r in rows], [r["max_us"] for r in rows],
                          alpha=0.2)
    xs = [r["ranks"] for r in mpi]
    left.set_yscale("log")
    left.set_xlabel("processes")
    left.set_ylabel("time per barrier (µs)")
    left.set_title("barrier")
    left.legend(fontsize=8)
    ratio = [(r["ranks"], r["hybrid_over_mpi"]) for r in b.get("rows", [])
             if r.get("hybrid_over_mpi") is not None]
    if ratio:
        right.plot([x for x, _ in ratio], [y for _, y in ratio], marker="s", markersize=3)
    right.set_xlabel("processes")
    right.set_ylabel("hybrid / MPI_Barrier")
    right.set_title("cost of the thread level")
    for ax in (left, right):
        ax.set_xticks(xs if len(xs) <= 16 else xs[:: max(1, len(xs) // 8)])
        ax.grid(True, alpha=0.3, which="both")


def main(args, argv: list[str]) -> int:
    """``tiers probe net``: measure, print, and write the document (--json)
    and the plot (--plot, or next to --json); return the exit status."""
    from ..render import console as tiers_console
    console = tiers_console()
    from .. import noise
    noise_block = noise.begin(console, bool(args.quick))  # first: is the machine quiet?
    doc = measure(args.ranks, tests=args.tests, all_pairs=args.all_pairs, sizes=args.sizes,
                  iters=args.iters, window=args.window, pair=args.pair, center=args.center,
                  factors=args.factors, reps=args.reps, cores_per_node=args.cores_per_node,
                  node_size=args.node_size, flat=args.flat, barrier_iters=args.barrier_iters,
                  barrier_threads=getattr(args, "barrier_threads", None), timeout=args.timeout, time_limit=args.time_limit, quick=args.quick,
                  launcher=args.launcher, hostfile=args.hostfile,
                  launcher_args=args.launcher_args or (),
                  vcluster=getattr(args, "vcluster", False),
                  launches=getattr(args, "launches", None), argv=argv,
                  busy=(noise_block or {}).get("verdict") == "busy")
    noise.attach(doc, noise_block)
    render(doc, console)
    tplot.write_outputs(doc, args.json, getattr(args, "plot", None), plot, console)
    return 0
