"""``tiers topo``: the machine model.

The native tool ``tiers-topo`` reads the topology with hwloc (this machine,
an hwloc XML file or a synthetic description) and prints the tree, the PU
list and the processor graph of seed paper 002 section 2.2: for every pair
of PUs the depth ``d`` of their common ancestor in the hwloc tree (root = 0),
weighed ``10**d`` (higher = closer), and the layer that joins the pair (same
core, cache, NUMA node, package, or only the machine).  This module wraps
that output into a ``tiers.topo/1`` result document (see
docs/schemas/topo.md) and prints it.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import native, result, validate

#: Layers from closest to farthest, as tiers-topo names them.
LAYERS = ("pu", "core", "cache", "numa", "package", "machine")

#: Above this many PUs the matrix is left out of the terminal view unless asked for.
MATRIX_MAX_PUS = 32

_LAYER_STYLE = {"pu": "bold white", "core": "bold green", "cache": "cyan", "numa": "yellow",
                "package": "magenta", "machine": "red"}
_TYPE_STYLE = {"Machine": "bold", "Package": "bold magenta", "NUMANode": "yellow",
               "Core": "green", "PU": "white"}


def weight(depth: int) -> int:
    """Return the processor-graph weight of a pair joined at ``depth``: 10**depth."""
    return 10 ** depth


def layer_label(layer: str, cache_level: int = 0) -> str:
    """Return a layer's display name: ``"core"``, ``"L3 cache"``, ``"numa"``..."""
    return f"L{cache_level} cache" if layer == "cache" and cache_level else layer


def measure(source: str = "this", argv: list[str] | None = None,
            option: str = "--input") -> dict:
    """Load the topology named by ``source`` ("this", an hwloc XML file or
    "synthetic:DESC") and return the ``tiers.topo/1`` result document:
    ``samples`` holds the tree, the PU list and the depth, weight, layer and
    cache-level matrices; ``summary`` the counts, caches, memory and the
    per-layer pair counts.  Raise TiersError (one line, naming ``option``)
    on bad input, and before hwloc runs for a synthetic machine too large
    to build here."""
    validate.check_topology_source(source, option)
    raw = native.run_json("tiers-topo", ["--input", source], timeout=300)
    depth = raw["depth_matrix"]
    samples = {
        "tree": raw["tree"],
        "pu_os_index": raw["pu_os_index"],
        "depth_matrix": depth,
        "weight_matrix": [[weight(d) for d in row] for row in depth],
        "layer_matrix": raw["layer_matrix"],
        "cache_level_matrix": raw["cache_level_matrix"],
    }
    layers = [dict(entry, weight_min=weight(entry["depth_min"]),
                   weight_max=weight(entry["depth_max"])) for entry in raw["layers"]]
    summary = {key: raw[key] for key in ("summary", "source", "this_system", "packages",
                                         "numa_nodes", "cores", "pus", "levels", "memory_bytes",
                                         "llc_total_bytes", "caches", "layer_pairs")}
    summary["layers"] = layers
    return result.new_document("topo", params={"input": source}, samples=samples,
                               summary=summary, argv=argv, native=raw.get("native", {}))


def _bytes(n: int) -> str:
    """Return ``n`` bytes as "32 MiB", "1.5 GiB" (powers of 1024)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # not reached


def _label(obj: dict) -> Text:
    """Return one object as lstopo writes it: ``L3 L#0 (16 MiB)``, ``PU L#3 (P#3)``."""
    kind = obj["type"]
    text = Text(kind, style=_TYPE_STYLE.get(kind, "cyan" if "cache_level" in obj else ""))
    attrs = []
    if kind == "Machine":
        attrs.append(f"{_bytes(obj.get('total_memory_bytes', 0))} total")
    else:
        text.append(f" L#{obj['logical']}")
        if kind in ("PU", "NUMANode") and obj.get("os") is not None:
            attrs.append(f"P#{obj['os']}")
        if "cache_size_bytes" in obj:
            attrs.append(_bytes(obj["cache_size_bytes"]))
        if "memory_bytes" in obj:
            attrs.append(_bytes(obj["memory_bytes"]))
    if attrs:
        text.append(f" ({' '.join(attrs)})")
    return text


def tree_lines(tree: dict) -> list[Text]:
    """Return the tree as lstopo's text output: one object per line, two
    spaces per level, memory children first, and an object with a single
    child and no memory on the same line as that child (``Core L#0 + PU L#0``)."""
    lines: list[Text] = []

    def walk(obj: dict, indent: int) -> None:
        line = Text("  " * indent)
        line.append_text(_label(obj))
        while indent and not obj.get("memory") and len(obj.get("children", [])) == 1:
            obj = obj["children"][0]
            line.append(" + ")
            line.append_text(_label(obj))
        lines.append(line)
        for child in obj.get("memory", []) + obj.get("children", []):
            walk(child, indent + 1)

    walk(tree, 0)
    return lines


def layer_table(doc: dict) -> Table:
    """Return the per-layer view of the processor graph: for each layer the
    depth d of the common ancestor, the weight 10^d and the number of PU pairs."""
    table = Table(title="Processor graph (weight 10^d, higher = closer)", title_justify="left")
    table.add_column("layer")
    table.add_column("depth d", justify="right")
    table.add_column("weight 10^d", justify="right")
    table.add_column("PU pairs", justify="right")
    # Closest pairs first: by depth, since the nesting of NUMA nodes and packages varies.
    entries = sorted(doc["summary"]["layers"], key=lambda e: (-e["depth_max"], -e["depth_min"],
                                                              LAYERS.index(e["layer"])))
    for entry in entries:
        lo, hi = entry["depth_min"], entry["depth_max"]
        depth = str(lo) if lo == hi else f"{lo}-{hi}"
        w = f"{weight(lo):,}" if lo == hi else f"{weight(lo):,}-{weight(hi):,}"
        name = layer_label(entry["layer"], entry["cache_level"])
        table.add_row(Text(name, style=_LAYER_STYLE.get(entry["layer"], "")), depth, w,
                      f"{entry['pairs']:,}")
    return table


def matrix_lines(doc: dict) -> list[Text]:
    """Return the depth matrix as text: one row per PU (logical index), the
    depth d of each pair coloured by the layer that joins it, and a legend."""
    depth = doc["samples"]["depth_matrix"]
    layer = doc["samples"]["layer_matrix"]
    n = len(depth)
    width = max(2, len(str(n - 1)), *(len(str(d)) for row in depth for d in row))
    label = len(f"L#{n - 1}")
    lines = [Text("depth d of the common ancestor of PU pairs (logical indices; weight 10^d)",
                  style="bold")]
    head = Text(" " * (label + 1))
    for b in range(n):
        head.append(f"{b:>{width}} ", style="dim")
    lines.append(head)
    for a in range(n):
        row = Text(f"{'L#' + str(a):>{label}} ", style="dim")
        for b in range(n):
            row.append(f"{depth[a][b]:>{width}} ", style=_LAYER_STYLE.get(layer[a][b], ""))
        lines.append(row)
    present = sorted({name for row in layer for name in row}, key=LAYERS.index)
    legend = Text("colours: ")
    for name in present:
        legend.append(name, style=_LAYER_STYLE.get(name, ""))
        legend.append(" ")
    lines.append(legend)
    return lines


def render(doc: dict, console: Console, matrix: bool | None = None) -> None:
    """Print a ``tiers.topo/1`` document on ``console``: the summary line,
    the tree, the per-layer processor graph and the depth matrix.  ``matrix``
    None prints the matrix up to MATRIX_MAX_PUS PUs, True always, False never.
    Returns nothing."""
    summary = doc["summary"]
    console.print(Text(summary["summary"], style="bold"))
    console.print(Text(f"source: {summary['source']}", style="dim"), no_wrap=True, crop=False)
    for line in tree_lines(doc["samples"]["tree"]):
        console.print(line, no_wrap=True, overflow="ignore", crop=False)
    console.print()
    console.print(layer_table(doc))
    n = summary["pus"]
    if matrix is None:
        matrix = n <= MATRIX_MAX_PUS
        if not matrix:
            console.print(f"({n} PUs: the {n}x{n} matrix is in the JSON document; "
                          "--matrix prints it)", style="dim")
    if matrix:
        console.print()
        for line in matrix_lines(doc):
            console.print(line, no_wrap=True, overflow="ignore", crop=False)


def main(args, argv: list[str]) -> int:
    """Run ``tiers topo``: measure, print, and write the document when
    ``--json`` is given.  Returns the exit status (0)."""
    doc = measure(args.input, argv=argv)
    matrix = False if args.no_matrix else (True if getattr(args, "matrix", False) else None)
    from .render import console as tiers_console
    console = tiers_console()
    render(doc, console, matrix=matrix)
    if args.json:
        path = result.write(doc, args.json)
        console.print(f"wrote {path}", style="dim")
    return 0
