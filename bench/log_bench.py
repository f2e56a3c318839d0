"""Offsets-log benchmark: replay, append with fsync, reference compaction. Writes bench/results/log_bench.json.

Everything is measured in one run on the same files:

* replay of 1 M OffsetCommit records (10 000 keys, batches of 64) with ``offsets_log.replay`` on an open
  log, from the segment files (read, CRC, decode, apply), against the raw limit = ``msgpack.unpackb`` of
  the same payloads already in memory (no I/O, no CRC, nothing applied, results dropped); also opening
  the log (the recovery scan of the last segment) plus replay, the naive loader
  (decode every record to dataclasses, then ``DurableState.replay`` each) and a worst case where every
  key is distinct, so every record survives and becomes a dataclass; and the lazy load a shard does
  (the offsets stay pending, the shard serves, the background turns them into objects), against the wall
  it stands on: every payload decoded and kept, the survivors in one dict;
* append with fsync per batch at batch sizes 1/16/256 against a raw ``os.write`` + ``os.fsync`` loop of
  the same frames on the same file system;
* the reference compactor on a realistic history (many commits per key, some deleted groups).

Usage: ``python bench/log_bench.py [--dir DIR] [--quick]``. Timing belongs here, not in tests.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import msgpack  # noqa: E402
from raygroups.coordinator.records import (  # noqa: E402
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)
from raygroups.coordinator.state import DurableState  # noqa: E402
from raygroups.offsets_log import Batch, open_log, replay  # noqa: E402
from raygroups.offsets_log.codec import decode_payload, encode_batch  # noqa: E402
from raygroups.offsets_log.compactor import compact_segments  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
NO_FSYNC = {"fsync_for_testing": lambda fd: None}


def machine() -> dict:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "msgpack": ".".join(map(str, msgpack.version)),
        "platform": platform.platform(),
        "load_average_1m_at_start": os.getloadavg()[0],
    }


def commit_batches(n_records: int, per_batch: int, keys: list[OffsetCommitKey], start_ts: int = 1_700_000_000_000,
                   in_order: bool = False):
    """``n_records`` commits in batches of ``per_batch``: keys scattered, one commit timestamp per record;
    or (``in_order``) keys in list order and one timestamp per batch, as a consumer's commit request of
    many partitions writes them (Kafka stamps every offset of a request with the same time)."""
    out = []
    offset = 0
    k = len(keys)
    for _ in range(n_records // per_batch):
        recs = []
        for i in range(per_batch):
            j = offset + i
            if in_order:
                recs.append((keys[j % k], OffsetCommitValue(j, 5, "", start_ts + offset)))
            else:
                recs.append((keys[(j * 7919) % k], OffsetCommitValue(j, 5, "", start_ts + j)))
        out.append(Batch(offset, 1, start_ts + offset, tuple(recs)))
        offset += per_batch
    return out


def write_log(directory: str, batches) -> None:
    with open_log(directory, **NO_FSYNC) as log:
        for b in batches:
            log.append(b, b.leader_epoch)


def payloads_of(directory: str) -> list[bytes]:
    with open_log(directory) as log:
        return [bytes(p) for _, _, p in log.raw_payloads(0)]


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench_replay(root: str, n: int, kind: str, repeat: int) -> dict:
    """``kind``: "overwrites" (10 k keys, 100 records each), "distinct" (every key distinct, every group
    with partitions of its own: the worst case for memory) or "shared" (every key distinct, n / 1000
    groups committing the same 10 topics x 100 partitions, a timestamp per commit: a compacted log of a
    real cluster)."""
    if kind == "distinct":
        keys = [OffsetCommitKey(f"group-{i // 1000}", f"topic-{(i // 100) % 10}", i) for i in range(n)]
    elif kind == "shared":
        keys = [OffsetCommitKey(f"group-{i // 1000}", f"topic-{(i // 100) % 10}", i % 100) for i in range(n)]
    else:
        keys = [OffsetCommitKey(f"group-{g}", f"topic-{t}", p) for g in range(100) for t in range(5) for p in range(20)]
    d = os.path.join(root, f"replay-{kind}")
    batches = commit_batches(n, 100 if kind == "shared" else 64, keys, in_order=kind == "shared")
    write_log(d, batches)
    payloads = payloads_of(d)
    unpackb = msgpack.unpackb

    def raw():
        for p in payloads:
            unpackb(p, use_list=False)

    raw_s = best_of(raw, repeat)

    def raw_full():  # context: also decode every key (the loader decodes only the survivors')
        for p in payloads:
            flat = unpackb(p, use_list=False)[7]
            for kb in flat[0::2]:
                unpackb(kb, use_list=False)

    raw_full_s = best_of(raw_full, repeat)

    def open_only():
        open_log(d).close()

    open_s = best_of(open_only, repeat)
    log = open_log(d)

    def load():
        state = DurableState()
        replay(log, state)
        return state

    load_s = best_of(load, repeat)

    def lazy_load():  # what a shard does: it serves once this returns, the offsets still pending
        state = DurableState()
        replay(log, state, lazy=True)
        return state

    lazy_s = best_of(lazy_load, repeat)

    def lazy_then_materialize():
        state = DurableState()
        replay(log, state, lazy=True)
        while state.materialize(4_000):  # in the shard's slices
            pass

    lazy_full_s = best_of(lazy_then_materialize, repeat)

    def raw_kept():  # the wall a lazy load stands on: every batch decoded and kept, the survivors in one dict
        gc.disable()
        try:
            last: dict = {}
            kept = []
            for p in payloads:
                flat = unpackb(p, use_list=False)[7]
                kept.append(flat)
                it = iter(flat)
                last.update(zip(it, it, strict=False))
        finally:
            gc.enable()

    raw_kept_s = best_of(raw_kept, repeat)
    # What the loaded state holds per committed offset (every Python object it keeps, counted by tracemalloc).
    gc.collect()
    tracemalloc.start()
    state = load()
    state_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    offsets = sum(len(v) for v in state.offsets.values())
    log.close()

    def naive():
        s = DurableState()
        apply = s.replay
        for p in payloads:
            for key, value in decode_payload(p).records:
                apply(key, value)
        return s

    naive_s = best_of(naive, 1)

    assert naive() == state, "fast loader and sequential replay disagree"
    size = sum(len(p) + 8 for p in payloads)
    return {
        "records": n,
        "distinct_keys": len(keys),
        "log_bytes": size,
        "bytes_per_record": round(size / n, 1),
        "raw_msgpack_decode_records_per_s": n / raw_s,
        "raw_decode_including_every_key_records_per_s": n / raw_full_s,
        "loader_records_per_s": n / load_s,
        "loader_vs_raw": raw_s / load_s,
        "lazy_load_records_per_s": n / lazy_s,
        "lazy_load_vs_raw_decode_including_every_key": raw_full_s / lazy_s,
        "lazy_load_then_materialize_records_per_s": n / lazy_full_s,
        "raw_decode_kept_plus_survivor_dict_records_per_s": n / raw_kept_s,
        "open_with_recovery_scan_s": open_s,
        "open_plus_replay_records_per_s": n / (open_s + load_s),
        "naive_decode_then_replay_records_per_s": n / naive_s,
        "committed_offsets": offsets,
        "state_bytes_per_committed_offset": round(state_bytes / offsets, 1),
    }


def bench_append(root: str, per_batch: int, seconds: float) -> dict:
    keys = [OffsetCommitKey(f"group-{g}", "topic", p) for g in range(50) for p in range(20)]
    batches = commit_batches(per_batch * 4000, per_batch, keys)
    frames = [encode_batch(b) for b in batches]
    # Raw write + fsync of the same frames on the same file system, interleaved with the log's appends in
    # short rounds so that both see the same disk weather.
    raw_path = os.path.join(root, f"raw-{per_batch}.bin")
    fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    log = open_log(os.path.join(root, f"append-{per_batch}"))
    n_raw = n_log = 0
    raw_s = log_s = 0.0
    rounds = 8
    for _ in range(rounds):
        t = time.perf_counter()
        while time.perf_counter() - t < seconds / rounds / 2 and n_raw < len(frames):
            os.write(fd, frames[n_raw])
            os.fsync(fd)
            n_raw += 1
        raw_s += time.perf_counter() - t
        t = time.perf_counter()
        while time.perf_counter() - t < seconds / rounds / 2 and n_log < len(batches):
            log.append(batches[n_log], 1)
            n_log += 1
        log_s += time.perf_counter() - t
    os.close(fd)
    log.close()
    raw_rate = n_raw / raw_s
    log_rate = n_log / log_s
    return {
        "records_per_batch": per_batch,
        "frame_bytes": len(frames[0]),
        "raw_write_fsync_batches_per_s": raw_rate,
        "log_append_batches_per_s": log_rate,
        "log_append_records_per_s": log_rate * per_batch,
        "log_vs_raw": log_rate / raw_rate,
    }


def bench_compaction(root: str, n: int) -> dict:
    keys = [OffsetCommitKey(f"group-{g}", f"topic-{t}", p) for g in range(40) for t in range(5) for p in range(10)]
    member = MemberMetadata("m-1", None, "client", "/10.0.0.1", 300000, 45000, b"\x00" * 24, b"\x00" * 32)
    batches = []
    offset = 0
    ts = 1_700_000_000_000
    i = 0
    while offset < n:
        g = i % 40
        recs = [(keys[(g * 50 + j + i) % len(keys)], OffsetCommitValue(offset + j, 5, "", ts + i)) for j in range(16)]
        if i % 50 == 0:
            recs.append((GroupMetadataKey(f"group-{g}"), GroupMetadataValue("consumer", i, "range", "m-1", ts + i, (member,))))
        if i % 997 == 0:  # a group deleted now and then: its offsets and metadata are tombstoned
            recs += [(k, None) for k in keys if k.group == f"group-{g}"] + [(GroupMetadataKey(f"group-{g}"), None)]
        batches.append(Batch(offset, 1, ts + i, tuple(recs)))
        offset += len(recs)
        i += 1
    d = os.path.join(root, "compact")
    with open_log(d, segment_bytes=1 << 20, **NO_FSYNC) as log:
        for b in batches:
            log.append(b, 1)
        closed = log.segment_paths(closed_only=True)
        closed_records = sum(
            len(b.records) for b in batches if b.next_offset <= int(os.path.basename(log.segment_paths()[-1])[:20])
        )
    t = time.perf_counter()
    stats = compact_segments(closed, os.path.join(root, "compacted"), delete_retention_ms=86_400_000, now_ms=ts + i)
    secs = time.perf_counter() - t
    return {
        "records_in": stats.records_in,
        "records_out": stats.records_out,
        "distinct_keys": len(keys) + 40,
        "segments": len(closed),
        "bytes_in": stats.bytes_in,
        "bytes_out": stats.bytes_out,
        "size_ratio": stats.bytes_out / stats.bytes_in,
        "compaction_records_per_s": stats.records_in / secs,
        "seconds": secs,
        "closed_records_check": closed_records == stats.records_in,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="where to write the logs (default: a temporary directory under bench/results)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = ap.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    root = tempfile.mkdtemp(prefix="log-bench-", dir=args.dir or RESULTS)
    n = 100_000 if args.quick else 1_000_000
    started_on = machine()
    started = time.perf_counter()
    try:
        replay_main = bench_replay(root, n, "overwrites", repeat=3)
        replay_distinct = bench_replay(root, n, "distinct", repeat=1)
        replay_shared = bench_replay(root, n, "shared", repeat=1)
        appends = [bench_append(root, k, 1.0 if args.quick else 4.0) for k in (1, 16, 256)]
        compaction = bench_compaction(root, 50_000 if args.quick else 300_000)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "machine": started_on,
        "replay": replay_main,
        "replay_all_keys_distinct": replay_distinct,
        "replay_distinct_keys_groups_share_partitions": replay_shared,
        "append_fsync_per_batch": appends,
        "compaction": compaction,
        "total_seconds": time.perf_counter() - started,
    }
    with open(os.path.join(RESULTS, "log_bench.json"), "w") as f:
        json.dump(result, f, indent=2)
    m = result["machine"]
    print(
        f"machine: {m['nproc']} x {m['cpu_model']}, Python {m['python']}, msgpack {m['msgpack']}, "
        f"load average {m['load_average_1m_at_start']:.2f} at start"
    )
    print(f"{'measure':<58}{'value':>16}")
    for name, r in (("replay, 10k keys", replay_main), ("replay, all keys distinct", replay_distinct),
                    ("replay, distinct, shared partitions", replay_shared)):
        print(f"{name + ': replay records/s (files, CRC, apply)':<58}{r['loader_records_per_s']:>16,.0f}")
        print(f"{name + ': raw msgpack decode records/s':<58}{r['raw_msgpack_decode_records_per_s']:>16,.0f}")
        print(f"{name + ': replay / raw':<58}{r['loader_vs_raw']:>16.2f}")
        print(f"{name + ': raw decode incl. every key, records/s':<58}{r['raw_decode_including_every_key_records_per_s']:>16,.0f}")
        print(f"{name + ': open (recovery scan) + replay records/s':<58}{r['open_plus_replay_records_per_s']:>16,.0f}")
        print(f"{name + ': naive decode+replay records/s':<58}{r['naive_decode_then_replay_records_per_s']:>16,.0f}")
        print(f"{name + ': replay / raw decode incl. every key':<58}"
              f"{r['loader_records_per_s'] / r['raw_decode_including_every_key_records_per_s']:>16.2f}")
        print(f"{name + ': lazy load (shard serves) records/s':<58}{r['lazy_load_records_per_s']:>16,.0f}")
        print(f"{name + ': lazy load / raw decode incl. every key':<58}"
              f"{r['lazy_load_vs_raw_decode_including_every_key']:>16.2f}")
        print(f"{name + ': raw decode kept + survivor dict records/s':<58}"
              f"{r['raw_decode_kept_plus_survivor_dict_records_per_s']:>16,.0f}")
        print(f"{name + ': lazy load + materialize all records/s':<58}{r['lazy_load_then_materialize_records_per_s']:>16,.0f}")
        print(f"{name + ': state bytes per committed offset':<58}{r['state_bytes_per_committed_offset']:>16,.0f}")
    for a in appends:
        label = f"append, {a['records_per_batch']} rec/batch ({a['frame_bytes']} B), fsync each: batches/s"
        print(f"{label:<58}{a['log_append_batches_per_s']:>16,.0f}")
        print(f"{'raw write+fsync, same frames: batches/s':<58}{a['raw_write_fsync_batches_per_s']:>16,.0f}")
        print(f"{'append / raw':<58}{a['log_vs_raw']:>16.2f}")
    c = compaction
    print(f"{'compaction records/s':<58}{c['compaction_records_per_s']:>16,.0f}")
    print(f"{'compaction size ratio (after / before)':<58}{c['size_ratio']:>16.3f}")
    print(f"{'compaction records in -> out':<58}{str(c['records_in']) + ' -> ' + str(c['records_out']):>16}")
    print(f"total {result['total_seconds']:.1f} s; wrote {os.path.join('bench', 'results', 'log_bench.json')}")


if __name__ == "__main__":
    main()
