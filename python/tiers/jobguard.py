"""What a job tiers started leaves behind, and a guard that cleans it up
when tiers itself dies.

tiers starts every launcher (``mpirun``, ``mpiexec``, ``srun`` or a plain
program) in a session of its own, so the session id names the job.  This
module

* finds the job's processes (the members of that session, from /proc),
* finds the shared-memory files the job uses (``/dev/shm`` files its
  processes map or hold open) and the Open MPI launcher's session folder
  (``$TMPDIR/ompi.HOST.UID/pid.PID``, ``prte.HOST.UID/dvm.PID``) with the
  job family number in its ``contact.txt``, which names the job's
  ``vader_segment``/``sm_segment`` files even after the ranks are gone,
* removes exactly those once the job is dead, never a file that existed
  before the job started (a snapshot taken before the launch), and
* runs as a small watchdog process (``python jobguard.py``, standard library
  only) that holds a pipe from tiers: when the pipe reaches end-of-file
  without ``done`` (tiers was killed, even by SIGKILL), it stops the whole
  session and cleans up after it.

This file imports nothing from tiers so that the watchdog starts fast.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import time

SHM = "/dev/shm"
LAUNCHERS = {"mpirun", "mpiexec", "orterun", "prterun", "prte", "mpiexec.hydra",
             "mpiexec.openmpi", "mpirun.openmpi", "mpiexec.mpich", "mpirun.mpich",
             "hydra_pmi_proxy", "orted", "prted"}


def snapshot_shm() -> set[tuple[str, int]]:
    """Return the (name, inode) pairs of the entries of /dev/shm now."""
    out = set()
    try:
        with os.scandir(SHM) as it:
            for e in it:
                try:
                    out.add((e.name, e.inode()))
                except OSError:
                    pass
    except OSError:
        pass
    return out


def session_members(sid: int) -> list[int]:
    """Return the PIDs of the live (not zombie) processes of session ``sid``."""
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                text = f.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        # fields: state ppid pgrp session ...
        if len(fields) > 3 and fields[3] == str(sid) and fields[0] not in ("Z", "X"):
            pids.append(int(entry))
    return pids


class JobFiles:
    """What one job was seen to use: its /dev/shm files and its launchers'
    PIDs.  ``observe`` adds what the given live processes use now."""

    def __init__(self, before: set[tuple[str, int]] | None = None):
        self.before = snapshot_shm() if before is None else set(before)
        self.shm: set[str] = set()
        self.launchers: set[int] = set()

    def observe(self, pids) -> None:
        """Record the /dev/shm files ``pids`` map or hold open, and which of
        them are launchers (by command name)."""
        prefix = SHM + "/"
        for pid in pids:
            try:
                with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
                    if f.read().strip() in LAUNCHERS:
                        self.launchers.add(int(pid))
            except OSError:
                continue
            try:
                with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                    for line in f:
                        i = line.find(prefix)
                        if i >= 0:
                            self.shm.add(line[i:].rstrip("\n").removesuffix(" (deleted)"))
            except OSError:
                pass
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    try:
                        target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    except OSError:
                        continue
                    if target.startswith(prefix) and not target.endswith(" (deleted)"):
                        self.shm.add(target)
            except OSError:
                pass

    def cleanup(self) -> list[str]:
        """Remove what the (dead) job left: its /dev/shm files that were not
        there before it started, and its Open MPI session folders.  Return
        the paths removed."""
        removed = []
        families = []
        for folder in _session_folders(self.launchers):
            fam = _job_family(folder)
            if fam is not None:
                families.append(fam)
            try:
                shutil.rmtree(folder)
                removed.append(folder)
            except OSError:
                pass
        pattern = None
        if families:
            alts = "|".join(f"0*{fam:x}" for fam in families)
            pattern = re.compile(r"^(?:vader|sm)_segment\..*\.(?:" + alts +
                                 r")[0-9a-f]{4}\.\d+$")
        uid = os.getuid()
        try:
            entries = list(os.scandir(SHM))
        except OSError:
            entries = []
        for e in entries:
            path = f"{SHM}/{e.name}"
            if path not in self.shm and not (pattern and pattern.match(e.name)):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if (e.name, st.st_ino) in self.before or st.st_uid != uid or not e.is_file(
                    follow_symlinks=False):
                continue
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
        return removed


def _tmp_bases() -> list[str]:
    bases = []
    for b in (os.environ.get("TMPDIR"), "/tmp", "/var/tmp"):
        if b and os.path.isdir(b) and os.path.realpath(b) not in bases:
            bases.append(os.path.realpath(b))
    return bases


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return False
    state = text[text.rfind(")") + 2:][:1]
    return state not in ("Z", "X", "")


def _session_folders(launchers) -> list[str]:
    """Open MPI session folders of the (dead) launcher PIDs ``launchers``."""
    out = []
    uid = os.getuid()
    for pid in launchers:
        if _alive(pid):
            continue  # still running (or the PID is in use again): leave it
        for base in _tmp_bases():
            try:
                tops = os.listdir(base)
            except OSError:
                continue
            for top in tops:
                if not (top.startswith("ompi.") or top.startswith("prte.")):
                    continue
                for leaf in (f"pid.{pid}", f"dvm.{pid}"):
                    path = os.path.join(base, top, leaf)
                    try:
                        st = os.lstat(path)
                    except OSError:
                        continue
                    if st.st_uid == uid and os.path.isdir(path) and not os.path.islink(path):
                        out.append(path)
    return out


def _job_family(folder: str) -> int | None:
    """Return the Open MPI job family of a launcher's session folder (from
    the first field of its contact.txt: the jobid of the launcher)."""
    try:
        with open(os.path.join(folder, "contact.txt"), encoding="ascii",
                  errors="replace") as f:
            head = f.read(200).split(";", 1)[0].split(".", 1)[0].strip()
        return int(head) >> 16 if head.isdigit() else None
    except OSError:
        return None


def stop_session(sid: int, first: int = signal.SIGTERM, grace: float = 3.0,
                 files: JobFiles | None = None) -> None:
    """Send ``first`` to the process group ``sid`` and to every member of
    session ``sid``, wait up to ``grace`` seconds, then SIGKILL what is
    left.  ``files`` (when given) observes the members before they die."""
    members = session_members(sid)
    if files is not None:
        files.observe(members)
    try:
        os.killpg(sid, first)
    except OSError:
        pass
    for pid in members:
        try:
            os.kill(pid, first)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and session_members(sid):
        time.sleep(0.05)
    for _ in range(20):
        left = session_members(sid)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def watchdog_main() -> int:
    """The watchdog: read ``snap INODE HEXNAME`` and ``sid N`` lines from stdin;
    ``done`` ends it quietly; end-of-file without ``done`` stops session N
    and removes its leftovers."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe decides
    before: set[tuple[str, int]] = set()
    sids: list[int] = []
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            break
        words = line.decode("ascii", "replace").split()
        if not words:
            continue
        if words[0] == "done":
            return 0
        if words[0] == "sid" and len(words) == 2 and words[1].isdigit():
            sids.append(int(words[1]))
        elif words[0] == "snap" and len(words) == 3 and words[1].isdigit():
            try:
                before.add((os.fsdecode(bytes.fromhex(words[2])),
                            int(words[1])))
            except ValueError:
                pass
    for sid in sids:
        files = JobFiles(before)
        files.launchers.add(sid)
        stop_session(sid, signal.SIGTERM, grace=3.0, files=files)
        files.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(watchdog_main())
