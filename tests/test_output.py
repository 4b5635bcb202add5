"""Every output file goes through tiers.output: bad targets are refused in
one line before anything runs, writes are atomic, nothing is written through
a device, FIFO or symbolic link, and no temporary file is ever left."""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import stat
import subprocess
import sys
import time

import pytest

from conftest import assert_one_line_error, run_tiers

TOPO = ("topo", "--input", "synthetic:pack:2 core:2 pu:1", "--no-matrix")


def _tiers(*args, preexec=None, cwd=None, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "tiers", *args], capture_output=True,
                          text=True, timeout=timeout, preexec_fn=preexec, cwd=cwd)
    return proc


def _refused(r, fragment: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tiers: error: "), r.stderr
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in r.stderr


def _listing(folder) -> set[str]:
    return set(os.listdir(folder))


@pytest.mark.parametrize("target,fragment", [("/dev/full", "is a device"),
                                             ("/dev/null", "is a device")])
def test_devices_are_refused(target, fragment):
    r = run_tiers(*TOPO, "--json", target)
    assert_one_line_error(r, f"--json {target}: {fragment}")
    assert r.returncode == 2


def test_empty_name_is_refused(tmp_path):
    before = _listing(tmp_path)
    r = run_tiers(*TOPO, "--json", "", cwd=tmp_path)
    assert_one_line_error(r, "empty file name")
    assert r.returncode == 2
    assert _listing(tmp_path) == before


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    r = run_tiers(*TOPO, "--json", str(fifo), timeout=60)   # would hang if opened
    assert_one_line_error(r, "is a FIFO")
    assert r.returncode == 2
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _listing(tmp_path) == {"pipe"}


def test_socket_is_refused(tmp_path):
    path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(path))
        r = run_tiers(*TOPO, "--json", str(path))
    finally:
        s.close()
    assert_one_line_error(r, "is a socket")
    assert _listing(tmp_path) == {"sock"}


def test_folder_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    for target in (tmp_path / "d", f"{tmp_path}/new/"):
        r = run_tiers(*TOPO, "--json", str(target))
        assert_one_line_error(r, "folder")
        assert r.returncode == 2
    assert _listing(tmp_path) == {"d"} and _listing(tmp_path / "d") == set()


def test_symlink_is_refused_and_victim_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    r = run_tiers(*TOPO, "--json", str(link))
    assert_one_line_error(r, "symbolic link")
    assert r.returncode == 2
    assert victim.read_text() == "precious\n"
    assert link.is_symlink()
    assert _listing(tmp_path) == {"victim", "out.json"}


def test_follow_symlinks_writes_the_target_and_keeps_the_link(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("old\n")
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    r = run_tiers(*TOPO, "--json", str(link), "--follow-symlinks")
    assert r.returncode == 0, r.stderr
    assert link.is_symlink()
    assert json.loads(victim.read_text())["schema"] == "tiers.topo/1"
    assert _listing(tmp_path) == {"victim.json", "out.json"}


def test_planted_link_at_old_temporary_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    planted = tmp_path / "out.json.tmp"      # the name tiers used to write through
    planted.symlink_to(victim)
    r = run_tiers(*TOPO, "--json", str(tmp_path / "out.json"))
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "precious\n"
    assert planted.is_symlink() and os.readlink(planted) == str(victim)
    out = tmp_path / "out.json"
    assert stat.S_ISREG(os.lstat(out).st_mode)
    assert json.loads(out.read_text())["schema"] == "tiers.topo/1"
    assert _listing(tmp_path) == {"victim", "out.json.tmp", "out.json"}


def _in_read_only_folder(folder, *args):
    """Run tiers in a private mount namespace where ``folder`` is a read-only
    file system (a real EROFS that even root cannot write)."""
    script = 'mount -t tmpfs -o ro,size=64k tmpfs "$0" && exec "$@"'
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script, str(folder), sys.executable, "-m", "tiers", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare to mount a read-only folder")
def test_read_only_folder_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    for target in (ro / "out.json", ro / "sub" / "out.json"):
        r = _in_read_only_folder(ro, *TOPO, "--json", str(target))
        if "mount:" in r.stderr or "unshare:" in r.stderr:
            pytest.skip(f"cannot mount here: {r.stderr.strip()}")
        _refused(r, "is not writable")
    assert _listing(ro) == set()


def test_failure_mid_write_leaves_no_temporary_file(tmp_path):
    old = tmp_path / "out.json"
    old.write_text("old result\n")

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))

    r = _tiers(*TOPO, "--json", str(old), preexec=small_files)
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == [lines[0]] and lines[0].startswith(f"tiers: error: {old}: cannot write"), \
        r.stderr
    assert old.read_text() == "old result\n"       # the old file is intact
    assert _listing(tmp_path) == {"out.json"}       # and no temporary file


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_mode_follows_umask(tmp_path, mask, mode):
    out = tmp_path / "out.json"
    r = _tiers(*TOPO, "--json", str(out), preexec=lambda: os.umask(mask))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == mode


def test_check_comes_before_the_measurement():
    start = time.monotonic()
    r = run_tiers("probe", "mem", "--quick", "--json", "/dev/full")
    elapsed = time.monotonic() - start
    assert_one_line_error(r, "--json /dev/full")
    assert r.returncode == 2
    assert elapsed < 10.0, elapsed    # the quick probe itself runs for tens of seconds


def test_map_launch_never_starts_with_a_bad_output(tmp_path):
    """The program tiers would launch leaves a mark; a refused --rankfile
    stops tiers before it starts anything."""
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun")
    mark = tmp_path / "started"
    for opt in ("--rankfile", "--table", "--permutation", "--hydra", "--slurm", "--json"):
        r = run_tiers("map", "--stencil", "2d:2,1:4,4", "--oversubscribe", opt, "/dev/full",
                      "--launch", "--", "touch", str(mark), timeout=120)
        assert_one_line_error(r, f"{opt} /dev/full: is a device")
        assert not mark.exists()


def test_plot_next_to_json_is_checked_too(tmp_path):
    (tmp_path / "r.png").mkdir()
    r = run_tiers("bench", "jacobi3d", "--quick", "--json", str(tmp_path / "r.json"))
    assert_one_line_error(r, "r.png: is a folder")
    assert _listing(tmp_path) == {"r.png"}


def test_trace_out_must_be_a_folder(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = run_tiers("trace", "--out", str(f), "--", "true")
    assert_one_line_error(r, "--out")
    assert f.read_text() == "x"


# -- the API, in process ----------------------------------------------------

def test_write_text_to_stdout_and_file(tmp_path, capsys):
    from tiers import output

    assert output.write_text("-", "hello\n") is None
    assert capsys.readouterr().out == "hello\n"
    target = tmp_path / "a" / "b" / "c.txt"
    output.write_text(str(target), "x\n")
    assert target.read_text() == "x\n"
    output.write_bytes(str(target), b"y")          # replaces
    assert target.read_bytes() == b"y"
    assert _listing(target.parent) == {"c.txt"}


def test_check_writable_refusals_name_the_option(tmp_path):
    from tiers import output
    from tiers.errors import TiersError

    output.check_writable("-")
    output.check_writable(str(tmp_path / "new" / "deeper" / "x.json"))
    for bad, why in [("", "empty file name"), ("/dev/null", "is a device"),
                     (str(tmp_path), "is a folder")]:
        with pytest.raises(TiersError) as e:
            output.check_writable(bad, "--rankfile")
        assert str(e.value).startswith("--rankfile ") and why in str(e.value)
        assert e.value.code == 2 and "\n" not in str(e.value)
    weird = tmp_path / "a\nb"
    weird.mkdir()
    with pytest.raises(TiersError) as e:
        output.check_writable(str(weird))
    assert "\n" not in str(e.value)
