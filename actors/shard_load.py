"""Loading a shard's partition: become its leader, open its log, replay it (or continue a promoted
spare's standby), then serve; the offsets left pending by the lazy replay become objects in the
background.

Lifecycle (``coordinator.lifecycle``): LOADING while this runs, ACTIVE once the log is replayed, FAILED
if it cannot be read (the shard stays unavailable rather than serve partial state). On a restart Ray
re-runs the actor's constructor; the new instance loads again and serves with a leader epoch above every
epoch in the log, and the file lock on the partition directory keeps a second writer out.
"""

from __future__ import annotations

import asyncio
import logging
import time

from raygroups.actors import spare
from raygroups.actors.log_server import ray_actor_id, ray_node_id
from raygroups.actors.partition_writer import ReplicatedWriter
from raygroups.actors.replication import LeaderReplication
from raygroups.actors.standby import Standby
from raygroups.coordinator.lifecycle import PartitionState
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log import CorruptLogError, LogLockedError, open_log, replay
from raygroups.offsets_log.replica_state import partition_dir

log = logging.getLogger(__name__)
LOCK_WAIT_S = 30.0
MATERIALIZE_SLICE = 4_000  # pending offsets turned into objects per event-loop turn after a lazy load


def open_partition_log(served):
    """The partition's log, once the previous instance of this shard (still exiting) released its lock."""
    path = partition_dir(served.data_dir, served.partition)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            return open_log(
                path,
                segment_bytes=served.config.offsets_topic_segment_bytes,
                fsync_interval_ms=served.config.log_flush_interval_ms or None,
            )
        except LogLockedError:
            # A previous instance of this shard is still exiting; its lock goes with its process.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


async def load(served, standby: Standby | None) -> None:
    """Load ``served``'s partition; a promoted spare's ``standby`` is continued if it matches the log.
    Never raises: a failed load leaves the partition FAILED and ``served.load_error`` set."""
    runtime, partition = served.runtime, served.partition
    ctx = runtime.begin_load(partition, served.leader_epoch)
    mark = served.timeline.setdefault
    mark("load_started", time.time())
    try:
        if served.replicated:
            config, directory = served.config, served.directory
            served.writer = ReplicatedWriter(LeaderReplication(
                partition, served.node, directory.controller(), directory.log_server,
                config.min_insync_replicas, config.replica_lag_time_max_ms, ray_node_id(),
                ray_actor_id(), config.shard_session_timeout_ms,
            ))
        ctx.epoch = await served.writer.start(ctx.epoch)
        mark("leader_granted", time.time())
        plog = await served.run_io(open_partition_log, served)
        ctx.epoch = served.writer.opened(plog)
        ctx.log = plog
        mark("log_opened", time.time())
        # Lazily: the surviving offsets stay as the log's records until the background turns them into
        # objects (or a request needs one), so the shard serves once the log is read.
        taken, standby = standby, None
        promoted = await spare.promote(served, taken, plog)
        if promoted is not None:
            served.load_summary, ctx.shard.state = promoted
        else:
            served.load_summary = await served.run_io(replay, plog, ctx.shard.state, True)
        served.metrics.on_load(served.load_summary)
        mark("replayed", time.time())
        await served.writer.loaded(plog, served.run_io)
        mark("isr_reconciled", time.time())
        if served.directory is not None:
            # Topic metadata lives in the GCS; a restarted instance must not forget it.
            served.topics = await served.run_io(served.directory.topics)
        runtime.complete_load(ctx)
        mark("active", time.time())
        log.info("shard %d loaded %s at epoch %d", partition, served.load_summary, ctx.epoch)
        asyncio.get_running_loop().create_task(materialize_offsets(served, ctx.shard.state))
    except Exception as e:  # a corrupt or unreadable log: stay unavailable rather than serve partial state
        if standby is not None:  # failed before the promotion took it: the standbys go
            standby.stop()
        served.load_error = f"{type(e).__name__}: {e}"
        log.error("shard %d failed to load: %s", partition, served.load_error)
        runtime.fail_load(ctx)


async def materialize_offsets(served, state: DurableState) -> None:
    """Turn the offsets the load left pending into objects, a slice per event-loop turn, while the shard
    serves; a record that cannot be decoded fails the partition as a failed load would."""
    try:
        while state.pending_offsets and served.ctx.state is PartitionState.ACTIVE:
            state.materialize(MATERIALIZE_SLICE)
            await asyncio.sleep(0)
    except CorruptLogError as e:  # a record that passed its CRC but cannot be decoded: as a failed load
        served.load_error = f"{type(e).__name__}: {e}"
        log.error("shard %d failed to load: %s", served.partition, served.load_error)
        served.step_down(served.load_error)
        return
    served.timeline.setdefault("offsets_materialized", time.time())
