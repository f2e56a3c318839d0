"""Batch codec: ``[length][crc32][msgpack payload]`` frames carrying versioned coordinator records.

Frame layout (big-endian)::

    uint32 length        number of payload bytes
    uint32 crc32         zlib CRC-32 of the 4 length bytes followed by the payload
    payload              msgpack array, see below

Payload (format 1), a msgpack array of 8 elements, or 10 for a batch written by the compactor::

    [1, base_offset, leader_epoch, timestamp_ms, record_count, flags, groups, records]
    [1, base_offset, leader_epoch, timestamp_ms, record_count, flags, groups, records,
     offset_deltas, last_offset_delta]

* A dense batch spans ``record_count`` offsets; a compacted one spans ``last_offset_delta + 1`` offsets,
  record ``i`` having offset ``base_offset + offset_deltas[i]`` (it may have no records at all).

* ``flags`` bit 0 (``FLAG_TOMBSTONES``): at least one record is a tombstone.
* ``groups``: the distinct group ids that have a non-tombstone record in this batch (the loader uses it
  to follow group re-creation after a group tombstone without decoding keys).
* ``records``: a flat array ``[key0, value0, key1, value1, ...]``. A key is the msgpack encoding of
  ``[type_id, *key fields]`` stored as a msgpack ``bin`` (as Kafka compacts by serialized key bytes,
  equal keys have equal bytes, which lets the loader resolve last-write-wins per key without building
  any key object). A value is ``[value_version, *fields]`` or ``nil`` for a tombstone.

Value versions (a record type that gains a field gets a new version; older versions decode with the
field's default):

* OffsetCommit (type 1): v0 ``[offset, leader_epoch, metadata, commit_timestamp_ms]``,
  v1 = v0 + ``expire_timestamp_ms`` (written only when it is set, as Kafka does).
* GroupMetadata (type 2): v0 ``[protocol_type, generation, protocol, leader,
  current_state_timestamp_ms, members]``, a member being ``[member_id, group_instance_id, client_id,
  client_host, rebalance_timeout_ms, session_timeout_ms, subscription, assignment]``.
* The KIP-848 consumer group records (types 3 and 5-8, ``coordinator.consumer_records``): key ``[type_id,
  group]`` or ``[type_id, group, member_id]``; value v0 ``[0, *the value's fields in order]``, an assignment
  being ``[[topic, [partition, ...]], ...]``.

Guarantees: ``decode_payload(encode_batch(b)[8:]) == b`` for every batch of supported records; a frame
whose bytes changed fails its CRC. Not guaranteed: detecting a frame replaced by another valid frame.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

import msgpack
from raygroups.coordinator.consumer_records import CONSUMER_GROUP_RECORD_TYPES
from raygroups.coordinator.records import (
    GROUP_METADATA_KEY_TYPE,
    OFFSET_COMMIT_KEY_TYPE,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)
from raygroups.offsets_log.batch import Batch
from raygroups.offsets_log.errors import LogError

FORMAT = 1
FLAG_TOMBSTONES = 1
HEADER = struct.Struct(">II")
HEADER_BYTES = HEADER.size
LENGTH = struct.Struct(">I")
# Every payload starts with a fixarray(8 or 10) marker followed by the format byte; recovery searches
# for these to tell a torn tail from damage followed by valid batches.
PAYLOAD_MAGIC = b"\x98" + bytes([FORMAT])
COMPACTED_PAYLOAD_MAGIC = b"\x9a" + bytes([FORMAT])
PAYLOAD_MAGICS = (PAYLOAD_MAGIC, COMPACTED_PAYLOAD_MAGIC)
MIN_PAYLOAD_BYTES = 10
MAX_BATCH_BYTES = 1 << 30

OFFSET_COMMIT_VALUE_VERSIONS = {0: 4, 1: 5}  # version -> number of fields
GROUP_METADATA_VALUE_VERSIONS = {0: 6}
MEMBER_FIELDS = 8
# Consumer group records: type id -> (key class, value class, number of key fields after the type id).
CONSUMER_GROUP_TYPES = {type_id: (key, value, len(key.__slots__))
                        for key, (type_id, value) in CONSUMER_GROUP_RECORD_TYPES.items()}

_packer = msgpack.Packer(use_bin_type=True, autoreset=True)
_pack = _packer.pack


class RecordFormatError(LogError):
    """A record that this codec cannot encode or decode (unknown type, newer version, wrong shape)."""


# ---------------------------------------------------------------------------------------------- keys


def encode_key(key) -> bytes:
    t = type(key)
    if t is OffsetCommitKey:
        return _pack((OFFSET_COMMIT_KEY_TYPE, key.group, key.topic, key.partition))
    if t is GroupMetadataKey:
        return _pack((GROUP_METADATA_KEY_TYPE, key.group))
    consumer = CONSUMER_GROUP_RECORD_TYPES.get(t)
    if consumer is not None:
        return _pack((consumer[0], *(getattr(key, f) for f in t.__slots__)))
    raise RecordFormatError(f"cannot encode a record key of type {t.__name__}")


def key_type_id(key) -> int:
    """The type id of a record key object."""
    t = type(key)
    if t is OffsetCommitKey:
        return OFFSET_COMMIT_KEY_TYPE
    if t is GroupMetadataKey:
        return GROUP_METADATA_KEY_TYPE
    return CONSUMER_GROUP_RECORD_TYPES[t][0]


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    """``encode_key(OffsetCommitKey(group, topic, partition))`` without building the key object (``packb``:
    the shard's event loop calls this while its I/O thread encodes batches with ``_pack``)."""
    return msgpack.packb((OFFSET_COMMIT_KEY_TYPE, group, topic, partition), use_bin_type=True)


def offset_commit_key_prefix(group: str) -> bytes:
    """The bytes every encoded ``OffsetCommitKey`` of ``group`` starts with (a 4-array header, the type)."""
    return b"\x94" + msgpack.packb((OFFSET_COMMIT_KEY_TYPE, group), use_bin_type=True)[1:]


def decode_key_fields(raw: bytes) -> tuple:
    """The ``(type_id, *fields)`` tuple of an encoded key."""
    fields = msgpack.unpackb(raw, use_list=False)
    if not isinstance(fields, tuple) or not fields:
        raise RecordFormatError(f"malformed record key {raw!r}")
    return fields


def decode_key(raw: bytes):
    fields = decode_key_fields(raw)
    type_id = fields[0]
    if type_id == OFFSET_COMMIT_KEY_TYPE and len(fields) == 4:
        return OffsetCommitKey(fields[1], fields[2], fields[3])
    if type_id == GROUP_METADATA_KEY_TYPE and len(fields) == 2:
        return GroupMetadataKey(fields[1])
    consumer = CONSUMER_GROUP_TYPES.get(type_id)
    if consumer is not None and len(fields) == consumer[2] + 1 and all(isinstance(f, str) for f in fields[1:]):
        return consumer[0](*fields[1:])
    raise RecordFormatError(f"unknown record type {type_id} (key {fields!r}); written by a newer version?")


# -------------------------------------------------------------------------------------------- values


def encode_value(key, value) -> tuple | None:
    if value is None:
        return None
    t = type(value)
    if t is OffsetCommitValue and type(key) is OffsetCommitKey:
        if value.expire_timestamp_ms is None:
            return (0, value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms)
        return (
            1,
            value.offset,
            value.leader_epoch,
            value.metadata,
            value.commit_timestamp_ms,
            value.expire_timestamp_ms,
        )
    if t is GroupMetadataValue and type(key) is GroupMetadataKey:
        members = tuple(
            (
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                bytes(m.subscription),
                bytes(m.assignment),
            )
            for m in value.members
        )
        return (
            0,
            value.protocol_type,
            value.generation,
            value.protocol,
            value.leader,
            value.current_state_timestamp_ms,
            members,
        )
    consumer = CONSUMER_GROUP_RECORD_TYPES.get(type(key))
    if consumer is not None and t is consumer[1]:
        return (0, *(getattr(value, f) for f in t.__slots__))
    raise RecordFormatError(f"cannot encode a {t.__name__} value under a {type(key).__name__}")


def _check_version(name: str, versions: dict[int, int], raw) -> None:
    if type(raw) is not tuple or not raw:
        raise RecordFormatError(f"malformed {name} value {raw!r}")
    n = versions.get(raw[0])
    if n is None:
        raise RecordFormatError(
            f"{name} value version {raw[0]!r} is not supported by this reader (known: {sorted(versions)}); "
            f"the log was written by a newer version"
        )
    if len(raw) != n + 1:
        raise RecordFormatError(f"{name} value version {raw[0]} needs {n} fields, got {len(raw) - 1}")


def decode_offset_commit_value(raw) -> OffsetCommitValue:
    _check_version("OffsetCommit", OFFSET_COMMIT_VALUE_VERSIONS, raw)
    # v0 lacks expire_timestamp_ms: the dataclass default (None) fills it.
    return OffsetCommitValue(*raw[1:])


def decode_group_metadata_value(raw) -> GroupMetadataValue:
    _check_version("GroupMetadata", GROUP_METADATA_VALUE_VERSIONS, raw)
    members = []
    for m in raw[6]:
        if len(m) != MEMBER_FIELDS:
            raise RecordFormatError(f"malformed group member {m!r}")
        members.append(MemberMetadata(*m))
    return GroupMetadataValue(raw[1], raw[2], raw[3], raw[4], raw[5], tuple(members))


def decode_value(type_id: int, raw):
    if raw is None:
        return None
    if type_id == OFFSET_COMMIT_KEY_TYPE:
        return decode_offset_commit_value(raw)
    if type_id == GROUP_METADATA_KEY_TYPE:
        return decode_group_metadata_value(raw)
    consumer = CONSUMER_GROUP_TYPES.get(type_id)
    if consumer is not None:
        return decode_consumer_group_value(type_id, raw)
    raise RecordFormatError(f"unknown record type {type_id}")


def decode_consumer_group_value(type_id: int, raw):
    """A consumer group record's value (v0) from its raw msgpack tuple."""
    value_type = CONSUMER_GROUP_TYPES[type_id][1]
    _check_version(value_type.__name__, {0: len(value_type.__slots__)}, raw)
    return value_type(*raw[1:])


# ------------------------------------------------------------------------------------------- batches


def encode_records(records: Iterable) -> tuple[list, list, int]:
    """``(flat, groups, flags)`` for the payload; raises ``RecordFormatError`` before any I/O."""
    flat: list = []
    append = flat.append
    pack = _pack
    groups: dict[str, None] = {}
    flags = 0
    ock, ocv, oc_type = OffsetCommitKey, OffsetCommitValue, OFFSET_COMMIT_KEY_TYPE
    for key, value in records:
        # Inlined common case (an OffsetCommit value): appends with fsync per batch are encode-bound.
        if type(value) is ocv and type(key) is ock and value.expire_timestamp_ms is None:
            group = key.group
            append(pack((oc_type, group, key.topic, key.partition)))
            append((0, value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms))
            groups[group] = None
            continue
        append(encode_key(key))
        append(encode_value(key, value))
        if value is None:
            flags |= FLAG_TOMBSTONES
        else:
            groups[key.group] = None
    return flat, list(groups), flags


def encode_payload(batch: Batch) -> bytes:
    flat, groups, flags = encode_records(batch.records)
    head = (FORMAT, batch.base_offset, batch.leader_epoch, batch.timestamp_ms, len(batch.records), flags, groups, flat)
    if batch.offset_deltas is None:
        return _pack(head)
    return _pack(head + (batch.offset_deltas, batch.last_offset_delta))


def encode_raw_payload(
    base_offset: int, leader_epoch: int, timestamp_ms: int, raw_records: list, offset_deltas: list, last_offset_delta: int
) -> bytes:
    """A compacted payload from already-encoded ``(key bytes, raw value)`` records (no re-encoding)."""
    flat: list = []
    groups: dict[str, None] = {}
    flags = 0
    for kb, rv in raw_records:
        flat.append(kb)
        flat.append(rv)
        if rv is None:
            flags |= FLAG_TOMBSTONES
        else:
            groups[decode_key_fields(kb)[1]] = None
    return _pack(
        (
            FORMAT,
            base_offset,
            leader_epoch,
            timestamp_ms,
            len(raw_records),
            flags,
            list(groups),
            flat,
            tuple(offset_deltas),
            last_offset_delta,
        )
    )


def frame(payload: bytes) -> bytes:
    if len(payload) > MAX_BATCH_BYTES:
        raise RecordFormatError(f"batch of {len(payload)} bytes exceeds the limit of {MAX_BATCH_BYTES} bytes")
    length = LENGTH.pack(len(payload))
    return length + LENGTH.pack(zlib.crc32(payload, zlib.crc32(length))) + payload


def encode_batch(batch: Batch) -> bytes:
    """The complete frame of ``batch``."""
    return frame(encode_payload(batch))


def frame_crc_ok(buf, pos: int, length: int, crc: int) -> bool:
    mv = memoryview(buf)
    return zlib.crc32(mv[pos + HEADER_BYTES : pos + HEADER_BYTES + length], zlib.crc32(mv[pos : pos + 4])) == crc


def payload_base_offset(payload) -> int:
    """The base offset of a batch payload, read from its head without decoding the records."""
    unpacker = msgpack.Unpacker()
    unpacker.feed(bytes(payload[:MIN_PAYLOAD_BYTES + 16]))
    try:
        unpacker.read_array_header()
        if unpacker.unpack() != FORMAT:
            raise RecordFormatError("not a format-1 batch payload")
        base = unpacker.unpack()
    except (msgpack.OutOfData, ValueError) as e:
        raise RecordFormatError(f"not a batch payload ({e})") from e
    if type(base) is not int:
        raise RecordFormatError(f"a batch's base offset must be an int, got {base!r}")
    return base


def unpack_payload(payload) -> tuple:
    """The raw payload tuple; raises ``RecordFormatError`` if it is not a format-1 payload."""
    try:
        p = msgpack.unpackb(payload, use_list=False)
    except Exception as e:  # msgpack raises several unrelated exception types
        raise RecordFormatError(f"undecodable batch payload: {e}") from e
    if type(p) is not tuple or len(p) not in (8, 10) or p[0] != FORMAT:
        raise RecordFormatError("batch payload is not a format-1 batch")
    if len(p[7]) != 2 * p[4] or p[4] < (1 if len(p) == 8 else 0):
        raise RecordFormatError(f"batch claims {p[4]} records but carries {len(p[7]) // 2}")
    if len(p) == 10 and (len(p[8]) != p[4] or p[9] < 0):
        raise RecordFormatError("compacted batch with inconsistent offset deltas")
    return p


_U8 = struct.Struct(">B")
_INT_FORMATS = {
    0xCC: struct.Struct(">B"),
    0xCD: struct.Struct(">H"),
    0xCE: struct.Struct(">I"),
    0xCF: struct.Struct(">Q"),
    0xD0: struct.Struct(">b"),
    0xD1: struct.Struct(">h"),
    0xD2: struct.Struct(">i"),
    0xD3: struct.Struct(">q"),
}


def _read_int(buf, pos: int) -> tuple[int, int] | None:
    b = buf[pos]
    if b <= 0x7F:
        return b, pos + 1
    if b >= 0xE0:
        return b - 0x100, pos + 1
    fmt = _INT_FORMATS.get(b)
    if fmt is None:
        return None
    return fmt.unpack_from(buf, pos + 1)[0], pos + 1 + fmt.size


def peek_header(payload) -> tuple[int, int, int, int, int]:
    """``(base_offset, leader_epoch, timestamp_ms, record_count, span)`` without decoding the records.

    Recovery uses it to walk a segment; the records are checked when they are read. Falls back to a full
    decode for compacted batches (their span follows the records) and anything unusual."""
    try:
        if bytes(payload[:2]) == PAYLOAD_MAGIC:
            pos = 2
            fields = []
            for _ in range(4):
                r = _read_int(payload, pos)
                if r is None:
                    break
                fields.append(r[0])
                pos = r[1]
            if len(fields) == 4 and fields[3] >= 1:
                return fields[0], fields[1], fields[2], fields[3], fields[3]
    except (IndexError, struct.error):
        pass
    p = unpack_payload(payload)
    return p[1], p[2], p[3], p[4], payload_span(p)


def payload_span(p: tuple) -> int:
    """How many offsets the batch of raw payload ``p`` covers."""
    return p[9] + 1 if len(p) == 10 else p[4]


def batch_from_raw(p: tuple) -> Batch:
    flat = p[7]
    records = []
    for i in range(0, len(flat), 2):
        key = decode_key(flat[i])
        records.append((key, decode_value(key_type_id(key), flat[i + 1])))
    if len(p) == 10:
        return Batch(p[1], p[2], p[3], tuple(records), p[8], p[9])
    return Batch(p[1], p[2], p[3], tuple(records))


def decode_payload(payload) -> Batch:
    return batch_from_raw(unpack_payload(payload))


def decode_frame(data) -> Batch:
    """Decode one complete frame (header + payload), verifying its CRC."""
    if len(data) < HEADER_BYTES:
        raise RecordFormatError("frame shorter than its header")
    length, crc = HEADER.unpack_from(data, 0)
    if len(data) != HEADER_BYTES + length or not frame_crc_ok(data, 0, length, crc):
        raise RecordFormatError("frame length or CRC mismatch")
    return decode_payload(memoryview(data)[HEADER_BYTES:])
