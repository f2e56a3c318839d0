"""Typed coordinator configuration keyed by Kafka's property names (``GroupCoordinatorConfig`` for the
group and offsets settings; the others are Kafka broker and topic settings).

``CoordinatorConfig.from_properties({...})`` takes Kafka property names (``group.max.size``) and
validates every value: an unknown key, a value of the wrong type or a value outside its range raises
with the property's name and its limit; nothing is half-applied.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from raygroups.coordinator.checks import is_int

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class _Prop:
    attr: str
    minimum: int
    maximum: int
    boolean: bool = False  # a true/false property (Kafka's boolean configs)
    names: tuple[str, ...] = ()  # a list property: a comma-separated string of these names, in any order


# Kafka property name -> (attribute, min, max). Defaults live on the dataclass.
_PROPERTIES: dict[str, _Prop] = {
    "offsets.topic.num.partitions": _Prop("offsets_topic_num_partitions", 1, 10_000),
    "offsets.topic.replication.factor": _Prop("offsets_topic_replication_factor", 1, 32767),
    "offsets.topic.segment.bytes": _Prop("offsets_topic_segment_bytes", 1024, _INT_MAX),
    "offsets.retention.minutes": _Prop("offsets_retention_minutes", 1, _INT_MAX),
    "offsets.retention.check.interval.ms": _Prop("offsets_retention_check_interval_ms", 1, _LONG_MAX),
    "offsets.commit.timeout.ms": _Prop("offsets_commit_timeout_ms", 1, _INT_MAX),
    "offset.metadata.max.bytes": _Prop("offset_metadata_max_bytes", 0, _INT_MAX),
    "group.min.session.timeout.ms": _Prop("group_min_session_timeout_ms", 0, _INT_MAX),
    "group.max.session.timeout.ms": _Prop("group_max_session_timeout_ms", 0, _INT_MAX),
    "group.initial.rebalance.delay.ms": _Prop("group_initial_rebalance_delay_ms", 0, _INT_MAX),
    "group.max.size": _Prop("group_max_size", 1, _INT_MAX),
    "group.classic.max.groups": _Prop("group_classic_max_groups", 1, _INT_MAX),
    "group.classic.max.pending.members": _Prop("group_classic_max_pending_members", 1, _INT_MAX),
    "group.classic.new.member.join.timeout.ms": _Prop("group_new_member_join_timeout_ms", 1, _INT_MAX),
    "group.coordinator.append.linger.ms": _Prop("group_coordinator_append_linger_ms", 0, _INT_MAX),
    "delete.retention.ms": _Prop("delete_retention_ms", 0, _LONG_MAX),
    "min.insync.replicas": _Prop("min_insync_replicas", 1, 32767),
    "replica.lag.time.max.ms": _Prop("replica_lag_time_max_ms", 1, _LONG_MAX),
    "message.max.bytes": _Prop("message_max_bytes", 1024, _INT_MAX),
    "request.timeout.ms": _Prop("request_timeout_ms", 1, _INT_MAX),
    "log.flush.interval.ms": _Prop("log_flush_interval_ms", 0, _LONG_MAX),
    "unclean.leader.election.enable": _Prop("unclean_leader_election_enable", 0, 1, boolean=True),
    "client.linger.ms": _Prop("client_linger_ms", 0, 1_000),
    "client.max.batch.requests": _Prop("client_max_batch_requests", 1, 1_000),
    "group.consumer.session.timeout.ms": _Prop("group_consumer_session_timeout_ms", 1, _INT_MAX),
    "group.consumer.min.session.timeout.ms": _Prop("group_consumer_min_session_timeout_ms", 1, _INT_MAX),
    "group.consumer.max.session.timeout.ms": _Prop("group_consumer_max_session_timeout_ms", 1, _INT_MAX),
    "group.consumer.heartbeat.interval.ms": _Prop("group_consumer_heartbeat_interval_ms", 1, _INT_MAX),
    "group.consumer.min.heartbeat.interval.ms": _Prop("group_consumer_min_heartbeat_interval_ms", 1, _INT_MAX),
    "group.consumer.max.heartbeat.interval.ms": _Prop("group_consumer_max_heartbeat_interval_ms", 1, _INT_MAX),
    "group.consumer.max.size": _Prop("group_consumer_max_size", 1, _INT_MAX),
    "group.consumer.assignment.interval.ms": _Prop("group_consumer_assignment_interval_ms", 0, _INT_MAX),
    "group.consumer.assignors": _Prop("group_consumer_assignors", 0, 0, names=("uniform", "range")),
    "shard.session.timeout.ms": _Prop("shard_session_timeout_ms", 500, 300_000),
    "shard.standby.enable": _Prop("shard_standby_enable", 0, 1, boolean=True),
    "shard.standby.per.partition": _Prop("shard_standby_per_partition", 0, 1, boolean=True),
    "shard.cold.spares": _Prop("shard_cold_spares", 0, 64),
    "shard.cold.spares.max": _Prop("shard_cold_spares_max", 0, 64),
}


@dataclass(frozen=True)
class CoordinatorConfig:
    """Kafka's defaults for the offsets topic, offset management and classic groups
    (``GroupCoordinatorConfig``) and for the offsets topic's tombstone retention (``delete.retention.ms``)."""

    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5_000
    offset_metadata_max_bytes: int = 4_096
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = _INT_MAX
    # Not Kafka's: the classic coordinator bounds neither. Limits per coordinator shard that protect its
    # memory from a client creating groups (JoinGroup, simple commits) or KIP-394 pending member ids
    # without end; the first follows ``group.share.max.groups`` (KIP-932, KAFKA-19024), also applied per
    # shard there and answered with GROUP_MAX_SIZE_REACHED.
    group_classic_max_groups: int = 100_000
    group_classic_max_pending_members: int = 100_000
    group_new_member_join_timeout_ms: int = 300_000
    group_coordinator_append_linger_ms: int = 5
    # KIP-848 consumer groups (GroupCoordinatorConfig's group.consumer.*): the session timeout and heartbeat
    # interval the coordinator gives its members, their bounds, the group size limit, and the server
    # assignors (the first is the default; a member may name another of them).
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_min_heartbeat_interval_ms: int = 5_000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_consumer_max_size: int = _INT_MAX
    # KIP-1263 (Kafka 4.3): a group's target assignment is computed at most once per interval.
    group_consumer_assignment_interval_ms: int = 1_000
    group_consumer_assignors: str = "uniform,range"
    delete_retention_ms: int = 86_400_000
    min_insync_replicas: int = 2
    replica_lag_time_max_ms: int = 30_000
    # Kafka's broker default: the largest batch (and so the largest member metadata) it accepts.
    message_max_bytes: int = 1_048_588
    request_timeout_ms: int = 30_000
    # 0: fsync every batch (the default here); N > 0: fsync at most every N ms.
    log_flush_interval_ms: int = 0
    # Kafka's default (false since KIP-106): a partition whose every in-sync replica is lost stays offline
    # until one returns. True elects any live replica instead: available sooner, but the commits and
    # group states it had not replicated are lost (the other replicas are truncated to its log).
    unclean_leader_election_enable: bool = False
    # The Ray client's request coalescing (``raygroups.client.ray_client``; after the producer's linger.ms and
    # batch.size): how long a request may wait for others bound for its shard before the call leaves
    # (0: only what is issued together, or while the lane's previous call is in flight), and the most
    # requests one call carries (1: every request is a call of its own).
    client_linger_ms: int = 0
    client_max_batch_requests: int = 1_000
    # Failure detection (replicated deployments), after KRaft's broker.session.timeout.ms (KIP-631): the
    # controller fails a partition over once its leader shard has not answered its probes for this long
    # (a killed, hung or paused process, or a node that went away); the leader stops answering on its own
    # after 2/3 of it without the controller's confirmation (its lease), so a paused leader that resumes
    # after a failover serves nothing stale. Lower: faster failover, but a leader that stalls this long
    # under load (GC, a starved core, a slow fsync) is failed over although it was alive.
    shard_session_timeout_ms: int = 3_000
    # Hot standbys (replicated deployments; not Kafka's): each node's spare shard process keeps the replayed
    # state of every partition the node follows, so that a failover onto the node replays only what the
    # standby had not read yet instead of the whole log. Costs the spare that state's memory (about what
    # the leader holds, per followed partition) and a read of the node's replicas every 0.25-1 s.
    shard_standby_enable: bool = True
    # One spare process per followed partition instead of one per node: the node's single spare is one
    # process and becomes the shard of the first partition it is handed, so when a node dies leading
    # several partitions only the first to fail over onto each survivor is promoted from its standby (the
    # others start a process and replay their log). With this, each spare stands by for one partition, so
    # every failover onto a node whose spare for the partition runs is a promotion, and it leaves the
    # node's other standbys as they are (a node that just joined, or just stopped leading the partition,
    # gets that spare within a controller round or two, then a process start and a read of the log).
    # Costs a process per followed partition (its memory and idle CPU: bench/failover.py); the standbys'
    # state is held once either way. Needs shard.standby.enable.
    shard_standby_per_partition: bool = False
    # Spare processes per node with no standby (about 140 MB each): each loads a partition at once when the
    # node is handed more partitions than its spares with standbys cover (a lost node's partitions, two or
    # three to each survivor, or leadership flapping onto the node again before its spare is replaced),
    # where a new process takes 2-4 s to start on a loaded machine (chaos runs, seed 4242). At least: a node
    # that would inherit more partitions from one lost node gets more (``placement.spares.cold_spares_wanted``).
    shard_cold_spares: int = 2
    # The most cold spares a node is given for what it would inherit (shard.cold.spares if that is more): in
    # Kafka's replica layout every partition a node leads names the same node next, so with 50 partitions on
    # 3 nodes a survivor inherits 17 at once; each spare costs about 140 MB resident, kept while it is wanted.
    shard_cold_spares_max: int = 6

    def __post_init__(self) -> None:
        for name, prop in _PROPERTIES.items():
            value = getattr(self, prop.attr)
            _check(name, value, prop)
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                "group.min.session.timeout.ms "
                f"({self.group_min_session_timeout_ms}) must be <= group.max.session.timeout.ms "
                f"({self.group_max_session_timeout_ms})"
            )
        # As Kafka's GroupCoordinatorConfig: each consumer setting within its bounds, the interval below the
        # session timeout.
        for setting, low, high in (("session.timeout.ms", self.group_consumer_min_session_timeout_ms,
                                    self.group_consumer_max_session_timeout_ms),
                                   ("heartbeat.interval.ms", self.group_consumer_min_heartbeat_interval_ms,
                                    self.group_consumer_max_heartbeat_interval_ms)):
            value = getattr(self, "group_consumer_" + setting.replace(".", "_"))
            if not low <= value <= high:
                raise ValueError(f"group.consumer.{setting} must be in [group.consumer.min.{setting} ({low}), "
                                 f"group.consumer.max.{setting} ({high})], got {value}")
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ValueError(f"group.consumer.heartbeat.interval.ms ({self.group_consumer_heartbeat_interval_ms}) "
                             f"must be below group.consumer.session.timeout.ms "
                             f"({self.group_consumer_session_timeout_ms})")

    @property
    def consumer_assignors(self) -> tuple[str, ...]:
        """``group.consumer.assignors`` as names; the first is the default server assignor."""
        return tuple(n.strip() for n in self.group_consumer_assignors.split(","))

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_properties(cls, properties: dict[str, Any] | CoordinatorConfig | None = None) -> CoordinatorConfig:
        if properties is None:
            return cls()
        if isinstance(properties, CoordinatorConfig):
            return properties
        if not isinstance(properties, dict):
            raise TypeError(f"config must be a dict of Kafka property names, got {type(properties).__name__}")
        kwargs: dict[str, Any] = {}
        for name, value in properties.items():
            prop = _PROPERTIES.get(name)
            if prop is None:
                known = ", ".join(sorted(_PROPERTIES))
                raise ValueError(f"unknown coordinator property {name!r}; known properties: {known}")
            _check(name, value, prop)
            kwargs[prop.attr] = value
        return cls(**kwargs)

    def to_properties(self) -> dict[str, int | str]:
        return {name: getattr(self, prop.attr) for name, prop in _PROPERTIES.items()}


# The longest leadership lease. A node's crash is declared by Ray's health checks in about 0.6 s
# (raygroups.deployment.start), and the new leader asks for its epoch about 0.15 s later: a lease of 0.75 s,
# counted from the old leader's last renewal (its processes die within 0.1 s of their raylet,
# raylet_death_check_interval_milliseconds), has run out by then or nearly, so the new leader does not wait
# for it. The leader renews it four times per lease.
LEADERSHIP_LEASE_MAX_S = 0.75


def leadership_lease_s(session_timeout_ms: int) -> float:
    """How long a leader may answer after the controller last confirmed it (from when it asked): 2/3 of
    ``shard.session.timeout.ms``, below the silence after which the controller fails it over, and at most
    ``LEADERSHIP_LEASE_MAX_S``, so that a paused leader that resumes after a failover refuses requests
    instead of serving stale reads. The controller also waits out the previous leader's lease before it
    gives a new leader on another node its epoch (``Controller.leader_started``): 0.75 s at the default
    3 s."""
    return min(session_timeout_ms * 2 / 3 / 1000, LEADERSHIP_LEASE_MAX_S)


def _check(name: str, value: Any, prop: _Prop) -> None:
    if prop.names:
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a comma-separated string, got {type(value).__name__} {value!r}")
        given = [n.strip() for n in value.split(",")]
        unknown = [n for n in given if n not in prop.names]
        if not value.strip() or unknown or len(set(given)) != len(given):
            raise ValueError(f"{name} must name one or more of {', '.join(prop.names)} once each, got {value!r}")
        return
    if prop.boolean:
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be true or false, got {type(value).__name__} {value!r}")
        return
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if not prop.minimum <= value <= prop.maximum:
        raise ValueError(f"{name} must be in [{prop.minimum}, {prop.maximum}], got {value}")


assert {p.attr for p in _PROPERTIES.values()} == {f.name for f in fields(CoordinatorConfig)}
