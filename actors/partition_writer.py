"""How a shard makes a batch of records durable: one ``PartitionWriter`` interface with a local
implementation (a single copy: append + fsync, the embedded default) and a replicated one (acks=all to the
ISR through ``LeaderReplication``), and the one table that turns any failure of an append into the error
Kafka's replica manager would return and says whether the shard may keep serving.

The shard actor runs the same steps whichever writer it has: ``start`` (the leader epoch to serve at),
``opened`` (checked against the log's own epochs), ``loaded`` (after replay, before serving), then
``append`` per batch, ``may_serve`` per request and ``maintain`` in the background (``maintenance_loop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from raygroups.actors.replication import Deposed, LeaderReplication, maintenance_interval_s
from raygroups.actors.timers import WallClock
from raygroups.coordinator.errors import AppendError, Errors
from raygroups.coordinator.lifecycle import PartitionState
from raygroups.offsets_log.batch import Batch
from raygroups.offsets_log.errors import LogError, StaleEpochError
from raygroups.offsets_log.leader import append_as_leader

log = logging.getLogger(__name__)

RunIO = Callable[..., Awaitable[Any]]
_CLOCK = WallClock()  # a batch's timestamp


class AppendFailed(Exception):
    """An append that did not happen: ``error`` is what Kafka's replica manager would return (the
    coordinator maps it to the client's error with ``map_append_error``); ``step_down`` says this instance
    can no longer serve the partition (a newer leader exists, or its log holds a batch it cannot vouch for)."""

    def __init__(self, error: Errors, step_down: bool, detail: str = "") -> None:
        super().__init__(f"append failed with {error.name}" + (f": {detail}" if detail else ""))
        self.error = error
        self.step_down = step_down


def append_failure(exc: BaseException, *, replicated: bool) -> AppendFailed:
    """The one table of append failures (Kafka's ``ReplicaManager.appendRecords`` errors):

    ====================================================  ===========================  =========
    failure                                               error                        step down
    ====================================================  ===========================  =========
    a newer leader epoch (stale epoch, deposed, fenced)   NOT_LEADER_OR_FOLLOWER       yes
    too few in-sync replicas, refused before the append   NOT_ENOUGH_REPLICAS          no
    the storage failed (log error, I/O error)             KAFKA_STORAGE_ERROR          replicated
    anything else                                         UNKNOWN_SERVER_ERROR, or     replicated
                                                          KAFKA_STORAGE_ERROR if
                                                          replicated
    ====================================================  ===========================  =========

    A replicated leader steps down on any failure after the local append: its log may now hold a batch
    it never acknowledged, so the controller moves the partition to a replica that can vouch for its log.
    """
    if isinstance(exc, AppendFailed):
        return exc
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, Deposed | StaleEpochError):
        return AppendFailed(Errors.NOT_LEADER_OR_FOLLOWER, True, detail)
    if isinstance(exc, AppendError):
        return AppendFailed(exc.error, replicated or exc.error is Errors.NOT_LEADER_OR_FOLLOWER, detail)
    if isinstance(exc, LogError | OSError):
        return AppendFailed(Errors.KAFKA_STORAGE_ERROR, replicated, detail)
    return AppendFailed(Errors.KAFKA_STORAGE_ERROR if replicated else Errors.UNKNOWN_SERVER_ERROR, replicated, detail)


class PartitionWriter:
    """The write side of one partition's leader. ``epoch`` is the leader epoch batches are written at."""

    replicated = False
    epoch: int

    async def start(self, requested_epoch: int) -> int:
        """Before the log is opened: the leader epoch to serve at."""
        raise NotImplementedError

    def opened(self, partition_log) -> int:
        """The log is open: the epoch to serve at, given the epochs the log has seen."""
        raise NotImplementedError

    async def loaded(self, partition_log, run_io: RunIO) -> None:
        """The log is replayed; the shard serves once this returns."""

    def may_serve(self) -> bool:
        """Whether a request may be answered from this leader's state right now."""
        return True

    async def append(self, partition_log, records: list, run_io: RunIO) -> None:
        """Make ``records`` one durable batch at the log end, or raise ``AppendFailed``."""
        raise NotImplementedError

    async def maintain(self, partition_log, run_io: RunIO) -> None:
        """One background round (replicated: confirm leadership, catch followers up); raises
        ``AppendFailed`` with ``step_down`` when this leader was deposed."""

    def stop(self) -> None:
        """This leader stepped down: stop any background work (replicated: the followers' catch-up)."""

    def between_appends(self) -> contextlib.AbstractAsyncContextManager:
        """Held, no append is in flight: every closed segment holds acknowledged batches only."""
        return contextlib.nullcontext()

    async def swap_followers(self, store_uri: str, staged: str, outputs: list, accepted: dict,
                             timeout_s: float) -> dict[str, dict]:
        """Bring the followers along on a compaction swap the leader made; each one's answer, by node."""
        return {}


class LocalWriter(PartitionWriter):
    """A single copy on this node's disk (the embedded default): append and fsync on the I/O thread."""

    def __init__(self, partition: int = -1) -> None:
        self.partition = partition

    async def start(self, requested_epoch: int) -> int:
        self.epoch = requested_epoch
        return self.epoch

    def opened(self, partition_log) -> int:
        # Serve with an epoch above every epoch this log has seen, so an older writer is fenced.
        self.epoch = max(self.epoch, partition_log.latest_epoch + 1)
        return self.epoch

    async def append(self, partition_log, records: list, run_io: RunIO) -> None:
        try:
            await run_io(append_as_leader, partition_log, records, self.epoch, _CLOCK.now_ms())
        except Exception as e:  # noqa: BLE001 - every failure goes through the one table
            if not isinstance(e, AppendError):
                log.exception("append failed on partition %d", self.partition)
            raise append_failure(e, replicated=False) from e


class ReplicatedWriter(PartitionWriter):
    """acks=all to the ISR the controller names (``LeaderReplication``), with a leadership lease."""

    replicated = True

    def __init__(self, replication: LeaderReplication) -> None:
        self.replication = replication
        self.epoch = -1

    async def start(self, requested_epoch: int) -> int:
        # The controller fences the followers at a fresh epoch before this instance serves.
        self.epoch = await self.replication.start()
        return self.epoch

    def opened(self, partition_log) -> int:
        if partition_log.latest_epoch > self.epoch:
            raise RuntimeError(f"local replica has epoch {partition_log.latest_epoch} above the granted {self.epoch}")
        return self.epoch

    async def loaded(self, partition_log, run_io: RunIO) -> None:
        await self.replication.reconcile_isr(partition_log, run_io)

    def may_serve(self) -> bool:
        # Leadership not confirmed lately (e.g. this process was paused): answer nothing from our state
        # until the maintenance round confirms it, or steps down.
        return self.replication.lease_valid()

    async def append(self, partition_log, records: list, run_io: RunIO) -> None:
        def batch_for(epoch: int) -> Batch:
            return Batch(partition_log.log_end_offset, epoch, _CLOCK.now_ms(), tuple(records))

        async def append_local(batch: Batch) -> None:
            await run_io(partition_log.append, batch, batch.leader_epoch)

        async def truncate_local(offset: int) -> None:
            await run_io(partition_log.truncate_to, offset)

        try:
            error = await self.replication.replicate(append_local, truncate_local, batch_for)
        except Exception as e:  # noqa: BLE001 - every failure goes through the one table
            if not isinstance(e, Deposed):
                log.exception("append failed on partition %d", self.replication.partition)
            raise append_failure(e, replicated=True) from e
        finally:
            self.epoch = self.replication.epoch  # renewed after a batch that had to be truncated
        if error is not Errors.NONE:
            raise AppendFailed(error, False, "refused before the append")

    def between_appends(self) -> contextlib.AbstractAsyncContextManager:
        return self.replication.lock

    async def swap_followers(self, store_uri: str, staged: str, outputs: list, accepted: dict,
                             timeout_s: float) -> dict[str, dict]:
        return await self.replication.swap_followers(store_uri, staged, outputs, accepted, timeout_s)

    def stop(self) -> None:
        self.replication.stop_catch_up()

    async def maintain(self, partition_log, run_io: RunIO) -> None:
        try:
            await self.replication.maintain(partition_log, run_io)
        except Deposed as e:
            raise append_failure(e, replicated=True) from e


async def maintenance_loop(served) -> None:
    """The writer's background upkeep while ``served``'s partition is ACTIVE (replicated deployments: confirm
    leadership, catch followers up), every ``maintenance_interval_s``; a deposed leader steps down. The first
    round runs as soon as the partition is served, not an interval later: a new leader starts catching up the
    replicas its election left out of the ISR (the previous leader's among them) at once, so that the
    partition has a standby again before the next fault -- three leaders killed 1.3 s apart (a leader flap)
    otherwise left one in-sync replica, restarted in place in 2-3 s instead of failed over in under 1 s."""
    while served.ctx.state is not PartitionState.FAILED:
        if served.ctx.state is PartitionState.ACTIVE:
            try:
                await served.writer.maintain(served.ctx.log, served.run_io)
            except AppendFailed as e:
                served.step_down(str(e))
            except Exception:  # noqa: BLE001 - try again next round
                log.exception("replica maintenance failed on shard %d", served.partition)
        await asyncio.sleep(maintenance_interval_s(served.config.shard_session_timeout_ms))
