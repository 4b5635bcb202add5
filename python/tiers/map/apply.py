"""Running a program with a placement applied (``tiers map --launch``).

The placement reaches the launcher in its own terms, through the launching
module (:mod:`tiers.launch`):

- Open MPI: a rankfile (``-rf`` in 4.x, ``--map-by rankfile:file=`` in
  5.x) with the hosts in a hostfile, or on the virtual cluster of
  ``tiers vcluster up`` (its hostfile, agent and MCA settings);
- MPICH Hydra: a machine file with one host per rank, in rank order, and
  ``-bind-to user:`` with the PU of each local rank;
- Slurm: ``SLURM_HOSTFILE`` with ``--distribution=arbitrary`` and
  ``--cpu-bind=map_cpu:`` with the PU of each local task.

Hydra's and Slurm's lists are indexed by a rank's local number on its host
and are the same on every host.  When the placement gives two hosts
different local orders, one list cannot express it; the launcher is then
told not to bind and every rank starts through ``tiers-bind``, which binds
it to its own PU (read from a per-rank list) before running the program.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Sequence

from .. import launch, native
from ..errors import TiersError
from . import writers
from .machine import Machine
from .placement import Placement


def check_launchable(machine_source: str, *, nodes: int | None = None,
                     hostfile: str | None = None, vcluster: bool = False) -> None:
    """Raise TiersError (exit 2) when the machine tiers map places onto is
    made up -- a synthetic or XML node (``--machine``) or ``--nodes`` copies
    of this one without a hostfile -- since a launch needs real hosts and
    their real cores."""
    src = str(machine_source or "this")
    if src != "this":
        what = "a synthetic machine" if src.startswith("synthetic:") else f"the machine of {src}"
        raise TiersError(f"--launch cannot run on invented hosts: --machine gives {what}; drop "
                         "--machine (or --launch and write the placement files instead)")
    if nodes is not None and nodes > 1 and not hostfile and not vcluster:
        raise TiersError(f"--launch cannot run on invented hosts: --nodes {nodes} names no real "
                         "host; give --hostfile (or --vcluster) instead")


def bind_wrapper(p: Placement, machine: Machine) -> list[str]:
    """Return the words that start one rank through ``tiers-bind`` with the
    PU of every rank of ``p``."""
    return [str(native.tool_path("tiers-bind")), "--pus", writers.pu_list(p, machine), "--"]


def _hostfile(path: Path, machine: Machine, p: Placement) -> Path:
    """Write an Open MPI hostfile with the hosts ``p`` uses and their slots."""
    used = sorted({int(i) for i in p.node})
    text = "".join(f"{machine.hosts[i]} slots={machine.capacity[i]}\n" for i in used)
    path.write_text(text, encoding="utf-8")
    return path


def plan_launch(kind: str, p: Placement, machine: Machine, workdir: str | os.PathLike, *,
                rankfile: str | None = None) -> dict:
    """Return how launcher ``kind`` (openmpi, mpich or slurm) applies ``p``:
    ``{"options": build_command keyword arguments, "wrapper": words put
    before the program (tiers-bind, or none), "env": variables for the
    launcher's own environment}``.  Files it needs are written into
    ``workdir`` (an existing ``rankfile`` is reused)."""
    work = Path(workdir)
    n = int(p.node.size)
    if kind == "openmpi":
        rf = rankfile or str(writers.write_rankfile(str(work / "placement.rankfile"), p, machine))
        opts: dict = {"rankfile": rf}
        if len({int(i) for i in p.node}) > 1 or machine.hosts[int(p.node[0])] != \
                socket.gethostname():
            opts["hostfile"] = str(_hostfile(work / "placement.hosts", machine, p))
        if machine.oversubscribed > 1:
            opts["oversubscribe"] = True
        return {"options": opts, "wrapper": [], "env": {}}
    if kind not in ("mpich", "slurm"):
        raise TiersError(f"tiers map cannot launch with '{kind}'")
    hosts = writers.write_hosts_per_rank(str(work / "placement.hosts"), p, machine)
    # Hydra numbers local ranks per run of equal lines of its machine file
    # (a host named again later starts a new proxy at local rank 0); Slurm
    # per host over the whole SLURM_HOSTFILE
    bl = writers.bind_list(p, machine, runs=kind == "mpich")
    opts = {}
    wrapper: list[str] = []
    if bl is not None:
        # the launcher indexes the list by local rank: entry r of a list of
        # n entries is read by the r-th rank of a host, for r < len(bl)
        opts["cpu_map"] = [[bl[r % len(bl)]] for r in range(n)]
    else:
        opts["bind_to"] = "none"
        wrapper = bind_wrapper(p, machine)
    env = {}
    if kind == "mpich":
        opts["hostfile"] = str(hosts)
    else:
        env["SLURM_HOSTFILE"] = str(hosts)
        opts["extra"] = ["--distribution=arbitrary"]
    return {"options": opts, "wrapper": wrapper, "env": env}


def command(program: Sequence[str], p: Placement, machine: Machine, workdir, *,
            launcher: str | None = None, vcluster: bool = False,
            rankfile: str | None = None) -> tuple[list[str], dict]:
    """Return ``(command line, launcher environment)`` that runs
    ``program`` (its argv, without a launcher) with placement ``p``: on the
    virtual cluster with ``vcluster``, else with ``launcher`` (a kind, or
    None to detect)."""
    n = int(p.node.size)
    if vcluster and launcher and launch.Launcher(launcher).kind != "openmpi":
        # Hydra through the cluster's agent, or srun on its Slurm
        from .. import vcluster as vcl
        kind = launch.Launcher(launcher).kind
        how = plan_launch(kind, p, machine, workdir)
        opts, env = vcl.launcher_settings(kind, how["options"], how["env"])
        lau = vcl.launcher(kind)
        return launch.build_command(lau, how["wrapper"] + list(program), n, **opts), env
    if vcluster:
        from .. import vcluster as vcl
        how = plan_launch("openmpi", p, machine, workdir, rankfile=rankfile)
        opts = dict(how["options"])
        opts.pop("hostfile", None)           # the cluster's own hostfile names the nodes
        # the rankfile binds; the cluster's default bind_to=none would undo it
        return vcl.command(list(program), n, bind_to="", **opts), {}
    lau = launch.detect(launcher)
    how = plan_launch(lau.kind, p, machine, workdir, rankfile=rankfile)
    return (launch.build_command(lau, how["wrapper"] + list(program), n, **how["options"]),
            how["env"])


def insert(command_line: Sequence[str], p: Placement, machine: Machine, workdir, *,
           rankfile: str | None = None) -> tuple[list[str], dict]:
    """Return ``(command line, launcher environment)``: the user's launcher
    line ``command_line`` (``mpirun -n 8 ./app``) with the placement's
    options added after the launcher word and, where needed, tiers-bind
    before the program."""
    cmd = list(command_line)
    i = launch.find_launcher_word(cmd)
    lau = launch.launcher_of(cmd)
    if i is None or lau is None:
        raise TiersError(f"'{cmd[0]}' is not a launcher tiers knows (mpirun, mpiexec, srun); "
                         "give the program alone after --launch -- and tiers starts it")
    n = launch.count_ranks(cmd)
    if n is not None and n != p.node.size:
        raise TiersError(f"the launch line asks for {n} ranks; the placement has {p.node.size}")
    how = plan_launch(lau.kind, p, machine, workdir, rankfile=rankfile)
    opts = launch.launcher_options(lau, int(p.node.size), **how["options"])
    j = launch.program_index(cmd)
    return cmd[:i + 1] + opts + cmd[i + 1:j] + how["wrapper"] + cmd[j:], how["env"]



def vcluster_commands(paths: dict, n: int) -> dict[str, str]:
    """Return the command line that applies a written rankfile on the
    virtual cluster -- ``tiers vcluster mpirun``, which adds the cluster's
    hostfile, agent and MCA settings that a bare ``mpirun -rf`` lacks --
    or nothing when no rankfile was written."""
    if "rankfile" not in paths:
        return {}
    import shlex
    return {"vcluster": f"tiers vcluster mpirun -n {n} --rankfile "
                        f"{shlex.quote(str(Path(paths['rankfile']).absolute()))} -- ./app"}


def dry_run(cmdline: Sequence[str], p: Placement, machine: Machine, *,
            launcher: str | None = None, vcluster: bool = False, rankfile: str | None = None,
            has_launcher: bool = False) -> str:
    """Return the command line ``tiers map --launch`` would run, quoted
    for a shell so that it works when pasted; the files it names are
    written into a new folder (or the ``rankfile`` given) and kept.  On the
    virtual cluster the line is ``tiers vcluster mpirun -n N --rankfile RF
    -- PROGRAM``."""
    import shlex
    import tempfile

    work = tempfile.mkdtemp(prefix="tiers-map-launch-")
    if vcluster and launcher and launch.Launcher(launcher).kind != "openmpi":
        line, env = command(list(cmdline), p, machine, work, launcher=launcher, vcluster=True)
    elif vcluster:
        rf = rankfile or str(writers.write_rankfile(str(Path(work) / "placement.rankfile"),
                                                    p, machine))
        line = ["tiers", "vcluster", "mpirun", "-n", str(int(p.node.size)), "--rankfile",
                str(Path(rf).absolute()), "--", *cmdline]
        env: dict = {}
    elif has_launcher:
        line, env = insert(cmdline, p, machine, work, rankfile=rankfile)
    else:
        line, env = command(list(cmdline), p, machine, work, launcher=launcher,
                            rankfile=rankfile)
    if not os.listdir(work):
        os.rmdir(work)
    words = [f"{k}={shlex.quote(str(v))}" for k, v in env.items()]
    return " ".join(words + [shlex.quote(str(w)) for w in line])
