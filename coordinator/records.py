"""The records of the offsets log: Kafka's ``__consumer_offsets`` keys and values (the
``OffsetCommitKey/Value`` and ``GroupMetadataKey/Value`` message schemas, ``GroupCoordinatorRecordSerde``).

A record is a ``(key, value)`` pair; a value of ``None`` is a tombstone. The key's type identifies the
record type, as Kafka's key version does (OffsetCommit = 1, GroupMetadata = 2); the codec in
``offsets_log`` writes that type id and a per-type value version so that old logs stay readable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


class OffsetCommitValue(NamedTuple):
    """A committed offset. A named tuple rather than a dataclass: a shard holds one per committed
    partition, and loading a log builds millions of them (``tuple.__new__`` on the decoded fields)."""

    offset: int
    leader_epoch: int  # -1 = no leader epoch
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None  # only set when the commit carried an explicit retention


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int  # -1 = unknown
    members: tuple[MemberMetadata, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.members, tuple):
            object.__setattr__(self, "members", tuple(self.members))


RecordKey = OffsetCommitKey | GroupMetadataKey
RecordValue = OffsetCommitValue | GroupMetadataValue | None
Record = tuple[RecordKey, RecordValue]

# Kafka's key versions double as record type ids (GroupCoordinatorRecordSerde dispatches on them).
OFFSET_COMMIT_KEY_TYPE = 1
GROUP_METADATA_KEY_TYPE = 2


def new_offset_commit_record(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    leader_epoch: int,
    metadata: str,
    commit_timestamp_ms: int,
    expire_timestamp_ms: int | None = None,
) -> Record:
    return (
        OffsetCommitKey(group, topic, partition),
        OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms),
    )


def new_offset_commit_tombstone_record(group: str, topic: str, partition: int) -> Record:
    return (OffsetCommitKey(group, topic, partition), None)


def new_group_metadata_record(
    group: str,
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    current_state_timestamp_ms: int,
    members: tuple[MemberMetadata, ...] | list[MemberMetadata] = (),
) -> Record:
    return (
        GroupMetadataKey(group),
        GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp_ms, tuple(members)),
    )


def new_empty_group_metadata_record(group: str, current_state_timestamp_ms: int) -> Record:
    """What Kafka's new coordinator writes when JoinGroup creates a group: generation 0, no type."""
    return new_group_metadata_record(group, "", 0, None, None, current_state_timestamp_ms, ())


def new_group_metadata_tombstone_record(group: str) -> Record:
    return (GroupMetadataKey(group), None)
