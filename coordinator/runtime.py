"""The coordinator runtime: partition lifecycle, the common pre-checks, and the write path.

One ``PartitionContext`` per ``__consumer_offsets`` partition (its state, moved only through
``coordinator.lifecycle``, and a leader epoch), each with its ``GroupCoordinatorShard``. Every request and every
timer expiry runs as one *operation*: the shard handler returns a ``Result``, whose records are replayed
into the shard's durable state at once (speculatively) and join the partition's open batch. Group commit: one batch is appended at a time,
operations arriving meanwhile form the next one; the responses an operation completed are released only
when its batch and every earlier one are durable, so a read is answered after all earlier writes. If an
append fails, that batch and everything applied after it are undone, their requests get Kafka's mapped
error (``CoordinatorOperationExceptionHelper.handleOperationException``) and their ``on_done``
callbacks run with it. This module is pure: the log, the timers and the driver (synchronous ``flush``,
or the actor's asynchronous flusher) are injected.

Guarantees: no response is released before every record it depends on is in the log; nothing in the
log was ever reverted in memory (so replaying the log gives the live durable state).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from raygroups.coordinator.clock import Clock, Timers
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.errors import AppendError, Errors, map_append_error
from raygroups.coordinator.lifecycle import PartitionEvent, PartitionState, next_state, transition
from raygroups.coordinator.messages import Deferred
from raygroups.coordinator.partitioning import partition_for
from raygroups.coordinator.records import Record
from raygroups.coordinator.result import Result
from raygroups.coordinator.shard import GroupCoordinatorShard

__all__ = ["CoordinatorRuntime", "PartitionContext", "PartitionState", "PendingOp"]


class PendingOp:
    """An operation whose records are not yet durable, with the responses it completed."""

    __slots__ = ("records", "undo", "callbacks", "held", "respond", "error_response")

    def __init__(self, records, undo, callbacks, held, respond, error_response) -> None:
        self.records = records
        self.undo = undo
        self.callbacks = callbacks
        self.held = held
        self.respond = respond
        self.error_response = error_response


class PartitionContext:
    """One partition's state in the runtime. ``state`` is read by anyone, changed only by the runtime
    (through ``coordinator.lifecycle.transition``)."""

    __slots__ = ("partition", "state", "epoch", "shard", "log", "pending", "inflight")

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.state = PartitionState.INITIAL
        self.epoch = -1
        self.shard: GroupCoordinatorShard | None = None
        self.log: Any = None
        self.pending: list[PendingOp] = []  # the open batch
        self.inflight: list[PendingOp] | None = None  # the batch being appended


class CoordinatorRuntime:
    def __init__(
        self,
        num_partitions: int,
        config: CoordinatorConfig,
        clock: Clock,
        new_timers: Callable[[], Timers],
        new_member_id: Callable[[str], str],
        append: Callable[[PartitionContext, list[Record]], None] | None,
        on_pending: Callable[[PartitionContext], None] | None = None,
        topics: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self.num_partitions = num_partitions
        self._topics = topics
        self.config = config
        self.clock = clock
        self._new_timers = new_timers
        self._new_member_id = new_member_id
        # Synchronous driver: ``append`` is called at once. Asynchronous driver (the shard actor):
        # ``append`` is None and ``on_pending`` wakes its flusher, which uses seal/durable/failed.
        self._append = append
        self._on_pending = on_pending
        self.contexts = [PartitionContext(p) for p in range(num_partitions)]
        self.active = True
        self.last_exception: Exception | None = None
        self._held: list[list[tuple[Deferred, Callable[[Any], None], Any]]] = []

    # ------------------------------------------------------------------------------------------
    # Routing and pre-checks (Kafka's partitionFor and the GroupCoordinator.validateGroupStatus order)
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
        fn: Callable[[], Result | None],
        respond: Deferred | None = None,
        error_response: Callable[[Errors], Any] | None = None,
    ) -> None:
        """Run one operation on ``ctx``'s shard: ``fn`` returns what it writes (None: nothing). Its records
        are applied and join the open batch; its response (the result's, or whatever completes
        ``respond``) is released when every earlier batch and its own are durable (a read waits for
        earlier writes)."""
        shard = ctx.shard
        held: list[tuple[Deferred, Callable[[Any], None], Any]] = []
        self._held.append(held)
        result: Result = Result()
        undo: list[tuple] = []
        crashed = False
        try:
            result = fn() or result
            shard.apply(result.records, undo)
            if respond is not None and result.response is not None:
                respond.complete(result.response)
        except Exception as e:  # a bug or a broken invariant: Kafka answers UNKNOWN_SERVER_ERROR
            crashed = True
            self.last_exception = e
        finally:
            self._held.pop()
        records = result.records
        op = PendingOp(records, undo, result.on_done, held, respond, error_response)
        if crashed:
            follow_up = shard.revert(undo)
            op.callbacks = []
            self._release(op, Errors.UNKNOWN_SERVER_ERROR)
            self._run_follow_up(ctx, follow_up)
            return
        if not records and not ctx.pending and not ctx.inflight:
            self._release(op, Errors.NONE)  # nothing to wait for
            return
        ctx.pending.append(op)
        if self._append is not None:
            self.flush(ctx)
        elif self._on_pending is not None:
            self._on_pending(ctx)

    def _run_follow_up(self, ctx: PartitionContext, result: Result) -> None:
        """What a revert or a load wrote (a group back over ``group.max.size`` rebalances) is an operation."""
        if (result.records or result.on_done) and ctx.shard is not None:
            self.execute(ctx, lambda: result)

    def _release(self, op: PendingOp, error: Errors) -> None:
        for deferred, sink, value in op.held:
            if deferred is op.respond and error is not Errors.NONE and op.error_response is not None:
                # The operation answered its own request: if its records were lost, the answer is the error.
                value = op.error_response(error)
            sink(value)
        if error is Errors.UNKNOWN_SERVER_ERROR and not op.callbacks:
            self._answer_unanswered(op, error)

    @staticmethod
    def _answer_unanswered(op: PendingOp, error: Errors) -> None:
        if op.respond is not None and not op.respond.done and op.error_response is not None:
            op.respond.complete(op.error_response(error))

    # --- batches: the group-commit protocol shared by the synchronous and the actor drivers ------
    def seal_batch(self, ctx: PartitionContext) -> tuple[list[Record], list[PendingOp]] | None:
        """Close the open batch and mark it in flight; None if a batch is in flight or nothing is open."""
        if ctx.inflight or not ctx.pending:
            return None
        ops, ctx.pending = ctx.pending, []
        ctx.inflight = ops
        return [r for op in ops for r in op.records], ops

    def batch_durable(self, ctx: PartitionContext, ops: list[PendingOp]) -> None:
        ctx.inflight = None
        for op in ops:
            self._release(op, Errors.NONE)
        for op in ops:
            for cb in op.callbacks:
                self.execute(ctx, lambda cb=cb: cb(Errors.NONE))

    def batch_failed(self, ctx: PartitionContext, ops: list[PendingOp], error: Errors) -> None:
        """The batch was not appended: undo it and everything applied after it, answer their requests
        with ``error`` (already mapped to the client error) and run their callbacks with it."""
        later, ctx.pending = ctx.pending, []
        ctx.inflight = None
        failed = ops + later
        follow_up = Result()
        if ctx.shard is not None:
            for op in reversed(failed):
                follow_up.add(ctx.shard.revert(op.undo))
        for op in failed:
            self._release(op, error)
        if ctx.shard is None:
            # Unloaded meanwhile (the shard stepped down): no callback can run to give the answer it would
            # have given, so every request still unanswered gets the error itself.
            for op in failed:
                if op.respond is not None and not op.respond.done and op.error_response is not None:
                    op.respond.complete(op.error_response(error))
            return
        for op in failed:
            for cb in op.callbacks:
                self.execute(ctx, lambda cb=cb: cb(error))
            # An operation's own callback answers first, with what it knows (e.g. a replaced static member
            # gets the group's generation, protocol and leader: Kafka's CoordinatorRuntime fails the append
            # future before the write future, GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin);
            # an UNKNOWN_SERVER_ERROR that no callback answered gets the generic error response.
            if error is Errors.UNKNOWN_SERVER_ERROR and op.callbacks:
                self._answer_unanswered(op, error)
        self._run_follow_up(ctx, follow_up)

    def flush(self, ctx: PartitionContext) -> None:
        """Synchronous driver: append every open batch now."""
        while True:
            sealed = self.seal_batch(ctx)
            if sealed is None:
                return
            records, ops = sealed
            try:
                if records:
                    self._append(ctx, records)
            except AppendError as e:
                self.batch_failed(ctx, ops, map_append_error(e.error))
                continue
            self.batch_durable(ctx, ops)

    def run_timer(self, ctx: PartitionContext) -> Callable[[Callable[[], Result]], None]:
        def run(fn: Callable[[], Result]) -> None:
            if ctx.state is PartitionState.ACTIVE and ctx.shard is not None:
                self.execute(ctx, lambda: _checked(fn()))

        return run

    # ------------------------------------------------------------------------------------------
    # Load / unload (Kafka's CoordinatorRuntime.scheduleLoadOperation / scheduleUnloadOperation)
    # ------------------------------------------------------------------------------------------
    def new_shard(self, ctx: PartitionContext) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(
            ctx.partition, self.config, self.clock, self._new_timers(), self._new_member_id, self.run_timer(ctx),
            self._topics,
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
        transition(ctx, PartitionEvent.LOAD)
        ctx.shard = self.new_shard(ctx)
        return ctx

    def complete_load(self, ctx: PartitionContext) -> None:
        next_state(ctx.state, PartitionEvent.LOADED)  # refused before the shard is touched
        shard = ctx.shard
        self._held.append([])
        try:
            loaded = shard.on_loaded()
        finally:
            held = self._held.pop()
        transition(ctx, PartitionEvent.LOADED)
        for _, sink, value in held:
            sink(value)
        self._run_follow_up(ctx, loaded)

    def fail_load(self, ctx: PartitionContext) -> None:
        transition(ctx, PartitionEvent.LOAD_FAILED)
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
        self._unload_shard(ctx)
        transition(ctx, PartitionEvent.UNLOAD)
        return ctx

    def step_down(self, partition: int) -> PartitionContext:
        """This leader can no longer serve ``partition`` (deposed, or its log holds a batch it cannot vouch
        for): unload it as ``unload`` does, and stay FAILED (``NOT_COORDINATOR``) until loaded again."""
        ctx = self.contexts[partition]
        next_state(ctx.state, PartitionEvent.STEP_DOWN)  # refused before the shard is touched
        self._unload_shard(ctx)
        transition(ctx, PartitionEvent.STEP_DOWN)
        return ctx

    @staticmethod
    def _unload_shard(ctx: PartitionContext) -> None:
        if ctx.shard is not None:
            ctx.shard.on_unloaded()
        ctx.shard = None


def _checked(result: Result) -> Result:
    """A timer's step must say what it wrote: a path that forgot (None) would drop its records."""
    if not isinstance(result, Result):
        raise TypeError(f"a timer returned {type(result).__name__}, not a Result")
    return result
