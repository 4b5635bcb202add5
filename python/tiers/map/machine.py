"""The machine model of ``tiers map``: nodes, each a symmetric tree of
levels above its cores (from ``tiers.topo.measure``), the slots ranks may
use per node, and the cost of each layer.

Inside a node a pair of cores is joined at the depth ``d`` of its common
ancestor (the AFC mapping paper's §2.2 weighs it 10^d, higher = closer); tiers turns that
into a cost per level, ``10^(dmax - d)`` (the closest level costs 1, each
level up 10 times more) and an inter-node cost ten times the dearest
intra-node one, unless per-layer latency and bandwidth are given.
"""

from __future__ import annotations

import math
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import TiersError

#: Per-layer (latency s, bandwidth B/s) used to predict communication time
#: when none is measured, from the AFC mapping paper's Table 5 (RICC): inside a node the
#: per-pair figures at 4 nodes (intra-CPU 19 us / 2740 MB/s, inter-CPU
#: 33 us / 1420 MB/s); for ``node`` the latency at 4 nodes (77 us) and the
#: bandwidth of one node's network link, measured with a single pair alone
#: at 2 nodes (2227 MB/s; Table 2 gives 2.0 GB/s).  The link is shared by
#: all of a node's inter-node traffic (see :func:`.placement.metrics`).
DEFAULT_LAYER_COSTS = {
    "core": (19e-6, 2740e6), "cache": (19e-6, 2740e6), "package": (19e-6, 2740e6),
    "numa": (33e-6, 1420e6), "machine": (33e-6, 1420e6), "node": (77e-6, 2227e6),
}


@dataclass
class Machine:
    """Nodes of one shape: ``arity`` children per level (root first) above
    the slots, the layer each level is (``level_layers``), the Scotch cost of
    each level (``cost``), ``capacity`` slots per node, the host names, and
    per slot the OS index of the PU a rank there binds to (``slot_pu``) and
    its logical core (``slot_core``)."""

    hosts: list[str]
    capacity: list[int]
    arity: list[int]
    level_layers: list[str]
    cost: list[float]
    slot_pu: list[int]
    slot_core: list[int]
    source: str = ""
    oversubscribed: int = 1
    layer_costs: dict = field(default_factory=lambda: dict(DEFAULT_LAYER_COSTS))
    links: object = None   # measured node x node costs (.links.Links), or None

    @property
    def nodes(self) -> int:
        """Return the number of nodes."""
        return len(self.hosts)

    @property
    def slots_per_node(self) -> int:
        """Return the slots of one node (cores times the oversubscription)."""
        return math.prod(self.arity)   # 1 for no levels; plain ints (called per metric)

    @property
    def strides(self) -> list[int]:
        """Return, per level, the slots under one object one level below."""
        out, s = [], self.slots_per_node
        for a in self.arity:
            s //= a
            out.append(s)
        return out

    def describe(self) -> dict:
        """Return the machine as plain data (for result documents)."""
        return {"source": self.source, "nodes": self.nodes, "hosts": self.hosts,
                "capacity": self.capacity, "arity": self.arity,
                "level_layers": self.level_layers, "cost": self.cost,
                "slots_per_node": self.slots_per_node, "oversubscribed": self.oversubscribed,
                "layer_costs": {k: {"latency_s": v[0], "bandwidth_Bps": v[1]}
                                for k, v in self.layer_costs.items()},
                "links": None if self.links is None else {
                    "source": self.links.source,
                    "latency_s": self.links.latency.tolist(),
                    "bandwidth_Bps": [[None if not np.isfinite(x) else float(x) for x in row]
                                      for row in self.links.bandwidth]}}


def node_tree(topo_doc: dict) -> tuple[list[int], list[str], list[int], list[int], list[int]]:
    """Return ``(arity, level_layers, level_depths, core_pu, core_logical)``
    of a ``tiers.topo/1`` document: the tree of one node over its cores
    (hardware threads of a core are one slot), root level first, and per
    core the OS index of its first PU and its logical index.  Raise
    TiersError when the tree is not symmetric (Scotch's tleaf needs it)."""
    depth = np.asarray(topo_doc["samples"]["depth_matrix"], dtype=np.int64)
    layer = topo_doc["samples"]["layer_matrix"]
    os_index = topo_doc["samples"]["pu_os_index"]
    p = depth.shape[0]
    reps, seen = [], np.zeros(p, dtype=bool)
    for a in range(p):
        if seen[a]:
            continue
        reps.append(a)
        for b in range(a, p):
            if layer[a][b] in ("pu", "core"):
                seen[b] = True
    reps = np.asarray(reps)
    d = depth[np.ix_(reps, reps)]
    c = len(reps)
    if c == 1:
        return [], [], [], [int(os_index[reps[0]])], [0]
    off = d[~np.eye(c, dtype=bool)]
    levels = sorted(set(int(x) for x in off))
    sizes = [int((d[0] >= lv).sum()) for lv in levels] + [1]
    arity, names = [], []
    for j, lv in enumerate(levels):
        g = sizes[j]
        block = np.arange(c) // g
        if c % g or not np.array_equal(d >= lv, block[:, None] == block[None, :]):
            raise TiersError(f"the node topology {topo_doc['summary'].get('source', '')!r} is "
                             "not symmetric (its cores are not evenly spread over its "
                             "packages/caches); tiers map needs a symmetric node for now")
        arity.append(g // sizes[j + 1])
        i, k = np.argwhere(d == lv)[0]
        names.append(layer[reps[i]][reps[k]])
    return arity, names, levels, [int(os_index[r]) for r in reps], list(range(c))


def read_hostfile(path: str) -> list[tuple[str, int | None]]:
    """Return ``[(host, slots or None)]`` from an Open MPI style hostfile
    (``host slots=N``, ``host:N`` or ``host``)."""
    p = Path(path)
    if not p.is_file():
        raise TiersError(f"cannot read hostfile {p}: no such file")
    out = []
    for line in p.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\S+?)(?::(\d+))?(?:\s+slots\s*=\s*(\d+))?(?:\s+max[-_]slots\s*=\s*\d+)?",
                         line)
        if not m:
            raise TiersError(f"{p}: cannot read the line '{line}' (use 'host slots=N')")
        slots = m.group(3) or m.group(2)
        out.append((m.group(1), int(slots) if slots else None))
    if not out:
        raise TiersError(f"hostfile {p} names no host")
    return out


def parse_layer_costs(text: str | None) -> dict:
    """Return the per-layer (latency s, bandwidth B/s) table with the
    defaults overridden by ``text``: ``layer=LAT_US/BW_MBPS,...`` (layers:
    core, cache, package, numa, machine, node)."""
    costs = dict(DEFAULT_LAYER_COSTS)
    for item in (text or "").split(","):
        if not item.strip():
            continue
        m = re.fullmatch(r"\s*(\w+)\s*=\s*([\d.eE+-]+)\s*/\s*([\d.eE+-]+)\s*", item)
        if not m or m.group(1) not in costs:
            raise TiersError(f"bad layer cost '{item}': use LAYER=LATENCY_US/BANDWIDTH_MBPS with "
                             f"LAYER among {', '.join(costs)}")
        lat, bw = float(m.group(2)), float(m.group(3))
        if not (lat >= 0 and bw > 0 and math.isfinite(lat) and math.isfinite(bw)):
            raise TiersError(f"bad layer cost '{item}': latency >= 0 and bandwidth > 0")
        costs[m.group(1)] = (lat * 1e-6, bw * 1e6)
    return costs


def check_fits(ranks: int, topo_doc: dict, *, nodes: int | None = None,
               hostfile: str | None = None, oversubscribe: bool = False,
               option: str = "--stencil") -> None:
    """Raise TiersError (naming ``option`` and the capacity) when ``ranks``
    ranks cannot be placed on ``nodes`` copies of the node of ``topo_doc``
    (or on the hosts of ``hostfile``): more than the cores without
    ``oversubscribe``, more than 64 per core with it.  Called before the
    communication graph is built, so that a graph far bigger than the
    machine is refused before any large allocation."""
    from ..validate import RANKS_PER_CORE

    cores = len(node_tree(topo_doc)[3])
    if hostfile:
        entries = read_hostfile(hostfile)
        count = len(entries)
        total = sum(min(cores, s) if s is not None else cores for _, s in entries)
    else:
        count = nodes or 1
        total = cores * count
    where = f"{count} node(s) x {cores} cores"
    if ranks > total and not oversubscribe:
        raise TiersError(f"{option}: {ranks} ranks are more than the {total} cores of {where}; "
                         "add nodes, or pass --oversubscribe to share cores")
    if ranks > total * RANKS_PER_CORE:
        raise TiersError(f"{option}: {ranks} ranks are more than the limit of "
                         f"{total * RANKS_PER_CORE} ({RANKS_PER_CORE} per core of {where})")


def build(topo_doc: dict, *, nodes: int | None = None, hostfile: str | None = None,
          ranks: int | None = None, oversubscribe: bool = False,
          layer_costs: dict | None = None, links=None) -> Machine:
    """Return the :class:`Machine` of ``nodes`` copies of the node in
    ``topo_doc`` (or one per host of ``hostfile``, capacity = its slots,
    at most the cores).  With ``oversubscribe`` and more ``ranks`` than
    cores, every core takes the same number of slots (an extra level).
    With ``links`` (:class:`.links.Links`) and neither ``nodes`` nor
    ``hostfile``, the nodes are the measured hosts; the links are reordered
    to the machine's hosts.  Raise TiersError when the ranks do not fit and
    oversubscription was not asked for."""
    from . import links as links_mod

    arity, names, depths, core_pu, core_logical = node_tree(topo_doc)
    cores = len(core_pu)
    if hostfile:
        entries = read_hostfile(hostfile)
        hosts = [h for h, _ in entries]
        capacity = [min(cores, s) if s is not None else cores for _, s in entries]
    elif links is not None and nodes is None:
        hosts = list(links.hosts)
        capacity = [cores] * len(hosts)
    else:
        count = nodes or 1
        if count < 1:
            raise TiersError("--nodes must be at least 1")
        if count == 1 and topo_doc["summary"].get("this_system"):
            hosts = [socket.gethostname()]
        else:
            hosts = [f"node{i}" for i in range(count)]
        capacity = [cores] * count
    dmax = max(depths) if depths else 0
    cost = [float(10 ** (dmax - d)) for d in depths]
    total = sum(capacity)
    over = 1
    slot_pu, slot_core = list(core_pu), list(core_logical)
    if ranks is not None and ranks > total:
        if not oversubscribe:
            raise TiersError(f"{ranks} ranks are more than the {total} cores of {len(hosts)} "
                             f"node(s) x {cores} cores; add nodes, or pass --oversubscribe to "
                             "share cores")
        over = -(-ranks // total)
        if over > 64:
            raise TiersError(f"{ranks} ranks are more than the limit of {64 * total} (64 per "
                             f"core of {len(hosts)} node(s) x {cores} cores)")
        arity = arity + [over]
        names = names + ["core"]
        cost = cost + [(cost[-1] if cost else 1.0) / 10]
        capacity = [c * over for c in capacity]
        slot_pu = [pu for pu in core_pu for _ in range(over)]
        slot_core = [c for c in core_logical for _ in range(over)]
    return Machine(hosts, capacity, arity, names, cost, slot_pu, slot_core,
                   source=str(topo_doc["summary"].get("source", "")), oversubscribed=over,
                   layer_costs=layer_costs or dict(DEFAULT_LAYER_COSTS),
                   links=links_mod.for_hosts(links, hosts) if links is not None else None)
