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

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from raygroups.actors.member_ids import new_member_id
from raygroups.client.api import GroupApi
from raygroups.coordinator.api import dispatch
from raygroups.coordinator.clock import ManualClock
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.errors import AppendError, Errors, IllegalStateError
from raygroups.coordinator.group import ClassicGroup, GroupState
from raygroups.coordinator.messages import check_int, check_type
from raygroups.coordinator.records import Record
from raygroups.coordinator.runtime import CoordinatorRuntime, PartitionContext, PartitionState
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log.batch import Batch
from raygroups.offsets_log.leader import append_as_leader
from raygroups.offsets_log.loader import LoadSummary, replay
from raygroups.offsets_log.log import locked
from raygroups.offsets_log.memory import InMemoryLog
from raygroups.offsets_log.replica_state import partition_dir

__all__ = ["InProcessCoordinator", "ManualClock", "IllegalStateError"]


def _done(value: Any) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


class InProcessCoordinator(GroupApi):
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
        self._fail_next_append: dict[int, Errors] = {}  # fail_next_append_for_testing, by partition
        self._runtime = CoordinatorRuntime(
            num_partitions,
            self.config,
            self.clock,
            self._new_timers,
            member_id_generator or new_member_id,
            self._append,
            topics=lambda: self._topics,
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

    @locked
    def create_topic(self, name: str, partitions: int) -> None:
        check_type("name", name, str)
        if not name:
            raise ValueError("topic name must not be empty")
        check_int("partitions", partitions, 1, 1_000_000)
        self._topics[name] = partitions

    @locked
    def topics(self) -> dict[str, int]:
        return dict(self._topics)

    # ------------------------------------------------------------------------------------------
    # Logs
    # ------------------------------------------------------------------------------------------
    def _open_log(self, partition: int):
        if self.log_dir is None:
            return self._memory_logs.setdefault(partition, InMemoryLog())
        from raygroups.offsets_log import open_log

        return open_log(
            partition_dir(self.log_dir, partition),
            segment_bytes=self.config.offsets_topic_segment_bytes,
            fsync_interval_ms=self.config.log_flush_interval_ms or None,
        )

    def _append(self, ctx: PartitionContext, records: list[Record]) -> None:
        error = self._fail_next_append.pop(ctx.partition, None)
        if error is not None:
            raise AppendError(error, "injected by fail_next_append_for_testing")
        append_as_leader(ctx.log, records, ctx.epoch, self.clock.now_ms())

    # ------------------------------------------------------------------------------------------
    # Lifecycle
    # ------------------------------------------------------------------------------------------
    @locked
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

    @locked
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

    @locked
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
    # The group API (signatures in raygroups.client.api.GroupApi)
    # ------------------------------------------------------------------------------------------
    @locked
    def _submit(self, request: Any, validated: bool = False) -> Future:
        future: Future = Future()

        def settle(response: Any) -> None:
            with contextlib.suppress(InvalidStateError):  # its caller cancelled it meanwhile (as the Ray client)
                future.set_result(response)

        dispatch(self._runtime, request, settle, validated)
        return future

    # ------------------------------------------------------------------------------------------
    # Introspection and test hooks (the places Kafka's own tests reach into)
    # ------------------------------------------------------------------------------------------
    def log_records(self, partition: int) -> list[Record]:
        return [rec for batch in self.log_batches(partition) for rec in batch.records]

    @locked
    def log_batches(self, partition: int) -> list[Batch]:
        """The partition's log as written, batch by batch (an unloaded partition's from its directory)."""
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
                from raygroups.offsets_log import open_log

                path = partition_dir(self.log_dir, partition)
                if not os.path.isdir(path):
                    return []
                log, close = open_log(path), True
        try:
            return list(log.batches(0))
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

    @locked
    def fail_next_append_for_testing(self, partition: int, error: Errors) -> None:
        check_int("partition", partition, 0, self.num_partitions - 1)
        if not isinstance(error, Errors) or error is Errors.NONE:
            raise TypeError(f"error must be an Errors member other than NONE, got {error!r}")
        self._fail_next_append[partition] = error

    @locked
    def set_loading_for_testing(self, partition: int, loading: bool) -> None:
        """A load of ``partition`` in progress (``True``: it resigns, then replays its log without finishing),
        or that load's end (``False``), through the partition's real lifecycle."""
        check_int("partition", partition, 0, self.num_partitions - 1)
        ctx = self._runtime.contexts[partition]
        if not loading:
            if ctx.state is PartitionState.LOADING:
                self._runtime.complete_load(ctx)
            return
        if ctx.state is PartitionState.LOADING:
            return
        epoch = ctx.epoch + 1  # a new leader epoch, as a reload after a failover has
        self.unload(partition, None)
        ctx = self._runtime.begin_load(partition, epoch)
        ctx.log = self._open_log(partition)
        replay(ctx.log, ctx.shard.state)

    @locked
    def pending_member_count_for_testing(self, partition: int) -> tuple[int, int]:
        """(the shard's running count of KIP-394 pending ids, the same counted group by group)."""
        shard = self._runtime.contexts[partition].shard
        if shard is None:
            return 0, 0
        return shard.pending_member_count, sum(len(g.pending_members) for g in shard.groups.values())

    def group_for_testing(self, group_id: str) -> ClassicGroup | None:
        ctx = self._runtime.contexts[self._runtime.partition_for(group_id)]
        return None if ctx.shard is None else ctx.shard.groups.get(group_id)

    @locked
    def group_state_for_testing(self, group_id: str) -> str | None:
        group = self.group_for_testing(group_id)
        return None if group is None else group.state.value

    @locked
    def transition_group_for_testing(self, group_id: str, state: str) -> None:
        group = self.group_for_testing(group_id)
        if group is None:
            raise KeyError(f"unknown group {group_id!r}")
        group.transition_to(GroupState(state))

    @locked
    def force_group_state_for_testing(self, group_id: str, state: str) -> None:
        shard = self._shard(self._runtime.partition_for(group_id))
        group, _ = shard._get_or_create_group(group_id)
        group.previous_state = group.state
        group.state = GroupState(state)
        group.state_timestamp_ms = self.clock.now_ms()

    @locked
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
