"""The records of KIP-848 consumer groups (Kafka's ``ConsumerGroup*Key/Value`` message schemas in the
``group-coordinator`` module; key versions 3 and 5-8 double as type ids, as for the classic records).

A consumer group is written as one record per concern, so that a heartbeat writes only what changed:

* ``ConsumerGroupMetadata`` (3): the group epoch and the subscription metadata it was computed for
  (Kafka 4.1 keeps a hash of it; the partition counts themselves are kept here: as small, and readable);
* ``ConsumerGroupMemberMetadata`` (5): one member's subscription and client facts;
* ``ConsumerGroupTargetAssignmentMetadata`` (6): the assignment epoch;
* ``ConsumerGroupTargetAssignmentMember`` (7): one member's target assignment;
* ``ConsumerGroupCurrentMemberAssignment`` (8): one member's epochs, reconciliation state and the
  partitions it owns or must still revoke.

Kafka's ``ConsumerGroupPartitionMetadata`` (4, deprecated since 4.1) and ``ConsumerGroupRegularExpression``
(16: regexes are resolved synchronously here, against the topics the shard knows) are not written.
An assignment is a tuple of ``(topic, partitions)`` pairs sorted by topic, partitions sorted, none empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

CONSUMER_GROUP_METADATA_KEY_TYPE = 3
CONSUMER_GROUP_MEMBER_METADATA_KEY_TYPE = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_TYPE = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_TYPE = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_TYPE = 8

Assignment = tuple[tuple[str, tuple[int, ...]], ...]
EMPTY_ASSIGNMENT: Assignment = ()


def to_assignment(partitions: Mapping[str, object]) -> Assignment:
    """The canonical form of ``{topic: partitions}`` (any iterable of ints per topic; empty topics dropped)."""
    return tuple((t, tuple(sorted(set(ps)))) for t, ps in sorted(partitions.items()) if ps)


def from_assignment(assignment: Assignment) -> dict[str, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in assignment}


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    # ``(topic, partition count)`` of every subscribed topic that exists, sorted (what the group epoch saw).
    subscription_metadata: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    assignment: Assignment


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: str  # a ``MemberState`` value
    assigned: Assignment
    pending_revocation: Assignment


CONSUMER_GROUP_KEYS = (
    ConsumerGroupMetadataKey, ConsumerGroupMemberMetadataKey, ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupCurrentMemberAssignmentKey,
)
# key class -> (type id, value class)
CONSUMER_GROUP_RECORD_TYPES = {
    ConsumerGroupMetadataKey: (CONSUMER_GROUP_METADATA_KEY_TYPE, ConsumerGroupMetadataValue),
    ConsumerGroupMemberMetadataKey: (CONSUMER_GROUP_MEMBER_METADATA_KEY_TYPE, ConsumerGroupMemberMetadataValue),
    ConsumerGroupTargetAssignmentMetadataKey: (CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_TYPE,
                                               ConsumerGroupTargetAssignmentMetadataValue),
    ConsumerGroupTargetAssignmentMemberKey: (CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_TYPE,
                                             ConsumerGroupTargetAssignmentMemberValue),
    ConsumerGroupCurrentMemberAssignmentKey: (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_TYPE,
                                              ConsumerGroupCurrentMemberAssignmentValue),
}
