"""`tiers survey`, the main job: every section's document and plot land in
one folder, and the index says what ran."""

import json

from conftest import assert_one_line_error, run_tiers

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_survey_writes_every_section(tmp_path):
    out = tmp_path / "survey"
    run = run_tiers("survey", "--out", str(out), timeout=600)
    assert run.returncode == 0, run.stderr
    index = json.loads((out / "survey.json").read_text())
    assert index["schema"] == "tiers.survey/1"
    expected_schema = {"topo": "tiers.topo/1", "probe-mem": "tiers.probe.mem/1",
                       "probe-sync": "tiers.probe.sync/1", "probe-net": "tiers.probe.net/1"}
    names = [s["name"] for s in index["samples"]]
    assert names == list(expected_schema)
    assert index["summary"]["failed"] == []
    for section in index["samples"]:
        assert section["status"] == "ok", section
        doc = json.loads((out / section["json"]).read_text())
        assert doc["schema"] == expected_schema[section["name"]]
        if section["plot"]:
            assert (out / section["plot"]).read_bytes()[:8] == PNG_MAGIC
    plotted = {s["name"] for s in index["samples"] if s["plot"]}
    assert plotted == {"probe-mem", "probe-sync", "probe-net"}
    # The printed summary names every section and the folder.
    for section in index["samples"]:
        assert section["title"] in run.stdout
    assert str(out.resolve()) in run.stdout.replace("\n", "")


def test_survey_into_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_one_line_error(run_tiers("survey", "--out", str(blocker / "x")), "cannot create")
