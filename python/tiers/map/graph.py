"""Communication graphs: vertices are ranks, edge weights the bytes two
ranks exchange (both directions summed).  Kept in CSR form (numpy arrays),
so memory is linear in ranks plus edges whatever the input.

Inputs (:func:`read`):

- a ``summary.json`` of ``tiers trace`` (or any JSON object) holding
  ``"comm_matrix": {"bytes": [[...], ...]}``: bytes sent from row rank to
  column rank, n x n;
- a CSV file of the same n x n matrix (``.csv``, commas or blanks);
- a Matrix Market file (``.mtx``: ``coordinate`` or ``array``, real or
  integer; 1-based);
- a METIS graph file (``.graph``, ``.metis``: header ``n m [fmt]``, fmt 1 or
  001 for edge weights) or a Scotch source graph (``.grf``, ``.src``).

and :func:`stencil`, the face exchanges of a structured grid decomposition.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TiersError

BYTES_PER_POINT = 8   # one double per grid point on a face


@dataclass
class Graph:
    """A symmetric communication graph in CSR form: the neighbours of rank v
    are ``adjncy[xadj[v]:xadj[v+1]]`` with bytes ``adjwgt`` (both
    directions summed)."""

    n: int
    xadj: np.ndarray    # int64, n + 1
    adjncy: np.ndarray  # int32
    adjwgt: np.ndarray  # float64
    source: str = ""

    @property
    def edges(self) -> int:
        """Return the number of undirected edges."""
        return int(self.adjncy.size // 2)

    def edge_list(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return ``(u, v, bytes)`` of every undirected edge once (u < v)."""
        src = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.xadj))
        keep = src < self.adjncy
        return src[keep], self.adjncy[keep].astype(np.int64), self.adjwgt[keep]

    def total_bytes(self) -> float:
        """Return the bytes of all edges (each edge once)."""
        return float(self.adjwgt.sum() / 2)

    def permuted(self, perm: np.ndarray) -> "Graph":
        """Return the graph with rank v renamed ``perm[v]``."""
        u, v, w = self.edge_list()
        return from_coo(self.n, perm[u], perm[v], w, source=self.source, symmetric=True)


def from_coo(n: int, rows, cols, weights, *, source: str = "", symmetric: bool = False) -> Graph:
    """Return the :class:`Graph` of ``n`` ranks from directed entries
    (row sends ``weight`` bytes to col).  Both directions of a pair are
    summed; zero entries and the diagonal are dropped.  With
    ``symmetric=True`` each entry is one undirected edge given once.
    Raise TiersError on negative, non-numeric or out-of-range entries."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    where = f" in {source}" if source else ""
    if w.size and not np.all(np.isfinite(w)):
        raise TiersError(f"non-numeric or infinite weight{where}")
    if w.size and w.min() < 0:
        i = int(np.argmin(w))
        raise TiersError(f"negative weight {w[i]:g} between ranks {rows[i]} and {cols[i]}"
                         f"{where}")
    if rows.size and (min(rows.min(), cols.min()) < 0 or max(rows.max(), cols.max()) >= n):
        raise TiersError(f"a rank index is outside 0..{n - 1}{where}")
    keep = (rows != cols) & (w > 0)
    rows, cols, w = rows[keep], cols[keep], w[keep]
    r = np.concatenate([rows, cols])
    c = np.concatenate([cols, rows])
    ww = np.concatenate([w, w])
    key = r * n + c
    order = np.argsort(key, kind="stable")
    key, ww = key[order], ww[order]
    if key.size:
        first = np.concatenate([[True], key[1:] != key[:-1]])
        starts = np.flatnonzero(first)
        ww = np.add.reduceat(ww, starts)
        key = key[starts]
    r, c = key // n, key % n
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=n), out=xadj[1:])
    return Graph(n, xadj, c.astype(np.int32), ww.astype(np.float64), source)


def from_dense(matrix, source: str = "") -> Graph:
    """Return the graph of an n x n matrix of bytes (row sends to column)."""
    try:
        m = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise TiersError(f"the matrix{' in ' + source if source else ''} holds non-numeric "
                         "values") from None
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] < 1:
        raise TiersError(f"the matrix{' in ' + source if source else ''} is {m.shape}, "
                         "not square n x n")
    rows, cols = np.nonzero(m != 0)
    return from_coo(m.shape[0], rows, cols, m[rows, cols], source=source)


# --------------------------------------------------------------------------
# Readers


def _read_json(path: Path) -> Graph:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TiersError(f"{path} is not JSON: {exc}") from None
    cm = None
    if isinstance(doc, dict):
        cm = doc.get("comm_matrix")
        if cm is None and isinstance(doc.get("summary"), dict):
            cm = doc["summary"].get("comm_matrix")
    if not isinstance(cm, dict) or "bytes" not in cm:
        raise TiersError(f"{path} has no \"comm_matrix\": {{\"bytes\": n x n}} "
                         "(expected a summary.json of tiers trace)")
    g = from_dense(cm["bytes"], source=str(path))
    if "ranks" in cm and int(cm["ranks"]) != g.n:
        raise TiersError(f"{path}: comm_matrix says {cm['ranks']} ranks but the matrix is "
                         f"{g.n} x {g.n}")
    return g


def _read_csv(path: Path) -> Graph:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        rows.append([x for x in re.split(r"[,\s;]+", line) if x])
    try:
        m = np.array(rows, dtype=np.float64)
    except ValueError:
        widths = {len(r) for r in rows}
        if len(widths) > 1:
            raise TiersError(f"{path}: rows have different lengths {sorted(widths)}") from None
        raise TiersError(f"{path} holds non-numeric values") from None
    return from_dense(m, source=str(path))


def _numbers(text: str, path: Path) -> list[float]:
    try:
        return [float(x) for x in text.split()]
    except ValueError:
        raise TiersError(f"{path} holds non-numeric values") from None


def _read_mtx(path: Path) -> Graph:
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0].lower().startswith("%%matrixmarket"):
        raise TiersError(f"{path} is not a Matrix Market file (no %%MatrixMarket header)")
    head = lines[0].lower().split()
    fmt = head[2] if len(head) > 2 else "coordinate"
    sym = head[4] if len(head) > 4 else "general"
    body = [ln for ln in lines[1:] if ln.strip() and not ln.startswith("%")]
    if not body:
        raise TiersError(f"{path} has no size line")
    size = _numbers(body[0], path)
    if "pattern" in head:
        raise TiersError(f"{path} is a pattern matrix: bytes are needed")
    if "complex" in head:
        raise TiersError(f"{path} is a complex matrix: bytes are real numbers")
    if sym not in ("general", "symmetric"):
        raise TiersError(f"{path} is {sym}: a byte matrix is general or symmetric")
    if fmt == "array":
        nr, nc = int(size[0]), int(size[1])
        vals = np.array(_numbers(" ".join(body[1:]), path))
        if sym == "symmetric":
            # the lower triangle with the diagonal, column by column
            if nr != nc or vals.size != nr * (nr + 1) // 2:
                raise TiersError(f"{path}: {vals.size} values for the lower triangle of a "
                                 f"{nr} x {nc} symmetric matrix")
            m = np.zeros((nr, nr))
            cols, rows = np.triu_indices(nr)     # column-major lower = row-major upper
            m[rows, cols] = vals
            m = m + np.tril(m, -1).T
            return from_dense(m, source=str(path))
        if vals.size != nr * nc:
            raise TiersError(f"{path}: {vals.size} values for a {nr} x {nc} matrix")
        m = vals.reshape(nc, nr).T   # column-major
        return from_dense(m, source=str(path))
    nr, nc, nnz = int(size[0]), int(size[1]), int(size[2])
    if nr != nc:
        raise TiersError(f"{path} is {nr} x {nc}, not square")
    data = np.array(_numbers(" ".join(body[1:]), path))
    if data.size != 3 * nnz:
        raise TiersError(f"{path}: expected {nnz} entries of (row, col, bytes)")
    data = data.reshape(nnz, 3)
    r, c, w = data[:, 0].astype(np.int64) - 1, data[:, 1].astype(np.int64) - 1, data[:, 2]
    if sym == "symmetric":
        # one triangle is stored; entry (i, j) stands for both i -> j and j -> i
        w = np.where(r != c, 2 * w, w)
    return from_coo(nr, r, c, w, source=str(path))


def _read_metis(path: Path, scotch: bool) -> Graph:
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines()
             if not ln.lstrip().startswith("%")]
    if scotch:
        # Scotch source graph: version, "n m", "base flags" (flags: 3 digits,
        # labels / edge loads / vertex loads), then per vertex [label] [load] degree edges.
        nums = _numbers(" ".join(lines), path)
        if len(nums) < 5:
            raise TiersError(f"{path} is too short for a Scotch graph")
        n, m2, base = int(nums[1]), int(nums[2]), int(nums[3])
        flags = f"{int(nums[4]):03d}"
        has_label, has_eload, has_vload = flags[0] == "1", flags[1] == "1", flags[2] == "1"
        pos = 5
        rows, cols, ws = [], [], []
        try:
            for v in range(n):
                if has_label:
                    v_id = int(nums[pos]) - base
                    pos += 1
                else:
                    v_id = v
                if has_vload:
                    pos += 1
                deg = int(nums[pos])
                pos += 1
                for _ in range(deg):
                    w = nums[pos] if has_eload else 1.0
                    pos += 1 if has_eload else 0
                    rows.append(v_id)
                    cols.append(int(nums[pos]) - base)
                    ws.append(w)
                    pos += 1
        except IndexError:
            raise TiersError(f"{path} ends before its {n} vertices") from None
        if len(rows) != m2:
            raise TiersError(f"{path}: header says {m2} arcs, found {len(rows)}")
    else:
        body = [ln for ln in lines if ln.strip() or True]
        while body and not body[0].strip():
            body.pop(0)
        if not body:
            raise TiersError(f"{path} is empty")
        head = _numbers(body[0], path)
        n, m = int(head[0]), int(head[1])
        fmt = f"{int(head[2]):03d}" if len(head) > 2 else "000"
        has_vsize, has_vwgt, has_ewgt = fmt[0] == "1", fmt[1] == "1", fmt[2] == "1"
        ncon = int(head[3]) if len(head) > 3 else 1
        rows, cols, ws = [], [], []
        vlines = body[1:1 + n]
        if len(vlines) < n:
            raise TiersError(f"{path} has {len(vlines)} vertex lines for {n} vertices")
        for v, line in enumerate(vlines):
            nums = _numbers(line, path)
            skip = (1 if has_vsize else 0) + (ncon if has_vwgt else 0)
            nums = nums[skip:]
            step = 2 if has_ewgt else 1
            for j in range(0, len(nums) - step + 1, step):
                rows.append(v)
                cols.append(int(nums[j]) - 1)
                ws.append(nums[j + 1] if has_ewgt else 1.0)
        if len(rows) != 2 * m:
            raise TiersError(f"{path}: header says {m} edges, found {len(rows) // 2}")
    g = from_coo(n, rows, cols, ws, source=str(path))
    # The file lists each edge in both directions: from_coo summed them.
    g.adjwgt = g.adjwgt / 2
    return g


_READERS = {".json": "json", ".csv": "csv", ".txt": "csv", ".mtx": "mtx", ".mm": "mtx",
            ".graph": "metis", ".metis": "metis", ".grf": "scotch", ".src": "scotch"}


def read(path: str) -> Graph:
    """Return the communication graph in file ``path`` (format from the
    extension: .json, .csv/.txt, .mtx, .graph/.metis, .grf/.src).  Raise
    TiersError (one line) for a missing file, an unknown format or bad
    contents."""
    p = Path(path)
    kind = _READERS.get(p.suffix.lower())
    if kind is None:
        raise TiersError(f"unknown communication file format '{p.suffix or p.name}': use "
                         ".json (tiers trace summary), .csv, .mtx, .graph/.metis or .grf")
    if not p.is_file():
        raise TiersError(f"cannot read {p}: no such file")
    try:
        if kind == "json":
            return _read_json(p)
        if kind == "csv":
            return _read_csv(p)
        if kind == "mtx":
            return _read_mtx(p)
        return _read_metis(p, scotch=kind == "scotch")
    except (OSError, UnicodeDecodeError) as exc:
        raise TiersError(f"cannot read {p}: {exc}") from None


# --------------------------------------------------------------------------
# Structured grids


def parse_stencil(spec: str) -> tuple[list[int], list[int]]:
    """Parse ``3d:NX,NY,NZ:gx,gy,gz`` (or ``2d:NX,NY:gx,gy``) and return
    ``(parts, points)``: subdomains per axis and grid points per subdomain."""
    m = re.fullmatch(r"([23])d:([\d,x]+):([\d,x]+)", spec.strip().lower())
    if not m:
        raise TiersError(f"bad stencil '{spec}': use 3d:NX,NY,NZ:gx,gy,gz or 2d:NX,NY:gx,gy")
    dim = int(m.group(1))
    parts = [int(x) for x in re.split("[,x]", m.group(2)) if x]
    points = [int(x) for x in re.split("[,x]", m.group(3)) if x]
    if len(parts) != dim or len(points) != dim or min(parts + points) < 1:
        raise TiersError(f"bad stencil '{spec}': {dim}d needs {dim} positive subdomain counts "
                         f"and {dim} positive sizes")
    return parts, points


#: How subdomains are numbered: ``x-fastest`` (rank = x + NX*(y + NY*z), as a
#: Fortran code or seed 002 numbers them) or ``cart`` (the last axis fastest,
#: rank = z + NZ*(y + NY*x), as MPI_Cart_create numbers them).
NUMBERINGS = ("x-fastest", "cart")


def stencil(parts, points, bytes_per_point: int = BYTES_PER_POINT, *,
            periodic: bool = False, numbering: str = "x-fastest") -> Graph:
    """Return the graph of a structured grid cut into ``parts`` subdomains
    per axis of ``points`` grid points each, subdomains numbered as
    ``numbering`` says (see NUMBERINGS): neighbours across a face exchange
    one layer of the face in each direction (face points x
    ``bytes_per_point``), as a Jacobi sweep does."""
    if numbering not in NUMBERINGS:
        raise TiersError(f"unknown numbering {numbering!r} (x-fastest or cart)")
    parts = [int(p) for p in parts]
    points = [int(p) for p in points]
    dim = len(parts)
    n = int(np.prod(parts))
    idx = np.arange(n, dtype=np.int64)
    # Axes from the fastest-varying to the slowest.
    axes = list(range(dim)) if numbering == "x-fastest" else list(reversed(range(dim)))
    coords = [None] * dim
    strides = [0] * dim
    rest, stride = idx, 1
    for a in axes:
        coords[a] = rest % parts[a]
        rest = rest // parts[a]
        strides[a] = stride
        stride *= parts[a]
    rows, cols, ws = [], [], []
    for a in range(dim):
        stride = strides[a]
        face = int(np.prod([points[b] for b in range(dim) if b != a])) * bytes_per_point
        if parts[a] > 1:
            if periodic and parts[a] > 2:
                sel = idx
                nb = idx + np.where(coords[a] == parts[a] - 1, -(parts[a] - 1) * stride, stride)
            else:
                sel = idx[coords[a] < parts[a] - 1]
                nb = sel + stride
            rows.append(sel)
            cols.append(nb)
            ws.append(np.full(sel.size, 2.0 * face))   # both directions
    if rows:
        g = from_coo(n, np.concatenate(rows), np.concatenate(cols), np.concatenate(ws),
                     symmetric=True)
    else:
        g = Graph(n, np.zeros(n + 1, np.int64), np.zeros(0, np.int32), np.zeros(0))
    g.source = f"{dim}d:{','.join(map(str, parts))}:{','.join(map(str, points))}" + \
        (" (cart numbering)" if numbering == "cart" else "")
    return g
