"""Launching: the one place that builds and runs MPI command lines.

tiers starts every multi-process run through this module.  It knows three
launchers:

``openmpi``  Open MPI's ``mpirun`` (4.x with ORTE, 5.x with PRRTE)
``mpich``    MPICH's Hydra ``mpiexec`` (also Intel MPI, which uses Hydra)
``slurm``    ``srun``, inside a Slurm allocation

and gives the other parts plain functions:

- :func:`detect` finds the launcher (``$TIERS_LAUNCHER`` or an argument
  overrides) and returns a :class:`Launcher`;
- :func:`build_command` turns "run this program on N ranks with this
  environment, binding and host list" into the launcher's command line;
- :func:`inject_env` adds environment exports to a launcher command that a
  user wrote (``tiers trace -- mpirun -n 4 ./app``);
- :func:`run_command` runs any command line in its own session with a time
  limit, and turns a failed run into a one-line :class:`LaunchError`
  ("rank 1 of 3 exited with code 3 (app)");
- :func:`launch` and :func:`launch_json` do both steps at once.

Nothing here keeps state between calls except a cache of ``--version``
answers per launcher path.  See docs/launching.md for the command lines built
per launcher and version.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from . import jobguard
from .errors import TiersError

KINDS = ("openmpi", "mpich", "slurm")

# Spellings accepted for a launcher kind (argument or $TIERS_LAUNCHER).
_KIND_ALIASES = {
    "openmpi": "openmpi", "open-mpi": "openmpi", "ompi": "openmpi", "mpirun": "openmpi",
    "mpich": "mpich", "hydra": "mpich", "mpiexec": "mpich", "intel": "mpich",
    "slurm": "slurm", "srun": "slurm",
}
_NAMES = {"openmpi": "Open MPI", "mpich": "MPICH", "slurm": "Slurm"}
_DEFAULT_PROGRAM = {"openmpi": "mpirun", "mpich": "mpiexec", "slurm": "srun"}
# Executables tried, in order, for each kind; one counts only when its
# --version shows that kind, so Debian's mpirun/mpiexec alternatives (which
# point at one MPI when both are installed) never decide which MPI runs.
_CANDIDATES = {
    "openmpi": ("mpirun", "mpiexec", "mpirun.openmpi", "mpiexec.openmpi"),
    "mpich": ("mpiexec", "mpiexec.hydra", "mpiexec.mpich", "mpirun", "mpirun.mpich"),
    "slurm": ("srun",),
}
_INSTALL_HINT = ("install openmpi-bin (mpirun) or mpich (mpiexec), "
                 "or run inside a Slurm allocation (srun)")

# A word of a command line that names a launcher: mpirun, mpiexec.hydra, srun...
_LAUNCHER_WORD = re.compile(r"^(mpirun|mpiexec|orterun|prterun|srun)(\.[\w.-]+)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

DEFAULT_GRACE_S = 5.0
STREAM_TAIL_LINES = 400


# --------------------------------------------------------------------------
# Launchers and their detection


@dataclass(frozen=True)
class Launcher:
    """An MPI launcher: its kind (``openmpi``, ``mpich`` or ``slurm``), its
    version (``"4.1.4"``, empty when unknown), the executable to call and the
    product name (``"Open MPI"``, ``"MPICH"``, ``"Intel MPI"``, ``"Slurm"``).

    ``Launcher("openmpi", "5.0.3")`` is enough to build command lines; the
    program defaults to ``mpirun`` / ``mpiexec`` / ``srun``."""

    kind: str
    version: str = ""
    program: str = ""
    name: str = ""

    def __post_init__(self):
        kind = _normalise_kind(self.kind)
        object.__setattr__(self, "kind", kind)
        if not self.program:
            object.__setattr__(self, "program", _DEFAULT_PROGRAM[kind])
        if not self.name:
            object.__setattr__(self, "name", _NAMES[kind])

    @property
    def major(self) -> int:
        """Return the major version number (0 when unknown)."""
        m = re.match(r"(\d+)", self.version)
        return int(m.group(1)) if m else 0

    def describe(self) -> str:
        """Return the product and version, e.g. ``"Open MPI 4.1.4"``."""
        return f"{self.name} {self.version}".strip()

    def to_dict(self) -> dict:
        """Return the launcher as plain data (for result documents)."""
        return {"kind": self.kind, "name": self.name, "version": self.version,
                "program": self.program}


def _normalise_kind(kind: str) -> str:
    key = str(kind).strip().lower()
    if key not in _KIND_ALIASES:
        raise TiersError(f"unknown MPI launcher '{kind}': use one of {', '.join(KINDS)}")
    return _KIND_ALIASES[key]


@functools.lru_cache(maxsize=32)
def _identify_cached(path: str, mtime: float) -> Launcher | None:
    del mtime  # part of the cache key only: a reinstalled launcher is asked again
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True,
                              timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = proc.stdout + "\n" + proc.stderr
    m = re.search(r"\((?:Open MPI|OpenRTE)\)\s*v?(\S+)", text)
    if m:
        return Launcher("openmpi", m.group(1), path, "Open MPI")
    m = re.search(r"Intel\(R\) MPI Library.*?Version\s+([\w.]+)", text)
    if m:
        return Launcher("mpich", m.group(1), path, "Intel MPI")
    if "HYDRA" in text.upper():
        m = re.search(r"Version:\s*(\S+)", text)
        return Launcher("mpich", m.group(1) if m else "", path, "MPICH")
    m = re.search(r"^slurm(?:-wlm)?\s+(\S+)", text, re.MULTILINE | re.IGNORECASE)
    if m:
        return Launcher("slurm", m.group(1), path, "Slurm")
    if re.search(r"^srun: (?:fatal|error): ", text, re.MULTILINE):
        # Slurm 22.05's srun answers --version only with a configuration
        # (slurm.conf, $SLURM_CONF or DNS); it is srun all the same, and
        # running it says what is missing
        return Launcher("slurm", "", path, "Slurm")
    return None


def identify(program: str) -> Launcher | None:
    """Return the :class:`Launcher` that executable ``program`` (a name on
    PATH or a path) is, from its ``--version`` output; None when it is not
    found or is no launcher tiers knows."""
    path = shutil.which(program)
    if not path:
        return None
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    return _identify_cached(path, mtime)


def _find(kind: str) -> Launcher | None:
    for candidate in _CANDIDATES[kind]:
        found = identify(candidate)
        if found is not None and found.kind == kind:
            return found
    return None


def detect(kind: str | None = None) -> Launcher:
    """Return the launcher to use.

    Order: ``kind`` when given, else ``$TIERS_LAUNCHER`` when set (each one of
    ``openmpi``, ``mpich``, ``slurm``); else ``srun`` when inside a Slurm
    allocation (``$SLURM_JOB_ID`` set and ``srun`` on PATH); else the MPI the
    native tools were built with (:func:`built_mpi`), then Open MPI, then
    MPICH, each found by ``--version`` (``mpirun`` when it is that MPI, else
    ``mpirun.openmpi``/``mpiexec.hydra``..., whatever the alternatives say).
    Raise TiersError (one line) when no launcher is found or the one asked
    for is absent."""
    asked = kind or os.environ.get("TIERS_LAUNCHER") or None
    if asked:
        wanted = _normalise_kind(asked)
        found = _find(wanted)
        if found is not None:
            return found
        source = "" if kind else "TIERS_LAUNCHER="
        others = [f"{p}: {w.describe()}" for p in ("mpirun", "mpiexec", "srun")
                  if (w := identify(p)) is not None]
        seen = f" (found {'; '.join(others)})" if others else ""
        hint = {"openmpi": "install openmpi-bin", "mpich": "install mpich",
                "slurm": "run inside a Slurm allocation"}[wanted]
        raise TiersError(f"MPI launcher {source}{asked} asked for, but no {_NAMES[wanted]} "
                         f"{_DEFAULT_PROGRAM[wanted]} is on PATH{seen}: {hint}")
    if os.environ.get("SLURM_JOB_ID"):
        found = _find("slurm")
        if found is not None:
            return found
    built = built_mpi()
    for wanted in dict.fromkeys([k for k in (built, "openmpi", "mpich") if k]):
        found = _find(wanted)
        if found is not None:
            return found
    raise TiersError(f"no MPI launcher found: {_INSTALL_HINT}")


def built_mpi() -> str | None:
    """Return the MPI kind (``openmpi`` or ``mpich``) the native tools in
    use were built with, from the ``mpi`` key of their
    ``share/tiers/build_info.json`` (CMake's ``TIERS_MPI``); None when the
    file or the key is missing (a build from before the key existed)."""
    from . import native

    path = native.native_dir() / "share" / "tiers" / "build_info.json"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    kind = info.get("mpi") if isinstance(info, dict) else None
    return kind if kind in ("openmpi", "mpich") else None


def _as_launcher(launcher: Launcher | str | None) -> Launcher:
    if isinstance(launcher, Launcher):
        return launcher
    return detect(launcher)


def local_slots() -> int:
    """Return the number of processor cores this process may run on, which
    is what Open MPI counts as slots on a host without a hostfile (cores, not
    hardware threads)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
    cores = set()
    for cpu in cpus:
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (base / "physical_package_id").read_text().strip()
            core = (base / "core_id").read_text().strip()
        except OSError:
            return len(cpus) or 1
        cores.add((package, core))
    return len(cores) or 1


# --------------------------------------------------------------------------
# Command lines


def _check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    out = {}
    for name, value in (env or {}).items():
        if not _ENV_NAME.match(str(name)):
            raise TiersError(f"'{name}' is not a valid environment variable name")
        out[str(name)] = str(value)
    return out


def export_options(launcher: Launcher | str, env: Mapping[str, str] | None) -> list[str]:
    """Return the launcher options that set ``env`` in every rank:
    ``-x NAME=VALUE`` (Open MPI), ``-genv NAME VALUE`` (MPICH) or one
    ``--export=ALL,NAME=VALUE,...`` (Slurm; a value containing a comma cannot
    travel in ``--export`` and is left out: :func:`launch` passes it through
    srun's own environment instead)."""
    kind = launcher.kind if isinstance(launcher, Launcher) else _normalise_kind(launcher)
    env = _check_env(env)
    if not env:
        return []
    if kind == "openmpi":
        return [w for name, value in env.items() for w in ("-x", f"{name}={value}")]
    if kind == "mpich":
        return [w for name, value in env.items() for w in ("-genv", name, value)]
    return ["--export=" + _slurm_export(None, env)]


def _slurm_export(existing: str | None, env: Mapping[str, str]) -> str:
    """Merge ``env`` into a Slurm --export value (None: the default, ALL)."""
    items = [i for i in (existing or "ALL").split(",") if i]
    carried = {n: v for n, v in env.items() if "," not in v}
    if len(carried) < len(env):
        if not items or items[0].upper() != "ALL":
            bad = ", ".join(n for n in env if n not in carried)
            raise TiersError(f"srun --export cannot carry {bad} (its value contains a comma) "
                             "and the command does not export ALL of srun's environment")
    if items and items[0].upper() == "NONE":
        items = items[1:]
    items = [i for i in items if i.split("=", 1)[0] not in env]
    items += [f"{n}={v}" for n, v in carried.items()]
    return ",".join(items) if items else "NONE"


_SLURM_BIND = {"core": "cores", "hwthread": "threads", "thread": "threads",
               "socket": "sockets", "package": "sockets", "numa": "ldoms", "none": "none"}
_SLURM_DIST = {"slot": "block", "core": "block", "hwthread": "block", "socket": "block:cyclic",
               "package": "block:cyclic", "numa": "block:cyclic", "node": "cyclic"}


def _host_slots(hosts: Sequence[str]) -> int:
    total = 0
    for h in hosts:
        _, _, n = str(h).partition(":")
        total += int(n) if n.isdigit() else 1
    return total


def build_command(launcher: Launcher | str | None, program: Sequence[str] | str, ranks: int,
                  *, env: Mapping[str, str] | None = None,
                  oversubscribe: bool | None = None, slots: int | None = None,
                  as_root: bool | None = None, bind_to: str | None = None,
                  map_by: str | None = None, cpus_per_rank: int | None = None,
                  hostfile: str | os.PathLike | None = None, hosts: Sequence[str] | None = None,
                  rankfile: str | os.PathLike | None = None,
                  cpu_map: Sequence[Sequence[int]] | None = None,
                  mca: Mapping[str, str] | None = None, rsh_agent: str | None = None,
                  extra: Sequence[str] = ()) -> list[str]:
    """Return the command line (a list of words) that runs ``program`` (its
    argv, or one path) on ``ranks`` ranks with ``launcher`` (a
    :class:`Launcher`, a kind name, or None to :func:`detect`).

    Options, each translated into the launcher's own spelling (see
    docs/launching.md); None leaves the launcher's default:

    ``env``            variables set in every rank (:func:`export_options`)
    ``oversubscribe``  allow more ranks than slots; None: Open MPI only, when
                       ``ranks * cpus_per_rank`` exceeds ``slots``
    ``slots``          slots to compare with; None: the sum of ``hosts``'
                       ``:N`` counts, else :func:`local_slots` when neither
                       hosts nor a hostfile is given
    ``as_root``        add Open MPI's ``--allow-run-as-root``; None: when
                       running as root
    ``bind_to``        ``core``, ``hwthread``, ``socket``/``package``,
                       ``numa``, ``none``
    ``map_by``         ``slot``, ``core``, ``hwthread``, ``socket``,
                       ``numa``, ``node``
    ``cpus_per_rank``  cores given to each rank (threads of a hybrid run)
    ``hostfile``       a hostfile (Slurm: a node file)
    ``hosts``          host names, each optionally ``name:slots``
    ``rankfile``       an Open MPI rankfile
    ``cpu_map``        per rank, the OS PU indices to bind it to (MPICH:
                       ``-bind-to user:``; Slurm: ``map_cpu``/``mask_cpu``;
                       Open MPI wants a rankfile instead)
    ``mca``            Open MPI MCA parameters
    ``rsh_agent``      the remote shell Open MPI / Hydra starts daemons with
    ``extra``          raw launcher options, placed last before the program

    Raise TiersError for options the launcher cannot express."""
    lau = _as_launcher(launcher)
    argv = [str(program)] if isinstance(program, (str, os.PathLike)) else [str(a) for a in program]
    if not argv:
        raise TiersError("no program to launch")
    words = launcher_options(lau, ranks, env=env, oversubscribe=oversubscribe, slots=slots,
                             as_root=as_root, bind_to=bind_to, map_by=map_by,
                             cpus_per_rank=cpus_per_rank, hostfile=hostfile, hosts=hosts,
                             rankfile=rankfile, cpu_map=cpu_map, mca=mca, rsh_agent=rsh_agent,
                             extra=extra)
    return [lau.program, "-n", str(ranks)] + words + argv


def launcher_options(launcher: Launcher | str | None, ranks: int, *,
                     env: Mapping[str, str] | None = None,
                     oversubscribe: bool | None = None, slots: int | None = None,
                     as_root: bool | None = None, bind_to: str | None = None,
                     map_by: str | None = None, cpus_per_rank: int | None = None,
                     hostfile: str | os.PathLike | None = None,
                     hosts: Sequence[str] | None = None,
                     rankfile: str | os.PathLike | None = None,
                     cpu_map: Sequence[Sequence[int]] | None = None,
                     mca: Mapping[str, str] | None = None, rsh_agent: str | None = None,
                     extra: Sequence[str] = ()) -> list[str]:
    """Return the launcher options alone (what :func:`build_command` puts
    between ``-n N`` and the program), for adding to a launch line a user
    wrote.  Options and errors as :func:`build_command`."""
    lau = _as_launcher(launcher)
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise TiersError(f"the number of ranks must be a positive integer, not {ranks!r}")
    if cpus_per_rank is not None and (not isinstance(cpus_per_rank, int) or cpus_per_rank < 1):
        raise TiersError(f"cpus_per_rank must be a positive integer, not {cpus_per_rank!r}")
    if hostfile is not None and hosts:
        raise TiersError("give either a hostfile or a host list, not both")
    if cpu_map is not None and len(cpu_map) != ranks:
        raise TiersError(f"cpu_map has {len(cpu_map)} entries for {ranks} ranks")
    env = _check_env(env)
    builder = {"openmpi": _openmpi, "mpich": _mpich, "slurm": _slurm}[lau.kind]
    opts = dict(oversubscribe=oversubscribe, slots=slots, as_root=as_root, bind_to=bind_to,
                map_by=map_by, cpus_per_rank=cpus_per_rank,
                hostfile=None if hostfile is None else str(hostfile), hosts=list(hosts or []),
                rankfile=None if rankfile is None else str(rankfile), cpu_map=cpu_map,
                mca=dict(mca or {}), rsh_agent=rsh_agent)
    return builder(lau, ranks, opts) + export_options(lau, env) + [str(e) for e in extra]


def _openmpi(lau: Launcher, ranks: int, o: dict) -> list[str]:
    v5 = lau.major >= 5
    out: list[str] = []
    as_root = o["as_root"] if o["as_root"] is not None else _is_root()
    if as_root:
        out.append("--allow-run-as-root")
    over = o["oversubscribe"]
    if over is None:
        slots = o["slots"]
        if slots is None and o["hosts"]:
            slots = _host_slots(o["hosts"])
        if slots is None and o["hostfile"] is None:
            slots = local_slots()
        over = slots is not None and ranks * (o["cpus_per_rank"] or 1) > slots
    if o["cpu_map"] is not None:
        raise TiersError("Open MPI binds ranks to listed PUs through a rankfile: "
                         "pass rankfile= instead of cpu_map=")
    # --map-by: object, then modifiers (PE=n, and in 5.x OVERSUBSCRIBE, file=)
    obj = o["map_by"] or ""
    mods = []
    if o["cpus_per_rank"]:
        obj = obj or "slot"
        mods.append(f"PE={o['cpus_per_rank']}")
    if o["rankfile"] is not None:
        if obj:
            raise TiersError("a rankfile fixes the mapping: do not pass map_by or cpus_per_rank")
        if v5:
            obj = "rankfile"
            mods.append(f"file={o['rankfile']}")
        else:
            out += ["--rankfile", o["rankfile"]]
    if over:
        if v5:
            mods.append("OVERSUBSCRIBE")
        else:
            out.append("--oversubscribe")
    if obj or mods:
        out += ["--map-by", ":".join([obj] + mods)]
    if o["bind_to"]:
        bind = o["bind_to"]
        if over and bind != "none" and ":" not in bind:
            bind += ":overload-allowed"   # else Open MPI refuses to bind 2 ranks to 1 core
        out += ["--bind-to", bind]
    if o["hostfile"] is not None:
        out += ["--hostfile", o["hostfile"]]
    if o["hosts"]:
        out += ["--host", ",".join(o["hosts"])]
    for key, value in o["mca"].items():
        out += ["--mca", str(key), str(value)]
    if o["rsh_agent"]:
        out += ["--prtemca", "plm_ssh_agent", o["rsh_agent"]] if v5 else \
               ["--mca", "plm_rsh_agent", o["rsh_agent"]]
    return out


def _mpich(lau: Launcher, ranks: int, o: dict) -> list[str]:
    if o["rankfile"] is not None:
        raise TiersError("MPICH has no rankfile: pass cpu_map= (per-rank PU lists) instead")
    if o["mca"]:
        raise TiersError("MCA parameters are Open MPI settings; the launcher is MPICH")
    out: list[str] = []
    if o["hostfile"] is not None:
        out += ["-f", o["hostfile"]]
    if o["hosts"]:
        out += ["-hosts", ",".join(o["hosts"])]
    if o["cpu_map"] is not None:
        out += ["-bind-to", "user:" + ",".join("+".join(str(int(p)) for p in pus)
                                               for pus in o["cpu_map"])]
    elif o["bind_to"] or o["cpus_per_rank"]:
        bind = o["bind_to"] or "core"
        if o["cpus_per_rank"] and bind != "none":
            bind += f":{o['cpus_per_rank']}"
        out += ["-bind-to", bind]
    if o["map_by"] == "node":
        out += ["-ppn", "1"]
    elif o["map_by"] and o["map_by"] != "slot":
        out += ["-map-by", o["map_by"]]
    if o["rsh_agent"]:
        out += ["-launcher", "ssh", "-launcher-exec", o["rsh_agent"]]
    return out


def _slurm(lau: Launcher, ranks: int, o: dict) -> list[str]:
    if o["rankfile"] is not None:
        raise TiersError("srun has no rankfile: pass cpu_map= (per-rank PU lists) instead")
    if o["mca"] or o["rsh_agent"]:
        raise TiersError("MCA parameters and rsh agents are Open MPI settings; "
                         "the launcher is Slurm's srun")
    out: list[str] = []
    if o["cpus_per_rank"]:
        out.append(f"--cpus-per-task={o['cpus_per_rank']}")
    if o["cpu_map"] is not None:
        if all(len(pus) == 1 for pus in o["cpu_map"]):
            out.append("--cpu-bind=map_cpu:" + ",".join(str(int(p[0])) for p in o["cpu_map"]))
        else:
            masks = [hex(sum(1 << int(p) for p in pus)) for pus in o["cpu_map"]]
            out.append("--cpu-bind=mask_cpu:" + ",".join(masks))
    elif o["bind_to"]:
        if o["bind_to"] not in _SLURM_BIND:
            raise TiersError(f"cannot bind to '{o['bind_to']}' with srun: use one of "
                             f"{', '.join(sorted(_SLURM_BIND))}")
        out.append(f"--cpu-bind={_SLURM_BIND[o['bind_to']]}")
    if o["map_by"]:
        if o["map_by"] not in _SLURM_DIST:
            raise TiersError(f"cannot map by '{o['map_by']}' with srun: use one of "
                             f"{', '.join(sorted(_SLURM_DIST))}")
        out.append(f"--distribution={_SLURM_DIST[o['map_by']]}")
    if o["hostfile"] is not None:
        out.append(f"--nodefile={o['hostfile']}")
    if o["hosts"]:
        out.append("--nodelist=" + ",".join(h.split(":", 1)[0] for h in o["hosts"]))
    if o["oversubscribe"]:
        out.append("--overcommit")
    return out


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def find_launcher_word(command: Sequence[str]) -> int | None:
    """Return the index of the first word of ``command`` that names a
    launcher (``mpirun``, ``mpiexec``, ``mpiexec.hydra``, ``orterun``,
    ``prterun``, ``srun``, with any path), or None when there is none."""
    for i, word in enumerate(command):
        if _LAUNCHER_WORD.match(os.path.basename(str(word))):
            return i
    return None


def launcher_of(command: Sequence[str], kind: str | None = None) -> Launcher | None:
    """Return the :class:`Launcher` a user's command line calls, or None when
    it calls none (a plain program).  The kind comes from ``kind``, else the
    word's suffix (``.openmpi``, ``.mpich``, ``.hydra``), ``srun``,
    ``orterun``/``prterun``, else from asking the executable ``--version``.
    Raise TiersError when the launcher is not found or not recognised."""
    i = find_launcher_word(command)
    if i is None:
        return None
    word = str(command[i])
    if kind:
        return Launcher(kind, program=word)
    base = os.path.basename(word)
    if base == "srun":
        return Launcher("slurm", program=word)
    if base.startswith(("orterun", "prterun")) or base.endswith(".openmpi"):
        return Launcher("openmpi", program=word)
    if base.endswith((".mpich", ".hydra")):
        return Launcher("mpich", program=word)
    found = identify(word)
    if found is None:
        if shutil.which(word) is None:
            raise TiersError(f"launcher {word} is not on PATH: {_INSTALL_HINT}")
        raise TiersError(f"cannot tell which MPI {word} belongs to from '{word} --version': "
                         f"set TIERS_LAUNCHER to one of {', '.join(KINDS)}")
    return Launcher(found.kind, found.version, word, found.name)


def inject_env(command: Sequence[str], env: Mapping[str, str], *,
               kind: str | None = None) -> list[str]:
    """Return a copy of a user-written command line that also sets ``env``
    in every rank.

    The exports, in the launcher's syntax, go right after the launcher word
    (so before the program and its arguments, and before any ``:`` of an
    MPMD line); where the command already sets one of the same names
    (``-x NAME[=V]``, ``-genv``/``-env NAME V``, ``--export=...NAME=V``) that
    setting is replaced.  An existing srun ``--export`` is merged into.  A
    command without a launcher is a single process: it is returned as
    ``["env", "NAME=VALUE", ..., *command]``.  ``kind`` forces the launcher
    kind (see :func:`launcher_of`)."""
    command = [str(w) for w in command]
    env = _check_env(env)
    if not command:
        raise TiersError("no command to run")
    lau = launcher_of(command, kind)
    if lau is None:
        return ["env", *[f"{n}={v}" for n, v in env.items()], *command] if env else command
    i = find_launcher_word(command)
    head, tail = command[: i + 1], command[i + 1:]
    if lau.kind == "openmpi":
        tail = _drop_openmpi_exports(tail, env)
        return head + export_options(lau, env) + tail
    if lau.kind == "mpich":
        tail = _drop_mpich_exports(tail, env)
        return head + export_options(lau, env) + tail
    # Slurm: merge into an existing --export, else add one.
    prog = _program_index(tail)
    for j, word in enumerate(tail[:prog]):
        if word.startswith("--export="):
            tail = tail[:j] + ["--export=" + _slurm_export(word.split("=", 1)[1], env)] + \
                tail[j + 1:]
            return head + tail
        if word == "--export" and j + 1 < prog:
            tail = tail[:j] + ["--export=" + _slurm_export(tail[j + 1], env)] + tail[j + 2:]
            return head + tail
    return head + ["--export=" + _slurm_export(None, env)] + tail if env else command


def program_index(command: Sequence[str]) -> int:
    """Return the index of the program in ``command``: the word after the
    launcher's own options in a launcher line, 0 in a plain command line,
    ``len(command)`` when no word looks like a program."""
    words = [str(w) for w in command]
    i = find_launcher_word(words)
    if i is None:
        return 0 if words else len(words)
    return i + 1 + _program_index(words[i + 1:])


def _program_index(words: Sequence[str]) -> int:
    """Index of the first word that looks like the program (an executable
    that is not an option's value) -- a heuristic; len(words) if none."""
    for j, word in enumerate(words):
        if word.startswith("-") or word == ":":
            continue
        if "/" in word and os.access(word, os.X_OK) and not os.path.isdir(word):
            return j
        if "/" not in word and not word.isdigit() and shutil.which(word) and \
                (j == 0 or not words[j - 1].startswith("-") or "=" in words[j - 1]):
            return j
    return len(words)


def _drop_openmpi_exports(words: list[str], env: Mapping[str, str]) -> list[str]:
    out, j = [], 0
    while j < len(words):
        w = words[j]
        if w in ("-x", "--x") and j + 1 < len(words) and \
                words[j + 1].split("=", 1)[0] in env:
            j += 2
            continue
        out.append(w)
        j += 1
    return out


def _drop_mpich_exports(words: list[str], env: Mapping[str, str]) -> list[str]:
    out, j = [], 0
    while j < len(words):
        w = words[j]
        if w in ("-genv", "-env") and j + 2 < len(words) and words[j + 1] in env:
            j += 3
            continue
        out.append(w)
        j += 1
    return out


# --------------------------------------------------------------------------
# Running


@dataclass
class RunResult:
    """What a finished run gave: the command, the launcher's exit status,
    its stdout and stderr (with ``stream=True`` only their last lines), and
    the wall time in seconds."""

    command: list[str]
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float
    streamed: bool = False

    def json(self, label: str = "the program"):
        """Return the JSON document the program printed on stdout (the whole
        stdout, or else its last line that parses as a JSON object)."""
        return parse_json_output(self.stdout, label)


class LaunchError(TiersError):
    """A run that failed or timed out.  ``str()`` is one line; the full
    ``stdout``/``stderr``, the ``command``, the launcher's ``returncode``,
    ``timed_out`` and the parsed ``failure`` (see :func:`parse_failure`) stay
    on the exception for callers that need them."""

    def __init__(self, message: str, *, command: Sequence[str], returncode: int | None,
                 stdout: str, stderr: str, failure: dict | None = None,
                 timed_out: bool = False, elapsed_s: float = 0.0):
        super().__init__(message, code=1)
        self.command = list(command)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.failure = failure
        self.timed_out = timed_out
        self.elapsed_s = elapsed_s


class Interrupted(KeyboardInterrupt):
    """tiers received SIGINT, SIGTERM or SIGHUP while a job ran.  The signal
    went to the whole job (its session), the job is gone and what it left in
    /dev/shm and its launcher's session folder is removed.  ``signum`` is the
    signal (``signame`` its name), ``code`` the exit status to end with
    (128 + signum), ``str()`` one line (``message`` when given);
    ``stdout``/``stderr`` hold what the job printed.  A KeyboardInterrupt, so
    that nothing that handles TiersError swallows it."""

    def __init__(self, signum: int, label: str, *, stdout: str = "", stderr: str = "",
                 message: str | None = None):
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        super().__init__(message or f"stopped by {name}: {label} was stopped")
        self.signame = name
        self.signum = signum
        self.code = 128 + signum
        self.stdout = stdout
        self.stderr = stderr


class _Signalled(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Forwarder:
    """While a job runs, turns SIGINT/SIGTERM/SIGHUP into ``_Signalled``
    where ``arm``ed (the main thread only; elsewhere nothing changes).  The
    first signal is kept in ``signum``; a second one while the job is being
    stopped kills the job's session at once."""

    def __init__(self):
        self.signum: int | None = None
        self.sid: int | None = None
        self.armed = False
        self.old: dict[int, object] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED_SIGNALS:
                try:
                    self.old[sig] = signal.signal(sig, self._on_signal)
                except (ValueError, OSError):
                    pass

    def _on_signal(self, signum, frame):
        if self.signum is None:
            self.signum = signum
            if self.armed:
                self.armed = False
                raise _Signalled(signum)
        elif self.sid is not None:
            _signal_session(self.sid, signal.SIGKILL)

    def arm(self, sid: int) -> None:
        self.sid = sid
        self.armed = True
        if self.signum is not None:
            self.armed = False
            raise _Signalled(self.signum)

    def disarm(self) -> None:
        self.armed = False

    def restore(self) -> None:
        for sig, handler in self.old.items():
            if handler is not None:
                try:
                    signal.signal(sig, handler)
                except (ValueError, OSError):
                    pass
        self.old = {}


class _Watchdog:
    """A small process (tiers/jobguard.py) that stops a job's session and
    removes its leftovers if tiers dies while the job runs, even by SIGKILL:
    it holds a pipe from tiers and acts when the pipe reaches end-of-file
    without ``done``."""

    def __init__(self, before: set[tuple[str, int]]):
        self.proc = None
        script = Path(jobguard.__file__)
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", str(script)],
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            return
        self._send("".join(f"snap {ino} {os.fsencode(name).hex()}\n" for name, ino in before))

    def _send(self, text: str) -> None:
        if self.proc is None or not text:
            return
        try:
            self.proc.stdin.write(text.encode("ascii"))
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass

    def watch(self, sid: int) -> None:
        self._send(f"sid {sid}\n")

    def done(self) -> None:
        if self.proc is None:
            return
        self._send("done\n")
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def parse_json_output(text: str, label: str = "the program"):
    """Return the JSON value in ``text``: the whole text, or else the last
    line that parses as a JSON object.  Raise TiersError when there is none."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        pass
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise TiersError(f"{label} printed no JSON document on stdout")


def _signal_name(num: int) -> str:
    try:
        return signal.strsignal(num) or f"signal {num}"
    except (ValueError, AttributeError):
        return f"signal {num}"


@functools.lru_cache(maxsize=1)
def _signal_by_text() -> dict[str, int]:
    table = {}
    for sig in signal.Signals:
        text = _signal_name(sig.value)
        table[text.lower()] = sig.value
        table[sig.name.lower()] = sig.value
    return table


def parse_failure(output: str) -> dict | None:
    """Return what a launcher's output says about the failed job, or None
    when it says nothing tiers recognises.  The dict has ``kind`` (one of
    ``exit``, ``signal``, ``abort``, ``no-finalize``, ``slots``, ``exec``),
    ``rank`` (None when the launcher does not name one), ``exit_code``,
    ``signal``, ``host`` and ``detail``.  Understands Open MPI 4/5, MPICH
    Hydra and Slurm srun messages."""
    text = output or ""
    found = None

    def hit(kind, rank=None, exit_code=None, sig=None, host=None, detail=None):
        return {"kind": kind, "rank": None if rank is None else int(rank),
                "exit_code": None if exit_code is None else int(exit_code),
                "signal": None if sig is None else int(sig), "host": host, "detail": detail}

    # Open MPI: MPI_Abort
    m = re.search(r"MPI_ABORT was invoked on rank (\d+) in communicator (\S+)\s+"
                  r"with errorcode (-?\d+)", text)
    if m:
        return hit("abort", m.group(1), m.group(3), detail=m.group(2))
    # MPICH: MPI_Abort
    m = re.search(r"application called MPI_Abort\(([^,]+), (-?\d+)\) - process (\d+)", text)
    if m:
        return hit("abort", m.group(3), m.group(2), detail=m.group(1))
    # Open MPI 4 and 5: first process to exit non-zero
    m = re.search(r"Process name:\s*\[[^\n]*?(\d+)\]+[ \t]*\n\s*Exit code:\s*(-?\d+)", text)
    if m:
        return hit("exit", m.group(1), m.group(2))
    # Open MPI: killed by a signal
    m = re.search(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)", text)
    if m:
        return hit("signal", m.group(1), sig=m.group(3), host=m.group(2))
    # Open MPI: exit 0 without MPI_Finalize
    m = re.search(r"process rank (\d+) with PID \d+ on node (\S+) exiting\s+improperly", text)
    if m:
        return hit("no-finalize", m.group(1), host=m.group(2))
    # Slurm: srun: error: node1: task 1: Exited with exit code 7 / Segmentation fault
    for m in re.finditer(r"srun: error: (\S+): tasks? \[?(\d+)[^:]*: ([^\n]+)", text):
        what = m.group(3).strip()
        em = re.match(r"Exited with exit code (\d+)", what)
        if em:
            return hit("exit", m.group(2), em.group(1), host=m.group(1))
        name = re.sub(r"\s*\(core dumped\)\s*$", "", what).lower()
        if name in _signal_by_text():
            return hit("signal", m.group(2), sig=_signal_by_text()[name], host=m.group(1))
    # MPICH Hydra: BAD TERMINATION ... (no rank, only a PID)
    m = re.search(r"BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES.*?PID (\d+) "
                  r"RUNNING AT (\S+)(.*?)={20,}", text, re.DOTALL)
    if m:
        body = m.group(3)
        sm = re.search(r"KILLED BY SIGNAL:\s*(\d+)", body) or \
            re.search(r"\(signal (\d+)\)", text)
        if sm:
            return hit("signal", sig=sm.group(1), host=m.group(2), detail=f"pid {m.group(1)}")
        em = re.search(r"EXIT CODE:\s*(\d+)", body)
        if em:
            code = int(em.group(1))
            if code > 128 and code - 128 < 65:
                return hit("signal", sig=code - 128, host=m.group(2),
                           detail=f"pid {m.group(1)}")
            return hit("exit", exit_code=code, host=m.group(2), detail=f"pid {m.group(1)}")
    # Open MPI: not enough slots
    m = re.search(r"not enough slots available in the system to satisfy the (\d+)\s+slots", text)
    if m:
        return hit("slots", detail=m.group(1))
    # Open MPI 4/5: executable not found
    m = re.search(r"could not access\s+or execute an executable:\s*\n\s*Executable:\s*(\S+)", text)
    if m:
        return hit("exec", detail=m.group(1))
    # MPICH: executable not found
    m = re.search(r"execvp error on file (\S+)", text)
    if m:
        return hit("exec", detail=m.group(1))
    return found


def _program_error_line(stderr: str, label: str) -> str | None:
    """The program's own one-line error ("LABEL: error: ..."), if it printed one."""
    for line in (stderr or "").splitlines():
        m = re.search(re.escape(label) + r": error: (.+)$", line.strip())
        if m:
            return m.group(1).strip()
    return None


def failure_message(failure: dict | None, *, ranks: int | None, label: str,
                    launcher: str, returncode: int | None, stderr: str = "") -> str:
    """Return the one-line message for a failed run, e.g. ``"rank 1 of 3
    exited with code 3 (tiers-whoami)"``; ``failure`` is what
    :func:`parse_failure` returned."""
    of = f" of {ranks}" if ranks else ""
    own = _program_error_line(stderr, label)
    tail = f": {own}" if own else ""
    if failure:
        who = f"rank {failure['rank']}{of}" if failure["rank"] is not None else \
            f"a rank{of}" + (f" ({failure['detail']} on {failure['host']})"
                             if failure.get("detail") and failure.get("host") else "")
        kind = failure["kind"]
        if kind == "exit":
            return f"{who} exited with code {failure['exit_code']} ({label}){tail}"
        if kind == "signal":
            sig = failure["signal"]
            return f"{who} was killed by signal {sig}, {_signal_name(sig)} ({label}){tail}"
        if kind == "abort":
            return f"{who} called MPI_Abort with error code {failure['exit_code']} ({label}){tail}"
        if kind == "no-finalize":
            return f"{who} exited without calling MPI_Finalize ({label}){tail}"
        if kind == "slots":
            return (f"not enough slots for {failure['detail']} ranks ({label}): allow "
                    "oversubscription or give a hostfile with more slots")
        if kind == "exec":
            return f"{launcher} could not start {failure['detail']}: not found or not executable"
    if own:
        return f"{label} failed: {own}"
    lines = [ln.strip() for ln in (stderr or "").splitlines()
             if ln.strip() and not set(ln.strip()) <= set("-=")]
    last = f": {lines[-1]}" if lines else ""
    if returncode is not None and returncode < 0:
        return f"{launcher} ({label}) was killed by signal {-returncode}, " \
               f"{_signal_name(-returncode)}{last}"
    return f"{launcher} ({label}) failed with exit code {returncode}{last}"


def _session_members(sid: int) -> list[int]:
    """PIDs of live processes in session ``sid`` (from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        # fields: state ppid pgrp session ...
        if len(fields) > 3 and fields[3] == str(sid) and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def _signal_session(sid: int, sig: int) -> int:
    members = _session_members(sid)
    for pid in members:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    return len(members)


def _stop(proc: subprocess.Popen, grace: float) -> None:
    """Stop a launcher started in its own session: SIGTERM to its process
    group (the launcher then stops its ranks, also remote ones), then after
    ``grace`` seconds SIGKILL to everything still in the session (local ranks
    sit in their own process groups but the same session)."""
    sid = proc.pid
    try:
        os.killpg(sid, signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _session_members(sid):
            break
        time.sleep(0.05)
    _signal_session(sid, signal.SIGKILL)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass


def _sweep(sid: int, grace: float) -> None:
    """Kill what a finished launcher left in its session (TERM, then KILL)."""
    if not _signal_session(sid, signal.SIGTERM):
        return
    deadline = time.monotonic() + min(grace, 2.0)
    while time.monotonic() < deadline and _session_members(sid):
        time.sleep(0.05)
    _signal_session(sid, signal.SIGKILL)


class _Reader(threading.Thread):
    """Drains one pipe: keeps everything (capture) or forwards each line and
    keeps the last ones (stream)."""

    def __init__(self, pipe, name: str, forward: Callable[[str, str], None] | None):
        super().__init__(daemon=True)
        self.pipe, self.name, self.forward = pipe, name, forward
        self.chunks: list[bytes] = []
        self.tail: collections.deque[str] = collections.deque(maxlen=STREAM_TAIL_LINES)

    def run(self):
        try:
            if self.forward is None:
                while True:
                    chunk = self.pipe.read1(65536) if hasattr(self.pipe, "read1") else \
                        self.pipe.read(65536)
                    if not chunk:
                        break
                    self.chunks.append(chunk)
            else:
                for raw in iter(self.pipe.readline, b""):
                    line = raw.decode("utf-8", "replace")
                    self.tail.append(line)
                    self.forward(self.name, line)
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        if self.forward is None:
            return b"".join(self.chunks).decode("utf-8", "replace")
        return "".join(self.tail)


def _forward_to_console(name: str, line: str) -> None:
    out = sys.stdout if name == "stdout" else sys.stderr
    out.write(line)
    out.flush()


def count_ranks(command: Sequence[str]) -> int | None:
    """Return the rank count a launcher command asks for (``-n N``, ``-np
    N``, ``--np N``, ``-c N``, ``--ntasks=N``, ``-nN``), or None."""
    i = find_launcher_word(command)
    words = [str(w) for w in command[(i or 0) + 1:]]
    for j, w in enumerate(words):
        if w in ("-n", "-np", "--np", "--n", "-c", "--ntasks") and j + 1 < len(words) \
                and words[j + 1].isdigit():
            return int(words[j + 1])
        m = re.match(r"^(?:--ntasks|--np|-np|-n)=?(\d+)$", w)
        if m:
            return int(m.group(1))
    return None


def guess_program(command: Sequence[str]) -> str:
    """Return the base name of the program a launcher command runs (a
    heuristic: the first executable word after the launcher's options), or
    of the command's first word when none is found."""
    words = [str(w) for w in command]
    i = find_launcher_word(words)
    if i is None:
        return os.path.basename(words[0]) if words else "command"
    rest = words[i + 1:]
    j = _program_index(rest)
    return os.path.basename(rest[j]) if j < len(rest) else os.path.basename(words[i])


def run_command(command: Sequence[str], *, timeout: float | None = None,
                stream: bool | Callable[[str, str], None] = False, check: bool = True,
                env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None,
                grace: float = DEFAULT_GRACE_S, label: str | None = None,
                ranks: int | None = None, stdin=None) -> RunResult:
    """Run a launcher command line (or any command) and return its
    :class:`RunResult`.

    The command starts in its own session with stdin from /dev/null (unless
    ``stdin`` is given).  ``timeout`` (seconds) stops it: SIGTERM to its
    process group, SIGKILL to everything left in its session after ``grace``
    seconds, then a :class:`LaunchError` "... timed out after N s".  By
    default stdout and stderr are captured whole; ``stream=True`` copies each
    line to this process's stdout/stderr as it comes (a callable
    ``f(name, line)`` receives them instead) and keeps only the last
    lines.  With ``check`` (default) a non-zero exit raises a
    :class:`LaunchError` naming the failed rank.  ``env`` adds variables to
    the launcher's own environment (not forwarded to remote ranks: use
    :func:`build_command`'s ``env`` or :func:`inject_env` for that); as root,
    Open MPI's ``OMPI_ALLOW_RUN_AS_ROOT``/``_CONFIRM`` are set too.
    ``label`` (default: the program's name) and ``ranks`` (default: read from
    ``-n``) word the error messages.  Processes the run leaves behind in its
    session are killed when it ends, and the /dev/shm files and Open MPI
    session folder of the job are removed.  SIGINT, SIGTERM or SIGHUP to
    tiers (main thread) go to the whole job, which is stopped; then
    :class:`Interrupted` (exit status 128 + signal) is raised.  If tiers is
    killed outright, a watchdog process stops the job and cleans up."""
    command = [str(w) for w in command]
    if not command:
        raise TiersError("no command to run")
    label = label or guess_program(command)
    ranks = ranks if ranks is not None else count_ranks(command)
    i = find_launcher_word(command)
    launcher_name = os.path.basename(command[i if i is not None else 0])
    full_env = dict(os.environ)
    if _is_root():
        full_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        full_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    full_env.update(_check_env(env))
    forward = None
    if stream:
        forward = stream if callable(stream) else _forward_to_console
    files = jobguard.JobFiles()          # /dev/shm before the job
    forwarder = _Forwarder()
    watchdog = _Watchdog(files.before)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL if stdin is None else stdin,
                                env=full_env, cwd=cwd, start_new_session=True)
    except FileNotFoundError:
        watchdog.done()
        forwarder.restore()
        raise TiersError(f"{command[0]} not found"
                         + (f": {_INSTALL_HINT}" if i == 0 else "")) from None
    except OSError as exc:
        watchdog.done()
        forwarder.restore()
        raise TiersError(f"cannot start {command[0]}: {exc.strerror or exc}") from None
    except BaseException:
        watchdog.done()
        forwarder.restore()
        raise
    watchdog.watch(proc.pid)
    files.launchers.add(proc.pid)
    readers = [_Reader(proc.stdout, "stdout", forward), _Reader(proc.stderr, "stderr", forward)]
    timed_out = False
    try:
        for r in readers:
            r.start()
        forwarder.arm(proc.pid)
        proc.wait(timeout=timeout)
        forwarder.disarm()
    except subprocess.TimeoutExpired:
        forwarder.disarm()
        timed_out = True
        files.observe(_session_members(proc.pid))
        _stop(proc, grace)
    except _Signalled as sig:   # forward it to the whole job, then stop what is left
        jobguard.stop_session(proc.pid, sig.signum, grace=grace, files=files)
    except BaseException:  # KeyboardInterrupt: leave nothing running
        forwarder.disarm()
        files.observe(_session_members(proc.pid))
        _stop(proc, grace)
        raise
    finally:
        forwarder.disarm()
        files.observe(_session_members(proc.pid))
        _sweep(proc.pid, grace)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        for r in readers:
            r.join(timeout=max(grace, 1.0))
            if not r.is_alive():   # a live reader still holds its pipe's lock:
                try:               # something outside the session keeps it open
                    r.pipe.close()
                except OSError:
                    pass
        files.cleanup()
        watchdog.done()
        forwarder.restore()
    elapsed = time.monotonic() - start
    stdout, stderr = readers[0].text(), readers[1].text()
    rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    if forwarder.signum is not None:
        raise Interrupted(forwarder.signum, label, stdout=stdout, stderr=stderr)
    if timed_out:
        of = f" on {ranks} ranks" if ranks else ""
        raise LaunchError(f"{label}{of} timed out after {timeout:g} s and was stopped",
                          command=command, returncode=rc, stdout=stdout, stderr=stderr,
                          timed_out=True, elapsed_s=elapsed)
    if rc != 0 and check:
        failure = parse_failure(stderr + "\n" + stdout)
        message = failure_message(failure, ranks=ranks, label=label, launcher=launcher_name,
                                  returncode=rc, stderr=stderr)
        raise LaunchError(message, command=command, returncode=rc, stdout=stdout,
                          stderr=stderr, failure=failure, elapsed_s=elapsed)
    return RunResult(command, rc, stdout, stderr, elapsed, streamed=bool(stream))


def launch(program: Sequence[str] | str, ranks: int, *,
           launcher: Launcher | str | None = None, env: Mapping[str, str] | None = None,
           timeout: float | None = None, stream: bool | Callable[[str, str], None] = False,
           check: bool = True, cwd: str | os.PathLike | None = None,
           grace: float = DEFAULT_GRACE_S, **options) -> RunResult:
    """Run ``program`` (argv list, or one path) on ``ranks`` ranks and return
    the :class:`RunResult`.  ``launcher`` is a :class:`Launcher`, a kind name
    or None (:func:`detect`); ``env`` is set in every rank; ``options`` are
    :func:`build_command`'s (bind_to, map_by, cpus_per_rank, hostfile,
    hosts, rankfile, cpu_map, mca, rsh_agent, oversubscribe, slots, as_root,
    extra); ``timeout``, ``stream``, ``check``, ``cwd`` and ``grace`` are
    :func:`run_command`'s.  Raise :class:`LaunchError` when a rank fails or
    the time limit passes, TiersError when no launcher is found."""
    lau = _as_launcher(launcher)
    cmd = build_command(lau, program, ranks, env=env, **options)
    argv = [str(program)] if isinstance(program, (str, os.PathLike)) else list(program)
    launcher_env = None
    if lau.kind == "slurm":   # values --export cannot carry travel in srun's environment
        launcher_env = {n: v for n, v in _check_env(env).items() if "," in v} or None
    return run_command(cmd, timeout=timeout, stream=stream, check=check, env=launcher_env,
                       cwd=cwd, grace=grace, label=os.path.basename(str(argv[0])),
                       ranks=ranks)


def launch_json(program: Sequence[str] | str, ranks: int, **kwargs):
    """Run ``program`` as :func:`launch` does (output captured) and return
    the JSON document it printed on stdout.  Raise TiersError when it
    printed none."""
    kwargs["stream"] = False
    result = launch(program, ranks, **kwargs)
    argv = [str(program)] if isinstance(program, (str, os.PathLike)) else list(program)
    return result.json(os.path.basename(str(argv[0])))


__all__ = [
    "KINDS", "Interrupted", "Launcher", "LaunchError", "RunResult", "build_command", "count_ranks",
    "detect", "export_options", "failure_message", "find_launcher_word", "guess_program",
    "identify", "inject_env", "launch", "launch_json", "launcher_of", "local_slots",
    "parse_failure", "parse_json_output", "run_command",
]
