"""Writing a placement the way launchers consume it.

- Open MPI rankfile (``rank R=HOST slot=CORE``, logical core indices), the
  same file for 4.x (``mpirun -rf FILE``) and 5.x (``mpirun --map-by
  rankfile:file=FILE``);
- MPICH Hydra: a machine file with one host per rank, in rank order, and
  the ``-bind-to user:`` list of OS PU indices (Hydra applies it by the
  rank's local index on its host);
- Slurm: a ``SLURM_HOSTFILE`` (one host per rank) for
  ``--distribution=arbitrary`` and the ``--cpu-bind=map_cpu:`` list (by
  local task index);
- where hosts need different local lists, which one launcher option cannot
  say, the command starts every rank through ``tiers-bind --pus`` (one PU
  per rank) with the launcher's own binding off;
- a plain JSON table rank -> (host, node, slot, core, PU).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .. import output
from .machine import Machine
from .placement import Placement


def _write(path: str, text: str) -> Path:
    output.write_text(path, text)
    return Path(path)


def _per_rank(p: Placement, machine: Machine):
    """Return per rank (host names, logical cores, OS PUs), looked up with
    numpy (no Python loop over ranks)."""
    slot = np.asarray(p.slot, dtype=np.int64)
    hosts = np.asarray(machine.hosts, dtype=object)[np.asarray(p.node, dtype=np.int64)]
    return hosts, np.asarray(machine.slot_core)[slot], np.asarray(machine.slot_pu)[slot]


def table(p: Placement, machine: Machine) -> list[dict]:
    """Return per rank ``{"rank", "host", "node", "slot", "core", "pu"}``:
    core is the logical core index in the node, pu the OS index a rank
    binds to."""
    hosts, core, pu = _per_rank(p, machine)
    return [{"rank": r, "host": h, "node": nd, "slot": sl, "core": c, "pu": u}
            for r, h, nd, sl, c, u in zip(range(p.node.size), hosts.tolist(),
                                         p.node.tolist(), p.slot.tolist(), core.tolist(),
                                         pu.tolist())]


def rankfile_text(p: Placement, machine: Machine) -> str:
    """Return the Open MPI rankfile of ``p``: ``rank R=HOST slot=CORE``."""
    hosts, core, _ = _per_rank(p, machine)
    return "".join(f"rank {r}={h} slot={c}\n"
                   for r, h, c in zip(range(p.node.size), hosts.tolist(), core.tolist()))


def local_pus(p: Placement, machine: Machine) -> dict[str, list[int]]:
    """Return, per host, the OS PUs of its ranks in rank order (the order
    in which Hydra and Slurm number local ranks)."""
    _, _, pu = _per_rank(p, machine)
    node = np.asarray(p.node, dtype=np.int64)
    order = np.argsort(node, kind="stable")
    sorted_node = node[order]
    starts = np.flatnonzero(np.r_[True, sorted_node[1:] != sorted_node[:-1]]) \
        if node.size else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], node.size]
    first = np.full(machine.nodes, node.size, dtype=np.int64)   # first rank of each node
    if node.size:
        np.minimum.at(first, node, np.arange(node.size))
    pus = pu[order]
    # hosts in the order their first rank comes (as the loop over ranks met them)
    blocks = sorted(zip(first[sorted_node[starts]].tolist(), starts.tolist(), ends.tolist()))
    return {machine.hosts[int(sorted_node[a])]: pus[a:b].tolist() for _, a, b in blocks}


def pu_list(p: Placement, machine: Machine) -> str:
    """Return the OS PU of every rank, in rank order, as ``tiers-bind
    --pus`` reads it ("3,1,0,2")."""
    _, _, pu = _per_rank(p, machine)
    return ",".join(map(str, pu.tolist()))


def _runs_pus(p: Placement, machine: Machine) -> list[list[int]]:
    """The OS PUs of each run of consecutive ranks on one host."""
    _, _, pu = _per_rank(p, machine)
    node = np.asarray(p.node)
    if not node.size:
        return []
    cuts = np.flatnonzero(node[1:] != node[:-1]) + 1
    return [x.tolist() for x in np.split(pu, cuts)]


def bind_list(p: Placement, machine: Machine, *, runs: bool = False) -> list[int] | None:
    """Return the one per-local-rank PU list that holds on every host, or
    None when the hosts need different lists (then Hydra's ``user:`` and
    Slurm's ``map_cpu:`` cannot express the placement in one option).
    With ``runs`` the local ranks are counted per run of consecutive ranks
    on one host, as Hydra counts them (one proxy per run of equal lines of
    its machine file)."""
    lists = _runs_pus(p, machine) if runs else list(local_pus(p, machine).values())
    longest = max(lists, key=len)
    for lst in lists:
        if lst != longest[:len(lst)]:
            return None
    return longest


def write_rankfile(path: str, p: Placement, machine: Machine) -> Path:
    """Write the Open MPI rankfile; return its path."""
    return _write(path, rankfile_text(p, machine))


def write_hosts_per_rank(path: str, p: Placement, machine: Machine) -> Path:
    """Write one host name per rank, in rank order (Hydra machine file with
    one slot per line, Slurm's SLURM_HOSTFILE); return its path."""
    hosts, _, _ = _per_rank(p, machine)
    return _write(path, "\n".join(hosts.tolist()) + "\n" if hosts.size else "")


def write_table(path: str, p: Placement, machine: Machine) -> Path:
    """Write the plain JSON rank table; return its path."""
    return _write(path, json.dumps({"placement": p.name, "ranks": table(p, machine)},
                                   indent=1) + "\n")


def write_permutation(path: str, perm: np.ndarray) -> Path:
    """Write the permutation old rank -> new rank, one number per line."""
    return _write(path, "\n".join(map(str, np.asarray(perm).tolist())) + "\n"
                  if np.asarray(perm).size else "")


def commands(paths: dict, p: Placement, machine: Machine, n: int) -> dict[str, str]:
    """Return the launcher command lines that apply the written files."""
    out = {}
    if "rankfile" in paths:
        rf = paths["rankfile"]
        out["openmpi4"] = f"mpirun -n {n} -rf {rf} ./app"
        out["openmpi5"] = f"mpirun -n {n} --map-by rankfile:file={rf} ./app"
    bl = bind_list(p, machine)
    # hosts with different local orders: no launcher list says it; each
    # rank binds itself through tiers-bind instead
    wrap = "" if bl else f"tiers-bind --pus {pu_list(p, machine)} -- "
    if "hydra" in paths:
        hl = bind_list(p, machine, runs=True)     # Hydra: local ranks per run of lines
        bind = f" -bind-to user:{','.join(map(str, hl))}" if hl else " -bind-to none"
        hwrap = "" if hl else f"tiers-bind --pus {pu_list(p, machine)} -- "
        out["mpich"] = f"mpiexec -n {n} -f {paths['hydra']}{bind} {hwrap}./app"
    if "slurm" in paths:
        bind = f" --cpu-bind=map_cpu:{','.join(map(str, bl))}" if bl else " --cpu-bind=none"
        out["slurm"] = (f"SLURM_HOSTFILE={paths['slurm']} srun -n {n} "
                        f"--distribution=arbitrary{bind} {wrap}./app")
    return out
