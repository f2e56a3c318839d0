"""``raygroups.testing``: the whole coordinator in one process, deterministic, no Ray.

``InProcessCoordinator`` exposes exactly the client API of a Ray deployment (same methods, keyword
arguments, responses and ``concurrent.futures.Future`` results), driven by a ``ManualClock``. Use it to
test consumer logic: ``clock.advance(ms)`` fires session timeouts, delayed joins and offset expiration.

Guarantees: responses are released only after the records they depend on are in the partition's log
(in memory, or in real files with ``log_dir``); two coordinators opened one after the other on the same
``log_dir`` see the same durable state. Thread-safe: every call, and every timer fired by
``clock.advance``, runs under one lock, so a consumer's heartbeat thread may call it concurrently.
It also plays the part of a deployment for client code: ``client()`` returns itself and
``create_topic``/``topics`` keep topic metadata (not validated here, as Kafka's coordinator does not).
"""

from __future__ import annotations

import functools
import os
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from coordinator.clock import ManualClock
from coordinator.config import CoordinatorConfig
from coordinator.errors import AppendError, Errors, IllegalStateError
from coordinator.group import ClassicGroup, GroupState
from coordinator.messages import (
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
    check_int,
    check_topic_partition,
    check_type,
    validate_filter,
    validate_group_ids,
    validate_heartbeat,
    validate_join_group,
    validate_leave_group,
    validate_offset_commit,
    validate_offset_fetch,
    validate_sync_group,
)
from coordinator.records import Record
from coordinator.runtime import CoordinatorRuntime, PartitionContext, PartitionState
from coordinator.state import DurableState
from offsets_log.batch import Batch
from offsets_log.errors import LogError, StaleEpochError
from offsets_log.loader import LoadSummary, replay
from offsets_log.memory import InMemoryLog

__all__ = ["InProcessCoordinator", "ManualClock", "IllegalStateError"]


def _done(value: Any) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


def _locked(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


def _random_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class InProcessCoordinator:
    def __init__(
        self,
        num_partitions: int | None = None,
        owned_partitions: Iterable[int] | None = None,
        clock: ManualClock | None = None,
        config: dict[str, Any] | CoordinatorConfig | None = None,
        log_dir: str | os.PathLike | None = None,
        member_id_generator: Callable[[str], str] | None = None,
    ) -> None:
        self.config = CoordinatorConfig.from_properties(config)
        if num_partitions is None:
            num_partitions = self.config.offsets_topic_num_partitions
        check_int("num_partitions", num_partitions, 1, 10_000)
        self.clock = clock if clock is not None else ManualClock(0)
        if not isinstance(self.clock, ManualClock):
            raise TypeError(f"clock must be a raygroups.testing.ManualClock, got {type(self.clock).__name__}")
        check_type("log_dir", log_dir, (str, os.PathLike), nullable=True)
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        if owned_partitions is None:
            owned = list(range(num_partitions))
        else:
            owned = sorted(set(owned_partitions))
            for p in owned:
                check_int("owned_partitions entry", p, 0, num_partitions - 1)
        self._lock = threading.RLock()
        self._topics: dict[str, int] = {}
        self._memory_logs: dict[int, InMemoryLog] = {}
        self._runtime = CoordinatorRuntime(
            num_partitions,
            self.config,
            self.clock,
            self._new_timers,
            member_id_generator or _random_member_id,
            self._append,
        )
        self.last_load_summaries: dict[int, LoadSummary] = {}
        for p in owned:
            self.load(p, 0)

    @property
    def num_partitions(self) -> int:
        return self._runtime.num_partitions

    def _new_timers(self):
        timers = self.clock.timers()
        lock = self._lock
        schedule = timers.schedule

        def locked_schedule(key, delay_ms, callback):
            def run():
                with lock:
                    callback()

            schedule(key, delay_ms, run)

        timers.schedule = locked_schedule
        return timers

    # ------------------------------------------------------------------------------------------
    # Deployment-like conveniences for client code (Consumer, tests)
    # ------------------------------------------------------------------------------------------
    def client(self) -> InProcessCoordinator:
        return self

    @_locked
    def create_topic(self, name: str, partitions: int) -> None:
        check_type("name", name, str)
        if not name:
            raise ValueError("topic name must not be empty")
        check_int("partitions", partitions, 1, 1_000_000)
        self._topics[name] = partitions

    @_locked
    def topics(self) -> dict[str, int]:
        return dict(self._topics)

    # ------------------------------------------------------------------------------------------
    # Logs
    # ------------------------------------------------------------------------------------------
    def _open_log(self, partition: int):
        if self.log_dir is None:
            return self._memory_logs.setdefault(partition, InMemoryLog())
        from offsets_log import open_log

        return open_log(
            os.path.join(self.log_dir, f"__consumer_offsets-{partition}"),
            segment_bytes=self.config.offsets_topic_segment_bytes,
            fsync_interval_ms=self.config.log_flush_interval_ms or None,
        )

    def _append(self, ctx: PartitionContext, records: list[Record]) -> None:
        if ctx.fail_next_append is not None:
            error, ctx.fail_next_append = ctx.fail_next_append, None
            raise AppendError(error, "injected by fail_next_append_for_testing")
        log = ctx.log
        batch = Batch(log.log_end_offset, ctx.epoch, self.clock.now_ms(), tuple(records))
        try:
            log.append(batch, ctx.epoch)
        except StaleEpochError as e:
            raise AppendError(Errors.NOT_LEADER_OR_FOLLOWER, str(e)) from e
        except (LogError, OSError) as e:
            raise AppendError(Errors.KAFKA_STORAGE_ERROR, str(e)) from e

    # ------------------------------------------------------------------------------------------
    # Lifecycle
    # ------------------------------------------------------------------------------------------
    @_locked
    def load(self, partition: int, leader_epoch: int) -> LoadSummary | None:
        """Become the coordinator of ``partition`` for ``leader_epoch`` by replaying its log."""
        check_int("partition", partition, 0, self.num_partitions - 1)
        check_int("leader_epoch", leader_epoch, 0)
        ctx = self._runtime.begin_load(partition, leader_epoch)
        if ctx is None:
            return None
        try:
            if ctx.log is None:
                ctx.log = self._open_log(partition)
            summary = replay(ctx.log, ctx.shard.state)
        except Exception:
            self._runtime.fail_load(ctx)
            raise
        self._runtime.complete_load(ctx)
        self.last_load_summaries[partition] = summary
        return summary

    @_locked
    def unload(self, partition: int, leader_epoch: int | None) -> None:
        """Resign ``partition``: groups become Dead, parked requests get NOT_COORDINATOR, the log closes."""
        check_int("partition", partition, 0, self.num_partitions - 1)
        if leader_epoch is not None:
            check_int("leader_epoch", leader_epoch, 0)
        ctx = self._runtime.unload(partition, leader_epoch)
        if ctx is not None and ctx.log is not None:
            if self.log_dir is not None:
                ctx.log.close()
            ctx.log = None

    @_locked
    def close(self) -> None:
        for ctx in self._runtime.contexts:
            if ctx.state in (PartitionState.ACTIVE, PartitionState.LOADING):
                self.unload(ctx.partition, None)
        self._runtime.active = False

    def __enter__(self) -> InProcessCoordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------
    # The group API
    # ------------------------------------------------------------------------------------------
    def _run(self, ctx: PartitionContext, fn: Callable[[Any], None], error_response: Callable[[Errors], Any]) -> Future:
        future: Future = Future()
        respond = self._runtime.new_response(future.set_result)
        self._runtime.execute(ctx, lambda: fn(respond), respond, error_response)
        return future

    @_locked
    def join_group(self, *, group_id, member_id, protocol_type, protocols, session_timeout_ms,
                   rebalance_timeout_ms, group_instance_id=None, client_id="", client_host=None,
                   require_known_member_id=True, reason=None) -> Future:
        req = validate_join_group(
            JoinGroupRequest(group_id, member_id, protocol_type, protocols, session_timeout_ms, rebalance_timeout_ms,
                             group_instance_id, client_id, client_host if client_host is not None else "/127.0.0.1",
                             require_known_member_id, reason),
            self.config.message_max_bytes,
        )
        error, ctx = self._runtime.precheck(req.group_id)
        if error is not Errors.NONE:
            return _done(JoinGroupResponse(error, member_id=req.member_id))
        return self._run(ctx, lambda r: ctx.shard.join_group(req, r), lambda e: JoinGroupResponse(e))

    @_locked
    def sync_group(self, *, group_id, generation_id, member_id, assignments=None, group_instance_id=None,
                   protocol_type=None, protocol_name=None) -> Future:
        req = validate_sync_group(
            SyncGroupRequest(group_id, generation_id, member_id, assignments, group_instance_id, protocol_type,
                             protocol_name),
            self.config.message_max_bytes,
        )
        error, ctx = self._runtime.precheck(req.group_id)
        if error is Errors.COORDINATOR_LOAD_IN_PROGRESS:
            error = Errors.REBALANCE_IN_PROGRESS  # old clients do not expect 14 from SyncGroup (§1.1)
        if error is not Errors.NONE:
            return _done(SyncGroupResponse(error))
        return self._run(ctx, lambda r: ctx.shard.sync_group(req, r), lambda e: SyncGroupResponse(e))

    @_locked
    def heartbeat(self, *, group_id, generation_id, member_id, group_instance_id=None) -> Future:
        req = validate_heartbeat(HeartbeatRequest(group_id, generation_id, member_id, group_instance_id))
        error, ctx = self._runtime.precheck(req.group_id)
        if error is Errors.COORDINATOR_LOAD_IN_PROGRESS:
            error = Errors.NONE  # Kafka "responds blindly" while loading (§1.1)
            return _done(HeartbeatResponse(error))
        if error is not Errors.NONE:
            return _done(HeartbeatResponse(error))
        return self._run(ctx, lambda r: r.complete(ctx.shard.heartbeat(req)), lambda e: HeartbeatResponse(e))

    @_locked
    def leave_group(self, *, group_id, members, reason=None) -> Future:
        req = validate_leave_group(LeaveGroupRequest(group_id, members, reason))
        error, ctx = self._runtime.precheck(req.group_id)
        if error is not Errors.NONE:
            return _done(LeaveGroupResponse(error))
        return self._run(ctx, lambda r: r.complete(ctx.shard.leave_group(req)), lambda e: LeaveGroupResponse(e))

    @_locked
    def commit_offsets(self, *, group_id, offsets, generation_id=-1, member_id="", group_instance_id=None,
                       retention_time_ms=-1) -> Future:
        req = validate_offset_commit(
            OffsetCommitRequest(group_id, offsets, generation_id, member_id, group_instance_id, retention_time_ms),
            self.config.message_max_bytes,
        )
        error, ctx = self._runtime.precheck(req.group_id, allow_empty=True)
        if error is not Errors.NONE:
            return _done(OffsetCommitResponse({tp: error for tp in req.offsets}))
        return self._run(
            ctx, lambda r: r.complete(ctx.shard.commit_offsets(req)),
            lambda e: OffsetCommitResponse({tp: e for tp in req.offsets}),
        )

    @_locked
    def fetch_offsets(self, *, group_id, partitions=None, require_stable=False) -> Future:
        req = validate_offset_fetch(OffsetFetchRequest(group_id, partitions, require_stable))
        error, ctx = self._runtime.precheck(req.group_id, allow_empty=True)
        if error is not Errors.NONE:
            return _done(OffsetFetchResponse(error))
        return self._run(ctx, lambda r: r.complete(ctx.shard.fetch_offsets(req)), lambda e: OffsetFetchResponse(e))

    @_locked
    def list_groups(self, *, states_filter=None, types_filter=None) -> Future:
        states = validate_filter("states_filter", states_filter)
        types = validate_filter("types_filter", types_filter)
        if not self._runtime.active:
            return _done(ListGroupsResponse(Errors.COORDINATOR_NOT_AVAILABLE))
        groups = []
        for ctx in self._runtime.contexts:
            if ctx.state is PartitionState.LOADING:
                # New coordinator: a loading partition fails the whole listing (Appendix A).
                return _done(ListGroupsResponse(Errors.COORDINATOR_LOAD_IN_PROGRESS))
            if ctx.state is PartitionState.ACTIVE:
                groups.extend(ctx.shard.list_groups(states, types))
        return _done(ListGroupsResponse(Errors.NONE, groups))

    @_locked
    def describe_groups(self, group_ids) -> Future:
        ids = validate_group_ids("group_ids", group_ids)
        out: list[DescribedGroup] = []
        for group_id in ids:
            error, ctx = self._runtime.precheck(group_id, allow_empty=True)
            if error is not Errors.NONE:
                out.append(DescribedGroup(error, group_id, "", "", "", []))
            else:
                out.append(ctx.shard.describe_group(group_id))
        return _done(out)

    @_locked
    def delete_groups(self, group_ids) -> Future:
        ids = validate_group_ids("group_ids", group_ids)
        result: dict[str, Errors] = {}
        by_partition: dict[int, list[str]] = {}
        for group_id in ids:
            error, ctx = self._runtime.precheck(group_id, allow_empty=True)
            if error is not Errors.NONE:
                result[group_id] = error
            else:
                by_partition.setdefault(ctx.partition, []).append(group_id)
        for partition, gids in by_partition.items():
            ctx = self._runtime.contexts[partition]
            f = self._run(ctx, lambda r, g=gids, c=ctx: r.complete(c.shard.delete_groups(g)),
                          lambda e, g=gids: {gid: e for gid in g})
            result.update(f.result(timeout=0))
        return _done(result)

    @_locked
    def delete_offsets(self, *, group_id, partitions) -> Future:
        check_type("group_id", group_id, str, nullable=True)
        if isinstance(partitions, (str, bytes)) or not isinstance(partitions, (list, tuple, set, frozenset)):
            raise TypeError(f"partitions must be a list of (topic, partition), got {type(partitions).__name__}")
        parts = [check_topic_partition("partitions", tp) for tp in partitions]
        error, ctx = self._runtime.precheck(group_id)
        if error is not Errors.NONE:
            return _done(OffsetDeleteResponse(error))
        return self._run(ctx, lambda r: r.complete(ctx.shard.delete_offsets(group_id, parts)),
                         lambda e: OffsetDeleteResponse(e))

    # ------------------------------------------------------------------------------------------
    # Introspection and test hooks (the places Kafka's own tests reach into)
    # ------------------------------------------------------------------------------------------
    @_locked
    def log_records(self, partition: int) -> list[Record]:
        check_int("partition", partition, 0, self.num_partitions - 1)
        ctx = self._runtime.contexts[partition]
        log = ctx.log
        close = False
        if log is None:
            if self.log_dir is None:
                log = self._memory_logs.get(partition)
                if log is None:
                    return []
            else:
                from offsets_log import open_log

                path = os.path.join(self.log_dir, f"__consumer_offsets-{partition}")
                if not os.path.isdir(path):
                    return []
                log, close = open_log(path), True
        try:
            return [rec for batch in log.batches(0) for rec in batch.records]
        finally:
            if close:
                log.close()

    def durable_state_for_testing(self, partition: int) -> DurableState:
        return self._shard(partition).state

    def replayed_state_for_testing(self, partition: int) -> DurableState:
        state = DurableState()
        for key, value in self.log_records(partition):
            state.replay(key, value)
        return state

    @_locked
    def fail_next_append_for_testing(self, partition: int, error: Errors) -> None:
        check_int("partition", partition, 0, self.num_partitions - 1)
        if not isinstance(error, Errors) or error is Errors.NONE:
            raise TypeError(f"error must be an Errors member other than NONE, got {error!r}")
        self._runtime.contexts[partition].fail_next_append = error

    @_locked
    def set_loading_for_testing(self, partition: int, loading: bool) -> None:
        ctx = self._runtime.contexts[partition]
        if loading:
            if ctx.shard is None:
                ctx.shard = self._runtime.new_shard(ctx)
            ctx.state = PartitionState.LOADING
        elif ctx.shard is not None:
            ctx.state = PartitionState.ACTIVE

    def group_for_testing(self, group_id: str) -> ClassicGroup | None:
        ctx = self._runtime.contexts[self._runtime.partition_for(group_id)]
        return None if ctx.shard is None else ctx.shard.groups.get(group_id)

    @_locked
    def group_state_for_testing(self, group_id: str) -> str | None:
        group = self.group_for_testing(group_id)
        return None if group is None else group.state.value

    @_locked
    def transition_group_for_testing(self, group_id: str, state: str) -> None:
        group = self.group_for_testing(group_id)
        if group is None:
            raise KeyError(f"unknown group {group_id!r}")
        group.transition_to(GroupState(state))

    @_locked
    def force_group_state_for_testing(self, group_id: str, state: str) -> None:
        shard = self._shard(self._runtime.partition_for(group_id))
        group, _ = shard._get_or_create_group(group_id)
        group.previous_state = group.state
        group.state = GroupState(state)
        group.state_timestamp_ms = self.clock.now_ms()

    @_locked
    def can_rebalance_for_testing(self, group_id: str) -> bool:
        group = self.group_for_testing(group_id)
        if group is None:
            raise KeyError(f"unknown group {group_id!r}")
        return group.can_rebalance()

    def partition_state_for_testing(self, partition: int) -> str:
        return self._runtime.contexts[partition].state.value

    def _shard(self, partition: int):
        ctx = self._runtime.contexts[partition]
        if ctx.shard is None:
            raise KeyError(f"partition {partition} is not loaded")
        return ctx.shard
