"""Opening a partition directory: find the segments, check they chain, recover the tail, reconcile epochs.

Rules (see ``segment.scan_segment`` for the per-frame ones):

* the first segment must start at offset 0 and every segment must start where the previous one ended
  (taken from the previous segment's index footer, or from a scan when the index is missing or stale);
  otherwise a segment is missing -> ``CorruptLogError``;
* an index file exists only for closed segments (the next segment is created before it), so an index for
  the last segment, or for a segment after it, means a segment was lost -> ``CorruptLogError``;
* only the last segment may have a torn tail; it is truncated to its last whole batch and reported;
* the leader-epoch checkpoint drops entries past the log end and gains epochs found in the last segment
  (it may lag the log by one epoch change after a crash); it is rewritten only if that changed it.

Nothing but the torn tail, derived index files, the epoch checkpoint, our own leftover temporary files
(``*.tmp``, ``*.swap`` of interrupted atomic writes) and the renames of a compacted-segment swap that
passed its commit point (``cleaning.finish_interrupted_swap``) is ever written or removed here.
"""

from __future__ import annotations

import logging
import os
import re

from raygroups.offsets_log.cleaning import finish_interrupted_swap, read_cleaner_checkpoint
from raygroups.offsets_log.codec import unpack_payload
from raygroups.offsets_log.epochs import LeaderEpochCache, checkpoint_path, read_checkpoint, write_checkpoint
from raygroups.offsets_log.errors import CorruptLogError
from raygroups.offsets_log.fsutil import fsync_dir
from raygroups.offsets_log.index import OffsetIndex, read_index
from raygroups.offsets_log.segment import (
    Segment,
    index_name,
    iter_frames,
    list_segment_files,
    scan_segment,
    segment_name,
)

logger = logging.getLogger("raygroups.offsets_log")


_LEFTOVER_RE = re.compile(
    r"^(\d{20}\.(log|index)|leader-epoch-checkpoint|compaction-swap|cleaner-offset-checkpoint)\.(tmp|swap)$")


def recover(log) -> None:
    directory = log.directory
    interval = log._index_interval_bytes
    report = log.recovery_report
    # Before the leftovers go: a swap past its commit point is finished, one before it is undone.
    report.finished_swap = finish_interrupted_swap(directory)
    if report.finished_swap is not None:
        logger.warning("offsets log %s: finished an interrupted swap of compacted segments %s", directory,
                       report.finished_swap)
    log.cleaned_offset = read_cleaner_checkpoint(directory)
    for name in os.listdir(directory):
        if _LEFTOVER_RE.match(name):  # a temporary file of an interrupted atomic write or segment swap
            os.unlink(os.path.join(directory, name))
            report.removed_temporary_files.append(name)
    bases, index_bases = list_segment_files(directory)
    ckpt_path = checkpoint_path(directory)
    entries = read_checkpoint(ckpt_path)
    if not bases:
        if index_bases:
            p = os.path.join(directory, index_name(index_bases[0]))
            raise CorruptLogError(p, None, "an index file exists but no segment file: the segments are missing")
        path = os.path.join(directory, segment_name(0))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(directory)
        log._active_fd = fd
        log._segments = [Segment(0, path, 0, 0, OffsetIndex(interval_bytes=interval))]
        log._epochs = LeaderEpochCache([])
        if entries:
            write_checkpoint(ckpt_path, [])
            report.epoch_checkpoint_repaired = True
        report.segments = 1
        report.last_segment = path
        return
    if bases[0] != 0:
        raise CorruptLogError(
            os.path.join(directory, segment_name(bases[0])),
            None,
            f"the first segment starts at offset {bases[0]}, not 0: earlier segments are missing",
        )
    stray = [b for b in index_bases if b >= bases[-1]]
    if stray:
        raise CorruptLogError(
            os.path.join(directory, index_name(stray[0])),
            None,
            f"segment {segment_name(stray[0])} was closed (it has an index) but the segment after it is missing"
            if stray[0] == bases[-1]
            else f"index of segment {segment_name(stray[0])} exists but that segment is missing",
        )
    segments: list[Segment] = []
    expected = 0
    for base in bases[:-1]:
        path = os.path.join(directory, segment_name(base))
        if base != expected:
            raise CorruptLogError(
                path, None, f"segment starts at offset {base} but the previous one ends at {expected}: a segment is missing"
            )
        size = os.path.getsize(path)
        idx_path = os.path.join(directory, index_name(base))
        loaded = read_index(idx_path, interval)
        if loaded is not None and loaded[2] == size and loaded[1] >= base:
            index, next_offset = loaded[0], loaded[1]
        else:
            scan = scan_segment(path, base, last=False, index_interval_bytes=interval)
            index, next_offset = scan.index, scan.next_offset
            index.write(idx_path, next_offset, size)
            report.rebuilt_indexes.append(idx_path)
        segments.append(Segment(base, path, size, next_offset, index))
        expected = next_offset
    base = bases[-1]
    path = os.path.join(directory, segment_name(base))
    if base != expected:
        raise CorruptLogError(
            path, None, f"segment starts at offset {base} but the previous one ends at {expected}: a segment is missing"
        )
    scan = scan_segment(path, base, last=True, index_interval_bytes=interval)
    if scan.torn_reason is not None:
        os.truncate(path, scan.valid_bytes)
        report.bytes_dropped = scan.bytes_dropped
        report.torn_reason = scan.torn_reason
        logger.warning(
            "offsets log %s: dropped a torn tail of %d bytes at byte %d of %s (%s); the log ends at offset %d",
            directory,
            scan.bytes_dropped,
            scan.valid_bytes,
            path,
            scan.torn_reason,
            scan.next_offset,
        )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    if scan.torn_reason is not None:
        os.fsync(fd)
    segments.append(Segment(base, path, scan.valid_bytes, scan.next_offset, scan.index))
    log._segments = segments
    log._active_fd = fd
    report.segments = len(segments)
    report.last_segment = path

    log_end = scan.next_offset
    changed = False
    if entries is None:
        entries = _epochs_from_segments(segments[:-1]) if len(segments) > 1 else []
        changed = bool(entries) or log_end > 0
    cache = LeaderEpochCache(entries)
    changed |= cache.truncate_from_end(log_end)
    for epoch, start in scan.epochs:
        changed |= cache.assign(epoch, start)
    if changed:
        write_checkpoint(ckpt_path, cache.entries)
        report.epoch_checkpoint_repaired = True
    log._epochs = cache


def _epochs_from_segments(segments: list[Segment]) -> list[tuple[int, int]]:
    """Rebuild epoch entries by reading every batch header (only when the checkpoint file is gone)."""
    cache = LeaderEpochCache()
    for seg in segments:
        for _pos, payload in iter_frames(seg.path, 0, seg.size_bytes):
            p = unpack_payload(payload)
            cache.assign(p[2], p[1])
    return cache.entries
