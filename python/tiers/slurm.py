"""Slurm on the virtual cluster of ``tiers vcluster up --slurm``.

On top of the namespaces of :mod:`tiers.vcluster` this starts the daemons a
Slurm site runs, all of them from Debian's ``slurm-wlm`` and ``munge``:

- ``munged`` in the root namespace, with a key of its own
  (``STATE/slurm/munge/munge.key``, mode 0600) and its socket in the same
  folder; a Unix socket is a file, so the daemons of every node use it;
- ``slurmctld`` in the root namespace, listening on the bridge address
  (``SlurmctldHost=HOSTNAME(10.77.0.254)``), so that ``srun``, ``salloc``
  and ``sinfo`` started there reach it and the nodes reach it back;
- one ``slurmd -N tiers-nI`` per node, inside the node's network namespace
  and a UTS namespace named after the node, with its own
  ``NodeName``/``NodeHostname``/``NodeAddr`` line in ``slurm.conf``.

Every file (``slurm.conf``, ``cgroup.conf``, the state, spool, log and pid
files, the jobs' ``TmpFS``) lies under ``STATE/slurm/``; nothing goes to
/etc or /var, and the Slurm commands find the configuration through
``SLURM_CONF`` (:func:`environment`).  The nodes are described with this
machine's sockets, cores and threads as hwloc reads them (every node of a
vcluster is this machine).

Plain functions: :func:`start` (called by ``vcluster.up``), :func:`stop`
(called by ``vcluster.down``), :func:`nodes` (Slurm's view, from
``sinfo``), :func:`environment` (what ``srun``/``salloc`` need to run on the
cluster).  See docs/vcluster.md and docs/launching.md.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Mapping

from .errors import TiersError

PACKAGES = ("slurm-wlm", "munge")
# The programs --slurm runs, and the Debian package each comes from.
TOOLS = {"munged": "munge", "munge": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd",
         "srun": "slurm-client", "sinfo": "slurm-client", "scontrol": "slurm-client"}
# Not Slurm's default ports (6817/6818): a site's own Slurm may run on this machine.
CTLD_PORT = 6917
SLURMD_PORT = 6918
DEFAULT_TIMEOUT = 30.0
CLUSTER = "tiers"
PARTITION = "tiers"
# The PMI each MPI's processes speak under srun (Debian's builds): Open MPI
# 4.1 has PMIx components only; MPICH 4.0's simple PMI talks to Slurm's pmi2
# plugin (which also speaks PMI-1), and sees singletons under pmix.
MPI_PLUGIN = {"openmpi": "pmix", "mpich": "pmi2"}


def missing() -> list[str]:
    """Return the Slurm and munge programs not on PATH (empty when all are)."""
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin" + os.pathsep + "/sbin"
    return [t for t in TOOLS if shutil.which(t, path=path) is None]


def check_installed() -> None:
    """Raise TiersError (one line) naming the packages to install when a
    program --slurm needs is not there."""
    gone = missing()
    if gone:
        raise TiersError(f"--slurm needs Slurm and munge ({', '.join(gone)} not found): "
                         f"install the Debian packages {' '.join(PACKAGES)} "
                         f"(apt-get install {' '.join(PACKAGES)})")


def unavailable_reason() -> str | None:
    """Return why ``up --slurm`` cannot run here, or None when it can."""
    try:
        check_installed()
    except TiersError as exc:
        return str(exc)
    return None


def _which(tool: str) -> str:
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin" + os.pathsep + "/sbin"
    found = shutil.which(tool, path=path)
    if found is None:
        check_installed()
        raise TiersError(f"{tool} not found")
    return found


# --------------------------------------------------------------------------
# Files


def folder(state_dir: str | os.PathLike | None = None) -> Path:
    """Return the folder holding every Slurm and munge file of the cluster."""
    if state_dir is None:
        from . import vcluster
        state_dir = vcluster.state_dir()
    return Path(state_dir) / "slurm"


def paths(base: str | os.PathLike | None = None) -> dict[str, str]:
    """Return the files and folders of the Slurm part, by role."""
    d = folder(base)
    return {
        "folder": str(d),
        "conf": str(d / "slurm.conf"),
        "cgroup_conf": str(d / "cgroup.conf"),
        "munge_dir": str(d / "munge"),
        "munge_key": str(d / "munge" / "munge.key"),
        "munge_socket": str(d / "munge" / "munge.socket"),
        "munge_pid": str(d / "munge" / "munged.pid"),
        "munge_seed": str(d / "munge" / "munged.seed"),
        "munge_log": str(d / "log" / "munged.log"),
        "log_dir": str(d / "log"),
        "ctld_state": str(d / "ctld"),
        "ctld_pid": str(d / "slurmctld.pid"),
        "ctld_log": str(d / "log" / "slurmctld.log"),
        "spool": str(d / "spool"),
        "tmp": str(d / "tmp"),
    }


def slurmd_log(p: Mapping[str, str], node: str) -> str:
    """Return the log file of node ``node``'s slurmd."""
    return str(Path(p["log_dir"]) / f"slurmd-{node}.log")


def slurmd_pid_file(p: Mapping[str, str], node: str) -> str:
    """Return the pid file of node ``node``'s slurmd."""
    return str(Path(p["folder"]) / f"slurmd-{node}.pid")


def node_shape() -> dict:
    """Return the sockets, cores per socket and threads per core of this
    machine as hwloc reads it (``tiers topo``), which every node of the
    virtual cluster is: ``{"sockets", "cores_per_socket",
    "threads_per_core", "cpus"}``."""
    from . import topo

    s = topo.measure()["summary"]
    packages, cores, pus = int(s.get("packages") or 1), int(s["cores"]), int(s["pus"])
    packages = max(packages, 1)
    if cores % packages == 0 and pus % cores == 0:
        return {"sockets": packages, "cores_per_socket": cores // packages,
                "threads_per_core": pus // cores, "cpus": pus}
    return {"sockets": 1, "cores_per_socket": pus, "threads_per_core": 1, "cpus": pus}


def _cgroup_plugin() -> str:
    """cgroup/v2 on a unified hierarchy, else cgroup/v1 (22.05's autodetect
    fails on a v1 hierarchy without systemd).  slurmd loads the plugin
    even though proctrack/linuxproc and task/affinity never create a cgroup."""
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                words = line.split()
                if len(words) > 2 and words[1] == "/sys/fs/cgroup":
                    return "cgroup/v2" if words[2] == "cgroup2" else "cgroup/v1"
    except OSError:
        pass
    return "cgroup/v1"


def first_job_id(now: float | None = None) -> int:
    """The first job number of a cluster started at ``now`` (seconds since
    the epoch): one a second, inside Slurm's default range of job numbers
    (below MaxJobId 67,043,328), so clusters started one after another do
    not number their jobs alike."""
    t = int(time.time() if now is None else now)
    return 1000 + t % 60_000_000


def conf_text(state: Mapping, shape: Mapping, p: Mapping[str, str], *,
              controller: str | None = None) -> str:
    """Return the slurm.conf of the cluster ``state``: the controller on the
    bridge address, one node line per namespace with its host name and
    address and the ``shape`` (:func:`node_shape`), one partition with every
    node, and every file under the folder ``p`` names."""
    host = controller or socket.gethostname().split(".")[0]
    lines = [
        "# slurm.conf of 'tiers vcluster up --slurm'; removed by 'tiers vcluster down'",
        f"ClusterName={CLUSTER}",
        f"SlurmctldHost={host}({state['bridge_ip']})",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={CTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={p['munge_socket']}",
        f"StateSaveLocation={p['ctld_state']}",
        f"SlurmctldPidFile={p['ctld_pid']}",
        f"SlurmctldLogFile={p['ctld_log']}",
        # %n: the node name, so that the nodes' daemons on this one machine
        # keep their files apart
        f"SlurmdSpoolDir={p['spool']}/%n",
        f"SlurmdPidFile={p['folder']}/slurmd-%n.pid",
        f"SlurmdLogFile={p['log_dir']}/slurmd-%n.log",
        # the jobs' temporary folder, also where srun --mpi=pmix puts its
        # per-step folder: shared, /tmp would make the nodes' steps collide
        f"TmpFS={p['tmp']}/%n",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/affinity",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        f"MpiDefault={MPI_PLUGIN['openmpi']}",
        "ReturnToService=2",
        # all nodes share this machine: describe it as the config says
        "SlurmdParameters=config_overrides",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/builtin",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        "KillWait=2",
        "MinJobAge=30",
        # job numbers that a restarted cluster does not hand out again: Open
        # MPI names a directly launched job's session folder after its
        # Slurm job and step, and a folder left by an earlier cluster's job
        # of the same number makes the new job fail in its shared-memory set-up
        f"FirstJobId={first_job_id()}",
    ]
    shape_words = (f"Sockets={shape['sockets']} CoresPerSocket={shape['cores_per_socket']} "
                   f"ThreadsPerCore={shape['threads_per_core']}")
    for n in state["nodes"]:
        lines.append(f"NodeName={n['name']} NodeHostname={n['name']} NodeAddr={n['ip']} "
                     f"{shape_words} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def environment(state: Mapping | None = None, *, mpi: str | None = None) -> dict[str, str]:
    """Return the variables that make ``srun``, ``salloc``, ``sbatch`` and
    ``sinfo`` (and the MPI programs they start) run on the cluster:
    ``SLURM_CONF``, ``SLURM_MPI_TYPE`` for ``mpi`` (``openmpi`` or
    ``mpich``; default: the MPI tiers was built with), ``HYDRA_IFACE`` (the
    bridge, where MPICH's proxies reach its mpiexec) and, for Open MPI,
    the MCA settings of :func:`tiers.vcluster.launch_options` as
    ``OMPI_MCA_*`` (TCP on the cluster's subnet only)."""
    from . import launch, vcluster

    st = state or vcluster.require_up()
    kind = mpi or launch.built_mpi() or "openmpi"
    if kind not in MPI_PLUGIN:
        raise TiersError(f"unknown MPI '{kind}': use openmpi or mpich")
    # HYDRA_IFACE: MPICH's mpiexec under salloc is reached on the bridge
    env = {"SLURM_CONF": paths()["conf"], "SLURM_MPI_TYPE": MPI_PLUGIN[kind],
           "HYDRA_IFACE": st["bridge"]}
    ranks = vcluster.slots_total(st)
    for key, value in vcluster.launch_options(ranks, state=st)["mca"].items():
        if key.startswith("plm_"):
            continue      # the daemons start through Slurm, not the rsh agent
        env[f"OMPI_MCA_{key}"] = value
    return env


def launcher():
    """Return the :class:`tiers.launch.Launcher` of the cluster's ``srun``
    (its version asked with the cluster's SLURM_CONF)."""
    from . import launch

    srun = _which("srun")
    proc = _run([srun, "--version"], env={"SLURM_CONF": paths()["conf"]}, timeout=20)
    words = proc.stdout.split()
    version = words[1] if proc.returncode == 0 and len(words) > 1 else ""
    return launch.Launcher("slurm", version, srun, "Slurm")


# --------------------------------------------------------------------------
# Processes


def _read_pid(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _alive(pid: int | None, name: str | None = None) -> bool:
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat[stat.rfind(")") + 2:].startswith("Z"):
        return False
    if name is not None:
        comm = stat[stat.find("(") + 1:stat.rfind(")")]
        return comm == name[:15]
    return True


def _stop_pid(pid: int | None, name: str, grace: float = 3.0) -> bool:
    """SIGTERM process ``pid`` when it is ``name``, SIGKILL after ``grace``
    seconds; return True when one was stopped."""
    if not _alive(pid, name):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace
    while _alive(pid, name) and time.monotonic() < deadline:
        time.sleep(0.02)
    if _alive(pid, name):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 2
        while _alive(pid, name) and time.monotonic() < deadline:
            time.sleep(0.02)
    return True


def _last_error(log: str) -> str:
    """The last error or fatal line of a daemon's log, shortened (or '')."""
    try:
        lines = Path(log).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        low = line.lower()
        if "error" in low or "fatal" in low:
            text = line.split("] ", 1)[-1].strip()
            return text[:160]
    return ""


def _run(cmd, *, env=None, timeout: float = 30) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env or {})
    try:
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                              timeout=timeout, env=full, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise TiersError(f"'{' '.join(map(str, cmd))}' did not finish within {timeout:g} s") \
            from None
    except FileNotFoundError:
        check_installed()
        raise


def _start_munge(p: Mapping[str, str]) -> None:
    mdir = Path(p["munge_dir"])
    mdir.mkdir(parents=True, exist_ok=True)
    # munged: the socket's folder must be searchable by all, the key
    # readable by its owner only
    mdir.chmod(0o755)
    key = Path(p["munge_key"])
    if not key.exists():
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(128))
    key.chmod(0o600)
    proc = _run([_which("munged"), f"--key-file={p['munge_key']}",
                 f"--socket={p['munge_socket']}", f"--pid-file={p['munge_pid']}",
                 f"--seed-file={p['munge_seed']}", f"--log-file={p['munge_log']}"])
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise TiersError(f"munged did not start: {why.replace('munged: ', '')}")
    check = subprocess.run(f"'{_which('munge')}' -n -S '{p['munge_socket']}' >/dev/null",
                           shell=True, capture_output=True, text=True, timeout=10)
    if check.returncode != 0:
        raise TiersError(f"munged does not answer on {p['munge_socket']}: "
                         f"{check.stderr.strip().splitlines()[-1] if check.stderr.strip() else ''}")


def _start_ctld(p: Mapping[str, str]) -> None:
    env = {"SLURM_CONF": p["conf"]}
    proc = _run([_which("slurmctld"), "-f", p["conf"]], env=env)
    if proc.returncode != 0 or not _wait_pid_file(p["ctld_pid"], "slurmctld", 10):
        why = _last_error(p["ctld_log"]) or (proc.stderr.strip().splitlines() or [""])[-1]
        raise TiersError(f"slurmctld did not start: {why or f'exit code {proc.returncode}'}")


def _gone(pid_file: str, late: bool) -> bool:
    """True when the slurmd of ``pid_file`` stopped: its pid file names a
    process that is no slurmd, or (``late``) there is no pid file yet."""
    pid = _read_pid(pid_file)
    if pid is None:
        return late
    return not _alive(pid, "slurmd")


def _wait_pid_file(path: str, name: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _alive(_read_pid(path), name):
            return True
        time.sleep(0.05)
    return False


def _start_slurmd(p: Mapping[str, str], node: Mapping) -> str | None:
    """Start node ``node``'s slurmd in its namespaces; return why it failed
    at once (None when it started and went to the background)."""
    name = node["name"]
    Path(p["spool"], name).mkdir(parents=True, exist_ok=True)
    Path(p["tmp"], name).mkdir(parents=True, exist_ok=True)
    Path(p["tmp"], name).chmod(0o1777)
    cmd = ["ip", "netns", "exec", node["netns"], "unshare", "--uts", "--", "sh", "-c",
           'hostname "$0" && exec "$1" -N "$0" -f "$2"', name, _which("slurmd"), p["conf"]]
    proc = _run(cmd, env={"SLURM_CONF": p["conf"]})
    if proc.returncode != 0:
        return (_last_error(slurmd_log(p, name)) or
                (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1])
    return None


def nodes(state: Mapping | None = None, *, timeout: float = 10) -> list[dict]:
    """Return Slurm's view of the nodes (``sinfo``): per node its name,
    state (``idle``, ``down*``, ``allocated`` ...), CPUs, sockets, cores per
    socket, threads per core and partition; empty when slurmctld does not
    answer."""
    p = paths()
    proc = _run([_which("sinfo"), "-h", "-N", "-o", "%N|%T|%c|%X|%Y|%Z|%P"],
                env={"SLURM_CONF": p["conf"]}, timeout=timeout)
    if proc.returncode != 0:
        return []
    out = []
    for line in proc.stdout.splitlines():
        words = line.strip().split("|")
        if len(words) != 7:
            continue
        name, stat, cpus, sockets, cores, threads, part = words
        out.append({"name": name, "state": stat, "cpus": _int(cpus), "sockets": _int(sockets),
                    "cores_per_socket": _int(cores), "threads_per_core": _int(threads),
                    "partition": part.rstrip("*")})
    return out


def _int(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def start(state: dict, *, timeout: float = DEFAULT_TIMEOUT, save=None) -> dict:
    """Start munged, slurmctld and one slurmd per node of the cluster
    ``state`` and wait (at most ``timeout`` seconds) until ``sinfo`` shows
    every node idle.  ``state["slurm"]`` records the folder before anything
    starts (``save(state)`` writes it), so :func:`stop` finds what a failed
    or killed start left.  Return the Slurm part of the state
    (``{"folder", "conf", "nodes": sinfo's view, "seconds"}``).  Raise
    TiersError (one line) when the packages are missing, a daemon does not
    start, or a node is not idle in time (naming the nodes and their state);
    the caller then stops everything with :func:`stop`."""
    check_installed()
    t0 = time.monotonic()
    p = paths()
    rec = {"folder": p["folder"], "conf": p["conf"], "ctld_port": CTLD_PORT,
           "slurmd_port": SLURMD_PORT, "complete": False}
    state["slurm"] = rec
    if save:
        save(state)
    base = Path(p["folder"])
    if base.exists():          # a folder of an earlier run: daemons first, then files
        stop(state, remove=True)
        state["slurm"] = rec
    for d in (p["folder"], p["log_dir"], p["ctld_state"], p["spool"], p["tmp"]):
        Path(d).mkdir(parents=True, exist_ok=True)
    shape = node_shape()
    Path(p["conf"]).write_text(conf_text(state, shape, p))
    Path(p["cgroup_conf"]).write_text(f"CgroupPlugin={_cgroup_plugin()}\nIgnoreSystemd=yes\n")
    _start_munge(p)
    _start_ctld(p)
    failed = {}
    for n in state["nodes"]:
        why = _start_slurmd(p, n)
        if why:
            failed[n["name"]] = why
    if failed:
        raise TiersError("slurmd did not start on " + "; ".join(
            f"{name} ({why})" for name, why in failed.items()))
    started = time.monotonic()
    want = {n["name"] for n in state["nodes"]}
    deadline = time.monotonic() + timeout
    view: list[dict] = []
    while True:
        view = nodes(timeout=max(2.0, min(10.0, deadline - time.monotonic())))
        idle = {v["name"] for v in view if v["state"] == "idle"}
        if want <= idle:
            break
        # a slurmd that went to the background and then stopped (its pid
        # file names no slurmd, or none appeared within 10 s)
        dead = [n["name"] for n in state["nodes"] if n["name"] not in idle
                and _gone(slurmd_pid_file(p, n["name"]), time.monotonic() - started > 10)]
        if dead:
            raise TiersError("slurmd stopped on " + "; ".join(
                f"{name} ({_last_error(slurmd_log(p, name)) or 'no error logged'})"
                for name in dead))
        if time.monotonic() > deadline:
            states = {v["name"]: v["state"] for v in view}
            late = sorted(want - idle)
            raise TiersError(f"slurmd on {', '.join(late)} did not come up within "
                             f"{timeout:g} s (" + ", ".join(
                                 f"{n}: {states.get(n, 'not known to slurmctld')}"
                                 for n in late) + ")")
        time.sleep(0.2)
    rec.update({"complete": True, "nodes": view, "shape": shape,
                "seconds": round(time.monotonic() - t0, 3)})
    if save:
        save(state)
    return rec


def stop(state: Mapping | None = None, *, remove: bool = True) -> list[str]:
    """Stop every slurmd, slurmctld and munged of the cluster (found by
    their pid files under the Slurm folder, each checked to be that
    program) and, with ``remove``, delete the folder.  Works after a failed
    or killed :func:`start`.  Return what was stopped or removed."""
    p = paths()
    done = []
    base = Path(p["folder"])
    names = [n["name"] for n in (state or {}).get("nodes", [])]
    names += [f.name[len("slurmd-"):-len(".pid")] for f in base.glob("slurmd-*.pid")
              if f.name[len("slurmd-"):-len(".pid")] not in names]
    for name in names:
        if _stop_pid(_read_pid(slurmd_pid_file(p, name)), "slurmd"):
            done.append(f"slurmd on {name}")
    if _stop_pid(_read_pid(p["ctld_pid"]), "slurmctld"):
        done.append("slurmctld")
    if _stop_pid(_read_pid(p["munge_pid"]), "munged"):
        done.append("munged")
    if remove and base.exists():
        shutil.rmtree(base, ignore_errors=True)
        if not base.exists():
            done.append(f"folder {base}")
    return done


def running() -> list[str]:
    """Return the Slurm and munge daemons of the cluster that still run
    (by their pid files), e.g. ``["slurmctld", "slurmd on tiers-n1"]``."""
    p = paths()
    out = []
    for f in sorted(Path(p["folder"]).glob("slurmd-*.pid")):
        if _alive(_read_pid(str(f)), "slurmd"):
            out.append(f"slurmd on {f.name[len('slurmd-'):-len('.pid')]}")
    if _alive(_read_pid(p["ctld_pid"]), "slurmctld"):
        out.append("slurmctld")
    if _alive(_read_pid(p["munge_pid"]), "munged"):
        out.append("munged")
    return out


__all__ = ["CTLD_PORT", "MPI_PLUGIN", "PACKAGES", "SLURMD_PORT", "check_installed",
           "conf_text", "environment", "folder", "missing", "node_shape", "nodes", "paths",
           "running", "start", "stop", "unavailable_reason"]
