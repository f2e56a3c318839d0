"""``ServedPartition``: what the parts of a shard actor share about the one partition it serves.

The runtime and the partition's context, the writer that makes batches durable, the single I/O thread,
the metrics, and what ``status()`` reports (the start timeline, batch counters, the load's outcome). The
parts (``shard_load``, ``group_commit``, ``partition_writer.maintenance_loop``, ``audit``,
``log_compaction``, ``shard_status``) each take it; the step-down happens here, once.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from raygroups.actors.member_ids import new_member_id
from raygroups.actors.metrics import ShardMetrics
from raygroups.actors.partition_writer import LocalWriter, PartitionWriter
from raygroups.actors.timers import AsyncioTimers, WallClock
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.lifecycle import PartitionState
from raygroups.coordinator.runtime import CoordinatorRuntime

log = logging.getLogger(__name__)


class ServedPartition:
    """One partition as this process serves it. Not a guarantee of leadership: the writer says whether
    this instance may serve (``may_serve``), and a step-down leaves the partition FAILED for good."""

    def __init__(self, partition: int, num_partitions: int, config: CoordinatorConfig, data_dir: str,
                 leader_epoch: int, topics: dict[str, int] | None, directory: Any, replicated: bool,
                 node: str | None, timeline: dict[str, float]) -> None:
        self.partition = partition
        self.config = config
        self.data_dir = data_dir
        self.leader_epoch = leader_epoch  # asked for; the writer decides the one served at
        self.topics: dict[str, int] = dict(topics or {})
        # Finds the deployment's controller, LogServers and topics (the Ray seam's ``Directory``; None
        # outside Ray).
        self.directory = directory
        self.replicated = replicated  # the controller names the leader and the ISR
        self.node = node  # the stable name of the node this shard runs on (replicated deployments)
        self.io = ThreadPoolExecutor(1, thread_name_prefix=f"shard-{partition}-io")
        self.wakeup: asyncio.Event | None = None  # set when a batch is open (``group_commit``)
        self.runtime = CoordinatorRuntime(
            num_partitions, config, WallClock(), AsyncioTimers, new_member_id,
            append=None, on_pending=self._on_pending, topics=lambda: self.topics,
        )
        self.ctx = self.runtime.contexts[partition]
        self.writer: PartitionWriter = LocalWriter(partition)  # a ReplicatedWriter replaces it at load
        self.metrics = ShardMetrics(partition, node, None if directory is None else directory.namespace)
        self.timeline = timeline
        self.stats = {"batches": 0, "records": 0, "append_failures": 0}
        self.load_summary = None
        self.load_error: str | None = None
        # A promoted spare: the records its standby had not read (replayed at promotion), or why the
        # standby was not used.
        self.standby_tailed: int | None = None
        self.standby_refused: str | None = None

    @property
    def active(self) -> bool:
        return self.ctx.state is PartitionState.ACTIVE

    @property
    def failed(self) -> bool:
        return self.ctx.state is PartitionState.FAILED

    def _on_pending(self, ctx) -> None:
        self.wakeup.set()

    async def run_io(self, fn, *args):
        """``fn(*args)`` on the partition's I/O thread (appends, replay, compaction: one at a time)."""
        return await asyncio.get_running_loop().run_in_executor(self.io, fn, *args)

    def step_down(self, reason: str) -> None:
        """Stop serving for good (deposed, or the log cannot be vouched for): groups Dead, parked requests
        answered NOT_COORDINATOR, FAILED so the controller's pings see it; the log stays open until the
        controller kills this actor."""
        if self.ctx.state is not PartitionState.FAILED:
            log.warning("shard %d steps down: %s", self.partition, reason)
            self.runtime.step_down(self.partition)
            self.writer.stop()
