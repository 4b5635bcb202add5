"""Scotch's diagnostics in tiers map: libtiers defines Scotch's error-print
functions (native/src/map/scotch_error.c) instead of linking libscotcherr,
so a mapping that fails in Scotch raises one TiersError line that ends with
Scotch's own message, nothing reaches the process's stderr, and fd 2 stays
the program's own while the mapping runs (other threads keep writing to it).

Each case runs in a fresh Python process whose stderr is a pipe of its own.
The failure is a real one inside Scotch: the one-call mapping onto a tleaf
target of 2^20 nodes of 1,000 cores (within tiers' own limits) makes Scotch
ask for some 40 GiB of mapping arrays, which an address-space limit of
8 GiB set in the child refuses on any machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

SCRIPT = r'''
import json, os, resource, sys, threading, time
import numpy as np
from tiers.errors import TiersError
from tiers.map import core


class Graph:
    adjsent = None

    def __init__(self, adj):
        self.n = len(adj)
        self.xadj = np.cumsum([0] + [len(a) for a in adj])
        self.adjncy = np.array([u for a in adj for u in a], dtype=np.int32)
        self.adjwgt = np.ones(len(self.adjncy))


def grid(side):
    adj = [[] for _ in range(side * side)]
    for y in range(side):
        for x in range(side):
            v = y * side + x
            if x + 1 < side:
                adj[v].append(v + 1)
                adj[v + 1].append(v)
            if y + 1 < side:
                adj[v].append(v + side)
                adj[v + side].append(v)
    return Graph(adj)


core._library()
mode = sys.argv[1]
if mode == "fail":
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = 8 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard < 0 else min(limit, hard), hard))
    try:
        core.tree(grid(2), 1 << 20, 10.0, [1000], [1.0])
        out = {"error": None}
    except TiersError as exc:
        out = {"error": str(exc), "scotch": core.scotch_message()}
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    print(json.dumps(out))
else:
    g = grid(90)
    before = os.readlink("/proc/self/fd/2")
    state = {"during": 0, "moved": [], "written": 0}
    running = threading.Event()
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            os.write(2, b"line %d\n" % i)
            i += 1
            if running.is_set():
                state["during"] += 1
                now = os.readlink("/proc/self/fd/2")
                if now != before:
                    state["moved"].append(now)
            time.sleep(0.0005)
        state["written"] = i

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(0.01)
    running.set()
    node, slot = core.tree(g, 16, 10.0, [4, 128], [2.0, 1.0])
    running.clear()
    stop.set()
    t.join()
    state["placed"] = len({(int(a), int(b)) for a, b in zip(node, slot)})
    print(json.dumps(state))
'''


def _run(mode: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True,
                          timeout=120, env=full)


def test_scotch_failure_is_one_line_with_scotchs_message_and_nothing_on_stderr():
    proc = _run("fail")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out = json.loads(proc.stdout)
    assert out["error"] is not None, "Scotch mapped a target it has no memory for"
    # Scotch's message, as libtiers kept it: "function: what", no
    # libscotcherr decoration ("ERROR: ") and nothing printed on fd 2
    scotch = out["scotch"]
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*: \S.*", scotch), scotch
    assert "\n" not in out["error"]
    assert out["error"].startswith("Scotch failed to map the graph"), out["error"]
    assert out["error"].endswith(f" (Scotch: {scotch})"), out["error"]
    assert proc.stderr == b"", proc.stderr.decode(errors="replace")


def test_fd2_stays_the_programs_own_while_scotch_maps():
    """Another thread writes to fd 2 all through a mapping of 8,100 ranks:
    every line arrives on the real stderr and fd 2 never points elsewhere."""
    proc = _run("fd2")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    state = json.loads(proc.stdout)
    assert state["placed"] == 90 * 90          # one core per rank: a real mapping
    assert state["during"] >= 1                 # the writer ran while Scotch mapped
    assert state["moved"] == []
    lines = proc.stderr.decode().splitlines()
    assert lines == [f"line {i}" for i in range(state["written"])]


def test_scotch_resolves_its_error_functions_in_libtiers(tmp_path):
    """Debian's libscotch still names libscotcherr as needed, so both are
    loaded: the dynamic linker must bind libscotch's SCOTCH_errorPrint to
    libtiers' definition (exported from libtiers, which does not need
    libscotcherr itself)."""
    from tiers import native

    lib = native.lib_path("libtiers.so")
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                        text=True, check=True).stdout
    defined = {ln.split()[-1] for ln in nm.splitlines() if ln.strip()}
    assert {"SCOTCH_errorPrint", "SCOTCH_errorPrintW", "SCOTCH_errorProg",
            "tiers_map_scotch_message"} <= defined
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True,
                            check=True).stdout
    assert "libscotcherr" not in needed

    log = tmp_path / "ld"
    proc = _run("fail", {"LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": str(log)})
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    text = "".join(p.read_text(errors="replace") for p in tmp_path.glob("ld*"))
    bound = [ln for ln in text.splitlines()
             if "libscotch-" in ln.split(" to ")[0] and "`SCOTCH_errorPrint'" in ln]
    assert bound, "libscotch never called SCOTCH_errorPrint"
    assert all("libtiers.so" in ln.split(" to ")[1] for ln in bound), bound



def test_programs_own_scotch_messages_still_print():
    """Outside a libtiers mapping call the definitions serve the program's
    own Scotch use (a Scotch user under ``tiers mbc run`` gets libtiers
    first in its lookup order): messages are printed as libscotcherr prints
    them, and not kept as a mapping's message."""
    script = r'''
import ctypes, sys
from tiers import native
lib = ctypes.CDLL(str(native.lib_path("libtiers.so")))
lib.tiers_map_scotch_message.restype = ctypes.c_char_p
lib.SCOTCH_errorPrint(b"graphLoad: bad input (%d)", ctypes.c_int(3))
lib.SCOTCH_errorProg(b"myprog")
lib.SCOTCH_errorPrintW(b"archLoad: %s", b"odd")
sys.stdout.write(repr(lib.tiers_map_scotch_message(0)))
'''
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["ERROR: graphLoad: bad input (3)",
                                        "myprog: WARNING: archLoad: odd"]
    assert proc.stdout == "b''"
