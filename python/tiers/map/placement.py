"""Placements and what they cost.

A placement gives every rank a node and a slot (a core of that node, in
hwloc logical order).  :func:`strategies` builds the ones seed 002 §4.1
compares -- the launcher's default (block), the mapped one (AFC), the
mapped grouping without the intra-node step (AFC-NB), a random one -- and
Open MPI's ``--map-by node`` and ``--map-by package``; :func:`metrics`
measures each on the communication graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TiersError
from . import core
from .graph import Graph
from .machine import Machine


@dataclass
class Placement:
    """Per rank, its ``node`` index and ``slot`` within the node; ``name``
    says which strategy made it and ``note`` how a launcher reproduces it."""

    name: str
    node: np.ndarray
    slot: np.ndarray
    note: str = ""

    def check(self, machine: Machine) -> None:
        """Raise TiersError unless every rank has a distinct (node, slot)
        within the node's capacity."""
        if self.node.min() < 0 or self.node.max() >= machine.nodes:
            raise TiersError(f"placement {self.name}: a node index is out of range")
        cap = np.asarray(machine.capacity)
        if np.any(self.slot < 0) or np.any(self.slot >= machine.slots_per_node):
            raise TiersError(f"placement {self.name}: a slot is out of range")
        counts = np.bincount(self.node, minlength=machine.nodes)
        if np.any(counts > cap):
            raise TiersError(f"placement {self.name}: a node holds more ranks than its capacity")
        key = self.node.astype(np.int64) * machine.slots_per_node + self.slot
        if np.unique(key).size != key.size:
            raise TiersError(f"placement {self.name}: two ranks share a slot")


def _fill_order(node: np.ndarray, nodes: int) -> np.ndarray:
    """Slot of each rank when ranks fill their node's slots in rank order."""
    slot = np.empty(node.size, dtype=np.int32)
    order = np.argsort(node, kind="stable")
    counts = np.bincount(node, minlength=nodes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slot[order] = np.arange(node.size) - np.repeat(starts, counts)
    return slot


def block(n: int, machine: Machine) -> Placement:
    """Return Open MPI's default placement (``--map-by core``/``slot``):
    ranks fill node 0's slots in order, then node 1's, and so on."""
    cap = np.asarray(machine.capacity)
    node = np.repeat(np.arange(machine.nodes), cap)[:n].astype(np.int32)
    return Placement("block", node, _fill_order(node, machine.nodes),
                     "mpirun's default: --map-by core --bind-to core")


def by_node(n: int, machine: Machine) -> Placement:
    """Return Open MPI's ``--map-by node``: rank r on node r mod N (nodes
    with room), filling each node's slots in order."""
    cap = np.asarray(machine.capacity).copy()
    node = np.empty(n, dtype=np.int32)
    used = np.zeros_like(cap)
    r, i = 0, 0
    while r < n:
        if used[i] < cap[i]:
            node[r] = i
            used[i] += 1
            r += 1
        i = (i + 1) % machine.nodes
    return Placement("map-by-node", node, _fill_order(node, machine.nodes),
                     "mpirun --map-by node --bind-to core")


def by_package(n: int, machine: Machine) -> Placement:
    """Return Open MPI's ``--map-by package``: nodes filled in order, and
    inside a node ranks dealt round-robin over the top-level objects
    (packages)."""
    base = block(n, machine)
    if not machine.arity:
        return Placement("map-by-package", base.node, base.slot, "mpirun --map-by package")
    top = machine.arity[0]
    per = machine.slots_per_node // top
    local = base.slot
    slot = (local % top) * per + local // top
    return Placement("map-by-package", base.node, slot.astype(np.int32),
                     "mpirun --map-by package --bind-to core")


def random(n: int, machine: Machine, seed: int) -> Placement:
    """Return a random placement (seeded): the block positions shuffled."""
    base = block(n, machine)
    perm = np.random.default_rng(seed).permutation(n)
    return Placement("random", base.node[perm], base.slot[perm], "ranks shuffled at random")


def mapped(graph: Graph, machine: Machine, seed: int, *, intra: bool = True) -> Placement:
    """Return the seed 002 placement: ranks grouped per node with Scotch
    (step 3), then, with ``intra``, each group mapped onto its node's tree
    (step 4, "AFC"); without, ranks fill their node in rank order
    ("AFC-NB")."""
    cost = None
    links = getattr(machine, "links", None)
    if links is not None and graph.edges:
        message = graph.total_bytes() / graph.edges / 2   # mean bytes one way
        if not links.uniform(message):
            cost = links.cost_per_byte(message)
    node = core.group(graph, machine.capacity, seed, link_cost=cost)
    if not intra:
        return Placement("afc-nb", node, _fill_order(node, machine.nodes),
                         "grouped with Scotch; inside a node in rank order")
    slot = core.place(graph, node, machine.nodes, machine.arity, machine.cost, seed)
    return Placement("afc", node, slot, "grouped and placed with Scotch")


def strategies(graph: Graph, machine: Machine, seed: int = 1) -> list[Placement]:
    """Return the placements to compare, the mapped one ("afc") first."""
    n = graph.n
    afc = mapped(graph, machine, seed)
    out = [afc, mapped(graph, machine, seed, intra=False), block(n, machine),
           by_node(n, machine), random(n, machine, seed)]
    if machine.arity and machine.arity[0] > 1:
        out.append(by_package(n, machine))
    for p in out:
        p.check(machine)
    return out


# --------------------------------------------------------------------------
# Metrics


def edge_layers(graph: Graph, machine: Machine, p: Placement):
    """Return ``(u, v, bytes, level)`` of every edge once, where level is
    the node tree level joining the pair (0 = the node's root) or -1 for a
    pair on different nodes, and ``machine.levels`` for one slot shared."""
    u, v, w = graph.edge_list()
    nu, nv = p.node[u], p.node[v]
    su, sv = p.slot[u].astype(np.int64), p.slot[v].astype(np.int64)
    level = np.full(u.size, len(machine.arity), dtype=np.int64)
    for i in range(len(machine.arity) - 1, -1, -1):
        stride = machine.strides[i]
        level[(su // stride) != (sv // stride)] = i
    level[nu != nv] = -1
    return u, v, w, level


def metrics(graph: Graph, machine: Machine, p: Placement) -> dict:
    """Return the costs of placement ``p`` for one exchange of the graph
    (every edge's bytes, half each way):

    - ``bytes_inter_node``, ``bytes_per_layer``, ``hop_bytes`` (bytes times
      the links of the machine tree between the two cores, a node switch
      counting as one more level), ``max_node_out_bytes`` (the most bytes
      one node sends to others);
    - the predicted time, from two resources that work at the same time:
      ``predicted_rank_s``, the largest over ranks of its serial cost
      (per neighbour latency + bytes / bandwidth of the joining layer, or
      of the link for a neighbour on another node), and
      ``predicted_link_s``, the largest over nodes of the time its network
      link needs for its outgoing bytes (sum over destination nodes of bytes
      / bandwidth of that node pair; with no measured links every pair has
      the ``node`` layer's bandwidth, so it is outgoing bytes / link
      bandwidth).  ``predicted_time_s`` is the larger of the two: the
      critical resource sets the step time.  ``critical`` says which."""
    u, v, w, level = edge_layers(graph, machine, p)
    levels = len(machine.arity)
    names = np.array(list(machine.level_layers) + ["core", "node"], dtype=object)
    layer = np.where(level < 0, "node",
                     names[np.clip(level, 0, levels)] if levels else "core")
    per_layer: dict[str, float] = {}
    for name in ("node", "machine", "numa", "package", "cache", "core"):
        sel = layer == name
        if sel.any():
            per_layer[name] = float(w[sel].sum())
    hops = np.where(level < 0, 2 * (levels + 1), 2 * (levels - level))
    cross = level < 0
    nu, nv = p.node[u], p.node[v]
    out_node = np.bincount(nu[cross], weights=w[cross] / 2, minlength=machine.nodes) + \
        np.bincount(nv[cross], weights=w[cross] / 2, minlength=machine.nodes)
    lat = np.array([machine.layer_costs[str(x)][0] for x in layer]) if layer.size else np.zeros(0)
    bw = np.array([machine.layer_costs[str(x)][1] for x in layer]) if layer.size else np.ones(0)
    links = getattr(machine, "links", None)
    if links is not None and cross.any():
        lat = lat.copy()
        bw = bw.copy()
        lat[cross] = links.latency[nu[cross], nv[cross]]
        bw[cross] = links.bandwidth[nu[cross], nv[cross]]
    # per rank: serial cost of its own messages, at the joining layer's (or
    # the link's) latency and bandwidth; a node's link, shared by its ranks,
    # is the second resource below
    t_edge = lat + (w / 2) / bw
    t_rank = np.bincount(u, weights=t_edge, minlength=graph.n) + \
        np.bincount(v, weights=t_edge, minlength=graph.n)
    t_link_edge = np.where(cross, (w / 2) / bw, 0.0)
    t_link = np.bincount(nu, weights=t_link_edge, minlength=machine.nodes) + \
        np.bincount(nv, weights=t_link_edge, minlength=machine.nodes)
    rank_s = float(t_rank.max()) if t_rank.size else 0.0
    link_s = float(t_link.max()) if t_link.size else 0.0
    return {
        "placement": p.name,
        "bytes_total": float(w.sum()),
        "bytes_inter_node": float(w[cross].sum()),
        "bytes_per_layer": per_layer,
        "hop_bytes": float((w * hops).sum()),
        "max_node_out_bytes": float(out_node.max()) if out_node.size else 0.0,
        "predicted_rank_s": rank_s,
        "predicted_link_s": link_s,
        "predicted_time_s": max(rank_s, link_s),
        "critical": "link" if link_s > rank_s else "rank",
        "nodes_used": int(np.unique(p.node).size),
    }


def permutation(p: Placement) -> np.ndarray:
    """Return, per old rank (subdomain), the new rank that a block launch
    puts where ``p`` places it: ranks sorted by (node, slot).  Exact when
    every node is full; otherwise the ranks of a node keep their order."""
    order = np.lexsort((p.slot, p.node))
    new = np.empty_like(order)
    new[order] = np.arange(order.size)
    return new
