"""Helpers shared by the ``tiers probe sync`` tests: one test's result from
given samples, computed by ``tiers-probe-sync --pair-stats`` itself (the code
a measurement runs), and its summary as ``tiers.probe.sync`` makes it."""

from __future__ import annotations

import json
import subprocess


def pair_stats(native_bin, refs, tests) -> dict:
    """The native tool's result of one test whose reference loop took
    ``refs`` (None: a test without reference, the values are the times)
    and whose test took ``tests``, in us per inner repetition."""
    text = lambda v: "none" if v is None else ",".join(repr(float(x)) for x in v)  # noqa: E731
    proc = subprocess.run([native_bin("tiers-probe-sync"), "--pair-stats", text(refs),
                           text(tests)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def summary_of(test: dict) -> dict:
    """The ``summary`` of a document holding only ``test``, at 2 threads."""
    from tiers.probe import sync

    raw = {"runs": [{"threads": 2, "tests": [test]}], "params": {"cycles_per_second": 1e9}}
    return sync.summarise(raw)


def row_of(test: dict) -> dict:
    """The one summary row of ``test`` (fails unless there is exactly one)."""
    (row,) = summary_of(test)["rows"]
    return row
