"""The request boundary of a coordinator: pre-checks, dispatch to the shard, error responses.

``dispatch(runtime, request, sink)`` is the one place where a validated request meets the partition
lifecycle (Kafka's ``GroupCoordinator.validateGroupStatus``: invalid group id → not active → loading →
not owned, with the exceptions ``handleHeartbeat`` and ``handleSyncGroup`` make while loading) and where
whole-request failures become codes. The in-process coordinator and the shard actor both call it;
``sink`` receives the response once everything it depends on is durable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import (
    Deferred,
    DescribedGroup,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    check_group_id,
    check_topic_partition,
    validate_filter,
    validate_group_ids,
    validate_heartbeat,
    validate_join_group,
    validate_leave_group,
    validate_offset_commit,
    validate_offset_fetch,
    validate_sync_group,
)
from raygroups.coordinator.result import Result
from raygroups.coordinator.runtime import CoordinatorRuntime, PartitionState
from raygroups.coordinator.shard import GroupCoordinatorShard

Sink = Callable[[Any], None]


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


# Kafka's exceptions to COORDINATOR_LOAD_IN_PROGRESS for a loading partition: old clients do not expect 14
# from SyncGroup (GroupCoordinator.handleSyncGroup), and a heartbeat is answered blindly (handleHeartbeat).
_WHILE_LOADING: dict[type, Errors] = {SyncGroupRequest: Errors.REBALANCE_IN_PROGRESS, HeartbeatRequest: Errors.NONE}
# The requests that run on the shard owning their group (``_handle``).
_HANDLED = frozenset({JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest, OffsetCommitRequest,
                      OffsetFetchRequest, OffsetDeleteRequest})
# Only offset commits and fetches accept the empty group id (Kafka's validateGroupStatus callers).
_EMPTY_GROUP_ID_ALLOWED = (OffsetCommitRequest, OffsetFetchRequest)


def _handle(shard: GroupCoordinatorShard, request: Any, respond: Deferred) -> Result:
    """The one place a request meets its handler. JoinGroup and SyncGroup answer through ``respond`` (they
    may park); the others answer in their result; the reads write nothing."""
    result = _run_handler(shard, request, respond)
    if not isinstance(result, Result):  # a handler path that forgot to return what it wrote
        raise TypeError(f"{type(request).__name__} handler returned {type(result).__name__}, not a Result")
    return result


def _run_handler(shard: GroupCoordinatorShard, request: Any, respond: Deferred) -> Result:
    match request:
        case JoinGroupRequest():
            return shard.join_group(request, respond)
        case SyncGroupRequest():
            return shard.sync_group(request, respond)
        case HeartbeatRequest():
            return Result(response=shard.heartbeat(request))
        case LeaveGroupRequest():
            return shard.leave_group(request)
        case OffsetCommitRequest():
            return shard.commit_offsets(request)
        case OffsetFetchRequest():
            return Result(response=shard.fetch_offsets(request))
        case OffsetDeleteRequest():
            return shard.delete_offsets(request.group_id, list(request.partitions))
    raise TypeError(f"not a coordinator request: {type(request).__name__}")


def error_response(request: Any, error: Errors) -> Any:
    """The response a request gets when it fails as a whole with ``error`` (a pre-check, or the shard is
    gone)."""
    match request:
        case JoinGroupRequest():
            # Kafka's service echoes the member id for its own checks (invalid group id, not active) but
            # not for runtime errors (loading, not the coordinator), which come back with member id "".
            runtime_error = error in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS)
            return JoinGroupResponse(error, member_id="" if runtime_error else request.member_id)
        case SyncGroupRequest():
            return SyncGroupResponse(error)
        case HeartbeatRequest():
            return HeartbeatResponse(error)
        case LeaveGroupRequest():
            return LeaveGroupResponse(error)
        case OffsetCommitRequest():
            return OffsetCommitResponse({tp: error for tp in request.offsets})
        case OffsetFetchRequest():
            return OffsetFetchResponse(error)
        case OffsetDeleteRequest():
            return OffsetDeleteResponse(error)
        case ListGroupsRequest():
            return ListGroupsResponse(error)
        case DescribeGroupsRequest():
            return [DescribedGroup(error, g, "", "", "", []) for g in request.group_ids]
        case DeleteGroupsRequest():
            return {g: error for g in request.group_ids}
    raise TypeError(f"not a coordinator request: {type(request).__name__}")


def validate_request(request: Any, message_max_bytes: int) -> Any:
    """Hold a request to what the client API checks before it sends one (the fields Kafka's request schemas
    could encode, ``message.max.bytes`` for protocol metadata, assignments and commit metadata), so that a
    request that reached the coordinator another way -- a raw call to a shard actor -- meets the same
    limits. Returns the normalized request; raises ``TypeError``/``ValueError`` naming the field."""
    match request:
        case JoinGroupRequest():
            return validate_join_group(request, message_max_bytes)
        case SyncGroupRequest():
            return validate_sync_group(request, message_max_bytes)
        case HeartbeatRequest():
            return validate_heartbeat(request)
        case LeaveGroupRequest():
            return validate_leave_group(request)
        case OffsetCommitRequest():
            return validate_offset_commit(request, message_max_bytes)
        case OffsetFetchRequest():
            return validate_offset_fetch(request)
        case OffsetDeleteRequest():
            check_group_id(request.group_id)
            if not isinstance(request.partitions, (list, tuple)):
                raise TypeError(f"partitions must be a list of (topic, partition), got "
                                f"{type(request.partitions).__name__}")
            return OffsetDeleteRequest(request.group_id,
                                       tuple(check_topic_partition("partitions", tp) for tp in request.partitions))
        case ListGroupsRequest():
            return ListGroupsRequest(tuple(validate_filter("states_filter", request.states_filter)),
                                     tuple(validate_filter("types_filter", request.types_filter)))
        case DescribeGroupsRequest():
            return DescribeGroupsRequest(tuple(validate_group_ids("group_ids", request.group_ids)))
        case DeleteGroupsRequest():
            return DeleteGroupsRequest(tuple(validate_group_ids("group_ids", request.group_ids)))
    raise TypeError(f"not a coordinator request: {type(request).__name__}")


def _append_failed_response(request: Any, error: Errors) -> Any:
    """What a request whose records could not be appended gets (the JoinGroup answer carries no member id)."""
    if isinstance(request, JoinGroupRequest):
        return JoinGroupResponse(error)
    return error_response(request, error)


def response_errors(response: Any) -> list[Errors]:
    """Every error code in a response (top level, per partition, per group)."""
    if isinstance(response, list):
        return [g.error for g in response]
    if isinstance(response, dict):
        return list(response.values())
    errors = [] if getattr(response, "error", None) is None else [response.error]
    errors.extend(getattr(response, "errors", {}).values())
    return errors


def dispatch(runtime: CoordinatorRuntime, request: Any, sink: Sink, validated: bool = False) -> None:
    """Answer ``request`` through ``sink`` (at once for pre-check failures, else when durable). A malformed
    request changes nothing and is answered INVALID_REQUEST, as Kafka's broker answers a request it cannot
    parse against its schema. ``validated``: the caller already passed it through ``validate_request``."""
    try:
        if not validated:
            request = validate_request(request, runtime.config.message_max_bytes)
    except (TypeError, ValueError) as invalid:
        try:
            response = error_response(request, Errors.INVALID_REQUEST)
        except Exception:  # too malformed even to shape an answer: the caller gets the validation error
            raise invalid from None
        sink(response)
        return
    kind = type(request)
    if kind is ListGroupsRequest:
        sink(_list_groups(runtime, request))
        return
    if kind is DescribeGroupsRequest:
        sink(_describe_groups(runtime, request))
        return
    if kind is DeleteGroupsRequest:
        _delete_groups(runtime, request, sink)
        return
    if kind not in _HANDLED:
        raise TypeError(f"not a coordinator request: {kind.__name__}")
    error, ctx = runtime.precheck(request.group_id, allow_empty=isinstance(request, _EMPTY_GROUP_ID_ALLOWED))
    if error is Errors.COORDINATOR_LOAD_IN_PROGRESS and kind in _WHILE_LOADING:
        sink(error_response(request, _WHILE_LOADING[kind]))
        return
    if error is not Errors.NONE:
        sink(error_response(request, error))
        return
    respond = runtime.new_response(sink)
    runtime.execute(ctx, lambda: _handle(ctx.shard, request, respond), respond,
                    lambda e: _append_failed_response(request, e))


def _list_groups(runtime: CoordinatorRuntime, req: ListGroupsRequest) -> ListGroupsResponse:
    if not runtime.active:
        return ListGroupsResponse(Errors.COORDINATOR_NOT_AVAILABLE)
    groups = []
    for ctx in runtime.contexts:
        if ctx.state is PartitionState.LOADING:
            # Kafka's new coordinator (GroupCoordinatorService.listGroups): a loading partition fails the
            # whole listing.
            return ListGroupsResponse(Errors.COORDINATOR_LOAD_IN_PROGRESS)
        if ctx.state is PartitionState.ACTIVE:
            groups.extend(ctx.shard.list_groups(list(req.states_filter), list(req.types_filter)))
    return ListGroupsResponse(Errors.NONE, groups)


def _describe_groups(runtime: CoordinatorRuntime, req: DescribeGroupsRequest) -> list[DescribedGroup]:
    out = []
    for group_id in req.group_ids:
        error, ctx = runtime.precheck(group_id, allow_empty=True)
        if error is not Errors.NONE:
            out.append(DescribedGroup(error, group_id, "", "", "", []))
        else:
            out.append(ctx.shard.describe_group(group_id))
    return out


def _delete_groups(runtime: CoordinatorRuntime, req: DeleteGroupsRequest, sink: Sink) -> None:
    result: dict[str | None, Errors] = {}
    by_partition: dict[int, list[str]] = {}
    for group_id in req.group_ids:
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
