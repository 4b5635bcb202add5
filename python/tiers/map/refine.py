"""Refinement of a placement by swapping ranks between nodes.

A Kernighan-Lin / Fiduccia-Mattheyses style pass at node level: two ranks
on different nodes trade their places (node and slot) when that lowers,
first, the bytes the busiest node sends to other nodes and, then, the
bytes crossing nodes.  It starts from the node that sends most, tries the
ranks of that node that talk to other nodes against the ranks of those
nodes that talk back, applies the best swap and starts again; it stops
when no swap of any node helps or after a bounded number of tries.  The
caller keeps the result only when the time model does not rate it worse.
"""

from __future__ import annotations

import numpy as np

from . import core
from .graph import Graph
from .machine import Machine
from .placement import Placement

#: The native pass (libtiers' tiers_map_refine) visits at most this many
#: edges per edge of the graph, plus WORK_MIN, so that it costs about as
#: much as the mapping itself.
WORK_PER_EDGE = 20
WORK_MIN = 200000
#: Without the native pass (a libtiers built before it), graphs with more
#: ranks than this are not refined (the fallback runs in Python, one swap
#: at a time).
MAX_RANKS = 20000
#: At most this many candidate swaps are evaluated.
MAX_TRIES = 10000


class _State:
    """Per node the bytes it sends to other nodes, and the bytes crossing
    nodes, kept up to date as ranks move."""

    def __init__(self, graph: Graph, node: np.ndarray, nodes: int):
        src, dst, b = graph.sent()
        self.node = node.astype(np.int64).copy()
        n = graph.n
        # out[r] / inn[r]: (peer, bytes) lists of what r sends / receives
        order = np.argsort(src, kind="stable")
        self.out_ptr = np.searchsorted(src[order], np.arange(n + 1))
        self.out_peer = dst[order]
        self.out_b = b[order]
        order = np.argsort(dst, kind="stable")
        self.in_ptr = np.searchsorted(dst[order], np.arange(n + 1))
        self.in_peer = src[order]
        self.in_b = b[order]
        cross = self.node[src] != self.node[dst]
        self.sent = np.bincount(self.node[src[cross]], weights=b[cross], minlength=nodes)
        self.cut = float(b[cross].sum())

    def move(self, r: int, to: int) -> None:
        """Move rank r to node ``to``, updating sent bytes and the cut."""
        frm = int(self.node[r])
        if frm == to:
            return
        node = self.node
        for k in range(self.out_ptr[r], self.out_ptr[r + 1]):
            t, b = int(self.out_peer[k]), float(self.out_b[k])
            nt = int(node[t])
            if nt != frm:
                self.sent[frm] -= b
                self.cut -= b
            if nt != to:
                self.sent[to] += b
                self.cut += b
        for k in range(self.in_ptr[r], self.in_ptr[r + 1]):
            t, b = int(self.in_peer[k]), float(self.in_b[k])
            nt = int(node[t])
            if nt != frm:
                self.sent[nt] -= b
                self.cut -= b
            if nt != to:
                self.sent[nt] += b
                self.cut += b
        node[r] = to

    def key(self) -> tuple[float, float]:
        return float(self.sent.max()), self.cut

    def neighbours(self, r: int) -> np.ndarray:
        return np.concatenate([self.out_peer[self.out_ptr[r]:self.out_ptr[r + 1]],
                               self.in_peer[self.in_ptr[r]:self.in_ptr[r + 1]]])


def _lower(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether key a is lower than b (max sent first, then cut), beyond
    rounding."""
    for x, y in zip(a, b):
        if abs(x - y) > 1e-9 * max(abs(x), abs(y), 1.0):
            return x < y
    return False


def swaps(graph: Graph, machine: Machine, p: Placement) -> Placement | None:
    """Return ``p`` improved by node-level swaps (named ``refined``), or
    None when the graph is too large for the pass or no swap helps.  Every
    rank keeps a distinct (node, slot): swapped ranks trade both."""
    if machine.nodes < 2 or graph.edges == 0:
        return None
    if core.has_refine():
        budget = WORK_PER_EDGE * int(graph.adjncy.size) + WORK_MIN
        node, slot, swapped = core.refine(graph, p.node, p.slot, machine.nodes, budget)
        if swapped == 0:
            return None
        return Placement("refined", node, slot,
                         f"{p.name} with {swapped} node-level swap{'s' if swapped != 1 else ''}"
                         " (busiest node's sent bytes, then inter-node bytes)")
    if graph.n > MAX_RANKS:
        return None
    st = _State(graph, p.node, machine.nodes)
    slot = p.slot.copy()
    members = [set(np.flatnonzero(p.node == i).tolist()) for i in range(machine.nodes)]
    tries = 0
    swapped = 0
    while tries < MAX_TRIES:
        best = None
        base = st.key()
        for w in np.argsort(-st.sent, kind="stable"):
            w = int(w)
            if st.sent[w] <= 0:
                break
            # the ranks of other nodes that talk to node w, by node
            border: dict[int, set] = {}
            for r in members[w]:
                for t in st.neighbours(r):
                    nt = int(st.node[t])
                    if nt != w:
                        border.setdefault(nt, set()).add(int(t))
            for r in sorted(members[w]):
                peers = st.neighbours(r)
                for b_node in sorted(set(int(x) for x in st.node[peers]) - {w}):
                    for s in sorted(border.get(b_node, ())):
                        tries += 1
                        st.move(r, b_node)
                        st.move(s, w)
                        k = st.key()
                        st.move(s, b_node)
                        st.move(r, w)
                        if _lower(k, base) and (best is None or _lower(k, best[0])):
                            best = (k, r, s, w, b_node)
                if tries >= MAX_TRIES:
                    break
            if best is not None or tries >= MAX_TRIES:
                break
        if best is None:
            break
        _, r, s, w, b_node = best
        st.move(r, b_node)
        st.move(s, w)
        members[w].discard(r)
        members[b_node].discard(s)
        members[w].add(s)
        members[b_node].add(r)
        slot[r], slot[s] = slot[s], slot[r]
        swapped += 1
    if swapped == 0:
        return None
    return Placement("refined", st.node.astype(np.int32), slot.astype(np.int32),
                     f"{p.name} with {swapped} node-level swap{'s' if swapped != 1 else ''} "
                     "(busiest node's sent bytes, then inter-node bytes)")
