"""The controller's data: its settings, what it observes, what it keeps, and the actions it decides
(``placement.decide`` decides, ``placement.requests`` answers the leaders, ``placement.controller``
performs). Plain frozen values: no Ray, no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from raygroups.coordinator.checks import is_int
from raygroups.placement.nodes import NodeObservation
from raygroups.placement.plan import PartitionAssignment

# Ray's actor states in which an actor is not running yet (or again): not silence.
STARTING = frozenset({"DEPENDENCIES_UNREADY", "PENDING_CREATION", "RESTARTING"})
# A shard Ray has not reported ALIVE yet (PENDING_CREATION: waiting in its node's queue of worker starts,
# which starts as many at once as the node has CPUs, then importing and constructing) would be replaced by
# an actor waiting in the same queue, or on a loaded machine in another node's as long; so that wait is
# bounded this many times ``shard_start_timeout_ms``, and the start timeout itself counts from ALIVE.
QUEUED_START_FACTOR = 5
# Partition states a healthy shard answers with: not loaded yet, loading, serving.
HEALTHY = frozenset({"INITIAL", "LOADING", "ACTIVE"})


def _positive(name: str, value: object) -> None:
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


@dataclass(frozen=True)
class Settings:
    num_partitions: int
    replication_factor: int
    min_insync_replicas: int
    unclean_election: bool = False
    shard_silence_ms: int = 3_000
    shard_start_timeout_ms: int = 60_000
    node_replacement_delay_ms: int = 60_000
    leader_balance_interval_ms: int = 10_000

    def __post_init__(self) -> None:
        for name in ("num_partitions", "replication_factor", "min_insync_replicas", "shard_silence_ms",
                     "shard_start_timeout_ms", "node_replacement_delay_ms", "leader_balance_interval_ms"):
            _positive(name, getattr(self, name))
        if not isinstance(self.unclean_election, bool):
            raise TypeError(f"unclean_election must be a bool, got {type(self.unclean_election).__name__}")

    def recovery_quorum(self, replicas: int, min_insync_replicas: int | None = None) -> int:
        """How many replicas of a partition must report before it is recovered from disks: enough to meet
        every set of ``min.insync.replicas`` of them (any ISR that acknowledged a write)."""
        min_isr = self.min_insync_replicas if min_insync_replicas is None else min_insync_replicas
        return max(1, replicas - min(min_isr, replicas) + 1)


# --------------------------------------------------------------------------- observations


@dataclass(frozen=True)
class ShardObservation:
    """The actor named ``raygroups-shard-<p>`` as seen in one round."""

    actor_state: str | None  # Ray's state of the actor; None when no actor has the name
    actor_id: str | None = None  # changes when the actor is replaced
    answer: str | None = None  # the partition state it answered in this round; None: no answer
    node: str | None = None  # the node it answered from
    process: int | None = None  # the process it answered from (its pid): Ray restarting it in place changes it


@dataclass(frozen=True)
class ReplicaReport:
    """One replica's persisted state, as its node read it from disk."""

    state: PartitionAssignment | None
    fenced_epoch: int = -1


@dataclass(frozen=True)
class NodeReport:
    node_id: str  # the incarnation that reported
    num_partitions: int | None  # from the node's descriptor; None on a fresh disk
    replicas: Mapping[int, ReplicaReport] = field(default_factory=dict)
    min_insync_replicas: int | None = None  # the lowest the deployment ran with, as this disk recorded it
    layout_created: bool = False  # this disk recorded that every partition was created
    error: str | None = None  # the node's descriptor could not be read


@dataclass(frozen=True)
class Observations:
    nodes: Mapping[str, NodeObservation]
    shards: Mapping[int, ShardObservation] = field(default_factory=dict)
    reports: Mapping[str, NodeReport] = field(default_factory=dict)  # reports that arrived this round

    def alive(self) -> set[str]:
        return {n for n, o in self.nodes.items() if o.alive}


# --------------------------------------------------------------------------- metadata


@dataclass(frozen=True)
class ShardTrack:
    """Soft liveness of one partition's shard actor."""

    node: str  # where it was asked to run (or was found)
    since_ms: int  # when this start began (creation, or a restart Ray reported)
    actor_id: str | None = None
    running_ms: int | None = None  # when Ray first reported it ALIVE (its process up, its constructor done)
    unanswered_ms: int | None = None  # the first probe left unanswered since its last answer
    first_answer_ms: int | None = None
    last_answer_ms: int | None = None
    process: int | None = None  # the process its answers came from


@dataclass(frozen=True)
class Lease:
    """The leader of a partition the controller last confirmed (its start or a renewal naming its epoch), and
    when (``now_ms``): it may answer clients until ``leadership_lease_ms`` after that."""

    node: str
    confirmed_ms: int


@dataclass(frozen=True)
class Metadata:
    settings: Settings
    partitions: Mapping[int, PartitionAssignment] = field(default_factory=dict)  # durable
    incarnations: Mapping[str, str] = field(default_factory=dict)  # node name -> Ray node id last seen alive
    dead_since_ms: Mapping[str, int] = field(default_factory=dict)
    reported: Mapping[str, str] = field(default_factory=dict)  # node name -> incarnation whose disk reported
    # node name -> partitions whose state its disk holds (its report, then every state persisted there):
    # only those replicas are electable, so a node back with an empty disk never leads.
    held: Mapping[str, frozenset[int]] = field(default_factory=dict)
    refused: Mapping[str, str] = field(default_factory=dict)  # node name -> why its disk is not used
    superseded: frozenset[str] = frozenset()  # Ray node ids of incarnations replaced by a newer one
    marked: frozenset[str] = frozenset()  # nodes whose disk records that the layout was created
    min_isr_seen: int | None = None  # the lowest min.insync.replicas any disk recorded
    recovery: Mapping[int, Mapping[str, ReplicaReport]] = field(default_factory=dict)
    shards: Mapping[int, ShardTrack] = field(default_factory=dict)
    placed_on: tuple[str, ...] = ()  # the node set replicas were last planned over
    started_ms: int | None = None  # when every partition first served: the deployment is up
    last_balance_ms: int = 0
    leases: Mapping[int, Lease] = field(default_factory=dict)
    # Per partition: a leader epoch that ``decide`` elected and the disks took, that no shard has been given
    # yet: the first shard that asks for its epoch (``requests.on_leader_started``) gets it as it is.
    unclaimed: Mapping[int, int] = field(default_factory=dict)

    def with_partition(self, partition: int, assignment: PartitionAssignment, holders=(),
                       elected: bool = False) -> Metadata:
        """``assignment`` took effect; ``holders`` now hold the partition's data (its creation, or a replica
        that was caught up and rejoined the ISR). An ordinary commit adds no holder: writing a state file
        on a node does not put the partition's log there. ``elected``: its leader epoch is one ``decide``
        chose for a new leader (``Commit.elected``), not yet given to any shard."""
        held = dict(self.held)
        for node in holders:
            held[node] = held.get(node, frozenset()) | {partition}
        unclaimed = dict(self.unclaimed)
        if elected and assignment.leader is not None:
            unclaimed[partition] = assignment.leader_epoch
        elif partition in unclaimed and unclaimed[partition] != assignment.leader_epoch:
            del unclaimed[partition]
        return replace(self, partitions={**self.partitions, partition: assignment}, held=held, unclaimed=unclaimed)

    def min_insync_replicas(self) -> int:
        """What a recovery quorum must assume: the lowest min.insync.replicas configured or recorded."""
        return min(self.settings.min_insync_replicas, self.min_isr_seen or self.settings.min_insync_replicas)


def bump(a: PartitionAssignment, **changes: Any) -> PartitionAssignment:
    """``a`` with ``changes`` and the next partition epoch: every change of a partition's state is one."""
    return replace(a, **changes, partition_epoch=a.partition_epoch + 1)


# --------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class Commit:
    """Persist ``assignment`` on the replicas' disks (leader and ISR required), then the cache; only
    then does it take effect."""

    partition: int
    assignment: PartitionAssignment
    previous: PartitionAssignment | None
    reason: str
    holders: frozenset[str] = frozenset()  # nodes that hold the partition's data once this takes effect
    # Its leader epoch elects a new leader (a failover, a replica back, the preferred leader): fenced on the
    # disks by this commit, so the shard started for it confirms it rather than persisting another.
    elected: bool = False


@dataclass(frozen=True)
class MarkLayout:
    """Record on these nodes' disks that every partition exists (so none is ever created again)."""

    nodes: tuple[str, ...]


@dataclass(frozen=True)
class SyncStates:
    """Send ``node`` the current state of ``partitions``: its disk holds older ones (it was away)."""

    node: str
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class StartShard:
    """Replace whatever holds the shard's name by a new shard actor on ``node`` (after its commit)."""

    partition: int
    node: str
    reason: str


@dataclass(frozen=True)
class StopShard:
    partition: int
    reason: str


@dataclass(frozen=True)
class Event:
    kind: str
    fields: tuple[tuple[str, Any], ...] = ()

    def as_dict(self) -> dict:
        return {"event": self.kind, **dict(self.fields)}


Action = Commit | MarkLayout | SyncStates | StartShard | StopShard | Event


@dataclass(frozen=True)
class Decision:
    metadata: Metadata  # soft state updated; partitions change only through the Commit actions
    actions: tuple[Action, ...]

    def of(self, kind: type) -> list:
        return [a for a in self.actions if isinstance(a, kind)]
