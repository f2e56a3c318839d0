"""A real Prometheus (Debian's package, installed by ``scripts/check_prometheus.sh``) for the alert-rule tests:
it scrapes the metrics agents of this Ray cluster's nodes every second and evaluates
``deploy/prometheus/raygroups-rules.yml`` every second, each rule's expression as written, its ``for:``
set to 0 (a test cannot wait the minutes the rules wait; the expression is what is tested). A test puts a
deployment in a failing state and waits until the rule's alert fires."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conditions import metrics_endpoints

RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "raygroups-rules.yml"


def have_prometheus() -> bool:
    return bool(shutil.which("prometheus") and shutil.which("promtool"))


def need_prometheus() -> None:
    if not have_prometheus():
        pytest.skip("Prometheus is not installed (scripts/check_prometheus.sh installs it as root)")


def start_prometheus(directory: Path) -> Prometheus | None:
    """A Prometheus over this Ray cluster's alive nodes, or None where it is not installed (a test that checks
    more than the alerts goes on without them; ``make test`` as root installs it)."""
    return Prometheus(directory, metrics_endpoints()) if have_prometheus() else None


def rules_firing_at_once(path: Path) -> Path:
    """A copy of the rules with every ``for:`` removed, in ``path``."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            rule.pop("for", None)
    path.write_text(yaml.safe_dump(rules))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """``with Prometheus(tmp_path, targets) as prom: prom.wait_firing("RaygroupsPartitionOffline")``."""

    def __init__(self, directory: Path, targets: list[str]) -> None:
        need_prometheus()
        directory.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "rule_files": [str(rules_firing_at_once(directory / "rules.yml"))],
                  "scrape_configs": [{"job_name": "ray", "static_configs": [{"targets": targets}]}]}
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        self._log = open(directory / "prometheus.log", "w")  # noqa: SIM115 - closed in __exit__
        self._process = subprocess.Popen(
            ["prometheus", f"--config.file={directory / 'prometheus.yml'}", f"--storage.tsdb.path={directory / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT)

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()

    def alerts(self) -> list[dict]:
        """The alerts pending or firing (``/api/v1/alerts``); [] while the server is starting."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/alerts", timeout=5) as r:
                return json.load(r)["data"]["alerts"]
        except OSError:
            return []

    def wait_firing(self, alertname: str, timeout_s: float = 90, **labels: str) -> dict:
        """The first firing alert ``alertname`` whose labels include ``labels``; fails after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self._process.poll() is None, f"Prometheus exited: {self._process.returncode}"
            for alert in self.alerts():
                if alert["state"] == "firing" and alert["labels"]["alertname"] == alertname \
                        and all(alert["labels"].get(k) == v for k, v in labels.items()):
                    return alert
            time.sleep(0.5)
        raise AssertionError(f"{alertname} {labels} did not fire within {timeout_s}s; alerts: {self.alerts()}; "
                             f"the rule: {self._rule(alertname)}")

    def _get(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
            return json.load(r)["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query's result vector (``/api/v1/query``)."""
        return self._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["result"]

    def _rule(self, alertname: str) -> dict:
        """What Prometheus last made of rule ``alertname``: its health, last error, and its expression's
        operands now (for a histogram_quantile rule, the bucket rates under it), for a failure's message."""
        try:
            rules = [r for g in self._get("/api/v1/rules")["groups"] for r in g["rules"] if r["name"] == alertname]
            if not rules:
                return {}
            rule = rules[0]
            seen = {"health": rule.get("health"), "lastError": rule.get("lastError")}
            inner = rule["query"].split(">")[0].strip()
            if inner.startswith("histogram_quantile("):
                inner = inner[len("histogram_quantile("):].split(",", 1)[1].strip()[:-1]
            seen["operand"] = [(r["metric"], r["value"][1]) for r in self.query(inner)]
            return seen
        except (OSError, KeyError, IndexError, ValueError) as e:
            return {"unreadable": repr(e)}
