"""The leader's side of a compaction run: upload its closed segments, and swap compacted ones in.

Both run on the shard's I/O thread, between two appends, so they see the log as it is between batches.

``upload``: the closed segments go to the segment store (verified copies, manifest); a copy of the active
segment as it is now goes under the run's ``tail/`` directory, for the run's offsets snapshot (it is never
compacted). ``swap``: every input segment must still be the one uploaded (same size and CRC as in the
run's manifest entry: otherwise the log moved on, e.g. another run swapped first, and nothing is done);
each compacted segment is downloaded into the partition directory, checked against the size and CRC the
job reported, and ``FileLog.replace_segments`` swaps them in.
"""

from __future__ import annotations

import os
import shutil
import zlib

from raygroups.offsets_log.segment import index_name
from raygroups.offsets_log.store import SegmentStore, file_crc32


class CompactionRefused(RuntimeError):
    """The swap cannot be done safely (the log changed, or a downloaded segment is not what was written)."""


def tail_dir(partition: int, run_id: str) -> str:
    return f"{partition}/tail/{run_id}"


def upload(log, store_uri: str, partition: int, run_id: str) -> dict:
    """Upload the closed segments and a copy of the active segment; return what the run needs to know."""
    store = SegmentStore(store_uri)
    closed = log.segment_paths(closed_only=True)
    result = store.upload(partition, closed)
    names = {os.path.basename(p) for p in closed}
    segments = [s for s in result.manifest.segments if s.name in names]
    active = log.segment_paths()[-1]
    with open(active, "rb") as f:
        tail = f.read(log.active_segment_size)
    store.put(f"{tail_dir(partition, run_id)}/{os.path.basename(active)}", tail)
    return {
        "segments": [(s.name, s.base_offset, s.size_bytes, s.crc32) for s in segments],
        "tail": (os.path.basename(active), int(os.path.basename(active)[:20]), len(tail)),
        "log_end_offset": log.log_end_offset,
        "copied": len(result.copied),
    }


def swap(log, store_uri: str, staged: str, inputs: list[tuple], outputs: list[dict]) -> dict:
    """Swap the compacted segments of ``outputs`` (from ``staged`` in the store) for the closed segments
    ``inputs`` (``(name, base, size, crc)`` as uploaded); all or none are checked before any is swapped."""
    directory = log.directory
    local = {os.path.basename(p): p for p in log.segment_paths(closed_only=True)}
    for name, _base, size, crc in inputs:
        path = local.get(name)
        if path is None or file_crc32(path) != (crc, size):
            raise CompactionRefused(f"segment {name} changed since it was uploaded (another run, or a truncation); "
                                    f"nothing was swapped")
    store = SegmentStore(store_uri)
    work = os.path.join(directory, "compaction.tmp")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        paths = []
        for out in outputs:
            data = store.get(f"{staged}/{out['name']}")
            if len(data) != out["bytes_out"] or zlib.crc32(data) != out["crc32_out"]:
                raise CompactionRefused(f"compacted segment {out['name']} in the store is not what the job wrote")
            path = os.path.join(work, out["name"])
            with open(path, "wb") as f:
                f.write(data)
            with open(os.path.join(work, index_name(out["base_offset"])), "wb") as f:
                f.write(store.get(f"{staged}/{index_name(out['base_offset'])}"))
            paths.append(path)
        log.replace_segments(paths)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"swapped": len(outputs), "log_end_offset": log.log_end_offset}
