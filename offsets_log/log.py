"""The file-backed partition log: segments, sparse indexes, leader-epoch checkpoint, recovery, one writer.

Guarantees:

* ``append`` returns only after the batch is written and the durability policy is met (fsync of every
  batch by default; with ``fsync_interval_ms`` at most that much acknowledged data can be lost in a
  machine crash, as with Kafka's ``flush.ms``). A failed append (disk full, any ``OSError``) removes
  its partial bytes, acknowledges nothing and leaves the log usable; if even that removal fails, the log
  refuses every further operation (``LogFailedError``) until it is reopened, which repairs the tail.
* On open, a torn or CRC-failing tail of the last segment is truncated to the last whole batch and
  reported (``bytes_dropped``, ``recovery_report``, a warning in the ``offsets_log`` logger). Anything
  else that is wrong (a bad batch before the tail, a missing segment, offsets that do not increase) raises
  ``CorruptLogError`` naming the file and byte position, and no file is modified.
* Every read verifies the CRC of every batch it returns; a damaged closed segment raises
  ``CorruptLogError`` at the latest when the loader reaches it (``verify()`` checks everything up front).
* ``replace_segments`` swaps compacted segments in all or none, also across a crash (``cleaning``).
* One writer per directory: a second ``open_log`` on the same directory fails with ``LogLockedError``
  until the first is closed (``fcntl.flock`` on ``.lock``; the lock dies with the process).
* Every ``open_log`` of a directory counts, durably, one more *open generation* (``open_generation``):
  whoever saw the log at generation g knows, from generation g + 1, that exactly one opener came since --
  what a hot standby's promotion checks (``actors.standby``).

Operations are serialized by a lock, so an append may run in a worker thread while the event loop reads;
a read sees the log as it was when it started. Not guaranteed: consistent reads across a concurrent
``truncate_to`` or ``replace_segments`` (they may fail with ``CorruptLogError``; retry them), surviving
damage to closed segments that reads have not reached yet, durability on file systems that lie about fsync.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from raygroups.coordinator.checks import is_int
from raygroups.offsets_log.batch import Batch, check_append
from raygroups.offsets_log.cleaning import (
    SWAP_MARKER,
    SWAP_SUFFIX,
    write_cleaner_checkpoint,
    write_swap_marker,
)
from raygroups.offsets_log.codec import (
    RecordFormatError,
    batch_from_raw,
    encode_batch,
    payload_span,
    unpack_payload,
)
from raygroups.offsets_log.epochs import EpochEndOffset, LeaderEpochCache, checkpoint_path, write_checkpoint
from raygroups.offsets_log.errors import (
    CorruptLogError,
    LogError,
    LogFailedError,
    LogFullError,
    LogLockedError,
    LogWriteError,
    OffsetOutOfRangeError,
)
from raygroups.offsets_log.fsutil import atomic_write, fsync_dir
from raygroups.offsets_log.index import DEFAULT_INDEX_INTERVAL_BYTES, OffsetIndex
from raygroups.offsets_log.recovery import recover
from raygroups.offsets_log.segment import Segment, index_name, iter_frames, scan_segment, segment_name

logger = logging.getLogger("raygroups.offsets_log")

MIN_SEGMENT_BYTES = 1024
DEFAULT_SEGMENT_BYTES = 100 * 1024 * 1024
LOCK_FILE = ".lock"
OPEN_GENERATION_FILE = "open-generation"


def locked(method):
    """Run the method under ``self._lock``."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


@dataclass
class RecoveryReport:
    """What ``open_log`` found and did."""

    segments: int = 0
    last_segment: str = ""
    bytes_dropped: int = 0
    torn_reason: str | None = None
    rebuilt_indexes: list[str] = field(default_factory=list)
    epoch_checkpoint_repaired: bool = False
    removed_temporary_files: list[str] = field(default_factory=list)
    finished_swap: list[int] | None = None  # base offsets of an interrupted compacted-segment swap it finished


def open_log(
    directory: str | os.PathLike,
    *,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    fsync_interval_ms: int | None = None,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    write_for_testing: Callable[[int, bytes], int] | None = None,
    fsync_for_testing: Callable[[int], None] | None = None,
) -> FileLog:
    """Open (creating if needed) the partition log in ``directory``, recovering its tail."""
    if not is_int(segment_bytes) or segment_bytes < MIN_SEGMENT_BYTES:
        raise ValueError(f"segment_bytes must be an int >= {MIN_SEGMENT_BYTES}, got {segment_bytes!r}")
    if fsync_interval_ms is not None and (
        not is_int(fsync_interval_ms) or fsync_interval_ms < 0
    ):
        raise ValueError(f"fsync_interval_ms must be None (fsync every batch) or an int >= 0, got {fsync_interval_ms!r}")
    if not is_int(index_interval_bytes) or index_interval_bytes < 1:
        raise ValueError(f"index_interval_bytes must be an int >= 1, got {index_interval_bytes!r}")
    log = FileLog(
        os.fspath(directory),
        segment_bytes=segment_bytes,
        fsync_interval_ms=fsync_interval_ms,
        index_interval_bytes=index_interval_bytes,
        write_for_testing=write_for_testing,
        fsync_for_testing=fsync_for_testing,
    )
    try:
        log._recover()
        log._count_open()
    except BaseException:
        log._release()
        raise
    return log


class FileLog:
    """Create with ``open_log``. Same contract as ``InMemoryLog``, persisted; see the module docstring."""

    def __init__(
        self,
        directory: str,
        *,
        segment_bytes: int,
        fsync_interval_ms: int | None,
        index_interval_bytes: int,
        write_for_testing: Callable[[int, bytes], int] | None,
        fsync_for_testing: Callable[[int], None] | None,
    ) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.fsync_interval_ms = fsync_interval_ms
        self._index_interval_bytes = index_interval_bytes
        self._write = write_for_testing or os.write
        self._fsync = fsync_for_testing or os.fsync
        self._segments: list[Segment] = []
        self._epochs = LeaderEpochCache()
        self._active_fd = -1
        self._lock_fd = -1
        self._last_fsync_s = time.monotonic()
        self._unsynced = False
        self._failed: str | None = None
        self._closed = False
        self.cleaned_offset = 0  # end of the compacted prefix (the cleaner checkpoint)
        self.open_generation = 0  # how many times the directory was opened, this time included
        self._lock = threading.RLock()
        self.recovery_report = RecoveryReport()
        os.makedirs(directory, exist_ok=True)
        self._lock_fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise LogLockedError(
                f"offsets log {directory} is already open by another writer (lock {LOCK_FILE} held); "
                f"close it first"
            ) from e

    # ------------------------------------------------------------------------------------ properties

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    @property
    def bytes_dropped(self) -> int:
        return self.recovery_report.bytes_dropped

    @property
    def epoch_entries(self) -> list[tuple[int, int]]:
        return list(self._epochs.entries)

    @property
    def active_segment_size(self) -> int:
        """Valid bytes of the active (last) segment: its file may hold an unfinished write past them."""
        return self._segments[-1].size_bytes

    def segment_paths(self, *, closed_only: bool = False) -> list[str]:
        segs = self._segments[:-1] if closed_only else self._segments
        return [s.path for s in segs]

    @locked
    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        """Kafka's OffsetsForLeaderEpoch answer: the largest epoch <= ``epoch`` and where it ended."""
        self._check_usable()
        return self._epochs.end_offset_for(epoch, self.log_end_offset)

    # ---------------------------------------------------------------------------------------- append

    @locked
    def append(self, batch: Batch, expected_leader_epoch: int) -> int:
        self._check_usable()
        latest = self._epochs.latest_epoch
        check_append(batch, expected_leader_epoch, latest, self.log_end_offset)
        data = encode_batch(batch)
        seg = self._segments[-1]
        if seg.size_bytes > 0 and seg.size_bytes + len(data) > self.segment_bytes:
            self._roll()
            seg = self._segments[-1]
        pos = seg.size_bytes
        try:
            self._write_all(data)
        except OSError as e:
            self._undo_write(seg, pos, e)
            raise self._write_error(e, "append") from e
        try:
            if self.fsync_interval_ms is None:
                self._fsync(self._active_fd)
            else:
                self._unsynced = True
                self._maybe_fsync()
        except OSError as e:
            self._undo_write(seg, pos, e)
            if self.fsync_interval_ms is not None:
                # Earlier batches were acknowledged unsynced and may be gone from the page cache with
                # this failure (a retried fsync would wrongly succeed): only a reopen tells what is left.
                self._failed = f"fsync failed ({e}); unsynced acknowledged batches may be lost"
            raise self._write_error(e, "append (fsync)") from e
        if batch.leader_epoch > latest:
            self._epochs.assign(batch.leader_epoch, batch.base_offset)
            try:
                write_checkpoint(checkpoint_path(self.directory), self._epochs.entries)
            except OSError as e:
                self._epochs.entries.pop()
                self._undo_write(seg, pos, e)
                raise self._write_error(e, "leader-epoch checkpoint update") from e
        seg.index.maybe_add(batch.base_offset, pos)
        seg.size_bytes = pos + len(data)
        seg.next_offset = batch.next_offset
        return batch.last_offset

    @locked
    def flush(self) -> None:
        """fsync whatever the interval policy has not synced yet."""
        self._check_usable()
        if self._unsynced:
            try:
                self._fsync(self._active_fd)
            except OSError as e:
                # Unsynced acknowledged data may be gone from the page cache: only a reopen can tell.
                self._failed = f"fsync failed ({e})"
                raise self._write_error(e, "flush") from e
            self._unsynced = False
            self._last_fsync_s = time.monotonic()

    def _maybe_fsync(self) -> None:
        now = time.monotonic()
        if (now - self._last_fsync_s) * 1000.0 >= self.fsync_interval_ms:
            self._fsync(self._active_fd)
            self._unsynced = False
            self._last_fsync_s = now

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self._write(self._active_fd, view)
            if n <= 0:
                raise OSError(errno.EIO, "write made no progress")
            view = view[n:]

    def _undo_write(self, seg: Segment, pos: int, cause: OSError) -> None:
        try:
            os.ftruncate(self._active_fd, pos)
            self._fsync(self._active_fd)
        except OSError as e:
            self._failed = f"could not remove a failed write from {seg.path} ({e}, after {cause})"
            raise LogFailedError(
                f"offsets log {self.directory}: {self._failed}; reopen the log to recover its tail"
            ) from e

    def _write_error(self, e: OSError, what: str) -> LogWriteError:
        if e.errno == errno.ENOSPC:
            return LogFullError(
                f"{what} failed: disk full (ENOSPC) under {self.directory}; nothing was acknowledged, the "
                f"partial batch was removed; free space and retry"
            )
        return LogWriteError(f"{what} failed under {self.directory}: {e}; nothing was acknowledged")

    def _roll(self) -> None:
        old = self._segments[-1]
        new_path = os.path.join(self.directory, segment_name(old.next_offset))
        created = False
        fd = -1
        # The new segment exists before the old one gets its index: on open, an index on the last segment
        # therefore proves that a later segment was lost.
        try:
            if self._unsynced:
                self._fsync(self._active_fd)
                self._unsynced = False
            fd = os.open(new_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            created = True
            fsync_dir(self.directory)
            old.index.write(os.path.join(self.directory, index_name(old.base_offset)), old.next_offset, old.size_bytes)
        except OSError as e:
            if fd >= 0:
                os.close(fd)
            if created:
                try:
                    os.unlink(new_path)
                except OSError:
                    pass
            raise self._write_error(e, "segment roll") from e
        os.close(self._active_fd)
        self._active_fd = fd
        self._segments.append(
            Segment(old.next_offset, new_path, 0, old.next_offset, OffsetIndex(interval_bytes=self._index_interval_bytes))
        )

    # ------------------------------------------------------------------------------------------ read

    def _segment_index_for(self, offset: int) -> int:
        lo, hi = 0, len(self._segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._segments[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def raw_payloads(self, from_offset: int = 0) -> Iterator[tuple[str, int, memoryview]]:
        """``(segment path, byte position, payload)`` of every batch that may hold ``from_offset`` or later.

        CRC-checked; the payload is not decoded. The first yielded batch may start before ``from_offset``."""
        with self._lock:  # a consistent snapshot of what to read; the reading itself is lock-free
            self._check_usable()
            from_offset = max(from_offset, self.log_start_offset)
            first = self._segment_index_for(from_offset)
            plan = [
                (seg.path, seg.index.lookup(from_offset)[1] if i == first else 0, seg.size_bytes)
                for i, seg in enumerate(self._segments)
                if i >= first
            ]
        for path, start, end in plan:
            if start < end:
                for pos, payload in iter_frames(path, start, end):
                    yield path, pos, payload

    def batches(self, from_offset: int = 0) -> Iterator[Batch]:
        for path, pos, payload in self.raw_payloads(from_offset):
            try:
                batch = batch_from_raw(unpack_payload(payload))
            except RecordFormatError as e:
                raise CorruptLogError(path, pos, f"batch passes its CRC but cannot be decoded ({e})") from e
            if batch.next_offset > from_offset:
                yield batch

    @locked
    def read(self, from_offset: int, max_bytes: int) -> list[Batch]:
        """Batches from the one holding ``from_offset``, at most ``max_bytes`` of frames (at least one batch)."""
        if not is_int(max_bytes) or max_bytes < 1:
            raise ValueError(f"max_bytes must be an int >= 1, got {max_bytes!r}")
        self._check_usable()
        if not self.log_start_offset <= from_offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {from_offset} is outside the log [{self.log_start_offset}, {self.log_end_offset}]"
            )
        out: list[Batch] = []
        total = 0
        for path, pos, payload in self.raw_payloads(from_offset):
            try:
                batch = batch_from_raw(unpack_payload(payload))
            except RecordFormatError as e:
                raise CorruptLogError(path, pos, f"batch passes its CRC but cannot be decoded ({e})") from e
            if batch.next_offset <= from_offset:
                continue
            size = len(payload) + 8
            if out and total + size > max_bytes:
                break
            out.append(batch)
            total += size
        return out

    @locked
    def verify(self) -> int:
        """CRC-check and decode every batch of every segment; returns the number of batches."""
        n = 0
        expected = self.log_start_offset
        for path, pos, payload in self.raw_payloads(0):
            try:
                p = unpack_payload(payload)
            except RecordFormatError as e:
                raise CorruptLogError(path, pos, f"batch passes its CRC but cannot be decoded ({e})") from e
            if p[1] != expected:
                raise CorruptLogError(path, pos, f"batch starts at offset {p[1]}, expected {expected}")
            expected += payload_span(p)
            n += 1
        return n

    # -------------------------------------------------------------------------------------- truncate

    @locked
    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after ``offset`` (a batch boundary); used by leader-epoch truncation."""
        self._check_usable()
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot truncate to {offset}: outside the log [{self.log_start_offset}, {self.log_end_offset}]"
            )
        if offset == self.log_end_offset:
            return
        i = self._segment_index_for(offset)
        seg = self._segments[i]
        pos = self._position_of(seg, offset)
        if self._unsynced:
            self.flush()
        try:
            os.close(self._active_fd)
            self._active_fd = -1
            # Same order argument as in _roll: the segment that becomes last loses its index first.
            self._unlink_if_exists(os.path.join(self.directory, index_name(seg.base_offset)))
            for later in reversed(self._segments[i + 1 :]):
                self._unlink_if_exists(os.path.join(self.directory, index_name(later.base_offset)))
                os.unlink(later.path)
            os.truncate(seg.path, pos)
            self._active_fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND)
            self._fsync(self._active_fd)
            fsync_dir(self.directory)
            del self._segments[i + 1 :]
            seg.size_bytes = pos
            seg.next_offset = offset
            seg.index.truncate_to_position(pos)
            if self._epochs.truncate_from_end(offset):
                write_checkpoint(checkpoint_path(self.directory), self._epochs.entries)
            if self.cleaned_offset > offset:
                write_cleaner_checkpoint(self.directory, offset)
                self.cleaned_offset = offset
        except OSError as e:
            self._failed = f"truncation to offset {offset} failed midway ({e})"
            raise LogFailedError(f"offsets log {self.directory}: {self._failed}; reopen the log") from e

    def _position_of(self, seg: Segment, offset: int) -> int:
        if offset == seg.base_offset:
            return 0
        base, pos = seg.index.lookup(offset)
        for p, payload in iter_frames(seg.path, pos, seg.size_bytes):
            raw = unpack_payload(payload)
            if raw[1] == offset:
                return p
            span = payload_span(raw)
            if raw[1] < offset < raw[1] + span:
                raise ValueError(
                    f"offset {offset} is inside the batch [{raw[1]}, {raw[1] + span - 1}]; truncate at a batch boundary"
                )
        if offset == seg.next_offset:
            return seg.size_bytes
        raise CorruptLogError(seg.path, pos, f"offset {offset} not found where the index points")

    @locked
    def replace_segments(self, compacted_paths: list[str]) -> None:
        """Swap compacted copies of closed segments in (same base offset and offset range each), all or none.

        Each replacement is checked first (full scan: CRCs, offsets, same end offset as the original). Then,
        as Kafka's log cleaner does with its ``.swap`` files (``LogCleaner``/``LogLoader``): every
        replacement is copied next to its original as ``<name>.swap`` and fsynced; a swap marker naming
        them all is written atomically (the commit point); each ``.swap`` is renamed over its original and
        re-indexed; the cleaner checkpoint records the end of the compacted range; the marker goes. A crash
        before the marker leaves the originals (recovery removes the ``.swap`` files), a crash after it
        leaves the compacted segments (recovery finishes the renames): never a mix. A failure after the
        commit point fails the log (``LogFailedError``): reopening it finishes the swap. Do not hold a
        ``batches()`` iterator open across this call."""
        self._check_usable()
        closed = {s.base_offset: s for s in self._segments[:-1]}
        plan = []
        for path in sorted(compacted_paths, key=lambda p: int(os.path.basename(p)[:20])):
            base = int(os.path.basename(path)[:20])
            seg = closed.get(base)
            if seg is None:
                raise ValueError(f"{path}: no closed segment of this log starts at offset {base}")
            scan = scan_segment(path, base, last=False, index_interval_bytes=self._index_interval_bytes)
            if scan.next_offset != seg.next_offset:
                raise ValueError(
                    f"{path} ends at offset {scan.next_offset} but the segment it replaces ends at {seg.next_offset}"
                )
            plan.append((seg, path, scan))
        if not plan:
            return
        staged: list[str] = []
        try:
            for seg, path, _scan in plan:
                tmp = seg.path + SWAP_SUFFIX
                staged.append(tmp)
                with open(path, "rb") as src, open(tmp, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                    dst.flush()
                    self._fsync(dst.fileno())
            fsync_dir(self.directory)
        except OSError as e:
            for tmp in staged:
                self._unlink_if_exists(tmp)
            raise self._write_error(e, f"swap of {len(plan)} compacted segments (nothing was swapped)") from e
        cleaned = max(self.cleaned_offset, plan[-1][0].next_offset)
        try:
            write_swap_marker(self.directory, [seg.base_offset for seg, _, _ in plan], cleaned)
        except OSError as e:
            if not os.path.exists(os.path.join(self.directory, SWAP_MARKER)):
                for tmp in staged:
                    self._unlink_if_exists(tmp)
                raise self._write_error(e, f"swap of {len(plan)} compacted segments (nothing was swapped)") from e
            # The marker is in place but maybe not durable: only a reopen can settle the swap either way.
            self._failed = f"swap of compacted segments interrupted at its commit point ({e})"
            raise LogFailedError(f"offsets log {self.directory}: {self._failed}; reopen the log to settle it") from e
        try:
            for seg, _path, scan in plan:
                self._unlink_if_exists(os.path.join(self.directory, index_name(seg.base_offset)))
                os.replace(seg.path + SWAP_SUFFIX, seg.path)
                seg.size_bytes = scan.valid_bytes
                seg.index = scan.index
            fsync_dir(self.directory)
            for seg, _path, scan in plan:
                scan.index.write(os.path.join(self.directory, index_name(seg.base_offset)), seg.next_offset,
                                 scan.valid_bytes)
            write_cleaner_checkpoint(self.directory, cleaned)
            self.cleaned_offset = cleaned
            os.unlink(os.path.join(self.directory, SWAP_MARKER))
            fsync_dir(self.directory)
        except OSError as e:
            self._failed = f"swap of compacted segments interrupted after its commit point ({e})"
            raise LogFailedError(f"offsets log {self.directory}: {self._failed}; reopen the log to finish it") from e

    @staticmethod
    def _unlink_if_exists(path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    # ------------------------------------------------------------------------------------- lifecycle

    def _check_usable(self) -> None:
        if self._closed:
            raise LogError(f"offsets log {self.directory} is closed")
        if self._failed is not None:
            raise LogFailedError(f"offsets log {self.directory} failed: {self._failed}; reopen it to recover")

    @locked
    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._active_fd >= 0:
                if self._unsynced and self._failed is None:
                    try:
                        self._fsync(self._active_fd)
                    except OSError as e:
                        logger.error("fsync on close of %s failed: %s", self.directory, e)
                os.close(self._active_fd)
                self._active_fd = -1
        finally:
            self._closed = True
            self._release()

    def _release(self) -> None:
        if self._active_fd >= 0:
            os.close(self._active_fd)
            self._active_fd = -1
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> FileLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_lock_fd", -1) >= 0 or getattr(self, "_active_fd", -1) >= 0:
            try:
                self.close()
            except Exception:
                pass

    # -------------------------------------------------------------------------------------- recovery

    def _recover(self) -> None:
        recover(self)

    def _count_open(self) -> None:
        path = os.path.join(self.directory, OPEN_GENERATION_FILE)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = b"0"
        if not raw.isdigit() or len(raw) > 20:
            raise CorruptLogError(path, None, f"the open generation must be a decimal number, got {raw[:40]!r}")
        generation = int(raw) + 1
        atomic_write(path, str(generation).encode())
        self.open_generation = generation
