"""Every value a user gives tiers is checked here, before any work starts:
one function per kind of value (byte sizes, counts, real numbers,
durations, lists, paths, seeds, rank counts), with limits derived from the
machine where a fixed limit would be wrong (memory for buffers, cores for
ranks).

Each ``parse_*`` function takes the text and the option it came from and
returns the value, or raises :class:`tiers.errors.TiersError` (exit
status 2) with one line that names the option and says what is allowed,
e.g. ``--ranks: 100000 ranks on 2 cores is more than the limit of 128 (64
per core)``.  The factories at the end (:func:`size`, :func:`count`, ...)
wrap them as argparse ``type=`` callables: argparse lets a TiersError
through untouched, so the command line prints that one line.

Limits stated once:

* counts that a native tool reads into a C ``int`` are at most 2^31 - 1;
* ranks are at most :data:`RANKS_PER_CORE` per core of the machine (or of
  the hostfile), whatever ``--oversubscribe`` says: beyond that a run
  measures nothing but the scheduler;
* buffer sizes are at most the memory of the machine;
* durations are finite, above zero and at most :data:`MAX_DURATION_S`.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .errors import TiersError

INT_MAX = 2**31 - 1
RANKS_PER_CORE = 64
MAX_DURATION_S = 7 * 24 * 3600.0  # one week
MAX_LIST_ITEMS = 4096
MAX_SEED = 2**31 - 1
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)([KMGT]?)(?:I?B)?$", re.IGNORECASE)
_INT_RE = re.compile(r"^[+-]?\d+$")


def _fail(option: str, message: str) -> TiersError:
    return TiersError(f"{option}: {message}" if option else message, code=2)


def _show(text) -> str:
    """The user's text, quoted and cut to a readable length for a message."""
    s = str(text)
    if len(s) > 40:
        s = s[:37] + "..."
    return repr(s) if isinstance(text, str) else s


def human_bytes(n: float) -> str:
    """Return ``n`` bytes as the size options write them when exact
    (``64K``, ``2G``), else in binary units, e.g. ``23.1 GiB``."""
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0 and n // scale < 1024:
            return f"{int(n) // scale}{unit}"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.0f} B"


# --------------------------------------------------------------------------
# The machine
# --------------------------------------------------------------------------

def machine_cores() -> int:
    """Return the number of CPUs this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_memory() -> int:
    """Return the physical memory of this machine in bytes (MemTotal), or
    1 TiB where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 40


def hostfile_slots(path) -> int | None:
    """Return the total slots of an Open MPI / MPICH hostfile (a host
    without ``slots=`` counts 1; ``host:N`` counts N), or None when the
    file cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    total = 0
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.search(r"\bslots\s*=\s*(\d+)", line) or re.match(r"^\S+:(\d+)$", line)
        total += min(int(m.group(1)), INT_MAX) if m else 1
    return total or None


# --------------------------------------------------------------------------
# Single values
# --------------------------------------------------------------------------

def parse_int(text, option: str, *, minimum: int = 0, maximum: int = INT_MAX,
              what: str = "a whole number") -> int:
    """Return the integer of ``text`` (an int or decimal digits) within
    [minimum, maximum]."""
    if isinstance(text, bool):
        raise _fail(option, f"{text!r} is not {what}")
    if isinstance(text, int):
        v = text
    else:
        s = str(text).strip()
        if not _INT_RE.match(s):
            raise _fail(option, f"{_show(text)} is not {what}")
        if len(s.lstrip("+-")) > 30:
            raise _fail(option, f"{_show(text)} is far too large (at most {maximum})")
        v = int(s)
    if v < minimum:
        raise _fail(option, f"{v} is below the minimum of {minimum}")
    if v > maximum:
        raise _fail(option, f"{v} is more than the limit of {maximum}")
    return v


def parse_real(text, option: str, *, minimum: float | None = None,
               maximum: float | None = None, above: float | None = None,
               what: str = "a number") -> float:
    """Return the finite real of ``text``: at least ``minimum``, above
    ``above`` (exclusive), at most ``maximum``; nan and inf are refused."""
    try:
        v = float(text) if not isinstance(text, bool) else math.nan
    except (TypeError, ValueError):
        raise _fail(option, f"{_show(text)} is not {what}") from None
    if not math.isfinite(v):
        raise _fail(option, f"{_show(text)} is not a finite number")
    if above is not None and not v > above:
        raise _fail(option, f"{v:g} must be above {above:g}")
    if minimum is not None and v < minimum:
        raise _fail(option, f"{v:g} is below the minimum of {minimum:g}")
    if maximum is not None and v > maximum:
        raise _fail(option, f"{v:g} is above the maximum of {maximum:g}")
    return v


def parse_duration(text, option: str, *, maximum: float = MAX_DURATION_S,
                   allow_zero: bool = False) -> float:
    """Return a duration in seconds: finite, above zero (or zero when
    ``allow_zero``), at most ``maximum``."""
    v = parse_real(text, option, what="a number of seconds")
    if v < 0 or (v == 0 and not allow_zero):
        raise _fail(option, f"{v:g} s is not a duration: give a number of seconds above 0")
    if v > maximum:
        raise _fail(option, f"{v:g} s is more than the limit of {maximum:g} s")
    return v


def parse_size(text, option: str, *, minimum: int = 0, maximum: int | None = None,
               limit_name: str = "") -> int:
    """Return the bytes of a size: an int, or text such as ``4096``,
    ``64K``, ``1.5M``, ``2GiB`` (powers of 1024).  ``maximum`` defaults to
    2^63 - 1; ``limit_name`` says what the maximum is (e.g. "the memory of
    this machine")."""
    if isinstance(text, bool):
        raise _fail(option, f"{text!r} is not a size")
    if isinstance(text, int):
        v = text
    else:
        s = str(text).strip()
        m = _SIZE_RE.match(s)
        if not m or len(m.group(1)) > 30:
            raise _fail(option, f"{_show(text)} is not a size (use bytes such as 4096, 64K, "
                        "512M or 2G)")
        v = float(m.group(1)) * _UNITS[m.group(2).upper()]
        if not math.isfinite(v) or v >= 2**63:
            raise _fail(option, f"{_show(text)} is far too large")
        v = int(v)
    top = 2**63 - 1 if maximum is None else maximum
    if v < minimum:
        raise _fail(option, f"{_show(text)} is below the minimum of {human_bytes(minimum)}")
    if v > top:
        where = f" ({limit_name})" if limit_name else ""
        raise _fail(option, f"{_show(text)} is more than the limit of "
                    f"{human_bytes(top)}{where}")
    return v


def parse_buffer_size(text, option: str, *, minimum: int = 0, copies: int = 1) -> int:
    """Return a size that ``copies`` buffers of which must fit in the
    memory of this machine."""
    mem = machine_memory()
    what = "the memory of this machine" if copies == 1 else \
        f"the memory of this machine over {copies} buffers"
    return parse_size(text, option, minimum=minimum, maximum=mem // copies, limit_name=what)


def parse_path(text, option: str) -> str:
    """Return a path: non-empty, without NUL bytes or newlines."""
    s = str(text) if text is not None else ""
    if not s.strip():
        raise _fail(option, "the path is empty")
    if "\0" in s or "\n" in s:
        raise _fail(option, f"{_show(s)} is not a usable path (NUL or newline)")
    return s


def parse_input_file(text, option: str) -> str:
    """Return the path of a file to read: non-empty, existing, a regular
    file (or a device such as /dev/stdin), readable."""
    s = parse_path(text, option)
    p = Path(s)
    if not p.exists():
        raise _fail(option, f"{s}: no such file")
    if p.is_dir():
        raise _fail(option, f"{s} is a folder, not a file")
    if not os.access(p, os.R_OK):
        raise _fail(option, f"{s}: permission denied")
    return s


def parse_seed(text, option: str = "--seed") -> int:
    """Return a random seed: a whole number from 0 to 2^31 - 1."""
    return parse_int(text, option, minimum=0, maximum=MAX_SEED,
                     what="a seed (a whole number from 0)")


def parse_word(text, option: str, choices: Sequence[str]) -> str:
    """Return ``text`` if it is one of ``choices``."""
    s = str(text).strip()
    if s not in choices:
        raise _fail(option, f"unknown value {_show(text)} (choose among {', '.join(choices)})")
    return s


def parse_args_string(text, option: str) -> list[str]:
    """Return the words of a shell-quoted option string such as
    ``"--mca btl self,vader"``."""
    try:
        return shlex.split(str(text))
    except ValueError as exc:
        raise _fail(option, f"cannot split {_show(text)}: {exc}") from None


# --------------------------------------------------------------------------
# Lists
# --------------------------------------------------------------------------

def split_list(text, option: str, *, max_items: int = MAX_LIST_ITEMS) -> list[str]:
    """Return the comma-separated items of ``text``; refuse an empty list,
    an empty item (``1,,2``, a leading or trailing comma) and more than
    ``max_items`` items."""
    if isinstance(text, (list, tuple)):
        items = [str(v).strip() for v in text]
    else:
        items = [w.strip() for w in str(text if text is not None else "").split(",")]
    if items == [""] or not items:
        raise _fail(option, "the list is empty")
    if any(not w for w in items):
        raise _fail(option, f"{_show(text)} has an empty item (write items such as 1,2,4)")
    if len(items) > max_items:
        raise _fail(option, f"{len(items)} items are more than the limit of {max_items}")
    return items


def parse_count_list(text, option: str, *, minimum: int = 1, maximum: int = INT_MAX,
                     ranges: bool = True, duplicates: bool = False,
                     what: str = "count") -> list[int]:
    """Return the integers of ``"1,2,4"`` (and ``"1-4"`` ranges when
    ``ranges``), each within [minimum, maximum], in the order given;
    duplicates refused unless ``duplicates``."""
    out: list[int] = []
    for w in split_list(text, option):
        m = re.match(r"^(\d+)-(\d+)$", w) if ranges else None
        if m:
            lo = parse_int(m.group(1), option, minimum=minimum, maximum=maximum)
            hi = parse_int(m.group(2), option, minimum=minimum, maximum=maximum)
            if hi < lo:
                raise _fail(option, f"the range {w} runs backwards")
            if hi - lo + 1 + len(out) > MAX_LIST_ITEMS:
                raise _fail(option, f"the range {w} has more than {MAX_LIST_ITEMS} items")
            vals = list(range(lo, hi + 1))
        else:
            vals = [parse_int(w, option, minimum=minimum, maximum=maximum,
                              what=f"a {what} (a whole number)")]
        for v in vals:
            if v in out and not duplicates:
                raise _fail(option, f"{v} appears twice")
            out.append(v)
    return out


def parse_size_list(text, option: str, *, minimum: int = 0, maximum: int | None = None,
                    limit_name: str = "") -> list[int]:
    """Return the byte sizes of ``"0,8,1K,4M"``, without duplicates."""
    out: list[int] = []
    for w in split_list(text, option):
        v = parse_size(w, option, minimum=minimum, maximum=maximum, limit_name=limit_name)
        if v in out:
            raise _fail(option, f"{w} ({v} bytes) appears twice")
        out.append(v)
    return out


def parse_real_list(text, option: str, **limits) -> list[float]:
    """Return the finite reals of ``"0.5,1,2"`` (each checked as
    :func:`parse_real` with ``limits``), without duplicates."""
    out: list[float] = []
    for w in split_list(text, option):
        v = parse_real(w, option, **limits)
        if v in out:
            raise _fail(option, f"{w} appears twice")
        out.append(v)
    return out


def parse_word_list(text, option: str, choices: Sequence[str]) -> list[str]:
    """Return the words of ``"a,b"``, each one of ``choices``, without
    duplicates."""
    out: list[str] = []
    for w in split_list(text, option):
        v = parse_word(w, option, choices)
        if v in out:
            raise _fail(option, f"{v} appears twice")
        out.append(v)
    return out


def parse_pair(text, option: str) -> tuple[int, int]:
    """Return two different non-negative ranks from ``"A,B"``."""
    items = split_list(text, option)
    if len(items) != 2:
        raise _fail(option, f"{_show(text)} is not two ranks A,B such as 0,1")
    a, b = (parse_int(w, option, minimum=0, what="a rank (a whole number from 0)")
            for w in items)
    if a == b:
        raise _fail(option, f"the two ranks must differ (got {a},{b})")
    return a, b


# --------------------------------------------------------------------------
# Machine-derived limits
# --------------------------------------------------------------------------

def rank_limit(cores: int | None = None) -> int:
    """Return the most ranks tiers starts on ``cores`` cores (default: this
    machine's): :data:`RANKS_PER_CORE` per core."""
    return RANKS_PER_CORE * (cores or machine_cores())


def check_ranks(n: int, option: str = "--ranks", *, cores: int | None = None,
                where: str | None = None) -> int:
    """Return ``n`` if it is at most :func:`rank_limit` of ``cores``;
    ``where`` names the cores in the message (default "N cores")."""
    cores = cores or machine_cores()
    limit = rank_limit(cores)
    if n > limit:
        place = where or f"{cores} core{'s' if cores != 1 else ''}"
        raise _fail(option, f"{n} ranks on {place} is more than the limit of {limit} "
                    f"({RANKS_PER_CORE} per core)")
    return n


def check_args(args) -> None:
    """Check the limits that depend on several options or on the machine
    (ranks against the cores of this machine or of ``--hostfile``), after
    argparse has checked each value.  Raise TiersError naming the option."""
    hostfile = getattr(args, "hostfile", None)
    cores, where = None, None
    if hostfile:
        slots = hostfile_slots(hostfile)
        if slots:
            cores, where = slots, f"{slots} hostfile slots"
    ranks = getattr(args, "ranks", None)
    if isinstance(ranks, int) and not isinstance(ranks, bool):
        check_ranks(ranks, "--ranks", cores=cores, where=where)
    elif isinstance(ranks, str) and ranks:
        for n in parse_count_list(ranks, "--ranks"):
            check_ranks(n, "--ranks", cores=cores, where=where)


# --------------------------------------------------------------------------
# argparse types: each returns a callable named after the option, so that a
# bad value ends in one line "tiers: error: --option: ...", exit 2.
# --------------------------------------------------------------------------

def _typed(fn: Callable, name: str) -> Callable:
    fn.__name__ = name
    return fn


def integer(option: str, minimum: int = 0, maximum: int = INT_MAX) -> Callable[[str], int]:
    """argparse type: a whole number within [minimum, maximum]."""
    return _typed(lambda t: parse_int(t, option, minimum=minimum, maximum=maximum),
                  "integer")


def count(option: str, minimum: int = 1, maximum: int = INT_MAX) -> Callable[[str], int]:
    """argparse type: a count (a whole number from ``minimum``, default 1)."""
    return _typed(lambda t: parse_int(t, option, minimum=minimum, maximum=maximum,
                                      what="a count (a whole number)"), "count")


def ranks(option: str = "--ranks", minimum: int = 1) -> Callable[[str], int]:
    """argparse type: a rank count from ``minimum`` to 2^31 - 1 (the
    machine limit is checked by :func:`check_args`, which knows the
    hostfile)."""
    return count(option, minimum)


def seed(option: str = "--seed") -> Callable[[str], int]:
    """argparse type: a seed from 0."""
    return _typed(lambda t: parse_seed(t, option), "seed")


def real(option: str, **limits) -> Callable[[str], float]:
    """argparse type: a finite real within ``limits`` (see :func:`parse_real`)."""
    return _typed(lambda t: parse_real(t, option, **limits), "real")


def duration(option: str, maximum: float = MAX_DURATION_S,
             allow_zero: bool = False) -> Callable[[str], float]:
    """argparse type: seconds, finite, above 0, at most ``maximum``."""
    return _typed(lambda t: parse_duration(t, option, maximum=maximum, allow_zero=allow_zero),
                  "duration")


def size(option: str, minimum: int = 0, maximum: int | None = None,
         limit_name: str = "", text: bool = True) -> Callable[[str], object]:
    """argparse type: a byte size.  With ``text`` (default) the option keeps
    its text form, checked (commands parse it again); else the bytes."""
    def conv(t):
        v = parse_size(t, option, minimum=minimum, maximum=maximum, limit_name=limit_name)
        return str(t).strip() if text else v
    return _typed(conv, "size")


def buffer_size(option: str, minimum: int = 0, copies: int = 1) -> Callable[[str], str]:
    """argparse type: a buffer size that fits (``copies`` times) in the
    memory of this machine; keeps its text form."""
    def conv(t):
        parse_buffer_size(t, option, minimum=minimum, copies=copies)
        return str(t).strip()
    return _typed(conv, "size")


def count_list(option: str, minimum: int = 1, maximum: int = INT_MAX,
               ranges: bool = True) -> Callable[[str], str]:
    """argparse type: a list of counts such as ``1,2,4`` or ``1-4``; the
    option keeps a normalised text form ``"1,2,4"``."""
    return _typed(lambda t: ",".join(str(v) for v in parse_count_list(
        t, option, minimum=minimum, maximum=maximum, ranges=ranges)), "list")


def size_list(option: str, minimum: int = 0, maximum: int | None = None,
              limit_name: str = "") -> Callable[[str], str]:
    """argparse type: a list of byte sizes; normalised to ``"0,8,1024"``."""
    return _typed(lambda t: ",".join(str(v) for v in parse_size_list(
        t, option, minimum=minimum, maximum=maximum, limit_name=limit_name)), "list")


def real_list(option: str, **limits) -> Callable[[str], str]:
    """argparse type: a list of finite reals; normalised to ``"0.5,1.0"``."""
    return _typed(lambda t: ",".join(repr(v) for v in parse_real_list(t, option, **limits)),
                  "list")


def word_list(option: str, choices: Sequence[str]) -> Callable[[str], str]:
    """argparse type: a list of words among ``choices``; normalised."""
    return _typed(lambda t: ",".join(parse_word_list(t, option, choices)), "list")


def pair(option: str) -> Callable[[str], str]:
    """argparse type: two different ranks ``A,B``; normalised to ``"A,B"``."""
    return _typed(lambda t: "%d,%d" % parse_pair(t, option), "pair")


def path(option: str) -> Callable[[str], str]:
    """argparse type: a non-empty path."""
    return _typed(lambda t: parse_path(t, option), "path")


def input_file(option: str) -> Callable[[str], str]:
    """argparse type: an existing, readable file."""
    return _typed(lambda t: parse_input_file(t, option), "file")


def args_string(option: str) -> Callable[[str], str]:
    """argparse type: a shell-quoted option string that splits cleanly."""
    def conv(t):
        parse_args_string(t, option)
        return t
    return _typed(conv, "args")


def choice_of(option: str, choices: Iterable[str]) -> Callable[[str], str]:
    """argparse type: one word among ``choices``."""
    ch = tuple(choices)
    return _typed(lambda t: parse_word(t, option, ch), "word")


# --------------------------------------------------------------------------
# Synthetic topologies
# --------------------------------------------------------------------------

def synthetic_pus(desc: str) -> int:
    """Return the PU count of an hwloc synthetic description such as
    ``"pack:2 numa:2 core:4 pu:2"``: the product of the arities (object
    attributes in parentheses and memory children in brackets are
    skipped).  Words without an arity count 1; hwloc itself judges the
    rest of the grammar."""
    text = re.sub(r"\[[^\]]*\]|\([^)]*\)|\{[^}]*\}", " ", desc)
    pus = 1
    for word in text.split():
        m = re.match(r"^[A-Za-z0-9_]+:(\d+)", word)
        if m:
            pus *= int(m.group(1)[:30])
    return pus


def max_synthetic_pus() -> int:
    """Return the most PUs of a synthetic machine tiers builds: its PU-pair
    matrices (about 512 bytes per pair, from hwloc to the result document)
    must fit in this machine's memory; never more than 2^20."""
    return max(64, min(1 << 20, math.isqrt(machine_memory() // 512)))


def check_topology_source(source: str, option: str = "--input") -> str:
    """Return ``source`` ("this", an XML file or "synthetic:DESC") after
    refusing an empty one and a synthetic machine with more PUs than
    :func:`max_synthetic_pus`, before hwloc builds it."""
    parse_path(source, option)
    if str(source).startswith("synthetic:"):
        desc = str(source)[len("synthetic:"):]
        pus = synthetic_pus(desc)
        limit = max_synthetic_pus()
        if pus > limit:
            shown = f"{pus}" if pus < 10**15 else f"about 10^{len(str(pus)) - 1}"
            raise _fail(option, f"the synthetic machine {_show(desc)} has {shown} PUs, more "
                        f"than the limit of {limit} on this machine (its PU-pair matrices "
                        f"must fit in the {human_bytes(machine_memory())} of memory)")
    return source


def launcher_kind(option: str = "--launcher") -> Callable[[str], str]:
    """argparse type: an MPI launcher kind (openmpi, mpich or slurm)."""
    return _typed(lambda t: parse_word(str(t).lower(), option, ("openmpi", "mpich", "slurm")),
                  "launcher")
