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

import bisect
import json
import math
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
    #: per CSR entry, the bytes rank v sends to ``adjncy[e]`` (the rest of
    #: ``adjwgt[e]`` goes the other way); None: half each way
    adjsent: np.ndarray | None = None
    #: per rank, its subdomain's position on the grid (n x dim), or None
    coords: np.ndarray | None = None
    #: with ``coords``: subdomains per axis, and the bytes of one face
    #: neighbour pair across each axis (both directions)
    grid: tuple | None = None
    #: how the volumes were derived (e.g. per exchange of a trace), or ""
    volume_note: str = ""

    @property
    def edges(self) -> int:
        """Return the number of undirected edges."""
        return int(self.adjncy.size // 2)

    def _cached(self, name: str, make):
        """Return ``make()``, kept while the graph's arrays are the same
        objects (a placement's metrics reuse the edge lists)."""
        arrays = (self.xadj, self.adjncy, self.adjwgt, self.adjsent)
        key = (name,) + tuple(id(a) for a in arrays)
        cache = self.__dict__.setdefault("_derived", {})
        if key not in cache:
            if len(cache) > 8:
                cache.clear()
            # the arrays are kept with the result, so their ids stay theirs
            cache[key] = (arrays, make())
        return cache[key][1]

    def edge_list(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return ``(u, v, bytes)`` of every undirected edge once (u < v)."""
        def make():
            src = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.xadj))
            keep = src < self.adjncy
            return src[keep], self.adjncy[keep].astype(np.int64), self.adjwgt[keep]
        return self._cached("edges", make)

    def total_bytes(self) -> float:
        """Return the bytes of all edges (each edge once)."""
        return float(self.adjwgt.sum() / 2)

    def sent(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return ``(src, dst, bytes)`` of every direction of every edge
        with traffic: ``src`` sends ``bytes`` to ``dst`` in one exchange
        (half of the pair's bytes each way when the input gave no
        direction)."""
        def make():
            src = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.xadj))
            dst = self.adjncy.astype(np.int64)
            out = self.adjwgt / 2 if self.adjsent is None else self.adjsent
            return src, dst, out
        return self._cached("sent", make)

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
    # what row r sends to c: the entry as given, nothing for its mirror
    sw = np.concatenate([w / 2, w / 2]) if symmetric else np.concatenate([w, np.zeros_like(w)])
    key = r * n + c
    order = np.argsort(key, kind="stable")
    key, ww, sw = key[order], ww[order], sw[order]
    if key.size:
        first = np.concatenate([[True], key[1:] != key[:-1]])
        starts = np.flatnonzero(first)
        ww = np.add.reduceat(ww, starts)
        sw = np.add.reduceat(sw, starts)
        key = key[starts]
    r, c = key // n, key % n
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=n), out=xadj[1:])
    return Graph(n, xadj, c.astype(np.int32), ww.astype(np.float64), source,
                 adjsent=None if symmetric else sw.astype(np.float64))


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
#
# Every reader refuses bad input with one TiersError line that names the file
# and the line (or the JSON field) at fault.  Nothing is allocated from what a
# header claims: counts in headers are checked against what the file really
# holds, and the rank count against max_ranks(), before any array is made.


def max_ranks() -> int:
    """Return the most ranks a communication graph may have on this machine:
    one per 4 KiB of physical memory (the mapping keeps several arrays and a
    Scotch graph per rank), and never more than 2**31 - 1 (ranks are 32-bit
    ints in Scotch and MPI)."""
    from .. import validate

    return int(max(1 << 16, min(validate.machine_memory() // 4096, 2**31 - 1)))


def _fail(path: Path, line: int | None, message: str) -> TiersError:
    """Return the error for ``path`` (at ``line`` when given)."""
    where = f"{path}, line {line}" if line else f"{path}"
    return TiersError(f"{where}: {message}")


def _text(path: Path) -> str:
    """Return the text of ``path`` (UTF-8), or raise naming the first line
    that is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _fail(path, line, f"not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


_INT = re.compile(r"[+-]?[0-9]+")


def _int(tok: str, path: Path, line: int, what: str, lo: int = 0, hi: int | None = None) -> int:
    """Return token ``tok`` as a whole number in ``lo..hi``."""
    if not _INT.fullmatch(tok):
        raise _fail(path, line, f"{what} '{tok[:40]}' is not a whole number")
    v = int(tok) if len(tok) <= 40 else (-1 if tok[0] == "-" else 1) * 10**40
    if v < lo or (hi is not None and v > hi):
        if hi is None:
            raise _fail(path, line, f"{what} {tok[:40]} is less than {lo}")
        raise _fail(path, line, f"{what} {tok[:40]} is outside {lo}..{hi}")
    return v


def _weight(tok: str, path: Path, line: int, what: str = "weight") -> float:
    """Return token ``tok`` as a finite, non-negative number of bytes."""
    try:
        v = float(tok)
    except ValueError:
        raise _fail(path, line, f"non-numeric {what} '{tok[:40]}'") from None
    if not math.isfinite(v):
        raise _fail(path, line, f"{what} '{tok[:40]}' is not a finite number")
    if v < 0:
        raise _fail(path, line, f"negative weight {tok[:40]}")
    return v


def _check_n(n: int, path: Path, line: int | None, what: str) -> int:
    """Return ``n`` when it is a usable rank count; ``what`` says where the
    count comes from (``"the matrix has 5 rows"``)."""
    limit = max_ranks()
    if n > limit:
        raise _fail(path, line, f"{what}: more ranks than this machine can map "
                                f"({limit} at most)")
    return n


def _dense(rows, path: Path, field: str) -> Graph:
    """Return the graph of the n x n list of lists ``rows`` read from
    ``path``; ``field`` names it in messages (``comm_matrix.bytes``)."""
    if not isinstance(rows, list) or not rows:
        raise _fail(path, None, f"{field} is not a non-empty list of rows")
    n = len(rows)
    _check_n(n, path, None, f"{field} has {n} rows")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != n:
            got = f"{len(row)} values" if isinstance(row, list) else type(row).__name__
            raise _fail(path, None, f"{field}[{i}] is {got}, not a row of {n} (n x n)")
    try:
        m = np.array(rows)          # numbers only: strings or booleans give another kind
        ok = m.dtype.kind in "iuf" and m.shape == (n, n)
        if ok:
            m = m.astype(np.float64)
            ok = bool(np.all(np.isfinite(m))) and bool(np.all(m >= 0))
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        for i, row in enumerate(rows):
            for j, x in enumerate(row):
                bad = (isinstance(x, bool) or not isinstance(x, (int, float))
                       or (isinstance(x, int) and abs(x) > 2**1000)
                       or not math.isfinite(float(x)) or x < 0)
                if bad:
                    what = "negative weight" if isinstance(x, (int, float)) and \
                        not isinstance(x, bool) and x < 0 else "non-numeric or infinite value"
                    raise _fail(path, None, f"{field}[{i}][{j}] is {str(x)[:40]}: {what}")
        m = np.array(rows, dtype=np.float64)    # whole numbers past 2**64, all valid
    r, c = np.nonzero(m)
    return from_coo(n, r, c, m[r, c], source=str(path))


def _read_json(path: Path) -> Graph:
    doc = load_json(path)
    cm = None
    if isinstance(doc, dict):
        cm = doc.get("comm_matrix")
        if cm is None and isinstance(doc.get("summary"), dict):
            cm = doc["summary"].get("comm_matrix")
    if not isinstance(cm, dict) or "bytes" not in cm:
        raise TiersError(f"{path} has no \"comm_matrix\": {{\"bytes\": n x n}} "
                         "(expected a summary.json of tiers trace)")
    g = _dense(cm["bytes"], path, "comm_matrix.bytes")
    if "ranks" in cm:
        ranks = cm["ranks"]
        if isinstance(ranks, bool) or not isinstance(ranks, int):
            raise _fail(path, None, f"comm_matrix.ranks is {str(ranks)[:40]}, not a whole number")
        if ranks != g.n:
            raise TiersError(f"{path}: comm_matrix says {ranks} ranks but the matrix is "
                             f"{g.n} x {g.n}")
    return g


#: JSON documents nested deeper than this are refused (a result document
#: needs a handful of levels; Python's reader recurses once per level).
MAX_JSON_DEPTH = 200


def load_json(path: str | Path):
    """Return the JSON value in file ``path``; raise TiersError (one line
    naming the file and where) when it cannot be read, is not UTF-8, is not
    JSON or is nested deeper than MAX_JSON_DEPTH."""
    path = Path(path)
    try:
        text = _text(path)
    except OSError as exc:
        raise TiersError(f"cannot read {path}: {exc.strerror or exc}") from None
    depth = _json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise TiersError(f"{path}: JSON nested {depth} levels deep (at most {MAX_JSON_DEPTH})")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TiersError(f"{path} is not JSON: {exc}") from None
    except RecursionError:
        raise TiersError(f"{path}: JSON nested too deeply to read") from None


_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


def _json_depth(text: str) -> int:
    """Return the deepest nesting of arrays and objects in JSON ``text``
    (strings skipped; an unbalanced text gives what it reached)."""
    if "[[[" not in text and "{" not in text and text.count("[") < MAX_JSON_DEPTH:
        return text.count("[")
    depth = deepest = 0
    for m in _BRACKETS.finditer(text):
        ch = m.group()
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _lines(text: str):
    """Yield ``(line number, stripped line)`` of the lines of ``text`` that
    are neither blank nor comments (``%`` or ``#``)."""
    for i, ln in enumerate(text.splitlines(), 1):
        ln = ln.strip()
        if ln and ln[0] not in "%#":
            yield i, ln


def _read_csv(path: Path) -> Graph:
    rows, where = [], []
    for i, ln in _lines(_text(path)):
        row = [x for x in re.split(r"[,\s;]+", ln) if x]
        if rows and len(row) != len(rows[0]):
            raise _fail(path, i, f"rows have different lengths: {len(row)} values here, "
                                 f"{len(rows[0])} on line {where[0]}")
        if not rows:
            _check_n(len(row), path, i, f"a row of {len(row)} values")
        rows.append(row)
        where.append(i)
        if len(rows) > len(rows[0]):
            raise _fail(path, i, f"more than {len(rows[0])} rows of {len(rows[0])} values: "
                                 "the matrix is not square")
    if not rows:
        raise TiersError(f"{path} holds no matrix")
    try:
        m = np.array(rows, dtype=np.float64)
        ok = bool(np.all(np.isfinite(m))) and bool(np.all(m >= 0))
    except ValueError:
        ok = False
    if not ok:
        m = np.array([[_weight(tok, path, i, "value") for tok in row]
                      for row, i in zip(rows, where)], dtype=np.float64)
    if m.shape[0] != m.shape[1]:
        raise TiersError(f"{path}: the matrix is {m.shape[0]} x {m.shape[1]}, not square n x n")
    r, c = np.nonzero(m)
    return from_coo(m.shape[0], r, c, m[r, c], source=str(path))


def _read_mtx(path: Path) -> Graph:
    text = _text(path)
    lines = text.splitlines()
    if not lines or not lines[0].lower().startswith("%%matrixmarket"):
        raise _fail(path, 1, "not a Matrix Market file (no %%MatrixMarket header)")
    head = lines[0].lower().split()
    if len(head) != 5:
        raise _fail(path, 1, "the header must be '%%MatrixMarket matrix FORMAT FIELD "
                             "SYMMETRY'")
    _, obj, fmt, field, sym = head
    if obj != "matrix":
        raise _fail(path, 1, f"a Matrix Market {obj[:20]}, not a matrix")
    if fmt not in ("coordinate", "array"):
        raise _fail(path, 1, f"format {fmt[:20]}: coordinate or array")
    if field == "pattern":
        raise TiersError(f"{path} is a pattern matrix: bytes are needed")
    if field == "complex":
        raise TiersError(f"{path} is a complex matrix: bytes are real numbers")
    if field not in ("real", "integer", "double"):
        raise _fail(path, 1, f"field {field[:20]}: real or integer")
    if sym not in ("general", "symmetric"):
        raise TiersError(f"{path} is {sym[:20]}: a byte matrix is general or symmetric")
    body = [(i, ln) for i, ln in enumerate(lines[1:], 2)
            if ln.strip() and not ln.lstrip().startswith("%")]
    if not body:
        raise _fail(path, None, "no size line")
    size_line, size_text = body[0]
    size = size_text.split()
    want = 3 if fmt == "coordinate" else 2
    if len(size) != want:
        raise _fail(path, size_line, "the size line must be 'ROWS COLUMNS ENTRIES'"
                    if fmt == "coordinate" else "the size line must be 'ROWS COLUMNS'")
    limit = max_ranks()
    nr = _int(size[0], path, size_line, "the row count", 1, limit)
    nc = _int(size[1], path, size_line, "the column count", 1, limit)
    if nr != nc:
        raise _fail(path, size_line, f"the matrix is {nr} x {nc}, not square")
    entries = body[1:]
    if fmt == "array":
        toks, where = [], []
        for i, ln in entries:
            t = ln.split()
            toks.extend(t)
            where.extend([i] * len(t))
        expect = nr * (nr + 1) // 2 if sym == "symmetric" else nr * nr
        if len(toks) != expect:
            if sym == "symmetric":
                raise _fail(path, None, f"{len(toks)} values for the lower triangle of a "
                                        f"{nr} x {nr} symmetric matrix ({expect} needed)")
            raise _fail(path, None, f"{len(toks)} values for a {nr} x {nr} matrix "
                                    f"({expect} needed)")
        vals = _numbers_checked(toks, where, path)
        if sym == "symmetric":
            # the lower triangle with the diagonal, column by column
            cols, rows = np.triu_indices(nr)     # column-major lower = row-major upper
            w = np.where(rows != cols, 2 * vals, vals)
        else:
            k = np.arange(vals.size, dtype=np.int64)
            rows, cols, w = k % nr, k // nr, vals   # column-major
        keep = w != 0
        return from_coo(nr, rows[keep], cols[keep], w[keep], source=str(path),
                        symmetric=sym == "symmetric")
    nnz = _int(size[2], path, size_line, "the entry count", 0)
    if nnz != len(entries):
        raise _fail(path, size_line, f"the size line says {nnz} entries, the file has "
                                     f"{len(entries)} entry lines")
    toks = []
    for i, ln in entries:
        t = ln.split()
        if len(t) != 3:
            raise _fail(path, i, f"{len(t)} values: an entry is 'ROW COLUMN BYTES'")
        toks.append(t)
    where = [i for i, _ in entries]

    def entry(t: list[str], i: int) -> tuple[int, int, float]:
        return (_int(t[0], path, i, "the row index", 1, nr),
                _int(t[1], path, i, "the column index", 1, nr), _weight(t[2], path, i))

    try:
        data = np.array(toks, dtype=np.float64).reshape(-1, 3)
        ok = bool(np.all(np.isfinite(data)))
    except ValueError:
        ok = False
    if not ok:
        data = np.array([entry(t, i) for t, i in zip(toks, where)],
                        dtype=np.float64).reshape(-1, 3)
    idx = data[:, :2]
    badidx = (idx != np.floor(idx)) | (idx < 1) | (idx > nr)
    badw = data[:, 2] < 0
    bad = np.flatnonzero(badidx.any(axis=1) | badw)
    if bad.size:
        k = int(bad[0])
        t, i = toks[k], where[k]
        entry(t, i)
        raise _fail(path, i, f"bad entry {' '.join(t)[:60]}")
    r = idx[:, 0].astype(np.int64) - 1
    c = idx[:, 1].astype(np.int64) - 1
    w = data[:, 2]
    if sym == "symmetric":
        # one triangle is stored; entry (i, j) stands for both i -> j and j -> i
        w = np.where(r != c, 2 * w, w)
    return from_coo(nr, r, c, w, source=str(path), symmetric=sym == "symmetric")


def _numbers_checked(toks: list[str], where: list[int], path: Path) -> np.ndarray:
    """Return the tokens as finite non-negative floats, or raise naming the
    line of the first that is not one."""
    try:
        vals = np.array(toks, dtype=np.float64)
        if np.all(np.isfinite(vals)) and np.all(vals >= 0):
            return vals
    except ValueError:
        pass
    return np.array([_weight(t, path, i, "value") for t, i in zip(toks, where)],
                    dtype=np.float64)


def _read_metis(path: Path) -> Graph:
    # METIS: "n m [fmt [ncon]]", then one line per vertex: [size] [ncon
    # weights] then neighbours (1-based), each followed by the edge weight
    # when fmt ends in 1.  Comment lines start with %.
    lines = [(i, ln) for i, ln in enumerate(_text(path).splitlines(), 1)
             if not ln.lstrip().startswith("%")]
    while lines and not lines[0][1].strip():
        lines.pop(0)
    if not lines:
        raise TiersError(f"{path} is empty")
    hline, htext = lines[0]
    head = htext.split()
    if not 2 <= len(head) <= 4:
        raise _fail(path, hline, "the header must be 'VERTICES EDGES [FMT [NCON]]'")
    n = _int(head[0], path, hline, "the vertex count", 1, max_ranks())
    vlines = lines[1:]
    while len(vlines) > n and not vlines[-1][1].strip():
        vlines.pop()        # blank lines past the last vertex (a vertex line may be blank)
    m = _int(head[1], path, hline, "the edge count", 0)
    fmt = head[2] if len(head) > 2 else "0"
    if not re.fullmatch(r"[01]{1,3}", fmt):
        raise _fail(path, hline, f"fmt '{fmt[:20]}': up to three digits 0 or 1 (e.g. 001)")
    fmt = fmt.rjust(3, "0")
    has_vsize, has_vwgt, has_ewgt = fmt[0] == "1", fmt[1] == "1", fmt[2] == "1"
    ncon = _int(head[3], path, hline, "ncon", 1, 1024) if len(head) > 3 else 1
    if len(vlines) < n:
        raise TiersError(f"{path} has {len(vlines)} vertex lines for {n} vertices")
    if len(vlines) > n:
        raise _fail(path, vlines[n][0], f"more lines than the {n} vertices the header names")
    if m > sum(len(ln) for _, ln in vlines):
        raise _fail(path, hline, f"the header says {m} edges: the file is too short for them")
    rows, cols, ws = [], [], []
    skip = (1 if has_vsize else 0) + (ncon if has_vwgt else 0)
    step = 2 if has_ewgt else 1
    for v, (i, ln) in enumerate(vlines):
        toks = ln.split()
        if len(toks) < skip:
            raise _fail(path, i, f"vertex {v + 1} has {len(toks)} values, its size and weights "
                                 f"need {skip}")
        for t in toks[:skip]:
            _int(t, path, i, "a vertex size or weight", 0)
        toks = toks[skip:]
        if len(toks) % step:
            raise _fail(path, i, f"vertex {v + 1}: neighbours and edge weights do not pair up")
        for j in range(0, len(toks), step):
            rows.append(v)
            cols.append(_int(toks[j], path, i, "a neighbour", 1, n) - 1)
            ws.append(_weight(toks[j + 1], path, i) if has_ewgt else 1.0)
    if len(rows) != 2 * m:
        raise TiersError(f"{path}: header says {m} edges, found {len(rows) / 2:g} "
                         "(each edge is listed from both ends)")
    g = from_coo(n, rows, cols, ws, source=str(path))
    g.adjwgt = g.adjwgt / 2   # each edge was listed from both ends: from_coo summed them
    g.adjsent = None          # an undirected graph: half each way
    return g


def _read_scotch(path: Path) -> Graph:
    # Scotch source graph: version, "n m", "base flags" (flags: 3 digits,
    # labels / edge loads / vertex loads), then per vertex [label] [load]
    # degree, then degree times [edge load] neighbour.
    toks, starts, nums = [], [], []
    for i, ln in enumerate(_text(path).splitlines(), 1):
        t = ln.split()
        if t and not t[0].startswith("%"):
            starts.append(len(toks))
            nums.append(i)
            toks.extend(t)

    def line_of(k: int) -> int:
        return nums[max(0, bisect.bisect_right(starts, k) - 1)] if nums else 1

    pos = 0

    def take(what: str, lo: int = 0, hi: int | None = None) -> int:
        nonlocal pos
        if pos >= len(toks):
            raise _fail(path, line_of(len(toks) - 1) if toks else None,
                        f"the file ends before {what}")
        v = _int(toks[pos], path, line_of(pos), what, lo, hi)
        pos += 1
        return v

    if len(toks) < 5:
        raise TiersError(f"{path} is too short for a Scotch graph")
    take("the version", 0, 2)
    n = take("the vertex count", 1, max_ranks())
    m2 = take("the arc count", 0)
    base = take("the base", 0, 1)
    fpos = pos
    flags = toks[pos]
    pos += 1
    if not re.fullmatch(r"[01]{1,3}", flags):
        raise _fail(path, line_of(fpos), f"flags '{flags[:20]}': up to three digits 0 or 1")
    flags = flags.rjust(3, "0")
    has_label, has_eload, has_vload = flags[0] == "1", flags[1] == "1", flags[2] == "1"
    per_vertex = 1 + has_label + has_vload
    if n * per_vertex + m2 * (1 + has_eload) > len(toks) - pos:
        raise _fail(path, line_of(len(toks) - 1),
                    f"the file ends before its {n} vertices and {m2} arcs")
    rows, cols, ws = [], [], []
    for v in range(n):
        v_id = take("a vertex label", base, base + n - 1) - base if has_label else v
        if has_vload:
            take("a vertex load", 0)
        deg = take("a degree", 0, n)
        for _ in range(deg):
            if has_eload:
                if pos >= len(toks):
                    raise _fail(path, line_of(len(toks) - 1), "the file ends before an arc")
                w = _weight(toks[pos], path, line_of(pos), "edge load")
                pos += 1
            else:
                w = 1.0
            cols.append(take("a neighbour", base, base + n - 1) - base)
            rows.append(v_id)
            ws.append(w)
    if len(rows) != m2:
        raise TiersError(f"{path}: header says {m2} arcs, found {len(rows)}")
    if pos != len(toks):
        raise _fail(path, line_of(pos), f"more values than its {n} vertices hold")
    g = from_coo(n, rows, cols, ws, source=str(path))
    g.adjwgt = g.adjwgt / 2   # each arc is listed from both ends: from_coo summed them
    g.adjsent = None          # an undirected graph: half each way
    return g


_READERS = {".json": "json", ".csv": "csv", ".txt": "csv", ".mtx": "mtx", ".mm": "mtx",
            ".graph": "metis", ".metis": "metis", ".grf": "scotch", ".src": "scotch"}


def read_trace_folder(folder: Path) -> Graph:
    """Return the graph of a ``tiers trace`` folder (its ``summary.json``),
    with the bytes of one exchange when the iteration count shows in the
    trace -- every communicating pair exchanged the same number k of
    messages each way, so the program ran k exchanges -- and the total of
    the run otherwise.  ``volume_note`` says which."""
    summary = folder / "summary.json"
    if not summary.is_file():
        raise TiersError(f"{folder} is a folder without summary.json: give a tiers trace "
                         "folder (tiers trace --out DIR) or a communication file")
    g = _read_json(summary)
    doc = load_json(summary)
    cm = doc.get("comm_matrix") or (doc.get("summary") or {}).get("comm_matrix") or {}
    msgs = cm.get("messages") if isinstance(cm, dict) else None
    counts = None
    if isinstance(msgs, list) and len(msgs) == g.n:
        try:
            m = np.asarray(msgs, dtype=np.float64)
            b = np.asarray(cm["bytes"], dtype=np.float64)
            if m.shape == (g.n, g.n):
                counts = m[b > 0]
        except (TypeError, ValueError):
            counts = None
    if counts is not None and counts.size and np.all(counts == counts[0]) and counts[0] >= 1:
        k = int(counts[0])
        g.adjwgt = g.adjwgt / k
        if g.adjsent is not None:
            g.adjsent = g.adjsent / k
        g.volume_note = (f"bytes of one exchange: every communicating pair sent {k} "
                         f"message{'s' if k != 1 else ''} each way, taken as {k} iteration"
                         f"{'s' if k != 1 else ''} of the traced run")
    else:
        g.volume_note = ("bytes of the whole traced run: the iteration count is unknown "
                         "(pairs exchanged different numbers of messages)")
    g.source = str(folder)
    return g


def read(path: str) -> Graph:
    """Return the communication graph in file ``path`` (format from the
    extension: .json, .csv/.txt, .mtx, .graph/.metis, .grf/.src).  Raise
    TiersError (one line naming the file and the line or field at fault)
    for a missing file, an unknown format or bad contents."""
    p = Path(path)
    if p.is_dir():
        return read_trace_folder(p)
    kind = _READERS.get(p.suffix.lower())
    if kind is None:
        raise TiersError(f"unknown communication file format '{p.suffix or p.name}': use "
                         ".json (tiers trace summary), .csv, .mtx, .graph/.metis or .grf")
    if not p.is_file():
        raise TiersError(f"cannot read {p}: no such file")
    readers = {"json": _read_json, "csv": _read_csv, "mtx": _read_mtx, "metis": _read_metis,
               "scotch": _read_scotch}
    try:
        return readers[kind](p)
    except OSError as exc:
        raise TiersError(f"cannot read {p}: {exc.strerror or exc}") from None
    except MemoryError:
        raise TiersError(f"{p} is too large to read into memory") from None


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
#: Fortran code or the AFC mapping paper numbers them) or ``cart`` (the last axis fastest,
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
    g.coords = np.stack(coords, axis=1).astype(np.int32)
    g.grid = (tuple(parts), tuple(
        2.0 * int(np.prod([points[b] for b in range(dim) if b != a])) * bytes_per_point
        for a in range(dim)))
    return g


# --------------------------------------------------------------------------
# Grids read from a file


def recover_grid(g: Graph) -> bool:
    """Recognise a graph that is a 2-D or 3-D grid of face exchanges in any
    numbering (every rank a grid point, edges exactly the face neighbours,
    the same bytes across each axis, as a shuffled ``--stencil`` read from
    a file) and give it grid coordinates (``coords``, ``grid``), so that
    the geometric candidate applies.  Return whether it did; the graph is
    unchanged otherwise.  Cost: one breadth-first search per dimension, in
    libtiers (``tiers_map_grid``)."""
    if g.coords is not None or g.n < 4:
        return False
    from . import core
    found = core.grid(g)
    if found is None:
        return False
    g.coords, sizes, pair = found
    g.grid = (sizes, pair)
    return True
