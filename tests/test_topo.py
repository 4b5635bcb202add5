"""``tiers topo``: the machine model on synthetic and XML topologies.

Every expected figure is computed here from the synthetic structure (the
arities of its levels), never typed in: PU counts are products of arities,
two PUs share a level when their indices divided by the PUs per object of
that level agree, and the layer of a pair is the smallest object holding
both (closest layer on a tie).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from math import prod
from pathlib import Path

import pytest
from rich.console import Console

from conftest import assert_one_line_error, run_tiers

DATA = Path(__file__).parent / "data"
LAYERS = ["pu", "core", "cache", "numa", "package", "machine"]

# NUMA inside packages (as a group and folded into an L3), packages inside
# NUMA nodes, one NUMA node per package, SMT, private L2s, one NUMA node.
SYNTHETIC = [
    "pack:2 numa:2 l3:1 core:4 pu:2",
    "numa:2 pack:2 core:2 pu:2",
    "pack:2 numa:2 core:4 pu:1",
    "numa:2 pack:1 core:2 pu:1",
    "pack:2 l3:2 l2:2 core:1 pu:2",
    "pack:2 core:2 pu:2",
]


class Structure:
    """The levels of a synthetic description and what they imply."""

    def __init__(self, desc: str):
        self.desc = desc
        self.levels = []  # (kind, arity, cache level)
        for token in desc.split():
            name, rest = token.split(":", 1)
            arity = int(re.match(r"\d+", rest).group())
            if re.fullmatch(r"l\d", name):
                self.levels.append(("cache", arity, int(name[1])))
            else:
                kind = {"pack": "package", "numa": "numa", "core": "core", "pu": "pu"}[name]
                self.levels.append((kind, arity, 0))
        self.n = prod(a for _, a, _ in self.levels)

    def stride(self, i: int) -> int:
        """PUs under one object of level i."""
        return prod(a for _, a, _ in self.levels[i + 1:])

    def count(self, kind: str) -> int:
        """Objects of a kind: the product of the arities down to its level (1 when absent)."""
        found = [i for i, (k, _, _) in enumerate(self.levels) if k == kind]
        return self.n // self.stride(found[-1]) if found else 1

    def shared(self, a: int, b: int) -> int:
        """How many levels from the top hold both PUs."""
        k = 0
        while k < len(self.levels) and a // self.stride(k) == b // self.stride(k):
            k += 1
        return k

    def in_tree(self, i: int) -> bool:
        """hwloc 2 turns a NUMA level into a memory child of an object with its
        PUs (parent or only child) and into a Group only when there is none."""
        kind, arity, _ = self.levels[i]
        if kind != "numa":
            return True
        return arity > 1 and i + 1 < len(self.levels) and self.levels[i + 1][1] > 1

    def pu_depth(self) -> int:
        return sum(self.in_tree(i) for i in range(len(self.levels)))

    def depth(self, a: int, b: int) -> int:
        return sum(self.in_tree(i) for i in range(self.shared(a, b)))

    def layer(self, a: int, b: int) -> tuple[str, int]:
        """(layer, cache level) of a pair."""
        if a == b:
            return "pu", 0
        top = self.shared(a, b) - 1
        while top >= 0:
            group = top  # levels group..top hold the same PUs
            while group > 0 and self.levels[group][1] == 1:
                group -= 1
            reaches_root = self.levels[group][1] == 1
            best = ("machine", 0)
            for i in range(top, group - 1, -1):
                kind, _, level = self.levels[i]
                if kind == "pu" or (kind == "numa" and self.stride(i) == self.n):
                    continue
                if LAYERS.index(kind) < LAYERS.index(best[0]):
                    best = (kind, level)
            if best[0] != "machine" or reaches_root:
                return best
            top = group - 1
        return "machine", 0


def topo_doc(source: str, tmp_path: Path, *extra: str) -> tuple[dict, str]:
    """Run ``tiers topo --input SOURCE --json``; return the document and stdout."""
    out = tmp_path / "topo.json"
    run = run_tiers("topo", "--input", source, "--json", str(out), *extra)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    return json.loads(out.read_text()), run.stdout


def walk(tree: dict):
    """Every object of a tree document, memory children included."""
    yield tree
    for child in tree.get("memory", []) + tree.get("children", []):
        yield from walk(child)


def check_consistent(doc: dict) -> None:
    """The matrices agree with each other and with the tree."""
    s = doc["samples"]
    depth, weight, layer, level = (s["depth_matrix"], s["weight_matrix"], s["layer_matrix"],
                                   s["cache_level_matrix"])
    n = doc["summary"]["pus"]
    pus = sorted((o for o in walk(s["tree"]) if o["type"] == "PU"), key=lambda o: o["logical"])
    assert [o["logical"] for o in pus] == list(range(n))
    assert s["pu_os_index"] == [o["os"] for o in pus]
    assert len(depth) == n and all(len(row) == n for row in depth)
    for a in range(n):
        assert depth[a][a] == pus[a]["depth"]
        assert layer[a][a] == "pu"
        for b in range(n):
            assert depth[a][b] == depth[b][a]
            assert layer[a][b] == layer[b][a]
            assert weight[a][b] == 10 ** depth[a][b]
            assert (level[a][b] > 0) == (layer[a][b] == "cache")
            assert depth[a][b] <= min(depth[a][a], depth[b][b])
    pairs = {name: 0 for name in LAYERS[1:]}
    for a in range(n):
        for b in range(a + 1, n):
            pairs[layer[a][b]] += 1
    assert doc["summary"]["layer_pairs"] == pairs
    assert sum(e["pairs"] for e in doc["summary"]["layers"]) == n * (n - 1) // 2


@pytest.mark.parametrize("desc", SYNTHETIC)
def test_synthetic_matches_structure(desc, tmp_path):
    st = Structure(desc)
    doc, stdout = topo_doc(f"synthetic:{desc}", tmp_path)
    assert doc["schema"] == "tiers.topo/1"
    assert doc["params"] == {"input": f"synthetic:{desc}"}
    summ = doc["summary"]
    assert summ["this_system"] is False
    assert summ["pus"] == st.n
    assert summ["packages"] == st.count("package")
    assert summ["cores"] == st.count("core")
    assert summ["numa_nodes"] == st.count("numa")
    assert summ["levels"] == st.pu_depth() + 1
    check_consistent(doc)
    s = doc["samples"]
    for a in range(st.n):
        for b in range(st.n):
            assert s["depth_matrix"][a][b] == st.depth(a, b), (a, b)
            assert (s["layer_matrix"][a][b], s["cache_level_matrix"][a][b]) == st.layer(a, b), \
                (a, b)
    assert s["pu_os_index"] == list(range(st.n))
    # The terminal view: one line per PU (alone or at the end of a merged chain).
    pu_lines = [ln for ln in stdout.splitlines() if re.search(r"PU L#\d+ \(P#\d+\)$", ln)]
    assert len(pu_lines) == st.n
    assert f"Package L#{st.count('package') - 1}" in stdout
    assert "depth d of the common ancestor" in stdout
    rows = [ln for ln in stdout.splitlines() if re.match(r"\s*L#\d+ ", ln)]
    assert [list(map(int, ln.split()[1:])) for ln in rows] == s["depth_matrix"]


def test_layer_examples_on_numa_inside_package(tmp_path):
    """pack:2 numa:2 core:2 pu:2 -- spelled out: PU i and j share a core iff
    i//2 == j//2, a NUMA node iff i//4 == j//4, a package iff i//8 == j//8."""
    doc, _ = topo_doc("synthetic:pack:2 numa:2 core:2 pu:2", tmp_path)
    layer = doc["samples"]["layer_matrix"]
    for i in range(16):
        for j in range(16):
            want = ("pu" if i == j else "core" if i // 2 == j // 2 else "numa" if i // 4 == j // 4
                    else "package" if i // 8 == j // 8 else "machine")
            assert layer[i][j] == want, (i, j)


def synthetic_of(xml: Path) -> str:
    m = re.search(r'name="SyntheticDescription" value="([^"]+)"', xml.read_text())
    assert m, f"{xml} was not exported from a synthetic topology"
    return m.group(1)


@pytest.mark.parametrize("xml", sorted(DATA.glob("topo-*.xml")), ids=lambda p: p.stem)
def test_xml_gives_the_same_graph_as_its_synthetic_string(xml, tmp_path):
    desc = synthetic_of(xml)
    from_xml, _ = topo_doc(str(xml), tmp_path / "xml")
    from_syn, _ = topo_doc(f"synthetic:{desc}", tmp_path / "syn")
    check_consistent(from_xml)
    assert from_xml["summary"]["source"] == str(xml)
    for key in ("depth_matrix", "weight_matrix", "layer_matrix", "cache_level_matrix",
                "pu_os_index", "tree"):
        assert from_xml["samples"][key] == from_syn["samples"][key], key
    st = Structure(desc)
    assert from_xml["samples"]["depth_matrix"] == [[st.depth(a, b) for b in range(st.n)]
                                                   for a in range(st.n)]


def test_this_machine(tmp_path):
    doc, stdout = topo_doc("this", tmp_path)
    summ = doc["summary"]
    assert summ["this_system"] is True
    assert 1 <= summ["pus"] <= os.cpu_count()
    check_consistent(doc)
    counts = f"{summ['packages']} package"
    assert summ["summary"].startswith(counts)
    assert f"{summ['pus']} PU" in summ["summary"]
    # The machine block of every document carries the same summary.
    assert doc["machine"]["hwloc"]["summary"] == summ["summary"]
    assert summ["summary"] in stdout


def test_large_topology_prints_the_matrix_only_when_asked(tmp_path):
    desc = "pack:4 numa:2 l3:1 core:4 pu:2"
    st = Structure(desc)
    assert st.n > 32
    doc, stdout = topo_doc(f"synthetic:{desc}", tmp_path)
    assert "depth d of the common ancestor" not in stdout
    assert "--matrix prints it" in stdout
    assert len(doc["samples"]["depth_matrix"]) == st.n  # the document has it all the same
    # The per-layer view counts the pairs the structure implies.
    pairs = {}
    for a in range(st.n):
        for b in range(a + 1, st.n):
            layer, level = st.layer(a, b)
            name = f"L{level} cache" if layer == "cache" else layer
            pairs[name] = pairs.get(name, 0) + 1
    rows = {ln.split("│")[1].strip(): ln.split("│")[-2].strip()
            for ln in stdout.splitlines() if ln.count("│") == 5}
    assert rows == {name: f"{count:,}" for name, count in pairs.items()}
    _, stdout = topo_doc(f"synthetic:{desc}", tmp_path, "--matrix")
    assert "depth d of the common ancestor" in stdout
    _, stdout = topo_doc("synthetic:pack:2 core:2 pu:2", tmp_path, "--no-matrix")
    assert "depth d of the common ancestor" not in stdout


def test_summary_tool_output(native_bin):
    desc = "pack:2 numa:2 l3:1(size=8388608) core:4 pu:2"
    proc = subprocess.run([native_bin("tiers-topo"), "--summary", "--input", f"synthetic:{desc}"],
                          capture_output=True, text=True, check=True)
    out = json.loads(proc.stdout)
    assert proc.stderr == ""
    assert "depth_matrix" not in out and "tree" not in out
    assert (out["packages"], out["numa_nodes"], out["cores"], out["pus"]) == (2, 4, 16, 32)
    assert out["caches"] == [{"name": "L3", "level": 3, "kind": "unified", "count": 4,
                              "size_bytes": 8 << 20, "total_bytes": 4 * (8 << 20),
                              "linesize_bytes": out["caches"][0]["linesize_bytes"]}]
    assert out["summary"] == "2 packages, 4 NUMA nodes, 16 cores, 32 PUs, 4x L3 8 MiB"
    assert out["llc_total_bytes"] == 4 * (8 << 20)
    assert out["native"]["tool"] == "tiers-topo"
    this = json.loads(subprocess.run([native_bin("tiers-topo"), "--summary"], capture_output=True,
                                     text=True, check=True).stdout)
    assert this["this_system"] is True and this["pus"] >= 1
    assert this["memory_bytes"] > 0


def test_measure_and_render_api():
    from tiers import topo

    doc = topo.measure("synthetic:pack:2 core:2 pu:2")
    assert doc["schema"] == "tiers.topo/1"
    assert doc["summary"]["layer_pairs"] == {"core": 4, "cache": 0, "numa": 0, "package": 8,
                                             "machine": 16}
    console = Console(record=True, width=200, color_system=None)
    topo.render(doc, console, matrix=False)
    text = console.export_text()
    assert "Core L#3" in text and "depth d of the common ancestor" not in text
    for entry in doc["summary"]["layers"]:
        assert entry["weight_min"] == 10 ** entry["depth_min"]


@pytest.fixture
def bad_inputs(tmp_path):
    good = (DATA / "topo-numa2-pack2-core2-pu1.xml").read_text()
    malformed = tmp_path / "malformed.xml"
    malformed.write_text("<?xml version='1.0'?>\n<topology version='2.0'>\n<object ")
    truncated = tmp_path / "truncated.xml"
    truncated.write_text(good[: len(good) // 2])
    badtype = tmp_path / "badtype.xml"
    badtype.write_text(good.replace('type="Package"', 'type="Bogus"'))
    empty = tmp_path / "empty.xml"
    empty.write_text("")
    return {"malformed": malformed, "truncated": truncated, "badtype": badtype, "empty": empty,
            "dir": tmp_path}


@pytest.mark.parametrize("case, fragment", [
    ("malformed", "not a valid hwloc XML topology"),
    ("truncated", "not a valid hwloc XML topology"),
    ("badtype", "not a valid hwloc XML topology"),
    ("empty", "not a valid hwloc XML topology"),
    ("dir", "Is a directory"),
])
def test_bad_xml_is_one_line(bad_inputs, case, fragment):
    run = run_tiers("topo", "--input", str(bad_inputs[case]))
    assert_one_line_error(run, fragment)
    assert str(bad_inputs[case]) in run.stderr
    assert run.stdout == ""


@pytest.mark.parametrize("args, fragment", [
    (["--input", "/nonexistent/machine.xml"], "No such file or directory"),
    (["--input", "synthetic:pack:2 bogus:3"], "rejects the synthetic topology"),
    (["--input", "synthetic:pack:0 pu:2"], "rejects the synthetic topology"),
    (["--input", "synthetic:"], "rejects the synthetic topology"),
    (["--input"], "--input"),
    (["--bogus"], "--bogus"),
])
def test_bad_arguments_are_one_line(args, fragment):
    assert_one_line_error(run_tiers("topo", *args), fragment)


@pytest.mark.parametrize("args, fragment", [
    (["--bogus"], "unknown option --bogus"),
    (["--input"], "needs a value"),
    (["--input", "synthetic:pack:2 bogus:3"], "rejects the synthetic topology"),
])
def test_native_tool_bad_input_is_one_line(native_bin, args, fragment):
    proc = subprocess.run([native_bin("tiers-topo"), *args], capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tiers-topo: error: ") and fragment in lines[0]
    assert proc.stdout == ""
