"""An in-memory partition log with the same contract as the file log, for tests and ``log_dir=None``.

Guarantees: append is atomic (a batch is either wholly in the log or not at all), offsets are dense
and increasing, a stale leader epoch is refused. Nothing survives the process.
"""

from __future__ import annotations

from collections.abc import Iterator

from raygroups.coordinator.checks import is_int
from raygroups.offsets_log.batch import Batch, check_append
from raygroups.offsets_log.codec import encode_batch
from raygroups.offsets_log.epochs import EpochEndOffset, LeaderEpochCache
from raygroups.offsets_log.errors import OffsetOutOfRangeError


class InMemoryLog:
    def __init__(self) -> None:
        self._batches: list[Batch] = []
        self._sizes: list[int] = []
        self._log_end_offset = 0
        self._epochs = LeaderEpochCache()

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def log_start_offset(self) -> int:
        return 0

    @property
    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch

    @property
    def size_bytes(self) -> int:
        return sum(self._sizes)

    @property
    def bytes_dropped(self) -> int:
        return 0

    def append(self, batch: Batch, expected_leader_epoch: int) -> int:
        check_append(batch, expected_leader_epoch, self._epochs.latest_epoch, self._log_end_offset)
        size = len(encode_batch(batch))  # also refuses records the file log could not store
        self._batches.append(batch)
        self._sizes.append(size)
        self._epochs.assign(batch.leader_epoch, batch.base_offset)
        self._log_end_offset = batch.next_offset
        return batch.last_offset

    def batches(self, from_offset: int = 0) -> Iterator[Batch]:
        for batch in list(self._batches):
            if batch.next_offset > from_offset:
                yield batch

    def read(self, from_offset: int, max_bytes: int) -> list[Batch]:
        """Batches from the one holding ``from_offset``, at most ``max_bytes`` of frames (at least one batch)."""
        if not is_int(max_bytes) or max_bytes < 1:
            raise ValueError(f"max_bytes must be an int >= 1, got {max_bytes!r}")
        if not 0 <= from_offset <= self._log_end_offset:
            raise OffsetOutOfRangeError(f"offset {from_offset} is outside the log [0, {self._log_end_offset}]")
        out: list[Batch] = []
        total = 0
        for batch, size in zip(self._batches, self._sizes, strict=True):
            if batch.next_offset <= from_offset:
                continue
            if out and total + size > max_bytes:
                break
            out.append(batch)
            total += size
        return out

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        return self._epochs.end_offset_for(epoch, self._log_end_offset)

    def truncate_to(self, offset: int) -> None:
        if not 0 <= offset <= self._log_end_offset:
            raise OffsetOutOfRangeError(f"cannot truncate to {offset}: outside the log [0, {self._log_end_offset}]")
        n = sum(1 for b in self._batches if b.next_offset <= offset)
        if offset != (self._batches[n - 1].next_offset if n else 0):
            raise ValueError(f"offset {offset} is inside a batch; truncate at a batch boundary")
        del self._batches[n:]
        del self._sizes[n:]
        self._log_end_offset = offset
        self._epochs.truncate_from_end(offset)

    def close(self) -> None:
        pass
