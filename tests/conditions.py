"""Waiting for conditions in integration tests: poll with a deadline, never sleep a fixed time."""

from __future__ import annotations

import time


def wait_for(condition, timeout_s=60.0, interval_s=0.05, what="condition"):
    """Poll ``condition`` until it returns a truthy value (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def metrics_endpoints() -> list[str]:
    """``HOST:PORT`` of the metrics agent of every alive node of this Ray cluster."""
    import ray

    return [f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}" for n in ray.nodes()
            if n.get("Alive") and n.get("MetricsExportPort")]


def scrape_metrics(prefix="ray_raygroups_"):
    """Every series named ``prefix...`` that the metrics agents of this Ray cluster's alive nodes export
    (Prometheus text format): ``[(name, {label: value}, value)]``."""
    import re
    import urllib.request


    line = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
    label = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    out = []
    for endpoint in metrics_endpoints():
        url = f"http://{endpoint}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                text = response.read().decode()
        except OSError:
            continue
        for raw in text.splitlines():
            m = line.match(raw)
            if m and m.group(1).startswith(prefix):
                out.append((m.group(1), dict(label.findall(m.group(2) or "")), float(m.group(3))))
    return out
