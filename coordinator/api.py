"""The request boundary of a coordinator: pre-checks, dispatch to the shard, error responses.

``dispatch(runtime, request, sink)`` is the one place where a validated request meets the partition
lifecycle (Kafka's ``GroupCoordinator.validateGroupStatus``: invalid group id → not active → loading →
not owned, with the exceptions ``handleHeartbeat`` and ``handleSyncGroup`` make while loading) and where
whole-request failures become codes. The in-process coordinator and the shard actor both call it;
``sink`` receives the response once everything it depends on is durable. What differs between request
types (validation, handler, error responses, routing, the loading exceptions) is read from the registry
(``coordinator.requests``); nothing here names a request type.
"""

from __future__ import annotations

from typing import Any

from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetDeleteRequest,
)
from raygroups.coordinator.requests import REQUESTS, Registry, Routing, Sink
from raygroups.coordinator.result import Result
from raygroups.coordinator.runtime import CoordinatorRuntime
from raygroups.coordinator.shard import GroupCoordinatorShard

__all__ = [
    "DeleteGroupsRequest", "DescribeGroupsRequest", "ListGroupsRequest", "OffsetDeleteRequest", "Sink", "dispatch",
    "error_response", "response_errors", "validate_request",
]


def _handle(shard: GroupCoordinatorShard, request: Any, respond: Any, registry: Registry = REQUESTS) -> Result:
    """The one place a request meets its shard handler. JoinGroup and SyncGroup answer through ``respond``
    (they may park); the others answer in their result; the reads write nothing."""
    result = registry.spec(request).handle(shard, request, respond)
    if not isinstance(result, Result):  # a handler path that forgot to return what it wrote
        raise TypeError(f"{type(request).__name__} handler returned {type(result).__name__}, not a Result")
    return result


def error_response(request: Any, error: Errors, registry: Registry = REQUESTS) -> Any:
    """The response a request gets when it fails as a whole with ``error`` (a pre-check, or the shard is
    gone)."""
    return registry.spec(request).error_response(request, error)


def validate_request(request: Any, message_max_bytes: int, registry: Registry = REQUESTS) -> Any:
    """Hold a request to what the client API checks before it sends one (the fields Kafka's request schemas
    could encode, ``message.max.bytes`` for protocol metadata, assignments and commit metadata), so that a
    request that reached the coordinator another way -- a raw call to a shard actor -- meets the same
    limits. Returns the normalized request; raises ``TypeError``/``ValueError`` naming the field."""
    return registry.spec(request).validate(request, message_max_bytes)


def response_errors(response: Any) -> list[Errors]:
    """Every error code in a response (top level, per partition, per group)."""
    if isinstance(response, list):
        return [g.error for g in response]
    if isinstance(response, dict):
        return list(response.values())
    errors = [] if getattr(response, "error", None) is None else [response.error]
    errors.extend(getattr(response, "errors", {}).values())
    return errors


def dispatch(runtime: CoordinatorRuntime, request: Any, sink: Sink, validated: bool = False,
             registry: Registry = REQUESTS) -> None:
    """Answer ``request`` through ``sink`` (at once for pre-check failures, else when durable). A malformed
    request changes nothing and is answered INVALID_REQUEST, as Kafka's broker answers a request it cannot
    parse against its schema. ``validated``: the caller already passed it through ``validate_request``."""
    spec = registry.spec(request)
    try:
        if not validated:
            request = spec.validate(request, runtime.config.message_max_bytes)
    except (TypeError, ValueError) as invalid:
        try:
            response = spec.error_response(request, Errors.INVALID_REQUEST)
        except Exception:  # too malformed even to shape an answer: the caller gets the validation error
            raise invalid from None
        sink(response)
        return
    if spec.routing is not Routing.GROUP:
        spec.serve(runtime, request, sink)
        return
    error, ctx = runtime.precheck(request.group_id, allow_empty=spec.allow_empty_group_id)
    if error is Errors.COORDINATOR_LOAD_IN_PROGRESS and spec.while_loading is not None:
        sink(spec.error_response(request, spec.while_loading))
        return
    if error is not Errors.NONE:
        sink(spec.error_response(request, error))
        return
    respond = runtime.new_response(sink)
    runtime.execute(ctx, lambda: _handle(ctx.shard, request, respond, registry), respond,
                    lambda e: spec.failed_append_response(request, e))
