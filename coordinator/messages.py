"""Requests, responses and their validation (JoinGroup v9, SyncGroup v5, Heartbeat v4, LeaveGroup v5,
OffsetCommit v8, OffsetFetch v8, ListGroups v5, DescribeGroups v5, DeleteGroups v2, OffsetDelete v0).

Field names are Kafka's, in snake_case. ``validate_*`` functions reject values of the wrong Python type
(``TypeError``) or outside anything Kafka could encode (``ValueError``), naming the field and the limit;
values Kafka answers with an error code are left to the handlers so the client gets that code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from raygroups.coordinator.errors import Errors

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
DEFAULT_CLIENT_HOST = "/127.0.0.1"
_LEGAL_INSTANCE_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_MAX_NAME_LENGTH = 249  # Kafka's limit for topic names and group instance ids


# ----------------------------------------------------------------------------------------------
# Deferred responses
# ----------------------------------------------------------------------------------------------
class Deferred:
    """A response slot completed at most once, possibly later (a parked JoinGroup/SyncGroup).

    The core completes it; whoever created it decides when the value is released to the client."""

    __slots__ = ("_callbacks", "done", "value")

    def __init__(self) -> None:
        self._callbacks: list[Callable[[Any], None]] = []
        self.done = False
        self.value: Any = None

    def complete(self, value: Any) -> bool:
        if self.done:
            return False
        self.done = True
        self.value = value
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(value)
        return True

    def add_callback(self, cb: Callable[[Any], None]) -> None:
        if self.done:
            cb(self.value)
        else:
            self._callbacks.append(cb)


# ----------------------------------------------------------------------------------------------
# Requests
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JoinGroupRequest:
    group_id: str | None
    member_id: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = DEFAULT_CLIENT_HOST
    require_known_member_id: bool = True
    reason: str | None = None


@dataclass(frozen=True)
class SyncGroupRequest:
    group_id: str | None
    generation_id: int
    member_id: str
    assignments: dict[str, bytes]
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str | None
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeaveGroupRequest:
    group_id: str | None
    members: tuple[tuple[str, str | None], ...]
    reason: str | None = None


@dataclass(frozen=True)
class OffsetCommitRequest:
    group_id: str | None
    # (topic, partition) -> (offset, metadata, leader_epoch)
    offsets: dict[tuple[str, int], tuple[int, str | None, int]]
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None
    retention_time_ms: int = -1


@dataclass(frozen=True)
class OffsetFetchRequest:
    group_id: str | None
    partitions: tuple[tuple[str, int], ...] | None = None
    require_stable: bool = False
    # OffsetFetch v9 (KIP-848): a consumer group member's id and epoch, checked when the id is given.
    member_id: str | None = None
    member_epoch: int = -1


@dataclass(frozen=True)
class OffsetDeleteRequest:
    group_id: str | None
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ListGroupsRequest:
    states_filter: tuple[str, ...] = ()
    types_filter: tuple[str, ...] = ()


@dataclass(frozen=True)
class DescribeGroupsRequest:
    group_ids: tuple[str | None, ...]


@dataclass(frozen=True)
class DeleteGroupsRequest:
    group_ids: tuple[str | None, ...]


# ----------------------------------------------------------------------------------------------
# Responses
# ----------------------------------------------------------------------------------------------
class JoinGroupMember(NamedTuple):
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinGroupResponse:
    error: Errors
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    leader: str = ""
    protocol_type: str | None = None
    protocol_name: str | None = None
    members: list[JoinGroupMember] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncGroupResponse:
    error: Errors
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True)
class HeartbeatResponse:
    error: Errors


class LeaveMemberResponse(NamedTuple):
    member_id: str
    group_instance_id: str | None
    error: Errors


@dataclass(frozen=True)
class LeaveGroupResponse:
    error: Errors
    members: list[LeaveMemberResponse] = field(default_factory=list)


@dataclass(frozen=True)
class OffsetCommitResponse:
    errors: dict[tuple[str, int], Errors]


class PartitionOffset(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str
    error: Errors


@dataclass(frozen=True)
class OffsetFetchResponse:
    error: Errors
    offsets: dict[tuple[str, int], PartitionOffset] = field(default_factory=dict)


class ListedGroup(NamedTuple):
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str


@dataclass(frozen=True)
class ListGroupsResponse:
    error: Errors
    groups: list[ListedGroup] = field(default_factory=list)


class DescribedMember(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class DescribedGroup:
    error: Errors
    group_id: str
    group_state: str = "Dead"
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribedMember] = field(default_factory=list)


@dataclass(frozen=True)
class OffsetDeleteResponse:
    error: Errors
    errors: dict[tuple[str, int], Errors] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------
# Validation of values Kafka could not even encode
# ----------------------------------------------------------------------------------------------
def check_type(name: str, value: Any, types: type | tuple[type, ...], nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise TypeError(f"{name} must be {_type_names(types)}, got bool")
    if not isinstance(value, types):
        raise TypeError(f"{name} must be {_type_names(types)}{' or None' if nullable else ''}, got {type(value).__name__}")


def _type_names(types: type | tuple[type, ...]) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__


# Kafka's STRING and NULLABLE_STRING: a 16-bit length, so at most 32 767 bytes of UTF-8 on the wire (the
# protocol's Type.STRING); every string of a request is held to it, as Kafka's clients cannot send more.
MAX_STRING_BYTES = 32_767


def check_string(name: str, value: Any, nullable: bool = False) -> None:
    """A protocol string: a ``str`` (or None when ``nullable``) of at most ``MAX_STRING_BYTES`` bytes in
    UTF-8 (``TypeError``/``ValueError`` naming the field and the limit)."""
    check_type(name, value, str, nullable=nullable)
    if value is not None and len(value) * 4 > MAX_STRING_BYTES:  # (a short string needs no encoding)
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > MAX_STRING_BYTES:
            raise ValueError(f"{name} is {size} bytes in UTF-8, more than a Kafka protocol string's limit of "
                             f"{MAX_STRING_BYTES} bytes")


def check_int(name: str, value: Any, lo: int = INT32_MIN, hi: int = INT32_MAX) -> None:
    check_type(name, value, int)
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")


def check_group_id(value: Any) -> None:
    check_string("group_id", value, nullable=True)


def check_instance_id(value: Any) -> None:
    check_string("group_instance_id", value, nullable=True)
    if value is None:
        return
    if not value:
        raise ValueError("group_instance_id must not be empty (use None for a dynamic member)")
    if len(value) > _MAX_NAME_LENGTH:
        raise ValueError(f"group_instance_id is longer than {_MAX_NAME_LENGTH} characters ({len(value)})")
    if value in (".", "..") or not set(value) <= _LEGAL_INSTANCE_ID_CHARS:
        raise ValueError(f"group_instance_id {value!r} may only contain ASCII alphanumerics, '.', '_' and '-'")


def check_topic_partition(name: str, tp: Any) -> tuple[str, int]:
    if not isinstance(tp, tuple) or len(tp) != 2:
        raise TypeError(f"{name} keys must be (topic, partition) tuples, got {tp!r}")
    topic, partition = tp
    check_string(f"{name} topic", topic)
    check_int(f"{name} partition of {topic!r}", partition, 0, INT32_MAX)
    return topic, partition


def validate_join_group(req: JoinGroupRequest, max_metadata_bytes: int) -> JoinGroupRequest:
    check_group_id(req.group_id)
    check_string("member_id", req.member_id)
    check_string("protocol_type", req.protocol_type)
    check_int("session_timeout_ms", req.session_timeout_ms)
    check_int("rebalance_timeout_ms", req.rebalance_timeout_ms, -1, INT32_MAX)
    check_instance_id(req.group_instance_id)
    check_string("client_id", req.client_id)
    check_string("client_host", req.client_host)
    check_type("require_known_member_id", req.require_known_member_id, bool)
    check_string("reason", req.reason, nullable=True)
    if not isinstance(req.protocols, (list, tuple)):
        raise TypeError(f"protocols must be a list of (name, metadata) tuples, got {type(req.protocols).__name__}")
    protocols = []
    total = 0
    for p in req.protocols:
        if not isinstance(p, (tuple, list)) or len(p) != 2:
            raise TypeError(f"protocols entries must be (name, metadata) tuples, got {p!r}")
        name, metadata = p
        check_string("protocol name", name)
        check_type(f"metadata of protocol {name!r}", metadata, (bytes, bytearray, memoryview))
        total += len(metadata)
        protocols.append((name, bytes(metadata)))
    if total > max_metadata_bytes:
        raise ValueError(f"protocols metadata is {total} bytes, more than message.max.bytes ({max_metadata_bytes})")
    rebalance = req.rebalance_timeout_ms
    if rebalance == -1 and req.session_timeout_ms >= -1:
        # JoinGroup v0 semantics: the session timeout doubles as rebalance timeout. (A session timeout below
        # -1 is left to the coordinator's INVALID_SESSION_TIMEOUT, and keeps this check idempotent.)
        rebalance = req.session_timeout_ms
    return JoinGroupRequest(
        req.group_id, req.member_id, req.protocol_type, tuple(protocols), req.session_timeout_ms, rebalance,
        req.group_instance_id, req.client_id, req.client_host, req.require_known_member_id, req.reason,
    )


def validate_sync_group(req: SyncGroupRequest, max_metadata_bytes: int) -> SyncGroupRequest:
    check_group_id(req.group_id)
    check_int("generation_id", req.generation_id)
    check_string("member_id", req.member_id)
    check_instance_id(req.group_instance_id)
    check_string("protocol_type", req.protocol_type, nullable=True)
    check_string("protocol_name", req.protocol_name, nullable=True)
    if req.assignments is None:
        assignments: dict[str, bytes] = {}
    elif isinstance(req.assignments, dict):
        assignments = {}
        total = 0
        for member_id, assignment in req.assignments.items():
            check_string("assignments key (member id)", member_id)
            check_type(f"assignment of member {member_id!r}", assignment, (bytes, bytearray, memoryview))
            total += len(assignment)
            assignments[member_id] = bytes(assignment)
        if total > max_metadata_bytes:
            raise ValueError(f"assignments are {total} bytes, more than message.max.bytes ({max_metadata_bytes})")
    else:
        raise TypeError(f"assignments must be a dict of member id -> bytes, got {type(req.assignments).__name__}")
    return SyncGroupRequest(
        req.group_id, req.generation_id, req.member_id, assignments, req.group_instance_id,
        req.protocol_type, req.protocol_name,
    )


def validate_heartbeat(req: HeartbeatRequest) -> HeartbeatRequest:
    check_group_id(req.group_id)
    check_int("generation_id", req.generation_id)
    check_string("member_id", req.member_id)
    check_instance_id(req.group_instance_id)
    return req


def validate_leave_group(req: LeaveGroupRequest) -> LeaveGroupRequest:
    check_group_id(req.group_id)
    if not isinstance(req.members, (list, tuple)):
        raise TypeError(f"members must be a list of (member_id, group_instance_id), got {type(req.members).__name__}")
    members = []
    for m in req.members:
        if not isinstance(m, (tuple, list)) or len(m) != 2:
            raise TypeError(f"members entries must be (member_id, group_instance_id) tuples, got {m!r}")
        member_id, instance_id = m
        check_string("member_id", member_id)
        check_instance_id(instance_id)
        members.append((member_id, instance_id))
    if not members:
        raise ValueError("members must name at least one member")
    check_string("reason", req.reason, nullable=True)
    return LeaveGroupRequest(req.group_id, tuple(members), req.reason)


def validate_offset_commit(req: OffsetCommitRequest, max_metadata_bytes: int) -> OffsetCommitRequest:
    check_group_id(req.group_id)
    check_int("generation_id", req.generation_id)
    check_string("member_id", req.member_id)
    check_instance_id(req.group_instance_id)
    check_int("retention_time_ms", req.retention_time_ms, -1, INT64_MAX)
    if not isinstance(req.offsets, dict):
        raise TypeError(f"offsets must be a dict of (topic, partition) -> (offset, metadata[, leader_epoch]), "
                        f"got {type(req.offsets).__name__}")
    offsets = {}
    for tp, entry in req.offsets.items():
        topic, partition = check_topic_partition("offsets", tp)
        if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3):
            raise TypeError(f"offsets[{tp!r}] must be (offset, metadata) or (offset, metadata, leader_epoch), got {entry!r}")
        offset, metadata = entry[0], entry[1]
        leader_epoch = entry[2] if len(entry) == 3 else -1
        check_int(f"offset of {tp!r}", offset, -1, INT64_MAX)
        check_string(f"metadata of {tp!r}", metadata, nullable=True)
        if metadata is not None and len(metadata) > max_metadata_bytes:
            raise ValueError(f"metadata of {tp!r} is {len(metadata)} characters, more than message.max.bytes "
                             f"({max_metadata_bytes})")
        check_int(f"leader_epoch of {tp!r}", leader_epoch, -1, INT32_MAX)
        offsets[(topic, partition)] = (offset, metadata, leader_epoch)
    return OffsetCommitRequest(req.group_id, offsets, req.generation_id, req.member_id, req.group_instance_id,
                               req.retention_time_ms)


def validate_offset_fetch(req: OffsetFetchRequest) -> OffsetFetchRequest:
    check_group_id(req.group_id)
    check_type("require_stable", req.require_stable, bool)
    check_string("member_id", req.member_id, nullable=True)
    check_int("member_epoch", req.member_epoch)
    if req.partitions is None:
        return req
    if not isinstance(req.partitions, (list, tuple, set, frozenset)):
        raise TypeError(f"partitions must be a list of (topic, partition) or None, got {type(req.partitions).__name__}")
    parts = tuple(check_topic_partition("partitions", tp) for tp in req.partitions)
    return OffsetFetchRequest(req.group_id, parts, req.require_stable, req.member_id, req.member_epoch)


def validate_group_ids(name: str, group_ids: Any) -> list[str | None]:
    if isinstance(group_ids, (str, bytes)) or not isinstance(group_ids, (list, tuple, set, frozenset)):
        raise TypeError(f"{name} must be a list of group ids, got {type(group_ids).__name__}")
    for g in group_ids:
        check_group_id(g)
    return list(group_ids)


def validate_filter(name: str, values: Any) -> list[str]:
    if values is None:
        return []
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, set, frozenset)):
        raise TypeError(f"{name} must be a list of strings or None, got {type(values).__name__}")
    for v in values:
        check_string(f"{name} entry", v)
    return list(values)


def validate_offset_delete(req: OffsetDeleteRequest) -> OffsetDeleteRequest:
    check_group_id(req.group_id)
    partitions = req.partitions
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, (list, tuple, set, frozenset)):
        raise TypeError(f"partitions must be a list of (topic, partition), got {type(partitions).__name__}")
    return OffsetDeleteRequest(req.group_id, tuple(check_topic_partition("partitions", tp) for tp in partitions))


def validate_list_groups(req: ListGroupsRequest) -> ListGroupsRequest:
    return ListGroupsRequest(tuple(validate_filter("states_filter", req.states_filter)),
                             tuple(validate_filter("types_filter", req.types_filter)))


def validate_describe_groups(req: DescribeGroupsRequest) -> DescribeGroupsRequest:
    return DescribeGroupsRequest(tuple(validate_group_ids("group_ids", req.group_ids)))


def validate_delete_groups(req: DeleteGroupsRequest) -> DeleteGroupsRequest:
    return DeleteGroupsRequest(tuple(validate_group_ids("group_ids", req.group_ids)))
