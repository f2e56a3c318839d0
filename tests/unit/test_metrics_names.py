"""The Grafana dashboard (deploy/grafana/raygroups.json) queries only series the code exports, and every
metric the code defines is on it; the recorders are no-ops outside Ray (the actors stay plain classes)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from raygroups.actors.metrics import ShardMetrics
from raygroups.coordinator.messages import HeartbeatRequest, HeartbeatResponse
from raygroups.placement.metrics import ControllerMetrics

from raygroups import Errors

ROOT = Path(__file__).resolve().parents[2]
# Counters are named with Prometheus' ``_total`` already: Ray then exports them once, as counters (a name
# without it is also exported as a gauge of the same name, Ray's duplicate for old dashboards).
SUFFIXES = {"Counter": ("",), "Gauge": ("",), "Histogram": ("_bucket", "_count", "_sum")}


def _defined() -> dict[str, str]:
    """Metric name -> kind, from the ``m.Counter("name", ...)`` calls of the two metrics modules."""
    out = {}
    for path in (ROOT / "actors" / "metrics.py", ROOT / "placement" / "metrics.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SUFFIXES \
                    and node.args and isinstance(node.args[0], ast.Constant):
                out[node.args[0].value] = node.func.attr
            # counter("name", ...) / gauge("name", ...) helpers inside ShardMetrics
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("counter", "gauge") \
                    and node.args and isinstance(node.args[0], ast.Constant):
                out[node.args[0].value] = "Counter" if node.func.id == "counter" else "Gauge"
    return out


def test_the_dashboard_queries_exactly_the_exported_series():
    defined = _defined()
    exported = {f"ray_{name}{suffix}" for name, kind in defined.items() for suffix in SUFFIXES[kind]}
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "raygroups.json").read_text())
    queried = {m for panel in dashboard["panels"] for t in panel["targets"]
               for m in re.findall(r"\bray_raygroups_[a-z_]+", t["expr"])}
    assert queried <= exported, queried - exported
    assert {re.sub(r"_(bucket|count|sum)$", "", q)[len("ray_"):] for q in queried} >= set(defined)
    assert len(defined) >= 20
    # Prometheus' naming: counters end in _total, and units are base units (seconds, bytes), spelled out.
    assert all(name.endswith("_total") for name, kind in defined.items() if kind == "Counter")
    assert not [name for name in defined if re.search(r"_(ms|millis|milliseconds|kb|mb)(_|$)", name)]


def test_the_dashboard_shows_one_deployment_at_a_time_and_one_unit_per_panel():
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "raygroups.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert "namespace" in variables["namespace"]["definition"]
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            selectors = re.findall(r"\bray_raygroups_[a-z_]+(\{[^}]*\})?", target["expr"])
            assert selectors and all(s.startswith('{namespace="$namespace"') for s in selectors), target["expr"]
        # one unit per panel: set once, never overridden per series
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert not [o for o in panel["fieldConfig"].get("overrides", ()) for prop in o.get("properties", ())
                    if prop.get("id") == "unit"], panel["title"]


def test_offline_has_one_definition_for_status_and_the_gauge():
    from raygroups.placement.metrics import is_offline

    assert is_offline(None, "ACTIVE")  # no leader
    assert all(is_offline("node-1", s) for s in ("FAILED", "STOPPED", "UNANSWERED", "DEAD", None))
    assert not any(is_offline("node-1", s) for s in ("ACTIVE", "LOADING", "INITIAL"))  # serving or on its way


def test_recorders_are_no_ops_outside_ray(monkeypatch):
    import ray

    # As in a plain process (unit tests construct the actor classes directly); another test module of this
    # session may have a Ray running.
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    metrics = ShardMetrics(0, None)
    metrics.on_response(HeartbeatRequest("g", 1, "m", None), HeartbeatResponse(Errors.NONE), 0.001)
    metrics.on_append(3, 0.001, True)
    metrics.on_load(None)
    metrics.refresh({}, True, None)
    controller = ControllerMetrics("ns")
    controller.refresh({})
    controller.on_commit(0, None, None)
    assert metrics._m is None and controller._m is None
