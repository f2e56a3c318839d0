"""An in-memory partition log with the same contract as the file log, for tests and ``log_dir=None``.

Guarantees: append is atomic (a batch is either wholly in the log or not at all), offsets are dense
and increasing, a stale leader epoch is refused. Nothing survives the process.
"""

from __future__ import annotations

from collections.abc import Iterator

from offsets_log.batch import Batch
from offsets_log.errors import NonMonotonicAppendError, StaleEpochError


class InMemoryLog:
    def __init__(self) -> None:
        self._batches: list[Batch] = []
        self._log_end_offset = 0
        self._latest_epoch = -1

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def latest_epoch(self) -> int:
        return self._latest_epoch

    def append(self, batch: Batch, expected_leader_epoch: int) -> int:
        if expected_leader_epoch < self._latest_epoch or batch.leader_epoch != expected_leader_epoch:
            raise StaleEpochError(
                f"append with leader epoch {expected_leader_epoch} refused: this log has seen epoch "
                f"{self._latest_epoch} (batch epoch {batch.leader_epoch})"
            )
        if batch.base_offset != self._log_end_offset:
            raise NonMonotonicAppendError(
                f"batch base offset {batch.base_offset} is not the log end offset {self._log_end_offset}"
            )
        if not batch.records:
            raise ValueError("an empty batch cannot be appended")
        self._batches.append(batch)
        self._latest_epoch = batch.leader_epoch
        self._log_end_offset = batch.next_offset
        return batch.last_offset

    def batches(self, from_offset: int = 0) -> Iterator[Batch]:
        for batch in list(self._batches):
            if batch.next_offset > from_offset:
                yield batch

    def truncate_to(self, offset: int) -> None:
        kept = [b for b in self._batches if b.next_offset <= offset]
        if kept and kept[-1].next_offset != offset and offset < self._log_end_offset:
            raise ValueError(f"offset {offset} is inside a batch; truncate at a batch boundary")
        self._batches = kept
        self._log_end_offset = kept[-1].next_offset if kept else 0
        self._latest_epoch = kept[-1].leader_epoch if kept else -1

    def close(self) -> None:
        pass
