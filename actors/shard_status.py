"""What a shard actor reports about itself (``CoordinatorShard.status`` / ``standby_status``): for people,
the CLI, the controller's reports and the tests; its keys are part of the shard's interface."""

from __future__ import annotations

import os
import time
from collections import Counter

from raygroups.actors.log_server import ray_node_id

_IMPORTED_AT = time.time()


def new_timeline() -> dict[str, float]:
    """The start timeline of a new actor instance: when its process started, this module was imported, and
    now (the instance is constructed); the load adds its steps."""
    return {"process_started": _process_start_time(), "module_imported": _IMPORTED_AT, "constructed": time.time()}


def status(served) -> dict:
    ctx, summary, writer = served.ctx, served.load_summary, served.writer
    shard = ctx.shard
    return {
        "partition": served.partition,
        "state": ctx.state.value,
        "leader_epoch": ctx.epoch,
        "log_end_offset": None if ctx.log is None else ctx.log.log_end_offset,
        "cleaned_offset": None if ctx.log is None else ctx.log.cleaned_offset,
        "load_records": None if summary is None else summary.records,
        "load_seconds": None if summary is None else summary.seconds,
        "load_bytes_dropped": None if summary is None else summary.bytes_dropped,
        "load_error": served.load_error,
        # A promoted spare: the records its standby had not read (replayed at promotion), or why the
        # standby was not used.
        "standby_tailed": served.standby_tailed,
        "standby_refused": served.standby_refused,
        "pending_offsets": 0 if shard is None else shard.state.pending_offsets,
        "groups": 0 if shard is None else len(shard.groups),
        "groups_by_state": {} if shard is None else dict(Counter(g.state.value for g in shard.groups.values())),
        "pid": os.getpid(),
        "node": served.node,
        "ray_node_id": ray_node_id(),
        "isr": sorted(writer.replication.isr) if writer.replicated else None,
        "namespace": None if served.directory is None else served.directory.namespace,
        "topics": len(served.topics),
        "start_timeline": dict(served.timeline),
        **served.stats,
    }


def standby_status(spare) -> dict | None:
    """A spare's hot standby (None without one): the partition it stands by for (None: every partition its
    node follows) and, per partition, how far it has read."""
    if spare.standby is None:
        return None
    return {"standby_for": spare.standby_for, "partitions": spare.standby.status(), "node": spare.node,
            "pid": os.getpid()}


def _process_start_time() -> float | None:
    try:
        import psutil  # Ray's own dependency

        return psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - a figure for people, not needed to serve
        return None
