"""Measured costs between nodes (``tiers map --links FILE``): the node x
node latency and bandwidth of a ``tiers probe net --all-pairs`` document
(schema ``tiers.probe.net/1``, docs/schemas/probe-net.md).

``summary.allpairs.node_matrices`` is used when the inter-node phase ran;
otherwise the node pairs are averaged from the rank x rank
``summary.allpairs.matrices`` with each rank's node taken from
``samples.placement``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TiersError

#: Costs within this ratio of each other count as uniform: the plain
#: grouping (complete graph) is used and the costs only feed the metrics.
UNIFORM_SPREAD = 1.05


@dataclass
class Links:
    """Per node pair (index order of ``hosts``): one-way ``latency`` in
    seconds and ``bandwidth`` in B/s (diagonal unused)."""

    hosts: list[str]
    latency: np.ndarray
    bandwidth: np.ndarray
    source: str = ""

    def cost_per_byte(self, message_bytes: float) -> np.ndarray:
        """Return the time per byte of a message of ``message_bytes`` on
        each node pair: latency / size + 1 / bandwidth."""
        size = max(float(message_bytes), 1.0)
        return self.latency / size + 1.0 / self.bandwidth

    def uniform(self, message_bytes: float) -> bool:
        """Return whether every node pair costs about the same."""
        c = self.cost_per_byte(message_bytes)
        off = c[~np.eye(c.shape[0], dtype=bool)]
        return off.size == 0 or float(off.max()) <= UNIFORM_SPREAD * float(off.min())


def _matrix(rows, what: str, path) -> np.ndarray:
    try:
        m = np.array([[np.nan if x is None else float(x) for x in r] for r in rows],
                     dtype=np.float64)
    except (TypeError, ValueError):
        raise TiersError(f"{path}: {what} holds non-numeric values") from None
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise TiersError(f"{path}: {what} is not a square matrix")
    return m


def from_document(doc: dict, path: str = "") -> Links:
    """Return the :class:`Links` of a ``tiers.probe.net/1`` document.
    Raise TiersError when it has no all-pairs matrices, measured a single
    node, or leaves a node pair without a positive bandwidth."""
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("tiers.probe.net/"):
        raise TiersError(f"{path} is not a tiers probe net document (schema tiers.probe.net/1)")
    ap = (doc.get("summary") or {}).get("allpairs")
    if not isinstance(ap, dict):
        raise TiersError(f"{path} has no all-pairs measurement: run 'tiers probe net "
                         "--all-pairs --json FILE' across the nodes")
    nm = ap.get("node_matrices")
    if isinstance(nm, dict) and nm.get("latency_us") is not None:
        lat = _matrix(nm["latency_us"], "node_matrices.latency_us", path)
        bw = _matrix(nm["bandwidth_mbps"], "node_matrices.bandwidth_mbps", path)
        hosts = [str(h) for h in nm.get("hosts") or [f"node{i}" for i in range(lat.shape[0])]]
    else:
        rm = ap.get("matrices")
        placement = (doc.get("samples") or {}).get("placement") or []
        if not isinstance(rm, dict) or not placement:
            raise TiersError(f"{path} has neither node matrices nor rank matrices with a "
                             "placement")
        rl = _matrix(rm["latency_us"], "matrices.latency_us", path)
        rb = _matrix(rm["bandwidth_mbps"], "matrices.bandwidth_mbps", path)
        node = np.array([int(p["node"]) for p in sorted(placement, key=lambda p: p["rank"])])
        names: dict[int, str] = {}
        for p in placement:
            names.setdefault(int(p["node"]), str(p.get("host", f"node{p['node']}")))
        k = int(node.max()) + 1 if node.size else 0
        lat = np.full((k, k), np.nan)
        bw = np.full((k, k), np.nan)
        for a in range(k):
            for b in range(k):
                if a == b:
                    continue
                sel = np.ix_(node == a, node == b)
                la, ba = rl[sel], rb[sel]
                if np.isfinite(la).any():
                    lat[a, b] = np.nanmean(la)
                if np.isfinite(ba).any():
                    bw[a, b] = np.nanmean(ba)
        hosts = [names.get(i, f"node{i}") for i in range(k)]
    k = lat.shape[0]
    if k < 2:
        raise TiersError(f"{path} measured a single node: there are no links between nodes "
                         "to use")
    off = ~np.eye(k, dtype=bool)
    if not np.all(np.isfinite(bw[off])) or np.any(bw[off] <= 0):
        a, b = np.argwhere(off & ~(np.isfinite(bw) & (bw > 0)))[0]
        raise TiersError(f"{path}: no positive bandwidth between nodes {hosts[a]} and "
                         f"{hosts[b]}")
    lat = np.where(np.isfinite(lat) & (lat > 0), lat, 0.0)
    # symmetric: the mean of both directions
    lat = (lat + lat.T) / 2 * 1e-6
    bw = (bw + bw.T) / 2 * 1e6
    np.fill_diagonal(lat, 0.0)
    np.fill_diagonal(bw, np.inf)
    return Links(hosts, lat, bw, str(path))


def read(path: str) -> Links:
    """Return the :class:`Links` of the probe-net document at ``path``."""
    p = Path(path)
    if not p.is_file():
        raise TiersError(f"cannot read {p}: no such file")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TiersError(f"cannot read {p}: {exc}") from None
    except RecursionError:
        raise TiersError(f"cannot read {p}: JSON nested too deeply") from None
    return from_document(doc, str(p))


def for_hosts(links: Links, hosts: list[str]) -> Links:
    """Return ``links`` reordered to the machine's ``hosts``: by name when
    every host was measured, else by position when the counts agree.
    Raise TiersError otherwise."""
    if list(hosts) == links.hosts:
        return links
    idx = {h: i for i, h in enumerate(links.hosts)}
    if all(h in idx for h in hosts):
        order = np.array([idx[h] for h in hosts])
    elif len(hosts) == len(links.hosts):
        order = np.arange(len(hosts))
    else:
        raise TiersError(f"the links in {links.source} cover {len(links.hosts)} node(s) "
                         f"({', '.join(links.hosts[:4])}{', ...' if len(links.hosts) > 4 else ''})"
                         f" but the machine has {len(hosts)}; give --hostfile with those hosts")
    sel = np.ix_(order, order)
    return Links(list(hosts), links.latency[sel], links.bandwidth[sel], links.source)
