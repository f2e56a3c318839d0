"""The coordinator runtime: partition lifecycle, the common pre-checks, and the write path.

One ``PartitionContext`` per ``__consumer_offsets`` partition (INITIAL → LOADING → ACTIVE →
CLOSED/FAILED, with a leader epoch), each with its ``GroupCoordinatorShard``. Every request and every
timer expiry runs as one *operation*: the shard handler runs, the records it emitted (already replayed
speculatively) are appended to the partition's log as one batch, and only then are the responses
completed during the operation released. If the append fails, the records are undone, the
operation's own response becomes Kafka's mapped error (§1.1) and its ``on_done`` callbacks run with
that error. This module is pure: the log and the timers are injected; appends are synchronous here.

Guarantees: no response is released before every record it depends on is in the log; nothing in the
log was ever reverted in memory (so replaying the log gives the live durable state).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Protocol

from coordinator.clock import Clock, Timers
from coordinator.config import CoordinatorConfig
from coordinator.errors import AppendError, Errors, map_append_error
from coordinator.messages import Deferred
from coordinator.partitioning import partition_for
from coordinator.records import Record
from coordinator.shard import GroupCoordinatorShard


class PartitionState(enum.StrEnum):
    INITIAL = "INITIAL"
    LOADING = "LOADING"
    ACTIVE = "ACTIVE"
    CLOSED = "CLOSED"
    FAILED = "FAILED"


class PartitionLog(Protocol):
    """What the runtime needs from a partition log (``offsets_log`` implements it)."""

    @property
    def log_end_offset(self) -> int: ...

    def append_records(self, records: list[Record], leader_epoch: int, timestamp_ms: int) -> int: ...


class PartitionContext:
    __slots__ = ("partition", "state", "epoch", "shard", "log", "fail_next_append")

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.state = PartitionState.INITIAL
        self.epoch = -1
        self.shard: GroupCoordinatorShard | None = None
        self.log: Any = None
        self.fail_next_append: Errors | None = None


class CoordinatorRuntime:
    def __init__(
        self,
        num_partitions: int,
        config: CoordinatorConfig,
        clock: Clock,
        new_timers: Callable[[], Timers],
        new_member_id: Callable[[str], str],
        append: Callable[[PartitionContext, list[Record]], None],
    ) -> None:
        self.num_partitions = num_partitions
        self.config = config
        self.clock = clock
        self._new_timers = new_timers
        self._new_member_id = new_member_id
        self._append = append
        self.contexts = [PartitionContext(p) for p in range(num_partitions)]
        self.active = True
        self.last_exception: Exception | None = None
        self._held: list[list[tuple[Deferred, Callable[[Any], None], Any]]] = []

    # ------------------------------------------------------------------------------------------
    # Routing and pre-checks (reference §1.1, Appendix B)
    # ------------------------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def precheck(self, group_id: str | None, allow_empty: bool = False) -> tuple[Errors, PartitionContext | None]:
        """Returns the error of the first failing check, or NONE and the context that owns the group.
        A LOADING partition returns COORDINATOR_LOAD_IN_PROGRESS *and* its context (callers with Kafka's
        exceptions for Heartbeat and SyncGroup need it)."""
        if group_id is None or (group_id == "" and not allow_empty):
            return Errors.INVALID_GROUP_ID, None
        if not self.active:
            return Errors.COORDINATOR_NOT_AVAILABLE, None
        ctx = self.contexts[self.partition_for(group_id)]
        if ctx.state is PartitionState.LOADING:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS, ctx
        if ctx.state is not PartitionState.ACTIVE:
            return Errors.NOT_COORDINATOR, None
        return Errors.NONE, ctx

    # ------------------------------------------------------------------------------------------
    # Operations
    # ------------------------------------------------------------------------------------------
    def new_response(self, sink: Callable[[Any], None]) -> Deferred:
        """A response slot whose value reaches ``sink`` once everything it depends on is durable."""
        deferred = Deferred()

        def release(value: Any) -> None:
            if self._held:
                self._held[-1].append((deferred, sink, value))
            else:
                sink(value)

        deferred.add_callback(release)
        return deferred

    def execute(
        self,
        ctx: PartitionContext,
        fn: Callable[[], None],
        respond: Deferred | None = None,
        error_response: Callable[[Errors], Any] | None = None,
    ) -> None:
        """Run one operation on ``ctx``'s shard: handler, append, then release (or revert)."""
        shard = ctx.shard
        held: list[tuple[Deferred, Callable[[Any], None], Any]] = []
        self._held.append(held)
        error = Errors.NONE
        try:
            fn()
        except Exception as e:  # a bug or a broken invariant: Kafka answers UNKNOWN_SERVER_ERROR
            error = Errors.UNKNOWN_SERVER_ERROR
            self.last_exception = e
        records, undo, callbacks = shard.take_operation()
        if error is not Errors.NONE:
            shard.revert(undo)
            callbacks = []
        elif records:
            try:
                self._append(ctx, records)
            except AppendError as e:
                error = map_append_error(e.error)
                shard.revert(undo)
        self._held.pop()
        for deferred, sink, value in held:
            if deferred is respond and error is not Errors.NONE and error_response is not None:
                # The operation answered its own request: on failure that answer is the error.
                value = error_response(error)
            sink(value)
        if respond is not None and not respond.done and error is Errors.UNKNOWN_SERVER_ERROR:
            respond.complete(error_response(error) if error_response else None)
        for cb in callbacks:
            self.execute(ctx, lambda cb=cb: cb(error))

    def run_timer(self, ctx: PartitionContext) -> Callable[[Callable[[], None]], None]:
        def run(fn: Callable[[], None]) -> None:
            if ctx.state is PartitionState.ACTIVE and ctx.shard is not None:
                self.execute(ctx, fn)

        return run

    # ------------------------------------------------------------------------------------------
    # Load / unload (reference §4.3, §4.4)
    # ------------------------------------------------------------------------------------------
    def new_shard(self, ctx: PartitionContext) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(
            ctx.partition, self.config, self.clock, self._new_timers(), self._new_member_id, self.run_timer(ctx)
        )

    def begin_load(self, partition: int, leader_epoch: int) -> PartitionContext | None:
        """Start loading ``partition`` for ``leader_epoch``; None if the epoch is not newer (ignored)
        or the partition is already loading/active (its epoch is bumped, as Kafka does)."""
        ctx = self.contexts[partition]
        if leader_epoch <= ctx.epoch:
            return None
        ctx.epoch = leader_epoch
        if ctx.state in (PartitionState.LOADING, PartitionState.ACTIVE):
            return None
        ctx.state = PartitionState.LOADING
        ctx.shard = self.new_shard(ctx)
        return ctx

    def complete_load(self, ctx: PartitionContext) -> None:
        shard = ctx.shard
        self._held.append([])
        try:
            shard.on_loaded()
        finally:
            held = self._held.pop()
        ctx.state = PartitionState.ACTIVE
        for _, sink, value in held:
            sink(value)

    def fail_load(self, ctx: PartitionContext) -> None:
        ctx.state = PartitionState.FAILED
        if ctx.shard is not None:
            ctx.shard.timers.cancel_all()
        ctx.shard = None

    def unload(self, partition: int, leader_epoch: int | None) -> PartitionContext | None:
        """Resign ``partition``; an epoch older than the stored one is a stale request and is ignored."""
        ctx = self.contexts[partition]
        if leader_epoch is not None:
            if leader_epoch < ctx.epoch:
                return None
            ctx.epoch = leader_epoch
        if ctx.shard is not None:
            ctx.shard.on_unloaded()
        ctx.shard = None
        ctx.state = PartitionState.CLOSED
        return ctx
