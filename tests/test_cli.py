"""The command line as a whole and the result format every command shares."""

import json

import pytest

from conftest import assert_one_line_error, run_tiers
from tiers import result
from tiers.errors import TiersError


def test_version_names_the_package_version():
    import tiers

    run = run_tiers("--version")
    assert run.returncode == 0
    assert run.stdout.strip() == f"tiers {tiers.__version__}"


@pytest.mark.parametrize("args, fragment", [
    (["topo", "--bogus"], "--bogus"),
    (["probe", "mem", "--ntimes", "many"], "--ntimes"),
    (["nosuchcommand"], "nosuchcommand"),
    (["probe", "nosuchprobe"], "nosuchprobe"),
    ([], "required"),
])
def test_bad_command_lines_give_one_line(args, fragment):
    assert_one_line_error(run_tiers(*args), fragment)


def test_new_document_carries_schema_command_machine_and_versions():
    argv = ["tiers", "probe", "mem", "--quick"]
    doc = result.new_document("probe.mem", params={"a": 1}, samples=[1, 2], summary={"b": 2},
                              argv=argv)
    assert doc["schema"] == "tiers.probe.mem/1"
    assert doc["command"] == argv
    assert doc["params"] == {"a": 1} and doc["samples"] == [1, 2]
    machine = doc["machine"]
    assert machine["hostname"] and machine["cpu_model"]
    import tiers
    assert doc["versions"]["tiers"] == tiers.__version__
    # The hwloc summary comes from the native tool and agrees with the OS.
    import os
    assert machine["hwloc"]["pus"] == os.cpu_count()


def test_write_then_read_round_trips_and_checks_kind(tmp_path):
    doc = result.new_document("topo", params={}, samples=[], summary={"x": 1.5}, argv=["t"])
    path = result.write(doc, tmp_path / "sub" / "t.json")
    assert result.read(path, "topo") == json.loads(json.dumps(doc))
    with pytest.raises(TiersError, match="expected tiers.probe.mem/1"):
        result.read(path, "probe.mem")


def test_read_rejects_files_that_are_not_tiers_documents(tmp_path):
    (tmp_path / "plain.json").write_text('{"a": 1}')
    (tmp_path / "broken.json").write_text('{"a": ')
    with pytest.raises(TiersError, match="not a tiers result document"):
        result.read(tmp_path / "plain.json")
    with pytest.raises(TiersError, match="not JSON"):
        result.read(tmp_path / "broken.json")
    with pytest.raises(TiersError, match="cannot read"):
        result.read(tmp_path / "missing.json")


def test_json_to_an_unwritable_place_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    run = run_tiers("topo", "--input", "synthetic:pack:1 core:2 pu:1",
                    "--json", str(blocker / "out.json"))
    assert_one_line_error(run, "cannot write")
