"""A record batch: the unit of append, replication and fsync.

A batch written by a coordinator is dense: record ``i`` has offset ``base_offset + i``. A batch written by
the compactor keeps the offsets of the records that survived (``offset_deltas``) and the span of the
batches it replaces (``last_offset_delta``, as Kafka's batch header does), so a compacted log covers
exactly the same offsets as the original and may hold batches with no records at all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from raygroups.coordinator.records import Record
from raygroups.offsets_log.errors import NonMonotonicAppendError, StaleEpochError


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    leader_epoch: int
    timestamp_ms: int
    records: tuple[Record, ...]
    offset_deltas: tuple[int, ...] | None = None  # None: dense
    last_offset_delta: int | None = None  # None: len(records) - 1

    def __post_init__(self) -> None:
        if not isinstance(self.records, tuple):
            object.__setattr__(self, "records", tuple(self.records))
        deltas = self.offset_deltas
        if deltas is None and self.last_offset_delta is not None and self.last_offset_delta != len(self.records) - 1:
            deltas = tuple(range(len(self.records)))
        if deltas is not None:
            deltas = tuple(deltas)
            n = len(self.records)
            last = self.last_offset_delta if self.last_offset_delta is not None else (deltas[-1] if deltas else -1)
            if len(deltas) != n:
                raise ValueError(f"offset_deltas has {len(deltas)} entries for {n} records")
            if any(d < 0 for d in deltas[:1]) or any(a >= b for a, b in zip(deltas, deltas[1:], strict=False)):
                raise ValueError("offset_deltas must be non-negative and strictly increasing")
            if deltas and last < deltas[-1]:
                raise ValueError(f"last_offset_delta {last} is below the last record's delta {deltas[-1]}")
            if last < 0:
                raise ValueError("a batch must span at least one offset")
            if deltas == tuple(range(n)) and last == n - 1:
                deltas, last = None, None  # dense after all: one representation per batch
            object.__setattr__(self, "offset_deltas", deltas)
            object.__setattr__(self, "last_offset_delta", last)

    @property
    def last_offset(self) -> int:
        if self.last_offset_delta is not None:
            return self.base_offset + self.last_offset_delta
        return self.base_offset + len(self.records) - 1

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    def record_offsets(self) -> Iterator[int]:
        if self.offset_deltas is None:
            return iter(range(self.base_offset, self.base_offset + len(self.records)))
        return (self.base_offset + d for d in self.offset_deltas)


def check_append(batch: Batch, expected_leader_epoch: int, latest_epoch: int, log_end_offset: int) -> None:
    """The contract every partition log enforces before an append: the writer's epoch is not stale and is
    the batch's, the batch starts at the log end, and it is not empty (unless it is a compacted batch that
    holds only its offsets)."""
    if expected_leader_epoch < latest_epoch or batch.leader_epoch != expected_leader_epoch:
        raise StaleEpochError(
            f"append with leader epoch {expected_leader_epoch} refused: this log has seen epoch "
            f"{latest_epoch} (batch epoch {batch.leader_epoch})"
        )
    if batch.base_offset != log_end_offset:
        raise NonMonotonicAppendError(
            f"batch base offset {batch.base_offset} is not the log end offset {log_end_offset}"
        )
    if not batch.records and batch.last_offset_delta is None:
        # A compacted batch may hold no record, only its offsets (a follower copies it from its leader).
        raise ValueError("an empty batch cannot be appended")


def records_below(log, up_to_offset: int | None = None) -> list[Record]:
    """The records (key, value) of ``log`` in log order, those at offsets below ``up_to_offset`` only."""
    return [
        rec
        for batch in log.batches(0)
        for offset, rec in zip(batch.record_offsets(), batch.records, strict=True)
        if up_to_offset is None or offset < up_to_offset
    ]


def epoch_runs(log, up_to_offset: int | None = None, from_offset: int = 0) -> list[list]:
    """The log's batches from ``from_offset`` and below ``up_to_offset`` grouped by leader epoch, in log order:
    ``[epoch, first offset, next offset, SHA-256 of the batches]`` per run. Two replicas written by one leader
    per epoch have equal runs over their common prefix; a chaos run's audit compares them, from where the
    replicas' compacted prefixes end (below it, each holds a version of the segments that a compaction run
    proved to replay to the same state, not necessarily the same batches)."""
    runs: list[list] = []
    digest = None
    for batch in log.batches(0):
        if up_to_offset is not None and batch.last_offset >= up_to_offset:
            break
        if batch.base_offset < from_offset:
            continue
        if not runs or runs[-1][0] != batch.leader_epoch:
            if digest is not None:
                runs[-1][3] = digest.hexdigest()
            digest = hashlib.sha256()
            runs.append([batch.leader_epoch, batch.base_offset, batch.next_offset, ""])
        runs[-1][2] = batch.next_offset
        digest.update(repr((batch.base_offset, batch.timestamp_ms, batch.records, batch.offset_deltas,
                            batch.last_offset_delta)).encode())
    if digest is not None:
        runs[-1][3] = digest.hexdigest()
    return runs
