"""The KIP-848 requests and responses: ConsumerGroupHeartbeat (v0 and v1, KIP-1082) and ConsumerGroupDescribe,
with their schema-level validation (what Kafka's request schemas could encode). The protocol's own checks,
which answer INVALID_REQUEST with a message, are the handler's (``shard_consumer``).

Assignments cross this boundary as ``dict[str, list[int]]`` (topic name -> sorted partitions).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from raygroups.coordinator.consumer_records import Assignment, to_assignment
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import check_int, check_string, check_type

MAX_TOPIC_NAME_CHARS = 249


@dataclass(frozen=True)
class ConsumerGroupHeartbeatRequest:
    group_id: str
    member_id: str = ""
    member_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    # What the member owns (None: not sent, as in an incremental heartbeat).
    topic_partitions: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class ConsumerGroupHeartbeatResponse:
    error: Errors
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    # topic -> sorted partitions; None when unchanged since the member's last response (Kafka's null).
    assignment: dict[str, list[int]] | None = None


@dataclass(frozen=True)
class ConsumerGroupDescribeRequest:
    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False


@dataclass(frozen=True)
class DescribedConsumerGroupMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: dict[str, list[int]]
    target_assignment: dict[str, list[int]]


@dataclass(frozen=True)
class DescribedConsumerGroup:
    group_id: str
    error: Errors
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: list[DescribedConsumerGroupMember] = dataclasses.field(default_factory=list)


def _check_str(name: str, value, nullable: bool = False, max_chars: int | None = None) -> None:
    """A Kafka STRING: at most 32 767 bytes in UTF-8 (``check_string``), and at most ``max_chars``
    characters when given (a topic name's 249)."""
    check_string(name, value, nullable=nullable)
    if max_chars is not None and value is not None and len(value) > max_chars:
        raise ValueError(f"{name} is longer than {max_chars} characters ({len(value)})")


def as_dict(assignment: Assignment) -> dict[str, list[int]]:
    return {t: list(ps) for t, ps in assignment}


def _check_partitions(name: str, value) -> Assignment:
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict of topic name -> list of partitions, got {type(value).__name__}")
    for topic, partitions in value.items():
        _check_str(f"{name} topic", topic, max_chars=MAX_TOPIC_NAME_CHARS)
        if not isinstance(partitions, (list, tuple, set, frozenset)):
            raise TypeError(f"{name}[{topic!r}] must be a list of partitions, got {type(partitions).__name__}")
        for p in partitions:
            check_int(f"{name}[{topic!r}] partition", p, 0, 2**31 - 1)
    return to_assignment(value)


def validate_consumer_group_heartbeat(req: ConsumerGroupHeartbeatRequest, message_max_bytes: int) -> ConsumerGroupHeartbeatRequest:
    """Types and ranges (``TypeError``/``ValueError`` naming the field); returns the normalized request."""
    check_type("request", req, ConsumerGroupHeartbeatRequest)
    _check_str("group_id", req.group_id)
    _check_str("member_id", req.member_id)
    check_int("member_epoch", req.member_epoch, -(2**31), 2**31 - 1)
    for name in ("instance_id", "rack_id", "subscribed_topic_regex", "server_assignor"):
        _check_str(name, getattr(req, name), nullable=True)
    check_int("rebalance_timeout_ms", req.rebalance_timeout_ms, -1, 2**31 - 1)
    _check_str("client_id", req.client_id)
    _check_str("client_host", req.client_host)
    names = req.subscribed_topic_names
    if names is not None:
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise TypeError(f"subscribed_topic_names must be a list of topic names, got {type(names).__name__}")
        for t in names:
            _check_str("subscribed_topic_names entry", t, max_chars=MAX_TOPIC_NAME_CHARS)
        names = tuple(sorted(set(names)))
    owned = req.topic_partitions
    if owned is not None and not (isinstance(owned, tuple) and all(isinstance(e, tuple) for e in owned)):
        owned = _check_partitions("topic_partitions", owned)
    if names == req.subscribed_topic_names and owned is req.topic_partitions:
        return req  # already normal (a steady member's heartbeat: no copy)
    return dataclasses.replace(req, subscribed_topic_names=names, topic_partitions=owned)


def validate_consumer_group_describe(req: ConsumerGroupDescribeRequest, message_max_bytes: int) -> ConsumerGroupDescribeRequest:
    check_type("request", req, ConsumerGroupDescribeRequest)
    ids = req.group_ids
    if isinstance(ids, str) or not isinstance(ids, (list, tuple)):
        raise TypeError(f"group_ids must be a list of group ids, got {type(ids).__name__}")
    for g in ids:
        _check_str("group_ids entry", g)
    return dataclasses.replace(req, group_ids=tuple(ids))
