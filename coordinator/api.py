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
)
from raygroups.coordinator.runtime import CoordinatorRuntime, PartitionState

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


@dataclass(frozen=True)
class _Spec:
    allow_empty_group_id: bool
    # What a precheck failure answers (may depend on the request), and what a failed append answers.
    precheck_response: Callable[[Any, Errors], Any]
    failure_response: Callable[[Any, Errors], Any]
    handle: Callable[[Any, Any, Any], None]  # (shard, request, respond)
    while_loading: Errors | None = None  # Kafka's exception to COORDINATOR_LOAD_IN_PROGRESS


_SPECS: dict[type, _Spec] = {
    JoinGroupRequest: _Spec(
        False,
        # Kafka's service echoes the member id for its own checks (invalid group id, not active) but
        # not for runtime errors (loading, not the coordinator), which come back with member id "".
        lambda req, e: JoinGroupResponse(
            e, member_id="" if e in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS) else req.member_id
        ),
        lambda req, e: JoinGroupResponse(e),
        lambda shard, req, r: shard.join_group(req, r),
    ),
    SyncGroupRequest: _Spec(
        False,
        lambda req, e: SyncGroupResponse(e),
        lambda req, e: SyncGroupResponse(e),
        lambda shard, req, r: shard.sync_group(req, r),
        while_loading=Errors.REBALANCE_IN_PROGRESS,  # old clients do not expect 14 (handleSyncGroup)
    ),
    HeartbeatRequest: _Spec(
        False,
        lambda req, e: HeartbeatResponse(e),
        lambda req, e: HeartbeatResponse(e),
        lambda shard, req, r: r.complete(shard.heartbeat(req)),
        while_loading=Errors.NONE,  # Kafka "responds blindly" while loading (handleHeartbeat)
    ),
    LeaveGroupRequest: _Spec(
        False,
        lambda req, e: LeaveGroupResponse(e),
        lambda req, e: LeaveGroupResponse(e),
        lambda shard, req, r: r.complete(shard.leave_group(req)),
    ),
    OffsetCommitRequest: _Spec(
        True,
        lambda req, e: OffsetCommitResponse({tp: e for tp in req.offsets}),
        lambda req, e: OffsetCommitResponse({tp: e for tp in req.offsets}),
        lambda shard, req, r: r.complete(shard.commit_offsets(req)),
    ),
    OffsetFetchRequest: _Spec(
        True,
        lambda req, e: OffsetFetchResponse(e),
        lambda req, e: OffsetFetchResponse(e),
        lambda shard, req, r: r.complete(shard.fetch_offsets(req)),
    ),
    OffsetDeleteRequest: _Spec(
        False,
        lambda req, e: OffsetDeleteResponse(e),
        lambda req, e: OffsetDeleteResponse(e),
        lambda shard, req, r: r.complete(shard.delete_offsets(req.group_id, list(req.partitions))),
    ),
}


def error_response(request: Any, error: Errors) -> Any:
    """The response a request gets when it fails as a whole with ``error`` (e.g. the shard is gone)."""
    kind = type(request)
    if kind is ListGroupsRequest:
        return ListGroupsResponse(error)
    if kind is DescribeGroupsRequest:
        return [DescribedGroup(error, g, "", "", "", []) for g in request.group_ids]
    if kind is DeleteGroupsRequest:
        return {g: error for g in request.group_ids}
    return _SPECS[kind].precheck_response(request, error)


def response_errors(response: Any) -> list[Errors]:
    """Every error code in a response (top level, per partition, per group)."""
    if isinstance(response, list):
        return [g.error for g in response]
    if isinstance(response, dict):
        return list(response.values())
    errors = [] if getattr(response, "error", None) is None else [response.error]
    errors.extend(getattr(response, "errors", {}).values())
    return errors


def dispatch(runtime: CoordinatorRuntime, request: Any, sink: Sink) -> None:
    """Answer ``request`` through ``sink`` (at once for pre-check failures, else when durable)."""
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
    spec = _SPECS.get(kind)
    if spec is None:
        raise TypeError(f"not a coordinator request: {kind.__name__}")
    error, ctx = runtime.precheck(request.group_id, allow_empty=spec.allow_empty_group_id)
    if error is Errors.COORDINATOR_LOAD_IN_PROGRESS and spec.while_loading is not None:
        error = spec.while_loading
        sink(spec.precheck_response(request, error))
        return
    if error is not Errors.NONE:
        sink(spec.precheck_response(request, error))
        return
    respond = runtime.new_response(sink)
    runtime.execute(
        ctx, lambda: spec.handle(ctx.shard, request, respond), respond,
        lambda e: spec.failure_response(request, e),
    )


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
            ctx, lambda c=ctx, g=group_ids, r=respond: r.complete(c.shard.delete_groups(g)), respond,
            lambda e, g=group_ids: {gid: e for gid in g},
        )
