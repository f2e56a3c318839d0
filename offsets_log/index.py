"""Sparse offset index of one segment: ``(batch base offset, byte position)`` every few KiB.

A lookup returns the position of the last indexed batch at or before an offset, so a read scans at most
``index_interval_bytes`` plus one batch instead of the whole segment. The index of a closed segment is
persisted next to it (``<base>.index``) together with the segment's end (next offset and size), which is
how the log checks on open that no closed segment is missing or was changed, without reading it.

Guarantees: an index file that fails its CRC or disagrees with its segment's size is ignored (the
caller rebuilds it by scanning the segment). It is derived data: deleting it loses nothing.
"""

from __future__ import annotations

import struct
import zlib
from bisect import bisect_right
from dataclasses import dataclass, field

from raygroups.offsets_log.fsutil import atomic_write

DEFAULT_INDEX_INTERVAL_BYTES = 4096
_MAGIC = b"RGIX"
_HEAD = struct.Struct(">4sBIQQ")  # magic, version, entry count, next offset, segment size in bytes
_ENTRY = struct.Struct(">QQ")
_CRC = struct.Struct(">I")


@dataclass
class OffsetIndex:
    offsets: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    _last_position: int = -(1 << 62)

    def maybe_add(self, offset: int, position: int) -> None:
        """Index the batch at ``position`` if it starts a new interval (the first batch always does)."""
        if position - self._last_position >= self.interval_bytes or not self.offsets:
            self.offsets.append(offset)
            self.positions.append(position)
            self._last_position = position

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(base offset, position)`` of the last indexed batch with base offset <= ``offset``, else (-1, 0)."""
        i = bisect_right(self.offsets, offset) - 1
        if i < 0:
            return -1, 0
        return self.offsets[i], self.positions[i]

    def truncate_to_position(self, position: int) -> None:
        """Forget entries at or after ``position``."""
        i = bisect_right(self.positions, position - 1)
        del self.offsets[i:]
        del self.positions[i:]
        self._last_position = self.positions[-1] if self.positions else -(1 << 62)

    def to_bytes(self, next_offset: int, size_bytes: int) -> bytes:
        body = bytearray(_HEAD.pack(_MAGIC, 1, len(self.offsets), next_offset, size_bytes))
        for o, p in zip(self.offsets, self.positions, strict=True):
            body += _ENTRY.pack(o, p)
        body += _CRC.pack(zlib.crc32(body))
        return bytes(body)

    def write(self, path: str, next_offset: int, size_bytes: int) -> None:
        atomic_write(path, self.to_bytes(next_offset, size_bytes))


def read_index(path: str, interval_bytes: int) -> tuple[OffsetIndex, int, int] | None:
    """``(index, next_offset, size_bytes)`` from an index file, or None if it is missing or damaged."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    if len(data) < _HEAD.size + _CRC.size:
        return None
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(memoryview(data)[: -_CRC.size]) != crc:
        return None
    magic, version, count, next_offset, size_bytes = _HEAD.unpack_from(data, 0)
    if magic != _MAGIC or version != 1 or len(data) != _HEAD.size + count * _ENTRY.size + _CRC.size:
        return None
    index = OffsetIndex(interval_bytes=interval_bytes)
    pos = _HEAD.size
    for _ in range(count):
        o, p = _ENTRY.unpack_from(data, pos)
        pos += _ENTRY.size
        index.offsets.append(o)
        index.positions.append(p)
    if index.positions:
        index._last_position = index.positions[-1]
    return index, next_offset, size_bytes
