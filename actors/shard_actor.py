"""``CoordinatorShard``: one ``__consumer_offsets`` partition as an asyncio Ray actor (a plain class here;
``raygroups.deployment.seam`` applies the Ray options).

The Ray face of a shard: its remote methods are what the controller, the client, the CLI and the chaos
nemesis call, and each hands the work to the part that does it -- ``spare`` (a warm spare's adoption and
hot standby), ``shard_load`` (loading), ``group_commit`` (the flusher), ``partition_writer`` (replication
upkeep), ``audit``, ``log_compaction``, ``shard_status`` and ``metrics`` -- over the one
``ServedPartition`` they share. The group API is answered here: a request is checked and handed to the
runtime without yielding, so the requests of one call join one batch; parked JoinGroup/SyncGroup calls
are pending futures on the event loop and never block other calls.

Guarantees: an acknowledged commit survives a crash of this process; a stable group whose members keep
heartbeating is not rebalanced by a restart (its GroupMetadata was persisted at SyncGroup). Not
guaranteed here: surviving the loss of the node's disk (replication).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from raygroups.actors import audit as shard_audit
from raygroups.actors import group_commit, log_compaction, shard_load, shard_status
from raygroups.actors.metrics import metrics_loop
from raygroups.actors.partition_writer import PartitionWriter, maintenance_loop
from raygroups.actors.served_partition import ServedPartition
from raygroups.actors.spare import Spare
from raygroups.coordinator.api import dispatch
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.requests import REQUESTS, ApiSpec
from raygroups.coordinator.runtime import PartitionState

FOLLOWER_SWAP_TIMEOUT_S = 120.0


class CoordinatorShard:
    """One partition's coordinator in a Ray actor (or a spare waiting for one). Its remote methods keep
    their names and signatures: the controller, the client, the CLI and the chaos nemesis call them."""

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
        cold: bool = False,
    ) -> None:
        """``partition=None``: a warm spare (``actors.spare``) of a replicated deployment's node, serving
        nothing until the controller hands it a partition (``adopt``), or the partition it adopted before
        Ray restarted it. ``standby_for``: the one partition its hot standby keeps replayed; ``cold``: it
        keeps no standby (a process ready to load any partition)."""
        self._shard_args = (num_partitions, config, data_dir, leader_epoch, topics, directory, replicated, node)
        self._spare = Spare(config, directory, replicated, node, standby_for, cold)
        self.partition: int | None = None
        self.config: CoordinatorConfig | None = None
        self._served: ServedPartition | None = None
        self._started = False
        self._loaded: asyncio.Future | None = None
        self._timeline = shard_status.new_timeline()
        if partition is None:
            partition = self._spare.binding()
        if partition is not None:
            self._setup(partition)
        else:
            self._spare.start_standby()

    async def adopt(self, partition: int) -> bool:
        """A spare takes ``partition`` and starts loading it (this returns at once); True, or False if this
        instance already serves another partition. Idempotent for the partition it serves."""
        if self.partition is not None:
            return self.partition == partition
        self._setup(partition)
        self._timeline["adopted"] = time.time()
        self._ensure_started()
        return True

    def _setup(self, partition: int) -> None:
        num_partitions, config, data_dir, leader_epoch, topics, directory, replicated, node = self._shard_args
        self.partition = partition
        self.config = CoordinatorConfig.from_properties(config)
        served = self._served = ServedPartition(partition, num_partitions, self.config, data_dir, leader_epoch,
                                                topics, directory, replicated, node, self._timeline)
        # What the group API below reads.
        self._runtime, self._ctx, self._metrics = served.runtime, served.ctx, served.metrics

    @property
    def _writer(self) -> PartitionWriter:
        return self._served.writer  # replaced at load in a replicated deployment

    @property
    def _topics(self) -> dict[str, int]:
        return self._served.topics

    def _ensure_started(self) -> None:
        if self._started:
            return
        if self.partition is None:
            # The controller recorded this spare as a partition's shard and its first call (a probe) came
            # before ``adopt`` did, or the controller stopped before handing the partition over: the
            # binding names the partition, and this is the adoption.
            bound = self._spare.binding()
            if bound is None:
                raise RuntimeError("a spare shard serves no partition until the controller hands it one")
            self._setup(bound)
            self._timeline["adopted"] = time.time()
        self._started = True
        served = self._served
        loop = asyncio.get_running_loop()
        served.wakeup = asyncio.Event()
        self._loaded = loop.create_future()
        loop.create_task(self._load())
        loop.create_task(group_commit.flush_loop(served))
        loop.create_task(metrics_loop(served))
        if served.replicated:
            loop.create_task(self._maintain())

    async def _load(self) -> None:
        try:
            await shard_load.load(self._served, self._spare.take_standby())
        finally:
            self._loaded.set_result(None)

    async def _maintain(self) -> None:
        await self._loaded
        await maintenance_loop(self._served)

    # ------------------------------------------------------------------------------------------
    # The API
    # ------------------------------------------------------------------------------------------
    async def handle(self, request: Any) -> Any:
        """Answer one request of the group API (a validated request object of ``coordinator``)."""
        started = time.monotonic()
        answer, counted = self._begin(request)
        response = await answer
        if counted:
            self._metrics.on_response(request, response, time.monotonic() - started)
        return response

    async def handle_batch(self, requests: list) -> list:
        """Answer several requests of the group API in one call (the client's coalescing): each exactly as
        ``handle`` would, in the list's order, with its own response; the call returns when all are
        answered. A batch that is not a list of at most ``client.max.batch.requests`` requests is refused
        whole (``TypeError``/``ValueError``), before any of them is looked at."""
        started = time.monotonic()
        begun = self._begin_batch("handle_batch", requests)
        responses = await asyncio.gather(*(answer for answer, _ in begun), return_exceptions=True)
        seconds = time.monotonic() - started  # each waited for the batch's last answer
        for r, (_, counted), response in zip(requests, begun, responses, strict=True):
            if counted and not isinstance(response, BaseException):
                self._metrics.on_response(r, response, seconds)
        return list(responses)

    async def handle_stream(self, requests: list):
        """As ``handle_batch``, but each answer goes back as soon as it is ready, not when the last one is:
        a Ray streaming generator of lists of ``(index in requests, response)``, one list per wake-up of
        this shard that answered some. For requests of which some park and some are answered at once
        (JoinGroups: a rejoin waits for the rebalance, a first join or a member's rejoin that completes
        the join phase does not), so that none waits for another."""
        started = time.monotonic()
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
                        self._metrics.on_response(requests[i], response, time.monotonic() - started)
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
        whether the metrics count it). What arrives here is checked once, whoever built it: a raw actor call
        is not trusted."""
        self._ensure_started()
        spec = REQUESTS.spec(request)
        try:
            request = spec.validate(request, self.config.message_max_bytes)
        except (TypeError, ValueError):
            return self._dispatch(request, validated=False), False  # INVALID_REQUEST (or raised) there
        active = self._ctx.state is PartitionState.ACTIVE
        if active and not self._writer.may_serve():
            return _answered(spec.error_response(request, Errors.NOT_COORDINATOR)), True
        if spec.check_topics is not None and active:
            return self._check_topics(spec, request), True
        return self._dispatch(request), True

    def _dispatch(self, request: Any, validated: bool = True) -> asyncio.Future:
        """The future of ``request``'s response. ``validated``: ``handle`` checked it already."""
        future = asyncio.get_running_loop().create_future()

        def sink(value: Any) -> None:
            if not future.done():
                future.set_result(value)

        dispatch(self._runtime, request, sink, validated)
        return future

    def _check_topics(self, spec: ApiSpec, req: Any) -> asyncio.Future:
        """The part of ``req`` for topics this deployment knows goes to the coordinator; the broker answers
        the rest (``spec.check_topics``)."""
        known, finish = spec.check_topics(req, self._topics)
        if known is req:
            return self._dispatch(req)
        if known is None:
            return _answered(finish(None))
        partial = self._dispatch(known)
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
            merged.set_result(finish(done.result()))

        partial.add_done_callback(merge)
        return merged

    # ------------------------------------------------------------------------------------------
    # Compaction (raygroups.compaction drives it; the log work runs on the I/O thread, between appends)
    # ------------------------------------------------------------------------------------------
    async def compaction_upload(self, store_uri: str, run_id: str) -> dict:
        """Upload the closed segments (and a copy of the active one) for a compaction run, while no append is
        in flight (so every closed segment holds acknowledged batches only)."""
        await self._serving("upload segments")
        return await log_compaction.upload_from_leader(self._served, store_uri, run_id)

    async def compaction_swap(self, store_uri: str, staged: str, leader_epoch: int, inputs: list, outputs: list,
                              lineage: dict | None = None) -> dict:
        """Swap a run's compacted segments in, if this shard still leads at ``leader_epoch`` (a fence: a
        run that uploaded from an older leader, or raced another run, changes nothing), then on every
        follower (which also accepts the earlier versions in ``lineage``); each replica swaps all or none."""
        await self._serving("swap compacted segments")
        return await log_compaction.swap_on_leader(self._served, store_uri, staged, leader_epoch, inputs, outputs,
                                                   lineage, FOLLOWER_SWAP_TIMEOUT_S)

    async def _serving(self, what: str) -> None:
        self._ensure_started()
        await self._loaded
        if self._ctx.state is not PartitionState.ACTIVE or self._ctx.log is None:
            raise log_compaction.CompactionRefused(f"partition {self.partition} cannot {what}: it is "
                                                   f"{self._ctx.state.value}")

    # ------------------------------------------------------------------------------------------
    # The chaos audit
    # ------------------------------------------------------------------------------------------
    async def replica_records(self, up_to_offset: int | None = None) -> list:
        """The leader's records below ``up_to_offset`` (tests compare them with the followers')."""
        return await shard_audit.replica_records(self._served, up_to_offset)

    async def audit(self, up_to_offset: int | None = None, from_offset: int = 0) -> dict:
        """What a chaos run's checker compares once the workload stopped: the digest of the live state and
        of a fresh replay of this leader's log (equal unless an applied record was not logged, or a logged
        one not applied), the log's batches per leader epoch from ``from_offset`` and below ``up_to_offset``,
        and the membership changes the log shows (``offsets_log.membership``)."""
        await self._serving("audit")
        return await shard_audit.audit(self._served, up_to_offset, from_offset)

    # ------------------------------------------------------------------------------------------
    # Topics, status, liveness, close
    # ------------------------------------------------------------------------------------------
    async def set_topics(self, topics: dict[str, int]) -> None:
        if self._served is not None:  # a spare reads the topics when it adopts a partition
            self._served.topics = dict(topics)

    async def ready(self) -> dict:
        """Wait for the load to finish; return ``status()``."""
        self._ensure_started()
        await self._loaded
        return await self.status()

    async def status(self) -> dict:
        self._ensure_started()
        return shard_status.status(self._served)

    async def standby_status(self) -> dict | None:
        """A spare's hot standby (None for a shard, or a spare without one): the partition it stands by for
        (None: every partition its node follows) and, per partition, how far it has read."""
        if self.partition is not None:
            return None
        return shard_status.standby_status(self._spare)

    async def ping(self) -> str:
        """Next to no work (the Ray call floor that benchmarks compare against): the partition state. It
        also starts the load of a shard nobody has called yet, so the controller's pings bring a new
        leader up, and they see a shard that stepped down (FAILED)."""
        self._ensure_started()
        return self._ctx.state.value

    async def probe(self) -> dict:
        """The controller's liveness probe: the partition state (it also starts the load of a shard nobody
        has called yet), the node this instance runs on and its process (Ray may restart it in place)."""
        self._ensure_started()
        return {"state": self._ctx.state.value, "node": self._served.node, "pid": os.getpid()}

    async def close(self) -> None:
        """Unload the partition (parked requests get NOT_COORDINATOR) and release its log."""
        if self.partition is None:
            self._spare.stop()
            return
        if self._started:
            await self._loaded
        served = self._served
        served.writer.stop()
        ctx = served.runtime.unload(self.partition, None)
        if ctx is not None and ctx.log is not None:
            plog, ctx.log = ctx.log, None
            await served.run_io(plog.close)


def _answered(value: Any) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _raised(error: BaseException) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    return future


