"""``tiers tune``: from a trace to a measured gain, in one command.

    tiers tune [--vcluster | --hostfile F] -n N [--rounds R] [--json PATH|-] -- PROGRAM ARGS

1. trace a run of PROGRAM on N ranks (:mod:`tiers.trace`);
2. map its communication graph onto the machine the runs use -- the
   nodes of the virtual cluster, the hosts of the hostfile, or this
   machine (:mod:`tiers.map`);
3. run PROGRAM R times under the launcher's default placement and R times
   under the chosen one, interleaved (default then chosen, chosen then
   default, ...), so that a drift of the machine falls on both alike;
4. print the measured times (median, 95 % interval of the median, min:
   :mod:`tiers.stats`) next to the model's predicted time per exchange,
   and the two ratios default / chosen.

Every rank of every measured run gets ``TIERS_TUNE_RUN=PLACEMENT:ROUND``
in its environment (and ``trace:0`` the traced run, except on the virtual
cluster, where :func:`tiers.trace.run` builds that launch), so a program or
a wrapper can tell the runs apart.  The measured time of a run is the time the
program reports (``time_s`` of the JSON document it prints, as the tiers
applications do) when every run reports one, else the launcher's wall
time.  The trace folder, rankfile and hostfile live in a temporary folder
removed at the end (``--keep`` keeps it).  The result document is
``tiers.tune/1``.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from pathlib import Path

from . import launch, result, stats
from .errors import TiersError
from .render import plural

ENV_RUN = "TIERS_TUNE_RUN"
MIN_ROUNDS = 3
DEFAULT_ROUNDS = 6
DEFAULT_BUDGET = "16M"


# --------------------------------------------------------------------------
# Checks made before anything runs


def check_program(cmd: list[str]) -> list[str]:
    """Return the program's argv from the words after ``--``; raise
    TiersError (exit 2) when there is none, when it is a launcher line
    (tiers tune writes the launch lines itself) or when the program does
    not exist."""
    cmd = list(cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise TiersError("no program given: tiers tune -n N -- PROGRAM [ARGS]")
    if launch.find_launcher_word(cmd[:1]) is not None:
        raise TiersError(f"give the program alone after --, not a launcher line ({cmd[0]} ...):"
                         " tiers tune writes the launch lines of both placements itself")
    first = cmd[0]
    if ("/" in first and not (os.path.isfile(first) and os.access(first, os.X_OK))) or \
            ("/" not in first and shutil.which(first) is None):
        raise TiersError(f"{first}: no such program")
    return cmd


def _where(vcluster: bool, hostfile: str | None, ranks: int | None) -> tuple[dict | None, int]:
    """Return ``(vcluster state or None, ranks)``; raise TiersError when
    the options do not go together or no virtual cluster is up."""
    if vcluster and hostfile:
        raise TiersError("give either --vcluster or --hostfile, not both")
    state = None
    if vcluster:
        from . import vcluster as vcl
        state = vcl.require_up()
        if ranks is None:
            ranks = vcl.slots_total(state)
    if ranks is None:
        raise TiersError("give the number of ranks: tiers tune -n N -- PROGRAM")
    if ranks < 2:
        raise TiersError(f"-n {ranks}: placement needs at least 2 ranks")
    return state, ranks


# --------------------------------------------------------------------------
# The launch lines


#: latency of one vcluster link in microseconds (veth + bridge + TCP, docs/vcluster.md)
VCLUSTER_LATENCY_US = 25


def _vcluster_layer_cost(state: dict | None) -> str | None:
    """The ``--layer-cost`` of the virtual cluster's shaped links for the
    model (``node=25/MBPS``), or None (the model's defaults) elsewhere and
    on unshaped links."""
    bits = ((state or {}).get("link") or {}).get("bits_per_s")
    if not bits:
        return None
    return f"node={VCLUSTER_LATENCY_US}/{bits / 8e6:g}"


def _label_env(extra: dict, run: str) -> dict:
    env = dict(extra)
    env[ENV_RUN] = run
    return env


def default_command(program: list[str], n: int, *, state: dict | None, hostfile: str | None,
                    launcher: str | None, oversubscribe: bool, env: dict) -> list[str]:
    """Return the launch line of ``program`` on ``n`` ranks with the
    launcher's own placement (no mapping, binding or ordering options
    beyond what a plain launch on this machine, hostfile or virtual
    cluster needs), setting ``env`` in every rank."""
    if state is not None:
        from . import vcluster as vcl
        return vcl.command(program, n, env=env)
    lau = launch.detect(launcher)
    opts = {}
    if hostfile:
        opts["hostfile"] = hostfile
    if oversubscribe:
        opts["oversubscribe"] = True
    return launch.build_command(lau, program, n, env=env, **opts)


def tuned_command(program: list[str], chosen, machine, workdir: Path, *, state: dict | None,
                  launcher: str | None, env: dict) -> tuple[list[str], dict]:
    """Return ``(launch line, launcher environment)`` of ``program`` under
    placement ``chosen`` (the files it needs go into ``workdir``), setting
    ``env`` in every rank.

    On the virtual cluster the ranks go to their nodes through Open MPI's
    sequential mapper (``--map-by seq``, one host per rank) and stay
    unbound, as under the default launch there: the cluster's nodes share
    this machine's cores, so binding each node's slot 0 to core 0 (a
    rankfile) would put several ranks on one core and measure that instead
    of the placement across nodes.  Elsewhere the placement is applied as
    ``tiers map --launch`` applies it (:mod:`tiers.map.apply`)."""
    from .map import apply, writers
    if state is not None:
        from . import vcluster as vcl
        hosts = writers.write_hosts_per_rank(str(workdir / "placement.seq-hosts"), chosen,
                                             machine)
        return vcl.command(program, int(chosen.node.size), env=env, hostfile=str(hosts),
                           map_by="seq"), {}
    rankfile = workdir / "placement.rankfile"
    if launch.detect(launcher).kind == "openmpi":
        writers.write_rankfile(str(rankfile), chosen, machine)
    cmd, lenv = apply.command(program, chosen, machine, str(workdir), launcher=launcher,
                              rankfile=str(rankfile) if rankfile.exists() else None)
    return launch.inject_env(cmd, env), lenv


# --------------------------------------------------------------------------
# Running


def _program_time(stdout: str) -> float | None:
    """The ``time_s`` of the JSON document a program printed, or None."""
    try:
        doc = launch.parse_json_output(stdout)
    except TiersError:
        return None
    t = doc.get("time_s") if isinstance(doc, dict) else None
    if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0:
        return float(t)
    return None


def _run_once(cmd: list[str], lenv: dict, *, what: str, label: str, n: int,
              timeout: float | None, state: dict | None = None) -> dict:
    try:
        res = launch.run_command(cmd, env=lenv or None, timeout=timeout, check=True,
                                 label=label, ranks=n)
    except launch.LaunchError as exc:
        if state is not None:
            from . import vcluster as vcl
            node = vcl.node_failure(exc.stderr + "\n" + exc.stdout, state)
            if node is not None:
                raise TiersError(f"{what}: {vcl.node_failure_message(node, label, n)}",
                                 code=1) from None
        raise TiersError(f"{what}: {exc}", code=1) from None
    return {"wall_s": res.elapsed_s, "program_s": _program_time(res.stdout)}


def _same_places(a: list[dict], b: list[dict]) -> bool:
    """True when two placement tables put every rank on the same host and PU."""
    return [(e["host"], e["pu"]) for e in a] == [(e["host"], e["pu"]) for e in b]


def tune(program: list[str], ranks: int | None = None, *, vcluster: bool = False,
         hostfile: str | None = None, rounds: int = DEFAULT_ROUNDS,
         launcher: str | None = None, timeout: float | None = None, seed: int = 1,
         budget: str = DEFAULT_BUDGET, keep: bool = False, argv: list[str] | None = None,
         progress=None) -> dict:
    """Trace, map and measure ``program`` (its argv, no launcher) on
    ``ranks`` ranks; return the ``tiers.tune/1`` document.

    ``vcluster`` runs on the virtual cluster of ``tiers vcluster up``,
    ``hostfile`` on its hosts, else on this machine.  ``rounds`` (>= 3)
    interleaved rounds each run the default and the chosen placement once.
    ``progress(line)``, when given, is told what starts.  Raise TiersError
    (one line) on bad input -- before anything runs -- or when a run fails.
    The temporary folder (trace, rankfile) is removed unless ``keep``;
    ``summary["workdir"]`` names it when kept."""
    from . import topo, trace
    from . import map as map_cmd
    from .map import writers

    program = check_program(program)
    if not isinstance(rounds, int) or rounds < MIN_ROUNDS:
        raise TiersError(f"--rounds must be at least {MIN_ROUNDS} (got {rounds})")
    if hostfile is not None and not os.path.isfile(hostfile):
        raise TiersError(f"--hostfile {hostfile}: no such file")
    state, n = _where(vcluster, hostfile, ranks)
    if state is None:
        launch.detect(launcher)            # no launcher: one line before anything runs
    elif launcher not in (None, "openmpi"):
        raise TiersError("the virtual cluster runs Open MPI's mpirun: drop --launcher")
    say = progress or (lambda line: None)
    label = os.path.basename(program[0])
    machine_hostfile = state["hostfile"] if state is not None else hostfile
    topo_doc = topo.measure("this", option="--machine")
    from .map import machine as machine_mod
    slots = sum(c for c in machine_mod.build(topo_doc, hostfile=machine_hostfile).capacity)
    over = n > slots
    work = Path(tempfile.mkdtemp(prefix="tiers-tune-"))
    try:
        # 1. trace
        say(f"tracing {label} on {plural(n, 'rank')}")
        folder = work / "trace"
        start = time.monotonic()
        env = _label_env({}, "trace:0")
        try:
            if state is not None:
                rc, tdoc, _ = trace.run(program, out=str(folder), budget=budget,
                                        vcluster=True, ranks=n, timeout=timeout,
                                        stream=False, argv=argv)
            else:
                line = default_command(program, n, state=None, hostfile=hostfile,
                                       launcher=launcher, oversubscribe=over, env=env)
                rc, tdoc, _ = trace.run(line, out=str(folder), budget=budget,
                                        timeout=timeout, stream=False, argv=argv)
        except TiersError as exc:
            raise TiersError(f"the traced run failed: {exc}", code=exc.code or 1) from None
        if rc != 0:
            raise TiersError(f"the traced run of {label} exited with code {rc}", code=1)
        trace_s = time.monotonic() - start

        # 2. map, on the machine the runs use
        g = map_cmd.graph_mod.read(str(folder))
        if g.n != n:
            raise TiersError(f"the trace holds {g.n} ranks, not {n}", code=1)
        out = map_cmd.plan(g, topo_doc, hostfile=machine_hostfile, seed=seed,
                           oversubscribe=over, allow_disconnected=True,
                           layer_costs=_vcluster_layer_cost(state))
        mach, chosen = out["machine"], out["chosen"]
        mets = {m["placement"]: m for m in out["metrics"]}
        block = next(p for p in out["placements"] if p.name == "block")
        tab_default, tab_tuned = writers.table(block, mach), writers.table(chosen, mach)
        same = _same_places(tab_default, tab_tuned)

        # 3. interleaved runs.  More ranks than cores: every rank yields the
        # core while it waits, under both placements (Open MPI does so on
        # its own only where it sees the oversubscription: not under a
        # rankfile, which binds two waiting ranks to one core)
        yield_env = {}
        if over and state is None and launch.detect(launcher).kind == "openmpi":
            yield_env = {"OMPI_MCA_mpi_yield_when_idle": "1"}
        runs = []
        for k in range(1, rounds + 1):
            order = ("default", "tuned") if k % 2 else ("tuned", "default")
            for which in order:
                env = _label_env({}, f"{which}:{k}")
                if which == "default":
                    cmd = default_command(program, n, state=state, hostfile=hostfile,
                                          launcher=launcher, oversubscribe=over, env=env)
                    lenv = {}
                else:
                    cmd, lenv = tuned_command(program, chosen, mach, work, state=state,
                                              launcher=launcher, env=env)
                lenv = {**yield_env, **lenv}
                say(f"round {k}/{rounds}: {which} placement")
                rec = _run_once(cmd, lenv, what=f"the {which} run of round {k}", label=label,
                                n=n, timeout=timeout, state=state)
                rec.update(placement=which, round=k, command=cmd)
                runs.append(rec)
    except BaseException:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        raise
    if not keep:
        shutil.rmtree(work, ignore_errors=True)

    # 4. compare
    source = "program" if all(r["program_s"] is not None for r in runs) else "wall"
    key = "program_s" if source == "program" else "wall_s"
    for r in runs:
        r["time_s"] = r[key]
    side = {}
    for which, pname in (("default", "block"), ("tuned", chosen.name)):
        times = [r["time_s"] for r in runs if r["placement"] == which]
        side[which] = {"placement": pname, "runs": len(times), "times_s": times,
                       "stats": stats.summarize(times),
                       "predicted_time_s": mets[pname]["predicted_time_s"],
                       "bytes_inter_node": mets[pname]["bytes_inter_node"],
                       "max_node_sent_bytes": mets[pname].get("max_node_sent_bytes")}
    dmed, tmed = side["default"]["stats"]["median"], side["tuned"]["stats"]["median"]
    measured = dmed / tmed if dmed and tmed else None
    dp, tp = side["default"]["predicted_time_s"], side["tuned"]["predicted_time_s"]
    predicted = dp / tp if dp and tp else None
    noisy = [w for w in ("default", "tuned") if side[w]["stats"]["noisy"]]
    warnings = []
    if same:
        warnings.append(f"the chosen placement ({chosen.name}) puts every rank where the "
                        "launcher's default does; both were measured all the same")
    if out.get("chosen_note"):
        warnings.append(out["chosen_note"])
    summary = {
        "program": program, "ranks": n, "rounds": rounds,
        "where": "vcluster" if state is not None else ("hostfile" if hostfile else "this machine"),
        "machine": mach.describe(), "time_source": source,
        "default": side["default"], "tuned": side["tuned"],
        "same_as_default": same,
        "speedup_measured": measured, "speedup_predicted": predicted,
        "trace": {"seconds": trace_s, "p2p_bytes": tdoc["summary"].get("p2p_bytes"),
                  "volume": getattr(g, "volume_note", "")},
        "map": {"chosen": chosen.name, "note": out.get("chosen_note", ""),
                "layer_cost": _vcluster_layer_cost(state),
                "seconds": out["seconds"], "comparison": out["metrics"]},
        "workdir": str(work) if keep else None,
    }
    extra = {}
    if noisy:
        why = "; ".join(f"{w}: {side[w]['stats']['why']}" for w in noisy)
        extra = {"reliable": False, "why": why}
        warnings.append(f"noisy: {why}")
    if warnings:
        extra["warnings"] = warnings
    params = {"program": program, "ranks": n, "rounds": rounds, "vcluster": vcluster,
              "hostfile": hostfile, "launcher": launcher, "timeout": timeout, "seed": seed,
              "budget": budget, "keep": keep}
    samples = {"runs": runs, "placements": {"default": tab_default, "tuned": tab_tuned}}
    return result.new_document("tune", params=params, samples=samples, summary=summary,
                               argv=argv, **extra)


# --------------------------------------------------------------------------
# Printing


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1:
        return f"{x:.3f} s"
    return f"{x * 1e3:.3f} ms"


def render(doc: dict, console) -> None:
    """Print a ``tiers.tune/1`` document: the measured times of both
    placements next to the model's prediction, and the two ratios."""
    from rich.table import Table

    s = doc["summary"]
    src = "time the program reports" if s["time_source"] == "program" else \
        "wall time of each launch"
    console.print(f"{os.path.basename(s['program'][0])} on {plural(s['ranks'], 'rank')}, "
                  f"{s['where']} ({plural(s['machine']['nodes'], 'node')}); traced in "
                  f"{s['trace']['seconds']:.1f} s, mapped in {s['map']['seconds']:.3f} s; "
                  f"chosen placement: {s['map']['chosen']}")
    if s["trace"].get("volume"):
        console.print(f"volumes: {s['trace']['volume']}")
    t = Table(title=f"{s['rounds']} interleaved rounds; measured: {src}", title_justify="left")
    for col in ("run", "placement", "runs", "median", "95% CI of median", "min",
                "predicted / exchange", "inter-node"):
        t.add_column(col, justify="left" if col in ("run", "placement") else "right")
    for which in ("default", "tuned"):
        side = s[which]
        st = side["stats"]
        ci = "-" if st["ci_low"] is None else f"{_ms(st['ci_low'])} - {_ms(st['ci_high'])}"
        t.add_row(which, side["placement"], str(side["runs"]),
                  stats.mark(_ms(st["median"]), st["noisy"]), ci, _ms(st["min"]),
                  _ms(side["predicted_time_s"]),
                  f"{side['bytes_inter_node'] / 1024:.1f} KiB")
    console.print(t)
    m, p = s.get("speedup_measured"), s.get("speedup_predicted")
    console.print("default / tuned: measured "
                  + ("-" if m is None else f"{m:.2f}x") + " (medians), predicted "
                  + ("-" if p is None else f"{p:.2f}x") + " (the model, per exchange)")
    for w in doc.get("warnings", []):
        console.print(f"note: {w}")
    if s.get("workdir"):
        console.print(f"kept {s['workdir']}")


def main(args, argv: list[str]) -> int:
    """Run ``tiers tune`` from parsed arguments; return the exit status."""
    import sys

    from .render import console as tiers_console

    console = tiers_console()

    def progress(line: str) -> None:
        print(f"tiers tune: {line}", file=sys.stderr, flush=True)

    doc = tune(list(args.cmd or []), args.ranks, vcluster=args.vcluster,
               hostfile=args.hostfile, rounds=args.rounds, launcher=args.launcher,
               timeout=args.timeout, seed=args.seed, keep=args.keep, argv=argv,
               progress=progress)
    render(doc, console)
    if args.json:
        path = result.write(doc, args.json)
        if str(args.json) != "-":
            console.print(f"wrote {path}", style="dim")
    return 0
