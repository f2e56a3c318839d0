"""The alert rules (deploy/prometheus/raygroups-rules.yml): valid for promtool, over series the code exports,
each alert per deployment (by namespace) with a severity and a summary. That each one fires on a deployment
in its failing state is tested against real deployments with a real Prometheus (tests/prometheus.py), in
tests/multinode/test_lifecycle.py (offline, under-replicated) and tests/multinode/test_failover.py (append
latency, a standby behind)."""

from __future__ import annotations

import re
import subprocess

import yaml

from tests.prometheus import RULES, need_prometheus
from tests.unit.test_metrics_names import SUFFIXES, _defined

ALERTS = {"RaygroupsPartitionOffline", "RaygroupsUnderReplicatedPartitions", "RaygroupsAppendLatencyHigh",
          "RaygroupsStandbyFarBehind"}


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_rules():
    need_prometheus()
    checked = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout


def test_every_alert_is_per_deployment_over_exported_series():
    exported = {f"ray_{name}{suffix}" for name, kind in _defined().items() for suffix in SUFFIXES[kind]}
    rules = _rules()
    assert {r["alert"] for r in rules} == ALERTS
    for rule in rules:
        series = set(re.findall(r"\bray_raygroups_[a-z_]+", rule["expr"]))
        assert series and series <= exported, (rule["alert"], series - exported)
        assert re.search(r"by \(namespace[,)]", rule["expr"]), rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert "$labels.namespace" in rule["annotations"]["summary"]
