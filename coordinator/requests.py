"""The request registry: every request type of the group API, known in one place (Kafka's ``ApiKeys`` with
its generated message classes).

One ``ApiSpec`` per request type holds its name, request class, validation, the handler that serves it,
its error responses, how it is routed (one group's shard, fanned out per group, or every partition),
whether the empty group id is allowed, the answer while its partition loads, the client's timeout rule and
the client lane it may coalesce in. Every dispatcher reads ``REQUESTS``: ``coordinator.api.dispatch`` (the
runtime), the shard actor's API, the Ray client and ``GroupApi``. A new API is one ``register`` call plus
its handler.

Guarantees: a request type is registered at most once, and a spec is complete for its routing (a request
served on its group's shard has a shard handler, the others a runtime-level one). Not covered: the wire
encoding of a Kafka gateway (its versions and field tags would sit beside ``name``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from raygroups.coordinator.consumer_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
    validate_consumer_group_describe,
    validate_consumer_group_heartbeat,
)
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import (
    Deferred,
    DeleteGroupsRequest,
    DescribedGroup,
    DescribeGroupsRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    validate_delete_groups,
    validate_describe_groups,
    validate_heartbeat,
    validate_join_group,
    validate_leave_group,
    validate_list_groups,
    validate_offset_commit,
    validate_offset_delete,
    validate_offset_fetch,
    validate_sync_group,
)
from raygroups.coordinator.result import Result
from raygroups.coordinator.runtime import CoordinatorRuntime, PartitionState
from raygroups.coordinator.shard import GroupCoordinatorShard

Sink = Callable[[Any], None]


class Routing(enum.StrEnum):
    GROUP = "group"          # served by the shard that owns the request's ``group_id``
    PER_GROUP = "per-group"  # ``group_ids`` fanned out to their shards, the answers merged
    ALL = "all"              # asked of every partition, the answers merged


@dataclass(frozen=True)
class LaneKind:
    """How the client may coalesce requests of a kind bound for one shard (``raygroups`` client docstring):
    requests whose ``(partition, name, key(request))`` match share a lane; ``one_in_flight`` lanes send one
    call at a time; ``streamed`` lanes travel in a streaming call that answers each request when ready."""

    name: str
    one_in_flight: bool
    key: Callable[[Any], Any] = lambda request: None
    streamed: bool = False

    def lane(self, request: Any, partition: int) -> tuple:
        return (partition, self.name, self.key(request), self.one_in_flight)


# Heartbeat and OffsetFetch never park: one call in flight, what arrives meanwhile goes in the next call.
READ_LANE = LaneKind("read", one_in_flight=True)
# A lane of its own, so that a heartbeat never waits for a commit's append in the same call.
COMMIT_LANE = LaneKind("commit", one_in_flight=True)
# JoinGroups of one group, SyncGroups of one group and generation complete together: no limit in flight.
JOIN_LANE = LaneKind("join", one_in_flight=False, key=lambda r: r.group_id, streamed=True)
SYNC_LANE = LaneKind("sync", one_in_flight=False, key=lambda r: (r.group_id, r.generation_id))


def _request_timeout(request: Any, request_timeout_ms: int) -> int:
    return request_timeout_ms


@dataclass(frozen=True)
class ApiSpec:
    """One request type. ``validate(request, message_max_bytes)`` returns the normalized request or raises
    ``TypeError``/``ValueError`` naming the field; ``error_response(request, error)`` is its answer when it
    fails as a whole. GROUP routing: ``handle(shard, request, respond) -> Result`` (JoinGroup/SyncGroup may
    answer later through ``respond``). PER_GROUP/ALL: ``serve(runtime, request, sink)`` answers through
    ``sink``, and the client sends a part to each shard and ``merge(request, parts)``s their answers."""

    name: str
    request: type
    validate: Callable[[Any, int], Any]
    error_response: Callable[[Any, Errors], Any]
    routing: Routing = Routing.GROUP
    handle: Callable[[GroupCoordinatorShard, Any, Deferred], Result] | None = None
    serve: Callable[[CoordinatorRuntime, Any, Sink], None] | None = None
    merge: Callable[[Any, list], Any] | None = None
    # What a request whose records could not be appended gets (None: ``error_response``).
    append_failed_response: Callable[[Any, Errors], Any] | None = None
    allow_empty_group_id: bool = False
    # The answer while the group's partition loads (None: COORDINATOR_LOAD_IN_PROGRESS).
    while_loading: Errors | None = None
    # The broker's check before the coordinator (Kafka's KafkaApis): ``(request, topics) -> (the request
    # for the known part or None, finish(response of that part or None) -> the whole answer)``.
    check_topics: Callable[[Any, Mapping[str, int]], tuple[Any | None, Callable[[Any], Any]]] | None = None
    # The client's deadline for one request, retries included: ``(request, request.timeout.ms) -> ms``.
    client_timeout_ms: Callable[[Any, int], int] = _request_timeout
    lane: LaneKind | None = None

    def __post_init__(self) -> None:
        if self.routing is Routing.GROUP:
            if self.handle is None or self.serve is not None:
                raise ValueError(f"{self.name}: a request served on its group's shard has a handle, no serve")
            if self.merge is not None:
                raise ValueError(f"{self.name}: a request sent to one shard has nothing to merge")
        elif self.serve is None or self.merge is None or self.handle is not None or self.lane is not None:
            raise ValueError(f"{self.name}: a fanned-out request has serve and merge, no shard handle and no lane")
        if self.routing is Routing.PER_GROUP and "group_ids" not in {f.name for f in dataclasses.fields(self.request)}:
            raise ValueError(f"{self.name}: a request fanned out per group has a group_ids field")

    def failed_append_response(self, request: Any, error: Errors) -> Any:
        return (self.append_failed_response or self.error_response)(request, error)

    def lane_of(self, request: Any, partition: int) -> tuple | None:
        return None if self.lane is None else self.lane.lane(request, partition)

    @property
    def may_park(self) -> bool:
        """Whether the shard may hold the answer back until other requests arrive (JoinGroup, SyncGroup):
        exactly the requests whose lanes let more than one call fly (see the lanes above)."""
        return self.lane is not None and not self.lane.one_in_flight

    def part_for(self, request: Any, group_ids: list) -> Any:
        """PER_GROUP: the part of ``request`` for some of its groups (those of one shard)."""
        return dataclasses.replace(request, group_ids=tuple(group_ids))


class Registry:
    """Request types by class: ``spec(request)`` is the one lookup every dispatcher makes."""

    def __init__(self, specs: tuple[ApiSpec, ...] = ()) -> None:
        self._by_type: dict[type, ApiSpec] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: ApiSpec) -> ApiSpec:
        if spec.request in self._by_type:
            raise ValueError(f"{spec.request.__name__} is already registered (as {self._by_type[spec.request].name})")
        if any(s.name == spec.name for s in self._by_type.values()):
            raise ValueError(f"an API named {spec.name} is already registered")
        self._by_type[spec.request] = spec
        return spec

    def spec(self, request: Any) -> ApiSpec:
        """The spec of ``request``'s exact class; ``TypeError`` for anything else."""
        spec = self._by_type.get(type(request))
        if spec is None:
            raise TypeError(f"not a coordinator request: {type(request).__name__}")
        return spec

    def __iter__(self) -> Iterator[ApiSpec]:
        return iter(self._by_type.values())

    def __len__(self) -> int:
        return len(self._by_type)

    def __contains__(self, request_type: object) -> bool:
        return request_type in self._by_type


# ----------------------------------------------------------------------------------------------
# Served on the group's shard
# ----------------------------------------------------------------------------------------------
def _join_group_error(request: JoinGroupRequest, error: Errors) -> JoinGroupResponse:
    # Kafka's service echoes the member id for its own checks (invalid group id, not active) but not for
    # runtime errors (loading, not the coordinator), which come back with member id "".
    runtime_error = error in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS)
    return JoinGroupResponse(error, member_id="" if runtime_error else request.member_id)


def _join_group_timeout(request: JoinGroupRequest, request_timeout_ms: int) -> int:
    # Kafka's client: a JoinGroup may park for the whole rebalance (AbstractCoordinator.sendJoinGroupRequest).
    return max(request_timeout_ms, request.rebalance_timeout_ms + 5_000)


def _commit_known_topics(request: OffsetCommitRequest, topics: Mapping[str, int]):
    # As Kafka's broker does before the coordinator: unknown topics/partitions fail per partition.
    unknown = {tp: Errors.UNKNOWN_TOPIC_OR_PARTITION for tp in request.offsets if tp[1] >= topics.get(tp[0], 0)}
    if not unknown:
        return request, lambda response: response
    known = {tp: v for tp, v in request.offsets.items() if tp not in unknown}

    def finish(response: OffsetCommitResponse | None) -> OffsetCommitResponse:
        errors = dict(unknown if response is None else {**response.errors, **unknown})
        return OffsetCommitResponse({tp: errors[tp] for tp in request.offsets})

    return (dataclasses.replace(request, offsets=known) if known else None), finish


JOIN_GROUP = ApiSpec(
    "JoinGroup", JoinGroupRequest, validate_join_group, _join_group_error,
    handle=lambda shard, request, respond: shard.join_group(request, respond),
    append_failed_response=lambda request, error: JoinGroupResponse(error),
    client_timeout_ms=_join_group_timeout, lane=JOIN_LANE,
)
SYNC_GROUP = ApiSpec(
    "SyncGroup", SyncGroupRequest, validate_sync_group, lambda request, error: SyncGroupResponse(error),
    handle=lambda shard, request, respond: shard.sync_group(request, respond),
    # Old clients do not expect COORDINATOR_LOAD_IN_PROGRESS from SyncGroup (GroupCoordinator.handleSyncGroup).
    while_loading=Errors.REBALANCE_IN_PROGRESS, lane=SYNC_LANE,
)
HEARTBEAT = ApiSpec(
    "Heartbeat", HeartbeatRequest, lambda request, _max: validate_heartbeat(request),
    lambda request, error: HeartbeatResponse(error),
    handle=lambda shard, request, respond: Result(response=shard.heartbeat(request)),
    # A heartbeat to a loading partition is answered blindly (GroupCoordinator.handleHeartbeat).
    while_loading=Errors.NONE, lane=READ_LANE,
)
LEAVE_GROUP = ApiSpec(
    "LeaveGroup", LeaveGroupRequest, lambda request, _max: validate_leave_group(request),
    lambda request, error: LeaveGroupResponse(error),
    handle=lambda shard, request, respond: shard.leave_group(request),
)
OFFSET_COMMIT = ApiSpec(
    "OffsetCommit", OffsetCommitRequest, validate_offset_commit,
    lambda request, error: OffsetCommitResponse({tp: error for tp in request.offsets}),
    handle=lambda shard, request, respond: shard.commit_offsets(request),
    allow_empty_group_id=True, check_topics=_commit_known_topics, lane=COMMIT_LANE,
)
OFFSET_FETCH = ApiSpec(
    "OffsetFetch", OffsetFetchRequest, lambda request, _max: validate_offset_fetch(request),
    lambda request, error: OffsetFetchResponse(error),
    handle=lambda shard, request, respond: Result(response=shard.fetch_offsets(request)),
    allow_empty_group_id=True, lane=READ_LANE,
)
OFFSET_DELETE = ApiSpec(
    "OffsetDelete", OffsetDeleteRequest, lambda request, _max: validate_offset_delete(request),
    lambda request, error: OffsetDeleteResponse(error),
    handle=lambda shard, request, respond: shard.delete_offsets(request.group_id, list(request.partitions)),
)

CONSUMER_GROUP_HEARTBEAT = ApiSpec(
    "ConsumerGroupHeartbeat", ConsumerGroupHeartbeatRequest, validate_consumer_group_heartbeat,
    lambda request, error: ConsumerGroupHeartbeatResponse(error),
    handle=lambda shard, request, respond: shard.consumer_group_heartbeat(request),
    # Heartbeats of many members coalesce, as classic ones do; one call in flight per lane.
    lane=LaneKind("consumer-heartbeat", one_in_flight=True),
)


# ----------------------------------------------------------------------------------------------
# Served by the runtime over its partitions (the admin APIs)
# ----------------------------------------------------------------------------------------------
def _list_groups(runtime: CoordinatorRuntime, request: ListGroupsRequest, sink: Sink) -> None:
    if not runtime.active:
        sink(ListGroupsResponse(Errors.COORDINATOR_NOT_AVAILABLE))
        return
    groups = []
    for ctx in runtime.contexts:
        if ctx.state is PartitionState.LOADING:
            # Kafka's new coordinator (GroupCoordinatorService.listGroups): a loading partition fails the
            # whole listing.
            sink(ListGroupsResponse(Errors.COORDINATOR_LOAD_IN_PROGRESS))
            return
        if ctx.state is PartitionState.ACTIVE:
            groups.extend(ctx.shard.list_groups(list(request.states_filter), list(request.types_filter)))
    sink(ListGroupsResponse(Errors.NONE, groups))


def _merge_listings(request: ListGroupsRequest, parts: list[ListGroupsResponse]) -> ListGroupsResponse:
    # As Kafka's admin client: ask every coordinator, merge what they own.
    error = next((r.error for r in parts if r.error is not Errors.NONE), Errors.NONE)
    return ListGroupsResponse(error, sorted((g for r in parts for g in r.groups), key=lambda g: g.group_id))


def _describe_groups(runtime: CoordinatorRuntime, request: DescribeGroupsRequest, sink: Sink) -> None:
    out = []
    for group_id in request.group_ids:
        error, ctx = runtime.precheck(group_id, allow_empty=True)
        if error is not Errors.NONE:
            out.append(DescribedGroup(error, group_id, "", "", "", []))
        else:
            out.append(ctx.shard.describe_group(group_id))
    sink(out)


def _merge_descriptions(request: DescribeGroupsRequest, parts: list[list[DescribedGroup]]) -> list[DescribedGroup]:
    described = {g.group_id: g for part in parts for g in part}
    return [described[g] for g in request.group_ids]


def _delete_groups(runtime: CoordinatorRuntime, request: DeleteGroupsRequest, sink: Sink) -> None:
    result: dict[str | None, Errors] = {}
    by_partition: dict[int, list[str]] = {}
    for group_id in request.group_ids:
        error, ctx = runtime.precheck(group_id, allow_empty=True)
        if error is not Errors.NONE:
            result[group_id] = error
        else:
            by_partition.setdefault(ctx.partition, []).append(group_id)
    remaining = [len(by_partition)]

    def collect(part: dict) -> None:
        result.update(part)
        remaining[0] -= 1
        if remaining[0] == 0:
            sink(dict(result))

    if not by_partition:
        sink(result)
        return
    for partition, group_ids in by_partition.items():
        ctx = runtime.contexts[partition]
        respond = runtime.new_response(collect)
        runtime.execute(
            ctx, lambda c=ctx, g=group_ids: c.shard.delete_groups(g), respond,
            lambda e, g=group_ids: {gid: e for gid in g},
        )


def _describe_consumer_groups(runtime: CoordinatorRuntime, request: ConsumerGroupDescribeRequest, sink: Sink) -> None:
    out = []
    for group_id in request.group_ids:
        error, ctx = runtime.precheck(group_id, allow_empty=True)
        out.append(DescribedConsumerGroup(group_id, error) if error is not Errors.NONE
                   else ctx.shard.consumer_group_describe(dataclasses.replace(request, group_ids=(group_id,)))[0])
    sink(out)


def _merge_consumer_descriptions(request: ConsumerGroupDescribeRequest, parts: list) -> list:
    described = {g.group_id: g for part in parts for g in part}
    return [described[g] for g in request.group_ids]


def _merge_dicts(request: Any, parts: list[dict]) -> dict:
    merged: dict = {}
    for part in parts:
        merged.update(part)
    return merged


LIST_GROUPS = ApiSpec(
    "ListGroups", ListGroupsRequest, lambda request, _max: validate_list_groups(request),
    lambda request, error: ListGroupsResponse(error),
    routing=Routing.ALL, serve=_list_groups, merge=_merge_listings,
)
DESCRIBE_GROUPS = ApiSpec(
    "DescribeGroups", DescribeGroupsRequest, lambda request, _max: validate_describe_groups(request),
    lambda request, error: [DescribedGroup(error, g, "", "", "", []) for g in request.group_ids],
    routing=Routing.PER_GROUP, serve=_describe_groups, merge=_merge_descriptions,
)
DELETE_GROUPS = ApiSpec(
    "DeleteGroups", DeleteGroupsRequest, lambda request, _max: validate_delete_groups(request),
    lambda request, error: {g: error for g in request.group_ids},
    routing=Routing.PER_GROUP, serve=_delete_groups, merge=_merge_dicts,
)
CONSUMER_GROUP_DESCRIBE = ApiSpec(
    "ConsumerGroupDescribe", ConsumerGroupDescribeRequest, validate_consumer_group_describe,
    lambda request, error: [DescribedConsumerGroup(g, error) for g in request.group_ids],
    routing=Routing.PER_GROUP, serve=_describe_consumer_groups, merge=_merge_consumer_descriptions,
)

REQUESTS = Registry((JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE,
                     LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE))
