"""One handler per Kafka API key, as Kafka's ``KafkaApis``: each reads a decoded request and returns the
answer as a dict (``wire.to_entity`` shapes it into the version asked for); the group logic is elsewhere.

The group APIs become the request objects of ``raygroups.coordinator.messages`` and go through
``GroupApi.send``, so the request registry validates them and routes them exactly as it does for the
Python client: the gateway is one more client of the shards, never a second implementation of a rule.
Version differences the broker owns live here, after Kafka's ``KafkaApis`` and request classes: JoinGroup
before v4 does not require a known member id (KIP-394), LeaveGroup before v3 names one member and puts its
error at the top level, OffsetFetch before v2 puts a group error on every partition.

``API_TABLE`` is the gateway's registry: which API keys it serves, the versions it advertises in
ApiVersions, and their handlers. An API key not in it is absent from ApiVersions and closes the
connection, as Kafka does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from raygroups.coordinator.consumer_messages import ConsumerGroupDescribeRequest
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from raygroups.coordinator.requests import REQUESTS
from raygroups.gateway.consumer_apis import described_group_body, heartbeat_body, heartbeat_request, topic_id
from raygroups.gateway.wire import Frame, ms

NO_AUTHORIZED_OPERATIONS = -(2**31)  # Kafka's "not requested" value for authorized operations


def _operations(*codes: int) -> int:
    """Kafka's authorized-operations bit field (``Utils.to32BitField`` of ``AclOperation`` codes)."""
    return sum(1 << code for code in codes)


# What a client may do here, answered when it asks (KIP-430), as a broker's authorizer would: groups are
# read, described and deleted; topics are read and described, never written or created; the cluster is
# described. AclOperation codes: READ 3, DELETE 6, DESCRIBE 8.
GROUP_OPERATIONS = _operations(3, 6, 8)
TOPIC_OPERATIONS = _operations(3, 8)
CLUSTER_OPERATIONS = _operations(8)


def _if_asked(request: Any, field: str, operations: int) -> int:
    return operations if getattr(request, field, False) else NO_AUTHORIZED_OPERATIONS
READ_ONLY = ("raygroups serves its source's topics read-only: produce to the system the source reads, "
             "and register topics with the deployment")


class CloseConnection(Exception):
    """A handler's answer that is no answer: close the connection (the message is the reason)."""


@dataclass(frozen=True, slots=True)
class Call:
    """A request in its context: the decoded frame and who sent it."""

    frame: Frame
    client_host: str

    @property
    def version(self) -> int:
        return self.frame.api_version

    @property
    def request(self) -> Any:
        return self.frame.request


Handler = Callable[[Any, Call], Awaitable[dict | None]]


@dataclass(frozen=True, slots=True)
class KafkaApi:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler


# --- the group APIs -----------------------------------------------------------------------------------
async def _group_call(broker: Any, request: Any) -> Any:
    """Send a coordinator request through the group API; a value the registry's validation refuses is
    answered INVALID_REQUEST by its entry, as a shard answers a malformed request."""
    client = broker.client
    here = getattr(client, "loop", None) is asyncio.get_running_loop()  # the listener runs on the client's loop
    try:
        future = client.send_here(request) if here else client.send(request)
    except (TypeError, ValueError):
        return REQUESTS.spec(request).error_response(request, Errors.INVALID_REQUEST)
    return await (future if here else asyncio.wrap_future(future))


async def join_group(broker: Any, call: Call) -> dict:
    r = call.request
    if not broker.serves_group(r.group_id):
        return {"throttle_time": 0, "error_code": Errors.NOT_COORDINATOR, "generation_id": -1, "member_id": "",
                "leader": "", "protocol_name": None, "members": ()}
    rebalance_timeout = getattr(r, "rebalance_timeout", None)
    response = await _group_call(broker, JoinGroupRequest(
        r.group_id, r.member_id, r.protocol_type, tuple((p.name, p.metadata) for p in r.protocols),
        ms(r.session_timeout), -1 if rebalance_timeout is None else ms(rebalance_timeout),
        getattr(r, "group_instance_id", None), call.frame.client_id or "", call.client_host,
        require_known_member_id=call.version >= 4, reason=getattr(r, "reason", None),
    ))
    return {
        "throttle_time": 0, "error_code": response.error, "generation_id": response.generation_id,
        "protocol_type": response.protocol_type, "protocol_name": response.protocol_name,
        "leader": response.leader, "skip_assignment": response.skip_assignment, "member_id": response.member_id,
        "members": tuple({"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                         for m in response.members),
    }


async def sync_group(broker: Any, call: Call) -> dict:
    r = call.request
    if not broker.serves_group(r.group_id):
        return {"throttle_time": 0, "error_code": Errors.NOT_COORDINATOR, "assignment": b""}
    response = await _group_call(broker, SyncGroupRequest(
        r.group_id, r.generation_id, r.member_id, {a.member_id: a.assignment for a in r.assignments},
        getattr(r, "group_instance_id", None), getattr(r, "protocol_type", None), getattr(r, "protocol_name", None),
    ))
    return {"throttle_time": 0, "error_code": response.error, "protocol_type": response.protocol_type,
            "protocol_name": response.protocol_name, "assignment": response.assignment}


async def heartbeat(broker: Any, call: Call) -> dict:
    r = call.request
    if not broker.serves_group(r.group_id):
        return {"throttle_time": 0, "error_code": Errors.NOT_COORDINATOR}
    response = await _group_call(broker, HeartbeatRequest(
        r.group_id, r.generation_id, r.member_id, getattr(r, "group_instance_id", None)))
    return {"throttle_time": 0, "error_code": response.error}


async def leave_group(broker: Any, call: Call) -> dict:
    r = call.request
    if call.version < 3:
        members = ((r.member_id, None),)
        reason = None
    else:
        members = tuple((m.member_id, m.group_instance_id) for m in r.members)
        reason = next((m.reason for m in r.members if getattr(m, "reason", None)), None)
    if not broker.serves_group(r.group_id):
        return {"throttle_time": 0, "error_code": Errors.NOT_COORDINATOR, "members": ()}
    response = await _group_call(broker, LeaveGroupRequest(r.group_id, members, reason))
    error = response.error
    if call.version < 3 and error is Errors.NONE and response.members:
        error = response.members[0].error  # Kafka's LeaveGroupResponse for v0-2: the one member's error on top
    return {"throttle_time": 0, "error_code": error,
            "members": tuple({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                              "error_code": m.error} for m in response.members)}


async def offset_commit(broker: Any, call: Call) -> dict:
    r = call.request
    offsets = {}
    for t in r.topics:
        for p in t.partitions:
            offsets[(t.name, p.partition_index)] = (
                p.committed_offset, p.committed_metadata, getattr(p, "committed_leader_epoch", -1))
    # No topic has a negative partition: Kafka's broker answers those UNKNOWN_TOPIC_OR_PARTITION before the
    # coordinator sees the request (KafkaApis.handleOffsetCommitRequest), and commits the others.
    errors = {tp: Errors.UNKNOWN_TOPIC_OR_PARTITION for tp in offsets if tp[1] < 0}
    valid = {tp: v for tp, v in offsets.items() if tp not in errors}
    if not broker.serves_group(r.group_id):
        errors.update(dict.fromkeys(valid, Errors.NOT_COORDINATOR))
    elif valid:
        retention = getattr(r, "retention_time", None)
        response = await _group_call(broker, OffsetCommitRequest(
            r.group_id, valid, r.generation_id_or_member_epoch, r.member_id,
            getattr(r, "group_instance_id", None), -1 if retention is None else ms(retention),
        ))
        errors.update(response.errors)
    errors = {tp: errors[tp] for tp in offsets}
    return {"throttle_time": 0, "topics": _by_topic(errors, lambda p, e: {"partition_index": p, "error_code": e})}


async def offset_fetch(broker: Any, call: Call) -> dict:
    r = call.request
    if call.version >= 8:
        groups = await asyncio.gather(*(
            _fetch_group(broker, g.group_id, g.topics, r.require_stable, getattr(g, "member_id", None),
                         getattr(g, "member_epoch", -1)) for g in r.groups))
        return {"throttle_time": 0, "groups": tuple(
            {"group_id": g.group_id, "topics": topics, "error_code": error}
            for g, (error, topics) in zip(r.groups, groups, strict=True))}
    error, topics = await _fetch_group(broker, r.group_id, r.topics, getattr(r, "require_stable", False))
    if call.version < 2 and error is not Errors.NONE:
        # OffsetFetch v0-1 has no group error: Kafka's OffsetFetchRequest.getErrorResponse puts it on every
        # partition asked for.
        topics = tuple({"name": t.name, "partitions": tuple(
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
             "error_code": error} for p in t.partition_indexes)} for t in r.topics)
    return {"throttle_time": 0, "topics": topics, "error_code": error}


async def _fetch_group(broker: Any, group_id: str, topics: Any, require_stable: bool, member_id: str | None = None,
                       member_epoch: int = -1) -> tuple[Errors, tuple]:
    partitions = None if topics is None else tuple((t.name, p) for t in topics for p in t.partition_indexes)
    if not broker.serves_group(group_id):
        error, offsets = Errors.NOT_COORDINATOR, {}
    else:
        # OffsetFetch v9 (KIP-848): a consumer group member gives its id and epoch.
        response = await _group_call(broker, OffsetFetchRequest(group_id, partitions, require_stable, member_id,
                                                                member_epoch))
        error, offsets = response.error, response.offsets
    if error is not Errors.NONE:
        return error, ()  # Kafka answers a group error with no topics (v2+; v0-1 see offset_fetch)
    return Errors.NONE, _by_topic(offsets, lambda p, o: {
        "partition_index": p, "committed_offset": o.offset, "committed_leader_epoch": o.leader_epoch,
        "metadata": o.metadata, "error_code": o.error})


async def offset_delete(broker: Any, call: Call) -> dict:
    r = call.request
    partitions = tuple((t.name, p.partition_index) for t in r.topics for p in t.partitions)
    if not broker.serves_group(r.group_id):
        return {"throttle_time": 0, "error_code": Errors.NOT_COORDINATOR, "topics": ()}
    response = await _group_call(broker, OffsetDeleteRequest(r.group_id, partitions))
    return {"throttle_time": 0, "error_code": response.error,
            "topics": _by_topic(response.errors, lambda p, e: {"partition_index": p, "error_code": e})}


async def list_groups(broker: Any, call: Call) -> dict:
    r = call.request
    response = await _group_call(broker, ListGroupsRequest(
        tuple(getattr(r, "states_filter", ())), tuple(getattr(r, "types_filter", ()))))
    # A broker lists the groups it coordinates; admin clients ask every broker and merge the answers.
    return {"throttle_time": 0, "error_code": response.error, "groups": tuple(
        {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.group_state,
         "group_type": g.group_type} for g in response.groups if broker.serves_group(g.group_id))}


async def describe_groups(broker: Any, call: Call) -> dict:
    r = call.request
    mine = [g for g in r.groups if broker.serves_group(g)]
    operations = _if_asked(r, "include_authorized_operations", GROUP_OPERATIONS)
    described = {d.group_id: d for d in (await _group_call(broker, DescribeGroupsRequest(tuple(mine))) if mine else [])}
    groups = []
    for group_id in r.groups:
        d = described.get(group_id)
        if d is None:
            groups.append({"error_code": Errors.NOT_COORDINATOR, "group_id": group_id, "group_state": "",
                           "protocol_type": "", "protocol_data": "", "members": (),
                           "authorized_operations": NO_AUTHORIZED_OPERATIONS})
            continue
        groups.append({
            "error_code": d.error, "group_id": d.group_id, "group_state": d.group_state,
            "protocol_type": d.protocol_type, "protocol_data": d.protocol_data,
            "authorized_operations": operations,
            "members": tuple({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                              "client_id": m.client_id, "client_host": m.client_host,
                              "member_metadata": m.metadata, "member_assignment": m.assignment}
                             for m in d.members),
        })
    return {"throttle_time": 0, "groups": tuple(groups)}


async def delete_groups(broker: Any, call: Call) -> dict:
    names = tuple(call.request.groups_names)
    mine = tuple(g for g in names if broker.serves_group(g))
    results = await _group_call(broker, DeleteGroupsRequest(mine)) if mine else {}
    return {"throttle_time": 0, "results": tuple(
        {"group_id": g, "error_code": results.get(g, Errors.NOT_COORDINATOR)} for g in names)}


async def consumer_group_heartbeat(broker: Any, call: Call) -> dict:
    r = call.request
    if not broker.serves_group(r.group_id):
        return heartbeat_body(Errors.NOT_COORDINATOR)
    if call.version >= 1 and not r.member_id.strip():
        # KIP-1082: from v1 the client chooses its member id (Kafka's ConsumerGroupHeartbeatRequest validation).
        return {**heartbeat_body(Errors.INVALID_REQUEST), "error_message": "MemberId can't be empty."}
    topics = await broker.topics() if r.topic_partitions is not None else {}
    response = await _group_call(broker, heartbeat_request(r, topics, call.frame.client_id or "", call.client_host))
    return heartbeat_body(response.error, response)


async def consumer_group_describe(broker: Any, call: Call) -> dict:
    r = call.request
    mine = tuple(g for g in r.group_ids if broker.serves_group(g))
    described = {d.group_id: d for d in (await _group_call(broker, ConsumerGroupDescribeRequest(mine)) if mine else [])}
    operations = _if_asked(r, "include_authorized_operations", GROUP_OPERATIONS)
    return {"throttle_time": 0, "groups": tuple(
        described_group_body(g, described.get(g), operations, NO_AUTHORIZED_OPERATIONS) for g in r.group_ids)}


def _by_topic(per_partition: dict, entry: Callable[[int, Any], dict], key: str = "name") -> tuple:
    topics: dict[str, list] = {}
    for (topic, partition), value in per_partition.items():
        topics.setdefault(topic, []).append(entry(partition, value))
    return tuple({key: t, "partitions": tuple(ps)} for t, ps in topics.items())


# --- cluster metadata ---------------------------------------------------------------------------------
async def find_coordinator(broker: Any, call: Call) -> dict:
    r = call.request
    if call.version >= 4:
        keys, key_type = tuple(r.coordinator_keys), r.key_type
    else:
        keys, key_type = (r.key,), getattr(r, "key_type", 0)
    coordinators = []
    for key in keys:
        if key_type != 0:
            # Transactions (key type 1) and share groups (2) are not coordinated here.
            found = {"error_code": Errors.COORDINATOR_NOT_AVAILABLE,
                     "error_message": "raygroups coordinates consumer groups only (key type 0)"}
        else:
            found = await broker.find_coordinator(key)
        coordinators.append({"key": key, "node_id": -1, "host": "", "port": -1, "error_message": None, **found})
    if call.version >= 4:
        return {"throttle_time": 0, "coordinators": tuple(coordinators)}
    return {"throttle_time": 0, **coordinators[0]}


async def metadata(broker: Any, call: Call) -> dict:
    r = call.request
    topics = await broker.topics()
    wanted = None if r.topics is None or (call.version == 0 and not r.topics) else list(r.topics)
    names = sorted(topics) if wanted is None else [t.name for t in wanted]
    brokers = broker.brokers()
    topic_operations = _if_asked(r, "include_topic_authorized_operations", TOPIC_OPERATIONS)
    entries = []
    by_id = None
    for i, name in enumerate(names):
        if name is None:  # v10+: a topic asked for by id (KIP-516), as KIP-848 consumers do
            by_id = by_id if by_id is not None else {topic_id(t): t for t in topics}
            asked = wanted[i].topic_id
            name = by_id.get(asked)
            if name is None:
                entries.append({"error_code": Errors.UNKNOWN_TOPIC_ID, "name": None, "topic_id": asked,
                                "is_internal": False, "partitions": (),
                                "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS})
                continue
        n = topics.get(name)
        if n is None:
            entries.append({"error_code": Errors.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "topic_id": 0,  # none
                            "is_internal": False, "partitions": (),
                            "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS})
            continue
        partitions = []
        for p in range(n):
            leader = broker.leader_of(name, p)
            partitions.append({"error_code": Errors.NONE, "partition_index": p, "leader_id": leader,
                               "leader_epoch": 0, "replica_nodes": (leader,), "isr_nodes": (leader,),
                               "offline_replicas": ()})
        entries.append({"error_code": Errors.NONE, "name": name, "topic_id": topic_id(name), "is_internal": False,
                        "partitions": tuple(partitions), "topic_authorized_operations": topic_operations})
    return {"throttle_time": 0, "brokers": tuple(
        {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": None} for b in brokers),
        "cluster_id": broker.cluster_id, "controller_id": broker.controller_id(), "topics": tuple(entries),
        "cluster_authorized_operations": _if_asked(r, "include_cluster_authorized_operations", CLUSTER_OPERATIONS)}


BROKER_ENDPOINTS, CONTROLLER_ENDPOINTS = 1, 2  # DescribeCluster's endpoint types (KIP-919)


async def describe_cluster(broker: Any, call: Call) -> dict:
    # AuthHelper.computeDescribeClusterResponse: a broker lists brokers; asked for controllers, it answers
    # MISMATCHED_ENDPOINT_TYPE, asked for anything else UNSUPPORTED_ENDPOINT_TYPE.
    endpoint_type = getattr(call.request, "endpoint_type", BROKER_ENDPOINTS)
    if endpoint_type != BROKER_ENDPOINTS:
        error = (Errors.MISMATCHED_ENDPOINT_TYPE if endpoint_type == CONTROLLER_ENDPOINTS
                 else Errors.UNSUPPORTED_ENDPOINT_TYPE)
        return {"throttle_time": 0, "error_code": error, "error_message": f"this is a broker, not endpoint type "
                f"{endpoint_type}", "endpoint_type": BROKER_ENDPOINTS, "cluster_id": broker.cluster_id,
                "controller_id": -1, "brokers": (), "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS}
    return {"throttle_time": 0, "error_code": Errors.NONE, "error_message": None,
            "endpoint_type": BROKER_ENDPOINTS, "cluster_id": broker.cluster_id,
            "controller_id": broker.controller_id(),
            "brokers": tuple({"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": None}
                             for b in broker.brokers()),
            "cluster_authorized_operations": _if_asked(call.request, "include_cluster_authorized_operations",
                                                       CLUSTER_OPERATIONS)}


async def api_versions(broker: Any, call: Call) -> dict:
    return api_versions_body(Errors.NONE)


def api_versions_body(error: Errors) -> dict:
    return {"error_code": error, "throttle_time": 0, "supported_features": (), "finalized_features_epoch": -1,
            "finalized_features": (), "zk_migration_ready": False,
            "api_keys": tuple({"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
                              for a in API_TABLE.values())}


# --- topic data: served read-only from the source --------------------------------------------------
async def list_offsets(broker: Any, call: Call) -> dict:
    wanted = [(t.name, p.partition_index, p.timestamp) for t in call.request.topics for p in t.partitions]
    answers = await broker.list_offsets(wanted)
    return {"throttle_time": 0, "topics": _by_topic(
        {(t, p): a for (t, p, _), a in zip(wanted, answers, strict=True)},
        lambda p, a: {"partition_index": p, "leader_epoch": 0, **a})}


async def fetch(broker: Any, call: Call) -> dict:
    r = call.request
    wanted = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes) for t in r.topics for p in t.partitions]
    answers = await broker.fetch(wanted, ms(r.max_wait), r.min_bytes, getattr(r, "max_bytes", 2**31 - 1))
    return {"throttle_time": 0, "error_code": Errors.NONE, "session_id": 0, "responses": _by_topic(
        {(t, p): a for (t, p, _, _), a in zip(wanted, answers, strict=True)},
        lambda p, a: {"partition_index": p, "last_stable_offset": a["high_watermark"], "aborted_transactions": None,
                      "preferred_read_replica": -1, **a}, key="topic")}


async def produce(broker: Any, call: Call) -> dict | None:
    r = call.request
    if r.acks == 0:
        # A producer with acks=0 reads no answer: Kafka closes its connection on an error instead, so that
        # it notices (KafkaApis.handleProduceRequest).
        raise CloseConnection("produce refused (acks=0)")
    return {"throttle_time": 0, "responses": tuple(
        {"name": t.name, "partition_responses": tuple(
            {"index": p.index, "error_code": Errors.TOPIC_AUTHORIZATION_FAILED, "base_offset": -1,
             "log_append_time": None, "log_start_offset": -1, "record_errors": (), "error_message": READ_ONLY}
            for p in t.partition_data)}
        for t in r.topic_data)}


async def create_topics(broker: Any, call: Call) -> dict:
    return {"throttle_time": 0, "topics": tuple(
        {"name": t.name, "topic_id": 0, "error_code": Errors.TOPIC_AUTHORIZATION_FAILED, "error_message": READ_ONLY,
         "topic_config_error_code": 0, "num_partitions": -1, "replication_factor": -1, "configs": None}
        for t in call.request.topics)}


# Versions: what current clients negotiate (see docs/kafka-clients.md). Fetch stops at v12 and Metadata at
# v12: from Fetch v13 clients address topic data by id (KIP-516); the ids Metadata gives (``topic_id``) are
# for the KIP-848 APIs, which address topics by id only.
API_TABLE: dict[int, KafkaApi] = {api.key: api for api in (
    KafkaApi(0, "Produce", 3, 9, produce),
    KafkaApi(1, "Fetch", 4, 12, fetch),
    KafkaApi(2, "ListOffsets", 1, 8, list_offsets),
    KafkaApi(3, "Metadata", 0, 12, metadata),
    KafkaApi(8, "OffsetCommit", 2, 9, offset_commit),
    KafkaApi(9, "OffsetFetch", 1, 9, offset_fetch),
    KafkaApi(10, "FindCoordinator", 0, 4, find_coordinator),
    KafkaApi(11, "JoinGroup", 0, 9, join_group),
    KafkaApi(12, "Heartbeat", 0, 4, heartbeat),
    KafkaApi(13, "LeaveGroup", 0, 5, leave_group),
    KafkaApi(14, "SyncGroup", 0, 5, sync_group),
    KafkaApi(15, "DescribeGroups", 0, 5, describe_groups),
    KafkaApi(16, "ListGroups", 0, 5, list_groups),
    KafkaApi(18, "ApiVersions", 0, 4, api_versions),
    KafkaApi(19, "CreateTopics", 2, 7, create_topics),
    KafkaApi(42, "DeleteGroups", 0, 2, delete_groups),
    KafkaApi(47, "OffsetDelete", 0, 0, offset_delete),
    KafkaApi(60, "DescribeCluster", 0, 1, describe_cluster),
    KafkaApi(68, "ConsumerGroupHeartbeat", 0, 1, consumer_group_heartbeat),
    KafkaApi(69, "ConsumerGroupDescribe", 0, 1, consumer_group_describe),
)}
API_VERSIONS_KEY = 18
