"""``LogServer``: one actor per coordinator node, hosting that node's follower replicas of the offsets
logs (a plain class; ``actors.factory`` makes it a Ray actor pinned to its node).

Guarantees: an append is accepted only from a leader epoch at least as new as every epoch this replica
has been fenced to or has seen, and only at the replica's log end, so a deposed leader can never get a
batch into a follower; a fenced partition stays fenced across calls (``fence`` raises the floor). A
replica this node is about to lead is ``release``d: its log is closed so that the new shard actor on
this node can open it and replay it. Not guaranteed: anything about partitions this node does not
replicate.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

from offsets_log import Batch, LogError, StaleEpochError, open_log
from offsets_log.batch import records_below


def log_server_name(node_id: str) -> str:
    return f"raygroups-logserver-{node_id}"


def partition_dir(node_dir: str, partition: int) -> str:
    return os.path.join(node_dir, f"__consumer_offsets-{partition}")


class LogServer:
    def __init__(self, node_id: str, node_dir: str, segment_bytes: int, fsync_interval_ms: int | None) -> None:
        self.node_id = node_id
        self.node_dir = node_dir
        self._segment_bytes = segment_bytes
        self._fsync_interval_ms = fsync_interval_ms
        self._logs: dict = {}
        self._fenced: dict[int, int] = {}
        self._released: dict[int, int] = {}  # partition -> epoch it was released for
        self._io = ThreadPoolExecutor(1, thread_name_prefix="logserver-io")
        self._locks: dict[int, asyncio.Lock] = {}
        os.makedirs(node_dir, exist_ok=True)

    def _lock(self, partition: int) -> asyncio.Lock:
        lock = self._locks.get(partition)
        if lock is None:
            lock = self._locks[partition] = asyncio.Lock()
        return lock

    def _log(self, partition: int):
        log = self._logs.get(partition)
        if log is None:
            if partition in self._released:
                # This node's shard leads the partition and holds its log: never take it back from it.
                raise LogError(f"partition {partition} is released to this node's leader shard")
            log = open_log(partition_dir(self.node_dir, partition), segment_bytes=self._segment_bytes,
                           fsync_interval_ms=self._fsync_interval_ms)
            self._logs[partition] = log
        return log

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    def _state_sync(self, partition: int) -> dict:
        log = self._log(partition)
        return {"node_id": self.node_id, "log_end_offset": log.log_end_offset, "latest_epoch": log.latest_epoch,
                "fenced_epoch": self._fenced.get(partition, -1)}

    # ------------------------------------------------------------------------------------------
    async def fence(self, partition: int, leader_epoch: int) -> dict:
        """Refuse, from now on, appends from any leader epoch older than ``leader_epoch``. A fence at an
        epoch newer than a release makes this node a follower of the partition again."""
        async with self._lock(partition):
            self._fenced[partition] = max(self._fenced.get(partition, -1), leader_epoch)
            if self._released.get(partition, leader_epoch) < leader_epoch:
                del self._released[partition]
            if partition in self._released:
                return {"node_id": self.node_id, "fenced_epoch": self._fenced[partition], "released": True}
            return await self._run(self._state_sync, partition)

    async def release(self, partition: int, leader_epoch: int) -> None:
        """Fence, then close the replica so that this node's new shard actor can open and lead it."""
        async with self._lock(partition):
            self._fenced[partition] = max(self._fenced.get(partition, -1), leader_epoch)
            self._released[partition] = leader_epoch
            log = self._logs.pop(partition, None)
            if log is not None:
                await self._run(log.close)

    async def state(self, partition: int) -> dict:
        async with self._lock(partition):
            if partition in self._released:
                return {"node_id": self.node_id, "released": True, "fenced_epoch": self._fenced[partition]}
            return await self._run(self._state_sync, partition)

    async def append(self, partition: int, batches: list[Batch], leader_epoch: int) -> dict:
        """Append ``batches`` (from the leader of ``leader_epoch``) at this replica's log end."""
        async with self._lock(partition):
            if leader_epoch < self._fenced.get(partition, -1):
                return {"ok": False, "reason": "fenced", "fenced_epoch": self._fenced[partition]}
            self._fenced[partition] = leader_epoch
            try:
                leo = await self._run(self._append_sync, partition, batches)
            except StaleEpochError as e:
                return {"ok": False, "reason": "stale", "detail": str(e)}
            except (LogError, OSError, ValueError) as e:
                state = await self._run(self._state_sync, partition)
                return {"ok": False, "reason": "rejected", "detail": f"{type(e).__name__}: {e}",
                        "log_end_offset": state["log_end_offset"]}
            return {"ok": True, "log_end_offset": leo}

    def _append_sync(self, partition: int, batches: list[Batch]) -> int:
        log = self._log(partition)
        for batch in batches:
            log.append(batch, batch.leader_epoch)
        return log.log_end_offset

    async def truncate_to(self, partition: int, offset: int, leader_epoch: int) -> dict:
        """Leader-epoch truncation: drop a divergent suffix at the current leader's request."""
        async with self._lock(partition):
            if leader_epoch < self._fenced.get(partition, -1):
                return {"ok": False, "reason": "fenced"}
            await self._run(lambda: self._log(partition).truncate_to(offset))
            return {"ok": True, **await self._run(self._state_sync, partition)}

    async def end_offset_for_epoch(self, partition: int, epoch: int) -> tuple[int, int]:
        async with self._lock(partition):
            return tuple(await self._run(lambda: self._log(partition).end_offset_for_epoch(epoch)))

    async def read(self, partition: int, from_offset: int, max_bytes: int) -> list[Batch]:
        async with self._lock(partition):
            return await self._run(lambda: self._log(partition).read(from_offset, max_bytes))

    async def records(self, partition: int, up_to_offset: int | None = None) -> list:
        """Every record (key, value) of the replica below ``up_to_offset`` (tests compare replicas)."""
        async with self._lock(partition):
            return await self._run(lambda: records_below(self._log(partition), up_to_offset))

    async def ping(self) -> str:
        return self.node_id

    async def close(self) -> None:
        for p in list(self._logs):
            log = self._logs.pop(p)
            await self._run(log.close)
