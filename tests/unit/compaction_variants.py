"""Batch-aligned compacted variants of a coordinator log, after Kafka's GroupCoordinatorShardCompactionReplayTest
(KAFKA-19862: a coordinator load interleaved with the log cleaner). A log a shard may load is one of:

* a compacted prefix: batches ``[0, k)`` compacted (tombstones dropped when old enough, or still retained),
  the rest as written;
* a load interleaved with a compaction of ``[0, j)``: batches ``[0, i)`` read before the compaction swapped
  in, ``[i, j)`` read from its output, the rest as written; ``i`` on a boundary of both. Tombstones are
  retained here: a loader that read a key's value before the cleaner dropped the tombstone that follows it
  would keep the value, which is why Kafka's cleaner keeps tombstones for ``delete.retention.ms`` (a day)
  and why raygroups swaps compacted segments only under the log's lock, never under a running load.

Each must replay to the state the original log replays to.
"""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import strategies as st
from hypothesis.stateful import rule
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log.batch import Batch
from raygroups.offsets_log.compactor import compact_batches

FOREVER_MS = 2**62  # a retention no tombstone outlives


def replay(batches: list[Batch]) -> DurableState:
    state = DurableState()
    for b in batches:
        for key, value in b.records:
            state.replay(key, value)
    return state


def compacted(batches: list[Batch], drop_tombstones: bool) -> list[Batch]:
    now_ms = max((b.timestamp_ms for b in batches), default=0) + 1
    return compact_batches(batches, delete_retention_ms=0 if drop_tombstones else FOREVER_MS, now_ms=now_ms,
                           max_batch_records=3)


def prefix_variant(batches: list[Batch], k: int, drop_tombstones: bool) -> list[Batch]:
    return compacted(batches[:k], drop_tombstones) + batches[k:]


def interleaved_variants(batches: list[Batch], j: int) -> Iterator[tuple[int, list[Batch]]]:
    """For a compaction of ``[0, j)``: every load that switched from the original to its output at a
    batch boundary ``i`` of both (``(i, log)``)."""
    cleaned = compacted(batches[:j], drop_tombstones=False)
    index = {b.base_offset: n for n, b in enumerate(batches)}
    for out in cleaned:
        i = index[out.base_offset]  # an output batch starts where a source batch did
        yield i, batches[:i] + [b for b in cleaned if b.base_offset >= out.base_offset] + batches[j:]


def check_every_variant(batches: list[Batch], expected: DurableState | None = None) -> int:
    """Every prefix variant (both tombstone modes) and every interleaved load replays to ``expected`` (the
    original's replay by default); returns how many variants were checked."""
    expected = replay(batches) if expected is None else expected
    checked = 0
    for k in range(1, len(batches) + 1):
        for drop in (False, True):
            assert replay(prefix_variant(batches, k, drop)) == expected, \
                f"the first {k} batches compacted (tombstones {'dropped' if drop else 'retained'}) replay differently"
            checked += 1
        for i, log in interleaved_variants(batches, k):
            assert replay(log) == expected, (f"a load that read {i} batches, then the compaction of the first {k}, "
                                             "then the rest, replays differently")
            checked += 1
    return checked


def check_drawn_variant(batches: list[Batch], expected: DurableState, k: int, drop: bool, switch: int) -> None:
    """One prefix variant and one interleaved load of a compaction of ``[0, k)`` (a cheap check for long
    logs; ``switch`` picks the load's boundary)."""
    assert replay(prefix_variant(batches, k, drop)) == expected, \
        f"the first {k} batches compacted (tombstones {'dropped' if drop else 'retained'}) replay differently"
    loads = list(interleaved_variants(batches, k))
    if loads:
        i, log = loads[switch % len(loads)]
        assert replay(log) == expected, \
            f"a load that read {i} batches, then the compaction of the first {k}, then the rest, replays differently"


class CompactedVariantsRule:
    """A rule for the stateful tests' machines (their ``coord`` is a coordinator in memory): a compacted
    prefix of partition 0's log written so far, and a load interleaved with that compaction, replay to the
    live durable state."""

    @rule(k=st.integers(1, 10_000), drop=st.booleans(), switch=st.integers(0, 10_000))
    def a_compacted_variant_of_the_log_replays_to_the_live_state(self, k, drop, switch):
        batches = self.coord.log_batches(0)
        if batches:
            check_drawn_variant(batches, self.coord.durable_state_for_testing(0), 1 + k % len(batches), drop, switch)
