"""CI's seed of the failover chaos benchmark: 45 seconds of faults from the whole catalogue on a simulated
cluster of three coordinator nodes; any violation fails the build (the report's violations are the
assertion's message)."""

from __future__ import annotations

import io
import json

import pytest

from raygroups.chaos import read_history
from raygroups.chaos.faults import faults_for
from raygroups.chaos.live import LiveView
from raygroups.chaos.run import RunOptions, run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SEED = 11


def test_a_45_second_seed_has_no_violation(tmp_path):
    import ray

    if ray.is_initialized():  # another module's single-node Ray: this run starts its own cluster
        ray.shutdown()
    out = tmp_path / "chaos"
    result = run(RunOptions(seconds=45, seed=SEED, out=str(out)), faults_for(replicated=True),
                 LiveView(io.StringIO(), enabled=False))
    report = json.loads((out / "report.json").read_text())
    assert result.ok and report["ok"], json.dumps(report["violations"], indent=1)[:20_000]
    # A leader flap counts as one fault; the serial lane waits for the deployment to settle after each.
    assert report["faults_injected"] >= 4 and report["replicated"]
    assert report["failover"]["total_s"]["count"] >= 1  # a coordinator fault, measured by the probes
    assert report["nemesis_errors"] == [], report["nemesis_errors"]
    # Every group committed on every partition and every coordinator fault was followed by a served commit.
    assert report["commits"]["ok"] > 500 and report["failover"]["unserved"] == 0
    history = read_history(out / "history.jsonl")
    assert {op.f for op in history.operations} >= {"commit", "fetch", "assign", "resume", "delete", "digest",
                                                      "replica-log"}
    assert (out / "timeline.png").stat().st_size > 10_000
