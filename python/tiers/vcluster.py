"""``tiers vcluster``: a small cluster of network namespaces on one machine.

Every node of the virtual cluster is a Linux network namespace
(``tiers-n0``, ``tiers-n1``, ...) with its own ``eth0``, an address in a
private subnet (default 10.77.0.0/24) and, for the processes started in it,
its own host name (a UTS namespace).  Each node's ``eth0`` is one end of a
veth pair whose other end (``tiers-v0``, ...) sits on the bridge
``tiers-br0`` in the root namespace, and both ends are shaped with a ``tbf``
qdisc to the link rate, so that a node's link carries the chosen bandwidth
in each direction as a switch port would.  Latency is whatever the
veth/TCP path gives (``netem`` is not assumed): measure it.

Open MPI then runs across the nodes for real: ``mpirun`` stays in the root
namespace and starts its daemons through a generated remote-shell agent
that enters the node's namespaces, ranks of one node talk through shared
memory (``vader``) and ranks of different nodes through TCP over the
shaped links.

Plain functions:

- :func:`up` builds the cluster (idempotent) and returns its state;
- :func:`down` removes everything :func:`up` created, also after a crash;
- :func:`status` reports what exists and how each link is shaped;
- :func:`launch_options` gives :func:`tiers.launch.build_command` keyword
  arguments (hostfile, rsh agent, MCA parameters) that turn any launch into
  a launch on the virtual cluster; :func:`command` and :func:`run` do the
  whole launch.

The state lives in one file, ``/run/tiers-vcluster/state.json`` (next to the
hostfile and the agent).  :func:`up` records every object in it *before*
creating it, so :func:`down` can always find what a crashed :func:`up` left.
Links that tiers creates carry the interface alias ``tiers-vcluster``;
:func:`up` refuses to touch a namespace, link, host entry or address it did
not create.  See docs/vcluster.md.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

from .errors import TiersError

SCHEMA = "tiers.vcluster/1"
PREFIX = "tiers"
BRIDGE = f"{PREFIX}-br0"
ALIAS = "tiers-vcluster"           # interface alias marking links tiers created
HOSTS_MARK = "# tiers-vcluster"    # comment marking /etc/hosts lines tiers wrote
DEFAULT_SUBNET = "10.77.0.0/24"
DEFAULT_LINK = "1gbit"
MAX_NODES = 64
NODE_IF = "eth0"
QDISC_LATENCY_MS = 50              # tbf queue length, as time at the link rate
# Largest packet (GSO/TSO segment) the veths pass; the default, 64 KiB, would
# need a 64 KiB+ tbf bucket, i.e. 6% of a 1 MiB message sent unshaped.
GSO_MAX_BYTES = 16384


def state_dir() -> Path:
    """Return the folder of the state file, hostfile and agent
    (``$TIERS_VCLUSTER_DIR``, default ``/run/tiers-vcluster``)."""
    return Path(os.environ.get("TIERS_VCLUSTER_DIR", "/run/tiers-vcluster"))


def state_path() -> Path:
    """Return the path of the state file."""
    return state_dir() / "state.json"


def hosts_path() -> Path:
    """Return the hosts file that gets the node names (``$TIERS_VCLUSTER_HOSTS``,
    default ``/etc/hosts``)."""
    return Path(os.environ.get("TIERS_VCLUSTER_HOSTS", "/etc/hosts"))


def node_name(i: int) -> str:
    """Return the name of node ``i``: its namespace and its host name."""
    return f"{PREFIX}-n{i}"


def host_veth(i: int) -> str:
    """Return the name of node ``i``'s veth end on the bridge."""
    return f"{PREFIX}-v{i}"


# --------------------------------------------------------------------------
# Checks and small helpers


def check_tools() -> None:
    """Raise TiersError (one line) unless this process is root and ``ip``,
    ``tc`` and ``unshare`` are on PATH: what building a cluster needs."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise TiersError("tiers vcluster needs root (network namespaces, links and tc)")
    missing = [t for t in ("ip", "tc", "unshare") if shutil.which(t) is None]
    if missing:
        raise TiersError(f"tiers vcluster needs {', '.join(missing)} on PATH "
                         "(install iproute2 and util-linux)")


def unavailable_reason() -> str | None:
    """Return why a virtual cluster cannot be built here (not root, a tool
    missing), or None when it can."""
    try:
        check_tools()
    except TiersError as exc:
        return str(exc)
    return None


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit|tbit)?\s*$", re.IGNORECASE)
_RATE_MULT = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}


def parse_rate(text: str | int | float) -> int:
    """Return the link rate in bits per second from ``"100mbit"``,
    ``"1gbit"``, ``"2.5gbit"``, ``"500kbit"`` or a number of bit/s (tc's
    units: 1 mbit = 10^6 bit/s).  Raise TiersError on anything else."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        bits = int(text)
    else:
        m = _RATE.match(str(text))
        if not m:
            raise TiersError(f"link rate '{text}' is not understood: use e.g. 100mbit, 1gbit, "
                             "10gbit")
        bits = int(float(m.group(1)) * _RATE_MULT[(m.group(2) or "bit").lower()])
    if bits < 100_000:
        raise TiersError(f"link rate '{text}' is below 100kbit")
    return bits


def format_rate(bits: int) -> str:
    """Return a rate in tc's words: ``1gbit``, ``100mbit``, ``2500mbit``."""
    for unit, mult in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bits % mult == 0:
            return f"{bits // mult}{unit}"
    return f"{bits}bit"


def burst_bytes(bits: int) -> int:
    """Return the tbf bucket size used for a rate: a quarter of a
    millisecond at that rate, at least two of the largest packets a veth
    hands over (:data:`GSO_MAX_BYTES`).  A bucket smaller than one such
    packet makes tbf split every packet, and the link falls to about 80% of
    its rate at 1 Gbit; a larger one lets more of a message through at full
    speed after an idle pause (32 KiB is 3% of 1 MiB)."""
    return max(2 * GSO_MAX_BYTES, bits // 8 // 4000)


def _run(cmd: Sequence[str], *, check: bool = True,
         timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise TiersError(f"{cmd[0]} not found: tiers vcluster needs iproute2") from None
    except subprocess.TimeoutExpired:
        raise TiersError(f"'{' '.join(map(str, cmd))}' did not finish within {timeout:g} s") \
            from None
    if check and proc.returncode != 0:
        msg = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise TiersError(f"'{' '.join(map(str, cmd))}' failed: "
                         f"{msg[-1] if msg else f'exit code {proc.returncode}'}")
    return proc


def _link(name: str, netns: str | None = None) -> dict | None:
    """The ``ip -j link`` record of interface ``name`` (in ``netns``), or None."""
    cmd = ["ip"] + (["-n", netns] if netns else []) + ["-j", "link", "show", "dev", name]
    proc = _run(cmd, check=False)
    if proc.returncode != 0:
        return None
    try:
        rows = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        return None
    return rows[0] if rows else None


def _netns_list() -> list[str]:
    proc = _run(["ip", "-j", "netns", "list"], check=False)
    try:
        return [r["name"] for r in json.loads(proc.stdout or "[]")]
    except (json.JSONDecodeError, KeyError, TypeError):
        return [ln.split()[0] for ln in proc.stdout.splitlines() if ln.strip()]


def _netns_exists(name: str) -> bool:
    return name in _netns_list()


def _ours(link: dict | None) -> bool:
    return link is not None and link.get("ifalias") == ALIAS


def _qdisc(dev: str, netns: str | None = None) -> dict | None:
    """The root qdisc of ``dev`` with its statistics (``tc -s -j``), or None."""
    cmd = ["tc"] + (["-n", netns] if netns else []) + ["-s", "-j", "qdisc", "show", "dev", dev]
    proc = _run(cmd, check=False)
    if proc.returncode != 0:
        return None
    try:
        rows = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        return None
    for row in rows:
        if row.get("root"):
            return row
    return None


# --------------------------------------------------------------------------
# State


def load_state() -> dict | None:
    """Return the state of the cluster that is up (or half up after a crash),
    or None when there is none."""
    path = state_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TiersError(f"cannot read {path}: {exc.strerror}") from None
    try:
        state = json.loads(text)
    except json.JSONDecodeError:
        # A crash while writing cannot leave this (writes are atomic); a
        # hand-edited file can.  down() still sweeps what is marked as ours.
        return {"schema": SCHEMA, "complete": False, "created": [], "corrupt": True}
    if not isinstance(state, dict):
        return {"schema": SCHEMA, "complete": False, "created": [], "corrupt": True}
    return state


def _save(state: dict) -> None:
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / "state.json.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, state_path())


def plan(nodes: int, slots: int, link: str | int, subnet: str = DEFAULT_SUBNET) -> dict:
    """Return the state a cluster of ``nodes`` nodes with ``slots`` slots
    each, links shaped to ``link`` (``"1gbit"``, or None for unshaped) in
    ``subnet`` would have, before anything is created: node names,
    addresses, link names, the bridge, the rate and tbf parameters.  Raise
    TiersError on bad values."""
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= MAX_NODES:
        raise TiersError(f"--nodes must be between 1 and {MAX_NODES}, not {nodes!r}")
    if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
        raise TiersError(f"--slots must be a positive integer, not {slots!r}")
    try:
        net = ipaddress.IPv4Network(subnet, strict=True)
    except ValueError as exc:
        raise TiersError(f"subnet '{subnet}' is not an IPv4 network: {exc}") from None
    if not net.is_private:
        raise TiersError(f"subnet {net} is not private: use one of 10/8, 172.16/12, 192.168/16")
    hosts = list(net.hosts())
    if len(hosts) < nodes + 1:
        raise TiersError(f"subnet {net} has too few addresses for {nodes} nodes and the bridge")
    shaped = link is not None and str(link).lower() not in ("none", "unshaped", "off")
    bits = parse_rate(link) if shaped else None
    link_state = {"rate": format_rate(bits) if bits else None, "bits_per_s": bits,
                  "qdisc": "tbf" if bits else None,
                  "burst_bytes": burst_bytes(bits) if bits else None,
                  "gso_max_bytes": GSO_MAX_BYTES,
                  "latency_ms": QDISC_LATENCY_MS if bits else None}
    return {
        "schema": SCHEMA,
        "subnet": str(net),
        "bridge": BRIDGE,
        "bridge_ip": str(hosts[-1]),
        "slots": slots,
        "link": link_state,
        "nodes": [{"name": node_name(i), "netns": node_name(i), "ip": str(hosts[i]),
                   "host_if": host_veth(i), "node_if": NODE_IF} for i in range(nodes)],
        "hostfile": str(state_dir() / "hostfile"),
        "agent": str(state_dir() / "rsh-agent"),
        "hosts_file": str(hosts_path()),
        "created": [],
        "complete": False,
    }


# --------------------------------------------------------------------------
# up


def _foreign_checks(st: dict) -> None:
    """Refuse when something named like the plan exists and is not ours."""
    recorded = {(o["kind"], o["name"]) for o in st.get("created", [])}
    names = [st["bridge"]] + [n["host_if"] for n in st["nodes"]]
    for name in names:
        link = _link(name)
        if link is not None and not _ours(link) and ("link", name) not in recorded:
            raise TiersError(f"interface {name} exists and was not created by tiers vcluster: "
                             "remove it or rename it first")
    existing = set(_netns_list())
    for n in st["nodes"]:
        if n["netns"] in existing and ("netns", n["netns"]) not in recorded:
            raise TiersError(f"network namespace {n['netns']} exists and was not created by "
                             "tiers vcluster: remove it first ('ip netns delete "
                             f"{n['netns']}')")
    net = ipaddress.IPv4Network(st["subnet"])
    ours = set(names)
    proc = _run(["ip", "-4", "-j", "addr", "show"], check=False)
    try:
        rows = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        rows = []
    for row in rows:
        if row.get("ifname") in ours:
            continue
        for a in row.get("addr_info", []):
            try:
                iface = ipaddress.IPv4Interface(f"{a['local']}/{a.get('prefixlen', 32)}")
            except (KeyError, ValueError):
                continue
            if iface.network.overlaps(net):
                raise TiersError(f"subnet {net} overlaps {iface} on {row.get('ifname')}: "
                                 "choose another with --subnet")
    names_set = {n["name"] for n in st["nodes"]}
    try:
        lines = hosts_path().read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        if HOSTS_MARK in line:
            continue
        words = line.split("#", 1)[0].split()
        clash = names_set.intersection(words[1:])
        if clash:
            raise TiersError(f"{hosts_path()} already names {sorted(clash)[0]} in a line tiers "
                             "did not write: remove that line first")


def _step(st: dict, kind: str, name: str, action, **extra) -> None:
    """Record object (kind, name) in the state, then create it; forget the
    record again when creating fails (so down never removes what another
    program made)."""
    rec = {"kind": kind, "name": name, **extra}
    if rec not in st["created"]:
        st["created"].append(rec)
        _save(st)
        try:
            action()
        except BaseException:
            st["created"].remove(rec)
            _save(st)
            raise
    else:
        action()


def _shape(dev: str, netns: str | None, link: dict) -> None:
    base = ["tc"] + (["-n", netns] if netns else [])
    if not link["bits_per_s"]:
        q = _qdisc(dev, netns)
        if q is not None and q.get("kind") == "tbf":
            _run(base + ["qdisc", "del", "dev", dev, "root"], check=False)
        return
    _run(base + ["qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{link['bits_per_s']}bit",
                 "burst", str(link["burst_bytes"]), "latency", f"{link['latency_ms']}ms"])


def _write_hosts(st: dict) -> None:
    path = Path(st["hosts_file"])
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        lines = []
    kept = [ln for ln in lines if HOSTS_MARK not in ln]
    ours = [f"{n['ip']}\t{n['name']}\t{HOSTS_MARK}" for n in st["nodes"]]
    # Rewrite in place (no rename): /etc/hosts is often a bind mount.
    with open(path, "w") as f:
        f.write("\n".join(kept + ours) + "\n")


def _remove_hosts(path: Path) -> int:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return 0
    kept = [ln for ln in lines if HOSTS_MARK not in ln]
    if len(kept) == len(lines):
        return 0
    with open(path, "w") as f:
        f.write("\n".join(kept) + ("\n" if kept else ""))
    return len(lines) - len(kept)


AGENT_TEXT = """#!/bin/sh
# tiers vcluster remote-shell agent, written by 'tiers vcluster up' and removed
# by 'tiers vcluster down'.  Open MPI calls it as it calls ssh:
#     AGENT [OPTIONS] HOST COMMAND...
# and it runs COMMAND (joined with spaces, read by sh, as sshd would) inside
# HOST's network namespace and in a new UTS namespace whose host name is HOST.
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "tiers-vcluster-agent: usage: $0 [OPTIONS] HOST COMMAND..." >&2
  exit 255
fi
host=$1
shift
case "$host" in
  @NODES@) ;;
  *) echo "tiers-vcluster-agent: $host is not a node of the virtual cluster" >&2
     exit 255 ;;
esac
exec ip netns exec "$host" unshare --uts -- sh -c 'hostname "$0" && exec sh -c "$*"' "$host" "$@"
"""


def _write_files(st: dict) -> None:
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    hostfile = Path(st["hostfile"])
    hostfile.write_text("# tiers vcluster: one line per node (namespace and host name)\n" +
                        "".join(f"{n['name']} slots={st['slots']}\n" for n in st["nodes"]))
    agent = Path(st["agent"])
    agent.write_text(AGENT_TEXT.replace("@NODES@", "|".join(n["name"] for n in st["nodes"])))
    agent.chmod(0o755)


def up(nodes: int, slots: int = 1, link: str | int | None = DEFAULT_LINK,
       subnet: str = DEFAULT_SUBNET, *, slurm: bool = False,
       slurm_timeout: float | None = None) -> dict:
    """Build (or complete) a virtual cluster and return its state.

    ``nodes`` network namespaces ``tiers-n0`` ... with ``slots`` slots each,
    joined by the bridge ``tiers-br0`` through veth pairs whose both ends
    are shaped to ``link`` (tc rate words; None: unshaped), addresses from
    ``subnet``, /etc/hosts entries, a hostfile and the rsh agent.

    Idempotent: when the same cluster is up, nothing changes except a new
    link rate, which is applied; missing pieces of a half-built cluster are
    created.  Raise TiersError (one line) when a cluster of another size or
    subnet is up, when a namespace, interface, address or host entry of the
    same name exists that tiers did not create, or when not root or ``ip``
    / ``tc`` is missing.  The returned state has ``already_up`` (True when
    nothing had to be created), ``link_changed`` (the rate was applied anew)
    and ``seconds``.

    With ``slurm``, munged, slurmctld and one slurmd per node run on the
    cluster too (:func:`tiers.slurm.start`, waiting ``slurm_timeout``
    seconds for every node to be idle); when they do not come up,
    everything this call started is removed again (the whole cluster when
    it was not up before) and TiersError names the nodes."""
    check_tools()
    if slurm:
        from . import slurm as _slurm
        _slurm.check_installed()
    start = time.monotonic()
    want = plan(nodes, slots, link, subnet)
    old = load_state()
    if old is not None and old.get("nodes") and not old.get("corrupt"):
        same = (len(old["nodes"]) == nodes and old.get("slots") == slots
                and old.get("subnet") == want["subnet"])
        if not same:
            raise TiersError(f"a virtual cluster of {len(old['nodes'])} nodes x "
                             f"{old.get('slots')} slots in {old.get('subnet')} is up "
                             f"(state {state_path()}): run 'tiers vcluster down' first")
        st = old
        link_changed = (old.get("link") or {}).get("bits_per_s") != want["link"]["bits_per_s"]
        st["link"] = want["link"]
        st["hostfile"], st["agent"] = want["hostfile"], want["agent"]
    elif old is not None:
        raise TiersError(f"{state_path()} is unreadable or incomplete: run 'tiers vcluster "
                         "down' first")
    else:
        st = want
        link_changed = False
    was_complete = bool(st.get("complete"))
    _foreign_checks(st)
    created_before = len(st["created"])
    st["complete"] = False
    _save(st)

    br = st["bridge"]
    if _link(br) is None:
        _step(st, "link", br, lambda: _run(["ip", "link", "add", br, "type", "bridge"]))
    _run(["ip", "link", "set", "dev", br, "alias", ALIAS])
    addr = f"{st['bridge_ip']}/{ipaddress.IPv4Network(st['subnet']).prefixlen}"
    _run(["ip", "addr", "replace", addr, "dev", br])
    _run(["ip", "link", "set", "dev", br, "up"])

    for n in st["nodes"]:
        ns, hv = n["netns"], n["host_if"]
        if not _netns_exists(ns):
            _step(st, "netns", ns, lambda ns=ns: _run(["ip", "netns", "add", ns]))
        if _link(hv) is None or _link(n["node_if"], ns) is None:
            if _link(hv) is not None:     # half a pair: start this node's link afresh
                _run(["ip", "link", "del", hv])
            _step(st, "link", hv, lambda hv=hv, ns=ns: _run(
                ["ip", "link", "add", hv, "type", "veth", "peer", "name", n["node_if"],
                 "netns", ns]))
        _run(["ip", "link", "set", "dev", hv, "alias", ALIAS])
        _run(["ip", "link", "set", "dev", hv, "gso_max_size", str(GSO_MAX_BYTES)])
        _run(["ip", "-n", ns, "link", "set", "dev", n["node_if"], "gso_max_size",
              str(GSO_MAX_BYTES)])
        _run(["ip", "link", "set", "dev", hv, "master", br])
        _run(["ip", "link", "set", "dev", hv, "up"])
        _run(["ip", "-n", ns, "addr", "replace", f"{n['ip']}/{addr.split('/')[1]}",
              "dev", n["node_if"]])
        _run(["ip", "-n", ns, "link", "set", "dev", n["node_if"], "up"])
        _run(["ip", "-n", ns, "link", "set", "dev", "lo", "up"])
        _shape(n["node_if"], ns, st["link"])
        _shape(hv, None, st["link"])

    if not any(o["kind"] == "hosts" for o in st["created"]):
        _step(st, "hosts", st["hosts_file"], lambda: _write_hosts(st))
    else:
        _write_hosts(st)
    _write_files(st)
    _wait_reachable(st)
    st["complete"] = True
    if slurm:
        _up_slurm(st, was_complete, slurm_timeout)
    elapsed = time.monotonic() - start
    already = was_complete and len(st["created"]) == created_before
    if not already:
        st["up_seconds"] = round(elapsed, 3)
        st["up_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    _save(st)
    out = dict(st)
    out["already_up"] = already
    out["link_changed"] = link_changed
    out["seconds"] = round(elapsed, 3)
    return out


def _up_slurm(st: dict, was_complete: bool, timeout: float | None) -> None:
    """Start Slurm on the cluster ``st`` unless it runs already; on failure
    stop what was started, and remove the cluster too when this ``up``
    built it, then raise."""
    from . import slurm as _slurm

    rec = st.get("slurm") or {}
    want = {f"slurmd on {n['name']}" for n in st["nodes"]} | {"slurmctld", "munged"}
    if rec.get("complete") and want <= set(_slurm.running()):
        return
    try:
        _slurm.start(st, timeout=timeout or _slurm.DEFAULT_TIMEOUT, save=_save)
    except BaseException:
        _slurm.stop(st)
        st.pop("slurm", None)
        if was_complete:
            _save(st)
        else:
            down()
        raise


def _wait_reachable(st: dict, timeout: float = 10.0) -> None:
    """Wait until the bridge and every veth report carrier (the bridge's
    ports leave the listening state at once: no STP), so that the first
    launch finds the links up."""
    deadline = time.monotonic() + timeout
    names = [n["host_if"] for n in st["nodes"]]
    while True:
        down_now = [nm for nm in names
                    if "LOWER_UP" not in (_link(nm) or {}).get("flags", [])]
        if not down_now:
            return
        if time.monotonic() > deadline:
            raise TiersError(f"links {', '.join(down_now)} did not come up within {timeout:g} s")
        time.sleep(0.05)


# --------------------------------------------------------------------------
# down


def _kill_netns_processes(ns: str) -> int:
    """SIGKILL the processes left inside namespace ``ns`` (daemons and ranks
    of a launch that was interrupted); return how many there were."""
    proc = _run(["ip", "netns", "pids", ns], check=False)
    pids = [int(p) for p in proc.stdout.split() if p.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if Path(f"/proc/{p}").exists()
                and not _zombie(p)]
        time.sleep(0.02)
    return len(pids)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:].startswith("Z")


def _launches(st: dict | None) -> list[tuple[int, str]]:
    """Return ``(pid, command)`` of the launchers running on the cluster:
    the processes of this machine's own namespace whose command line names
    the cluster's rsh agent or hostfile (every mpirun tiers builds for the
    cluster does, and so does one pasted from a line tiers printed)."""
    marks = [str(x) for x in ((st or {}).get("agent"), (st or {}).get("hostfile")) if x]
    marks = marks or [str(state_dir() / "rsh-agent"), str(state_dir() / "hostfile")]
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            words = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [w.decode(errors="replace") for w in words if w]
        if not args or _zombie(int(entry)):
            continue
        if os.path.basename(args[0]) in ("mpirun", "mpiexec", "orterun", "prterun") and \
                any(m in a for a in args for m in marks):
            out.append((int(entry), " ".join(args)))
    return out


def _stop_launches(st: dict | None, grace: float = 5.0) -> list[str]:
    """Stop the launchers running on the cluster (:func:`_launches`):
    SIGTERM, so that each stops its ranks and daemons on every node, then
    SIGKILL after ``grace`` seconds.  Return one line per launcher."""
    found = _launches(st)
    for pid, _ in found:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    left = [pid for pid, _ in found]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if Path(f"/proc/{p}").exists() and not _zombie(p)]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [f"{os.path.basename(cmd.split()[0])} (pid {pid}: "
            f"{os.path.basename(_program_of(cmd, st))})" for pid, cmd in found]


def _program_of(cmdline: str, st: dict | None) -> str:
    """The program a launcher line runs, skipping the cluster's own files
    (the agent is an executable, and would look like the program)."""
    from . import launch as _launch
    marks = {str((st or {}).get("agent")), str((st or {}).get("hostfile"))}
    words = cmdline.split()
    drop = set()
    for i, w in enumerate(words):
        if w in marks:       # "--hostfile F", "--mca plm_rsh_agent A"
            drop.update({i, i - 1})
            if i >= 2 and words[i - 2] in ("--mca", "-mca", "--prtemca"):
                drop.add(i - 2)
    return _launch.guess_program([w for i, w in enumerate(words) if i not in drop])


def _remove_session_folders(st: Mapping | None) -> list[str]:
    """Remove the session folders Open MPI's processes made on the cluster's
    nodes (``/tmp/ompi.<node>.<uid>``): they are named after the node, so
    only the cluster's programs made them, and one left by a killed job
    breaks a later job that gets the same job number."""
    removed = []
    tmp = Path(os.environ.get("TMPDIR") or "/tmp")
    for n in (st or {}).get("nodes", []):
        for folder in tmp.glob(f"ompi.{n['name']}.*"):
            if folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(f"Open MPI session folder {folder}")
    return removed


def down() -> dict:
    """Remove the virtual cluster: every namespace, link and host entry the
    state records (processes left in its namespaces are killed first), plus
    any link that carries tiers' alias and any /etc/hosts line with tiers'
    mark, then the state folder.  Works on a half-built cluster after a
    crash of :func:`up`.  Return ``{"removed": [...], "kept": [...],
    "seconds": S, "was_up": bool}``; ``kept`` lists recorded objects left
    alone because something else now owns them (a link without tiers'
    alias), ``left`` what could not be removed (empty unless something
    failed)."""
    check_tools()
    start = time.monotonic()
    st = load_state()
    removed: list[str] = []
    kept: list[str] = []
    created = list((st or {}).get("created", []))
    # programs running on the cluster stop first, through their launcher,
    # so that none is left waiting on nodes that are going away
    stopped = _stop_launches(st)
    from . import slurm as _slurm
    removed += _slurm.stop(st)          # slurmd, slurmctld, munged and their files
    for obj in reversed(created):
        kind, name = obj.get("kind"), obj.get("name")
        if kind == "netns" and _netns_exists(name):
            _kill_netns_processes(name)
            _run(["ip", "netns", "delete", name])
            removed.append(f"netns {name}")
        elif kind == "link":
            link = _link(name)
            if link is None:
                continue
            if _ours(link) or not link.get("ifalias"):
                _run(["ip", "link", "delete", "dev", name])
                removed.append(f"link {name}")
            else:
                kept.append(f"link {name} (alias '{link.get('ifalias')}')")
        elif kind == "hosts":
            n = _remove_hosts(Path(name))
            if n:
                removed.append(f"{n} host entries in {name}")
    # Links marked as ours that no state records (a state file lost).
    proc = _run(["ip", "-j", "link", "show"], check=False)
    try:
        rows = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        rows = []
    for row in rows:
        name = row.get("ifname", "")
        if row.get("ifalias") == ALIAS and name.startswith(PREFIX + "-"):
            _run(["ip", "link", "delete", "dev", name], check=False)
            removed.append(f"link {name}")
    removed += _remove_session_folders(st)
    hp = Path((st or {}).get("hosts_file") or hosts_path())
    n = _remove_hosts(hp)
    if n:
        removed.append(f"{n} host entries in {hp}")
    left = [f"netns {o['name']}" for o in created
            if o.get("kind") == "netns" and _netns_exists(o["name"])]
    left += [f"link {o['name']}" for o in created if o.get("kind") == "link"
             and _link(o["name"]) is not None and not any(k.startswith(f"link {o['name']} ")
                                                         for k in kept)]
    left += [ln for ln in leftovers() if ln.startswith("hosts line")]
    d = state_dir()
    for name in ("hostfile", "rsh-agent", "state.json.tmp", "state.json"):
        try:
            (d / name).unlink()
        except FileNotFoundError:
            pass
    try:
        d.rmdir()
    except OSError:
        pass
    return {"removed": removed, "kept": kept, "left": left, "was_up": st is not None,
            "stopped": stopped,
            "seconds": round(time.monotonic() - start, 3)}


def leftovers() -> list[str]:
    """Return what of a virtual cluster exists on this machine: namespaces
    named ``tiers-n*``, links named ``tiers-*``, /etc/hosts lines with tiers'
    mark and the state file (empty after :func:`down`)."""
    out = [f"netns {ns}" for ns in _netns_list() if re.match(rf"^{PREFIX}-n\d+$", ns)]
    proc = _run(["ip", "-j", "link", "show"], check=False)
    try:
        rows = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        rows = []
    out += [f"link {r['ifname']}" for r in rows if r.get("ifname", "").startswith(PREFIX + "-")]
    try:
        out += [f"hosts line '{ln}'" for ln in hosts_path().read_text().splitlines()
                if HOSTS_MARK in ln]
    except OSError:
        pass
    if state_path().exists():
        out.append(f"state {state_path()}")
    from . import slurm as _slurm
    out += [f"process {p}" for p in _slurm.running()]
    if _slurm.folder().exists():
        out.append(f"folder {_slurm.folder()}")
    return out


# --------------------------------------------------------------------------
# status


def status() -> dict:
    """Return the state of the cluster with what exists now: per node,
    whether its namespace and both link ends exist, the qdisc on each end
    (kind, rate, bytes and drops sent) and the processes running in it;
    ``{"up": False}`` when no cluster is up."""
    st = load_state()
    if st is None:
        return {"schema": SCHEMA, "up": False}
    out = dict(st)
    out["up"] = bool(st.get("complete"))
    spaces = set(_netns_list())
    nodes = []
    for n in st.get("nodes", []):
        rec = dict(n)
        rec["netns_exists"] = n["netns"] in spaces
        hl = _link(n["host_if"])
        rec["host_if_exists"] = hl is not None
        rec["host_if_up"] = hl is not None and "LOWER_UP" in hl.get("flags", [])
        rec["node_if_exists"] = rec["netns_exists"] and _link(n["node_if"], n["netns"]) is not None
        rec["qdisc_node"] = _qdisc_summary(_qdisc(n["node_if"], n["netns"])
                                           if rec["node_if_exists"] else None)
        rec["qdisc_host"] = _qdisc_summary(_qdisc(n["host_if"]) if hl else None)
        if rec["netns_exists"]:
            pids = _run(["ip", "netns", "pids", n["netns"]], check=False).stdout.split()
            rec["processes"] = len(pids)
        else:
            rec["processes"] = 0
        nodes.append(rec)
    out["nodes"] = nodes
    if st.get("slurm"):
        from . import slurm as _slurm
        out["slurm"] = dict(st["slurm"], running=_slurm.running(), nodes=_slurm.nodes())
    out["healthy"] = out["up"] and all(r["netns_exists"] and r["host_if_up"]
                                       and r["node_if_exists"] for r in nodes)
    return out


def _qdisc_summary(q: dict | None) -> dict | None:
    if q is None:
        return None
    opts = q.get("options", {})
    return {"kind": q.get("kind"), "rate_bits_per_s": _tc_rate(opts.get("rate")),
            "bytes": q.get("bytes"), "packets": q.get("packets"), "drops": q.get("drops")}


def _tc_rate(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value) * 8       # tc -j gives bytes per second
    try:
        return parse_rate(str(value).replace("Mbit", "mbit").replace("Gbit", "gbit")
                          .replace("Kbit", "kbit"))
    except TiersError:
        return None


# --------------------------------------------------------------------------
# Launching on the cluster


def require_up() -> dict:
    """Return the state of the cluster that is up; raise TiersError (one
    line) when none is, or it is half built."""
    st = load_state()
    if st is None:
        raise TiersError("no virtual cluster is up: run 'tiers vcluster up --nodes N' (as root)")
    if not st.get("complete"):
        raise TiersError("the virtual cluster is half built (an earlier 'up' stopped): run "
                         "'tiers vcluster down' and 'up' again")
    return st


def launch_options(ranks: int | None = None, *, mca: Mapping[str, str] | None = None,
                   state: dict | None = None) -> dict:
    """Return the :func:`tiers.launch.build_command` keyword arguments that
    run a launch on the virtual cluster: ``hostfile`` (the nodes and their
    slots), ``rsh_agent`` (the agent that enters a node's namespaces),
    ``bind_to="none"`` (every node's daemon would otherwise bind its first
    rank to the same core) and ``mca``: TCP and the daemons' out-of-band
    channel on the cluster's subnet only, BTLs self, vader and tcp with the
    ob1 PML, no tree spawn, and ranks yielding the CPU when more ranks than
    cores run.  ``mca`` entries given are kept (and win).  Raise TiersError
    when no cluster is up."""
    from . import launch as _launch

    st = state or require_up()
    params = {
        "pml": "ob1",
        "btl": "self,vader,tcp",
        "btl_tcp_if_include": st["subnet"],
        "oob_tcp_if_include": st["subnet"],
        "plm_rsh_no_tree_spawn": "1",
        # one-sided MPI between nodes (tiers mbc's RMA transport): Debian's
        # openmpi-mca-params.conf turns off pt2pt, the only osc component
        # that works over TCP between the namespaces
        "osc": "^ucx",
    }
    if ranks is not None and ranks > _launch.local_slots():
        params["mpi_yield_when_idle"] = "1"
    params.update({str(k): str(v) for k, v in (mca or {}).items()})
    return {"hostfile": st["hostfile"], "rsh_agent": st["agent"], "mca": params,
            "bind_to": "none"}


def launcher_settings(kind: str, options: Mapping, env: Mapping[str, str], *,
                      state: dict | None = None) -> tuple[dict, dict]:
    """Return ``(build_command options, launcher environment)``: ``options``
    and ``env`` of a launch with MPICH's Hydra or Slurm's srun turned into a
    launch on the cluster.  Hydra starts its proxies through the cluster's
    agent and is reached on the bridge (``HYDRA_IFACE``); srun gets the
    cluster's Slurm (:func:`tiers.slurm.environment`).  Open MPI launches
    go through :func:`command` instead.  Raise TiersError when no cluster,
    or for srun no Slurm on it, is up."""
    from . import slurm as _slurm

    st = state or require_up()
    opts, out_env = dict(options), dict(env)
    if kind == "mpich":
        opts["rsh_agent"] = st["agent"]
        out_env["HYDRA_IFACE"] = st["bridge"]
    elif kind == "slurm":
        if not st.get("slurm"):
            raise TiersError("the virtual cluster runs no Slurm: 'tiers vcluster up --slurm' "
                             "first")
        out_env.update(_slurm.environment(st))
    else:
        raise TiersError(f"launcher_settings is for mpich and slurm, not {kind}")
    return opts, out_env


def launcher(kind: str):
    """Return the :class:`tiers.launch.Launcher` of ``kind`` that launches
    on the cluster; for ``slurm`` the srun that its Slurm answers (srun
    22.05 gives its version only with a configuration)."""
    from . import launch as _launch
    from . import slurm as _slurm

    kind = _launch.Launcher(kind).kind
    if kind != "slurm":
        return _launch.detect(kind)
    return _slurm.launcher()


def slots_total(state: dict | None = None) -> int:
    """Return the slots of the cluster that is up (nodes x slots)."""
    st = state or require_up()
    return len(st["nodes"]) * int(st["slots"])


def command(program: Sequence[str] | str, ranks: int, *, launcher=None,
            env: Mapping[str, str] | None = None, mca: Mapping[str, str] | None = None,
            **options) -> list[str]:
    """Return the ``mpirun`` command line that runs ``program`` on ``ranks``
    ranks of the virtual cluster (:func:`launch_options` plus ``options``
    for :func:`tiers.launch.build_command`: map_by, oversubscribe, bind_to,
    extra ...).  Raise TiersError when no cluster is up or the launcher is
    not Open MPI."""
    from . import launch as _launch

    st = require_up()
    lau = launcher if isinstance(launcher, _launch.Launcher) else _launch.detect(launcher or
                                                                                "openmpi")
    if lau.kind != "openmpi":
        raise TiersError(f"tiers vcluster launches with Open MPI's mpirun, not {lau.describe()}")
    opts = launch_options(ranks, mca=mca, state=st)
    for key, value in options.items():
        if value is not None:
            opts[key] = value
    if options.get("oversubscribe") is None and ranks > slots_total(st):
        opts["oversubscribe"] = True
    return _launch.build_command(lau, program, ranks, env=env, **opts)


def run(program: Sequence[str] | str, ranks: int, *, timeout: float | None = None,
        stream=False, check: bool = True, launcher=None,
        env: Mapping[str, str] | None = None, mca: Mapping[str, str] | None = None,
        **options):
    """Run ``program`` on ``ranks`` ranks of the virtual cluster and return
    the :class:`tiers.launch.RunResult` (``timeout``, ``stream`` and
    ``check`` as :func:`tiers.launch.run_command`)."""
    from . import launch as _launch

    cmd = command(program, ranks, launcher=launcher, env=env, mca=mca, **options)
    argv = [str(program)] if isinstance(program, (str, os.PathLike)) else list(program)
    if stream is True:
        stream = _forward_quietly
    return _launch.run_command(cmd, timeout=timeout, stream=stream, check=check,
                               label=os.path.basename(str(argv[0])), ranks=ranks)


_LOST_NODE = (
    # Open MPI 4 (ORTE) and 5 (PRRTE): the daemon of a node went away
    re.compile(r"Remote daemon:\s*\S+\s+on node\s+(\S+)"),
    re.compile(r"daemon on node\s+(\S+)\s+(?:has )?(?:unexpectedly )?(?:failed|died|lost)", re.I),
    re.compile(r"lost (?:communication|contact) with (?:a remote daemon|the daemon) on "
               r"(?:node\s+)?(\S+)", re.I),
)


def node_failure(output: str, state: dict | None = None) -> str | None:
    """Return the name of the cluster node whose Open MPI daemon went away
    during a run, as the launcher's output ``output`` says, or None when it
    says no such thing (or names a host that is not a node of ``state``)."""
    names = {n["name"] for n in (state or {}).get("nodes", [])}
    for pat in _LOST_NODE:
        m = pat.search(output or "")
        if m:
            node = m.group(1).rstrip(".,;:")
            if not names or node in names:
                return node
    return None


def node_failure_message(node: str, label: str, ranks: int | None) -> str:
    """The one line that says node ``node`` stopped during a run."""
    on = f" on {ranks} ranks" if ranks else ""
    return (f"node {node} of the virtual cluster stopped during the run of {label}{on}: "
            "Open MPI lost its daemon there and stopped the job")


_OMPI_LINE = re.compile(r"^(?:-{20,}\s*$|(?:mpirun|prterun|orterun|mpiexec)(?: noticed|:)|"
                        r"\[[^\]\s]+:\d+\]|ORTE |PRTE |Primary job\s+terminated)")


class _Summariser:
    """Forwards what a run prints as it comes, except the launcher's own
    messages (Open MPI's dashed help blocks and ``mpirun noticed ...``
    lines), which it keeps; :meth:`finish` then says in one line what went
    wrong, or prints them as they were when it cannot."""

    def __init__(self):
        self.held: list[tuple[str, str]] = []
        self.in_block = {"stdout": False, "stderr": False}   # per stream: two readers

    def __call__(self, name: str, line: str) -> None:
        if _SETPGID_RACE.search(line):
            return
        dashes = re.match(r"^-{20,}\s*$", line) is not None
        if self.in_block.get(name) or dashes or _OMPI_LINE.match(line):
            self.held.append((name, line))
            if dashes:
                self.in_block[name] = not self.in_block.get(name)
            return
        _forward_quietly(name, line)

    def text(self) -> str:
        return "".join(line for _, line in self.held)

    def finish(self, returncode: int, *, label: str, ranks: int, state: dict | None) -> None:
        """Raise TiersError (one line) for a failed run whose cause is
        known; otherwise print the held lines."""
        from . import launch as _launch

        if returncode != 0:
            node = node_failure(self.text(), state)
            if node is not None:
                raise TiersError(node_failure_message(node, label, ranks),
                                 code=returncode if 0 < returncode < 256 else 1)
            failure = _launch.parse_failure(self.text())
            if failure is not None:
                raise TiersError(_launch.failure_message(
                    failure, ranks=ranks, label=label, launcher="mpirun",
                    returncode=returncode), code=returncode if 0 < returncode < 256 else 1)
        for name, line in self.held:
            _forward_quietly(name, line)


# Open MPI 4.x's rsh launcher calls setpgid() on a child that may already
# have exec'd the agent, and then warns; the daemon is started all the same.
_SETPGID_RACE = re.compile(r"plm:rsh: Warning: setpgid\(\d+,\d+\) failed in parent")


def _forward_quietly(name: str, line: str) -> None:
    if _SETPGID_RACE.search(line):
        return
    import sys

    out = sys.stdout if name == "stdout" else sys.stderr
    out.write(line)
    out.flush()


# --------------------------------------------------------------------------
# Command line


def _say(*words) -> None:
    """Print a line for the person at the terminal: on standard output, or
    on standard error when the result document goes to standard output
    (``--json -`` or ``--format json``), so that stdout stays one document."""
    from . import render

    print(*words, file=sys.stderr if render.doc_on_stdout() else sys.stdout)


def _print_state(st: dict) -> None:
    link = st.get("link") or {}
    rate = link.get("rate") or "unshaped"
    _say(f"virtual cluster: {len(st.get('nodes', []))} nodes x {st.get('slots')} slots, "
          f"links {rate}" + (f" (tbf, burst {link['burst_bytes']} B)" if link.get("rate") else "")
          + f", subnet {st.get('subnet')}, bridge {st.get('bridge')} {st.get('bridge_ip')}")
    for n in st.get("nodes", []):
        extra = ""
        if "netns_exists" in n:
            ok = n["netns_exists"] and n["host_if_up"] and n["node_if_exists"]
            q = n.get("qdisc_node") or {}
            r = q.get("rate_bits_per_s")
            extra = (f"  {'ok' if ok else 'BROKEN'}; {q.get('kind') or 'no qdisc'}"
                     + (f" {format_rate(r)}" if r else "")
                     + (f", {q.get('bytes'):,} B sent" if q.get("bytes") is not None else "")
                     + f", {n['processes']} processes")
        _say(f"  {n['name']:<10} {n['ip']:<15} "
              f"{n['host_if']}<->{n['netns']}:{n['node_if']}{extra}")
    _say(f"hostfile {st.get('hostfile')}; agent {st.get('agent')}; state {state_path()}")
    _print_slurm(st)


def _print_slurm(st: dict) -> None:
    """Slurm's view of the nodes (sinfo), when the cluster runs Slurm."""
    sl = st.get("slurm")
    if not sl:
        return
    view = sl.get("nodes") or []
    _say(f"slurm: {len(view)} nodes known to slurmctld; SLURM_CONF={sl.get('conf')}"
         + (f"; running: {', '.join(sl['running'])}" if "running" in sl else ""))
    for v in view:
        _say(f"  {v['name']:<10} {v['state']:<10} {v['cpus']} CPUs = {v['sockets']} sockets x "
             f"{v['cores_per_socket']} cores x {v['threads_per_core']} threads, "
             f"partition {v['partition']}")


def main(args, argv: list[str]) -> int:
    """``tiers vcluster up|down|status|mpirun``; return the exit status."""
    action = args.vcluster_action
    if action == "up":
        st = up(args.nodes, args.slots, args.link, args.subnet,
                slurm=bool(getattr(args, "slurm", False)),
                slurm_timeout=getattr(args, "slurm_timeout", None))
        if args.json:
            _write_json(st, args.json, args, argv)
        if st["already_up"] and st["link_changed"]:
            _say(f"already up; links reshaped to {st['link']['rate'] or 'unshaped'} "
                  f"in {st['seconds']:.2f} s")
        elif st["already_up"]:
            _say(f"already up ({st['seconds']:.2f} s to check)")
        else:
            _say(f"up in {st['seconds']:.2f} s")
        _print_state(st)
        _say(f"run a program on it: tiers vcluster mpirun -n {slots_total(st)} -- PROGRAM "
             "[ARGS]")
        if st.get("slurm"):
            _say(f"or with Slurm: tiers vcluster srun -n {slots_total(st)} PROGRAM [ARGS] "
                 "(eval \"$(tiers vcluster env)\" for srun, salloc and sinfo themselves)")
        return 0
    if action == "down":
        res = down()
        if args.json:
            _write_json(res, args.json, args, argv)
        for line in res.get("stopped") or []:
            _say(f"stopped {line}, which ran on the cluster")
        if not res["was_up"] and not res["removed"]:
            _say("no virtual cluster was up; nothing to remove")
        else:
            _say(f"down in {res['seconds']:.2f} s: removed "
                  + (", ".join(res["removed"]) or "nothing"))
        for k in res["kept"]:
            _say(f"left alone: {k}")
        foreign = [ln for ln in leftovers() if ln.startswith(("netns", "link"))
                   and ln.split()[1] not in " ".join(res["kept"] + res["left"])]
        for ln in foreign:
            _say(f"left alone: {ln} (not created by tiers vcluster)")
        if res["left"]:
            raise TiersError(f"still present after down: {', '.join(res['left'])}")
        return 0
    if action == "status":
        check_tools()
        st = status()
        if args.json:
            _write_json(st, args.json, args, argv)
        if not st["up"] and "nodes" not in st:
            _say("no virtual cluster is up")
            return 0
        if not st["up"]:
            _say("half built (an earlier 'up' stopped): run 'tiers vcluster down'")
        _print_state(st)
        return 0
    if action == "mpirun":
        cmd = list(args.cmd or [])
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            raise TiersError("no program given: tiers vcluster mpirun -n N -- PROGRAM [ARGS]")
        env = {}
        for item in args.env or []:
            name, eq, value = item.partition("=")
            if not eq:
                value = os.environ.get(name, "")
            env[name] = value
        st = require_up()
        ranks = args.ranks if args.ranks is not None else slots_total(st)
        rankfile = getattr(args, "rankfile", None)
        if rankfile and args.map_by:
            raise TiersError("a rankfile fixes where every rank runs: drop --map-by")
        summariser = _Summariser()
        res = run(cmd, ranks, timeout=args.timeout, stream=summariser, check=False,
                  env=env or None, map_by=args.map_by,
                  oversubscribe=True if args.oversubscribe else None,
                  # the rankfile binds each rank; the cluster's bind_to=none would undo it
                  **({"rankfile": rankfile, "bind_to": ""} if rankfile else {}))
        summariser.finish(res.returncode, label=os.path.basename(cmd[0]), ranks=ranks,
                          state=st)
        return res.returncode
    if action in ("srun", "salloc", "sinfo"):
        return _slurm_command(action, list(args.cmd or []), args)
    if action == "env":
        from . import slurm as _slurm
        st = require_up()
        if not st.get("slurm"):
            raise TiersError("the virtual cluster runs no Slurm: tiers vcluster up --slurm")
        for name, value in _slurm.environment(st, mpi=args.mpi).items():
            print(f"export {name}='{value}'")
        return 0
    raise TiersError(f"unknown vcluster action {action}")


def _slurm_command(action: str, words: list[str], args) -> int:
    """Run Slurm's ``srun``/``salloc``/``sinfo`` with ``words`` on the
    cluster (its SLURM_CONF, PMI type and Open MPI settings); return the
    command's exit status."""
    from . import launch as _launch
    from . import slurm as _slurm

    if words and words[0] == "--":
        words = words[1:]
    st = require_up()
    if not st.get("slurm"):
        raise TiersError(f"the virtual cluster runs no Slurm: 'tiers vcluster up --slurm' "
                         f"before 'tiers vcluster {action}'")
    if action != "sinfo" and not words:
        raise TiersError(f"nothing to run: tiers vcluster {action} [OPTIONS] PROGRAM [ARGS]")
    env = _slurm.environment(st, mpi=args.mpi)
    res = _launch.run_command([action] + words, timeout=args.timeout, stream=True,
                              check=False, env=env)
    return res.returncode


def document(state: dict, args, argv: list[str]) -> dict:
    """Return the result document of ``tiers vcluster up|down|status``: the
    envelope every tiers document has (machine, versions, command), with the
    cluster's state (or what ``down`` removed) as its summary."""
    from . import result

    params = {"action": args.vcluster_action}
    for name in ("nodes", "slots", "link", "subnet"):
        if getattr(args, name, None) is not None:
            params[name] = getattr(args, name)
    return result.new_document("vcluster", params=params, samples=[], summary=state,
                               argv=argv)


def _write_json(state: dict, path: str, args, argv: list[str]) -> None:
    from . import output  # atomic, no devices or symbolic links

    output.write_text(path, json.dumps(document(state, args, argv), indent=1) + "\n",
                      option="--json")


__all__ = [
    "ALIAS", "BRIDGE", "DEFAULT_SUBNET", "HOSTS_MARK", "SCHEMA", "check_tools", "command",
    "down", "format_rate", "launch_options", "leftovers", "load_state", "parse_rate", "plan",
    "require_up", "run", "slots_total", "state_path", "status", "unavailable_reason", "up",
]
