"""Replays a partition log into the coordinator's durable state (Kafka's ``CoordinatorLoaderImpl``).

Guarantee: the state ``replay`` produces is equal to calling ``DurableState.replay(key, value)`` for every
record in log order; a property test holds the two against each other.

How it is fast: a file log hands over CRC-checked payloads; each is decoded once with ``msgpack.unpackb``
and, for the usual batch without tombstones, its flat ``[key bytes, raw value, ...]`` array goes straight
into one dict (``dict.update(zip(it, it))``, last write wins per key, in C). Only the survivors are turned
into dataclasses at the end. Which groups are present beyond last-write-wins is followed with
``replay_rules.GroupPresence``: batches with tombstones record by record, tombstone-free batches from
the batch's ``groups`` header without decoding keys.

Lazy loading (``replay(log, state, lazy=True)``, what a shard does): the surviving offset commits are
not decoded at all; the dict of survivors (encoded key -> raw value) becomes ``state``'s pending offsets
(``RawOffsets``), which the shard turns into objects in the background while it serves, and a request
turns the one key it needs (``DurableState.offset``, ``replay``) or all of them (``offsets``). Group
metadata is decoded at once; which groups are present comes from the batch headers; the offsets of
groups whose metadata was deleted (and that are absent) are found by their key prefix and decoded at
once, so that ``on_loaded`` sees every group. A record that passes its CRC but cannot be decoded is then
found when it is materialized, not during the load. A compacted log of 1 M distinct keys loads about five
times faster this way (``bench/log_bench.py``). Pending keys are looked up by their encoding, which is
canonical for every key this codec writes (the survivors' dict relies on that too).

Not guaranteed: speed when ``state`` is not empty or the log is not a ``FileLog`` (then it falls back to
sequential ``DurableState.replay``, which is exact but slower).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import threading
import time
from dataclasses import dataclass

import msgpack
from raygroups.coordinator.consumer_records import CONSUMER_GROUP_METADATA_KEY_TYPE
from raygroups.coordinator.records import GROUP_METADATA_KEY_TYPE, OFFSET_COMMIT_KEY_TYPE, OffsetCommitValue
from raygroups.coordinator.replay_rules import GroupPresence
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log.codec import (
    CONSUMER_GROUP_TYPES,
    FLAG_TOMBSTONES,
    FORMAT,
    RecordFormatError,
    decode_consumer_group_value,
    decode_group_metadata_value,
    decode_key_fields,
    decode_offset_commit_value,
    encode_offset_commit_key,
    offset_commit_key_prefix,
)
from raygroups.offsets_log.errors import CorruptLogError
from raygroups.offsets_log.segment import iter_frames_in


@dataclass(frozen=True)
class LoadSummary:
    records: int
    bytes: int
    seconds: float
    bytes_dropped: int = 0


def replay(log, state: DurableState, lazy: bool = False) -> LoadSummary:
    """Load every record of ``log`` into ``state`` (see the module docstring for the guarantee). ``lazy``:
    leave the offsets pending in ``state`` (see "Lazy loading" above)."""
    start = time.perf_counter()
    raw_payloads = getattr(log, "raw_payloads", None)
    if raw_payloads is None or state.offsets or state.groups:
        n, nbytes = _replay_sequential(log, state)
    else:
        with gc_paused():
            n, nbytes = _replay_fast(raw_payloads(0), state, str(getattr(log, "directory", "?")), lazy=lazy)
    return LoadSummary(
        records=n,
        bytes=nbytes,
        seconds=time.perf_counter() - start,
        bytes_dropped=getattr(log, "bytes_dropped", 0),
    )


@contextlib.contextmanager
def gc_paused():
    """The loader allocates millions of small tuples and frees none: the cyclic GC would rescan them again
    and again for nothing (there are no cycles here)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
    if state.consumer_groups:
        h.update(b"\0consumer groups\0")
        for group in sorted(state.consumer_groups):
            h.update(repr((group, state.consumer_groups[group].durable())).encode())
    return h.hexdigest()


def _replay_fast(payloads, state: DurableState, where: str, start_offset: int = 0,
                 lazy: bool = False) -> tuple[int, int]:
    replayer = Replayer(where, start_offset, lazy=lazy)
    replayer.feed(payloads)
    replayer.install(state)
    return replayer.records, replayer.bytes


class Replayer:
    """The fast replay, fed CRC-checked payloads in log order from ``start_offset`` in as many calls as
    the caller likes, then installed into an empty state once (``install``): the same result as feeding
    them all at once. A hot standby (``actors.standby``) feeds a follower's log as it grows and installs at
    promotion; with ``standby=True`` it also keeps the keys that are not offset commits aside and drops
    deleted keys as it goes, so that the install does not scan every key."""

    def __init__(self, where: str, start_offset: int = 0, *, lazy: bool = False, standby: bool = False) -> None:
        self.where = where
        self.next_offset = start_offset  # where the next batch must start
        self.last_epoch: int | None = None  # the leader epoch of the last batch fed
        self.records = 0
        self.bytes = 0
        self._last: dict = {}
        self._presence = GroupPresence()
        self._with_values: set | None = set() if lazy else None  # lazy: the groups of every tombstone-free header
        # Standby: the keys that are not offset commits (a dict: first-seen order, as a full load's).
        self._others: dict | None = {} if standby else None
        self._installed = False

    def feed(self, payloads, *, skip_applied: bool = False) -> None:
        """Apply ``(path, position, payload)`` in log order. ``skip_applied``: batches that end before
        ``next_offset`` are passed over (a read from a sparse index position starts before it)."""
        if self._installed:
            raise RuntimeError("this replayer has been installed")
        unpackb = msgpack.unpackb
        last = self._last
        presence = self._presence
        headers = None if self._with_values is None else self._with_values.update
        others = self._others
        n = self.records
        nbytes = self.bytes
        expected = self.next_offset
        epoch = self.last_epoch
        try:  # a batch that fails leaves the position after the last one applied
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
                    if skip_applied and type(p[1]) is int and p[1] + span <= expected:
                        continue
                    raise CorruptLogError(path, pos, f"batch starts at offset {p[1]}, expected {expected}")
                if p[5] & FLAG_TOMBSTONES:
                    try:
                        _replay_batch_in_order(flat, last, presence, n)
                    except (RecordFormatError, ValueError) as e:
                        raise CorruptLogError(path, pos, str(e)) from e
                else:
                    presence.observe_values(p[6], n)
                    if headers is not None:
                        headers(p[6])
                    it = iter(flat)
                    last.update(zip(it, it, strict=False))
                if others is not None:
                    _set_aside(flat, last, others)
                expected += span
                n += count
                nbytes += len(payload) + 8
                epoch = p[2]
        finally:
            self.records, self.bytes, self.next_offset, self.last_epoch = n, nbytes, expected, epoch

    def install(self, state: DurableState) -> None:
        """Put what was fed into ``state`` (empty): lazily (pending offsets) if made ``lazy``."""
        if self._installed:
            raise RuntimeError("this replayer has been installed")
        self._installed = True
        try:
            if self._with_values is not None:
                _install_lazy(self._last, self._presence, self._with_values, state, self.where, self._others)
            else:
                _install(self._last, self._presence, state)
        except (RecordFormatError, TypeError, ValueError, IndexError) as e:
            raise CorruptLogError(self.where, None, f"a record cannot be decoded ({e})") from e


def _set_aside(flat: tuple, last: dict, others: dict) -> None:
    """Standby bookkeeping for one batch: its keys that are not offset commits go to ``others``, and its
    tombstones leave ``last`` (a deleted key and an absent one replay alike)."""
    for i in range(0, len(flat), 2):
        kb = flat[i]
        if type(kb) is not bytes or len(kb) < 2 or kb[0] != 0x94 or kb[1] != OFFSET_COMMIT_KEY_TYPE:
            others[kb] = None
        if flat[i + 1] is None and last.get(kb) is None:  # deleted by this batch (not re-created after)
            last.pop(kb, None)


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
    keys = list(last)
    values = list(last.values())
    if None in values:  # tombstones left nothing behind
        keys = [k for k, v in zip(keys, values, strict=True) if v is not None]
        values = [v for v in values if v is not None]
    _install_metadata(_put_offsets(keys, values, state.topics, state.offsets), state)
    presence.values_survive(state.offsets)
    _add_simple_groups(presence, state)


def _install_lazy(last: dict, presence: GroupPresence, with_values: set, state: DurableState, where: str,
                  set_aside: dict | None = None) -> None:
    """The survivors that are offset commits stay as they are (key bytes -> decoded raw value) and become
    ``state``'s pending offsets; only group metadata, and the offsets of groups whose metadata was deleted
    and that are absent (which ``offset_only_groups`` must see), are decoded now. ``set_aside``: the keys
    that are not offset commits, known already (and ``last`` holds no tombstone)."""
    if set_aside is None:
        others = [k for k in last if k[0] != 0x94 or k[1] != OFFSET_COMMIT_KEY_TYPE]  # keys not of an offset
    else:
        others = [k for k in set_aside if k in last]
    eager = {k: last.pop(k) for k in others}
    if set_aside is None and None in last.values():  # offsets deleted by tombstones
        last = {k: v for k, v in last.items() if v is not None}
    keys = [k for k, v in eager.items() if v is not None]
    _install_metadata(_put_offsets(keys, [eager[k] for k in keys], state.topics, state.offsets), state)
    # Presence without decoding the pending keys: a group without a metadata tombstone is present once it
    # had any offset value, which a batch's header names (with tombstones, ``observe`` saw each record).
    presence.values_survive(with_values)
    _add_simple_groups(presence, state)
    absent = [g for g in presence.metadata_tombstone_at if g not in state.groups and g not in state.consumer_groups]
    if absent:
        prefixes = tuple(offset_commit_key_prefix(g) for g in absent)
        orphans = [k for k in last if k.startswith(prefixes)]
        _put_offsets(orphans, [last.pop(k) for k in orphans], state.topics, state.offsets)
    state.attach_pending(RawOffsets(last, state.topics, where))


def _add_simple_groups(presence: GroupPresence, state: DurableState) -> None:
    groups, consumer_groups = state.groups, state.consumer_groups
    for group in presence.simple_groups():
        if group not in groups and group not in consumer_groups:
            groups[group] = None


def _install_metadata(records: list, state: DurableState) -> None:
    """The surviving values that are not offsets. A consumer group exists exactly when the last record of
    its ``ConsumerGroupMetadata`` key is a value: the coordinator deletes a group's other keys before that
    one (``shard_consumer``), so last-write-wins per key leaves what replaying in order does."""
    groups = state.groups
    consumer = []
    for fields, value in records:
        type_id = fields[0]
        if type_id == GROUP_METADATA_KEY_TYPE:
            groups[fields[1]] = decode_group_metadata_value(value)
        elif type_id in CONSUMER_GROUP_TYPES:
            consumer.append((fields, value))
        else:
            raise RecordFormatError(f"unknown record type {type_id}")
    if not consumer:
        return
    alive = {fields[1] for fields, _ in consumer if fields[0] == CONSUMER_GROUP_METADATA_KEY_TYPE}
    # The group's metadata first (it creates the group), then its other keys.
    for fields, value in sorted(consumer, key=lambda r: r[0][0] != CONSUMER_GROUP_METADATA_KEY_TYPE):
        if fields[1] in alive:
            key_type, _, _ = CONSUMER_GROUP_TYPES[fields[0]]
            state.replay(key_type(*fields[1:]), decode_consumer_group_value(fields[0], value))


def _decode_keys(keys: list[bytes]) -> tuple:
    """Every key's fields in one call: the keys laid end to end behind one array header."""
    fields = msgpack.unpackb(b"\xdd" + len(keys).to_bytes(4, "big") + b"".join(keys), use_list=False)
    if len(fields) != len(keys):
        raise RecordFormatError("a record key is not one msgpack value")
    return fields


def _put_offsets(keys: list, values: list, topics: dict, offsets: dict) -> list:
    """Decode ``keys`` (with their raw ``values``, no tombstones) and put every offset commit among them in
    ``offsets`` (an offset already there stays: it is newer); return the other records, ``(fields, value)``."""
    if not keys:
        return []
    oc_value = decode_offset_commit_value
    new_value = tuple.__new__
    ocv = OffsetCommitValue
    oc_type = OFFSET_COMMIT_KEY_TYPE
    all_fields = _decode_keys(keys)
    # Objects that many offsets share are kept once: a topic's name (``state.topics``, which the live
    # write path uses too), a (topic, partition) that many groups commit (found through a dict that goes
    # with this call), and the commit timestamp of one commit request, one number for all its partitions
    # (they come one after the other). A compacted log of many groups over the same topics loads into
    # half the memory.
    intern_topic = topics.setdefault
    intern_tp = {}.setdefault
    ts = None
    current_group = None
    by_tp: dict = {}
    others = []
    for fields, value in zip(all_fields, values, strict=True):
        if fields[0] != oc_type:
            others.append((fields, value))
            continue
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
            value = new_value(ocv, (value[1], value[2], value[3], ts, value[5]))
        elif type(value) is tuple and len(value) == 5 and value[0] == 0:
            if value[4] != ts:
                ts = value[4]
            value = new_value(ocv, (value[1], value[2], value[3], ts, None))
        else:
            value = oc_value(value)
        if tp not in by_tp:
            by_tp[tp] = value
    return others


GROUP_SCANS_BEFORE_INDEXING = 8
INDEX_CHUNK_KEYS = 100_000


class RawOffsets:
    """A lazily loaded partition's pending offsets (``coordinator.state.PendingOffsets``): the surviving
    offset-commit records as the log holds them, encoded key -> decoded raw value, turned into objects a key
    at a time (``take``), a group at a time (``take_group``) or a slice at a time (``drain_into``).

    A group is found by its keys' prefix, a scan of what is pending on the caller's thread (a shard's event
    loop). After ``GROUP_SCANS_BEFORE_INDEXING`` scans, a thread indexes a snapshot of the pending keys by
    group (every key decoded, off the caller's thread but for the GIL, taken a chunk at a time); once it is
    done each group costs only its own keys."""

    __slots__ = ("_raw", "_topics", "_where", "_scans", "_by_group", "_indexer")

    def __init__(self, raw: dict, topics: dict, where: str) -> None:
        self._raw = raw
        self._topics = topics
        self._where = where
        self._scans = 0
        self._by_group: dict[str, list[bytes]] | None = None  # set, whole, by the indexing thread
        self._indexer: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._raw)

    # A record that cannot be decoded stays pending (every method decodes before it removes anything), so
    # the request that met it changes nothing and the shard's background materialization, which reaches
    # every record, fails the partition as a failed load would.
    def take(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        key = encode_offset_commit_key(group, topic, partition)
        raw = self._raw.get(key)
        if raw is None:
            return None
        try:
            value = decode_offset_commit_value(raw)
        except (RecordFormatError, TypeError, ValueError) as e:
            raise CorruptLogError(self._where, None, f"a record cannot be decoded ({e})") from e
        del self._raw[key]
        return value

    def take_group(self, group: str) -> list:
        raw = self._raw
        by_group = self._by_group
        if by_group is None:
            self._scans += 1
            if self._scans > GROUP_SCANS_BEFORE_INDEXING and self._indexer is None:
                self._indexer = threading.Thread(target=self._index, args=(list(raw),), daemon=True,
                                                 name="pending-offsets-index")
                self._indexer.start()
            prefix = offset_commit_key_prefix(group)
            keys = [k for k in raw if k.startswith(prefix)]
        else:  # keys taken or drained since the index was built are gone from ``raw``
            keys = [k for k in by_group.pop(group, ()) if k in raw]
        if not keys:
            return []
        offsets: dict = {}
        try:
            others = _put_offsets(keys, [raw[k] for k in keys], self._topics, offsets)
        except (RecordFormatError, TypeError, ValueError, IndexError) as e:
            raise CorruptLogError(self._where, None, f"a record cannot be decoded ({e})") from e
        if others or set(offsets) != {group}:
            raise CorruptLogError(self._where, None, f"a pending offset of group {group!r} has a malformed key")
        for k in keys:
            del raw[k]
        return list(offsets[group].items())

    def _index(self, keys: list[bytes]) -> None:
        """The indexing thread: ``keys`` (a snapshot) by group; it reads nothing else. A key it cannot decode
        leaves no index (the scans go on; the background materialization reports the record)."""
        by_group: dict[str, list[bytes]] = {}
        try:
            for start in range(0, len(keys), INDEX_CHUNK_KEYS):
                chunk = keys[start:start + INDEX_CHUNK_KEYS]
                for key, f in zip(chunk, _decode_keys(chunk), strict=True):
                    by_group.setdefault(f[1], []).append(key)
        except (RecordFormatError, ValueError, TypeError, IndexError, msgpack.UnpackException):
            return
        self._by_group = by_group

    def wait_indexed(self, timeout_s: float) -> bool:
        """Whether the index is ready, waiting at most ``timeout_s`` for a thread building it."""
        if self._indexer is not None:
            self._indexer.join(timeout_s)
        return self._by_group is not None

    def drain_into(self, offsets: dict, limit: int | None) -> None:
        raw = self._raw
        if limit is None or limit >= len(raw):
            items = list(raw.items())
            raw.clear()
        else:
            pop = raw.popitem
            items = [pop() for _ in range(limit)]
        decoded: dict = {}
        try:
            with gc_paused():
                others = _put_offsets([k for k, _ in items], [v for _, v in items], self._topics, decoded)
            if others:
                raise RecordFormatError(f"a pending offset has a key of type {others[0][0][0]}")
        except (RecordFormatError, TypeError, ValueError, IndexError) as e:
            raw.update(items)  # still pending: nothing was taken
            raise CorruptLogError(self._where, None, f"a record cannot be decoded ({e})") from e
        for group, by_tp in decoded.items():
            into = offsets.get(group)
            if into is None:
                offsets[group] = by_tp
            else:
                for tp, value in by_tp.items():
                    into.setdefault(tp, value)
