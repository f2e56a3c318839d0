"""``LogServer``: one actor per coordinator node, hosting that node's follower replicas of the offsets
logs and the node's record of every partition it replicates (a plain class; ``raygroups.deployment.seam`` makes it
a Ray actor placed on its node by the node's stable name).

Guarantees: an append is accepted only from a leader epoch at least as new as every epoch this replica
has been fenced to or has seen, and only at the replica's log end, so a deposed leader can never get a
batch into a follower. The controller's partition states reach the node through ``update_partition``,
which persists the state and the fence epoch atomically (fsynced) in the partition's directory before
it answers: a restarted LogServer still refuses appends below its persisted fence, and a controller that
lost its cache rebuilds the metadata from ``report()``. A state older than the one persisted (lower
``partition_epoch``) is refused. A state naming this node leader *releases* the replica: its log is
closed so that the shard actor on this node can open and lead it; a later state naming another leader
makes this node a follower again. For the node's hot standby (``actors.standby``), ``tail`` hands out
what the followed logs hold past a position, under a token that a truncation, a compaction swap or a
reopen replaces, and ``released_token`` tells the shard that took a log over under which token it was
released. A leader that cannot reach the controller to renew its lease (the head is down, or the
controller restarting) asks its in-sync followers to *hold* its leadership instead (``hold_leadership``):
for the hold's length this replica takes no state of a newer leader epoch, so no other leader can be
elected over it (the controller's commit of the new epoch is refused here) while the old one serves on.
Not guaranteed: anything about partitions this node does not replicate.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from raygroups.actors import log_compaction
from raygroups.actors.metrics import StandbyMetrics
from raygroups.offsets_log import Batch, LogError, LogFailedError, StaleEpochError, open_log
from raygroups.offsets_log.batch import epoch_runs, records_below
from raygroups.offsets_log.codec import RecordFormatError, payload_base_offset
from raygroups.offsets_log.replica_state import (
    ReplicaStateError,
    partition_dir,
    partition_of_dir,
    read_node_descriptor,
    read_replica_state,
    read_topics_file,
    validate_partition_state,
    validate_topics,
    write_node_descriptor,
    write_replica_state,
    write_topics_file,
)

log = logging.getLogger(__name__)
MIN_TAIL_BYTES = 64 * 1024  # a standby's read of one partition, at least
STANDBY_LAG_REFRESH_S = 5.0  # raygroups_standby_lag_records, as often as the shards' gauges
MAX_HOLD_S = 60.0  # the longest leadership hold a leader may ask for


def ray_node_id() -> str | None:
    """The Ray node this process runs on (which incarnation of its node wrote a report)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - outside a Ray worker there is none
        return None


def ray_actor_id() -> str | None:
    """The Ray actor this code runs in (hex, as the controller names shard actors), or None outside one."""
    try:
        import ray

        return ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - outside a Ray actor there is none
        return None


def _restarted() -> bool:
    """True in a Ray actor that Ray restarted (its previous process died), False anywhere else."""
    try:
        import ray

        return ray.is_initialized() and bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # noqa: BLE001 - outside a Ray actor: a first start
        return False


class LogServer:
    def __init__(self, node: str, node_dir: str, segment_bytes: int, fsync_interval_ms: int | None,
                 num_partitions: int | None = None, min_insync_replicas: int | None = None,
                 hold_guard_s: float = 0.0, namespace: str | None = None) -> None:
        """``hold_guard_s``: after a restart of this server (its holds forgotten), how long to refuse every
        newer leader epoch as if each partition were held (the longest hold a leader asks for: its lease).
        ``namespace``: the deployment's, for the metrics' labels."""
        self.node = node
        self.node_dir = node_dir
        self._segment_bytes = segment_bytes
        self._fsync_interval_ms = fsync_interval_ms
        self._logs: dict = {}
        self._states: dict[int, dict] = {}  # partition -> the latest partition state persisted here
        self._fenced: dict[int, int] = {}
        self._released: dict[int, int] = {}  # partition -> epoch it was released for
        # Hot standbys (``actors.standby``): each open follower log has a token, replaced whenever the log
        # loses or rewrites records (a truncation, a compaction swap); a standby that read under one token
        # may go on from where it stopped only while the token holds. A released log's last token is kept,
        # so that the shard taking it over knows whether a standby's state is this log's prefix.
        self._tokens: dict[int, str] = {}
        self._released_tokens: dict[int, str] = {}
        self._errors: dict[int, str] = {}  # partition -> why its persisted state could not be read
        # partition -> the offset a standby last read from (all it holds is below it): its lag's base
        self._standby_at: dict[int, int] = {}
        self._lag_metrics = StandbyMetrics(node, namespace)
        self._lag_task: asyncio.Task | None = None
        self._io = ThreadPoolExecutor(1, thread_name_prefix="logserver-io")
        self._locks: dict[int, asyncio.Lock] = {}
        # partition -> (leader epoch, monotonic end) of the hold this replica promised its leader
        self._holds: dict[int, tuple[int, float]] = {}
        self._holds_unknown_until = time.monotonic() + hold_guard_s if _restarted() else 0.0
        os.makedirs(node_dir, exist_ok=True)
        self.descriptor, self.descriptor_error = None, None
        try:
            self.descriptor = read_node_descriptor(node_dir)
        except ReplicaStateError as e:
            # Kept as it is (never overwritten) and reported: the controller refuses this node, saying why.
            self.descriptor_error = str(e)
            log.error("node %s: %s", node, e)
        if self.descriptor is None and self.descriptor_error is None and num_partitions is not None:
            write_node_descriptor(node_dir, node, num_partitions, min_insync_replicas)
            self.descriptor = read_node_descriptor(node_dir)
        elif self.descriptor is not None and min_insync_replicas is not None and \
                min_insync_replicas < (self.descriptor["min_insync_replicas"] or min_insync_replicas + 1):
            # Remember the lowest min.insync.replicas ever used: writes acknowledged under it are held by
            # that few replicas, and a recovery quorum must count on no more.
            self.descriptor["min_insync_replicas"] = min_insync_replicas
            self._write_descriptor()
        self._load_states()
        try:
            self._topics, self._topics_version = read_topics_file(node_dir)
        except ReplicaStateError as e:
            log.error("node %s: %s", node, e)
            self._topics, self._topics_version = {}, 0

    def _write_descriptor(self) -> None:
        d = self.descriptor
        write_node_descriptor(self.node_dir, d["node"], d["num_partitions"], d["min_insync_replicas"],
                              d["layout_created"])

    def _load_states(self) -> None:
        for name in sorted(os.listdir(self.node_dir)):
            partition = partition_of_dir(name)
            if partition is None:
                continue
            try:
                state, fenced = read_replica_state(os.path.join(self.node_dir, name))
            except ReplicaStateError as e:
                # Not counted as a copy of the partition's state: the controller sees the error in report().
                self._errors[partition] = str(e)
                log.error("node %s: %s", self.node, e)
                continue
            if state is not None:
                # Not released even if it names this node leader: that may be stale (leadership moved while
                # the node was down; the controller sends the current state); the log's file lock keeps
                # this server and a shard of this node from opening it together.
                self._states[partition] = state
            if fenced >= 0:
                self._fenced[partition] = fenced

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
            self._tokens[partition] = uuid.uuid4().hex
        return log

    def _forget_log(self, partition: int):
        """Take ``partition``'s log out of service (the caller closes it); its token goes with it."""
        self._tokens.pop(partition, None)
        return self._logs.pop(partition, None)

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    def _state_sync(self, partition: int) -> dict:
        log = self._log(partition)
        return {"node": self.node, "log_end_offset": log.log_end_offset, "latest_epoch": log.latest_epoch,
                "fenced_epoch": self._fenced.get(partition, -1), "cleaned_offset": log.cleaned_offset}

    def _persist_sync(self, partition: int, state: dict | None, fenced: int) -> None:
        write_replica_state(partition_dir(self.node_dir, partition), state, fenced)

    async def _raise_fence(self, partition: int, epoch: int) -> None:
        """Refuse, from now on, appends from leader epochs below ``epoch`` (persisted before it counts)."""
        if epoch > self._fenced.get(partition, -1):
            await self._run(self._persist_sync, partition, self._states.get(partition), epoch)
            self._fenced[partition] = epoch

    # ------------------------------------------------------------------------------------------
    async def update_partition(self, partition: int, state: dict) -> dict:
        """Take the controller's latest state of ``partition``: persist it with the fence at its leader
        epoch, then act on it (release the replica to this node's shard if it names this node leader,
        follow otherwise). A state older than the persisted one is refused; the same one is a no-op."""
        self._start_lag_reports()
        state = validate_partition_state(state, f"state of partition {partition}")
        if self.node not in state["replicas"] and partition not in self._states:
            # Not a replica here and never was: nothing to record (the controller tells old replicas too).
            return {"ok": True, "node": self.node, "partition_epoch": state["partition_epoch"]}
        async with self._lock(partition):
            current = self._states.get(partition)
            held = self._held_for_s(partition, current, state["leader_epoch"])
            if held > 0:
                return {"ok": False, "reason": "held", "node": self.node, "held_for_s": round(held, 3)}
            if current is not None and (state["partition_epoch"] < current["partition_epoch"] or
                                        (state["partition_epoch"] == current["partition_epoch"] and state != current)):
                # Older, or another state under the same partition epoch (one that a failed commit left here):
                # the controller numbers its next state above ours.
                return {"ok": False, "reason": "stale", "node": self.node,
                        "partition_epoch": current["partition_epoch"]}
            fenced = max(self._fenced.get(partition, -1), state["leader_epoch"])
            if state != current or fenced != self._fenced.get(partition, -1):
                await self._run(self._persist_sync, partition, state, fenced)
            self._states[partition] = state
            self._fenced[partition] = fenced
            self._errors.pop(partition, None)
            if state["leader"] == self.node:
                self._released[partition] = state["leader_epoch"]
                token = self._tokens.get(partition)
                plog = self._forget_log(partition)
                if plog is not None:
                    # Before the close: the shard may open the log the moment its lock is free.
                    self._released_tokens[partition] = token
                    await self._run(plog.close)
            else:
                self._released.pop(partition, None)
                self._released_tokens.pop(partition, None)
            return {"ok": True, "node": self.node, "partition_epoch": state["partition_epoch"]}

    def _held_for_s(self, partition: int, current: dict | None, leader_epoch: int) -> float:
        """How much longer a state of ``leader_epoch`` must wait for a hold on ``partition`` (0: it need not)."""
        now = time.monotonic()
        hold = self._holds.get(partition)
        if hold is not None and leader_epoch > hold[0] and hold[1] > now:
            return hold[1] - now
        if current is not None and leader_epoch > current["leader_epoch"] and self._holds_unknown_until > now:
            return self._holds_unknown_until - now
        return 0.0

    async def hold_leadership(self, partition: int, leader_epoch: int, leader: str, hold_s: float) -> dict:
        """The leader ``leader`` of ``leader_epoch`` could not have its lease renewed by the controller: promise
        it that for ``hold_s`` from now this replica takes no state of a newer leader epoch, so that no other
        leader is elected meanwhile (the controller's commit of a new epoch needs the new leader's disk and
        the in-sync replicas', and the new leader is one of them). "From now" is no earlier than the leader
        asked, from when it counts its lease: the hold outlasts the lease it backs. Refused if this replica
        holds no state of the partition or was fenced above ``leader_epoch`` (the leader was deposed)."""
        if not isinstance(partition, int) or not isinstance(leader_epoch, int) or not isinstance(leader, str):
            raise TypeError("hold_leadership takes a partition (int), a leader epoch (int) and a node name (str)")
        if not isinstance(hold_s, int | float) or not 0 < hold_s <= MAX_HOLD_S:
            raise ValueError(f"a hold lasts more than 0 and at most {MAX_HOLD_S:g} s, not {hold_s!r}")
        async with self._lock(partition):
            if partition not in self._states:
                return {"ok": False, "reason": "unknown", "node": self.node}
            fenced = self._fenced.get(partition, -1)
            if fenced > leader_epoch:
                return {"ok": False, "reason": "fenced", "node": self.node, "fenced_epoch": fenced}
            until = time.monotonic() + hold_s
            epoch, end = self._holds.get(partition, (leader_epoch, until))
            self._holds[partition] = (max(epoch, leader_epoch), max(end, until))
            return {"ok": True, "node": self.node}

    async def update_topics(self, topics: dict[str, int], version: int) -> dict:
        """Persist the deployment's registered topics (a version older than the one held is refused)."""
        topics = validate_topics(topics)
        if version < self._topics_version:
            return {"ok": False, "reason": "stale", "version": self._topics_version}
        if (topics, version) != (self._topics, self._topics_version):
            await self._run(write_topics_file, self.node_dir, topics, version)
            self._topics, self._topics_version = topics, version
        return {"ok": True, "version": version}

    async def report(self) -> dict:
        """What this node's disk holds: its descriptor, the registered topics and, per partition, the
        persisted state and fence (and the error of any state file that could not be read)."""
        replicas = {}
        for p in sorted(set(self._states) | set(self._fenced)):
            replicas[p] = {"state": self._states.get(p), "fenced_epoch": self._fenced.get(p, -1)}
        return {"node": self.node, "ray_node_id": ray_node_id(), "descriptor": self.descriptor,
                "descriptor_error": self.descriptor_error, "replicas": replicas, "errors": dict(self._errors),
                "topics": dict(self._topics), "topics_version": self._topics_version}

    async def mark_layout(self) -> bool:
        """Record on this node's disk that every partition of the deployment exists (idempotent)."""
        if self.descriptor is None:
            return False
        if not self.descriptor["layout_created"]:
            self.descriptor["layout_created"] = True
            await self._run(self._write_descriptor)
        return True

    async def state(self, partition: int) -> dict:
        async with self._lock(partition):
            if partition in self._released:
                return {"node": self.node, "released": True, "fenced_epoch": self._fenced[partition]}
            return await self._run(self._state_sync, partition)

    async def append(self, partition: int, batches: list[Batch], leader_epoch: int) -> dict:
        """Append ``batches`` (from the leader of ``leader_epoch``) at this replica's log end."""
        async with self._lock(partition):
            if leader_epoch < self._fenced.get(partition, -1):
                return {"ok": False, "reason": "fenced", "fenced_epoch": self._fenced[partition]}
            try:
                await self._raise_fence(partition, leader_epoch)
                leo = await self._run(self._append_sync, partition, batches)
            except StaleEpochError as e:
                return {"ok": False, "reason": "stale", "detail": str(e)}
            except (LogError, OSError, ValueError) as e:
                answer = {"ok": False, "reason": "rejected", "detail": f"{type(e).__name__}: {e}"}
                if partition not in self._released:
                    state = await self._run(self._state_sync, partition)
                    answer["log_end_offset"] = state["log_end_offset"]
                return answer
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
            await self._run(self._truncate_sync, partition, offset)
            return {"ok": True, **await self._run(self._state_sync, partition)}

    def _truncate_sync(self, partition: int, offset: int) -> None:
        log = self._log(partition)
        if offset < log.log_end_offset:
            self._tokens[partition] = uuid.uuid4().hex  # records go: a standby of them is void
        log.truncate_to(offset)

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

    async def audit(self, partition: int, up_to_offset: int | None = None, from_offset: int = 0) -> dict:
        """This replica's batches per leader epoch from ``from_offset`` and below ``up_to_offset``, and its log
        end (a chaos run's audit)."""
        async with self._lock(partition):
            def work():
                log = self._log(partition)
                return {"node": self.node, "log_end_offset": log.log_end_offset,
                        "runs": epoch_runs(log, up_to_offset, from_offset)}
            return await self._run(work)

    async def compaction_swap(self, partition: int, store_uri: str, staged: str, leader_epoch: int, outputs: list,
                              accepted: dict) -> dict:
        """A follower's side of a compaction swap, asked by the leader of ``leader_epoch``: download the run's
        compacted segments (outside the partition's lock), then, only if that leader is still the one this
        replica follows, swap them in all or none (``log_compaction.swap_in``)."""
        if partition not in self._states or partition in self._released:
            return {"ok": False, "reason": "refused", "detail": f"node {self.node} does not follow partition {partition}"}
        work = log_compaction.work_dir(partition_dir(self.node_dir, partition), staged)
        try:
            paths = await asyncio.to_thread(log_compaction.download, store_uri, staged, outputs, work)
            async with self._lock(partition):
                current = self._states[partition]["leader_epoch"]
                if partition in self._released or leader_epoch != current or \
                        leader_epoch < self._fenced.get(partition, -1):
                    return {"ok": False, "reason": "fenced",
                            "detail": f"node {self.node} follows partition {partition} at leader epoch {current}, "
                                      f"not {leader_epoch}; nothing was swapped"}
                plog = self._log(partition)
                # Compacted segments replace what a standby may have read (whether the swap happens or not).
                self._tokens[partition] = uuid.uuid4().hex
                try:
                    result = await self._run(log_compaction.swap_in, plog, outputs, paths, accepted)
                except LogFailedError:
                    # Interrupted after its commit point: reopening the log (next use) finishes the swap.
                    await self._run(self._forget_log(partition).close)
                    raise
            return {"ok": True, **result}
        except (log_compaction.CompactionRefused, LogError, OSError, ValueError) as e:
            return {"ok": False, "reason": "refused", "detail": f"{type(e).__name__}: {e}"}
        finally:
            log_compaction.discard_work(work)

    # ------------------------------------------------------------------------------------------
    # Hot standbys (the node's spare shard process keeps a replayed state of what this node follows)
    # ------------------------------------------------------------------------------------------
    async def tail(self, positions: dict[int, tuple[str, int]], max_bytes: int, only: int | None = None) -> dict:
        """For a hot standby: every partition this node follows (or ``only`` that one, if the node follows
        it), with the CRC-checked batch payloads after
        ``positions[p] = (token, offset)`` when ``token`` is the log's current one (else from the log's
        start, under the current token; offset None: nothing while the token holds), at most about
        ``max_bytes`` in all (at least a batch each while any is new):
        ``{"partitions": {p: {"token", "from", "payloads", "end"}}, "released": {p: token}}``."""
        followed = [p for p, st in sorted(self._states.items()) if p not in self._released and
                    p not in self._errors and self.node in st["replicas"] and st["leader"] != self.node
                    and only in (None, p)]
        share = max(MIN_TAIL_BYTES, max_bytes // max(1, len(followed)))
        partitions, unavailable = {}, []
        for p in followed:
            token, offset = positions.get(p, (None, 0))
            async with self._lock(p):
                if p in self._released:
                    continue
                try:
                    partitions[p] = await self._run(self._tail_sync, p, token, offset, share)
                    if partitions[p]["from"] is not None:  # (None: a standby stopped on this log stays put)
                        self._standby_at[p] = partitions[p]["from"]
                    else:
                        self._standby_at.setdefault(p, 0)
                except (LogError, OSError) as e:
                    unavailable.append(p)  # for now: the standby keeps what it has
                    log.debug("node %s: no standby read of partition %d: %s", self.node, p, e)
        released = {p: t for p, t in self._released_tokens.items() if p in self._released}
        self._start_lag_reports()
        return {"partitions": partitions, "released": released, "unavailable": unavailable}

    def _start_lag_reports(self) -> None:
        """From this server's first partition state or standby read on (an actor's ``__init__`` has no loop)."""
        if self._lag_task is None and self._lag_metrics.live:
            self._lag_task = asyncio.get_running_loop().create_task(self._report_standby_lags())

    def standby_lags(self) -> dict[int, int]:
        """Per partition a standby read here: the records of this replica past where it last read from (0, and
        forgotten, once the partition is no longer followed here: led by this node, released, reassigned)."""
        lags = {}
        for p, at in list(self._standby_at.items()):
            st, log = self._states.get(p), self._logs.get(p)
            if log is None or st is None or p in self._released or st["leader"] == self.node \
                    or self.node not in st["replicas"]:
                del self._standby_at[p]
                lags[p] = 0
            else:
                lags[p] = max(0, log.log_end_offset - at)
        return lags

    async def _report_standby_lags(self) -> None:
        while True:
            try:
                self._lag_metrics.set(self.standby_lags())
            except Exception as e:  # noqa: BLE001 - a metric must never stop: the next round tries again
                log.warning("node %s: standby lag not reported: %s: %s", self.node, type(e).__name__, e)
            await asyncio.sleep(STANDBY_LAG_REFRESH_S)

    def _tail_sync(self, partition: int, token: str | None, offset: int, max_bytes: int) -> dict:
        log = self._log(partition)
        current = self._tokens[partition]
        end = log.log_end_offset
        if offset is None and token == current:  # a standby that stopped on this log wants nothing of it
            return {"token": current, "from": None, "payloads": [], "end": end}
        if token != current or offset is None or not log.log_start_offset <= offset <= end:
            offset = log.log_start_offset
        payloads: list[bytes] = []
        total = 0
        if offset < end:
            for _path, _pos, payload in log.raw_payloads(offset):
                # The sparse index starts the read up to a few KiB early: those batches were read already
                # (and must not use up the share, or a batch bigger than the rest of it never comes).
                try:
                    if payload_base_offset(payload) < offset:
                        continue
                except RecordFormatError:
                    pass  # the standby decodes it and stops there, as a load would
                if payloads and total + len(payload) > max_bytes:
                    break
                payloads.append(bytes(payload))
                total += len(payload)
        return {"token": current, "from": offset, "payloads": payloads, "end": end,
                "generation": log.open_generation}

    async def released_token(self, partition: int) -> str | None:
        """The token of ``partition``'s log when this server released it to this node's shard (None if it
        is not released, or was released by another instance of this server)."""
        return self._released_tokens.get(partition) if partition in self._released else None

    async def ping(self) -> str:
        return self.node

    async def close(self) -> None:
        if self._lag_task is not None:
            self._lag_task.cancel()
        for p in list(self._logs):
            log = self._forget_log(p)
            await self._run(log.close)
