"""The files of a compacted-segment swap: the ``.swap`` copies, the swap marker and the cleaner checkpoint.

``FileLog.replace_segments`` copies every replacement next to its original as ``<segment>.swap``, then
writes the swap marker (``compaction-swap``: the base offsets being swapped and the new cleaner offset)
atomically: that write is the commit point of the whole swap. ``finish_interrupted_swap`` runs when a
log is opened: with a marker, the renames it names are finished (a crash after the commit point ends
with every compacted segment in place); without one, recovery removes stray ``.swap`` files (a crash
before it ends with every original in place). Kafka's ``LogLoader`` completes its cleaner's ``.swap``
files the same way.

The cleaner checkpoint (``cleaner-offset-checkpoint``, Kafka's ``LogCleanerManager`` keeps one per log
directory) is the end offset of the compacted prefix of the log: bytes of closed segments above it are
"dirty" for ``min.cleanable.dirty.ratio``.
"""

from __future__ import annotations

import json
import os

from raygroups.coordinator.checks import is_int
from raygroups.offsets_log.errors import CorruptLogError
from raygroups.offsets_log.fsutil import atomic_write, fsync_dir
from raygroups.offsets_log.segment import index_name, segment_name

SWAP_SUFFIX = ".swap"
SWAP_MARKER = "compaction-swap"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"


def write_swap_marker(directory: str, bases: list[int], cleaned_offset: int) -> None:
    atomic_write(os.path.join(directory, SWAP_MARKER),
                 json.dumps({"bases": bases, "cleaned_offset": cleaned_offset}).encode())


def _read_json(path: str, what: str) -> dict | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        value = json.loads(data)
    except ValueError as e:
        raise CorruptLogError(path, None, f"{what} is not valid JSON ({e})") from e
    if not isinstance(value, dict):
        raise CorruptLogError(path, None, f"{what} must be a JSON object")
    return value


def _offset(value, path: str, what: str) -> int:
    if not is_int(value) or value < 0:
        raise CorruptLogError(path, None, f"{what} must be an offset (an int >= 0), got {value!r}")
    return value


def write_cleaner_checkpoint(directory: str, cleaned_offset: int) -> None:
    atomic_write(os.path.join(directory, CLEANER_CHECKPOINT), json.dumps({"cleaned_offset": cleaned_offset}).encode())


def read_cleaner_checkpoint(directory: str) -> int:
    """The end offset of the log's compacted prefix (0: never compacted)."""
    path = os.path.join(directory, CLEANER_CHECKPOINT)
    value = _read_json(path, "the cleaner checkpoint")
    if value is None:
        return 0
    return _offset(value.get("cleaned_offset"), path, "cleaned_offset")


def finish_interrupted_swap(directory: str) -> list[int] | None:
    """Finish a swap whose marker was written (see the module docstring); the base offsets it swapped, or
    None when there was none. Indexes of swapped segments are removed: recovery rebuilds them."""
    path = os.path.join(directory, SWAP_MARKER)
    marker = _read_json(path, "the swap marker")
    if marker is None:
        return None
    bases = marker.get("bases")
    if not isinstance(bases, list):
        raise CorruptLogError(path, None, f"bases must be a list of offsets, got {bases!r}")
    bases = [_offset(b, path, "bases[]") for b in bases]
    cleaned = _offset(marker.get("cleaned_offset"), path, "cleaned_offset")
    for base in bases:
        seg = os.path.join(directory, segment_name(base))
        if os.path.exists(seg + SWAP_SUFFIX):
            try:
                os.unlink(os.path.join(directory, index_name(base)))
            except FileNotFoundError:
                pass
            os.replace(seg + SWAP_SUFFIX, seg)
    fsync_dir(directory)
    write_cleaner_checkpoint(directory, cleaned)
    os.unlink(path)
    fsync_dir(directory)
    return bases
