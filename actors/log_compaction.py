"""The leader's side of a compaction run: upload its closed segments, and swap compacted ones in.

Both run on the shard's I/O thread, between two appends, so they see the log as it is between batches.

``upload``: the closed segments go to the segment store (verified copies, manifest); a copy of the active
segment as it is now goes under the run's ``tail/`` directory, for the run's offsets snapshot (it is never
compacted). The swap, on the leader and then on each follower (``LogServer.compaction_swap``): the
compacted segments are downloaded beside the partition directory and checked against the size and CRC
the job reported (``download``); then every local segment they replace must still be a version the run
accepts -- on the leader exactly the one uploaded (otherwise the log moved on, e.g. another run swapped
first, and nothing is done), on a follower also any earlier version a run proved equivalent (its
``lineage``) -- and ``FileLog.replace_segments`` swaps them in, all or none (``swap_in``).
"""

from __future__ import annotations

import asyncio
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
        "cleaned_offset": log.cleaned_offset,
        "copied": len(result.copied),
    }


def accepted_versions(inputs: list, lineage: dict | None = None) -> dict[str, list[tuple[int, int]]]:
    """Per segment name, the ``(size, crc)`` versions a replica's local copy may have for the swap: the
    uploaded inputs (the leader's fence) plus, for followers, every version earlier runs proved equivalent
    (``lineage``), so a follower that missed a swap is brought along by a later run."""
    accepted: dict[str, list[tuple[int, int]]] = {}
    for name, _base, size, crc in inputs:
        accepted.setdefault(name, []).append((size, crc))
    for name, versions in (lineage or {}).items():
        if name in accepted:
            accepted[name].extend((int(size), int(crc)) for size, crc in versions)
    return accepted


def work_dir(log_directory: str, staged: str) -> str:
    """Where a replica stages the segments of one run it downloads: beside its partition directory, never
    inside it, one directory per run (two runs may download at once)."""
    return os.path.join(log_directory.rstrip("/") + ".compaction", staged.strip("/").replace("/", "_"))


def discard_work(work: str) -> None:
    """Remove a run's staging directory (and the replica's staging parent once it is empty)."""
    shutil.rmtree(work, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(work))
    except OSError:
        pass  # another run is still staging there


def download(store_uri: str, staged: str, outputs: list[dict], work: str) -> list[str]:
    """Copy a run's compacted segments (and indexes) from the store into ``work``, each checked against the
    size and CRC the job reported. Runs outside the log's lock: it takes as long as the store does."""
    store = SegmentStore(store_uri)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
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
    return paths


def swap_in(log, outputs: list[dict], paths: list[str], accepted: dict[str, list[tuple[int, int]]]) -> dict:
    """Swap the downloaded ``paths`` (one per output, in order) in for this log's closed segments of the
    same names, all or none (``FileLog.replace_segments``). Every local segment must be one of its
    ``accepted`` versions, or already the compacted one (then it is left as it is)."""
    local = {os.path.basename(p): p for p in log.segment_paths(closed_only=True)}
    todo = []
    for out, path in zip(outputs, paths, strict=True):
        name = out["name"]
        have = local.get(name)
        if have is None:
            raise CompactionRefused(f"segment {name} is not a closed segment of this replica (its segments differ "
                                    f"from the leader's); nothing was swapped")
        crc, size = file_crc32(have)
        if (size, crc) == (out["bytes_out"], out["crc32_out"]):
            continue  # swapped by an earlier attempt
        if (size, crc) not in accepted.get(name, ()):
            raise CompactionRefused(f"segment {name} changed since it was uploaded (another run, a truncation, or "
                                    f"a replica that diverged); nothing was swapped")
        todo.append(path)
    if todo:
        log.replace_segments(todo)
    return {"swapped": len(todo), "already": len(outputs) - len(todo), "log_end_offset": log.log_end_offset,
            "cleaned_offset": log.cleaned_offset}


def swap(log, store_uri: str, staged: str, inputs: list[tuple], outputs: list[dict]) -> dict:
    """Download and swap in one go (a leader without followers, and tests): only the uploaded ``inputs``
    are accepted."""
    work = work_dir(log.directory, staged)
    try:
        paths = download(store_uri, staged, outputs, work)
        return swap_in(log, outputs, paths, accepted_versions(inputs))
    finally:
        discard_work(work)


# ------------------------------------------------------------------------------------------
# On the leader's shard (``CoordinatorShard.compaction_upload`` / ``compaction_swap``)
# ------------------------------------------------------------------------------------------
async def upload_from_leader(served, store_uri: str, run_id: str) -> dict:
    """``upload`` while no append is in flight (so every closed segment holds acknowledged batches only)."""
    async with served.writer.between_appends():
        out = await served.run_io(upload, served.ctx.log, store_uri, served.partition, run_id)
    return {**out, "leader_epoch": served.ctx.epoch, "node": served.node}


async def swap_on_leader(served, store_uri: str, staged: str, leader_epoch: int, inputs: list, outputs: list,
                         lineage: dict | None, follower_timeout_s: float) -> dict:
    """Swap a run's compacted segments in if ``served`` still leads at ``leader_epoch`` (a fence: a run that
    uploaded from an older leader, or raced another run, changes nothing), then on every follower (which
    also accepts the earlier versions in ``lineage``); each replica swaps all or none."""
    ctx = served.ctx
    if ctx.epoch != leader_epoch:
        raise CompactionRefused(
            f"partition {served.partition} is led at epoch {ctx.epoch}, the run uploaded at {leader_epoch}")
    plog = ctx.log
    work = work_dir(plog.directory, staged)
    try:
        paths = await asyncio.to_thread(download, store_uri, staged, outputs, work)
        out = await served.run_io(swap_in, plog, outputs, paths, accepted_versions(inputs))
    finally:
        discard_work(work)
    if ctx.epoch == leader_epoch and served.active:
        out["followers"] = await served.writer.swap_followers(
            store_uri, staged, outputs, accepted_versions(inputs, lineage), follower_timeout_s)
    return out
