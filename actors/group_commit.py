"""Group commit: the shard actor's flusher (the asynchronous driver of ``CoordinatorRuntime``'s batches).

A request runs the pure core at once (its records replayed speculatively) and joins the open batch; one
batch is appended at a time on the I/O thread (the fsync off the event loop) while the next one
accumulates. Responses are released only when their batch, and every earlier one, is durable, so a read
never sees an effect that might be lost. If an append fails, that batch and everything after it are
undone and answered with Kafka's mapped error; a failure after which this leader cannot vouch for its log
steps it down.
"""

from __future__ import annotations

import time

from raygroups.actors.partition_writer import AppendFailed
from raygroups.coordinator.errors import Errors, map_append_error


async def flush_loop(served) -> None:
    """Append ``served``'s batches as they are sealed, forever (woken by ``served.wakeup``)."""
    runtime, ctx, stats = served.runtime, served.ctx, served.stats
    while True:
        await served.wakeup.wait()
        served.wakeup.clear()
        while True:
            sealed = runtime.seal_batch(ctx)
            if sealed is None:
                break
            records, ops = sealed
            error = Errors.NONE
            if records:
                started = time.monotonic()
                try:
                    await served.writer.append(ctx.log, records, served.run_io)
                except AppendFailed as e:
                    error = map_append_error(e.error)
                    if e.step_down:
                        served.step_down(str(e))
                finally:
                    ctx.epoch = served.writer.epoch
                served.metrics.on_append(len(records), time.monotonic() - started, error is Errors.NONE)
            if error is Errors.NONE:
                stats["batches"] += 1
                stats["records"] += len(records)
                runtime.batch_durable(ctx, ops)
            else:
                stats["append_failures"] += 1
                runtime.batch_failed(ctx, ops, error)
