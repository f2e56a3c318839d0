"""The compaction job in Spark: decode in executors, decide with Spark SQL, emit through the one batch emitter.

1. ``records_frame``: the stored segments spread over tasks (one each up to ``spark.default.parallelism``,
   several per task beyond: a task has a fixed cost however small its segments); each segment is read from
   the segment store (checked against the manifest), decodes it with the project's codec (``offsets_log.compactor.read_segment``) and yields a row
   per record: partition, segment, offset, key bytes, record type, group, tombstone, batch timestamp.
2. ``keep_frame``: which offsets survive, as DataFrame operations (the rules of ``offsets_log.compactor``,
   written in Spark): the last record of every key, unless it is a tombstone older than
   ``delete_retention_ms``; plus, per group (``coordinator.replay_rules.presence_needs``), the group's last
   offset value and its key's last record when nothing else would re-create the group, or the group's last
   metadata tombstone when surviving offset values precede it.
3. ``write_compacted``: spread the same way, each segment gets its surviving offsets from the DataFrame,
   is read again, and its compacted segment and index are written to the store's staging area
   through ``offsets_log.compactor.write_segment`` -- the reference compactor's own emitter, so the bytes
   equal ``compact_segments`` on the same input.
4. ``check_equivalence``: one task per partition replays the original and the compacted segments and
   compares the digests of the two states.

Every step runs on the executors; the driver only sees per-segment and per-partition summaries.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Any

from raygroups.coordinator.consumer_records import (
    CONSUMER_GROUP_METADATA_KEY_TYPE,
    CONSUMER_GROUP_RECORD_TYPES,
)
from raygroups.coordinator.records import GROUP_METADATA_KEY_TYPE, OFFSET_COMMIT_KEY_TYPE
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log.codec import decode_key_fields
from raygroups.offsets_log.compactor import DEFAULT_MAX_BATCH_RECORDS, read_segment, write_segment
from raygroups.offsets_log.index import DEFAULT_INDEX_INTERVAL_BYTES
from raygroups.offsets_log.loader import replay_segments, state_digest
from raygroups.offsets_log.segment import index_name
from raygroups.offsets_log.store import SegmentStore, SegmentStoreError, StoredSegment


@dataclass(frozen=True)
class SegmentRef:
    """A stored closed segment, as a task needs it (plain data: it travels to the executors)."""

    partition: int
    name: str
    base_offset: int
    size_bytes: int
    crc32: int

    def stored(self) -> StoredSegment:
        return StoredSegment(self.name, self.base_offset, self.size_bytes, self.crc32)


def staging_dir(partition: int, run_id: str) -> str:
    """Where a run writes a partition's compacted segments, relative to the store root."""
    return f"{partition}/compacted/{run_id}"


# (name, type, nullable) of the decoded records (step 1) and of the snapshot's rows.
RECORD_FIELDS = (("partition", "int", False), ("segment", "long", False), ("offset", "long", False),
                 ("key", "binary", False), ("type_id", "int", False), ("group", "string", False),
                 ("tombstone", "boolean", False), ("ts", "long", False))
SNAPSHOT_FIELDS = (("group_id", "string", False), ("topic", "string", False), ("partition", "int", False),
                   ("offset", "long", False), ("leader_epoch", "int", False), ("metadata", "string", False),
                   ("commit_timestamp_ms", "long", False), ("expire_timestamp_ms", "long", True))


KNOWN_TYPES = frozenset({OFFSET_COMMIT_KEY_TYPE, GROUP_METADATA_KEY_TYPE,
                         *(type_id for type_id, _ in CONSUMER_GROUP_RECORD_TYPES.values())})


def _struct(fields):
    from pyspark.sql import types as T

    kinds = {"int": T.IntegerType, "long": T.LongType, "string": T.StringType, "binary": T.BinaryType,
             "boolean": T.BooleanType}
    return T.StructType([T.StructField(name, kinds[kind](), nullable) for name, kind, nullable in fields])


def _decode_segment(store: SegmentStore, ref: SegmentRef):
    """One segment's records as an Arrow record batch (columns of ``RECORD_FIELDS``)."""
    import pyarrow as pa

    segment = read_segment(store.read(ref.partition, ref.stored()), ref.base_offset, f"{ref.partition}/{ref.name}")
    offsets, keys, types, groups, tombstones, stamps = [], [], [], [], [], []
    fields_of: dict[bytes, tuple] = {}
    for src in segment.sources:
        ts = src.timestamp_ms
        for offset, kb, rv in src.records:
            fields = fields_of.get(kb)
            if fields is None:
                fields = fields_of[kb] = decode_key_fields(kb)
                if fields[0] not in KNOWN_TYPES:
                    raise ValueError(f"unknown record type {fields[0]} at offset {offset} of partition {ref.partition}")
            offsets.append(offset)
            keys.append(kb)
            types.append(fields[0])
            groups.append(fields[1])
            tombstones.append(rv is None)
            stamps.append(ts)
    n = len(offsets)
    return pa.RecordBatch.from_arrays([
        pa.array([ref.partition] * n, pa.int32()), pa.array([ref.base_offset] * n, pa.int64()),
        pa.array(offsets, pa.int64()), pa.array(keys, pa.binary()), pa.array(types, pa.int32()),
        pa.array(groups, pa.string()), pa.array(tombstones, pa.bool_()), pa.array(stamps, pa.int64()),
    ], names=[name for name, _, _ in RECORD_FIELDS])


def _decode_segments(store_uri: str, batches):
    """Executor side of step 1: Arrow batches of segment references in, Arrow batches of records out."""
    store = SegmentStore(store_uri)
    for batch in batches:
        for row in batch.to_pylist():
            yield _decode_segment(store, SegmentRef(row["partition"], row["name"], row["segment"],
                                                    row["size_bytes"], row["crc32"]))


def _check_stored(store_uri: str, refs):
    store = SegmentStore(store_uri)
    for ref in refs:
        try:
            store.read(ref.partition, ref.stored())
        except (OSError, SegmentStoreError) as e:
            yield ref.partition, ref.name, str(e)


def stored_segment_errors(spark: Any, store_uri: str, refs: list[SegmentRef]) -> dict[int, list[tuple[str, str]]]:
    """Step 0: per partition, its stored segments that are missing or fail their size and CRC check, as
    ``(name, error)`` (a partition with one is left out of the run; the others go on)."""
    if not refs:
        return {}
    found = spark.sparkContext.parallelize(refs, _tasks(spark, len(refs))).mapPartitions(
        lambda part: _check_stored(store_uri, part)).collect()
    errors: dict[int, list[tuple[str, str]]] = {}
    for partition, name, error in found:
        errors.setdefault(partition, []).append((name, error))
    return errors


def _tasks(spark: Any, items: int) -> int:
    """How many tasks share ``items`` segments: one each up to ``spark.default.parallelism``, then several
    per task (a task costs a scheduling round and a Python worker call however small its segments)."""
    return max(1, min(items, spark.sparkContext.defaultParallelism))


def _refs_frame(spark: Any, refs: list[SegmentRef]):
    """One row per segment, spread over ``_tasks`` Spark partitions."""
    rows = [(r.partition, r.base_offset, r.name, r.size_bytes, r.crc32) for r in refs]
    frame = spark.createDataFrame(rows, "partition int, segment long, name string, size_bytes long, crc32 long")
    return frame.repartition(_tasks(spark, len(refs)))


def records_frame(spark: Any, store_uri: str, refs: list[SegmentRef]):
    """Step 1: every record of the given segments as a DataFrame, decoded in the executors into Arrow
    batches (``mapInArrow``: no row-by-row pickling between Python and the JVM)."""
    frame = _refs_frame(spark, refs).mapInArrow(lambda batches: _decode_segments(store_uri, batches), _struct(RECORD_FIELDS))
    # Steps 2 and 3 both read it: decode once (the caller unpersists it when the run is done).
    return frame.cache()


def keep_frame(records, *, delete_retention_ms: int, now_ms: int):
    """Step 2: ``(partition, offset)`` of every surviving record, and ``last``: each key's last record (both
    cached: the caller unpersists them when the run is done)."""
    from pyspark.sql import functions as F

    commit_value = (F.col("type_id") == OFFSET_COMMIT_KEY_TYPE) & ~F.col("tombstone")
    # A classic group's metadata tombstone, or a consumer group's (replay_rules: either removes the group).
    metadata_tombstone = F.col("type_id").isin(GROUP_METADATA_KEY_TYPE, CONSUMER_GROUP_METADATA_KEY_TYPE) & F.col(
        "tombstone")
    # Each key's last record (max_by over the offset: one row per key).
    last = records.groupBy("partition", "key").agg(
        F.max("offset").alias("last_pos"),
        F.max_by("tombstone", "offset").alias("tombstone"),
        F.max_by("ts", "offset").alias("ts"),
        F.first("type_id").alias("type_id"),
        F.first("group").alias("group"),
    ).cache()
    kept_last = last.where(~F.col("tombstone") | (F.lit(now_ms) - F.col("ts") <= F.lit(delete_retention_ms)))
    # What decides each group's presence (replay_rules.GroupPresence after the whole input): its last offset
    # value and its last metadata tombstone; a group is created by commits iff the former comes later.
    per_group = records.groupBy("partition", "group").agg(
        F.max(F.when(commit_value, F.col("offset"))).alias("cv_at"),
        F.max(F.when(metadata_tombstone, F.col("offset"))).alias("mt_at"),
    )
    # As the reference compactor: a group whose metadata key ends in a value (a classic group's, or a
    # consumer group's ConsumerGroupMetadata) is present by that value.
    metadata_last = last.where(F.col("type_id").isin(GROUP_METADATA_KEY_TYPE, CONSUMER_GROUP_METADATA_KEY_TYPE)).groupBy(
        "partition", "group").agg(
        F.max((~F.col("tombstone")).cast("int")).cast("boolean").alias("metadata_is_value"))
    surviving_values = last.where((F.col("type_id") == OFFSET_COMMIT_KEY_TYPE) & ~F.col("tombstone")).groupBy(
        "partition", "group").agg(F.max("last_pos").alias("sv_at"))
    needs = (
        per_group.join(metadata_last, ["partition", "group"], "left")
        .join(surviving_values, ["partition", "group"], "left")
        .select(
            "partition", "group", "cv_at", "mt_at",
            F.coalesce("metadata_is_value", F.lit(False)).alias("is_value"),
            (F.coalesce("cv_at", F.lit(-1)) > F.coalesce("mt_at", F.lit(-1))).alias("created"),
            F.coalesce("sv_at", F.lit(-1)).alias("sv_at"),
        )
    )
    keep_creator = needs.where(~F.col("is_value") & F.col("created")
                               & (F.col("sv_at") <= F.coalesce("mt_at", F.lit(-1))))
    keep_tombstone = needs.where(~F.col("is_value") & ~F.col("created") & (F.col("sv_at") >= 0))
    # The creator's key (the record at cv_at) and that key's last record.
    creator_key = keep_creator.select("partition", F.col("cv_at").alias("offset")).join(
        records.select("partition", "offset", "key"), ["partition", "offset"])
    creator_last = creator_key.join(last.select("partition", "key", "last_pos"), ["partition", "key"])
    keep = (
        kept_last.select("partition", F.col("last_pos").alias("offset"))
        .unionByName(keep_creator.select("partition", F.col("cv_at").alias("offset")))
        .unionByName(creator_last.select("partition", F.col("last_pos").alias("offset")))
        .unionByName(keep_tombstone.select("partition", F.col("mt_at").alias("offset")))
        .distinct()
    ).cache()  # steps 3 and the tombstone count both read it: one computation (the caller unpersists both)
    return keep, last


def tombstones_dropped(keep, last) -> dict[int, int]:
    """Per partition: tombstones that were their key's last record and are not kept."""
    from pyspark.sql import functions as F

    dropped = last.where(F.col("tombstone")).select("partition", F.col("last_pos").alias("offset")).join(
        keep, ["partition", "offset"], "left_anti")
    return {row["partition"]: row["n"] for row in dropped.groupBy("partition").agg(F.count("*").alias("n")).collect()}


def _write_segments(store_uri: str, run_id: str, max_batch_records: int, index_interval_bytes: int, rows):
    """Executor side of step 3: ``rows`` are ``(ref, surviving offsets)``."""
    store = SegmentStore(store_uri)
    for ref, offsets in rows:
        start = time.perf_counter()
        segment = read_segment(store.read(ref.partition, ref.stored()), ref.base_offset, f"{ref.partition}/{ref.name}")
        out = write_segment(segment, set(offsets or ()), max_batch_records=max_batch_records,
                            index_interval_bytes=index_interval_bytes)
        where = staging_dir(ref.partition, run_id)
        store.put(f"{where}/{ref.name}", out.data)
        store.put(f"{where}/{index_name(ref.base_offset)}", out.index.to_bytes(out.next_offset, len(out.data)))
        yield {
            "partition": ref.partition, "name": ref.name, "base_offset": ref.base_offset,
            "next_offset": out.next_offset, "records_in": segment.records, "records_out": out.records,
            "bytes_in": segment.bytes, "bytes_out": len(out.data), "crc32_out": zlib.crc32(out.data),
            "seconds": time.perf_counter() - start,
        }


def write_compacted(spark: Any, store_uri: str, refs: list[SegmentRef], records, keep, run_id: str, *,
                    max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
                    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> list[dict]:
    """Step 3: the compacted segments in the store's staging area; one summary per segment."""
    from pyspark.sql import functions as F

    # Segments without a survivor still get a segment (empty batches hold their offsets): every ref is a
    # task, joined to its survivors inside Spark.
    by_segment = (
        records.select("partition", "segment", "offset").join(keep, ["partition", "offset"], "left_semi")
        .groupBy("partition", "segment").agg(F.collect_list("offset").alias("offsets"))
    )
    joined = _refs_frame(spark, refs).join(by_segment, ["partition", "segment"], "left").repartition(
        _tasks(spark, len(refs)))
    summaries = joined.rdd.map(
        lambda row: (SegmentRef(row["partition"], row["name"], row["segment"], row["size_bytes"], row["crc32"]),
                     row["offsets"])
    ).mapPartitions(
        lambda rows: _write_segments(store_uri, run_id, max_batch_records, index_interval_bytes, rows)
    ).collect()
    return sorted(summaries, key=lambda s: (s["partition"], s["base_offset"]))


def _check_partition(store_uri: str, run_id: str, item):
    partition, refs = item
    store = SegmentStore(store_uri)
    refs = sorted(refs, key=lambda r: r.base_offset)
    start = refs[0].base_offset
    before, after = DurableState(), DurableState()
    replay_segments(((r.name, store.read(partition, r.stored())) for r in refs), before, start)
    where = staging_dir(partition, run_id)
    replay_segments(((r.name, store.get(f"{where}/{r.name}")) for r in refs), after, start)
    return {"partition": partition, "digest_before": state_digest(before), "digest_after": state_digest(after)}


def check_equivalence(spark: Any, store_uri: str, refs: list[SegmentRef], run_id: str) -> dict[int, dict]:
    """Step 4: per partition, the digests of the states the original and the compacted segments replay to."""
    by_partition: dict[int, list[SegmentRef]] = {}
    for ref in refs:
        by_partition.setdefault(ref.partition, []).append(ref)
    items = sorted(by_partition.items())
    if not items:
        return {}
    out = spark.sparkContext.parallelize(items, len(items)).map(
        lambda item: _check_partition(store_uri, run_id, item)).collect()
    return {d["partition"]: d for d in out}


def _snapshot_rows(store_uri: str, run_id: str, item):
    """Executor side of the snapshot: replay a partition's uploaded closed segments and the copy of its
    active segment; every committed offset of the resulting state is a row."""
    from raygroups.actors.log_compaction import tail_dir

    partition, segments, (tail_name, tail_base, _size) = item
    store = SegmentStore(store_uri)
    parts = [(name, store.read(partition, StoredSegment(name, base, size, crc))) for name, base, size, crc in segments]
    parts.append((tail_name, store.get(f"{tail_dir(partition, run_id)}/{tail_name}")))
    state = DurableState()
    replay_segments(parts, state, segments[0][1] if segments else tail_base)
    for group, by_tp in state.offsets.items():
        for (topic, p), v in by_tp.items():
            yield (group, topic, p, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp_ms, v.expire_timestamp_ms)


def _snapshot_schema():
    import pyarrow as pa

    kinds = {"int": pa.int32(), "long": pa.int64(), "string": pa.string()}
    return pa.schema([pa.field(name, kinds[kind], nullable) for name, kind, nullable in SNAPSHOT_FIELDS])


def _write_parquet(store: SegmentStore, directory: str, name: str, rows: list) -> None:
    """One Parquet file of snapshot rows, written under a hidden name (``_``: readers skip it) and renamed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([dict(zip([f for f, _, _ in SNAPSHOT_FIELDS], r, strict=True)) for r in rows],
                                 schema=_snapshot_schema())
    store.fs.create_dir(f"{store.root}/{directory}", recursive=True)
    hidden, final = f"{store.root}/{directory}/_{name}", f"{store.root}/{directory}/{name}"
    pq.write_table(table, hidden, filesystem=store.fs)
    store.fs.move(hidden, final)


def _write_snapshot_part(store_uri: str, run_id: str, directory: str, item) -> int:
    rows = list(_snapshot_rows(store_uri, run_id, item))
    _write_parquet(SegmentStore(store_uri), directory, f"part-{item[0]:05d}.parquet", rows)
    return len(rows)


def write_snapshot(spark: Any, store_uri: str, uploads: dict[int, dict], run_id: str, directory: str) -> int:
    """Every committed offset of the uploaded partitions as a Parquet dataset: the directory ``directory``
    of the store, one file per partition, written by the executors through the store's own ``pyarrow.fs``
    file system (any URI the store takes, ``s3://`` included, without configuring Hadoop's connectors).
    Returns the number of rows."""
    items = [(p, up["segments"], up["tail"]) for p, up in sorted(uploads.items())]
    if not items:
        _write_parquet(SegmentStore(store_uri), directory, "part-empty.parquet", [])
        return 0
    return sum(spark.sparkContext.parallelize(items, len(items)).map(
        lambda item: _write_snapshot_part(store_uri, run_id, directory, item)).collect())
