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
test.

:func:`check` turns that into the ``"noise"`` block of a result document::

    {"verdict": "quiet" | "busy", "summary": "one line", "loadavg": [...],
     "fwq": {...}, "load": {...}, "reasons": [...]}

and :func:`attach` stores it in a document, adding a line to the
document's ``"warnings"`` when the machine was busy.
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


def measure(*, quick: bool = True, quantum_us: float | None = None,
            duration_ms: float | None = None, pus: str | None = None,
            timeout: float = 120.0) -> dict:
    """Run ``tiers-probe-noise``; return its JSON output (a dict)."""
    args = ["--quick"] if quick else []
    if quantum_us is not None:
        args += ["--quantum-us", f"{quantum_us:g}"]
    if duration_ms is not None:
        args += ["--duration-ms", f"{duration_ms:g}"]
    if pus is not None:
        args += ["--pus", str(pus)]
    return native.run_json(TOOL, args, timeout=timeout)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"


def verdict(raw: dict) -> tuple[str, list[str]]:
    """Return ("quiet" | "busy", the reasons for "busy") for the tool's
    output ``raw``."""
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
    return ("busy" if reasons else "quiet"), reasons


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
    if state == "busy":
        summary = (f"machine busy: {reasons[0]}; {load_text}; figures of this run may be "
                   "disturbed")
    else:
        summary = f"machine quiet: {fwq_text}; {load_text}"
    return {"verdict": state, "summary": summary, "reasons": reasons,
            "loadavg": la, "load": load, "fwq": fwq}


def check(quick: bool = True) -> dict:
    """Run the noise check (about 0.3 s with ``quick``, 1 s without);
    return the ``"noise"`` block (see :func:`block`)."""
    return block(measure(quick=quick))


def attach(doc: dict, noise: dict | None) -> dict:
    """Store ``noise`` as ``doc["noise"]``; when it says busy, add its
    summary to ``doc["warnings"]`` (once).  Return ``doc``."""
    if not noise:
        return doc
    doc["noise"] = noise
    if noise.get("verdict") == "busy":
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


def main(args, argv: list[str]) -> int:
    """``tiers probe noise``: run the check, print it, write --json; return 0."""
    from . import plot as tplot, result
    from .render import console as tiers_console

    console = tiers_console()
    raw = measure(quick=args.quick, quantum_us=args.quantum_us,
                  duration_ms=None if args.duration is None else args.duration * 1e3,
                  pus=args.pus)
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
                      style="yellow" if noise["verdict"] == "busy" else None)
    return noise
