"""``tiers map``: place processes so that heavy traffic stays on fast
layers (the AFC mapping paper's §2).

1. machine: the hwloc tree of a node (this machine, an XML file or a
   synthetic string) times ``--nodes`` (or a hostfile's hosts);
2. program: the communication graph (:mod:`.graph`);
3. group ranks into nodes with Scotch, 4. place each group on its node's
   cores with Scotch's tleaf mapping (:mod:`.core`, libtiers);
then compare with the launcher's defaults (:mod:`.placement`) and write the
placement for Open MPI, MPICH, Slurm or as JSON (:mod:`.writers`).  The
result document is ``tiers.map/1`` (docs/schemas/map.md).
"""

from __future__ import annotations

import math
import time

from .. import result, topo
from ..errors import TiersError
from ..render import plural
from . import apply, core, graph as graph_mod, links as links_mod, machine as machine_mod, \
    placement, refine as refine_mod, writers

__all__ = ["plan", "main", "core", "graph_mod", "links_mod", "machine_mod", "placement",
           "writers"]


def check_pattern(comm: str | None, stencil: str | None) -> None:
    """Raise TiersError unless exactly one of ``comm`` and ``stencil`` is
    given and ``stencil`` (if given) is well formed."""
    if bool(comm) == bool(stencil):
        raise TiersError("give the communication pattern with either --comm FILE or "
                         "--stencil 3d:NX,NY,NZ:gx,gy,gz")
    if stencil:
        graph_mod.parse_stencil(stencil)


def load_graph(comm: str | None, stencil: str | None, numbering: str = "x-fastest"):
    """Return the communication graph of ``--comm FILE`` or ``--stencil SPEC``
    (its subdomains numbered as ``numbering`` says)."""
    check_pattern(comm, stencil)
    if stencil:
        parts, points = graph_mod.parse_stencil(stencil)
        return graph_mod.stencil(parts, points, numbering=numbering)
    return graph_mod.read(comm)


def plan(g, topo_doc: dict, *, nodes: int | None = None, hostfile: str | None = None,
         seed: int = 1, oversubscribe: bool = False, allow_disconnected: bool = False,
         layer_costs: str | None = None, links=None, forced: str | None = None) -> dict:
    """Map graph ``g`` on the machine of ``topo_doc`` (with ``links``, a
    :class:`.links.Links` or the path of a probe-net document: measured
    costs between nodes) and return plain
    data: ``machine`` (:class:`~.machine.Machine`), ``placements`` (the
    mapped one, ``afc``, first), ``metrics`` (one dict per placement),
    ``chosen`` (the placement to write: the model's best, or ``forced``),
    ``chosen_note`` (one line when the choice is not ``afc`` or the forced
    one is slower than the best, else ""), ``components``, ``seconds``
    (time spent mapping) and ``cpu_seconds`` (its CPU time, all threads).
    Raise TiersError on bad input."""
    components, comp = core.check(g)
    if components > 1 and not allow_disconnected:
        import numpy as np
        other = int(np.flatnonzero(comp != comp[0])[0])
        raise TiersError(f"the communication graph is disconnected ({components} components; "
                         f"ranks 0 and {other} are not linked by any traffic): check the input, "
                         "or pass --allow-disconnected")
    if isinstance(links, str):
        links = links_mod.read(links)
    mach = machine_mod.build(topo_doc, nodes=nodes, hostfile=hostfile, ranks=g.n,
                             oversubscribe=oversubscribe,
                             layer_costs=machine_mod.parse_layer_costs(layer_costs), links=links)
    start, cpu_start = time.perf_counter(), time.process_time()
    # a grid read from a file (any numbering) gets its coordinates back, so
    # that the geometric candidate applies to it too
    recovered = g.coords is None and graph_mod.recover_grid(g)
    if placement.search_applies(g, mach, forced):
        # the whole search in one native call: Scotch's mapping, every
        # candidate measured, the best refined and chosen; the table's
        # full metrics (and the random reference) are reporting, after it
        places, chosen, _ = placement.search(g, mach, seed, forced)
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu_start
        at = next(i for i, p in enumerate(places) if p.name == "map-by-node") + 1
        places.insert(at, placement.random(g.n, mach, seed))
        for p in places:
            p.check(mach)
        best = places.index(chosen)
    else:
        places = placement.strategies(g, mach, seed, forced)
        best = None
    skipped = not any(p.name == "afc" for p in places)
    if recovered:
        for p in places:
            if p.name == "geometric" and not p.note.startswith("the graph is"):
                p.note = ("the graph is a " + "x".join(map(str, g.grid[0])) +
                          " grid in another numbering; " + p.note)
    mets = [placement.metrics(g, mach, p) for p in places]
    if best is None:
        # the refinement pass, on the model's best and on the Scotch mapping
        # (which often cuts fewer bytes than the best); a result is kept only
        # when its predicted time is not higher than its start's and it does
        # not rank worse; of two, the better one
        best, _ = placement.choose(mets)
        starts = [best] + [i for i, p in enumerate(places) if p.name == "afc" and i != best]
        kept = None
        for i in starts:
            refined = refine_mod.swaps(g, mach, places[i])
            if refined is None:
                continue
            refined.check(mach)
            m = placement.metrics(g, mach, refined)
            b = mets[i]
            if m["predicted_time_s"] <= b["predicted_time_s"] * (1 + 1e-12) and \
                    not placement.better(b, m) and (kept is None or placement.better(m, kept[1])):
                kept = (refined, m)
        if kept is not None:
            places.append(kept[0])
            mets.append(kept[1])
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu_start
        best = None
    index, note = placement.choose(mets, forced, best=best)
    if skipped:
        why = (f"above {placement.GEOMETRIC_ONLY_RANKS:,} ranks a grid that tiles into node "
               "boxes is not mapped with Scotch (--placement afc maps with it)")
        note = f"{note}; {why}" if note else why
    return {"machine": mach, "placements": places, "metrics": mets,
            "chosen": places[index], "chosen_note": note,
            "components": components, "seconds": seconds, "cpu_seconds": cpu_seconds}


def document(g, plan_out: dict, params: dict, argv: list[str] | None) -> dict:
    """Return the ``tiers.map/1`` result document of a plan."""
    mach = plan_out["machine"]
    best = plan_out["chosen"]
    mets = plan_out["metrics"]
    afc = mets[0]   # afc, or the launcher's default when Scotch was left out
    ratios = {}
    for m in mets[1:]:
        ratios[m["placement"]] = {
            key: (m[key] / afc[key] if afc[key] else None)
            for key in ("bytes_inter_node", "hop_bytes", "max_node_sent_bytes",
                        "max_node_received_bytes", "max_node_out_bytes",
                        "predicted_rank_s", "predicted_link_s", "predicted_time_s")}
    samples = {
        "ranks": writers.table(best, mach),
        "permutation": placement.permutation(best).tolist(),
        "placements": {p.name: {"node": p.node.tolist(), "slot": p.slot.tolist(),
                                "note": p.note} for p in plan_out["placements"]
                       if p is not best},
    }
    summary = {"ranks": g.n, "edges": g.edges, "bytes_total": g.total_bytes(),
               "components": plan_out["components"], "machine": mach.describe(),
               "map_seconds": plan_out["seconds"], "map_cpu_seconds": plan_out["cpu_seconds"],
               "comparison": mets,
               "ratio_to_afc": ratios, "ratio_reference": afc["placement"],
               "chosen": {"placement": best.name, "note": plan_out.get("chosen_note", ""),
                          "how": best.note},
               "volume": getattr(g, "volume_note", "") or "bytes of one exchange as given"}
    return result.new_document("map", params=params, samples=samples, summary=summary,
                               argv=argv)


def _fmt_bytes(x: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x}"


def render(doc: dict, console) -> None:
    """Print the comparison table of a ``tiers.map/1`` document."""
    from rich.table import Table

    s = doc["summary"]
    console.print(f"{s['ranks']} ranks, {s['edges']} edges, {_fmt_bytes(s['bytes_total'])} per "
                  f"exchange on {plural(s['machine']['nodes'], 'node')} x {s['machine']['slots_per_node']}"
                  f" slots; mapped in {s['map_seconds']:.3f} s")
    if s.get("volume") and s["volume"] != "bytes of one exchange as given":
        console.print(f"volumes: {s['volume']}")
    ref = s.get("ratio_reference", "afc")
    t = Table(title=f"placements (lower is better; ratio = placement / {ref})",
              title_justify="left")
    for col in ("placement", "inter-node", "hop-bytes", "max node sent", "max node recv",
                "pred. time", "critical", "time ratio"):
        t.add_column(col, justify="left" if col == "placement" else "right")
    chosen = (s.get("chosen") or {}).get("placement", "afc")
    for m in s["comparison"]:
        r = s["ratio_to_afc"].get(m["placement"], {}).get("predicted_time_s")
        sent = m.get("max_node_sent_bytes", m.get("max_node_out_bytes", 0.0))
        recv = m.get("max_node_received_bytes", sent)
        t.add_row(m["placement"],
                  _fmt_bytes(m["bytes_inter_node"]), f"{m['hop_bytes']:.3g}",
                  _fmt_bytes(sent), _fmt_bytes(recv), f"{m['predicted_time_s'] * 1e3:.3f} ms",
                  m.get("critical", ""),
                  "1.00" if r is None and m["placement"] == ref else
                  (f"{r:.2f}" if r is not None else "-"))
    console.print(t)
    note = (s.get("chosen") or {}).get("note")
    if note:
        console.print(note)
    elif s.get("chosen"):
        console.print(f"placement written: {chosen} (the model's best)")
    how = (s.get("chosen") or {}).get("how")
    if chosen in ("refined", "grouped") and how:
        console.print(f"{chosen}: {how}", markup=False)


def main(args, argv: list[str]) -> int:
    """Run ``tiers map``: read the graph and the machine, map, print the
    comparison and write the requested files.  Returns the exit status."""
    from rich.console import Console

    numbering = getattr(args, "numbering", None) or "x-fastest"
    check_pattern(args.comm, args.stencil)  # before the machine is read
    if args.nodes is not None and args.hostfile:
        raise TiersError("give either --nodes or --hostfile, not both")
    command = list(getattr(args, "cmd", None) or [])
    if command and command[0] == "--":
        command = command[1:]
    if args.launch and not command:
        raise TiersError("--launch needs a command: tiers map ... --launch -- ./app args")
    if command and not args.launch:
        raise TiersError(f"a command ({command[0]}) goes with --launch: tiers map ... "
                         "--launch -- CMD")
    forced = getattr(args, "placement", None)
    if forced is not None and forced not in placement.NAMES:
        raise TiersError(f"--placement: unknown placement {forced!r} (choose among "
                         f"{', '.join(placement.NAMES)})")
    hostfile = args.hostfile
    vcluster = getattr(args, "vcluster", False)
    if vcluster:
        if args.nodes is not None or args.hostfile:
            raise TiersError("--vcluster maps onto the virtual cluster's nodes: "
                             "do not give --nodes or --hostfile")
        if not args.launch:
            raise TiersError("--vcluster goes with --launch -- PROGRAM")
        from .. import vcluster as vcl
        hostfile = vcl.require_up()["hostfile"]
    if getattr(args, "launcher", None) and not args.launch:
        raise TiersError("--launcher goes with --launch -- PROGRAM")
    if getattr(args, "dry_run", False) and not args.launch:
        raise TiersError("--dry-run goes with --launch -- PROGRAM")
    if args.launch:
        apply.check_launchable(args.machine, nodes=args.nodes, hostfile=args.hostfile,
                               vcluster=vcluster)
    topo_doc = topo.measure(args.machine, option="--machine")
    if args.stencil and not (args.links and args.nodes is None and not hostfile):
        # the capacity first: a stencil far bigger than the machine is refused
        # before its graph is built
        parts, _ = graph_mod.parse_stencil(args.stencil)
        machine_mod.check_fits(math.prod(parts), topo_doc, nodes=args.nodes, hostfile=hostfile,
                               oversubscribe=args.oversubscribe)
    g = load_graph(args.comm, args.stencil, numbering)
    out = plan(g, topo_doc, nodes=args.nodes, hostfile=hostfile, seed=args.seed,
               oversubscribe=args.oversubscribe, allow_disconnected=args.allow_disconnected,
               layer_costs=args.layer_cost, links=args.links,
               forced=getattr(args, "placement", None))
    params = {"comm": args.comm, "stencil": args.stencil, "vcluster": vcluster, "numbering": numbering,
              "machine": args.machine,
              "nodes": args.nodes, "hostfile": args.hostfile, "seed": args.seed,
              "oversubscribe": args.oversubscribe, "layer_cost": args.layer_cost,
              "links": args.links, "placement": getattr(args, "placement", None)}
    doc = document(g, out, params, argv)
    best, mach = out["chosen"], out["machine"]
    paths = {}
    if args.rankfile:
        paths["rankfile"] = str(writers.write_rankfile(args.rankfile, best, mach))
    if args.hydra:
        paths["hydra"] = str(writers.write_hosts_per_rank(args.hydra, best, mach))
    if args.slurm:
        paths["slurm"] = str(writers.write_hosts_per_rank(args.slurm, best, mach))
    if args.table:
        paths["table"] = str(writers.write_table(args.table, best, mach))
    if args.permutation:
        paths["permutation"] = str(writers.write_permutation(
            args.permutation, placement.permutation(best)))
    doc["summary"]["files"] = paths
    doc["summary"]["commands"] = apply.vcluster_commands(paths, g.n) if vcluster else \
        writers.commands(paths, best, mach, g.n)
    from ..render import console as tiers_console
    console = tiers_console()
    render(doc, console)
    for name, cmd in doc["summary"]["commands"].items():
        # plain text: a line of one PU per rank is long, and rich's
        # highlighting of every number in it took seconds at 65,536 ranks
        console.print(f"{name}: {cmd}", no_wrap=True, crop=False, soft_wrap=True,
                      highlight=False, markup=False)
    if args.json:
        path = result.write(doc, args.json)
        console.print(f"wrote {path}", style="dim")
    if args.launch:
        return _launch(command, paths, best, mach, g.n,
                       launcher=getattr(args, "launcher", None), vcluster=vcluster,
                       dry_run=getattr(args, "dry_run", False))
    return 0


def _launch(command: list[str], paths: dict, best, mach, n: int, *,
            launcher: str | None = None, vcluster: bool = False,
            dry_run: bool = False) -> int:
    """Run ``command`` with the placement applied and return its exit
    status.  ``command`` is a launcher line (``mpirun -n N ./app``: the
    placement's options are added to it) or the program alone (tiers builds
    the launch with ``launcher``, or on the virtual cluster).  With
    ``dry_run`` print the line instead (:func:`.apply.dry_run`)."""
    import tempfile

    from .. import launch

    cmd = list(command)
    has_launcher = launch.find_launcher_word(cmd) is not None
    if vcluster and has_launcher:
        raise TiersError("with --vcluster give the program alone after --launch --: tiers "
                         "builds the mpirun line for the virtual cluster")
    if launcher and has_launcher:
        raise TiersError("--launcher goes with a program alone; the launch line names "
                         f"its launcher already ({cmd[launch.find_launcher_word(cmd)]})")
    if dry_run:
        print(apply.dry_run(cmd, best, mach, launcher=launcher, vcluster=vcluster,
                            rankfile=paths.get("rankfile"), has_launcher=has_launcher))
        return 0
    with tempfile.TemporaryDirectory(prefix="tiers-map-") as work:
        if has_launcher:
            full, env = apply.insert(cmd, best, mach, work, rankfile=paths.get("rankfile"))
        else:
            full, env = apply.command(cmd, best, mach, work, launcher=launcher,
                                      vcluster=vcluster, rankfile=paths.get("rankfile"))
        res = launch.run_command(full, stream=True, check=False, env=env, ranks=n,
                                 label=launch.guess_program(cmd))
    return res.returncode
