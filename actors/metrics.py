"""Prometheus metrics of the shard actors (and, in ``placement.metrics``, of the controller), through ``ray.util.metrics``: Ray's metrics
agent on every node serves them (with Ray's own) on the node's metrics export port
(``ray start --metrics-export-port``; ``ray.nodes()[i]["MetricsExportPort"]``), names prefixed ``ray_``.
``deploy/grafana/raygroups.json`` is a dashboard over them.

Shard series carry ``namespace`` (the deployment's), ``partition`` and ``node`` (a stable node name,
``local`` on the embedded default); the controller's (``placement.metrics``) carry ``namespace`` and
``partition``. Outside a Ray worker (unit tests construct the actors as plain classes)
every recorder is a no-op, so the actors' code never asks whether metrics exist.

Not a guarantee of exactness: counters live in the process that counts, so a shard restarted by Ray starts
its counters again (Prometheus' ``rate()`` handles resets), and a dead process' last values stop being
exported.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from raygroups.coordinator.errors import Errors
from raygroups.coordinator.requests import REQUESTS

# Seconds (Prometheus' base unit): from a single fsync on a quiet disk to a stalled replicated append.
APPEND_LATENCY_BOUNDARIES_S = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10]
# A request's time in its shard, from arrival to answer (Kafka's per-request ``TotalTimeMs``, here in seconds):
# a heartbeat's fraction of a millisecond up to a JoinGroup parked for a rebalance (minutes).
REQUEST_LATENCY_BOUNDARIES_S = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                                60, 300]
METRICS_INTERVAL_S = 5.0

def ray_metrics():
    """``ray.util.metrics`` inside a Ray worker, else None (no process to export from)."""
    import ray.util.metrics

    return ray.util.metrics if ray.is_initialized() else None


class ShardMetrics:
    """What one coordinator shard records: requests by API and error, offsets committed, heartbeats,
    joins and completed rebalances, appends (latency, records), the last load, and gauges of its groups
    (by state), members and in-sync replicas, refreshed every ``METRICS_INTERVAL_S``."""

    def __init__(self, partition: int, node: str | None, namespace: str | None = None) -> None:
        self._generations: dict[str, int] = {}
        self._requests: Counter = Counter()  # (api, error) -> answered since the last flush
        self._rebalances = 0
        self._offset_commits = 0
        m = ray_metrics()
        if m is None:
            self._m = None
            return
        self._m = m
        tags = {"namespace": namespace or "", "partition": str(partition), "node": node or "local"}
        keys = tuple(tags)

        def counter(name: str, description: str, extra: tuple[str, ...] = ()):
            c = m.Counter(name, description, tag_keys=keys + extra)
            c.set_default_tags(tags)
            return c

        def gauge(name: str, description: str, extra: tuple[str, ...] = ()):
            g = m.Gauge(name, description, tag_keys=keys + extra)
            g.set_default_tags(tags)
            return g

        self.requests = counter("raygroups_requests_total", "Requests answered by a coordinator shard, by API and error.",
                                ("api", "error"))
        self.offset_commits = counter("raygroups_offset_commits_total", "Partition offsets committed (acknowledged).")
        self.heartbeats = counter("raygroups_heartbeats_total", "Heartbeats answered.")
        self.joins = counter("raygroups_joins_total", "JoinGroup requests answered.")
        self.rebalances = counter("raygroups_rebalances_total", "Rebalances completed (a group reached a new generation).")
        self.appended_records = counter("raygroups_appended_records_total", "Records made durable in the offsets log.")
        self.append_failures = counter("raygroups_append_failures_total", "Batches whose append or replication failed.")
        self.append_latency = m.Histogram("raygroups_append_latency_seconds",
                                          "Append (and replication, acks=all) latency of one batch, in seconds.",
                                          boundaries=APPEND_LATENCY_BOUNDARIES_S, tag_keys=keys)
        self.append_latency.set_default_tags(tags)
        # Observed as each request is answered (about 2 us a record in a Ray worker, measured).
        self.request_latency = m.Histogram("raygroups_request_latency_seconds",
                                           "Time from a request's arrival at its shard to its answer, by API.",
                                           boundaries=REQUEST_LATENCY_BOUNDARIES_S, tag_keys=keys + ("api",))
        self.request_latency.set_default_tags(tags)
        self.load_seconds = gauge("raygroups_load_seconds", "Seconds the last load (log replay) took.")
        self.load_records = gauge("raygroups_load_records", "Records replayed by the last load.")
        self.groups = gauge("raygroups_groups", "Groups of the shard, by state.", ("state",))
        self.members = gauge("raygroups_members", "Members of the shard's groups.")
        self.isr_size = gauge("raygroups_shard_isr_size", "In-sync replicas (leader included) the leader sees.")
        self.up = gauge("raygroups_shard_active", "1 while the shard serves (ACTIVE), else 0.")

    def on_response(self, request: Any, response: Any, seconds: float) -> None:
        """``request`` answered ``response`` ``seconds`` after it arrived. Counted here, in plain dicts, so the
        counts reach Ray once per ``flush`` (every ``METRICS_INTERVAL_S``, from ``refresh``); the latency
        goes to its histogram at once."""
        if self._m is None:
            return
        api = REQUESTS.spec(request).name  # Kafka's request name
        self.request_latency.observe(seconds, {"api": api})
        error = getattr(response, "error", None)
        self._requests[(api, error.name if error is not None else "NONE")] += 1
        if api == "JoinGroup":
            if error is Errors.NONE and self._generations.get(request.group_id) != response.generation_id:
                self._generations[request.group_id] = response.generation_id
                self._rebalances += 1
        elif api == "OffsetCommit":
            self._offset_commits += sum(1 for e in response.errors.values() if e is Errors.NONE)

    def flush(self) -> None:
        """Hand the counts gathered since the last flush to Ray's metrics."""
        if self._m is None:
            return
        requests, self._requests = self._requests, Counter()
        for (api, error), n in requests.items():
            self.requests.inc(n, {"api": api, "error": error})
            if api == "Heartbeat":
                self.heartbeats.inc(n)
            elif api == "JoinGroup":
                self.joins.inc(n)
        if self._rebalances:
            self.rebalances.inc(self._rebalances)
            self._rebalances = 0
        if self._offset_commits:
            self.offset_commits.inc(self._offset_commits)
            self._offset_commits = 0

    def on_append(self, records: int, seconds: float, ok: bool) -> None:
        if self._m is None:
            return
        if ok:
            self.appended_records.inc(records)
            self.append_latency.observe(seconds)
        else:
            self.append_failures.inc()

    def on_load(self, summary: Any) -> None:
        if self._m is not None and summary is not None:
            self.load_seconds.set(summary.seconds)
            self.load_records.set(summary.records)

    def refresh(self, groups: Any, active: bool, isr_size: int | None) -> None:
        """Gauges from the live state (``groups`` is the shard's ``{group_id: ClassicGroup}``), and the counts
        gathered since the last refresh."""
        if self._m is None:
            return
        self.flush()
        for gone in set(self._generations) - set(groups):
            del self._generations[gone]
        by_state = Counter(g.state.value for g in groups.values())
        for state in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"):
            self.groups.set(by_state.get(state, 0), {"state": state})
        self.members.set(sum(len(g.members) for g in groups.values()))
        self.up.set(1 if active else 0)
        if isr_size is not None:
            self.isr_size.set(isr_size)


class StandbyMetrics:
    """Hot standbys' lag (``actors.standby``), from the node's ``LogServer``: per partition a standby reads,
    the records of the node's replica past the position the standby last read from. Kept by the server, not
    the standby, so that a standby that stopped reading (a stalled or dead spare) shows a lag that grows.
    A partition no standby follows any more is set to 0 (a dead gauge cannot be removed from Ray's export)."""

    def __init__(self, node: str, namespace: str | None) -> None:
        m = ray_metrics()
        self._gauge = None
        if m is not None:
            tags = {"namespace": namespace or "", "node": node}
            self._gauge = m.Gauge("raygroups_standby_lag_records",
                                  "Records of the node's replica its hot standby has not read yet.",
                                  tag_keys=(*tags, "partition"))
            self._gauge.set_default_tags(tags)

    @property
    def live(self) -> bool:
        return self._gauge is not None

    def set(self, lags: dict[int, int]) -> None:
        if self._gauge is not None:
            for p, records in lags.items():
                self._gauge.set(records, {"partition": str(p)})


async def metrics_loop(served) -> None:
    """Refresh ``served``'s shard metrics every ``METRICS_INTERVAL_S`` until the partition is FAILED."""
    while not served.failed:
        shard, writer = served.ctx.shard, served.writer
        isr = 1 + len(writer.replication.isr) if writer.replicated else None
        served.metrics.refresh({} if shard is None else shard.groups, served.active, isr)
        await asyncio.sleep(METRICS_INTERVAL_S)
