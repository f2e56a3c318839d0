"""The controller's Prometheus metrics (``ray.util.metrics``; see ``raygroups.actors.metrics`` for where they
are served): per partition its leader epoch, replicas, in-sync replicas and leader changes; in all, the
under-replicated and offline partitions. Outside a Ray worker every recorder is a no-op."""

from __future__ import annotations

from typing import Any


def ray_metrics():
    """``ray.util.metrics`` inside a Ray worker, else None (no process to export from)."""
    import ray.util.metrics

    return ray.util.metrics if ray.is_initialized() else None


class ControllerMetrics:
    """What the controller records: per partition its leader epoch, replicas and in-sync replicas, and
    leader changes; in all, under-replicated and offline partitions."""

    def __init__(self, namespace: str = "") -> None:
        m = ray_metrics()
        self._m = m
        if m is None:
            return
        self._ns = {"namespace": namespace}
        keys = ("namespace", "partition")
        self.leader_changes = m.Counter("raygroups_leader_changes_total", "Leader changes of a partition.", tag_keys=keys)
        self.leader_epoch = m.Gauge("raygroups_partition_leader_epoch", "A partition's leader epoch.", tag_keys=keys)
        self.isr_size = m.Gauge("raygroups_partition_isr_size", "A partition's in-sync replicas.", tag_keys=keys)
        self.replicas = m.Gauge("raygroups_partition_replicas", "A partition's replicas.", tag_keys=keys)
        self.under_replicated = m.Gauge("raygroups_under_replicated_partitions",
                                        "Partitions with fewer in-sync replicas than replicas.", tag_keys=("namespace",))
        self.offline = m.Gauge("raygroups_offline_partitions",
                               "Partitions without a leader, or whose leader's shard neither serves nor starts.",
                               tag_keys=("namespace",))

    def on_commit(self, partition: int, previous: Any, current: Any) -> None:
        if self._m is None:
            return
        if current.leader is not None and (previous is None or previous.leader != current.leader):
            self.leader_changes.inc(1, {**self._ns, "partition": str(partition)})

    def refresh(self, partitions: dict, replication_factor: int = 0, shard_states: dict | None = None) -> None:
        """Gauges from the partition metadata (``{partition: PartitionAssignment}``) and the leader shards'
        last known states (``shard_states``, by partition; ``is_offline``). Under-replicated: fewer in-sync
        replicas than assigned ones, or than the replication factor (the controller may have moved a lost
        node's replicas with too few nodes left to place them all)."""
        if self._m is None:
            return
        for p, a in partitions.items():
            tags = {**self._ns, "partition": str(p)}
            self.leader_epoch.set(a.leader_epoch, tags)
            self.isr_size.set(len(a.isr), tags)
            self.replicas.set(len(a.replicas), tags)
        self.under_replicated.set(sum(1 for a in partitions.values() if is_under_replicated(a.isr, a.replicas,
                                                                                        replication_factor)),
                                  self._ns)
        states = shard_states if shard_states is not None else {}
        self.offline.set(sum(1 for p, a in partitions.items() if is_offline(a.leader, states.get(p, "INITIAL"))),
                         self._ns)


# Shard states of a partition that serves or is on its way to (being started, loading): Kafka counts a
# partition with a leader as online meanwhile.
SERVING_OR_STARTING = frozenset({"ACTIVE", "LOADING", "INITIAL"})


def is_offline(leader: str | None, shard_state: str | None) -> bool:
    """A partition is offline without a leader, or when its leader's shard neither serves nor is on its way
    (failed, stopped, not answering): the one definition of ``raygroups status`` and of the
    ``raygroups_offline_partitions`` gauge."""
    return leader is None or shard_state not in SERVING_OR_STARTING


def is_under_replicated(isr, replicas, replication_factor: int) -> bool:
    """Fewer in-sync replicas than assigned, or than the deployment's replication factor."""
    return len(isr) < max(len(replicas), replication_factor)
