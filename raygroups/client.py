"""The Ray client: the group API of ``raygroups.client_api.GroupApi`` against the shard actors.

Routing is Kafka's FindCoordinator: ``partition_for(group_id)`` → the shard actor named
``raygroups-shard-<p>`` in the deployment's namespace (handle cached). A Ray failure on a call (dead or
restarting actor, missing name) is turned into ``NOT_COORDINATOR`` and the handle is dropped; the
retriable coordinator errors (``COORDINATOR_LOAD_IN_PROGRESS``, ``NOT_COORDINATOR``,
``COORDINATOR_NOT_AVAILABLE``) are retried with exponential backoff until ``request.timeout.ms``
(JoinGroup: ``max(request.timeout.ms, rebalance_timeout_ms + 5000)``, as Kafka's client), then
surfaced. Ray exceptions never reach the caller.

Thread-safe: calls are submitted to one private asyncio loop thread; every method returns a
``concurrent.futures.Future``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future
from typing import Any

import ray

from raygroups.client_api import GroupApi
from raygroups.coordinator.api import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    error_response,
    response_errors,
)
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import JoinGroupRequest, ListGroupsResponse
from raygroups.coordinator.partitioning import partition_for
from raygroups.ray_seam import Directory

# Kafka's client backs off 100 ms growing to 1 s (KIP-580); a coordinator failover here takes 2-3 s, so
# the cap is lower: once the new leader serves, a client notices within a quarter of a second.
_BACKOFF_START_S = 0.02
_BACKOFF_MAX_S = 0.25


class RayGroupClient(GroupApi):
    def __init__(self, namespace: str, num_partitions: int, config: CoordinatorConfig) -> None:
        self.namespace = namespace
        self.num_partitions = num_partitions
        self.config = config
        self._handles: dict[int, Any] = {}
        self._handles_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="raygroups-client", daemon=True)
        self._thread.start()
        self._closed = False

    # ------------------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _submit(self, request: Any) -> Future:
        if self._closed:
            raise RuntimeError("this client is closed")
        return asyncio.run_coroutine_threadsafe(self._call(request), self._loop)

    def _handle(self, partition: int):
        with self._handles_lock:
            handle = self._handles.get(partition)
        if handle is None:
            handle = Directory(self.namespace).shard(partition)
            with self._handles_lock:
                self._handles[partition] = handle
        return handle

    def _forget(self, partition: int) -> None:
        with self._handles_lock:
            self._handles.pop(partition, None)

    # ------------------------------------------------------------------------------------------
    async def _call(self, request: Any) -> Any:
        kind = type(request)
        if kind is ListGroupsRequest:
            return await self._list_groups(request)
        if kind in (DescribeGroupsRequest, DeleteGroupsRequest):
            return await self._per_group(request)
        group_id = request.group_id
        partition = partition_for(group_id if group_id is not None else "", self.num_partitions)
        timeout_ms = self.config.request_timeout_ms
        if kind is JoinGroupRequest:
            timeout_ms = max(timeout_ms, request.rebalance_timeout_ms + 5_000)
        return await self._with_retries(partition, request, timeout_ms)

    async def _with_retries(self, partition: int, request: Any, timeout_ms: int) -> Any:
        deadline = time.monotonic() + timeout_ms / 1000.0
        backoff = _BACKOFF_START_S
        while True:
            try:
                response = await self._handle(partition).handle.remote(request)
            except (ray.exceptions.RayError, ValueError):
                # The shard is dead, restarting or not yet named: a Kafka client sees NOT_COORDINATOR.
                self._forget(partition)
                response = error_response(request, Errors.NOT_COORDINATOR)
            errors = response_errors(response)
            if not errors or not any(e.is_coordinator_error for e in errors) or time.monotonic() >= deadline:
                return response
            await asyncio.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, _BACKOFF_MAX_S)

    async def _per_group(self, request: Any) -> Any:
        by_partition: dict[int, list] = {}
        for group_id in request.group_ids:
            p = partition_for(group_id if group_id is not None else "", self.num_partitions)
            by_partition.setdefault(p, []).append(group_id)
        kind = type(request)
        parts = await asyncio.gather(*(
            self._with_retries(p, kind(tuple(ids)), self.config.request_timeout_ms)
            for p, ids in by_partition.items()
        ))
        if kind is DescribeGroupsRequest:
            described = {}
            for part in parts:
                for g in part:
                    described[g.group_id] = g
            return [described[g] for g in request.group_ids]
        merged: dict = {}
        for part in parts:
            merged.update(part)
        return merged

    async def _list_groups(self, request: ListGroupsRequest) -> ListGroupsResponse:
        # As Kafka's admin client: ask every coordinator, merge what they own.
        parts = await asyncio.gather(*(
            self._with_retries(p, request, self.config.request_timeout_ms) for p in range(self.num_partitions)
        ))
        error = next((r.error for r in parts if r.error is not Errors.NONE), Errors.NONE)
        groups = sorted((g for r in parts for g in r.groups), key=lambda g: g.group_id)
        return ListGroupsResponse(error, groups)
