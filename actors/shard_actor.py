"""``CoordinatorShard``: one ``__consumer_offsets`` partition as an asyncio Ray actor (a plain class here;
``raygroups.deployment.seam`` applies the Ray options).

Write path: a request runs the pure core at once (records replayed speculatively) and joins
the open batch; one batch is appended at a time on an I/O thread (fsync off the event loop) while the
next one accumulates — group commit; responses are released only when their batch, and every earlier
one, is durable, so reads never see an effect that might be lost. If an append fails, that batch and
everything after it are undone and answered with Kafka's mapped error. Parked JoinGroup/SyncGroup calls
are just pending futures on the event loop and never block other calls.

Lifecycle: LOADING (replaying the log; Kafka's answers for that state) → ACTIVE → CLOSED/FAILED
(``NOT_COORDINATOR``). On a restart Ray re-runs ``__init__``; the new instance replays the log and
serves with a leader epoch above every epoch in the log, and the file lock on the partition directory
keeps a second writer out. Guarantees: an acknowledged commit survives a crash of this process; a
stable group whose members keep heartbeating is not rebalanced by a restart (its GroupMetadata was
persisted at SyncGroup). Not guaranteed here: surviving the loss of the node's disk (replication).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from raygroups.actors import log_compaction
from raygroups.actors.log_server import ray_actor_id, ray_node_id
from raygroups.actors.metrics import METRICS_INTERVAL_S, ShardMetrics
from raygroups.actors.partition_writer import AppendFailed, LocalWriter, PartitionWriter, ReplicatedWriter
from raygroups.actors.replication import LeaderReplication, maintenance_interval_s
from raygroups.actors.standby import Standby, StandbyRefused, continue_standby
from raygroups.actors.timers import AsyncioTimers, WallClock
from raygroups.coordinator.api import dispatch, error_response, validate_request
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.errors import Errors, map_append_error
from raygroups.coordinator.messages import OffsetCommitRequest, OffsetCommitResponse
from raygroups.coordinator.runtime import CoordinatorRuntime, PartitionState
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log import CorruptLogError, LogLockedError, open_log, replay
from raygroups.offsets_log.batch import epoch_runs, records_below
from raygroups.offsets_log.loader import LoadSummary, state_digest

log = logging.getLogger(__name__)
_IMPORTED_AT = time.time()
LOCK_WAIT_S = 30.0
FOLLOWER_SWAP_TIMEOUT_S = 120.0
MATERIALIZE_SLICE = 4_000  # pending offsets turned into objects per event-loop turn after a lazy load
STANDBY_CALL_TIMEOUT_S = 10.0


def partition_dir(data_dir: str, partition: int) -> str:
    return os.path.join(data_dir, f"__consumer_offsets-{partition}")


def _new_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class CoordinatorShard:
    def __init__(
        self,
        partition: int | None,
        num_partitions: int,
        config: dict[str, int],
        data_dir: str,
        leader_epoch: int = 0,
        topics: dict[str, int] | None = None,
        directory: Any = None,
        replicated: bool = False,
        node: str | None = None,
        standby_for: int | None = None,
    ) -> None:
        """``partition=None``: a *warm spare* of a replicated deployment's node, a shard process started
        ahead of need, that serves nothing until the controller hands it a partition (``adopt``) -- so a
        failover skips starting a process (about a second here). A spare of a replicated node is also a hot
        standby: it keeps the node's followed partitions replayed (``actors.standby``) and, when it adopts
        one, continues that state instead of replaying the whole log. A spare that Ray restarts after it
        adopted a partition finds that partition again through ``directory.spare_binding()``. A spare with
        ``standby_for`` stands by for that partition only (``shard.standby.per.partition``; then a spare
        without it stands by for none)."""
        self._spare_args = (num_partitions, config, data_dir, leader_epoch, topics, directory, replicated, node)
        self._spare_directory = directory
        self.partition: int | None = None
        self._started = False
        self._timeline: dict[str, float] = {"process_started": _process_start_time(), "module_imported": _IMPORTED_AT,
                                            "constructed": time.time()}
        self._standby: Standby | None = None
        self._standby_server = None  # the node's LogServer, for the standby's reads
        self._standby_for: int | None = None  # the one partition the standby reads (None: all followed)
        if partition is None:
            partition = self._spare_binding()
        if partition is not None:
            self._setup(partition, *self._spare_args)
        elif replicated and directory is not None and node is not None and self._stands_by(config, standby_for):
            # A spare of a replicated node: keep the node's followed partitions (or the one it stands by
            # for) replayed (``actors.standby``).
            self._standby_for = standby_for
            self._standby = Standby(self._tail_log_server, name=f"standby-{node}" + (
                "" if standby_for is None else f"-p{standby_for}"))
            self._standby.start()

    @staticmethod
    def _stands_by(config: dict, standby_for: int | None) -> bool:
        c = CoordinatorConfig.from_properties(config)
        return c.shard_standby_enable and (standby_for is not None or not c.shard_standby_per_partition)

    def _tail_log_server(self, positions: dict, max_bytes: int) -> dict:
        import ray

        if self._standby_server is None:
            self._standby_server = self._spare_directory.log_server(self._spare_args[-1])
        try:
            return ray.get(self._standby_server.tail.remote(positions, max_bytes, self._standby_for),
                           timeout=STANDBY_CALL_TIMEOUT_S)
        except Exception:
            self._standby_server = None  # a restarted LogServer is looked up again
            raise

    def _spare_binding(self) -> int | None:
        return None if self._spare_directory is None else self._spare_directory.spare_binding()

    async def adopt(self, partition: int) -> bool:
        """A spare takes ``partition`` and starts loading it (this returns at once); True, or False if this
        instance already serves another partition. Idempotent for the partition it serves."""
        if self.partition is not None:
            return self.partition == partition
        self._setup(partition, *self._spare_args)
        self._timeline["adopted"] = time.time()
        self._ensure_started()
        return True

    def _setup(self, partition: int, num_partitions: int, config: dict[str, int], data_dir: str, leader_epoch: int,
               topics: dict[str, int] | None, directory: Any, replicated: bool, node: str | None) -> None:
        self.partition = partition
        self.config = CoordinatorConfig.from_properties(config)
        self.data_dir = data_dir
        self._epoch = leader_epoch
        self._topics: dict[str, int] = dict(topics or {})
        # Finds the deployment's controller, LogServers and topics (``raygroups.deployment.seam.Directory``;
        # None outside Ray).
        self._directory = directory
        self._io = ThreadPoolExecutor(1, thread_name_prefix=f"shard-{partition}-io")
        self._runtime = CoordinatorRuntime(
            num_partitions, self.config, WallClock(), AsyncioTimers, _new_member_id,
            append=None, on_pending=self._on_pending,
        )
        self._ctx = self._runtime.contexts[partition]
        self._loaded: asyncio.Future | None = None
        self._wakeup: asyncio.Event | None = None
        self._load_summary = None
        self._load_error: str | None = None
        self._stats = {"batches": 0, "records": 0, "append_failures": 0}
        self._metrics = ShardMetrics(partition, node, None if directory is None else directory.namespace)
        # Replicated deployments: the controller names the leader and the ISR.
        self._replicated = replicated
        self._node = node  # the stable name of the node this shard runs on (replicated deployments)
        self._writer: PartitionWriter = LocalWriter(partition)  # a ReplicatedWriter replaces it at load
        self._standby_tailed: int | None = None
        self._standby_refused: str | None = None

    # ------------------------------------------------------------------------------------------
    # Loading
    # ------------------------------------------------------------------------------------------
    def _ensure_started(self) -> None:
        if self._started:
            return
        if self.partition is None:
            # The controller recorded this spare as a partition's shard and its first call (a probe) came
            # before ``adopt`` did, or the controller stopped before handing the partition over: the
            # binding names the partition, and this is the adoption.
            bound = self._spare_binding()
            if bound is None:
                raise RuntimeError("a spare shard serves no partition until the controller hands it one")
            self._setup(bound, *self._spare_args)
            self._timeline["adopted"] = time.time()
        self._started = True
        loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._loaded = loop.create_future()
        loop.create_task(self._load())
        loop.create_task(self._flush_loop())
        loop.create_task(self._metrics_loop())
        if self._replicated:
            loop.create_task(self._maintenance_loop())

    def _open_log(self):
        path = partition_dir(self.data_dir, self.partition)
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                return open_log(
                    path,
                    segment_bytes=self.config.offsets_topic_segment_bytes,
                    fsync_interval_ms=self.config.log_flush_interval_ms or None,
                )
            except LogLockedError:
                # A previous instance of this shard is still exiting; its lock goes with its process.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    async def _load(self) -> None:
        loop = asyncio.get_running_loop()
        ctx = self._runtime.begin_load(self.partition, self._epoch)
        mark = self._timeline.setdefault
        mark("load_started", time.time())
        try:
            if self._replicated:
                self._writer = ReplicatedWriter(LeaderReplication(
                    self.partition, self._node, self._directory.controller(), self._directory.log_server,
                    self.config.min_insync_replicas, self.config.replica_lag_time_max_ms, ray_node_id(),
                    ray_actor_id(), self.config.shard_session_timeout_ms,
                ))
            ctx.epoch = await self._writer.start(ctx.epoch)
            mark("leader_granted", time.time())
            plog = await loop.run_in_executor(self._io, self._open_log)
            ctx.epoch = self._writer.opened(plog)
            ctx.log = plog
            mark("log_opened", time.time())
            # Lazily: the surviving offsets stay as the log's records until the background turns them into
            # objects (or a request needs one), so the shard serves once the log is read.
            promoted = await self._replay_standby(plog)
            if promoted is not None:
                self._load_summary, ctx.shard.state = promoted
            else:
                self._load_summary = await loop.run_in_executor(self._io, replay, plog, ctx.shard.state, True)
            self._metrics.on_load(self._load_summary)
            mark("replayed", time.time())
            await self._writer.loaded(plog, self._run_io)
            mark("isr_reconciled", time.time())
            if self._directory is not None:
                # Topic metadata lives in the GCS; a restarted instance must not forget it.
                self._topics = await loop.run_in_executor(self._io, self._directory.topics)
            self._runtime.complete_load(ctx)
            mark("active", time.time())
            log.info("shard %d loaded %s at epoch %d", self.partition, self._load_summary, ctx.epoch)
            loop.create_task(self._materialize_offsets(ctx.shard.state))
        except Exception as e:  # a corrupt or unreadable log: stay unavailable rather than serve partial state
            if self._standby is not None:  # failed before the promotion took it: the standbys go
                self._standby.stop()
                self._standby = None
            self._load_error = f"{type(e).__name__}: {e}"
            log.error("shard %d failed to load: %s", self.partition, self._load_error)
            self._runtime.fail_load(ctx)
        finally:
            self._loaded.set_result(None)

    async def _replay_standby(self, plog) -> tuple[LoadSummary, DurableState] | None:
        """A promoted spare: this partition's hot standby, continued to the log's end, as the load's
        summary and state; None when there is none or it does not continue this log (the caller replays
        the whole log; ``status()`` says why)."""
        standby, self._standby = self._standby, None
        if standby is None:
            return None
        loop = asyncio.get_running_loop()
        follow = await loop.run_in_executor(self._io, standby.take, self.partition)
        if follow is None:
            self._standby_refused = "no standby of this partition"
            return None
        try:
            released = await asyncio.wait_for(
                self._directory.log_server(self._node).released_token.remote(self.partition), STANDBY_CALL_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - no answer: the log is replayed as without a standby
            released = None
            log.warning("shard %d: the log server did not say which log it released: %s", self.partition, e)

        def finish() -> tuple[LoadSummary, DurableState] | None:
            start = time.perf_counter()
            state = DurableState()  # a refused continuation may leave part of itself here
            try:
                self._standby_tailed = continue_standby(follow, released, plog, state)
            except StandbyRefused as e:
                self._standby_refused = str(e)
                log.info("shard %d: standby not used: %s", self.partition, e)
                return None
            r = follow.replayer
            return LoadSummary(records=r.records, bytes=r.bytes, seconds=time.perf_counter() - start,
                               bytes_dropped=plog.bytes_dropped), state

        promoted = await loop.run_in_executor(self._io, finish)
        if promoted is not None:
            self._timeline["standby_promoted"] = time.time()
        return promoted

    async def _materialize_offsets(self, state: DurableState) -> None:
        """Turn the offsets the load left pending into objects, a slice per event-loop turn (a slice takes
        about 10 ms here), while the shard serves."""
        try:
            while state.pending_offsets and self._ctx.state is PartitionState.ACTIVE:
                state.materialize(MATERIALIZE_SLICE)
                await asyncio.sleep(0)
        except CorruptLogError as e:  # a record that passed its CRC but cannot be decoded: as a failed load
            self._load_error = f"{type(e).__name__}: {e}"
            log.error("shard %d failed to load: %s", self.partition, self._load_error)
            self._step_down(self._load_error)
            return
        self._timeline.setdefault("offsets_materialized", time.time())

    # ------------------------------------------------------------------------------------------
    # Group commit
    # ------------------------------------------------------------------------------------------
    def _on_pending(self, ctx) -> None:
        self._wakeup.set()

    async def _flush_loop(self) -> None:
        ctx = self._ctx
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while True:
                sealed = self._runtime.seal_batch(ctx)
                if sealed is None:
                    break
                records, ops = sealed
                error = Errors.NONE
                if records:
                    started = time.monotonic()
                    try:
                        await self._writer.append(ctx.log, records, self._run_io)
                    except AppendFailed as e:
                        error = map_append_error(e.error)
                        if e.step_down:
                            self._step_down(str(e))
                    finally:
                        ctx.epoch = self._writer.epoch
                    self._metrics.on_append(len(records), time.monotonic() - started, error is Errors.NONE)
                if error is Errors.NONE:
                    self._stats["batches"] += 1
                    self._stats["records"] += len(records)
                    self._runtime.batch_durable(ctx, ops)
                else:
                    self._stats["append_failures"] += 1
                    self._runtime.batch_failed(ctx, ops, error)

    # ------------------------------------------------------------------------------------------
    # Replication (replicated deployments only)
    # ------------------------------------------------------------------------------------------
    async def _run_io(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    def _step_down(self, reason: str) -> None:
        if self._ctx.state is not PartitionState.FAILED:
            log.warning("shard %d steps down: %s", self.partition, reason)
            # Unload (groups Dead, parked requests answered NOT_COORDINATOR), then stay FAILED so the
            # controller's pings see it; the log stays open until the controller kills this actor.
            self._runtime.unload(self.partition, None)
            self._ctx.state = PartitionState.FAILED
            self._writer.stop()

    async def _maintenance_loop(self) -> None:
        await self._loaded
        while self._ctx.state is not PartitionState.FAILED:
            await asyncio.sleep(maintenance_interval_s(self.config.shard_session_timeout_ms))
            if self._ctx.state is not PartitionState.ACTIVE:
                continue
            try:
                await self._writer.maintain(self._ctx.log, self._run_io)
            except AppendFailed as e:
                self._step_down(str(e))
            except Exception:  # noqa: BLE001 - try again next round
                log.exception("replica maintenance failed on shard %d", self.partition)

    async def _metrics_loop(self) -> None:
        while self._ctx.state is not PartitionState.FAILED:
            shard = self._ctx.shard
            isr = 1 + len(self._writer.replication.isr) if self._writer.replicated else None
            self._metrics.refresh({} if shard is None else shard.groups, self._ctx.state is PartitionState.ACTIVE,
                                  isr)
            await asyncio.sleep(METRICS_INTERVAL_S)

    async def replica_records(self, up_to_offset: int | None = None) -> list:
        """The leader's records below ``up_to_offset`` (tests compare them with the followers')."""
        return await self._run_io(records_below, self._ctx.log, up_to_offset)

    async def audit(self, up_to_offset: int | None = None) -> dict:
        """What a chaos run's checker compares once the workload stopped: the digest of the live state and
        of a fresh replay of this leader's log (equal unless an applied record was not logged, or a logged
        one not applied), and the log's batches per leader epoch below ``up_to_offset``."""
        await self._serving("audit")
        for _ in range(5):
            async with self._writer.between_appends():
                live = state_digest(self._ctx.shard.state)
                replayed, runs = await self._run_io(_replay_and_runs, self._ctx.log, up_to_offset)
                if live == state_digest(self._ctx.shard.state):  # nothing was applied meanwhile
                    break
        return {"partition": self.partition, "node": self._node, "leader_epoch": self._ctx.epoch, "live": live,
                "replay": replayed, "log_end_offset": self._ctx.log.log_end_offset, "runs": runs}

    # ------------------------------------------------------------------------------------------
    # The API
    # ------------------------------------------------------------------------------------------
    async def handle(self, request: Any) -> Any:
        """Answer one request of the group API (a validated request object of ``coordinator``)."""
        answer, counted = self._begin(request)
        response = await answer
        if counted:
            self._metrics.on_response(request, response)
        return response

    async def handle_batch(self, requests: list) -> list:
        """Answer several requests of the group API in one call (the client's coalescing): each exactly as
        ``handle`` would, in the list's order, with its own response; the call returns when all are
        answered. A batch that is not a list of at most ``client.max.batch.requests`` requests is refused
        whole (``TypeError``/``ValueError``), before any of them is looked at."""
        begun = self._begin_batch("handle_batch", requests)
        responses = await asyncio.gather(*(answer for answer, _ in begun), return_exceptions=True)
        for r, (_, counted), response in zip(requests, begun, responses, strict=True):
            if counted and not isinstance(response, BaseException):
                self._metrics.on_response(r, response)
        return list(responses)

    async def handle_stream(self, requests: list):
        """As ``handle_batch``, but each answer goes back as soon as it is ready, not when the last one is:
        a Ray streaming generator of lists of ``(index in requests, response)``, one list per wake-up of
        this shard that answered some. For requests of which some park and some are answered at once
        (JoinGroups: a rejoin waits for the rebalance, a first join or a member's rejoin that completes
        the join phase does not), so that none waits for another."""
        begun = self._begin_batch("handle_stream", requests)
        pending: dict[asyncio.Future, list[int]] = {}
        for i, (answer, _) in enumerate(begun):
            pending.setdefault(answer, []).append(i)
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            chunk = []
            for answer in done:
                # (as gather's return_exceptions: a cancelled answer is its CancelledError)
                response = asyncio.CancelledError() if answer.cancelled() else answer.exception() or answer.result()
                for i in pending.pop(answer):
                    if begun[i][1] and not isinstance(response, BaseException):
                        self._metrics.on_response(requests[i], response)
                    chunk.append((i, response))
            yield chunk

    def _begin_batch(self, what: str, requests: list) -> list[tuple[asyncio.Future, bool]]:
        if type(requests) is not list:
            raise TypeError(f"{what} takes a list of requests, got {type(requests).__name__}")
        limit = self.config.client_max_batch_requests
        if not 1 <= len(requests) <= limit:
            raise ValueError(f"{what} takes 1 to {limit} requests (client.max.batch.requests), "
                             f"got {len(requests)}")
        # Every request reaches the runtime here, one after the other in the list's order (``_begin`` does
        # not yield), so the commits among them join one open batch: one append and one fsync. A request too
        # malformed to be answered comes back as its exception, in its place; the others are answered as usual.
        begun = []
        for r in requests:
            try:
                begun.append(self._begin(r))
            except Exception as e:  # noqa: BLE001 - that request's answer
                begun.append((_raised(e), False))
        return begun

    def _begin(self, request: Any) -> tuple[asyncio.Future, bool]:
        """Check ``request`` and hand it to the runtime, without yielding: (the future of its response,
        whether the metrics count it)."""
        self._ensure_started()
        try:
            request = validate_request(request, self.config.message_max_bytes)
        except (TypeError, ValueError):
            return self._dispatch(request, validated=False), False  # INVALID_REQUEST (or raised) there
        active = self._ctx.state is PartitionState.ACTIVE
        if active and not self._writer.may_serve():
            return _answered(error_response(request, Errors.NOT_COORDINATOR)), True
        if type(request) is OffsetCommitRequest and active:
            return self._commit_known_topics(request), True
        return self._dispatch(request), True

    def _dispatch(self, request: Any, validated: bool = True) -> asyncio.Future:
        """The future of ``request``'s response. ``validated``: ``handle`` checked it already."""
        future = asyncio.get_running_loop().create_future()

        def sink(value: Any) -> None:
            if not future.done():
                future.set_result(value)

        dispatch(self._runtime, request, sink, validated)
        return future

    def _commit_known_topics(self, req: OffsetCommitRequest) -> asyncio.Future:
        # As Kafka's broker does before the coordinator: unknown topics/partitions fail per partition.
        unknown = {
            tp: Errors.UNKNOWN_TOPIC_OR_PARTITION
            for tp in req.offsets
            if tp[1] >= self._topics.get(tp[0], 0)
        }
        if not unknown:
            return self._dispatch(req)
        known = {tp: v for tp, v in req.offsets.items() if tp not in unknown}
        if not known:
            return _answered(OffsetCommitResponse(unknown))
        partial = self._dispatch(OffsetCommitRequest(
            req.group_id, known, req.generation_id, req.member_id, req.group_instance_id, req.retention_time_ms,
        ))
        merged = asyncio.get_running_loop().create_future()

        def merge(done: asyncio.Future) -> None:
            if merged.done():
                return
            if done.cancelled():
                merged.cancel()
                return
            if done.exception() is not None:
                merged.set_exception(done.exception())
                return
            errors = dict(done.result().errors)
            errors.update(unknown)
            merged.set_result(OffsetCommitResponse({tp: errors[tp] for tp in req.offsets}))

        partial.add_done_callback(merge)
        return merged

    # ------------------------------------------------------------------------------------------
    # Compaction (raygroups.compaction drives it; the log work runs on the I/O thread, between appends)
    # ------------------------------------------------------------------------------------------
    async def compaction_upload(self, store_uri: str, run_id: str) -> dict:
        """Upload the closed segments (and a copy of the active one) for a compaction run, while no append is
        in flight (so every closed segment holds acknowledged batches only)."""
        await self._serving("upload segments")
        async with self._writer.between_appends():
            out = await self._run_io(log_compaction.upload, self._ctx.log, store_uri, self.partition, run_id)
        return {**out, "leader_epoch": self._ctx.epoch, "node": self._node}

    async def compaction_swap(self, store_uri: str, staged: str, leader_epoch: int, inputs: list, outputs: list,
                              lineage: dict | None = None) -> dict:
        """Swap a run's compacted segments in, if this shard still leads at ``leader_epoch`` (a fence: a
        run that uploaded from an older leader, or raced another run, changes nothing), then on every
        follower (which also accepts the earlier versions in ``lineage``); each replica swaps all or none."""
        await self._serving("swap compacted segments")
        if self._ctx.epoch != leader_epoch:
            raise log_compaction.CompactionRefused(
                f"partition {self.partition} is led at epoch {self._ctx.epoch}, the run uploaded at {leader_epoch}")
        plog = self._ctx.log
        work = log_compaction.work_dir(plog.directory, staged)
        try:
            paths = await asyncio.to_thread(log_compaction.download, store_uri, staged, outputs, work)
            out = await self._run_io(log_compaction.swap_in, plog, outputs, paths,
                                     log_compaction.accepted_versions(inputs))
        finally:
            log_compaction.discard_work(work)
        if self._ctx.epoch == leader_epoch and self._ctx.state is PartitionState.ACTIVE:
            out["followers"] = await self._writer.swap_followers(
                store_uri, staged, outputs, log_compaction.accepted_versions(inputs, lineage), FOLLOWER_SWAP_TIMEOUT_S)
        return out

    async def _serving(self, what: str) -> None:
        self._ensure_started()
        await self._loaded
        if self._ctx.state is not PartitionState.ACTIVE or self._ctx.log is None:
            raise log_compaction.CompactionRefused(f"partition {self.partition} cannot {what}: it is "
                                                   f"{self._ctx.state.value}")

    async def set_topics(self, topics: dict[str, int]) -> None:
        self._topics = dict(topics)

    async def ready(self) -> dict:
        """Wait for the load to finish; return ``status()``."""
        self._ensure_started()
        await self._loaded
        return await self.status()

    async def status(self) -> dict:
        self._ensure_started()
        summary = self._load_summary
        return {
            "partition": self.partition,
            "state": self._ctx.state.value,
            "leader_epoch": self._ctx.epoch,
            "log_end_offset": None if self._ctx.log is None else self._ctx.log.log_end_offset,
            "load_records": None if summary is None else summary.records,
            "load_seconds": None if summary is None else summary.seconds,
            "load_bytes_dropped": None if summary is None else summary.bytes_dropped,
            "load_error": self._load_error,
            # A promoted spare: the records its standby had not read (replayed at promotion), or why the
            # standby was not used.
            "standby_tailed": self._standby_tailed,
            "standby_refused": self._standby_refused,
            "pending_offsets": 0 if self._ctx.shard is None else self._ctx.shard.state.pending_offsets,
            "groups": 0 if self._ctx.shard is None else len(self._ctx.shard.groups),
            "groups_by_state": {} if self._ctx.shard is None else dict(
                Counter(g.state.value for g in self._ctx.shard.groups.values())),
            "pid": os.getpid(),
            "node": self._node,
            "ray_node_id": ray_node_id(),
            "isr": sorted(self._writer.replication.isr) if self._writer.replicated else None,
            "namespace": None if self._directory is None else self._directory.namespace,
            "topics": len(self._topics),
            "start_timeline": dict(self._timeline),
            **self._stats,
        }

    async def standby_status(self) -> dict | None:
        """A spare's hot standby (None for a shard, or a spare without one): the partition it stands by for
        (None: every partition its node follows) and, per partition, how far it has read."""
        if self.partition is not None or self._standby is None:
            return None
        return {"standby_for": self._standby_for, "partitions": self._standby.status(), "node": self._spare_args[-1],
                "pid": os.getpid()}

    async def ping(self) -> str:
        """Next to no work (the Ray call floor that benchmarks compare against): the partition state. It
        also starts the load of a shard nobody has called yet, so the controller's pings bring a new
        leader up, and they see a shard that stepped down (FAILED)."""
        self._ensure_started()
        return self._ctx.state.value

    async def probe(self) -> dict:
        """The controller's liveness probe: the partition state (it also starts the load of a shard nobody
        has called yet) and the node this instance runs on."""
        self._ensure_started()
        return {"state": self._ctx.state.value, "node": self._node}

    async def close(self) -> None:
        """Unload the partition (parked requests get NOT_COORDINATOR) and release its log."""
        if self.partition is None:
            if self._standby is not None:
                self._standby.stop()
            return
        if self._started:
            await self._loaded
        self._writer.stop()
        ctx = self._runtime.unload(self.partition, None)
        if ctx is not None and ctx.log is not None:
            plog, ctx.log = ctx.log, None
            await asyncio.get_running_loop().run_in_executor(self._io, plog.close)


def _process_start_time() -> float | None:
    try:
        import psutil  # Ray's own dependency

        return psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - a figure for people, not needed to serve
        return None


def _answered(value: Any) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _raised(error: BaseException) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    return future


def _replay_and_runs(plog, up_to_offset: int | None) -> tuple[str, list]:
    state = DurableState()
    replay(plog, state)
    return state_digest(state), epoch_runs(plog, up_to_offset)
