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


def table(p: Placement, machine: Machine) -> list[dict]:
    """Return per rank ``{"rank", "host", "node", "slot", "core", "pu"}``:
    core is the logical core index in the node, pu the OS index a rank
    binds to."""
    return [{"rank": r, "host": machine.hosts[int(p.node[r])], "node": int(p.node[r]),
             "slot": int(p.slot[r]), "core": int(machine.slot_core[int(p.slot[r])]),
             "pu": int(machine.slot_pu[int(p.slot[r])])} for r in range(p.node.size)]


def rankfile_text(p: Placement, machine: Machine) -> str:
    """Return the Open MPI rankfile of ``p``: ``rank R=HOST slot=CORE``."""
    return "".join(f"rank {r}={machine.hosts[int(p.node[r])]} "
                   f"slot={machine.slot_core[int(p.slot[r])]}\n" for r in range(p.node.size))


def local_pus(p: Placement, machine: Machine) -> dict[str, list[int]]:
    """Return, per host, the OS PUs of its ranks in rank order (the order
    in which Hydra and Slurm number local ranks)."""
    out: dict[str, list[int]] = {}
    for r in range(p.node.size):
        out.setdefault(machine.hosts[int(p.node[r])], []).append(
            int(machine.slot_pu[int(p.slot[r])]))
    return out


def pu_list(p: Placement, machine: Machine) -> str:
    """Return the OS PU of every rank, in rank order, as ``tiers-bind
    --pus`` reads it ("3,1,0,2")."""
    return ",".join(str(int(machine.slot_pu[int(s)])) for s in p.slot)


def _runs_pus(p: Placement, machine: Machine) -> list[list[int]]:
    """The OS PUs of each run of consecutive ranks on one host."""
    out: list[list[int]] = []
    last = None
    for r in range(p.node.size):
        if int(p.node[r]) != last:
            out.append([])
            last = int(p.node[r])
        out[-1].append(int(machine.slot_pu[int(p.slot[r])]))
    return out


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
    return _write(path, "".join(f"{machine.hosts[int(i)]}\n" for i in p.node))


def write_table(path: str, p: Placement, machine: Machine) -> Path:
    """Write the plain JSON rank table; return its path."""
    return _write(path, json.dumps({"placement": p.name, "ranks": table(p, machine)},
                                   indent=1) + "\n")


def write_permutation(path: str, perm: np.ndarray) -> Path:
    """Write the permutation old rank -> new rank, one number per line."""
    return _write(path, "".join(f"{int(x)}\n" for x in perm))


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
