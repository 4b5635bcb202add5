"""The machine-noise check that ``tiers survey`` and every ``tiers probe``
run first, and ``tiers probe noise``.

The native tool ``tiers-probe-noise`` runs a fixed-work-quantum (FWQ) test,
the kind used to detect operating-system noise: one thread pinned to every
PU repeats a fixed amount of work (100 us on an undisturbed CPU) and times
each repetition.  Per PU it reports the fastest quantum, the median, the
99th percentile and the slowest, the *noise fraction* (quanta longer than
1.5x the fastest) and the *lost fraction* (the share of the time spent
above the fastest quantum), beside the machine's load: ``/proc/loadavg``,
the runnable processes and the CPU time other processes used during the
test.  Then it samples pairs of PUs (each with the next): the round trip of
a cache line between two threads pinned to them, a few times with a pause
between.  On a virtual machine the host may put two virtual CPUs on one
core's hyperthreads, on cores that share a cache or on different dies, and
move them while programs run; every figure between the two PUs (barriers,
locks, messages through shared memory) moves with it.  Samples of one pair
that differ by more than :data:`PAIR_MOVED` show such a move.

:func:`check` turns that into the ``"noise"`` block of a result document::

    {"verdict": "quiet" | "busy" | "moving", "summary": "one line",
     "loadavg": [...], "fwq": {...}, "load": {...}, "pairs": [...],
     "reasons": [...]}

"moving" (the load is quiet but a pair's round trip changed during the
check) says that figures between PUs may differ between runs for a reason
outside tiers and the program.

and :func:`attach` stores it in a document, adding a line to the
document's ``"warnings"`` when the machine was busy or moving.
"""

from __future__ import annotations

from . import native

TOOL = "tiers-probe-noise"

#: A PU that lost more than this share of its time to other work is busy.
LOST_BUSY = 0.10
#: A PU with more than this share of quanta over 1.5x the fastest is busy.
NOISY_QUANTA_BUSY = 0.05
#: Other processes using more than this share of all PUs make the machine busy.
OTHER_CPU_BUSY = 0.25
#: A pair of PUs whose cache-line round trips (samples of one check) differ
#: by more than this factor was moved by the host during the check (on a
#: 2-vCPU AMD EPYC guest the round trip is about 100 or about 450 ns, as
#: the host places the two virtual CPUs; within one placement the samples
#: agree within 20 %).
PAIR_MOVED = 1.5


def measure(*, quick: bool = True, quantum_us: float | None = None,
            duration_ms: float | None = None, pus: str | None = None,
            pair_samples: int | None = None, timeout: float = 120.0) -> dict:
    """Run ``tiers-probe-noise``; return its JSON output (a dict)."""
    args = ["--quick"] if quick else []
    if pair_samples is not None:
        args += ["--pair-samples", str(int(pair_samples))]
    if quantum_us is not None:
        args += ["--quantum-us", f"{quantum_us:g}"]
    if duration_ms is not None:
        args += ["--duration-ms", f"{duration_ms:g}"]
    if pus is not None:
        args += ["--pus", str(pus)]
    return native.run_json(TOOL, args, timeout=timeout)


def pair_round_trip(a: int, b: int, timeout: float = 30.0) -> float | None:
    """The round trip (ns) of a cache line between two threads pinned to
    PUs ``a`` and ``b`` (logical indices) now: one quick sample of the
    tool's pairs (a few tens of milliseconds with the tool's start).  None
    when it could not be measured (the tool failed, or the sample ran out
    of time: the second PU taken by other work).  Never raises: a figure
    that is not there is only a placement that is not known."""
    from .errors import TiersError

    try:
        raw = measure(quick=True, duration_ms=1, pus=f"{int(a)},{int(b)}", pair_samples=1,
                      timeout=timeout)
    except (TiersError, OSError, ValueError):
        return None
    for pair in raw.get("pairs") or []:
        for s in pair.get("samples") or []:
            rtt = s.get("rtt_ns")
            if not s.get("timed_out") and isinstance(rtt, (int, float)) and rtt > 0:
                return float(rtt)
    return None


#: Round trips (sorted) more than this factor apart start a new placement
#: class: on the 2-vCPU AMD EPYC guest of docs/benchmarks.md the classes lie
#: about 70, 100 and 450 ns apart, and one placement's samples within 10 %.
PLACEMENT_GAP = 1.25


def placement_classes(rtts) -> list[tuple[float, float]]:
    """Cluster round trips (ns) of a cache line between two PUs into the
    placements the host gave them: sorted, a new class wherever a value is
    more than :data:`PLACEMENT_GAP` times the one before.  Return each
    class's (lowest, highest) value, lowest first; zeros and None (not
    measured) are left out."""
    out: list[list[float]] = []
    for x in sorted(v for v in rtts if v and v > 0):
        if out and x <= PLACEMENT_GAP * out[-1][1]:
            out[-1][1] = x
        else:
            out.append([x, x])
    return [(lo, hi) for lo, hi in out]


def class_of(x, classes: list[tuple[float, float]]) -> int | None:
    """The index of the class of :func:`placement_classes` holding ``x``
    (None when ``x`` is None or in none)."""
    if x is None:
        return None
    for k, (lo, hi) in enumerate(classes):
        if lo <= x <= hi:
            return k
    return None


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"


def pairs(raw: dict) -> list[dict]:
    """Return, per sampled pair of PUs in the tool's output ``raw``: ``pus``
    [a, b], the topology's ``layer`` between them, ``rtt_ns`` (the samples'
    cache-line round trips, in order), ``min_ns``, ``max_ns``, ``moved``
    (the largest over the smallest is above :data:`PAIR_MOVED`) and
    ``timed_out`` (samples left out: they ran out of time, the second PU
    taken by other work, so their round trip is a time slice's, not the
    line's); or ``error`` where the pair could not be measured.  A pair
    whose every sample timed out has ``rtt_ns`` empty and ``moved`` False."""
    out = []
    for p in raw.get("pairs") or []:
        row = {"pus": [p["pu_a"], p["pu_b"]], "layer": p.get("layer")}
        if p.get("error"):
            row["error"] = p["error"]
        else:
            samples = p.get("samples") or []
            rtt = [float(s["rtt_ns"]) for s in samples
                   if s.get("rtt_ns") and not s.get("timed_out")]
            lo, hi = (min(rtt), max(rtt)) if rtt else (None, None)
            row.update(rtt_ns=rtt, min_ns=lo, max_ns=hi,
                       moved=bool(rtt) and hi > PAIR_MOVED * lo,
                       timed_out=sum(1 for s in samples if s.get("timed_out")))
        out.append(row)
    return out


def verdict(raw: dict) -> tuple[str, list[str]]:
    """Return ("quiet" | "busy" | "moving", the reasons) for the tool's
    output ``raw``: "busy" for the load (a PU that lost time, noisy quanta,
    other processes), else "moving" when a pair of PUs was moved by the
    host during the check (its round trips differ by more than
    :data:`PAIR_MOVED`), else "quiet" (no reasons)."""
    reasons = []
    # the worst PU first: the summary names it
    for p in sorted(raw.get("pus", []), key=lambda p: -p["lost_fraction"]):
        if p["lost_fraction"] > LOST_BUSY:
            reasons.append(f"PU {p['pu']} lost {_pct(p['lost_fraction'])} of its time "
                           "to other work")
        elif p["noise_fraction"] > NOISY_QUANTA_BUSY:
            reasons.append(f"PU {p['pu']}: {_pct(p['noise_fraction'])} of the work quanta "
                           "took over 1.5x the fastest")
    other = (raw.get("load") or {}).get("other_cpu_fraction")
    if other is not None and other > OTHER_CPU_BUSY:
        reasons.append(f"other processes used {_pct(other)} of the CPUs")
    moved = [p for p in pairs(raw) if p.get("moved")]
    for p in moved:
        reasons.append(f"PUs {p['pus'][0]} and {p['pus'][1]} moved during the check: a cache "
                       f"line's round trip between them went between {p['min_ns']:.0f} and "
                       f"{p['max_ns']:.0f} ns (on a virtual machine, the host placing its "
                       "CPUs elsewhere), and figures between PUs move with it")
    if len(reasons) > len(moved):
        return "busy", reasons
    return ("moving" if moved else "quiet"), reasons


def block(raw: dict) -> dict:
    """Return the ``"noise"`` block of a result document built from the
    tool's output ``raw``: verdict, one-line summary, load and FWQ figures."""
    state, reasons = verdict(raw)
    load = dict(raw.get("load") or {})
    pus = raw.get("pus") or []
    worst = max(pus, key=lambda p: p["lost_fraction"]) if pus else None
    params = raw.get("params") or {}
    fwq = {
        "method": params.get("method"),
        "quantum_us": params.get("quantum_us"),
        "quanta": params.get("quanta"),
        "noise_threshold": params.get("noise_threshold"),
        "pus": pus,
        "worst_pu": worst["pu"] if worst else None,
        "noise_fraction": worst["noise_fraction"] if worst else None,
        "lost_fraction": worst["lost_fraction"] if worst else None,
    }
    la = load.get("loadavg")
    load_text = f"load {la[0]:.2f}" if la else "load unknown"
    if load.get("procs_running") is not None:
        load_text += f", {load['procs_running']} other runnable"
    if worst:
        fwq_text = (f"FWQ {params.get('quantum_us', 0):g} us quanta on {len(pus)} PU"
                    f"{'s' if len(pus) != 1 else ''}, worst PU {worst['pu']}: "
                    f"{_pct(worst['noise_fraction'])} noisy quanta, "
                    f"{_pct(worst['lost_fraction'])} of its time lost")
    else:
        fwq_text = "no FWQ figures"
    prs = pairs(raw)
    measured = [p for p in prs if p.get("rtt_ns")]
    if measured:
        lo = min(p["min_ns"] for p in measured)
        hi = max(p["max_ns"] for p in measured)
        span = f"{lo:.0f} ns" if hi < 1.05 * lo else f"{lo:.0f}-{hi:.0f} ns"
        pair_text = (f"cache-line round trip between PUs {span}" if len(measured) > 1 else
                     f"cache-line round trip PU {measured[0]['pus'][0]}-"
                     f"{measured[0]['pus'][1]} {span}")
    else:
        pair_text = None
    if state == "busy":
        summary = (f"machine busy: {reasons[0]}; {load_text}; figures of this run may be "
                   "disturbed")
    elif state == "moving":
        summary = (f"machine moving: {reasons[0]}; {load_text}; figures between PUs of this "
                   "run may differ from other runs'")
    else:
        summary = f"machine quiet: {fwq_text}; {load_text}"
        if pair_text:
            summary += f"; {pair_text}"
    return {"verdict": state, "summary": summary, "reasons": reasons,
            "loadavg": la, "load": load, "fwq": fwq, "pairs": prs}


def check(quick: bool = True) -> dict:
    """Run the noise check (about 0.3 s with ``quick``, 1 s without);
    return the ``"noise"`` block (see :func:`block`)."""
    return block(measure(quick=quick))


def attach(doc: dict, noise: dict | None) -> dict:
    """Store ``noise`` as ``doc["noise"]``; when it is not quiet (busy, or
    moving), add its summary to ``doc["warnings"]`` (once).  Return
    ``doc``."""
    if not noise:
        return doc
    doc["noise"] = noise
    if noise.get("verdict") in ("busy", "moving"):
        warnings = doc.setdefault("warnings", [])
        if noise.get("summary") and noise["summary"] not in warnings:
            warnings.append(noise["summary"])
    return doc


def check_quietly(quick: bool = True) -> dict | None:
    """:func:`check` for commands that run it before their own measurement:
    None (and no error) when the tool is missing or fails, so that a
    probe never fails because of its noise check."""
    from .errors import TiersError
    try:
        return check(quick=quick)
    except TiersError:
        return None


# ---------------------------------------------------------------------------
# tiers probe noise

def render(doc: dict, console) -> None:
    """Print the summary line and the per-PU table of a tiers.probe.noise/1
    document.  Returns nothing."""
    from rich.table import Table

    from .render import MICRO

    noise = doc["noise"]
    console.print(noise["summary"], markup=False)
    fwq = noise["fwq"]
    table = Table(title=f"Fixed work quantum ({fwq['quantum_us']:g} {MICRO}s, {fwq['quanta']} quanta "
                  "per PU)")
    for col in ("PU", f"min {MICRO}s", f"median {MICRO}s", f"p99 {MICRO}s", f"max {MICRO}s",
                "noisy quanta", "time lost"):
        table.add_column(col, justify="right")
    for p in fwq["pus"]:
        table.add_row(str(p["pu"]), f"{p['min_us']:.1f}", f"{p['median_us']:.1f}",
                      f"{p['p99_us']:.1f}", f"{p['max_us']:.1f}",
                      _pct(p["noise_fraction"]), _pct(p["lost_fraction"]))
    console.print(table)
    load = noise["load"]
    la = load.get("loadavg")
    parts = []
    if la:
        parts.append("load average " + " ".join(f"{x:.2f}" for x in la))
    if load.get("procs_running") is not None:
        parts.append(f"{load['procs_running']} other runnable")
    if load.get("other_cpu_fraction") is not None:
        parts.append(f"other processes {_pct(load['other_cpu_fraction'])} of the CPUs")
    if load.get("steal_fraction") is not None:
        parts.append(f"steal {_pct(load['steal_fraction'])}")
    if parts:
        console.print("; ".join(parts), markup=False)
    prs = noise.get("pairs") or []
    if prs:
        table = Table(title="Pairs of PUs: a cache line's round trip between threads pinned to "
                      "them, per sample")
        for col, just in (("PUs", "right"), ("topology", "left"), ("round trip ns", "right"),
                          ("moved", "left")):
            table.add_column(col, justify=just)
        for p in prs:
            if "error" in p:
                table.add_row(f"{p['pus'][0]}-{p['pus'][1]}", str(p.get("layer") or ""),
                              "not measured", p["error"])
                continue
            shown = " ".join(f"{x:.0f}" for x in p["rtt_ns"])
            if p["timed_out"]:
                shown += f" ({p['timed_out']} ran out of time: the PU was taken)"
            table.add_row(f"{p['pus'][0]}-{p['pus'][1]}", str(p.get("layer") or ""), shown,
                          f"yes ({p['max_ns'] / p['min_ns']:.1f}x)" if p["moved"] else "no")
        console.print(table)
        console.print("A pair the host moves (a virtual machine's CPUs placed on other cores "
                      "or dies) changes its round trip, and every figure between the two PUs "
                      "with it.", markup=False)


def main(args, argv: list[str]) -> int:
    """``tiers probe noise``: run the check, print it, write --json; return 0."""
    from . import plot as tplot, result
    from .render import console as tiers_console

    console = tiers_console()
    raw = measure(quick=args.quick, quantum_us=args.quantum_us,
                  duration_ms=None if args.duration is None else args.duration * 1e3,
                  pus=args.pus, pair_samples=args.pair_samples)
    noise = block(raw)
    doc = result.new_document("probe.noise", params=dict(raw.get("params") or {}),
                              samples=raw.get("pus") or [],
                              summary={"verdict": noise["verdict"],
                                       "worst_pu": noise["fwq"]["worst_pu"],
                                       "lost_fraction": noise["fwq"]["lost_fraction"],
                                       "noise_fraction": noise["fwq"]["noise_fraction"]},
                              argv=argv, native=raw.get("native"))
    attach(doc, noise)
    render(doc, console)
    tplot.write_outputs(doc, args.json, None, lambda d, p: None, console)
    return 0


def begin(console, quick: bool = True) -> dict | None:
    """What a probe does before it measures: run the check (quietly, see
    :func:`check_quietly`) and print its one-line summary on ``console``;
    return the block for :func:`attach` (None when it could not run)."""
    noise = check_quietly(quick)
    if noise:
        console.print(noise["summary"], markup=False,
                      style="yellow" if noise["verdict"] != "quiet" else None)
    return noise
