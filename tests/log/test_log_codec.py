"""Codec: round trips, old value versions decode with defaults, newer versions and damage are refused."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from log_testlib import records
from raygroups.coordinator.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    new_offset_commit_record,
)
from raygroups.offsets_log.batch import Batch
from raygroups.offsets_log.codec import (
    PAYLOAD_MAGIC,
    RecordFormatError,
    decode_frame,
    decode_offset_commit_value,
    decode_payload,
    encode_batch,
    encode_key,
    encode_payload,
    unpack_payload,
)


@settings(max_examples=100, deadline=None)
@given(recs=st.lists(records, min_size=1, max_size=8))
def test_batch_round_trip(recs):
    batch = Batch(17, 3, 123456, tuple(recs))
    frame = encode_batch(batch)
    assert decode_frame(frame) == batch
    assert frame[8:10] == PAYLOAD_MAGIC


def test_offset_commit_v0_decodes_with_default_expire_and_v1_keeps_it():
    assert decode_offset_commit_value((0, 5, 1, "m", 99)) == OffsetCommitValue(5, 1, "m", 99, None)
    assert decode_offset_commit_value((1, 5, 1, "m", 99, 7)) == OffsetCommitValue(5, 1, "m", 99, 7)


def test_writer_uses_v0_unless_expire_is_set():
    _, v = new_offset_commit_record("g", "t", 0, 5, 1, "m", 99)
    payload = unpack_payload(encode_payload(Batch(0, 0, 0, ((OffsetCommitKey("g", "t", 0), v),))))
    assert payload[7][1][0] == 0


def test_an_old_batch_written_by_hand_is_readable():
    # A batch as an older writer produced it: OffsetCommit value v0 (no expire field).
    key = msgpack.packb((1, "g", "t", 3), use_bin_type=True)
    payload = msgpack.packb((1, 0, 0, 0, 1, 0, ["g"], [key, (0, 42, -1, "", 7)]), use_bin_type=True)
    batch = decode_payload(payload)
    assert batch.records == ((OffsetCommitKey("g", "t", 3), OffsetCommitValue(42, -1, "", 7, None)),)


@pytest.mark.parametrize(
    "key,value,match",
    [
        ((1, "g", "t", 0), (9, 1, 2, "", 3), "OffsetCommit value version 9"),
        ((2, "g"), (5, "", 0, None, None, -1, ()), "GroupMetadata value version 5"),
        ((7, "g"), (0,), "unknown record type 7"),
    ],
)
def test_newer_versions_and_unknown_types_are_refused_clearly(key, value, match):
    kb = msgpack.packb(key, use_bin_type=True)
    payload = msgpack.packb((1, 0, 0, 0, 1, 0, ["g"], [kb, value]), use_bin_type=True)
    with pytest.raises(RecordFormatError, match=match):
        decode_payload(payload)


def test_every_single_bit_flip_is_detected():
    frame = encode_batch(Batch(0, 1, 2, (new_offset_commit_record("g", "t", 0, 5, 1, "m", 99),)))
    for i in range(len(frame)):
        for bit in range(8):
            damaged = bytearray(frame)
            damaged[i] ^= 1 << bit
            with pytest.raises(RecordFormatError):
                decode_frame(bytes(damaged))


def test_encoding_refuses_mismatched_records():
    with pytest.raises(RecordFormatError):
        encode_batch(Batch(0, 0, 0, ((GroupMetadataKey("g"), OffsetCommitValue(1, 1, "", 1)),)))
    with pytest.raises(RecordFormatError):
        encode_key(("g", "t", 0))


def test_equal_keys_encode_to_equal_bytes():
    assert encode_key(OffsetCommitKey("g", "t", 1)) == encode_key(OffsetCommitKey("g", "t", 1))
    assert encode_key(OffsetCommitKey("g", "t", 1)) != encode_key(GroupMetadataKey("g"))


def test_compacted_batches_round_trip_and_keep_their_span():
    rec = new_offset_commit_record("g", "t", 0, 5, 1, "m", 99)
    sparse = Batch(10, 2, 5, (rec, rec), offset_deltas=(1, 4), last_offset_delta=6)
    assert (sparse.last_offset, sparse.next_offset, list(sparse.record_offsets())) == (16, 17, [11, 14])
    assert decode_frame(encode_batch(sparse)) == sparse
    empty = Batch(10, 2, 5, (), offset_deltas=(), last_offset_delta=3)
    assert empty.next_offset == 14 and decode_frame(encode_batch(empty)) == empty
    assert Batch(0, 0, 0, (rec,), offset_deltas=(0,), last_offset_delta=0) == Batch(0, 0, 0, (rec,))
    with pytest.raises(ValueError):
        Batch(0, 0, 0, (rec, rec), offset_deltas=(1, 1), last_offset_delta=2)


@pytest.mark.parametrize("raw", [(0, 5, 1, "m", 99, 7), (1, 5, 1, "m", 99), (), (0,), [0, 5, 1, "m", 99]])
def test_offset_commit_values_of_the_wrong_shape_are_refused(raw):
    with pytest.raises(RecordFormatError):
        decode_offset_commit_value(raw)
