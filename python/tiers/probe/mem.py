"""``tiers probe mem``: memory bandwidth per thread count, pinning and placement.

The native tool ``tiers-probe-mem`` runs the STREAM kernels (copy, scale,
add, triad, counted as STREAM counts them: 16, 16, 24, 24 bytes per element)
and the read-only sum, write-only fill and ``memcpy`` of the COMPaS paper
for every combination of thread count, pinning policy (``none``,
``compact``, ``scatter``) and data placement (``first-touch`` by each thread,
or ``master`` initialisation by thread 0).  Each kernel runs its ``ntimes``
repetitions back to back, as likwid-bench runs its iterations, on arrays
2 MiB aligned and advised for transparent huge pages; the first run is
dropped; the best rate is bytes / minimum time in
MB/s (MB = 10**6 bytes), and the arrays are validated against the scalar
recurrence as STREAM's checker does.

This module wraps the tool's output into a ``tiers.probe.mem/1`` result
document (see docs/schemas/probe-mem.md), prints STREAM-like tables and a
saturation view, and plots bandwidth against threads.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table

from ..render import plural

from .. import native, plot as tplot, result, stats
from ..errors import TiersError
from ..progress import tool_progress

TOOL = "tiers-probe-mem"

#: Kernels in the order one repetition runs them, with STREAM's bytes per element.
KERNELS = {"copy": 16, "scale": 16, "add": 24, "triad": 24, "read": 8, "write": 8, "memcpy": 16}

#: A series saturates at the fewest threads reaching this share of its best rate.
SATURATION_SHARE = 0.9


class ValidationError(TiersError):
    """The measured arrays did not match the scalar recurrence.  ``document``
    holds the full result document, with the failed validation in it."""

    def __init__(self, message: str, document: dict):
        super().__init__(message, code=2)
        self.document = document


def native_args(*, threads=None, pin=None, placement=None, kernels=None, size=None,
                ntimes=None, stores=None, quick=False) -> list[str]:
    """Return the tiers-probe-mem arguments for these options (lists may be
    given as Python lists or as comma-separated text; None means the tool's
    default)."""
    args: list[str] = []
    for flag, value in (("--threads", threads), ("--pin", pin), ("--placement", placement),
                        ("--kernels", kernels)):
        text = native.list_arg(value)
        if text is not None:
            args += [flag, text]
    if size is not None:
        args += ["--size", str(size)]
    if ntimes is not None:
        args += ["--ntimes", str(ntimes)]
    if stores is not None:
        args += ["--stores", str(stores)]
    if quick:
        args.append("--quick")
    return args


def _run_tool(args: list[str],
              progress: Callable[[int, int], None] | None) -> tuple[dict, str | None]:
    """Run tiers-probe-mem; return (its JSON, the validation failure message
    or None).  Raise TiersError with the tool's own line for any other failure."""
    returncode, stdout, stderr = native.run_with_progress(TOOL, args, progress)
    if returncode != 0:
        err = native.tool_error(TOOL, stderr, returncode)
        try:
            raw = json.loads(stdout)
        except json.JSONDecodeError:
            raise err from None
        if isinstance(raw, dict) and raw.get("validation_passed") is False:
            return raw, str(err)
        raise err
    return native.parse_json(TOOL, stdout), None


def _series(configs: list[dict]) -> list[dict]:
    """Return one series per (kernel, pin, placement, stores): rates against
    thread counts, per-thread rates, speed-up over the fewest threads and the
    saturation point."""
    groups: dict[tuple, list[tuple[int, dict]]] = {}
    for cfg in configs:
        for res in cfg["results"]:
            key = (res["kernel"], cfg["pin"], cfg["placement"], res["stores"])
            groups.setdefault(key, []).append((cfg["threads"], res))
    out = []
    for (kernel, pin, placement, stores), points in groups.items():
        points.sort(key=lambda p: p[0])
        threads = [t for t, _ in points]
        rates = [r["best_rate_mbps"] for _, r in points]
        per_thread = [r["per_thread_mbps"] for _, r in points]
        top = max(rates)
        saturation = next(t for t, r in zip(threads, rates) if r >= SATURATION_SHARE * top)
        out.append({"kernel": kernel, "pin": pin, "placement": placement, "stores": stores,
                    "threads": threads, "best_rate_mbps": rates, "per_thread_mbps": per_thread,
                    "speedup": [r / rates[0] for r in rates],
                    "saturation_threads": saturation, "max_rate_mbps": top})
    order = list(KERNELS)
    out.sort(key=lambda s: (order.index(s["kernel"]), s["pin"], s["placement"]))
    return out


def summarise(raw: dict) -> dict:
    """Return the ``summary`` of a document from the tool's output: the
    validation verdict, one row per configuration and kernel, the series
    against threads with their saturation points, and each kernel's best."""
    rows = []
    for cfg in raw["configs"]:
        for res in cfg["results"]:
            rows.append({"kernel": res["kernel"], "threads": cfg["threads"], "pin": cfg["pin"],
                         "placement": cfg["placement"], "stores": res["stores"],
                         "best_rate_mbps": res["best_rate_mbps"],
                         "per_thread_mbps": res["per_thread_mbps"],
                         "min_time_s": res["min_time_s"], "avg_time_s": res["avg_time_s"],
                         "max_time_s": res["max_time_s"],
                         "median_rate_mbps": res.get("median_rate_mbps"),
                         "mean_rate_mbps": res.get("mean_rate_mbps"),
                         "variant": res.get("variant"),
                         "noisy": res.get("noisy"),
                         "valid": cfg["validation"]["passed"]})
    out = {"validation_passed": bool(raw["validation_passed"]), "rows": rows,
           "series": _series(raw["configs"]), "best": _best(rows),
           "saturation_share": SATURATION_SHARE}
    _split_by_placement(out, raw["configs"])
    return out


def _best(rows: list[dict]) -> dict:
    """Each kernel's fastest row: its rate, threads, pinning, placement, stores."""
    best: dict = {}
    for row in rows:
        cur = best.get(row["kernel"])
        if cur is None or row["best_rate_mbps"] > cur["best_rate_mbps"]:
            best[row["kernel"]] = {k: row[k] for k in ("best_rate_mbps", "threads", "pin",
                                                        "placement", "stores")}
    return best


def _split_by_placement(summary: dict, configs: list[dict]) -> None:
    """Where the host had placed the first two pinned threads' PUs during
    each configuration (the tool's ``pu_link``: a cache line's round trip
    between them before and after; on a 2-vCPU guest two threads' Triad
    read 23-34 GB/s with the PUs near, 34-38 far): each row of a
    linked configuration gets ``pu_link_ns`` and ``pu_placement`` (the
    class of :func:`tiers.noise.placement_classes` both round trips fall
    in, None when they differ or one is missing), the summary ``pu_link``
    (``placements``: each class's median round trip and range; ``moved``:
    more than one class, or a configuration during which the PUs moved) and
    ``best_by_placement`` (per class, each kernel's best over the rows of
    that class and the rows of one thread, which have no pair).  Nothing
    when no configuration was linked."""
    from .. import noise

    links = {(c["threads"], c["pin"], c["placement"]): (c.get("pu_link") or {}).get("rtt_ns")
             for c in configs}
    rtts = [x for pair in links.values() if pair for x in pair if x]
    if not rtts:
        return
    classes = noise.placement_classes(rtts)
    moved = False
    for row in summary["rows"]:
        pair = links.get((row["threads"], row["pin"], row["placement"]))
        if not pair:
            continue
        a, b = (noise.class_of(x, classes) if x else None for x in pair)
        row["pu_link_ns"] = list(pair)
        row["pu_placement"] = a if a is not None and a == b else None
        moved = moved or (a is not None and b is not None and a != b)
    summary["pu_link"] = {
        "pus": next((c["pu_link"]["pus"] for c in configs if c.get("pu_link")), None),
        "placements": [{"rtt_ns": statistics.median([x for x in rtts if lo <= x <= hi]),
                        "rtt_range_ns": [lo, hi]} for lo, hi in classes],
        "moved": moved or len(classes) > 1}
    summary["best_by_placement"] = [
        {"placement": k, "rtt_ns": summary["pu_link"]["placements"][k]["rtt_ns"],
         "best": _best([r for r in summary["rows"]
                        if r.get("pu_placement") == k or r["threads"] == 1])}
        for k in range(len(classes))
        if any(r.get("pu_placement") == k for r in summary["rows"])]


def placement_warning(summary: dict) -> str | None:
    """One line when the first two pinned threads' PUs were not in one
    placement for the whole run, with the best Triad (or the first kernel)
    in each; None otherwise."""
    link = summary.get("pu_link")
    if not link or not link.get("moved"):
        return None
    cells = []
    for b in summary.get("best_by_placement") or []:
        kernel = "triad" if "triad" in b["best"] else next(iter(b["best"]), None)
        if kernel:
            x = b["best"][kernel]
            cells.append(f"{kernel} {_mb(x['best_rate_mbps'])} MB/s at ~{b['rtt_ns']:.0f} ns "
                         f"({plural(x['threads'], 'thread')} {x['pin']})")
    pus = link.get("pus") or [0, 1]
    return (f"probe mem: the host moved PUs {pus[0]} and {pus[1]} during the run (a cache "
            "line's round trip between them "
            + ", ".join(f"~{p['rtt_ns']:.0f} ns" for p in link["placements"])
            + "); rates of threads on both follow it"
            + (": " + "; ".join(cells) if cells else "")
            + " -- compare runs per placement (best_by_placement in the JSON)")


def measure(*, threads=None, pin=None, placement=None, kernels=None, size=None, ntimes=None,
            stores=None, quick: bool = False, argv: list[str] | None = None,
            progress: Callable[[int, int], None] | None = None) -> dict:
    """Run the memory-bandwidth probe and return its ``tiers.probe.mem/1``
    result document.

    ``threads`` (e.g. ``[1, 2]`` or ``"1-4"``), ``pin`` (among none, compact,
    scatter), ``placement`` (first-touch, master) and ``kernels`` are lists or
    comma-separated text; ``size`` is bytes per array (an int or text such as
    ``"512M"``); ``ntimes`` repetitions (the first dropped); ``stores`` is
    ``"regular"`` or ``"nt"``; ``quick`` runs 1 and all threads, compact
    pinning, first-touch and 7 repetitions unless other options say
    otherwise.  ``progress(done, total)`` is called after each configuration.

    The document's ``params`` are the tool's parameters, ``samples`` its
    configurations (raw times per repetition, thread bindings read back from
    the OS, validation), ``summary`` what :func:`summarise` returns.  Raise
    TiersError (one line) on bad input, and ValidationError, which carries the
    document, when the results do not validate."""
    args = native_args(threads=threads, pin=pin, placement=placement, kernels=kernels,
                       size=size, ntimes=ntimes, stores=stores, quick=quick)
    raw, failure = _run_tool(args, progress)
    summary = summarise(raw)
    noisy = sum(1 for r in summary["rows"] if r.get("noisy"))
    warnings = [f"probe mem: {noisy} of {len(summary['rows'])} rates are noisy (95 % "
                "CI of the median time wider than +-5 %)"] if noisy else []
    moved = placement_warning(summary)
    if moved:
        warnings.append(moved)
    extra = {"warnings": warnings} if warnings else {}
    doc = result.new_document("probe.mem", params=raw["params"], samples=raw["configs"],
                              summary=summary, argv=argv, native=raw.get("native", {}), **extra)
    if failure is not None:
        raise ValidationError(failure, doc)
    return doc


def _mb(value: float) -> str:
    return f"{value:,.1f}"


def render(doc: dict, console: Console) -> None:
    """Print a document: its parameters, a STREAM-like table per
    configuration (Function, Best Rate MB/s, Avg/Min/Max time) and the
    saturation view (total and per-thread MB/s against threads)."""
    p = doc["params"]
    console.print(f"Array size {p['array_elements']:,} elements x {p['element_bytes']} B = "
                  f"{p['array_bytes'] / 2**20:,.1f} MiB per array, {p['arrays']} arrays "
                  f"({p['total_bytes'] / 2**20:,.1f} MiB); last-level caches "
                  f"{p['llc_total_bytes'] / 2**20:,.1f} MiB.")
    console.print(f"Each kernel ran {p['ntimes']} times, the first dropped; stores: "
                  f"{p['stores']} ({p['isa']} kernels); MB = 10^6 bytes."
                  + (" auto: each kernel ran its repetitions with regular, then with "
                     "non-temporal stores, and shows the variant (in brackets) with the shorter "
                     "mean time." if p["stores"] == "auto" else ""))
    if p.get("huge_pages"):
        backed = [cfg.get("huge_page_bytes") for cfg in doc["samples"]]
        known = [b for b in backed if b is not None]
        console.print(f"Arrays {p['array_alignment_bytes'] // 2**20} MiB aligned, huge pages "
                      f"{p['huge_pages']}" + (
                          f"; backed by huge pages: {min(known) / 2**20:,.0f} MiB or more per "
                          "configuration." if known else "."))
    if not p.get("size_meets_stream_rule", True):
        console.print("[yellow]Arrays are smaller than 4x the last-level caches: the rates "
                      "include cache bandwidth.[/yellow]")
    for cfg in doc["samples"]:
        valid = cfg["validation"]["passed"]
        title = (f"{plural(cfg['threads'], 'thread')}, pin "
                 f"{cfg['pin']}, placement {cfg['placement']}, stores {cfg['stores']}")
        table = Table(title=title, title_justify="left")
        table.add_column("Function")
        table.add_column("Best Rate MB/s", justify="right")
        table.add_column("Median MB/s", justify="right")
        table.add_column("Mean MB/s", justify="right")
        table.add_column("Avg time", justify="right")
        table.add_column("Min time", justify="right")
        table.add_column("Max time", justify="right")
        table.add_column("MB/s per thread", justify="right")
        for res in cfg["results"]:
            med = res.get("median_rate_mbps")
            mean = res.get("mean_rate_mbps")
            variant = f" ({res['variant']})" if res.get("variant") and \
                res["variant"] != res["stores"] else ""
            table.add_row(res["kernel"].capitalize() + ":" + variant,
                          stats.mark(_mb(res["best_rate_mbps"]), res.get("noisy")),
                          "-" if med is None else _mb(med), "-" if mean is None else _mb(mean),
                          f"{res['avg_time_s']:.6f}", f"{res['min_time_s']:.6f}",
                          f"{res['max_time_s']:.6f}", _mb(res["per_thread_mbps"]))
        console.print(table)
        if any(res.get("noisy") for res in cfg["results"]):
            console.print(stats.LEGEND)
        link = cfg.get("pu_link")
        if link and link.get("rtt_ns"):
            before, after = (f"{x:,.0f} ns" if x else "not measured" for x in link["rtt_ns"])
            console.print(f"Threads 0 and 1 on PUs {link['pus'][0]} and {link['pus'][1]}: a "
                          f"cache line's round trip between them {before} before, {after} "
                          "after (where the host placed them)", markup=False)
        if valid:
            console.print("Solution Validates: avg error less than "
                          f"{cfg['validation']['epsilon']:g} on all arrays")
        else:
            bad = [a["array"] for a in cfg["validation"]["arrays"] if not a["passed"]]
            read = cfg["validation"].get("read")
            if read and not read["passed"]:
                bad.append("read sums")
            console.print(f"[red]Validation FAILED: {', '.join(bad)}[/red]")

    series = doc["summary"]["series"]
    threads = sorted({t for s in series for t in s["threads"]})
    if len(threads) > 1:
        table = Table(title="Saturation: total MB/s (per thread) against threads; * marks the "
                      f"fewest threads reaching {doc['summary']['saturation_share']:.0%} of the "
                      "best", title_justify="left")
        table.add_column("Kernel")
        table.add_column("Pin")
        table.add_column("Placement")
        for t in threads:
            table.add_column(f"{t}", justify="right")
        for s in series:
            cells = []
            by_t = dict(zip(s["threads"], zip(s["best_rate_mbps"], s["per_thread_mbps"])))
            for t in threads:
                if t not in by_t:
                    cells.append("-")
                    continue
                total, per = by_t[t]
                mark = "*" if t == s["saturation_threads"] else ""
                cells.append(f"{total:,.0f} ({per:,.0f}){mark}")
            table.add_row(s["kernel"], s["pin"], s["placement"], *cells)
        console.print(table)
    _render_placements(doc["summary"], console)
    verdict = doc["summary"]["validation_passed"]
    console.print("All configurations validate." if verdict
                  else "[red]Some configurations do not validate.[/red]")


def _render_placements(summary: dict, console: Console) -> None:
    """When the host moved the first two pinned threads' PUs during the
    run: each kernel's best per placement (``best_by_placement``)."""
    link = summary.get("pu_link")
    if not link or not link.get("moved") or not summary.get("best_by_placement"):
        return
    pus = link.get("pus") or [0, 1]
    kernels = [k for k in KERNELS if k in summary["best"]]
    table = Table(title=f"Best rate MB/s per placement of PUs {pus[0]} and {pus[1]} (the host "
                  "moved them during the run; one-thread rows count in every placement)",
                  title_justify="left")
    table.add_column("round trip (ns)", justify="right")
    for k in kernels:
        table.add_column(k.capitalize(), justify="right")
    for b in summary["best_by_placement"]:
        table.add_row(f"{b['rtt_ns']:,.0f}",
                      *(_mb(b["best"][k]["best_rate_mbps"]) + f" ({b['best'][k]['threads']})"
                        if k in b["best"] else "-" for k in kernels))
    console.print(table)
    console.print("(n): the threads of the best row; a configuration belongs to a placement "
                  "when the round trips before and after it fall in it", markup=False)


_PIN_STYLE = {"none": ":", "compact": "-", "scatter": "--"}


def plot(doc: dict, path) -> Path:
    """Draw bandwidth against threads (top) and bandwidth per thread (bottom),
    one line per kernel and pinning policy, one column per placement; save it
    as PNG at ``path`` and return the path."""
    series = doc["summary"]["series"]
    placements = list(dict.fromkeys(s["placement"] for s in series)) or ["first-touch"]
    fig, axes = tplot.figure(ncols=len(placements), nrows=2)
    colours = {k: f"C{i}" for i, k in enumerate(KERNELS)}
    for col, placement in enumerate(placements):
        top, bottom = axes[0][col], axes[1][col]
        for s in series:
            if s["placement"] != placement:
                continue
            style = dict(color=colours.get(s["kernel"], "k"),
                         linestyle=_PIN_STYLE.get(s["pin"], "-"), marker="o", markersize=3)
            label = f"{s['kernel']} / {s['pin']}"
            top.plot(s["threads"], [r / 1000 for r in s["best_rate_mbps"]], label=label, **style)
            bottom.plot(s["threads"], [r / 1000 for r in s["per_thread_mbps"]], **style)
        stores = doc["params"].get("stores", "")
        top.set_title(f"placement {placement}, stores {stores}")
        top.set_ylabel("best rate (GB/s)")
        bottom.set_ylabel("per thread (GB/s)")
        bottom.set_xlabel("threads")
        for ax in (top, bottom):
            ax.grid(True, alpha=0.3)
            ax.set_ylim(bottom=0)
            threads = sorted({t for s in series for t in s["threads"]})
            ax.set_xticks(threads)
        top.legend(fontsize=7, ncol=2)
    return tplot.save(fig, path)


def main(args, argv: list[str]) -> int:
    """``tiers probe mem``: measure, print, and write the document (--json)
    and the plot (--plot, or next to --json); return the exit status
    (0, or 2 when the results do not validate)."""
    from ..render import console as tiers_console
    console = tiers_console()
    from .. import noise
    noise_block = noise.begin(console, bool(args.quick))  # first: is the machine quiet?
    options = dict(threads=args.threads, pin=args.pin, placement=args.placement,
                   kernels=args.kernels, size=args.size, ntimes=args.ntimes,
                   stores=args.stores, quick=args.quick, argv=argv)
    failure: ValidationError | None = None
    with tool_progress("configurations") as progress:
        try:
            doc = measure(progress=progress, **options)
        except ValidationError as exc:
            failure, doc = exc, exc.document
    noise.attach(doc, noise_block)
    render(doc, console)
    tplot.write_outputs(doc, args.json, getattr(args, "plot", None), plot, console)
    if failure is not None:
        raise TiersError(str(failure), code=2)
    return 0
