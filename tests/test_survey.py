"""`tiers survey`, the main job: every section's document and plot land in
one folder, and the index says what ran."""

import json

from conftest import assert_one_line_error, run_tiers

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_survey_writes_every_section(survey):
    run, out = survey
    assert run.returncode == 0, run.stderr
    index = json.loads((out / "survey.json").read_text())
    assert index["schema"] == "tiers.survey/1"
    expected_schema = {"topo": "tiers.topo/1", "probe-mem": "tiers.probe.mem/1",
                       "probe-sync": "tiers.probe.sync/1", "probe-net": "tiers.probe.net/1",
                       "bench-jacobi3d": "tiers.bench/1", "trace-jacobi3d": "tiers.trace/1",
                       "map-jacobi3d": "tiers.map/1"}
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
    assert plotted == {"probe-mem", "probe-sync", "probe-net", "bench-jacobi3d"}
    _check_app_sections(out)
    _check_key_figures(out)
    # The printed summary names every section and the folder.
    for section in index["samples"]:
        assert section["title"] in run.stdout
    assert str(out.resolve()) in run.stdout.replace("\n", "")


def test_survey_into_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_one_line_error(run_tiers("survey", "--out", str(blocker / "x")),
                          "cannot write to it: Not a directory")


def _check_app_sections(out):
    """The built-in application's sections: flat and hybrid runs that
    verified, the traced halo exchange of a 2 x 2 x 2 grid, and a mapping
    of that matrix no worse than the alternatives."""
    bench = json.loads((out / "bench-jacobi3d.json").read_text())
    configs = {(s["ranks"], s["threads"]) for s in bench["samples"]}
    assert configs == {(1, 1), (1, 2), (2, 1), (2, 2)}
    assert all(s["doc"]["verification"]["passed"] for s in bench["samples"])
    trace = json.loads((out / "trace-jacobi3d.json").read_text())
    assert (out / "trace-jacobi3d" / "summary.json").is_file()
    m = trace["summary"]["comm_matrix"]["bytes"]
    n = len(m)
    assert n == 8
    assert all(m[i][j] == m[j][i] for i in range(n) for j in range(n))
    # each subdomain of a non-periodic 2 x 2 x 2 grid has 3 face neighbours,
    # and the faces of a 24 x 12 x 6 subdomain hold 72, 144 and 288 points
    for row in m:
        sent = sorted(v for v in row if v)
        assert len(sent) == 3
        assert sent[1] == 2 * sent[0] and sent[2] == 4 * sent[0], sent
    mapped = json.loads((out / "map-jacobi3d.json").read_text())
    comp = {c["placement"]: c for c in mapped["summary"]["comparison"]}
    assert mapped["summary"]["ranks"] == 8
    assert all(comp["afc"]["predicted_time_s"] <= c["predicted_time_s"] * (1 + 1e-9)
               for c in comp.values())
    assert comp["afc"]["bytes_inter_node"] <= comp["random"]["bytes_inter_node"]


def _check_key_figures(out):
    """The survey's key figures follow the statistics layer's rule: every
    sync figure is a positive median of its pairs or 'below noise' with why
    and no number; every ping-pong row carries one flag for all its
    columns; every bench cell is the median of repeated runs."""
    import math
    import statistics

    sync = json.loads((out / "probe-sync.json").read_text())
    assert sync["params"]["figure_time_s"] == 0.2
    for r in sync["summary"]["rows"]:
        if r["reliable"]:
            assert r["value_us"] > 0 and r["reps"] >= sync["params"]["reps"]
        else:
            assert r["why"].startswith(("below noise", "below resolution")) and r["noisy"]
            assert r["value_us"] is None and r["mean_us"] is None and r["min_us"] is None
    net = json.loads((out / "probe-net.json").read_text())
    for r in net["summary"]["pingpong"]["rows"]:
        assert isinstance(r["noisy"], bool) and r["noisy"] == bool(r["why"])
    # MPI_Barrier and the all-pairs test ran in separate launches, merged
    assert net["params"]["barrier"]["launches"] == 3
    assert net["summary"]["allpairs"]["launches"] == 3
    bench = json.loads((out / "bench-jacobi3d.json").read_text())
    # every cell at 96^3: split over 2 ranks, 64^3 put each rank's grids
    # below one huge page and at the edge of a core's L2
    assert all(s["doc"]["params"]["size"] == [96, 96, 96] for s in bench["samples"])
    rows = {(r["ranks"], r["threads"]): r for r in bench["summary"]["rows"]}
    for s in bench["samples"]:
        rep = s["repeats"]
        assert rep["n"] == len(rep["times_s"]) >= 1
        assert rep["stopped"] in ("converged", "time limit", "max samples")
        if rep["stopped"] == "converged":
            assert rep["n"] >= 6 and not rep["noisy"]
        row = rows[(s["ranks"], s["threads"])]
        assert row["runs"] == rep["n"] and row["noisy"] == rep["noisy"]
        if rep["outliers"] == 0:
            assert math.isclose(row["time_s"], statistics.median(rep["times_s"]), rel_tol=1e-12)
