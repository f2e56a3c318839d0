"""How the KIP-848 APIs look on the wire, ConsumerGroupHeartbeat (v0-1) and ConsumerGroupDescribe (v0-1)
(their handlers are ``apis``'), and the topic ids they address topics by (KIP-516).

A topic here has a name and no id of its own, so every listener derives the same id from the name
(a version-5 UUID in a namespace of raygroups'): Metadata gives it to clients, and these handlers turn the
ids a member sends back into names (an id no topic has is dropped, as Kafka's coordinator ignores owned
partitions of topics it does not know) and the assignments they answer into ids.
"""

from __future__ import annotations

import uuid
from typing import Any

from raygroups.coordinator.consumer_messages import ConsumerGroupHeartbeatRequest
from raygroups.coordinator.errors import Errors
from raygroups.gateway.wire import ms

TOPIC_ID_NAMESPACE = uuid.UUID("6d3c5b1e-8a4f-5e2b-9c7d-2f1a0b4c8e6d")


def topic_id(name: str) -> uuid.UUID:
    """The id every listener gives topic ``name``."""
    return uuid.uuid5(TOPIC_ID_NAMESPACE, name)


def _names_by_id(topics: dict[str, int]) -> dict[uuid.UUID, str]:
    return {topic_id(name): name for name in topics}


def _to_ids(assignment: dict[str, list[int]] | None) -> dict | None:
    if assignment is None:
        return None
    return {"topic_partitions": tuple({"topic_id": topic_id(t), "partitions": tuple(ps)}
                                      for t, ps in sorted(assignment.items()))}


def heartbeat_request(r: Any, topics: dict[str, int], client_id: str, client_host: str) -> ConsumerGroupHeartbeatRequest:
    """The coordinator request of a decoded ConsumerGroupHeartbeat (owned partitions by topic name)."""
    owned = None
    if r.topic_partitions is not None:
        names = _names_by_id(topics)
        owned = {names[t.topic_id]: list(t.partitions) for t in r.topic_partitions if t.topic_id in names}
    rebalance_timeout = r.rebalance_timeout
    return ConsumerGroupHeartbeatRequest(
        r.group_id, r.member_id, r.member_epoch, r.instance_id, r.rack_id,
        -1 if rebalance_timeout is None else ms(rebalance_timeout),
        None if r.subscribed_topic_names is None else tuple(r.subscribed_topic_names),
        getattr(r, "subscribed_topic_regex", None), r.server_assignor, owned, client_id, client_host)


def heartbeat_body(error: Errors, response: Any = None) -> dict:
    """A ConsumerGroupHeartbeat answer (topics by id); ``error`` alone for a broker's own refusal."""
    if response is None:
        return {"throttle_time": 0, "error_code": error, "error_message": None, "member_id": None,
                "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}
    return {"throttle_time": 0, "error_code": response.error, "error_message": response.error_message,
            "member_id": response.member_id, "member_epoch": response.member_epoch,
            "heartbeat_interval": response.heartbeat_interval_ms, "assignment": _to_ids(response.assignment)}


def _described_assignment(a: dict[str, list[int]]) -> dict:
    return {"topic_partitions": tuple({"topic_id": topic_id(t), "topic_name": t, "partitions": tuple(ps)}
                                      for t, ps in sorted(a.items()))}


def described_group_body(group_id: str, d: Any, operations: int, not_requested: int) -> dict:
    """One group of a ConsumerGroupDescribe answer (``d`` None: this listener does not coordinate it)."""
    if d is None:
        return {"error_code": Errors.NOT_COORDINATOR, "error_message": None, "group_id": group_id,
                "group_state": "", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
                "members": (), "authorized_operations": not_requested}
    return {
        "error_code": d.error, "error_message": d.error_message, "group_id": d.group_id,
        "group_state": d.group_state, "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch,
        "assignor_name": d.assignor_name, "authorized_operations": operations,
        "members": tuple({
            "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
            "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": tuple(m.subscribed_topic_names),
            "subscribed_topic_regex": m.subscribed_topic_regex, "assignment": _described_assignment(m.assignment),
            "target_assignment": _described_assignment(m.target_assignment), "member_type": 1,  # consumer protocol
        } for m in d.members)}
