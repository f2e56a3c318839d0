"""A KIP-848 consumer group as its records leave it (Kafka's ``ConsumerGroup`` and ``ConsumerGroupMember``,
their timeline fields): the group epoch and subscription metadata, each member's subscription, the target
assignment and its epoch, each member's current assignment; and what Kafka derives from those as it
replays them -- which member owns each partition at which epoch, how many members subscribe to each topic
or regex, the static members by instance id.

``replay_consumer_record`` is the only code that changes it (called by ``replay_rules.apply``, on the live
write path and when a log is loaded); ``undo_consumer_record`` reverts exactly one record.

Guarantees: the derived indexes always equal what a fresh replay of the same records derives; a
partition is owned (assigned or pending revocation) by at most one member as long as the records come
from ``shard_consumer`` (which never assigns a partition another member still owns).
"""

from __future__ import annotations

import enum

from raygroups.coordinator.consumer_records import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)

# Kafka's ConsumerGroupHeartbeatRequest epochs.
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.StrEnum):
    """Kafka's ``MemberState`` (the reconciliation state of one member)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"
    UNKNOWN = "unknown"


class ConsumerGroupState(enum.StrEnum):
    """Kafka's ``ConsumerGroup.ConsumerGroupState``, as ConsumerGroupDescribe and ListGroups name them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


NEW_MEMBER_ASSIGNMENT = ConsumerGroupCurrentMemberAssignmentValue(0, 0, MemberState.STABLE.value, (), ())


class ConsumerGroupData:
    """One consumer group's replayed records, with Kafka's derived indexes."""

    __slots__ = ("group_id", "group_epoch", "subscription_metadata", "assignment_epoch", "members", "targets",
                 "current", "owners", "topic_subscribers", "regex_subscribers", "static_members", "assignor_inputs")

    __hash__ = None  # mutable

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.subscription_metadata: tuple[tuple[str, int], ...] = ()
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMemberMetadataValue] = {}
        self.targets: dict[str, Assignment] = {}
        self.current: dict[str, ConsumerGroupCurrentMemberAssignmentValue] = {}
        # Derived: (topic, partition) -> the member assigned it or still revoking it (what Kafka's
        # currentPartitionEpoch answers); subscribers per topic name and per regex; member id per instance id.
        self.owners: dict[tuple[str, int], str] = {}
        self.topic_subscribers: dict[str, int] = {}
        self.regex_subscribers: dict[str, int] = {}
        self.static_members: dict[str, str] = {}
        # Soft (a cache of ``shard_consumer``'s): member id -> (the target it was built from, the assignor's
        # input for the member).
        self.assignor_inputs: dict[str, tuple] = {}

    # --- what handlers read ---------------------------------------------------------------------------
    def partition_owner(self, topic: str, partition: int) -> str | None:
        return self.owners.get((topic, partition))

    def member_assignment(self, member_id: str) -> ConsumerGroupCurrentMemberAssignmentValue:
        return self.current.get(member_id, NEW_MEMBER_ASSIGNMENT)

    def target_of(self, member_id: str) -> Assignment:
        return self.targets.get(member_id, EMPTY_ASSIGNMENT)

    def state(self) -> ConsumerGroupState:
        """Kafka's ``ConsumerGroup.updateState``."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member_id in self.members:
            current = self.member_assignment(member_id)
            if current.member_epoch != self.assignment_epoch or current.state != MemberState.STABLE.value:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def durable(self) -> tuple:
        """What the records set (the derived indexes follow from it): equality and digests use this."""
        return (self.group_epoch, self.subscription_metadata, self.assignment_epoch, dict(sorted(self.members.items())),
                dict(sorted(self.targets.items())), dict(sorted(self.current.items())))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerGroupData):
            return NotImplemented
        return self.group_id == other.group_id and self.durable() == other.durable()

    def __repr__(self) -> str:
        return (f"ConsumerGroupData({self.group_id!r}, epoch={self.group_epoch}, assignment_epoch="
                f"{self.assignment_epoch}, members={sorted(self.members)})")

    # --- the derived indexes ----------------------------------------------------------------------------
    def _set_member(self, member_id: str, value: ConsumerGroupMemberMetadataValue | None) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            _count(self.topic_subscribers, old.subscribed_topic_names, -1)
            if old.subscribed_topic_regex is not None:
                _count(self.regex_subscribers, (old.subscribed_topic_regex,), -1)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                del self.static_members[old.instance_id]
        if value is not None:
            self.members[member_id] = value
            _count(self.topic_subscribers, value.subscribed_topic_names, 1)
            if value.subscribed_topic_regex is not None:
                _count(self.regex_subscribers, (value.subscribed_topic_regex,), 1)
            if value.instance_id is not None:
                self.static_members[value.instance_id] = member_id

    def _set_current(self, member_id: str, value: ConsumerGroupCurrentMemberAssignmentValue | None) -> None:
        old = self.current.pop(member_id, None)
        if old is not None:
            for topic, partitions in old.assigned + old.pending_revocation:
                for p in partitions:
                    if self.owners.get((topic, p)) == member_id:
                        del self.owners[(topic, p)]
        if value is not None:
            self.current[member_id] = value
            for topic, partitions in value.assigned + value.pending_revocation:
                for p in partitions:
                    self.owners[(topic, p)] = member_id


def _count(counts: dict[str, int], names, delta: int) -> None:
    for name in names:
        n = counts.get(name, 0) + delta
        if n > 0:
            counts[name] = n
        else:
            counts.pop(name, None)


_MISSING = object()


def _slot(group: ConsumerGroupData, key) -> object:
    """The current value of the slot ``key`` names (``_MISSING`` for none)."""
    t = type(key)
    if t is ConsumerGroupMetadataKey:
        return ConsumerGroupMetadataValue(group.group_epoch, group.subscription_metadata)
    if t is ConsumerGroupTargetAssignmentMetadataKey:
        return ConsumerGroupTargetAssignmentMetadataValue(group.assignment_epoch)
    if t is ConsumerGroupMemberMetadataKey:
        return group.members.get(key.member_id, _MISSING)
    if t is ConsumerGroupTargetAssignmentMemberKey:
        target = group.targets.get(key.member_id)
        return _MISSING if target is None else ConsumerGroupTargetAssignmentMemberValue(target)
    return group.current.get(key.member_id, _MISSING)


def _set_slot(group: ConsumerGroupData, key, value) -> None:
    """Set (or, for ``None``/``_MISSING``, clear) the slot ``key`` names."""
    t = type(key)
    if value is _MISSING:
        value = None
    if t is ConsumerGroupMetadataKey:
        group.group_epoch, group.subscription_metadata = (0, ()) if value is None else (value.epoch,
                                                                                        value.subscription_metadata)
    elif t is ConsumerGroupTargetAssignmentMetadataKey:
        group.assignment_epoch = 0 if value is None else value.assignment_epoch
    elif t is ConsumerGroupMemberMetadataKey:
        group._set_member(key.member_id, value)
    elif t is ConsumerGroupTargetAssignmentMemberKey:
        if value is None:
            group.targets.pop(key.member_id, None)
        else:
            group.targets[key.member_id] = value.assignment
    else:
        group._set_current(key.member_id, value)


_VALUE_TYPES = {
    ConsumerGroupMetadataKey: ConsumerGroupMetadataValue,
    ConsumerGroupMemberMetadataKey: ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMetadataKey: ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey: ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupCurrentMemberAssignmentKey: ConsumerGroupCurrentMemberAssignmentValue,
}


def replay_consumer_record(consumer_groups: dict[str, ConsumerGroupData], groups: dict, key, value) -> tuple:
    """Apply one consumer group record (Kafka's ``GroupMetadataManager.replay`` of the ConsumerGroup* records):

    * any value creates the group if it is missing, replacing a simple group (one known only through its
      offsets: ``None`` in ``groups``), as Kafka's ``getOrMaybeCreatePersistedConsumerGroup`` does;
    * a ``ConsumerGroupMetadata`` tombstone deletes the group (its offsets stay), or a simple group of
      that id; other tombstones clear their slot (nothing, if the group is gone).

    Returns the token ``undo_consumer_record`` reverts it with: ``("cg-", group, removed group, removed
    simple group)`` for a group's deletion, else ``("cg", group, key, previous slot value, created)``."""
    expected = _VALUE_TYPES.get(type(key))
    if expected is None:
        raise TypeError(f"not a consumer group record key: {type(key).__name__}")
    if value is not None and type(value) is not expected:
        raise TypeError(f"{type(key).__name__} needs a {expected.__name__}, got {type(value).__name__}")
    group_id = key.group
    if type(key) is ConsumerGroupMetadataKey and value is None:
        removed = consumer_groups.pop(group_id, None)
        simple = group_id in groups and groups[group_id] is None
        if simple:
            del groups[group_id]
        return ("cg-", group_id, removed, simple)
    group = consumer_groups.get(group_id)
    if group is None and value is None:
        return ("cg", group_id, key, _MISSING, False)
    created = group is None
    if created:
        group = consumer_groups[group_id] = ConsumerGroupData(group_id)
        if group_id in groups and groups[group_id] is None:
            del groups[group_id]
            created = "simple"
    prev = _slot(group, key)
    _set_slot(group, key, value)
    return ("cg", group_id, key, prev, created)


def undo_consumer_record(consumer_groups: dict[str, ConsumerGroupData], groups: dict, token: tuple) -> None:
    if token[0] == "cg-":
        _, group_id, removed, simple = token
        if removed is not None:
            consumer_groups[group_id] = removed
        if simple:
            groups[group_id] = None
        return
    _, group_id, key, prev, created = token
    if created:
        consumer_groups.pop(group_id, None)
        if created == "simple":
            groups[group_id] = None
        return
    group = consumer_groups.get(group_id)
    if group is not None:
        _set_slot(group, key, prev)


def consumer_group_tombstones(group: ConsumerGroupData) -> list:
    """Kafka's ``ConsumerGroup.createGroupTombstoneRecords``: every member's keys, the assignment epoch, then
    the group's metadata (whose tombstone deletes the group)."""
    records: list = []
    for member_id in sorted(group.current):
        records.append((ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member_id), None))
    for member_id in sorted(group.targets):
        records.append((ConsumerGroupTargetAssignmentMemberKey(group.group_id, member_id), None))
    records.append((ConsumerGroupTargetAssignmentMetadataKey(group.group_id), None))
    for member_id in sorted(group.members):
        records.append((ConsumerGroupMemberMetadataKey(group.group_id, member_id), None))
    records.append((ConsumerGroupMetadataKey(group.group_id), None))
    return records
