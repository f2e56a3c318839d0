"""Replays a partition log into the coordinator's durable state (Kafka's ``CoordinatorLoaderImpl``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from coordinator.state import DurableState


@dataclass(frozen=True)
class LoadSummary:
    records: int
    bytes: int
    seconds: float
    bytes_dropped: int = 0


def replay(log, state: DurableState) -> LoadSummary:
    """Stream every batch of ``log`` through ``DurableState.replay``, in log order."""
    start = time.perf_counter()
    n = 0
    apply = state.replay
    for batch in log.batches(0):
        for key, value in batch.records:
            apply(key, value)
        n += len(batch.records)
    return LoadSummary(
        records=n,
        bytes=getattr(log, "size_bytes", 0),
        seconds=time.perf_counter() - start,
        bytes_dropped=getattr(log, "bytes_dropped", 0),
    )
