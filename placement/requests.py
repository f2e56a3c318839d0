"""The controller's answers to the leaders' requests (epoch-checked) and its readiness, as pure functions
of its metadata (``placement.model``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from raygroups.coordinator.config import leadership_lease_s
from raygroups.placement.model import Lease, Metadata, Observations, Settings, ShardObservation, bump
from raygroups.placement.plan import PartitionAssignment


@dataclass(frozen=True)
class Wait:
    """Ask again later: why, and (the previous leader's lease) in how many ms; None: soon."""

    reason: str
    retry_in_ms: int | None = None


@dataclass(frozen=True)
class Grant:
    """The state whose leader epoch the asking shard serves under. ``persist``: a new epoch, to be committed
    (and so fenced on the replicas) before it is given; otherwise the epoch ``decide`` elected and the
    disks already hold, given as it is (:func:`on_granted` records it taken)."""

    assignment: PartitionAssignment
    persist: bool


def leadership_lease_ms(settings: Settings) -> int:
    return int(leadership_lease_s(settings.shard_silence_ms) * 1000)


def previous_lease_left_ms(meta: Metadata, partition: int, node: str, now_ms: int) -> int:
    """How long the lease of the partition's last confirmed leader still runs, if it was on another node."""
    lease = meta.leases.get(partition)
    if lease is None or lease.node == node:
        return 0
    return max(0, lease.confirmed_ms + leadership_lease_ms(meta.settings) - now_ms)


def on_leader_started(meta: Metadata, partition: int, node: str, ray_node_id: str | None,
                      now_ms: int) -> Grant | Wait | None:
    """A shard on ``node`` (Ray node ``ray_node_id``) is about to serve ``partition`` at ``now_ms``. None if
    ``node`` does not lead the partition or the shard runs on a superseded incarnation of it. A
    :class:`Wait` while the controller has not yet seen this incarnation's disk holding the partition, or
    while the lease of a leader it confirmed on another node runs (a paused leader, or one cut off from Ray
    but not from its clients, may still answer). Else a :class:`Grant`: the epoch ``decide`` elected if no
    shard has had it, otherwise a fresh epoch above every earlier incarnation's (a restart in place)."""
    a = meta.partitions.get(partition)
    if a is None or a.leader != node or (ray_node_id is not None and ray_node_id in meta.superseded):
        return None
    if ray_node_id is not None and meta.incarnations.get(node) != ray_node_id:
        return Wait(f"the controller has not seen this incarnation of node {node} yet")
    if meta.reported.get(node) != meta.incarnations.get(node):
        return Wait(f"the disk of node {node} has not reported yet")
    if partition not in meta.held.get(node, ()):
        return Wait(f"the disk of node {node} does not hold partition {partition}")
    left = previous_lease_left_ms(meta, partition, node, now_ms)
    if left > 0:
        return Wait(f"the previous leader's lease runs for {left / 1000:.2f} s more", left)
    if meta.unclaimed.get(partition) == a.leader_epoch:
        return Grant(a, persist=False)
    return Grant(bump(a, leader_epoch=a.leader_epoch + 1), persist=True)


def on_granted(meta: Metadata, partition: int, node: str, now_ms: int) -> Metadata:
    """The partition's current epoch was given to its shard on ``node`` at ``now_ms``: no other shard gets it
    as it is, and that leader's lease counts from now."""
    unclaimed = {p: e for p, e in meta.unclaimed.items() if p != partition}
    return replace(meta, unclaimed=unclaimed, leases={**meta.leases, partition: Lease(node, now_ms)})


def on_lease_renewed(meta: Metadata, partition: int, leader_epoch: int | None, node: str | None,
                     now_ms: int) -> Metadata:
    """A leader renewing its lease named its epoch and node: if they are the partition's, its lease counts
    from ``now_ms`` (no leader on another node gets an epoch before it ran out); anything else renews
    nothing."""
    a = meta.partitions.get(partition)
    if a is None or leader_epoch is None or a.leader_epoch != leader_epoch or a.leader != node:
        return meta
    return replace(meta, leases={**meta.leases, partition: Lease(node, now_ms)})


def leases_at_start(partitions: Mapping[int, PartitionAssignment], now_ms: int) -> dict[int, Lease]:
    """A controller starting from the cache: the previous instance may have confirmed these leaders a
    moment ago, so their leases count as renewed now."""
    return {p: Lease(a.leader, now_ms) for p, a in partitions.items() if a.leader is not None}


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
