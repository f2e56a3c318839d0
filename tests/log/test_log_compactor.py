"""Reference compactor: same replayed state, offsets and order preserved, old tombstones dropped."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_testlib import (
    append_all,
    consumer_histories,
    histories,
    make_batches,
    narrow_histories,
    offsets_only_histories,
    record_lists,
    sequential_state,
)
from raygroups.coordinator.records import (
    new_group_metadata_tombstone_record,
    new_offset_commit_record,
    new_offset_commit_tombstone_record,
)
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log import CorruptLogError, open_log, replay
from raygroups.offsets_log.codec import encode_batch, encode_key
from raygroups.offsets_log.compactor import compact_batches, compact_segments

NO_FSYNC = {"fsync_for_testing": lambda fd: None}
PROPS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
any_history = st.one_of(record_lists, histories, narrow_histories, offsets_only_histories, consumer_histories())


def records_by_offset(batches):
    return {o: r for b in batches for o, r in zip(b.record_offsets(), b.records, strict=True)}


def check_compacted(original, compacted, *, everything_retained):
    assert sequential_state(compacted) == sequential_state(original)
    # same offset range, contiguous
    if original:
        assert compacted[0].base_offset == original[0].base_offset
        assert compacted[-1].next_offset == original[-1].next_offset
    for a, b in zip(compacted, compacted[1:], strict=False):
        assert a.next_offset == b.base_offset
    # every survivor is the original record at the same offset (so order is preserved too)
    before = records_by_offset(original)
    after = records_by_offset(compacted)
    assert all(before[o] == r for o, r in after.items())
    last = {}
    for o, (k, v) in sorted(before.items()):
        last[encode_key(k)] = (o, v)
    for o, v in last.values():
        if v is not None or everything_retained:
            assert o in after, "the last record of every key survives (tombstones: while retained)"
    return after


@PROPS
@given(recs=any_history, retention=st.integers(0, 30), now_shift=st.integers(0, 40), batch_records=st.integers(1, 5))
def test_compaction_preserves_replayed_state(recs, retention, now_shift, batch_records):
    original = make_batches(recs, timestamp_ms=1_000)
    compacted = compact_batches(
        original, delete_retention_ms=retention, now_ms=1_000 + now_shift, max_batch_records=batch_records
    )
    check_compacted(original, compacted, everything_retained=now_shift <= retention)
    # compaction is idempotent in effect
    again = compact_batches(compacted, delete_retention_ms=retention, now_ms=1_000 + now_shift)
    assert sequential_state(again) == sequential_state(original)


def test_old_tombstones_are_dropped_young_ones_kept():
    history = [
        [new_offset_commit_record("g", "t", 0, 1, -1, "", 1)],
        [new_offset_commit_record("g", "t", 1, 1, -1, "", 1)],
        [new_offset_commit_tombstone_record("g", "t", 0)],  # ts 1002
        [new_offset_commit_record("h", "t", 0, 1, -1, "", 1)],
        [new_offset_commit_tombstone_record("h", "t", 0)],  # ts 1004, h exists only by that commit
        [new_group_metadata_tombstone_record("x")],  # ts 1005, nothing to protect
    ]
    original = make_batches(history, timestamp_ms=1_000)
    old = compact_batches(original, delete_retention_ms=1, now_ms=2_000)
    after = records_by_offset(old)
    assert sorted(after) == [1, 3, 4]  # g's tombstone and x's are gone; h keeps commit + tombstone
    assert sequential_state(old) == sequential_state(original)
    young = compact_batches(original, delete_retention_ms=10_000, now_ms=2_000)
    assert sorted(records_by_offset(young)) == [1, 2, 3, 4, 5]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(recs=st.one_of(histories, narrow_histories).filter(lambda r: len(r) > 5))
def test_compacted_segments_swap_in_and_replay_identically(tmp_path_factory, recs):
    base = tmp_path_factory.mktemp("c")
    original = make_batches(recs, timestamp_ms=1_000)
    with open_log(base / "log", segment_bytes=1024, **NO_FSYNC) as log:
        append_all(log, original)
        closed = log.segment_paths(closed_only=True)
        active = log.segment_paths()[-1]
    stats = compact_segments(closed, base / "out", delete_retention_ms=5, now_ms=1_010)
    assert [os.path.basename(p) for p in stats.output_paths] == [os.path.basename(p) for p in closed]
    assert stats.bytes_out <= stats.bytes_in
    # A log made of the compacted closed segments plus the untouched active segment.
    shutil.copy(active, base / "out")
    shutil.copy(base / "log" / "leader-epoch-checkpoint", base / "out")
    with open_log(base / "out", segment_bytes=1024, **NO_FSYNC) as log:
        assert log.log_end_offset == original[-1].next_offset
        assert log.recovery_report.rebuilt_indexes == []
        log.verify()
        state = DurableState()
        replay(log, state)
        assert state == sequential_state(original)
        assert sequential_state(list(log.batches())) == state


def test_invalid_arguments():
    with pytest.raises(ValueError, match="delete_retention_ms must be an int >= 0"):
        compact_batches([], delete_retention_ms=-1, now_ms=0)
    with pytest.raises(ValueError, match="max_batch_records must be an int >= 1"):
        compact_batches([], delete_retention_ms=0, now_ms=0, max_batch_records=0)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(recs=st.one_of(histories, narrow_histories).filter(lambda r: len(r) > 5), data=st.data())
def test_replace_segments_in_a_live_log_even_when_interrupted(tmp_path_factory, recs, data):
    base = tmp_path_factory.mktemp("s")
    original = make_batches(recs, timestamp_ms=1_000)
    expected = sequential_state(original)
    with open_log(base / "log", segment_bytes=1024, **NO_FSYNC) as log:
        append_all(log, original)
        closed = log.segment_paths(closed_only=True)
        stats = compact_segments(closed, base / "out", delete_retention_ms=5, now_ms=1_010)
        k = data.draw(st.integers(0, len(closed)))  # a crash after k of the swaps
        log.replace_segments(stats.output_paths[:k])
        state = DurableState()
        replay(log, state)
        assert state == expected
    with open_log(base / "log", segment_bytes=1024, **NO_FSYNC) as log:
        assert log.recovery_report.rebuilt_indexes == []
        before = log.size_bytes
        log.replace_segments(stats.output_paths)
        assert log.size_bytes <= before
        state = DurableState()
        replay(log, state)
        assert state == expected
        assert log.verify() > 0


def test_replace_segments_refuses_mismatched_replacements(tmp_path):
    original = make_batches([[new_offset_commit_record("g", "t", p % 3, p, -1, "", 1)] for p in range(200)])
    with open_log(tmp_path / "log", segment_bytes=1024, **NO_FSYNC) as log:
        append_all(log, original)
        closed = log.segment_paths(closed_only=True)
        with pytest.raises(ValueError, match="no closed segment"):
            log.replace_segments([log.segment_paths()[-1]])
        stats = compact_segments(closed[:2], tmp_path / "out", delete_retention_ms=0, now_ms=0)
        wrong_place = str(tmp_path / "out" / os.path.basename(closed[2]))
        os.rename(stats.output_paths[1], wrong_place)
        with pytest.raises(CorruptLogError, match="expected"):
            log.replace_segments([wrong_place])
        short = tmp_path / "short" / os.path.basename(closed[0])
        short.parent.mkdir()
        short.write_bytes(encode_batch(original[0]))  # covers fewer offsets than the segment it would replace
        with pytest.raises(ValueError, match="ends at offset"):
            log.replace_segments([str(short)])
        assert sequential_state(list(log.batches())) == sequential_state(original)


@pytest.mark.parametrize("retention", [0, 10_000])
def test_a_consumer_group_lifecycle_compacts_and_loads_to_the_same_state(tmp_path, retention):
    """A concrete KIP-848 history (``consumer_group_lifecycle``): its compaction, with every tombstone expired
    or none, replays to the same state, and the fast loader reads the compacted log to it too."""
    from log_testlib import consumer_group_lifecycle

    original = make_batches(consumer_group_lifecycle(), timestamp_ms=1_000)
    compacted = compact_batches(original, delete_retention_ms=retention, now_ms=5_000)
    check_compacted(original, compacted, everything_retained=retention >= 5_000)
    expected = sequential_state(original)
    assert sorted(expected.consumer_groups) == ["g1"] and sorted(expected.groups) == ["g0"]
    with open_log(tmp_path / "p", **NO_FSYNC) as log:
        append_all(log, compacted)
    with open_log(tmp_path / "p", **NO_FSYNC) as log:
        loaded = DurableState()
        replay(log, loaded)
    assert loaded == expected
