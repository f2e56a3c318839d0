"""Cluster-wide compaction of the offsets logs as a Spark job on Ray (raydp).

``run(cluster)`` compacts the closed segments of every partition (or of ``partitions``): each partition's
leader uploads them to the segment store; the Spark job (``job``: decode in executors with the project's
codec, decide what survives with Spark SQL, write through the reference compactor's batch emitter) writes
compacted segments to the store's staging area; each partition whose replayed state is proved unchanged
(digests of the states before and after) is swapped in by its leader under the leader epoch it uploaded
at; and the committed offsets of the whole deployment go to a Parquet snapshot. ``spark_session`` starts
and shares the one Spark session of a process.

Guarantees: nothing is swapped unless the compacted segments replay to exactly the state the originals
replay to; a partition whose leader changed, whose segments changed since the upload (another run), or
whose stored copy is corrupt is reported and left as it was; the active segment is never touched. On a
replicated deployment the leader then asks each follower (through its LogServer) to swap the same
segments under the same leader epoch; every replica swaps all or none (``FileLog.replace_segments``),
one that cannot (down, fenced by a newer leader, diverged) keeps all its originals and is reported, and a
later run brings it along (``lineage``: the versions of each segment that runs proved equivalent).
The store must be reachable from every Spark executor and every replica (a local directory on one machine).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from raygroups.actors.timers import WallClock
from raygroups.compaction.job import SNAPSHOT_FIELDS
from raygroups.coordinator.messages import check_int, check_type

SNAPSHOT_COLUMNS = tuple(name for name, _, _ in SNAPSHOT_FIELDS)
REPORT_KEYS = ("partition", "records_in", "records_out", "bytes_in", "bytes_out", "segments_in", "segments_out",
               "tombstones_dropped", "equivalent", "swapped", "seconds")
CALL_TIMEOUT_S = 120


@dataclass
class CompactionReport:
    """What a run did: one dict per partition (``REPORT_KEYS``, plus ``ok`` and ``error``) and the snapshot."""

    partitions: list[dict] = field(default_factory=list)
    snapshot_path: str = ""
    run_id: str = ""
    storage_uri: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.partitions) and all(p["ok"] for p in self.partitions) and bool(self.snapshot_path)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "run_id": self.run_id, "storage_uri": self.storage_uri,
                "snapshot_path": self.snapshot_path, "seconds": self.seconds, "partitions": self.partitions}


def default_storage_uri(cluster: Any) -> str:
    """The deployment's own segment store: a directory under its data directory."""
    return os.path.join(cluster.data_dir, "segment-store")


def run(cluster: Any, *, partitions: list[int] | None = None, storage_uri: str | None = None, spark: Any = None,
        now_ms: int | None = None) -> CompactionReport:
    """Compact the offsets logs of ``cluster`` (what ``start_local``, ``deploy`` or ``connect`` return); see
    the module docstring."""
    return run_with_progress(cluster, partitions=partitions, storage_uri=storage_uri, spark=spark, now_ms=now_ms)


def dirty_ratio(segments: list, cleaned_offset: int) -> float:
    """Kafka's cleanable ratio (``LogCleanerManager``): bytes of the closed segments not compacted yet (at or
    above the cleaner checkpoint) over the bytes of all closed segments; 0 with no closed segment."""
    total = sum(size for _name, _base, size, _crc in segments)
    dirty = sum(size for _name, base, size, _crc in segments if base >= cleaned_offset)
    return dirty / total if total else 0.0


def run_with_progress(cluster: Any, *, partitions: list[int] | None = None, storage_uri: str | None = None,
                      spark: Any = None, now_ms: int | None = None, progress: Any = None,
                      min_dirty_ratio: float | None = None) -> CompactionReport:
    """``run``, calling ``progress(step, done, total, **detail)`` as the run advances (the CLI's progress
    bars); the swap step's first call (``done`` 0) names the partitions whose proof held, which it is about to
    swap in this order: ``proved=[...]``.

    With ``min_dirty_ratio`` (the watch mode's ``min.cleanable.dirty.ratio``), a partition whose dirty ratio
    is below it is uploaded for the snapshot but not compacted (reported ok, with its ratio)."""
    import ray

    from raygroups.compaction import job
    from raygroups.compaction.spark_session import spark_session
    from raygroups.offsets_log.store import SegmentStore

    start = time.perf_counter()
    chosen = _check_partitions(partitions, cluster.num_partitions)
    check_type("storage_uri", storage_uri, str, nullable=True)
    check_type("now_ms", now_ms, int, nullable=True)
    check_type("min_dirty_ratio", min_dirty_ratio, (int, float), nullable=True)
    if min_dirty_ratio is not None and not 0.0 <= min_dirty_ratio <= 1.0:
        raise ValueError(f"min_dirty_ratio must be between 0 and 1, got {min_dirty_ratio!r}")
    if now_ms is not None:
        check_int("now_ms", now_ms, 0, 2**63 - 1)
    storage_uri = storage_uri or default_storage_uri(cluster)
    now_ms = WallClock().now_ms() if now_ms is None else now_ms
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    report = CompactionReport(run_id=run_id, storage_uri=storage_uri)
    step = progress or (lambda *_, **__: None)
    rows = {p: _row(p) for p in chosen}
    # 1. Each leader uploads its closed segments (and a copy of its active one, for the snapshot).
    uploads: dict[int, dict] = {}
    refs: dict[int, Any] = {}
    for p in chosen:
        try:
            refs[p] = cluster.shard(p).compaction_upload.remote(storage_uri, run_id)
        except ValueError as e:  # no shard actor by that name: the partition is offline
            rows[p]["error"] = f"upload failed: {_reason(e)}"
    for i, p in enumerate(chosen):
        try:
            if p in refs:
                uploads[p] = ray.get(refs[p], timeout=CALL_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - an offline or refusing leader: report it, go on
            rows[p]["error"] = f"upload failed: {_reason(e)}"
        step("upload", i + 1, len(chosen))
    clean_enough = set()
    for p, up in uploads.items():
        rows[p]["dirty_ratio"] = round(dirty_ratio(up["segments"], up.get("cleaned_offset", 0)), 4)
        if min_dirty_ratio is not None and up["segments"] and rows[p]["dirty_ratio"] < min_dirty_ratio:
            clean_enough.add(p)
            rows[p]["ok"] = True
            rows[p]["skipped"] = True
            rows[p]["note"] = f"clean: dirty ratio {rows[p]['dirty_ratio']:.2f} < {min_dirty_ratio:g}"
    segment_refs = [job.SegmentRef(p, name, base, size, crc) for p, up in uploads.items() if p not in clean_enough
                    for name, base, size, crc in up["segments"]]
    session = spark if spark is not None else spark_session()
    # A partition with a corrupt or missing stored segment is left out, and said so.
    store = SegmentStore(storage_uri)
    for p, bad in job.stored_segment_errors(session, storage_uri, segment_refs).items():
        rows[p]["error"] = f"corrupt segment store: {bad[0][1]}; the log was not changed, the next run copies it again"
        store.forget(p, [name for name, _ in bad])
        del uploads[p]
    segment_refs = [r for r in segment_refs if r.partition in uploads]
    # 2-4. The Spark job over every uploaded partition at once, then the equivalence proof.
    summaries: list[dict] = []
    equivalence: dict[int, dict] = {}
    dropped: dict[int, int] = {}
    if segment_refs:
        records = job.records_frame(session, storage_uri, segment_refs)
        keep, last = job.keep_frame(records, delete_retention_ms=cluster.config.delete_retention_ms, now_ms=now_ms)
        step("compact", 0, 3)
        summaries = job.write_compacted(session, storage_uri, segment_refs, records, keep, run_id)
        step("compact", 1, 3)
        dropped = job.tombstones_dropped(keep, last)
        step("compact", 2, 3)
        for frame in (keep, last, records):
            frame.unpersist()
        equivalence = job.check_equivalence(session, storage_uri, segment_refs, run_id)
        step("compact", 3, 3)
    by_partition: dict[int, list[dict]] = {}
    for s in summaries:
        by_partition.setdefault(s["partition"], []).append(s)
    proved = [p for p in sorted(uploads) if p not in clean_enough and by_partition.get(p) and equivalence.get(p)
              and equivalence[p]["digest_before"] == equivalence[p]["digest_after"]]
    step("swap", 0, len(uploads), proved=proved)
    # 5. Swap, partition by partition, where the proof holds: the leader, then its followers.
    for i, p in enumerate(sorted(uploads)):
        row, outs = rows[p], by_partition.get(p, [])
        if p in clean_enough:
            step("swap", i + 1, len(uploads))
            continue
        row.update(_totals(outs, dropped.get(p, 0)))
        digests = equivalence.get(p)
        # No closed segment: nothing compacted, nothing to prove. Otherwise only a proof that holds counts: a
        # partition whose digests are missing is not proved equivalent.
        row["equivalent"] = not outs or (digests is not None and digests["digest_before"] == digests["digest_after"])
        if not outs:
            row["ok"] = True  # no closed segment yet: nothing to compact
        elif digests is None:
            row["error"] = "no equivalence proof came back for this partition; nothing was swapped"
        elif not row["equivalent"]:
            row["error"] = "the compacted segments do not replay to the same state; nothing was swapped"
        else:
            lineage = _record_lineage(store, p, uploads[p]["segments"], outs)
            try:
                done = ray.get(cluster.shard(p).compaction_swap.remote(
                    storage_uri, job.staging_dir(p, run_id), uploads[p]["leader_epoch"], uploads[p]["segments"],
                    outs, lineage), timeout=CALL_TIMEOUT_S)
                row["swapped"] = row["ok"] = True
                row["replicas"] = {uploads[p]["node"] or "leader": "swapped"} | {
                    node: "swapped" if r.get("ok") else f"not swapped: {r.get('detail', r.get('reason'))}"
                    for node, r in done.get("followers", {}).items()}
                pending = sorted(n for n, r in done.get("followers", {}).items() if not r.get("ok"))
                if pending:
                    row["note"] = (f"follower(s) {', '.join(pending)} not swapped (each kept all its original "
                                   f"segments); the next run swaps them")
            except Exception as e:  # noqa: BLE001 - the leader refused (fence) or is gone: report it
                row["error"] = f"swap refused: {_reason(e)}"
        step("swap", i + 1, len(uploads))
    # 6. The snapshot of every committed offset, and the report beside it.
    snapshot_dir = f"{storage_uri.rstrip('/')}/snapshots/{run_id}"
    try:
        job.write_snapshot(session, storage_uri, uploads, run_id, f"snapshots/{run_id}/offsets.parquet")
        report.snapshot_path = f"{snapshot_dir}/offsets.parquet"
    except Exception as e:  # noqa: BLE001 - the compaction stands; the report says the snapshot failed
        for p in rows:
            rows[p].setdefault("error", f"snapshot failed: {_reason(e)}")
            rows[p]["ok"] = False
    for p in chosen:
        rows[p]["seconds"] = round(time.perf_counter() - start, 3)
    report.partitions = [rows[p] for p in chosen]
    report.seconds = round(time.perf_counter() - start, 3)
    _write_report(storage_uri, f"snapshots/{run_id}/report.json", report)
    return report


def lineage_path(partition: int) -> str:
    return f"{partition}/lineage.json"


def _record_lineage(store: Any, partition: int, inputs: list, outputs: list[dict]) -> dict:
    """Add this run's proved pair (input version, compacted version) of each segment to the partition's
    lineage in the store, and return it: a follower whose copy of a segment is any version in it may take
    a later run's compacted version (every version replays to the same state)."""
    try:
        lineage = json.loads(store.get(lineage_path(partition)))
    except (FileNotFoundError, OSError, ValueError):
        lineage = {}
    by_name = {name: (size, crc) for name, _base, size, crc in inputs}
    for out in outputs:
        versions = lineage.setdefault(out["name"], [])
        for version in ([*by_name[out["name"]]], [out["bytes_out"], out["crc32_out"]]):
            if version not in versions:
                versions.append(version)
    store.put(lineage_path(partition), json.dumps(lineage, sort_keys=True).encode())
    return lineage


def read_snapshot(spark: Any, path: str) -> Any:
    """The committed offsets of a run's snapshot: a Spark DataFrame with a session, else a pyarrow table."""
    if spark is not None:
        return spark.read.parquet(path)
    import pyarrow.parquet as pq

    return pq.read_table(path)


def _row(partition: int) -> dict:
    row = {k: 0 for k in REPORT_KEYS}
    row.update(partition=partition, equivalent=False, swapped=False, ok=False)
    return row


def _totals(outs: list[dict], dropped: int) -> dict:
    return {
        "records_in": sum(o["records_in"] for o in outs), "records_out": sum(o["records_out"] for o in outs),
        "bytes_in": sum(o["bytes_in"] for o in outs), "bytes_out": sum(o["bytes_out"] for o in outs),
        "segments_in": len(outs), "segments_out": len(outs), "tombstones_dropped": dropped,
    }


def _check_partitions(partitions: list[int] | None, num_partitions: int) -> list[int]:
    if partitions is None:
        return list(range(num_partitions))
    check_type("partitions", partitions, (list, tuple))
    for p in partitions:
        check_int("partitions[]", p, 0, num_partitions - 1)
    if not partitions:
        raise ValueError("partitions must name at least one partition (None means all)")
    return sorted(set(partitions))


def _reason(e: Exception) -> str:
    cause = getattr(e, "cause", None)
    return str(cause if cause is not None else e).strip().splitlines()[-1]


def _write_report(storage_uri: str, path: str, report: CompactionReport) -> None:
    from raygroups.offsets_log.store import SegmentStore

    SegmentStore(storage_uri).put(path, json.dumps(report.to_dict(), indent=1, sort_keys=True).encode())
