"""The controller's answers to the leaders' requests (epoch-checked) and its readiness, as pure functions
of its metadata (``placement.model``).
"""

from __future__ import annotations

from raygroups.placement.model import Metadata, Observations, ShardObservation, bump
from raygroups.placement.plan import PartitionAssignment


def on_leader_started(meta: Metadata, partition: int, node: str,
                      ray_node_id: str | None = None) -> PartitionAssignment | str | None:
    """A shard on ``node`` (Ray node ``ray_node_id``) is about to serve ``partition``: a fresh epoch above
    every earlier incarnation's (the commit fences every replica at it); None if ``node`` does not lead the
    partition or the shard runs on a superseded incarnation of it; a reason to wait (a str) while the
    controller has not yet seen this incarnation's disk holding the partition."""
    a = meta.partitions.get(partition)
    if a is None or a.leader != node or (ray_node_id is not None and ray_node_id in meta.superseded):
        return None
    if ray_node_id is not None and meta.incarnations.get(node) != ray_node_id:
        return f"the controller has not seen this incarnation of node {node} yet"
    if meta.reported.get(node) != meta.incarnations.get(node):
        return f"the disk of node {node} has not reported yet"
    if partition not in meta.held.get(node, ()):
        return f"the disk of node {node} does not hold partition {partition}"
    return bump(a, leader_epoch=a.leader_epoch + 1)


def on_shrink_isr(meta: Metadata, partition: int, leader_epoch: int, node: str) -> tuple[bool, PartitionAssignment | None]:
    """The leader of ``leader_epoch`` drops ``node`` from the ISR: ``(accepted, new state or None if no change)``."""
    a = meta.partitions.get(partition)
    if a is None or a.leader_epoch != leader_epoch or node == a.leader:
        return False, None
    if node not in a.isr:
        return True, None
    return True, bump(a, isr=tuple(n for n in a.isr if n != node))


def on_expand_isr(meta: Metadata, partition: int, leader_epoch: int, node: str) -> tuple[bool, PartitionAssignment | None]:
    """The leader of ``leader_epoch`` caught ``node`` up to its log end: it rejoins the ISR."""
    a = meta.partitions.get(partition)
    if a is None or a.leader_epoch != leader_epoch:
        return False, None
    if node in a.isr or node not in a.replicas:
        return True, None  # nothing to do (a replica moved away meanwhile is simply not added)
    return True, bump(a, isr=(*a.isr, node))


# --------------------------------------------------------------------------- readiness


def readiness(meta: Metadata, obs: Observations | None) -> dict:
    """Whether every partition has a leader whose shard answered ACTIVE in the last round, and if not, what
    the deployment is waiting for (one sentence); ``refused`` names the nodes whose disks are not used."""
    out = {"ready": False, "waiting_for": None, "refused": dict(meta.refused)}
    s = meta.settings
    if obs is None:
        return {**out, "waiting_for": "the controller's first look at the cluster"}
    alive = obs.alive() - set(meta.refused)
    if not meta.partitions and not meta.recovery:
        if len(alive) < s.replication_factor:
            return {**out, "waiting_for": (
                f"{s.replication_factor} coordinator nodes (offsets.topic.replication.factor); "
                f"{len(alive)} alive: {', '.join(sorted(alive)) or 'none'}")}
        return {**out, "waiting_for": "the partitions to be created"}
    missing = [p for p in range(s.num_partitions) if p not in meta.partitions]
    if missing:
        return {**out, "waiting_for": (
            f"partitions {_short(missing)} to be recovered: not enough of their replicas have reported")}
    offline = [p for p, a in meta.partitions.items() if a.leader is None]
    if offline:
        return {**out, "waiting_for": f"offline partitions {_short(offline)}: no in-sync replica is alive"}
    starting = [p for p in sorted(meta.partitions) if obs.shards.get(p, ShardObservation(None)).answer != "ACTIVE"]
    if starting:
        return {**out, "waiting_for": f"the shards of partitions {_short(starting)} to serve"}
    return {**out, "ready": True}


def _short(items: list[int]) -> str:
    return ", ".join(map(str, sorted(items)[:10])) + (f" and {len(items) - 10} more" if len(items) > 10 else "")
