"""The fast loader gives exactly the state of sequential ``DurableState.replay`` over the log."""

from __future__ import annotations

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
    OffsetCommitKey,
    new_group_metadata_record,
    new_group_metadata_tombstone_record,
    new_offset_commit_record,
    new_offset_commit_tombstone_record,
)
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log import CorruptLogError, InMemoryLog, LoadSummary, open_log, replay
from raygroups.offsets_log.loader import GROUP_SCANS_BEFORE_INDEXING, Replayer

NO_FSYNC = {"fsync_for_testing": lambda fd: None}
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def load(directory, batches, segment_bytes=1 << 20, lazy=False) -> tuple[DurableState, LoadSummary]:
    with open_log(directory, segment_bytes=segment_bytes, **NO_FSYNC) as log:
        append_all(log, batches)
    with open_log(directory, segment_bytes=segment_bytes, **NO_FSYNC) as log:
        state = DurableState()
        return state, replay(log, state, lazy=lazy)


@PROPS
@given(recs=st.one_of(record_lists, histories, narrow_histories, offsets_only_histories, consumer_histories()), segment_bytes=st.integers(1024, 4096))
def test_fast_loader_equals_sequential_replay(tmp_path_factory, recs, segment_bytes):
    batches = make_batches(recs)
    state, summary = load(tmp_path_factory.mktemp("p"), batches, segment_bytes)
    assert state == sequential_state(batches)
    assert summary.records == sum(len(b.records) for b in batches)


@PROPS
@given(recs=st.one_of(record_lists, histories, narrow_histories, offsets_only_histories, consumer_histories()),
       live=st.one_of(record_lists, histories), slice_size=st.integers(1, 5))
def test_a_lazy_load_with_live_writes_and_slices_equals_sequential_replay(tmp_path_factory, recs, live, slice_size):
    """Loaded lazily, the offsets stay pending while groups (simple ones included) and the groups with
    offsets but no metadata are exact at once; reads and writes of single keys, interleaved with slices of
    materialization, see and leave exactly what sequential replay of the log and the same writes does."""
    batches = make_batches(recs)
    state, summary = load(tmp_path_factory.mktemp("p"), batches, lazy=True)
    expected = sequential_state(batches)
    assert summary.records == sum(len(b.records) for b in batches)
    assert state.groups == expected.groups
    assert sorted(state.offset_only_groups()) == sorted(expected.offset_only_groups())
    for i, (key, value) in enumerate(r for batch in live for r in batch):
        if isinstance(key, OffsetCommitKey):
            assert state.offset(key.group, key.topic, key.partition) == expected.offset(key.group, key.topic,
                                                                                        key.partition)
        if i % 4 == 1:
            assert state.group_offsets(key.group) == expected.group_offsets(key.group)
        token = state.replay(key, value)
        if i % 3 == 2:  # a failed append takes the record back
            state.undo(token)
        else:
            expected.replay(key, value)
        if i % 2:
            state.materialize(slice_size)
    assert sorted(state.offset_only_groups()) == sorted(expected.offset_only_groups())  # before the rest
    assert state == expected
    assert state.pending_offsets == 0


def test_a_lazy_load_leaves_offsets_pending_until_needed(tmp_path):
    batches = make_batches([[new_offset_commit_record(f"g{i % 3}", "t", i, i, -1, "", 1) for i in range(9)]])
    state, _ = load(tmp_path / "p", batches, lazy=True)
    assert state.pending_offsets == 9 and set(state.groups) == {"g0", "g1", "g2"}
    assert state.offset("g1", "t", 4).offset == 4  # one key, taken out of what is pending
    assert state.pending_offsets == 8
    assert state.materialize(5) == 3
    assert sorted(state.group_offsets("g2")) == [("t", 2), ("t", 5), ("t", 8)]  # a whole group: all of them
    assert state.pending_offsets == 2  # of g0 and g1
    assert state.materialize() == 0 and state == sequential_state(batches)


def test_a_lazily_loaded_group_is_found_by_scans_then_through_an_index(tmp_path):
    batches = make_batches([[new_offset_commit_record(f"g{i % 3}", "t", i, i, -1, "", 1) for i in range(9)]])
    state, _ = load(tmp_path / "p", batches, lazy=True)
    pending = state._pending
    for _ in range(GROUP_SCANS_BEFORE_INDEXING):
        assert state.group_offsets("nobody") is None
    assert not pending.wait_indexed(0)
    assert sorted(state.group_offsets("g0")) == [("t", 0), ("t", 3), ("t", 6)]  # scanned; an index is started
    assert pending.wait_indexed(30)
    assert state.offset("g1", "t", 4).offset == 4  # taken after the index was built: still taken once
    assert sorted(state.group_offsets("g1")) == [("t", 1), ("t", 4), ("t", 7)]
    assert state.pending_offsets == 3  # g2's
    assert state == sequential_state(batches)


def test_a_pending_record_that_cannot_be_decoded_fails_when_it_is_materialized(tmp_path):
    """A record that passes its CRC but is not an offset commit value fails the load lazily, with the log
    named, when it is turned into an object."""
    import msgpack
    from raygroups.offsets_log.codec import FORMAT, encode_key, frame

    directory = tmp_path / "p"
    with open_log(directory, **NO_FSYNC) as log:
        append_all(log, make_batches([[new_offset_commit_record("g", "t", 0, 1, -1, "", 1)]]))
    bad_key = encode_key(OffsetCommitKey("g", "t", 1))
    payload = msgpack.packb((FORMAT, 1, 0, 1, 1, 0, ["g"], [bad_key, (7, "not", "a", "value")]), use_bin_type=True)
    segment = sorted(directory.glob("*.log"))[-1]
    with open(segment, "ab") as f:
        f.write(frame(payload))
    with open_log(directory, **NO_FSYNC) as log:
        state = DurableState()
        replay(log, state, lazy=True)
    assert state.pending_offsets == 2
    # Whatever meets the record fails and takes nothing: the record stays pending (the shard's background
    # materialization reaches it and fails the partition), the good offset is still there.
    for meet in (lambda: state.offset("g", "t", 1), lambda: state.group_offsets("g"), state.materialize):
        with pytest.raises(CorruptLogError, match="cannot be decoded"):
            meet()
        assert state.pending_offsets == 2
    assert state.offset("g", "t", 0).offset == 1


oc = new_offset_commit_record
oc_tomb = new_offset_commit_tombstone_record
gm = new_group_metadata_record
gm_tomb = new_group_metadata_tombstone_record


@pytest.mark.parametrize(
    "history",
    [
        # an offset committed before the group's tombstone survives without re-creating the group
        [[oc("g", "t", 0, 1, -1, "", 1)], [gm_tomb("g")]],
        # a commit later removed by its own tombstone still created the group
        [[oc("g", "t", 0, 1, -1, "", 1)], [oc_tomb("g", "t", 0)]],
        [[oc("g", "t", 0, 1, -1, "", 1), oc_tomb("g", "t", 0)]],
        # a commit after the group tombstone, in a batch without tombstones, re-creates it
        [[gm("g", "consumer", 3, "range", "m", 5)], [gm_tomb("g")], [oc("g", "t", 1, 2, -1, "", 1)]],
        # ... and a second tombstone removes it again
        [[gm_tomb("g")], [oc("g", "t", 1, 2, -1, "", 1)], [gm_tomb("g")]],
        # created after the tombstone, then its offset tombstoned: the group stays
        [[gm_tomb("g")], [oc("g", "t", 1, 2, -1, "", 1)], [oc_tomb("g", "t", 1)]],
        # created before a group tombstone, offset tombstoned after it: no group
        [[oc("g", "t", 1, 2, -1, "", 1)], [gm_tomb("g")], [oc_tomb("g", "t", 1)]],
        # metadata after the commits wins
        [[oc("g", "t", 1, 2, -1, "", 1)], [gm("g", "", 0, None, None, 7)]],
    ],
)
def test_group_creation_corner_cases(tmp_path, history):
    batches = make_batches(history)
    state, _ = load(tmp_path / "p", batches)
    assert state == sequential_state(batches)


@settings(max_examples=20, deadline=None)
@given(recs=record_lists)
def test_other_logs_and_non_empty_states_fall_back_to_exact_sequential_replay(recs):
    batches = make_batches(recs)
    mem = InMemoryLog()
    append_all(mem, batches)
    state = DurableState()
    assert replay(mem, state).records == sum(len(b.records) for b in batches)
    assert state == sequential_state(batches)
    pre = DurableState()
    pre.replay(*gm("g0", "consumer", 1, "range", "x", 1))
    expected = pre.copy()
    for b in batches:
        for k, v in b.records:
            expected.replay(k, v)
    replay(mem, pre)
    assert pre == expected


def test_summary_reports_bytes_and_dropped_tail(tmp_path):
    batches = make_batches([[oc("g", "t", p, p, -1, "", 1)] for p in range(5)])
    with open_log(tmp_path / "p", **NO_FSYNC) as log:
        append_all(log, batches)
        path = log.segment_paths()[0]
        size = log.size_bytes
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01")
    with open_log(tmp_path / "p") as log:
        summary = replay(log, DurableState())
    assert summary.records == 5 and summary.bytes == size and summary.bytes_dropped == 3


def test_loaded_offsets_share_topic_partitions_and_commit_timestamps(tmp_path):
    """Two groups committing the same partitions in one request each: the loaded state holds one
    (topic, partition) tuple, one topic name and one timestamp per request, shared by every offset that
    has them (memory per offset of a compacted log), and equals sequential replay; the live write path
    keeps using the same topic name."""
    ts_a, ts_b = 1_700_000_000_123, 1_700_000_000_456
    batches = make_batches([
        [oc("a", "orders", p, 1000 + p, -1, "", ts_a) for p in range(3)],
        [oc("b", "orders", p, 2000 + p, -1, "", ts_b) for p in range(3)],
    ])
    state, _ = load(tmp_path / "p", batches)
    assert state == sequential_state(batches)
    a, b = state.offsets["a"], state.offsets["b"]
    for tp_a, tp_b in zip(sorted(a), sorted(b), strict=True):
        assert tp_a == tp_b and tp_a is next(tp for tp in b if tp == tp_a)
    assert len({id(tp[0]) for by_tp in (a, b) for tp in by_tp}) == 1
    assert len({id(v.commit_timestamp_ms) for v in a.values()}) == 1
    assert {v.commit_timestamp_ms for v in b.values()} == {ts_b}
    assert [a[("orders", p)].offset for p in range(3)] == [1000, 1001, 1002]
    key, value = oc("c", "orders", 7, 5, -1, "", ts_b)
    state.replay(key, value)
    assert next(iter(state.offsets["c"]))[0] is next(iter(a))[0]


@PROPS
@given(recs=st.one_of(record_lists, histories, narrow_histories, offsets_only_histories, consumer_histories()),
       cuts=st.lists(st.integers(0, 30), max_size=4), resend=st.integers(0, 3))
def test_a_replayer_fed_in_pieces_as_a_standby_equals_sequential_replay(tmp_path_factory, recs, cuts, resend):
    """What a hot standby does: the log's payloads fed in pieces (each piece re-sending up to ``resend``
    batches it already fed, as a read from a sparse index position does), installed lazily once: the
    state of sequential replay, groups exact before any offset is materialized."""
    batches = make_batches(recs, epochs=[i // 3 for i in range(len(recs))])  # leader changes now and then
    with open_log(tmp_path_factory.mktemp("p"), segment_bytes=2048, **NO_FSYNC) as log:
        append_all(log, batches)
        payloads = list(log.raw_payloads(0))
    replayer = Replayer("standby", 0, lazy=True, standby=True)
    start = 0
    for cut in sorted({min(c, len(payloads)) for c in cuts} | {len(payloads)}):
        replayer.feed(payloads[max(0, start - resend):cut], skip_applied=True)
        start = max(start, cut)
        assert replayer.next_offset == (batches[start - 1].next_offset if start else 0)
        assert replayer.last_epoch == (batches[start - 1].leader_epoch if start else None)
    if batches:
        assert replayer.last_epoch == batches[-1].leader_epoch
    state = DurableState()
    replayer.install(state)
    expected = sequential_state(batches)
    assert state.groups == expected.groups
    assert sorted(state.offset_only_groups()) == sorted(expected.offset_only_groups())
    assert state == expected
    assert replayer.records == sum(len(b.records) for b in batches)
    with pytest.raises(RuntimeError, match="installed"):
        replayer.feed(payloads)
