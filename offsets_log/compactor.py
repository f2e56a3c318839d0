"""Reference compactor (single process, pure Python): the oracle the Spark compaction job is tested against.

Guarantee: replaying the compacted records with ``DurableState.replay`` gives exactly the state that
replaying the original records gives, and every surviving record keeps its offset and relative order.
Compacted batches cover exactly the offsets of the batches they replace (Kafka's ``lastOffsetDelta``),
so compacted segments chain like the originals and a log can swap them in one for one. Compacting a
prefix of a log (its closed segments) is therefore safe: the state after the prefix is unchanged.

What is kept (``replay_rules`` defines what a record makes obsolete): the last record of every key,
except tombstones whose batch timestamp is more than ``delete_retention_ms`` before ``now_ms`` (Kafka
measures from the time the cleaner first saw the tombstone; the batch timestamp is the deterministic
stand-in), plus, whatever their age, the few records ``replay_rules.presence_needs`` names so that every
group stays present or absent as before (a group created only by offset commits that were all deleted
since; a group tombstone that follows surviving commits of the group).

Batches are merged: consecutive input batches of one leader epoch become one output batch (at most
``max_batch_records`` records) whose timestamp is the latest of theirs, so a merged tombstone is kept
at least as long as it would have been. A run of batches with no survivor leaves an empty batch that
holds its offsets.

Not guaranteed: speed (it holds one partition's closed segments in memory), or Kafka's exact retention
clock.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from raygroups.coordinator.consumer_records import CONSUMER_GROUP_METADATA_KEY_TYPE
from raygroups.coordinator.records import GROUP_METADATA_KEY_TYPE, OFFSET_COMMIT_KEY_TYPE
from raygroups.coordinator.replay_rules import GroupPresence, presence_needs
from raygroups.offsets_log.batch import Batch
from raygroups.offsets_log.codec import (
    decode_key_fields,
    encode_key,
    encode_raw_payload,
    encode_value,
    frame,
    payload_span,
    unpack_payload,
)
from raygroups.offsets_log.codec import (
    decode_payload as _decode_payload,
)
from raygroups.offsets_log.errors import CorruptLogError
from raygroups.offsets_log.fsutil import atomic_write
from raygroups.offsets_log.index import DEFAULT_INDEX_INTERVAL_BYTES, OffsetIndex
from raygroups.offsets_log.segment import index_name, iter_frames_in, segment_name

DEFAULT_MAX_BATCH_RECORDS = 1000
METADATA_KEY_TYPES = (GROUP_METADATA_KEY_TYPE, CONSUMER_GROUP_METADATA_KEY_TYPE)


@dataclass
class _SourceBatch:
    base_offset: int
    span: int
    leader_epoch: int
    timestamp_ms: int
    records: list  # [(offset, key bytes, raw value)]


@dataclass
class CompactionStats:
    records_in: int = 0
    records_out: int = 0
    batches_in: int = 0
    batches_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    tombstones_dropped: int = 0
    output_paths: list[str] = field(default_factory=list)


def _select(sources: list[_SourceBatch], delete_retention_ms: int, now_ms: int, stats: CompactionStats) -> set[int]:
    """Offsets of the records to keep: each key's last record, unless it is an expired tombstone, plus what
    ``replay_rules.presence_needs`` asks for to keep each group present or absent."""
    group_of: dict[bytes, tuple[int, str]] = {}  # key -> (record type, group)
    last_pos: dict[bytes, int] = {}
    last_tomb_ts: dict[bytes, int] = {}  # key -> batch timestamp of its last record, if it is a tombstone
    creator: dict[str, tuple[int, bytes]] = {}  # group -> (offset, key) of its last offset value
    presence = GroupPresence()
    for src in sources:
        for offset, kb, rv in src.records:
            meta = group_of.get(kb)
            if meta is None:
                fields = decode_key_fields(kb)
                meta = group_of[kb] = (fields[0], fields[1])
            try:
                presence.observe(meta[0], meta[1], rv is None, offset)
            except ValueError as e:
                raise ValueError(f"{e} at offset {offset}") from None
            last_pos[kb] = offset
            if rv is None:
                last_tomb_ts[kb] = src.timestamp_ms
            else:
                last_tomb_ts.pop(kb, None)
                if meta[0] == OFFSET_COMMIT_KEY_TYPE:
                    creator[meta[1]] = (offset, kb)
    keep: set[int] = set()
    surviving_value_at: dict[str, int] = {}  # group -> its last offset value that is its key's last record
    metadata_is_value: set[str] = set()
    for kb, pos in last_pos.items():
        type_id, group = group_of[kb]
        ts = last_tomb_ts.get(kb)
        if ts is None:
            keep.add(pos)
            if type_id == OFFSET_COMMIT_KEY_TYPE:
                if pos > surviving_value_at.get(group, -1):
                    surviving_value_at[group] = pos
            elif type_id in METADATA_KEY_TYPES:
                # Present by its metadata: a classic group's, or a consumer group's (the loader's rule: it
                # exists exactly when its ConsumerGroupMetadata key ends in a value).
                metadata_is_value.add(group)
        elif now_ms - ts <= delete_retention_ms:
            keep.add(pos)
    for group in {g for _, g in group_of.values()}:
        keep_creator, keep_tombstone = presence_needs(presence, group, group in metadata_is_value,
                                                      surviving_value_at.get(group, -1))
        if keep_creator:
            at, kb = creator[group]
            keep.add(at)
            keep.add(last_pos[kb])
        if keep_tombstone:
            keep.add(presence.metadata_tombstone_at[group])
    stats.tombstones_dropped = sum(1 for kb in last_tomb_ts if last_pos[kb] not in keep)
    return keep


def _emit(sources: list[_SourceBatch], keep: set[int], max_batch_records: int):
    """Yield ``(base, epoch, timestamp, [(key bytes, raw value)], deltas, last_delta)`` of output batches."""
    run: list[_SourceBatch] = []
    kept: list = []

    def flush():
        base = run[0].base_offset
        end = run[-1].base_offset + run[-1].span
        return (
            base,
            run[0].leader_epoch,
            max(s.timestamp_ms for s in run),
            [(kb, rv) for _, kb, rv in kept],
            [o - base for o, _, _ in kept],
            end - 1 - base,
        )

    for src in sources:
        survivors = [r for r in src.records if r[0] in keep]
        if run and (src.leader_epoch != run[0].leader_epoch or len(kept) + len(survivors) > max_batch_records):
            yield flush()
            run, kept = [], []
        run.append(src)
        kept.extend(survivors)
    if run:
        yield flush()


def compact_batches(
    batches: Iterable[Batch],
    *,
    delete_retention_ms: int,
    now_ms: int,
    max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
) -> list[Batch]:
    """Compact decoded batches (contiguous, in log order); see the module docstring."""
    _validate(delete_retention_ms, max_batch_records)
    sources = []
    for b in batches:
        recs = [(o, encode_key(k), encode_value(k, v)) for o, (k, v) in zip(b.record_offsets(), b.records, strict=True)]
        sources.append(_SourceBatch(b.base_offset, b.next_offset - b.base_offset, b.leader_epoch, b.timestamp_ms, recs))
    keep = _select(sources, delete_retention_ms, now_ms, CompactionStats())
    return [
        _decode_payload(encode_raw_payload(base, epoch, ts, raw, deltas, last))
        for base, epoch, ts, raw, deltas, last in _emit(sources, keep, max_batch_records)
    ]


@dataclass
class SegmentSources:
    """One closed segment, decoded to the level compaction needs: its batches with raw record bytes."""

    base_offset: int
    next_offset: int
    sources: list[_SourceBatch]
    records: int = 0
    batches: int = 0
    bytes: int = 0


def read_segment(data: bytes | bytearray | memoryview, base_offset: int, name: str = "segment") -> SegmentSources:
    """Decode a closed segment's bytes with full CRC checks (the one decoder of every compactor)."""
    view = memoryview(data)
    out = SegmentSources(base_offset, base_offset, [])
    offset = base_offset
    for pos, payload in iter_frames_in(view, name):
        p = unpack_payload(payload)
        if p[1] != offset:
            raise CorruptLogError(name, pos, f"batch starts at offset {p[1]}, expected {offset}")
        deltas = p[8] if len(p) == 10 else range(p[4])
        flat = p[7]
        recs = [(p[1] + d, flat[2 * i], flat[2 * i + 1]) for i, d in enumerate(deltas)]
        span = payload_span(p)
        out.sources.append(_SourceBatch(p[1], span, p[2], p[3], recs))
        offset += span
        out.records += p[4]
        out.batches += 1
        out.bytes += len(payload) + 8
    out.next_offset = offset
    return out


def read_segment_file(path: str) -> SegmentSources:
    with open(path, "rb") as f:
        return read_segment(f.read(), int(os.path.basename(path)[:20]), path)


@dataclass
class CompactedSegment:
    base_offset: int
    next_offset: int
    data: bytes
    index: OffsetIndex
    records: int
    batches: int


def write_segment(segment: SegmentSources, keep, *, max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
                  index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> CompactedSegment:
    """The compacted bytes of one segment: the records whose offsets are in ``keep``, merged into batches by
    the one batch emitter (so any compactor that keeps the same offsets writes the same bytes)."""
    data = bytearray()
    index = OffsetIndex(interval_bytes=index_interval_bytes)
    records = batches = 0
    for b_base, epoch, ts, raw, deltas, last in _emit(segment.sources, keep, max_batch_records):
        index.maybe_add(b_base, len(data))
        data += frame(encode_raw_payload(b_base, epoch, ts, raw, deltas, last))
        records += len(raw)
        batches += 1
    return CompactedSegment(segment.base_offset, segment.next_offset, bytes(data), index, records, batches)


def check_chained(segments: list[SegmentSources], name: str = "partition") -> None:
    """Segments must follow one another without a gap or an overlap."""
    for prev, seg in zip(segments, segments[1:], strict=False):
        if seg.base_offset != prev.next_offset:
            raise CorruptLogError(name, None, f"segment starts at {seg.base_offset} but the previous one ends at "
                                              f"{prev.next_offset}")


def compact_segments(
    segment_paths: list[str],
    output_dir: str | os.PathLike,
    *,
    delete_retention_ms: int,
    now_ms: int,
    max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
) -> CompactionStats:
    """Compact closed segment files into new segments (same base offsets and offset ranges) in ``output_dir``.

    Inputs are read with full CRC checks and never modified; each output segment and its index are
    written atomically. Returns statistics and the output paths."""
    _validate(delete_retention_ms, max_batch_records)
    output_dir = os.fspath(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    stats = CompactionStats()
    segments = [read_segment_file(path) for path in segment_paths]
    check_chained(segments, os.path.dirname(segment_paths[0]) if segment_paths else "partition")
    for seg in segments:
        stats.records_in += seg.records
        stats.batches_in += seg.batches
        stats.bytes_in += seg.bytes
    keep = _select([s for seg in segments for s in seg.sources], delete_retention_ms, now_ms, stats)
    for seg in segments:
        out = write_segment(seg, keep, max_batch_records=max_batch_records, index_interval_bytes=index_interval_bytes)
        path = os.path.join(output_dir, segment_name(seg.base_offset))
        atomic_write(path, out.data)
        out.index.write(os.path.join(output_dir, index_name(seg.base_offset)), seg.next_offset, len(out.data))
        stats.records_out += out.records
        stats.batches_out += out.batches
        stats.bytes_out += len(out.data)
        stats.output_paths.append(path)
    return stats


def _validate(delete_retention_ms: int, max_batch_records: int) -> None:
    if not isinstance(delete_retention_ms, int) or delete_retention_ms < 0:
        raise ValueError(f"delete_retention_ms must be an int >= 0, got {delete_retention_ms!r}")
    if not isinstance(max_batch_records, int) or max_batch_records < 1:
        raise ValueError(f"max_batch_records must be an int >= 1, got {max_batch_records!r}")
