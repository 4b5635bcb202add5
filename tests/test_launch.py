"""The launching module: real mpirun runs of tiers-whoami at 2 and 3 ranks,
failures, time limits, and the command lines built for each launcher."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from tiers import launch, native
from tiers.errors import TiersError

needs_mpirun = pytest.mark.skipif(
    launch.identify("mpirun") is None or launch.identify("mpirun").kind != "openmpi",
    reason="the multi-rank tests run Open MPI's mpirun")


@pytest.fixture(scope="module")
def whoami():
    return str(native.tool_path("tiers-whoami"))


def _live_processes_with(marker: str) -> list[tuple[int, str]]:
    """Live (not zombie) processes whose command line contains ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        state = stat[stat.rfind(")") + 2:].split()[0]
        if marker in cmdline and state != "Z":
            found.append((int(entry), cmdline))
    return found


# ---------------------------------------------------------------- real runs


@needs_mpirun
@pytest.mark.parametrize("ranks", [2, 3])
def test_every_rank_reports_once_and_sees_the_environment(whoami, ranks):
    preload = native.lib_path("libtiers.so")
    assert preload.is_file(), preload
    env = {"OMP_NUM_THREADS": "3", "LD_PRELOAD": str(preload),
           "TIERS_TEST_VAR": f"ranks={ranks}, with a comma and spaces"}
    assert "TIERS_TEST_VAR" not in os.environ   # it can only come through the launcher
    doc = launch.launch_json([whoami, *[w for n in env for w in ("--env", n)]], ranks,
                             env=env, timeout=120)
    assert doc["schema"] == "tiers.whoami/1"
    assert sorted(r["rank"] for r in doc["ranks"]) == list(range(ranks))
    assert all(r["size"] == ranks for r in doc["ranks"])
    assert len({r["pid"] for r in doc["ranks"]}) == ranks
    for r in doc["ranks"]:
        assert r["env"] == env, r
        assert r["threads"] == 3 and len(r["thread_cpusets"]) == 3


@needs_mpirun
def test_failing_rank_is_named_with_its_exit_code(whoami):
    start = time.monotonic()
    with pytest.raises(launch.LaunchError) as info:
        launch.launch([whoami, "--fail-rank", "1", "--exit-code", "7"], 3, timeout=120)
    assert time.monotonic() - start < 30
    err = info.value
    assert str(err) == "rank 1 of 3 exited with code 7 (tiers-whoami)"
    assert isinstance(err, TiersError) and err.code != 0
    assert err.failure["rank"] == 1 and err.failure["exit_code"] == 7
    assert "rank 1 failing on purpose" in err.stderr   # the full output stays available
    assert not err.timed_out


@needs_mpirun
def test_rank_killed_by_a_signal_is_named(whoami):
    with pytest.raises(launch.LaunchError) as info:
        launch.launch([whoami, "--fail-rank", "2", "--signal", "11"], 3, timeout=120)
    assert str(info.value).startswith("rank 2 of 3 was killed by signal 11")
    assert info.value.failure["signal"] == 11


@needs_mpirun
def test_program_error_line_is_carried_into_the_message(whoami):
    with pytest.raises(launch.LaunchError) as info:
        launch.launch([whoami, "--no-such-option"], 2, timeout=120)
    msg = str(info.value)
    # every rank fails before MPI_Init, so Open MPI may or may not name a rank
    assert "tiers-whoami" in msg and msg.endswith(
        "bad option --no-such-option (use --env NAME (at most 64), --fail-rank R, "
        "--exit-code C, --signal S, --sleep S)")
    assert "\n" not in msg


@needs_mpirun
def test_time_limit_stops_the_whole_job(whoami):
    marker = f"TIERS_MARK_{uuid.uuid4().hex}"
    start = time.monotonic()
    with pytest.raises(launch.LaunchError) as info:
        launch.launch([whoami, "--sleep", "60", "--env", marker], 3, timeout=3, grace=2)
    elapsed = time.monotonic() - start
    assert info.value.timed_out
    assert "timed out after 3 s" in str(info.value)
    assert 3 <= elapsed < 15, elapsed
    # mpirun and every rank carry the marker on their command line.
    deadline = time.monotonic() + 3
    while _live_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    # (on one host Open MPI starts no orted: mpirun forks the ranks itself)
    assert _live_processes_with(marker) == []


@needs_mpirun
def test_streamed_output_arrives_line_by_line(whoami):
    lines = []
    result = launch.launch([whoami], 2, timeout=120,
                           stream=lambda name, line: lines.append((name, line)))
    assert result.streamed and result.returncode == 0
    out = [line for name, line in lines if name == "stdout"]
    assert any('"schema":"tiers.whoami/1"' in line for line in out)
    assert launch.parse_json_output("".join(out))["ranks"][1]["rank"] == 1


@needs_mpirun
@pytest.mark.skipif(launch.local_slots() < 2, reason="needs two cores")
def test_binding_options_reach_the_ranks(whoami):
    doc = launch.launch_json([whoami], 2, bind_to="core", timeout=120)
    sets = sorted(r["cpuset"] for r in doc["ranks"])
    assert len(set(sets)) == 2 and all("," not in s and "-" not in s for s in sets), sets
    doc = launch.launch_json([whoami], 1, cpus_per_rank=2, timeout=120)
    cpuset = doc["ranks"][0]["cpuset"]
    assert "-" in cpuset or "," in cpuset, cpuset   # two cores, e.g. "0-1"


@needs_mpirun
def test_env_injected_into_a_user_command_reaches_every_rank(whoami):
    user = ["mpirun", "--oversubscribe", "-n", "3", whoami, "--env", "TIERS_TEST_VAR"]
    cmd = launch.inject_env(user, {"TIERS_TEST_VAR": "injected"})
    result = launch.run_command(cmd, timeout=120)   # as root: OMPI_ALLOW_RUN_AS_ROOT is set
    doc = result.json()
    assert [r["env"]["TIERS_TEST_VAR"] for r in doc["ranks"]] == ["injected"] * 3


# ---------------------------------------------------------------- detection


def test_detect_reports_the_installed_open_mpi():
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun")
    found = launch.detect()
    assert found.kind == "openmpi" and found.major >= 4
    assert found.describe() == f"Open MPI {found.version}"


def test_missing_launcher_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("TIERS_LAUNCHER", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(TiersError) as info:
        launch.detect()
    msg = str(info.value)
    assert msg.startswith("no MPI launcher found") and "openmpi-bin" in msg and "\n" not in msg


def test_launcher_named_in_env_but_absent(monkeypatch, tmp_path):
    # a PATH holding Open MPI's mpirun only, whether MPICH is installed or not
    ompi = launch.identify("mpirun.openmpi") or launch.identify("mpirun")
    if ompi is None or ompi.kind != "openmpi":
        pytest.skip("needs Open MPI's mpirun")
    (tmp_path / "mpirun").symlink_to(ompi.program)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TIERS_LAUNCHER", "mpich")
    with pytest.raises(TiersError) as info:
        launch.detect()
    msg = str(info.value)
    assert "TIERS_LAUNCHER=mpich" in msg and "no MPICH mpiexec" in msg and "\n" not in msg
    monkeypatch.setenv("TIERS_LAUNCHER", "lam")
    with pytest.raises(TiersError, match="unknown MPI launcher 'lam'"):
        launch.detect()


def test_slurm_job_without_srun_falls_back_to_mpirun(monkeypatch):
    if shutil.which("srun") or shutil.which("mpirun") is None:
        pytest.skip("needs mpirun and no srun")
    monkeypatch.delenv("TIERS_LAUNCHER", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "12345")
    assert launch.detect().kind == "openmpi"


def test_run_command_with_missing_launcher(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TiersError, match="^mpirun not found: install openmpi-bin"):
        launch.run_command(["mpirun", "-n", "2", "./app"])


# ---------------------------------------------------------------- command lines

OMPI4 = launch.Launcher("openmpi", "4.1.4")
OMPI5 = launch.Launcher("openmpi", "5.0.3")
MPICH = launch.Launcher("mpich", "4.0.2")
SLURM = launch.Launcher("slurm", "22.05.8")


def test_open_mpi_4_oversubscribes_only_beyond_the_slots():
    over = launch.build_command(OMPI4, ["./app", "-v"], 3, slots=2, as_root=True,
                                env={"A": "1", "B": "x y"}, extra=["--report-bindings"])
    assert over == ["mpirun", "-n", "3", "--allow-run-as-root", "--oversubscribe",
                    "-x", "A=1", "-x", "B=x y", "--report-bindings", "./app", "-v"]
    fits = launch.build_command(OMPI4, "./app", 2, slots=2, as_root=False)
    assert fits == ["mpirun", "-n", "2", "./app"]
    # hybrid ranks use cpus_per_rank slots each
    assert "--oversubscribe" in launch.build_command(OMPI4, "./app", 2, slots=2,
                                                     cpus_per_rank=2, as_root=False)
    # a host list gives the slot count
    assert "--oversubscribe" not in launch.build_command(
        OMPI4, "./app", 4, hosts=["a:2", "b:2"], as_root=False)
    five = launch.build_command(OMPI4, "./app", 5, hosts=["a:2", "b:2"], as_root=False)
    assert "--oversubscribe" in five and five[five.index("--host") + 1] == "a:2,b:2"


def test_root_option_follows_the_user(monkeypatch):
    cmd = launch.build_command(OMPI4, "./app", 1, slots=4)
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    assert "--allow-run-as-root" not in launch.build_command(MPICH, "./app", 1, as_root=True)


def test_open_mpi_5_spells_oversubscription_and_rankfiles_as_map_by_modifiers():
    cmd = launch.build_command(OMPI5, "./app", 3, slots=2, as_root=False)
    assert cmd == ["mpirun", "-n", "3", "--map-by", ":OVERSUBSCRIBE", "./app"]
    cmd = launch.build_command(OMPI5, "./app", 4, slots=2, map_by="core", cpus_per_rank=2,
                               bind_to="core", as_root=False)
    assert cmd[cmd.index("--map-by") + 1] == "core:PE=2:OVERSUBSCRIBE"
    assert cmd[cmd.index("--bind-to") + 1] == "core:overload-allowed"
    assert "--oversubscribe" not in cmd
    rf5 = launch.build_command(OMPI5, "./app", 2, slots=4, rankfile="rf", as_root=False)
    assert rf5[rf5.index("--map-by") + 1] == "rankfile:file=rf" and "--rankfile" not in rf5
    rf4 = launch.build_command(OMPI4, "./app", 2, slots=4, rankfile="rf", as_root=False)
    assert rf4[rf4.index("--rankfile") + 1] == "rf" and "--map-by" not in rf4


def test_open_mpi_vcluster_options_per_version():
    opts = dict(hostfile="hosts", mca={"btl": "self,tcp"}, rsh_agent="/x/agent",
                as_root=False, oversubscribe=False)
    c4 = launch.build_command(OMPI4, "./app", 4, **opts)
    assert c4 == ["mpirun", "-n", "4", "--hostfile", "hosts", "--mca", "btl", "self,tcp",
                  "--mca", "plm_rsh_agent", "/x/agent", "./app"]
    c5 = launch.build_command(OMPI5, "./app", 4, **opts)
    assert c5[-4:] == ["--prtemca", "plm_ssh_agent", "/x/agent", "./app"]
    with pytest.raises(TiersError, match="rankfile"):
        launch.build_command(OMPI4, "./app", 2, cpu_map=[[0], [1]])


def test_mpich_command_line():
    cmd = launch.build_command(MPICH, ["./app", "1"], 4, hostfile="hosts", cpus_per_rank=2,
                               env={"OMP_NUM_THREADS": "2"}, map_by="socket",
                               extra=["-prepend-rank"], as_root=True)
    assert cmd == ["mpiexec", "-n", "4", "-f", "hosts", "-bind-to", "core:2",
                   "-map-by", "socket", "-genv", "OMP_NUM_THREADS", "2", "-prepend-rank",
                   "./app", "1"]
    user = launch.build_command(MPICH, "./app", 2, cpu_map=[[0, 1], [2, 3]])
    assert user[user.index("-bind-to") + 1] == "user:0+1,2+3"
    assert "-ppn" in launch.build_command(MPICH, "./app", 2, map_by="node")
    with pytest.raises(TiersError, match="MPICH has no rankfile"):
        launch.build_command(MPICH, "./app", 2, rankfile="rf")
    with pytest.raises(TiersError, match="MCA"):
        launch.build_command(MPICH, "./app", 2, mca={"btl": "tcp"})


def test_slurm_command_line():
    cmd = launch.build_command(SLURM, "./app", 4, cpus_per_rank=2, bind_to="core",
                               map_by="socket", env={"A": "1", "PLACES": "{0,1},{2,3}"},
                               extra=["--mpi=pmix"], as_root=True)
    assert cmd == ["srun", "-n", "4", "--cpus-per-task=2", "--cpu-bind=cores",
                   "--distribution=block:cyclic", "--export=ALL,A=1", "--mpi=pmix", "./app"]
    singles = launch.build_command(SLURM, "./app", 2, cpu_map=[[3], [1]])
    assert "--cpu-bind=map_cpu:3,1" in singles
    masks = launch.build_command(SLURM, "./app", 2, cpu_map=[[0, 1], [2, 3]])
    assert "--cpu-bind=mask_cpu:0x3,0xc" in masks
    assert "--overcommit" not in launch.build_command(SLURM, "./app", 64)
    with pytest.raises(TiersError):
        launch.build_command(SLURM, "./app", 2, rankfile="rf")


def test_bad_inputs_are_tiers_errors():
    with pytest.raises(TiersError, match="positive integer"):
        launch.build_command(OMPI4, "./app", 0)
    with pytest.raises(TiersError, match="not a valid environment variable"):
        launch.build_command(OMPI4, "./app", 2, env={"A-B": "1"})
    with pytest.raises(TiersError, match="cpu_map has 1 entries for 2 ranks"):
        launch.build_command(MPICH, "./app", 2, cpu_map=[[0]])


def test_inject_env_into_user_commands():
    env = {"LD_PRELOAD": "/opt/libtrace.so"}
    ompi = launch.inject_env(["mpirun", "-n", "4", "./app", "-x"], env, kind="openmpi")
    assert ompi == ["mpirun", "-x", "LD_PRELOAD=/opt/libtrace.so", "-n", "4", "./app", "-x"]
    # the user's own setting of the same name is replaced, others kept
    replaced = launch.inject_env(["mpirun", "-x", "LD_PRELOAD=/old.so", "-x", "K=1", "-n", "2",
                                  "./app"], env, kind="openmpi")
    assert replaced == ["mpirun", "-x", "LD_PRELOAD=/opt/libtrace.so", "-x", "K=1", "-n",
                        "2", "./app"]
    hydra = launch.inject_env(["mpiexec.hydra", "-n", "4", "./app"], env)
    assert hydra == ["mpiexec.hydra", "-genv", "LD_PRELOAD", "/opt/libtrace.so", "-n", "4",
                     "./app"]
    srun = launch.inject_env(["srun", "--export=ALL,FOO=1", "-n", "4", "./app"], env)
    assert srun == ["srun", "--export=ALL,FOO=1,LD_PRELOAD=/opt/libtrace.so", "-n", "4",
                    "./app"]
    srun = launch.inject_env(["srun", "-n", "4", "./app"], env)
    assert srun == ["srun", "--export=ALL,LD_PRELOAD=/opt/libtrace.so", "-n", "4", "./app"]
    # a wrapper before the launcher
    wrapped = launch.inject_env(["timeout", "60", "mpirun.openmpi", "-n", "2", "./app"], env)
    assert wrapped[:4] == ["timeout", "60", "mpirun.openmpi", "-x"]
    # no launcher: a single process, given the variables through env(1)
    assert launch.inject_env(["./app", "arg"], env) == \
        ["env", "LD_PRELOAD=/opt/libtrace.so", "./app", "arg"]


def test_inject_env_asks_an_unsuffixed_launcher_what_it_is():
    if launch.identify("mpirun") is None:
        pytest.skip("no mpirun")
    kind = launch.identify("mpirun").kind
    cmd = launch.inject_env(["mpirun", "-n", "2", "./app"], {"A": "1"})
    assert cmd[1] == {"openmpi": "-x", "mpich": "-genv"}[kind]


def test_inject_env_with_an_absent_launcher(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TiersError, match="launcher mpirun is not on PATH"):
        launch.inject_env(["mpirun", "-n", "2", "./app"], {"A": "1"})


# ---------------------------------------------------------------- failure reports


def test_failure_reports_of_other_launchers():
    ompi5 = ("prterun detected that one or more processes exited with non-zero status,\n"
             "thus causing the job to be terminated. The first process to do so was:\n\n"
             "   Process name: [prterun-vm-41234@1,2]\n   Exit code:    9\n")
    f = launch.parse_failure(ompi5)
    assert (f["kind"], f["rank"], f["exit_code"]) == ("exit", 2, 9)
    ompi4 = "  Process name: [[6045,1],0]\n  Exit code:    3\n"
    assert launch.parse_failure(ompi4)["rank"] == 0   # not the job id's 1
    srun = ("srun: error: node7: task 2: Exited with exit code 4\n"
            "srun: error: node8: tasks 5-7: Segmentation fault (core dumped)\n")
    f = launch.parse_failure(srun)
    assert (f["rank"], f["exit_code"], f["host"]) == (2, 4, "node7")
    f = launch.parse_failure("srun: error: node8: task 5: Segmentation fault (core dumped)\n")
    assert (f["kind"], f["rank"], f["signal"]) == ("signal", 5, 11)
    hydra = ("=" * 83 + "\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
             "=   PID 4242 RUNNING AT node1\n=   EXIT CODE: 6\n"
             "=   CLEANING UP REMAINING PROCESSES\n" + "=" * 83 + "\n")
    f = launch.parse_failure(hydra)
    assert (f["kind"], f["rank"], f["exit_code"]) == ("exit", None, 6)
    msg = launch.failure_message(f, ranks=4, label="app", launcher="mpiexec", returncode=6)
    assert msg == "a rank of 4 (pid 4242 on node1) exited with code 6 (app)"
    abort = "application called MPI_Abort(MPI_COMM_WORLD, 5) - process 3\n"
    assert launch.parse_failure(abort)["rank"] == 3
    assert launch.parse_failure("nothing useful") is None
    assert launch.failure_message(None, ranks=2, label="app", launcher="mpirun",
                                  returncode=1, stderr="boom\n") == \
        "mpirun (app) failed with exit code 1: boom"


def test_rank_count_and_program_of_a_user_command(whoami):
    assert launch.count_ranks(["mpirun", "-np", "6", "./a"]) == 6
    assert launch.count_ranks(["srun", "--ntasks=8", "./a"]) == 8
    assert launch.count_ranks(["./a"]) is None
    assert launch.guess_program(["mpirun", "-n", "2", "--bind-to", "core", whoami, "x"]) == \
        "tiers-whoami"


# A "launcher" that ignores SIGTERM and has a child in another process group
# and the same session, as Open MPI's ranks are.
_STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import signal, time; "
                  "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)", sys.argv[1]],
                 process_group=0)
time.sleep(60)
"""

# Runs the stubborn launcher through run_command as a child subreaper, so
# that an orphaned child stays alive (and visible) here instead of being
# adopted by whatever init the machine has; prints what survived.
_DRIVER = """
import ctypes, json, sys, time
sys.path.insert(0, sys.argv[3])
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER
from tiers import launch
from test_launch import _live_processes_with
start = time.monotonic()
try:
    launch.run_command([sys.executable, "-c", sys.argv[1], sys.argv[2]], timeout=1, grace=1,
                       label="stubborn")
    message = None
except launch.LaunchError as exc:
    message = str(exc)
time.sleep(0.3)
print(json.dumps({"message": message, "elapsed": time.monotonic() - start,
                  "left": _live_processes_with(sys.argv[2])}))
"""


def test_time_limit_kills_what_ignores_sigterm():
    """A launcher that ignores SIGTERM, with a child in another process
    group: both are gone after the grace time."""
    marker = f"tiers-mark-{uuid.uuid4().hex}"
    proc = subprocess.run([sys.executable, "-c", _DRIVER, _STUBBORN, marker,
                           os.path.dirname(__file__)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["message"] == "stubborn timed out after 1 s and was stopped"
    assert out["elapsed"] < 10
    assert out["left"] == []


@needs_mpirun
def test_too_many_ranks_without_oversubscription_is_explained(whoami):
    ranks = launch.local_slots() + 1
    with pytest.raises(launch.LaunchError) as info:
        launch.launch([whoami], ranks, oversubscribe=False, timeout=120)
    assert str(info.value) == (f"not enough slots for {ranks} ranks (tiers-whoami): allow "
                               "oversubscription or give a hostfile with more slots")


@needs_mpirun
def test_missing_program_is_explained(tmp_path):
    with pytest.raises(launch.LaunchError) as info:
        launch.launch([str(tmp_path / "no-such-app")], 2, timeout=120)
    assert str(info.value) == f"mpirun could not start {tmp_path / 'no-such-app'}: " \
        "not found or not executable"
