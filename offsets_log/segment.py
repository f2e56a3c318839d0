"""Segment files: naming, frame iteration with CRC checks, and the recovery scan.

A segment is ``<base offset, 20 digits>.log`` holding whole frames back to back (see ``codec``). Closed
segments never change; only the last (active) segment is appended to.

``scan_segment`` is the recovery rule: every frame must have a valid CRC, decode, start exactly at the
expected offset and not lower the leader epoch. In the last segment only, a bad frame with no valid frame
after it is a torn tail (a write the process did not finish): the scan reports where the whole batches
end and the caller truncates there. A bad frame followed by a valid one is corruption, never a torn
write, and raises ``CorruptLogError`` naming the file and byte position. ``iter_frames`` (used by every
read) tolerates nothing: any bad frame is ``CorruptLogError``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from raygroups.offsets_log.codec import (
    HEADER,
    HEADER_BYTES,
    MAX_BATCH_BYTES,
    MIN_PAYLOAD_BYTES,
    PAYLOAD_MAGICS,
    RecordFormatError,
    frame_crc_ok,
    peek_header,
)
from raygroups.offsets_log.errors import CorruptLogError
from raygroups.offsets_log.index import OffsetIndex

SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
INDEX_RE = re.compile(r"^(\d{20})\.index$")
READ_CHUNK_BYTES = 4 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def index_name(base_offset: int) -> str:
    return f"{base_offset:020d}.index"


@dataclass
class Segment:
    """Bookkeeping of one segment file; ``size_bytes`` counts only whole, acknowledged frames."""

    base_offset: int
    path: str
    size_bytes: int
    next_offset: int
    index: OffsetIndex


@dataclass
class ScanResult:
    next_offset: int
    valid_bytes: int
    file_bytes: int
    index: OffsetIndex
    epochs: list[tuple[int, int]] = field(default_factory=list)  # (epoch, first offset) at each epoch rise
    batches: int = 0
    torn_reason: str | None = None

    @property
    def bytes_dropped(self) -> int:
        return self.file_bytes - self.valid_bytes


def _frame_problem(buf, pos: int, size: int) -> str | None:
    if size - pos < HEADER_BYTES:
        return "incomplete batch header"
    length, crc = HEADER.unpack_from(buf, pos)
    if length < MIN_PAYLOAD_BYTES or length > MAX_BATCH_BYTES:
        return f"implausible batch length {length}"
    if pos + HEADER_BYTES + length > size:
        return f"batch of {length} bytes extends past the end of the file"
    if not frame_crc_ok(buf, pos, length, crc):
        return "CRC mismatch"
    return None


def _valid_frame_after(buf, pos: int, size: int) -> int | None:
    """Position of a valid frame starting after ``pos``, if any (finds candidates by the payload magic)."""
    for magic in PAYLOAD_MAGICS:
        i = buf.find(magic, pos + 1 + HEADER_BYTES)
        while i != -1:
            q = i - HEADER_BYTES
            if _frame_problem(buf, q, size) is None:
                return q
            i = buf.find(magic, i + 1)
    return None


def scan_segment(path: str, base_offset: int, *, last: bool, index_interval_bytes: int) -> ScanResult:
    """Check every frame of a segment; see the module docstring for what a torn tail is."""
    with open(path, "rb") as f:
        buf = f.read()
    size = len(buf)
    result = ScanResult(base_offset, 0, size, OffsetIndex(interval_bytes=index_interval_bytes))
    pos = 0
    expected = base_offset
    prev_epoch = -1
    mv = memoryview(buf)
    while pos < size:
        problem = _frame_problem(buf, pos, size)
        if problem is not None:
            if not last:
                raise CorruptLogError(path, pos, f"{problem} in a closed segment")
            after = _valid_frame_after(buf, pos, size)
            if after is not None:
                raise CorruptLogError(
                    path, pos, f"{problem}, and a valid batch follows at byte {after}: not a torn tail"
                )
            result.torn_reason = problem
            break
        (length,) = HEADER.unpack_from(buf, pos)[:1]
        end = pos + HEADER_BYTES + length
        try:
            base, epoch, _ts, _count, span = peek_header(mv[pos + HEADER_BYTES : end])
        except RecordFormatError as e:
            raise CorruptLogError(path, pos, f"batch passes its CRC but cannot be decoded ({e})") from e
        if base != expected:
            raise CorruptLogError(
                path, pos, f"batch starts at offset {base} but offset {expected} was expected (offsets must increase without gaps)"
            )
        if epoch < prev_epoch:
            raise CorruptLogError(path, pos, f"leader epoch goes down from {prev_epoch} to {epoch}")
        if epoch > prev_epoch:
            result.epochs.append((epoch, base))
            prev_epoch = epoch
        result.index.maybe_add(expected, pos)
        expected += span
        result.batches += 1
        pos = end
    result.next_offset = expected
    result.valid_bytes = pos
    return result


def iter_frames(path: str, start: int, end: int) -> Iterator[tuple[int, memoryview]]:
    """``(position, payload)`` of every frame in ``[start, end)``, each CRC-checked; anything else raises."""
    with open(path, "rb") as f:
        f.seek(start)
        read_pos = start
        buf = b""
        off = 0
        pos = start
        while pos < end:
            avail = len(buf) - off
            if avail < HEADER_BYTES:
                more = f.read(min(max(READ_CHUNK_BYTES, HEADER_BYTES), end - read_pos))
                read_pos += len(more)
                buf = buf[off:] + more
                off = 0
                if len(buf) < HEADER_BYTES:
                    raise CorruptLogError(path, pos, "incomplete batch header (file shorter than the log thinks)")
            length, crc = HEADER.unpack_from(buf, off)
            total = _checked_total(path, pos, length, end)
            if len(buf) - off < total:
                more = f.read(min(max(READ_CHUNK_BYTES, total - (len(buf) - off)), end - read_pos))
                read_pos += len(more)
                buf = buf[off:] + more
                off = 0
                if len(buf) < total:
                    raise CorruptLogError(path, pos, "batch cut short (file shorter than the log thinks)")
            if not frame_crc_ok(buf, off, length, crc):
                raise CorruptLogError(path, pos, "CRC mismatch")
            yield pos, memoryview(buf)[off + HEADER_BYTES : off + total]
            off += total
            pos += total


def iter_frames_in(data: memoryview, name: str) -> Iterator[tuple[int, memoryview]]:
    """``iter_frames`` over a whole segment already in memory (e.g. read from a segment store)."""
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < HEADER_BYTES:
            raise CorruptLogError(name, pos, "incomplete batch header")
        length, crc = HEADER.unpack_from(data, pos)
        total = _checked_total(name, pos, length, end)
        if not frame_crc_ok(data, pos, length, crc):
            raise CorruptLogError(name, pos, "CRC mismatch")
        yield pos, data[pos + HEADER_BYTES : pos + total]
        pos += total


def _checked_total(name: str, pos: int, length: int, end: int) -> int:
    total = HEADER_BYTES + length
    if length < MIN_PAYLOAD_BYTES or length > MAX_BATCH_BYTES or pos + total > end:
        raise CorruptLogError(name, pos, f"implausible batch length {length}")
    return total


def list_segment_files(directory: str) -> tuple[list[int], list[int]]:
    """Sorted base offsets of the ``.log`` and of the ``.index`` files in ``directory``."""
    logs, indexes = [], []
    for name in os.listdir(directory):
        m = SEGMENT_RE.match(name)
        if m:
            logs.append(int(m.group(1)))
            continue
        m = INDEX_RE.match(name)
        if m:
            indexes.append(int(m.group(1)))
    return sorted(logs), sorted(indexes)
