"""Analysis of the all-pairs message measurement: the least-squares fit, the
layer each pair of ranks talks through, and the per-layer summary.

Plain functions on plain data (numpy inside), so that they can be tested on
synthetic timings and synthetic topologies without running MPI:

- :func:`fit_line` fits time = latency + size / bandwidth to one pair's
  times (the AFC mapping paper's §3.1: the inverse slope is the bandwidth, the intercept
  the latency); :func:`robust_fit` does it on the best time per size, with
  sanity checks, and gives only physically possible figures;
- :func:`classify` gives the layer that joins two ranks, from their hosts
  and the PUs they are bound to;
- :func:`layer_summary` gives mean and standard deviation of bandwidth and
  latency per layer (the AFC mapping paper's Table 5);
- :func:`pair_matrices` builds the rank x rank latency and bandwidth
  matrices that ``tiers map`` takes as measured link costs;
- :func:`xor_schedule` is the schedule itself, for documentation and checks.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..errors import TiersError

#: Layers from nearest to farthest; "L<n> cache" layers sit between core and numa.
LAYER_ORDER = ("pu", "core", "cache", "numa", "package", "machine", "network")

#: Words for the tables.
LAYER_TITLES = {"pu": "same PU", "core": "same core", "numa": "same NUMA node",
                "package": "same package", "machine": "same node", "network": "between nodes"}


def layer_rank(layer: str) -> tuple[int, int]:
    """Return a sort key placing ``layer`` ("pu", "L2 cache", ..., "network")
    from nearest to farthest."""
    if layer.endswith(" cache"):
        level = int(layer[1:].split()[0]) if layer[1:].split()[0].isdigit() else 0
        return LAYER_ORDER.index("cache"), level
    return (LAYER_ORDER.index(layer) if layer in LAYER_ORDER else len(LAYER_ORDER)), 0


def layer_title(layer: str) -> str:
    """Return the words for a layer: "same package", "shared L3 cache", ..."""
    if layer.endswith(" cache"):
        return f"shared {layer}"
    return LAYER_TITLES.get(layer, layer)


# --------------------------------------------------------------------------
# The schedule


def xor_steps(n: int) -> int:
    """Return the number of steps the XOR schedule needs for ``n`` units:
    2^m - 1 with 2^(m-1) < n <= 2^m (0 for one unit)."""
    if n < 1:
        raise TiersError(f"the schedule needs at least one unit, not {n}")
    m = (n - 1).bit_length()
    return (1 << m) - 1


def xor_schedule(n: int, cores: int = 1) -> list[list[list[tuple[int, int]]]]:
    """Return the XOR schedule on ``n`` units run by ``cores`` cores per
    unit: a list of rounds; each round a list of (step, pairs) where pairs
    are (i, i XOR k) with i < i XOR k < n.  With ``cores`` = c, core q runs
    step r*c + q + 1 in round r, so there are ceil((2^m - 1) / c) rounds."""
    steps = xor_steps(n)
    rounds = -(-steps // cores) if steps else 0
    out = []
    for r in range(rounds):
        this = []
        for q in range(cores):
            k = r * cores + q + 1
            if k > steps:
                break
            this.append((k, [(i, i ^ k) for i in range(n) if i < (i ^ k) < n]))
        out.append(this)
    return out


# --------------------------------------------------------------------------
# The fit


#: Below this R^2 a pair's fit is marked unreliable.
MIN_RELIABLE_R2 = 0.5


def fit_line(sizes: Sequence[float], times: Sequence[Sequence[float]]) -> dict:
    """Fit time = latency + size / bandwidth by least squares.

    ``sizes`` are message sizes in bytes; ``times[i]`` the repeated one-way
    times (microseconds) measured at ``sizes[i]``.  Return a dict with
    ``latency_us`` (the intercept), ``bandwidth_mbps`` (1 / slope, in
    bytes/us = MB/s; None when the slope is not positive), ``slope_us_per_byte``,
    ``r2`` (1 - SS_res / SS_tot; 1.0 when all times are equal and fit
    exactly), ``residuals_us`` (shaped like ``times``: measured - fitted),
    ``points``, and ``reliable``: False when the fit cannot describe a link
    (a negative latency, no positive bandwidth, or R^2 below
    ``MIN_RELIABLE_R2``), as happens when other work disturbs the run.  Raise TiersError when fewer than two distinct sizes carry
    times, or a size is not positive."""
    xs, ys = [], []
    for s, ts in zip(sizes, times):
        if not s > 0:
            raise TiersError(f"message size {s} B cannot enter the fit: sizes must be positive")
        for t in ts:
            if t is not None and math.isfinite(t):
                xs.append(float(s))
                ys.append(float(t))
    x, y = np.asarray(xs), np.asarray(ys)
    if len(set(xs)) < 2:
        raise TiersError("the latency/bandwidth fit needs times at two different sizes at least")
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum()) / sxx
    intercept = float(ym - slope * xm)
    ss_res = 0.0
    residuals = []
    for s, ts in zip(sizes, times):
        row = []
        for t in ts:
            if t is None or not math.isfinite(t):
                row.append(None)
                continue
            r = float(t) - (intercept + slope * float(s))
            ss_res += r * r
            row.append(r)
        residuals.append(row)
    ss_tot = float(((y - ym) ** 2).sum())
    if ss_tot > 0:
        r2 = 1.0 - ss_res / ss_tot
    else:
        r2 = 1.0 if ss_res == 0 else 0.0
    reliable = intercept >= 0 and slope > 0 and r2 >= MIN_RELIABLE_R2
    return {"latency_us": intercept, "bandwidth_mbps": 1.0 / slope if slope > 0 else None,
            "slope_us_per_byte": slope, "r2": r2, "residuals_us": residuals,
            "points": int(x.size), "reliable": reliable}


#: Largest relative distance of a size's best time from the fitted line.
MAX_RESIDUAL = 0.10
#: The intercept is a latency only when it is this many standard errors above zero.
INTERCEPT_SE = 2.0


def robust_fit(sizes: Sequence[float], times: Sequence[Sequence[float]],
               latency_samples: Sequence[float] | None = None) -> dict:
    """Fit time = latency + size / bandwidth robustly and return only
    physically possible figures.

    ``times[i]`` are the repeated one-way times (us) at ``sizes[i]`` bytes;
    ``latency_samples`` the one-way times (us) of a small-message ping-pong
    of the same pair.  Method (docs/statistics.md): the best (minimum) time
    per size -- a disturbed repetition is slower, never faster, so outliers
    cannot move it -- then a least-squares line through these minima, then
    checks: slope > 0 and every minimum within ``MAX_RESIDUAL`` of the line
    ("the line holds").

    - ``bandwidth_mbps``: 1 / slope when the line holds (``bandwidth_source``
      "fit"), else the largest size over its best time ("largest size");
      always > 0, or None when no time is positive.
    - ``latency_us``: the intercept when the line holds and the intercept is
      at least ``INTERCEPT_SE`` standard errors above zero
      (``latency_source`` "fit"); else the best block of the small-message
      ping-pong ("pingpong"); else None.
    - ``line_holds``: whether the checks passed; ``reliable``: False when
      a figure could not be given (it is then None); ``why``: one line
      saying what was replaced or is missing (None when nothing was).

    Also ``fit_intercept_us``, ``intercept_se_us``, ``slope_us_per_byte``,
    ``max_residual`` (relative), ``r2`` (of the minima), ``residuals_us``
    (every repetition against the line, shaped like ``times``),
    ``best_us`` (per size), ``points``, ``latency_pingpong`` (the
    statistics layer's summary of ``latency_samples``, or None).  Raise
    TiersError when fewer than two distinct sizes carry times or a size is
    not positive."""
    from .. import stats

    xs, ys = [], []
    for s, ts in zip(sizes, times):
        if not s > 0:
            raise TiersError(f"message size {s} B cannot enter the fit: sizes must be positive")
        good = [float(t) for t in ts if t is not None and math.isfinite(t)]
        if good:
            xs.append(float(s))
            ys.append(min(good))
    if len(set(xs)) < 2:
        raise TiersError("the latency/bandwidth fit needs times at two different sizes at least")
    x, y = np.asarray(xs), np.asarray(ys)
    k = x.size
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum()) / sxx
    intercept = float(ym - slope * xm)
    fitted = intercept + slope * x
    res = y - fitted
    ss_res = float((res ** 2).sum())
    ss_tot = float(((y - ym) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    se = math.sqrt(ss_res / (k - 2) * (1.0 / k + xm * xm / sxx)) if k > 2 else 0.0
    rel = [abs(float(r)) / float(v) if v > 0 else math.inf for r, v in zip(res, y)]
    max_rel = float(max(rel))
    why = []
    line_holds = bool(slope > 0 and max_rel <= MAX_RESIDUAL)
    if slope <= 0:
        why.append("the best times do not grow with the size")
    elif max_rel > MAX_RESIDUAL:
        why.append(f"the best times are up to {max_rel * 100:.0f} % off a line")
    if line_holds:
        bandwidth, bw_source = 1.0 / slope, "fit"
    else:
        big = max(range(k), key=lambda i: x[i])
        bandwidth = float(x[big] / y[big]) if y[big] > 0 else None
        bw_source = "largest size" if bandwidth is not None else None
        why.append("bandwidth taken at the largest size" if bandwidth is not None
                   else "no positive time: no bandwidth")
    lat_stats = stats.summarize(latency_samples) if latency_samples else None
    if line_holds and intercept >= 0 and intercept > INTERCEPT_SE * se:
        latency, lat_source = intercept, "fit"
    else:
        if line_holds:
            why.append("the intercept is negative" if intercept < 0 else
                       f"the intercept ({intercept:.2f} us) is within {INTERCEPT_SE:g} "
                       f"standard errors of 0")
        if lat_stats is not None and lat_stats["min"] is not None and lat_stats["min"] >= 0:
            latency, lat_source = lat_stats["min"], "pingpong"
            why.append("latency from the 0-byte ping-pong")
        else:
            latency, lat_source = None, None
            why.append("no small-message ping-pong to take the latency from")
    residuals = []
    for s, ts in zip(sizes, times):
        residuals.append([None if t is None or not math.isfinite(t)
                          else float(t) - (intercept + slope * float(s)) for t in ts])
    reliable = bool(latency is not None and bandwidth is not None)
    return {"latency_us": latency, "latency_source": lat_source,
            "bandwidth_mbps": bandwidth, "bandwidth_source": bw_source,
            "fit_intercept_us": intercept, "intercept_se_us": se,
            "slope_us_per_byte": slope, "max_residual": max_rel, "r2": r2,
            "residuals_us": residuals, "best_us": ys, "points": k,
            "latency_pingpong": lat_stats, "line_holds": line_holds, "reliable": reliable,
            "why": "; ".join(why) if why else None}


def launch_agreement(launch_fits: Sequence[dict]) -> dict:
    """Return how far one pair's figures moved between separate launches of
    the all-pairs test: ``launch_fits`` holds each launch's own
    ``latency_us`` and ``bandwidth_mbps`` (None where that launch gave
    none).  Returns ``latency_launch_spread`` and
    ``bandwidth_launch_spread`` ((max - min) / median over the launches,
    None for fewer than two figures), ``noisy`` (True when either figure's
    launches lie more than +-5 % from their median:
    :func:`tiers.stats.launch_agreement`) and ``noisy_why`` (one line, or
    None)."""
    from .. import stats

    lat = stats.launch_agreement([f.get("latency_us") for f in launch_fits],
                                 lambda v: f"{v:,.3g} us")
    bw = stats.launch_agreement([f.get("bandwidth_mbps") for f in launch_fits],
                                lambda v: f"{v:,.0f} MB/s")
    why = "; ".join(f"{name}: {a['why']}" for name, a in (("latency", lat), ("bandwidth", bw))
                    if a["noisy"]) or None
    return {"latency_launch_spread": lat["spread"], "bandwidth_launch_spread": bw["spread"],
            "noisy": bool(lat["noisy"] or bw["noisy"]), "noisy_why": why}


def launch_figures(pooled: dict, launch_fits: Sequence[dict]) -> dict:
    """Return one pair's figures from separate launches of the all-pairs
    test: ``latency_us`` and ``bandwidth_mbps`` are the medians over the
    launches of each launch's own :func:`robust_fit` figure (``launch_fits``;
    launches without the figure are left out), so that one launch that
    started in another state (on a VM: the two vCPUs on one physical core,
    a 0-byte latency of 0.17 us against 0.28 us in the other launches) does
    not move them, as the best of all launches would.  ``latency_source``
    and ``bandwidth_source`` are the commonest among the launches that gave
    the figure; where no launch gave one, the ``pooled`` fit's (through
    every launch's times) is kept.  Also ``pooled_latency_us`` and
    ``pooled_bandwidth_mbps`` (the pooled fit's figures), ``reliable``,
    and :func:`launch_agreement`'s members."""
    from collections import Counter

    from .. import stats

    out = {"pooled_latency_us": pooled.get("latency_us"),
           "pooled_bandwidth_mbps": pooled.get("bandwidth_mbps")}
    for key, src in (("latency_us", "latency_source"), ("bandwidth_mbps", "bandwidth_source")):
        have = [f for f in launch_fits if f.get(key) is not None]
        med = stats.launch_agreement([f[key] for f in have])["median"]
        if med is not None:
            out[key] = med
            sources = Counter(f.get(src) for f in have if f.get(src))
            if sources:
                out[src] = sources.most_common(1)[0][0]
    lat = out.get("latency_us", pooled.get("latency_us"))
    bw = out.get("bandwidth_mbps", pooled.get("bandwidth_mbps"))
    out["reliable"] = bool(lat is not None and bw is not None)
    out.update(launch_agreement(launch_fits))
    return out


# --------------------------------------------------------------------------
# Classification


def parse_pu_list(text: str) -> list[int]:
    """Return the indices of an hwloc list string such as ``"0-3,8"``."""
    out: list[int] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if hi else a
        except ValueError:
            raise TiersError(f"bad PU list '{text}'") from None
        out.extend(range(a, b + 1))
    return out


def classify(a: dict, b: dict, layer_matrix: Sequence[Sequence[str]],
             cache_level_matrix: Sequence[Sequence[int]] | None = None) -> dict:
    """Return the layer that joins two ranks.

    ``a`` and ``b`` are placement records with ``host`` and ``pus`` (logical
    PU indices: a list or hwloc list text).  Different hosts: ``network``.
    The same host: the layer of hwloc's matrix (``tiers topo``'s
    ``layer_matrix``, with ``cache_level_matrix`` naming cache levels) for
    their PUs -- for ranks bound to several PUs, the farthest layer any two
    of their PUs have.  Return ``{"layer": "L3 cache", "bound": True}``;
    ``bound`` is False when a rank is bound to more than one PU (or its PUs
    are unknown), so the layer is only the farthest possible one."""
    if a.get("host") != b.get("host"):
        return {"layer": "network", "bound": True}
    pa = a["pus"] if isinstance(a.get("pus"), list) else parse_pu_list(a.get("pus", ""))
    pb = b["pus"] if isinstance(b.get("pus"), list) else parse_pu_list(b.get("pus", ""))
    n = len(layer_matrix)
    pa = [p for p in pa if 0 <= p < n]
    pb = [p for p in pb if 0 <= p < n]
    if not pa or not pb:
        return {"layer": "machine", "bound": False}
    worst, worst_key = None, None
    for x in pa:
        for y in pb:
            name = layer_matrix[x][y]
            if name == "cache" and cache_level_matrix is not None:
                name = f"L{cache_level_matrix[x][y]} cache"
            key = layer_rank(name)
            if worst_key is None or key > worst_key:
                worst, worst_key = name, key
    return {"layer": worst, "bound": len(pa) == 1 and len(pb) == 1}


def layer_summary(pairs: Sequence[dict]) -> list[dict]:
    """Return, per layer (nearest first), the number of pairs and the mean
    and standard deviation (population) of their fitted bandwidth (MB/s) and
    latency (us), as Table 5 of the AFC mapping paper.  Each pair needs ``layer``,
    ``bandwidth_mbps`` and ``latency_us`` (None values are left out of
    the figures); a layer is ``noisy`` when one of its pairs is (its
    separate launches disagreed: :func:`launch_agreement`)."""
    groups: dict[str, list[dict]] = {}
    for p in pairs:
        groups.setdefault(p["layer"], []).append(p)
    rows = []
    for layer in sorted(groups, key=layer_rank):
        ps = groups[layer]
        bw = np.array([p["bandwidth_mbps"] for p in ps if p.get("bandwidth_mbps") is not None])
        lat = np.array([p["latency_us"] for p in ps if p.get("latency_us") is not None])
        rows.append({
            "layer": layer, "title": layer_title(layer), "pairs": len(ps),
            "bound": all(p.get("bound", True) for p in ps),
            "bandwidth_mean_mbps": float(bw.mean()) if bw.size else None,
            "bandwidth_sd_mbps": float(bw.std()) if bw.size else None,
            "latency_mean_us": float(lat.mean()) if lat.size else None,
            "latency_sd_us": float(lat.std()) if lat.size else None,
            # a pair whose separate launches disagreed by more than +-5 %
            "noisy": any(bool(p.get("noisy")) for p in ps),
        })
    return rows


# --------------------------------------------------------------------------
# Matrices


def pair_matrices(n: int, pairs: Sequence[dict], placement: Sequence[dict] | None = None) -> dict:
    """Return the symmetric rank x rank matrices of fitted latency (us) and
    bandwidth (MB/s), with None on the diagonal and where nothing is known.

    Pairs measured directly fill their cells (``measured`` 1).  When the
    run measured nodes rather than ranks (pairs of phase ``inter``) and a
    ``placement`` with each rank's ``node`` is given, every rank pair of two
    nodes takes the value their node pair measured (``measured`` 0: derived)."""
    lat = [[None] * n for _ in range(n)]
    bw = [[None] * n for _ in range(n)]
    measured = [[0] * n for _ in range(n)]
    node_pairs = {}
    for p in pairs:
        a, b = p["a"], p["b"]
        for i, j in ((a, b), (b, a)):
            lat[i][j] = p["latency_us"]
            bw[i][j] = p["bandwidth_mbps"]
            measured[i][j] = 1
        if p.get("phase") == "inter" and placement is not None:
            na, nb = placement[a]["node"], placement[b]["node"]
            node_pairs[(na, nb)] = node_pairs[(nb, na)] = p
    if node_pairs and placement is not None:
        for i in range(n):
            for j in range(n):
                if i == j or measured[i][j]:
                    continue
                p = node_pairs.get((placement[i]["node"], placement[j]["node"]))
                if p is not None:
                    lat[i][j] = p["latency_us"]
                    bw[i][j] = p["bandwidth_mbps"]
    return {"ranks": n, "latency_us": lat, "bandwidth_mbps": bw, "measured": measured}
