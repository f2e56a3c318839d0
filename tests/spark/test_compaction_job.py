"""The Spark compaction job against the reference compactor, on real Spark on Ray (raydp).

Each hypothesis example stores several random histories (one per partition: commits, deletions, group
metadata and group deletions, several leader epochs, small segments) in a segment store, runs the Spark
job over all of them at once, and holds every compacted segment and index to the bytes that
``compact_segments`` writes for the same input; the states replayed before and after are equal."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from raygroups.coordinator.records import new_offset_commit_record
from raygroups.offsets_log import open_log
from raygroups.offsets_log.compactor import compact_segments
from raygroups.offsets_log.segment import index_name
from raygroups.offsets_log.store import SegmentStore

from tests.log.log_testlib import (
    append_all,
    consumer_group_lifecycle,
    consumer_histories,
    histories,
    make_batches,
    narrow_histories,
    record_lists,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NO_FSYNC = {"fsync_for_testing": lambda fd: None}


def _epochs(n: int, bumps: list[int]) -> list[int]:
    """Non-decreasing leader epochs for ``n`` batches, bumped at the given batch indexes."""
    out, epoch = [], 0
    for i in range(n):
        epoch += bumps.count(i)
        out.append(epoch)
    return out


partition_histories = st.tuples(
    st.one_of(record_lists, histories, narrow_histories, consumer_histories()).filter(lambda r: len(r) > 4),
    st.lists(st.integers(0, 30), max_size=3),
)


def _store_partitions(base, parts) -> tuple[SegmentStore, dict[int, list[str]]]:
    store = SegmentStore(base / "store")
    closed_by_partition = {}
    for p, (recs, bumps) in enumerate(parts):
        batches = make_batches(recs, _epochs(len(recs), bumps), timestamp_ms=1_000)
        with open_log(base / f"log{p}", segment_bytes=1024, **NO_FSYNC) as log:
            append_all(log, batches)
            closed = log.segment_paths(closed_only=True)
        if closed:
            store.upload(p, closed)
            closed_by_partition[p] = closed
    return store, closed_by_partition


def _run_job(spark, store, partitions, *, retention, now_ms, batch_records, run_id):
    from raygroups.compaction.job import (
        SegmentRef,
        check_equivalence,
        keep_frame,
        records_frame,
        tombstones_dropped,
        write_compacted,
    )

    refs = [SegmentRef(p, s.name, s.base_offset, s.size_bytes, s.crc32)
            for p in partitions for s in store.manifest(p).segments]
    records = records_frame(spark, store.uri, refs)
    keep, last = keep_frame(records, delete_retention_ms=retention, now_ms=now_ms)
    summaries = write_compacted(spark, store.uri, refs, records, keep, run_id, max_batch_records=batch_records)
    return refs, summaries, tombstones_dropped(keep, last), check_equivalence(spark, store.uri, refs, run_id)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(parts=st.lists(partition_histories, min_size=1, max_size=8), retention=st.integers(0, 30),
       now_shift=st.integers(0, 40), batch_records=st.integers(1, 6))
# KIP-848 records for sure, every tombstone expired: what presence needs must be kept by both.
@example(parts=[(consumer_group_lifecycle(), [])], retention=0, now_shift=40, batch_records=3)
def test_spark_output_is_the_reference_compactors_bytes(spark, tmp_path_factory, parts, retention, now_shift,
                                                        batch_records):
    from raygroups.compaction.job import staging_dir

    base = tmp_path_factory.mktemp("job")
    store, closed = _store_partitions(base, parts)
    now_ms = 1_000 + now_shift
    refs, summaries, dropped, equivalence = _run_job(spark, store, sorted(closed), retention=retention,
                                                     now_ms=now_ms, batch_records=batch_records, run_id="r1")
    assert len(summaries) == len(refs)
    for p, paths in closed.items():
        ref_dir = base / f"ref{p}"
        stats = compact_segments(paths, ref_dir, delete_retention_ms=retention, now_ms=now_ms,
                                 max_batch_records=batch_records)
        for path in paths:
            name = os.path.basename(path)
            base_offset = int(name[:20])
            assert store.get(f"{staging_dir(p, 'r1')}/{name}") == (ref_dir / name).read_bytes(), (p, name)
            assert (store.get(f"{staging_dir(p, 'r1')}/{index_name(base_offset)}")
                    == (ref_dir / index_name(base_offset)).read_bytes())
        assert dropped.get(p, 0) == stats.tombstones_dropped
        assert sum(s["records_out"] for s in summaries if s["partition"] == p) == stats.records_out
        assert equivalence[p]["digest_before"] == equivalence[p]["digest_after"]


def test_a_corrupt_stored_segment_fails_the_job_with_the_segment_named(spark, tmp_path):
    recs = [[new_offset_commit_record("g", "t", i % 3, i, -1, "", 1)] for i in range(60)]
    store, _ = _store_partitions(tmp_path, [(recs, [])])
    first = store.manifest(0).segments[0]
    path = tmp_path / "store" / "0" / first.name
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(Exception, match=f"stored segment {first.name} of partition 0 fails its CRC"):
        _run_job(spark, store, [0], retention=0, now_ms=2_000, batch_records=10, run_id="r2")
    assert store.verify(0) == [first.name]
