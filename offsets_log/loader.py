"""Replays a partition log into the coordinator's durable state (Kafka's ``CoordinatorLoaderImpl``).

Guarantee: the state ``replay`` produces is equal to calling ``DurableState.replay(key, value)`` for every
record in log order; a property test holds the two against each other.

How it is fast: a file log hands over CRC-checked payloads; each is decoded once with ``msgpack.unpackb``
and, for the usual batch without tombstones, its flat ``[key bytes, raw value, ...]`` array goes straight
into one dict (``dict.update(zip(it, it))``, last write wins per key, in C). Only the survivors are turned
into dataclasses at the end. Which groups are present beyond last-write-wins is followed with
``replay_rules.GroupPresence``: batches with tombstones record by record, tombstone-free batches from
the batch's ``groups`` header without decoding keys.

Not guaranteed: speed when ``state`` is not empty or the log is not a ``FileLog`` (then it falls back to
sequential ``DurableState.replay``, which is exact but slower).
"""

from __future__ import annotations

import gc
import hashlib
import time
from dataclasses import dataclass

import msgpack
from raygroups.coordinator.records import GROUP_METADATA_KEY_TYPE, OFFSET_COMMIT_KEY_TYPE, OffsetCommitValue
from raygroups.coordinator.replay_rules import GroupPresence
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log.codec import (
    FLAG_TOMBSTONES,
    FORMAT,
    RecordFormatError,
    decode_group_metadata_value,
    decode_key_fields,
    decode_offset_commit_value,
)
from raygroups.offsets_log.errors import CorruptLogError
from raygroups.offsets_log.segment import iter_frames_in


@dataclass(frozen=True)
class LoadSummary:
    records: int
    bytes: int
    seconds: float
    bytes_dropped: int = 0


def replay(log, state: DurableState) -> LoadSummary:
    """Load every record of ``log`` into ``state`` (see the module docstring for the guarantee)."""
    start = time.perf_counter()
    raw_payloads = getattr(log, "raw_payloads", None)
    if raw_payloads is None or state.offsets or state.groups:
        n, nbytes = _replay_sequential(log, state)
    else:
        # The loader allocates millions of small tuples and frees none: the cyclic GC would rescan them
        # again and again for nothing (there are no cycles here).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            n, nbytes = _replay_fast(raw_payloads(0), state, getattr(log, "directory", "?"))
        finally:
            if gc_was_enabled:
                gc.enable()
    return LoadSummary(
        records=n,
        bytes=nbytes,
        seconds=time.perf_counter() - start,
        bytes_dropped=getattr(log, "bytes_dropped", 0),
    )


def _replay_sequential(log, state: DurableState) -> tuple[int, int]:
    n = 0
    apply = state.replay
    for batch in log.batches(0):
        for key, value in batch.records:
            apply(key, value)
        n += len(batch.records)
    return n, getattr(log, "size_bytes", 0)


def replay_segments(segments, state: DurableState, start_offset: int = 0) -> int:
    """Replay whole segments held in memory, ``(name, bytes)`` in log order from ``start_offset``, into an
    empty ``state`` (a compaction job checking its output); returns the number of records."""
    if state.offsets or state.groups:
        raise ValueError("replay_segments needs an empty state")
    payloads = ((name, pos, payload) for name, data in segments for pos, payload in iter_frames_in(memoryview(data), name))
    n, _ = _replay_fast(payloads, state, "segments", start_offset)
    return n


def state_digest(state: DurableState) -> str:
    """A SHA-256 of everything the state holds, independent of insertion order (equal states, equal digests)."""
    h = hashlib.sha256()
    for group in sorted(state.groups):
        h.update(repr((group, state.groups[group])).encode())
    h.update(b"\0offsets\0")
    for group in sorted(state.offsets):
        for tp in sorted(state.offsets[group]):
            h.update(repr((group, tp, state.offsets[group][tp])).encode())
    return h.hexdigest()


def _replay_fast(payloads, state: DurableState, where: str, start_offset: int = 0) -> tuple[int, int]:
    unpackb = msgpack.unpackb
    last: dict = {}
    presence = GroupPresence()
    n = 0
    nbytes = 0
    expected = start_offset
    for path, pos, payload in payloads:
        try:
            p = unpackb(payload, use_list=False)
            if type(p) is not tuple or p[0] != FORMAT:
                raise RecordFormatError("not a format-1 batch payload")
            flat = p[7]
            count = p[4]
            if len(p) == 8:
                span = count
            elif len(p) == 10:  # compacted: may skip offsets inside its span
                span = p[9] + 1
            else:
                raise RecordFormatError("not a format-1 batch payload")
            if len(flat) != 2 * count:
                raise RecordFormatError(f"batch claims {count} records but carries {len(flat) // 2}")
        except Exception as e:
            raise CorruptLogError(path, pos, f"batch passes its CRC but cannot be decoded ({e})") from e
        if p[1] != expected:
            raise CorruptLogError(path, pos, f"batch starts at offset {p[1]}, expected {expected}")
        if p[5] & FLAG_TOMBSTONES:
            try:
                _replay_batch_in_order(flat, last, presence, n)
            except (RecordFormatError, ValueError) as e:
                raise CorruptLogError(path, pos, str(e)) from e
        else:
            presence.observe_values(p[6], n)
            it = iter(flat)
            last.update(zip(it, it, strict=False))
        expected += span
        n += count
        nbytes += len(payload) + 8
    try:
        _install(last, presence, state)
    except (RecordFormatError, TypeError, ValueError) as e:
        raise CorruptLogError(where, None, f"a record cannot be decoded ({e})") from e
    return n, nbytes


def _replay_batch_in_order(flat: tuple, last: dict, presence: GroupPresence, position: int) -> None:
    observe = presence.observe
    for i in range(0, len(flat), 2):
        kb = flat[i]
        value = flat[i + 1]
        fields = decode_key_fields(kb)
        if value is None and fields[0] == OFFSET_COMMIT_KEY_TYPE and last.get(kb) is not None:
            presence.value_deleted(fields[1])
        observe(fields[0], fields[1], value is None, position + i // 2)
        last[kb] = value


def _install(last: dict, presence: GroupPresence, state: DurableState) -> None:
    unpackb = msgpack.unpackb
    offsets = state.offsets
    groups = state.groups
    oc_value = decode_offset_commit_value
    new_value = tuple.__new__
    ocv = OffsetCommitValue
    oc_type = OFFSET_COMMIT_KEY_TYPE
    keys = list(last)
    values = list(last.values())
    if None in values:  # tombstones left nothing behind
        keys = [k for k, v in zip(keys, values, strict=True) if v is not None]
        values = [v for v in values if v is not None]
    # Every surviving key decoded in one call: the keys laid end to end behind one array header.
    all_fields = unpackb(b"\xdd" + len(keys).to_bytes(4, "big") + b"".join(keys), use_list=False)
    if len(all_fields) != len(keys):
        raise RecordFormatError("a record key is not one msgpack value")
    # Objects that many offsets share are kept once: a topic's name (``state.topics``, which the live
    # write path uses too), a (topic, partition) that many groups commit (found through a dict that goes
    # with this call), and the commit timestamp of one commit request, one number for all its partitions
    # (they come one after the other). A compacted log of many groups over the same topics loads into
    # half the memory.
    intern_topic = state.topics.setdefault
    intern_tp = {}.setdefault
    ts = None
    current_group = None
    by_tp: dict = {}
    for fields, value in zip(all_fields, values, strict=True):
        if fields[0] == oc_type:
            group = fields[1]
            if group != current_group:
                by_tp = offsets.get(group)
                if by_tp is None:
                    by_tp = offsets[group] = {}
                current_group = group
            topic = fields[2]
            tp = (intern_topic(topic, topic), fields[3])
            tp = intern_tp(tp, tp)
            # Inlined decode_offset_commit_value for the two versions (v0 has no expire timestamp).
            if type(value) is tuple and len(value) == 6 and value[0] == 1:
                if value[4] != ts:
                    ts = value[4]
                by_tp[tp] = new_value(ocv, (value[1], value[2], value[3], ts, value[5]))
            elif type(value) is tuple and len(value) == 5 and value[0] == 0:
                if value[4] != ts:
                    ts = value[4]
                by_tp[tp] = new_value(ocv, (value[1], value[2], value[3], ts, None))
            else:
                by_tp[tp] = oc_value(value)
            continue
        type_id = fields[0]
        if type_id == GROUP_METADATA_KEY_TYPE:
            groups[fields[1]] = decode_group_metadata_value(value)
        else:
            raise RecordFormatError(f"unknown record type {type_id}")
    presence.values_survive(offsets)
    for group in presence.simple_groups():
        if group not in groups:
            groups[group] = None
