"""Compaction benchmark: the Spark job (raydp, warm session) against the single-process reference compactor
on the same closed segments, and replay before against after. Writes bench/results/compaction.json.

History: overwrite-heavy commits over 10 000 keys (batches of 64), in 4 MiB segments; 1 M and 5 M records
(``--quick``: 200 k). For each size, in one run on the same files:

* the reference compactor (``offsets_log.compactor.compact_segments``), single process;
* the Spark job (decode in executors, Spark SQL selection, write through the same emitter, replay
  digests), run twice on a warm session, the second run reported; the session's start is reported apart;
* replay of the partition (the loader) before and after the compacted segments are swapped in;
* bytes before and after.

Where Spark overtakes the single process: the JSON records both per-record costs and the Spark job's fixed
cost per run, and ``docs/performance.md`` works out the break-even from them.

Usage: ``python bench/compaction.py [--quick] [--executors N --executor-cores C]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from raygroups.coordinator.records import OffsetCommitKey  # noqa: E402
from raygroups.coordinator.state import DurableState  # noqa: E402
from raygroups.offsets_log import open_log, replay  # noqa: E402
from raygroups.offsets_log.compactor import compact_segments  # noqa: E402
from raygroups.offsets_log.store import SegmentStore  # noqa: E402

from bench.log_bench import NO_FSYNC, RESULTS, commit_batches, machine  # noqa: E402

SEGMENT_BYTES = 4 << 20
KEYS = [OffsetCommitKey(f"group-{g}", f"topic-{t}", p) for g in range(100) for t in range(10) for p in range(10)]
RETENTION_MS = 86_400_000


def build(root: str, n: int) -> tuple[str, list[str]]:
    d = os.path.join(root, f"log-{n}")
    with open_log(d, segment_bytes=SEGMENT_BYTES, **NO_FSYNC) as log:
        for b in commit_batches(n, 64, KEYS):
            log.append(b, b.leader_epoch)
        return d, log.segment_paths(closed_only=True)


def replay_seconds(directory: str) -> tuple[float, int]:
    with open_log(directory, segment_bytes=SEGMENT_BYTES, **NO_FSYNC) as log:
        state = DurableState()
        start = time.perf_counter()
        summary = replay(log, state)
        return time.perf_counter() - start, summary.records


def spark_job(spark, store_uri: str, refs, run_id: str) -> dict:
    from raygroups.compaction import job

    start = time.perf_counter()
    records = job.records_frame(spark, store_uri, refs)
    keep, last = job.keep_frame(records, delete_retention_ms=RETENTION_MS, now_ms=1_800_000_000_000)
    summaries = job.write_compacted(spark, store_uri, refs, records, keep, run_id)
    compacted = time.perf_counter() - start
    records.unpersist()
    equivalence = job.check_equivalence(spark, store_uri, refs, run_id)
    total = time.perf_counter() - start
    return {"seconds": compacted, "seconds_with_proof": total,
            "records_out": sum(s["records_out"] for s in summaries),
            "equivalent": all(d["digest_before"] == d["digest_after"] for d in equivalence.values())}


def bench_size(root: str, n: int, spark) -> dict:
    from raygroups.compaction.job import SegmentRef

    directory, closed = build(root, n)
    store = SegmentStore(os.path.join(root, f"store-{n}"))
    store.upload(0, closed)
    refs = [SegmentRef(0, s.name, s.base_offset, s.size_bytes, s.crc32) for s in store.manifest(0).segments]
    start = time.perf_counter()
    stats = compact_segments(closed, os.path.join(root, f"ref-{n}"), delete_retention_ms=RETENTION_MS,
                             now_ms=1_800_000_000_000)
    reference_s = time.perf_counter() - start
    spark_job(spark, store.uri, refs, f"warm-up-{n}")
    warm = spark_job(spark, store.uri, refs, f"measured-{n}")
    before_s, records = replay_seconds(directory)
    with open_log(directory, segment_bytes=SEGMENT_BYTES, **NO_FSYNC) as log:
        log.replace_segments(stats.output_paths)
    after_s, _ = replay_seconds(directory)
    return {
        "records": n, "closed_segments": len(closed), "records_in": stats.records_in,
        "records_out": stats.records_out, "bytes_in": stats.bytes_in, "bytes_out": stats.bytes_out,
        "reference_seconds": reference_s, "reference_records_per_s": stats.records_in / reference_s,
        "spark_warm_seconds": warm["seconds"], "spark_warm_seconds_with_proof": warm["seconds_with_proof"],
        "spark_vs_reference": warm["seconds"] / reference_s, "spark_equivalent": warm["equivalent"],
        "spark_records_out_equal": warm["records_out"] == stats.records_out,
        "replay_before_seconds": before_s, "replay_after_seconds": after_s,
        "replay_speedup": before_s / after_s, "replayed_records_before": records,
    }


def compare_adaptive(root: str, n: int, spark) -> dict:
    """The Spark job's warm time with adaptive query execution on and off (the shipped session's
    ``spark.sql.adaptive.enabled``), on the same segments, each setting warmed up first."""
    from raygroups.compaction.job import SegmentRef

    _, closed = build(root, n)
    store = SegmentStore(os.path.join(root, f"store-{n}"))
    store.upload(0, closed)
    refs = [SegmentRef(0, s.name, s.base_offset, s.size_bytes, s.crc32) for s in store.manifest(0).segments]
    shipped = spark.conf.get("spark.sql.adaptive.enabled")
    out: dict = {"records": n, "closed_segments": len(closed), "shipped_adaptive": shipped}
    try:
        for setting in ("true", "false"):
            spark.conf.set("spark.sql.adaptive.enabled", setting)
            spark_job(spark, store.uri, refs, f"warm-up-{setting}-{n}")
            runs = [spark_job(spark, store.uri, refs, f"measured-{setting}-{i}-{n}") for i in range(2)]
            out[f"adaptive_{setting}"] = {"seconds": [r["seconds"] for r in runs],
                                          "seconds_with_proof": [r["seconds_with_proof"] for r in runs],
                                          "equivalent": all(r["equivalent"] for r in runs)}
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", shipped)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200 k records only, for a smoke run")
    ap.add_argument("--sizes", default="1000000,5000000", help="record counts, comma-separated")
    ap.add_argument("--executors", type=int, default=1)
    ap.add_argument("--executor-cores", type=int, default=1)
    ap.add_argument("--compare-adaptive", action="store_true",
                    help="only the Spark job, with adaptive query execution on and off; writes compaction-adaptive.json")
    args = ap.parse_args()
    import ray

    from raygroups.compaction.spark_session import spark_session, stop_spark_session

    os.makedirs(RESULTS, exist_ok=True)
    root = tempfile.mkdtemp(prefix="compaction-bench-", dir=RESULTS)
    started_on = machine()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        start = time.perf_counter()
        spark = spark_session(executors=args.executors, executor_cores=args.executor_cores, executor_memory="2g")
        session_s = time.perf_counter() - start
        counts = (200_000,) if args.quick else tuple(int(s) for s in args.sizes.split(","))
        if args.compare_adaptive:
            sizes = [compare_adaptive(root, n, spark) for n in counts]
        else:
            sizes = [bench_size(root, n, spark) for n in counts]
    finally:
        stop_spark_session()
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    result = {"machine": started_on, "spark_session_start_seconds": session_s,
              "executors": args.executors, "executor_cores": args.executor_cores, "sizes": sizes}
    if args.compare_adaptive:
        with open(os.path.join(RESULTS, "compaction-adaptive.json"), "w") as f:
            json.dump(result, f, indent=2)
        for s in sizes:
            on, off = s["adaptive_true"], s["adaptive_false"]
            print(f"{s['records']:>10,} records: adaptive on {min(on['seconds']):.2f} s "
                  f"(+proof {min(on['seconds_with_proof']):.2f}), off {min(off['seconds']):.2f} s "
                  f"(+proof {min(off['seconds_with_proof']):.2f})")
        print(f"wrote {os.path.join('bench', 'results', 'compaction-adaptive.json')}")
        return
    with open(os.path.join(RESULTS, "compaction.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"machine: {started_on['nproc']} x {started_on['cpu_model']}; Spark session start {session_s:.1f} s "
          f"({args.executors} executor x {args.executor_cores} cores)")
    print(f"{'records':>10} {'reference s':>12} {'Spark warm s':>13} {'Spark/ref':>10} {'+proof s':>9} "
          f"{'replay before s':>16} {'after s':>8} {'bytes before':>13} {'after':>9}")
    for s in sizes:
        print(f"{s['records']:>10,} {s['reference_seconds']:>12.2f} {s['spark_warm_seconds']:>13.2f} "
              f"{s['spark_vs_reference']:>10.2f} {s['spark_warm_seconds_with_proof']:>9.2f} "
              f"{s['replay_before_seconds']:>16.3f} {s['replay_after_seconds']:>8.3f} {s['bytes_in']:>13,} "
              f"{s['bytes_out']:>9,}")
    print(f"wrote {os.path.join('bench', 'results', 'compaction.json')}")


if __name__ == "__main__":
    main()
