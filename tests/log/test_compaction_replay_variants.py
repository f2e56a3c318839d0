"""Every batch-aligned compacted variant of a coordinator log replays to the state the log replays to
(Kafka's GroupCoordinatorShardCompactionReplayTest, KAFKA-19862): a compacted prefix with tombstones
dropped or retained, and a load interleaved with a compaction (``tests/unit/compaction_variants.py``). Over
generated record histories here; over the real coordinator's logs in the stateful tests
(``tests/unit/test_stateful.py``, ``tests/unit/test_stateful_consumer.py``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from log_testlib import (
    consumer_group_lifecycle,
    consumer_histories,
    histories,
    make_batches,
    narrow_histories,
)

from tests.unit.compaction_variants import check_every_variant, interleaved_variants, replay

small = st.one_of(histories, narrow_histories, consumer_histories()).filter(lambda h: len(h) <= 20)


@settings(max_examples=40, deadline=None)
@given(recs=small, step_ms=st.integers(0, 3))
def test_every_compacted_variant_of_a_history_replays_to_its_state(recs, step_ms):
    batches = [b.__class__(b.base_offset, b.leader_epoch, 1_000 + i * step_ms, b.records)
               for i, b in enumerate(make_batches(recs))]
    check_every_variant(batches)


def test_the_consumer_group_lifecycle_has_loads_interleaved_at_every_boundary():
    batches = make_batches(consumer_group_lifecycle())
    checked = check_every_variant(batches)
    assert checked >= 2 * len(batches)  # every prefix both ways, and the interleaved loads besides
    # A compaction of the whole log can be met by a load at several boundaries (its output keeps some).
    assert len(list(interleaved_variants(batches, len(batches)))) > 1


def test_a_variant_that_drops_a_tombstone_a_load_already_passed_is_caught():
    """The checker is not vacuous: reading a value, then a compaction's output from which the tombstone
    after it was dropped, resurrects the value; that log replays differently, and the check says so."""
    from raygroups.coordinator.records import new_offset_commit_record, new_offset_commit_tombstone_record

    from tests.unit.compaction_variants import compacted

    put = new_offset_commit_record("g", "t", 0, 5, -1, "", 1_000, None)
    gone = new_offset_commit_tombstone_record("g", "t", 0)
    other = new_offset_commit_record("g", "t", 1, 7, -1, "", 1_000, None)
    batches = make_batches([[put], [gone], [other]])
    resurrected = batches[:1] + compacted(batches[1:], drop_tombstones=True)
    assert [r for b in resurrected for r in b.records] == [put, other]  # the tombstone is gone, the rest kept
    assert replay(resurrected) != replay(batches) and replay(resurrected) == replay(make_batches([[put, other]]))
