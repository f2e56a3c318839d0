"""The leader side of Kafka's ISR replication, run inside the shard actor that leads a partition.

A batch is appended to the leader's local log, then pushed to every follower in the ISR in parallel.
A follower that fails or times out (``replica.lag.time.max.ms``) is removed from the ISR *through the
controller* (epoch-checked) before anything is acknowledged; the batch is durable when every remaining
ISR member has it and the ISR (leader included) is at least ``min.insync.replicas`` — acks=all semantics,
so any replica a future election may pick has every acknowledged batch. Too few in-sync replicas: the
write is refused before it touches the log (``NOT_ENOUGH_REPLICAS``, which clients see as
``COORDINATOR_NOT_AVAILABLE``); a batch that fails after the local append is truncated away again,
locally and on the followers that took it. A follower answering that it is fenced at a newer epoch means
this leader was deposed: it steps down and acknowledges nothing more.

A leader serves only under a lease (``lease_valid``) that the controller renews every
``maintenance_interval_s``. When the controller does not answer (the head is down, or the controller
restarts), the in-sync followers hold the leadership instead (``LogServer.hold_leadership``): each promises
to take no newer leader epoch for a lease, so no other leader can be elected meanwhile and this one serves
on; a follower that is fenced above this epoch deposes it, one that does not answer lets the lease lapse.

Followers out of the ISR are caught up in the background: leader-epoch truncation (the follower keeps
only what matches the leader's log for its latest epoch), then the missing batches, and once level with
the leader's log end they rejoin the ISR through the controller.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import ray
from raygroups.coordinator.config import leadership_lease_s
from raygroups.coordinator.errors import Errors
from raygroups.offsets_log import Batch

log = logging.getLogger(__name__)
CATCH_UP_CHUNK_BYTES = 1 << 20
MAINTENANCE_INTERVAL_S = 0.5  # at most; a quarter of the lease when that is shorter


def maintenance_interval_s(session_timeout_ms: int) -> float:
    """How often a leader asks the controller to confirm it: four times per lease, at most every 0.5 s."""
    return min(MAINTENANCE_INTERVAL_S, leadership_lease_s(session_timeout_ms) / 4)

# How long a starting leader waits while the controller has not yet checked this node's incarnation and
# disk (it answers "wait"); the shard answers COORDINATOR_LOAD_IN_PROGRESS meanwhile.
START_WAIT_S = 60.0
START_POLL_S = 0.2


class Deposed(Exception):
    """A newer leader epoch exists: this leader must stop serving."""


class LeaderReplication:
    def __init__(self, partition: int, node: str, controller, log_server: Callable[[str], object],
                 min_insync_replicas: int, replica_lag_ms: int, ray_node_id: str | None = None,
                 actor_id: str | None = None, session_timeout_ms: int = 3_000) -> None:
        self.partition = partition
        self.node = node
        self.ray_node_id = ray_node_id  # which incarnation of the node this leader runs on
        self.actor_id = actor_id  # which shard actor this leader is (a replaced one gets no epoch)
        self._controller = controller
        self._log_server = log_server
        self._servers: dict[str, object] = {}  # node -> its LogServer's handle (looked up once: no GCS call)
        # None: the controller renewed the lease last; True: the followers held it; False: neither did.
        self._held: bool | None = None
        self.min_isr = min_insync_replicas
        self.lag_s = replica_lag_ms / 1000.0
        self.epoch = -1
        self.replicas: list[str] = []
        self.isr: set[str] = set()  # followers in sync (the leader is implicit)
        self.lock = asyncio.Lock()  # orders appends and ISR expansion
        self.confirmed_at = 0.0  # monotonic time the controller last confirmed this leadership
        self.lease_s = leadership_lease_s(session_timeout_ms)
        self._catching_up: asyncio.Task | None = None  # followers out of the ISR being caught up
        self._catch_up_stopped = False  # this leader stepped down: no catch-up starts again
        self._catch_up_deposed: tuple[int, Deposed] | None = None  # what the catch-up met, at which epoch
        self._expanding = 0  # ISR expansions the controller has not answered yet
        self._isr_expansions = 0  # ISR expansions the controller answered (or failed to)

    async def _leader_started(self) -> tuple[dict, float]:
        """A fresh leader epoch from the controller, and when it was asked for (the lease counts from
        there); it may ask this leader to wait (it has not yet checked this incarnation of the node and its
        disk, or the previous leader's lease runs)."""
        deadline = time.monotonic() + START_WAIT_S
        while True:
            asked = time.monotonic()
            meta = await self._controller.leader_started.remote(self.partition, self.node, self.ray_node_id,
                                                                 self.actor_id)
            if meta is None:
                raise Deposed(f"the controller does not name node {self.node} leader of partition {self.partition}")
            if "wait" not in meta:
                return meta, asked
            if time.monotonic() > deadline:
                raise RuntimeError(f"partition {self.partition}: the controller kept its leader waiting: {meta['wait']}")
            # Ask again when the controller said (the previous leader's lease ends), else soon.
            await asyncio.sleep(min(max(meta.get("retry_in_s", START_POLL_S) + 0.005, 0.01), START_POLL_S * 10))

    async def start(self) -> int:
        self._apply(*await self._leader_started())
        return self.epoch

    def _apply(self, meta: dict, asked: float) -> None:
        # From when the confirmation was asked for, not when it arrived: the controller counts the lease
        # from its answer, which is later (an answer delayed in flight must not stretch the lease).
        self.confirmed_at = asked
        self.epoch = meta["leader_epoch"]
        self.replicas = list(meta["replicas"])
        self.isr = {n for n in meta["isr"] if n != self.node}

    def lease_valid(self) -> bool:
        return time.monotonic() - self.confirmed_at < self.lease_s

    @property
    def followers(self) -> list[str]:
        return [n for n in self.replicas if n != self.node]

    # ------------------------------------------------------------------------------------------
    async def replicate(self, append_local, truncate_local, batch_for) -> Errors:
        """Append one batch under acks=all. ``batch_for(epoch)`` builds it at the local log end,
        ``append_local(batch)``/``truncate_local(offset)`` run on the log's I/O thread."""
        async with self.lock:
            if 1 + len(self.isr) < self.min_isr:
                return Errors.NOT_ENOUGH_REPLICAS
            batch: Batch = batch_for(self.epoch)
            await append_local(batch)
            followers = sorted(self.isr)
            results = await asyncio.gather(*(self._push(n, [batch]) for n in followers))
            failed = [n for n, r in zip(followers, results, strict=True) if not r.get("ok")]
            if any(r.get("reason") == "fenced" for r in results):
                await truncate_local(batch.base_offset)
                raise Deposed(f"a follower is fenced above epoch {self.epoch}")
            unshrunk = [node for node in failed if not await self._try_shrink(node)]
            if unshrunk or 1 + len(self.isr) < self.min_isr:
                await truncate_local(batch.base_offset)
                for node in followers:
                    if node not in failed:
                        await self._call(node, "truncate_to", self.partition, batch.base_offset, self.epoch)
                # A follower that timed out may still apply this batch later. Never reuse (epoch, offset):
                # continue under a fresh epoch (the controller fences the followers at it), so that
                # leader-epoch truncation removes that batch wherever it lands.
                await self.renew_epoch()
                return Errors.NOT_ENOUGH_REPLICAS
            return Errors.NONE

    async def renew_epoch(self) -> None:
        meta, asked = await self._leader_started()
        isr = self.isr
        self._apply(meta, asked)
        self.isr &= isr  # the controller may not have seen our latest shrinks yet; never grow here

    async def _push(self, node: str, batches: list[Batch]) -> dict:
        return await self._call(node, "append", self.partition, batches, self.epoch)

    async def _call(self, node: str, method: str, *args, timeout_s: float | None = None) -> dict:
        try:
            handle = self._servers.get(node)
            if handle is None:
                handle = self._servers[node] = self._log_server(node)
            return await asyncio.wait_for(getattr(handle, method).remote(*args), timeout_s or self.lag_s)
        except (TimeoutError, ray.exceptions.RayError, ValueError) as e:
            self._servers.pop(node, None)  # looked up again next time (the server may have been replaced)
            return {"ok": False, "reason": "unreachable", "detail": f"{type(e).__name__}: {e}"}

    async def swap_followers(self, store_uri: str, staged: str, outputs: list, accepted: dict,
                             timeout_s: float) -> dict[str, dict]:
        """Ask every follower to swap a compaction run's segments in under this leader's epoch (each does it
        all or none, or refuses); what each answered, by node."""
        async def one(node: str) -> dict:
            try:
                call = self._log_server(node).compaction_swap.remote(self.partition, store_uri, staged, self.epoch,
                                                                     outputs, accepted)
                return await asyncio.wait_for(call, timeout_s)
            except (TimeoutError, ray.exceptions.RayError, ValueError) as e:
                return {"ok": False, "reason": "unreachable", "detail": f"{type(e).__name__}: {e}"}

        nodes = self.followers
        return dict(zip(nodes, await asyncio.gather(*(one(n) for n in nodes)), strict=True))

    async def _try_shrink(self, node: str) -> bool:
        """``_shrink``, but a controller that cannot persist the change now (or cannot be reached) is not the
        leader's failure: False, and the batch that follower missed is not acknowledged (as Kafka's leader
        keeps a follower in the ISR until its AlterPartition succeeds)."""
        try:
            await self._shrink(node)
            return True
        except Deposed:
            raise
        except (RuntimeError, ray.exceptions.RayError) as e:
            log.warning("partition %d: could not drop %s from the ISR now: %s", self.partition, node, e)
            return False

    async def _shrink(self, node: str) -> None:
        ok = await self._controller.shrink_isr.remote(self.partition, self.epoch, node)
        if not ok:
            raise Deposed(f"the controller refused an ISR change at epoch {self.epoch}")
        self.isr.discard(node)
        log.info("partition %d: %s left the ISR", self.partition, node)

    # ------------------------------------------------------------------------------------------
    async def reconcile_isr(self, leader_log, run_io) -> None:
        """Before a new leader serves: bring every in-sync follower to exactly our log (truncating any
        suffix a previous leader left there, pushing what it lacks); one that cannot be reached leaves
        the ISR. Then our whole log, including what an earlier leader never got acknowledged, is held
        by the ISR before any reader sees it."""
        for node in sorted(self.isr):
            ok = False
            try:
                ok = await self._level(node, leader_log, run_io)
            except Deposed:
                raise
            except Exception as e:  # noqa: BLE001 - an unreachable follower leaves the ISR
                log.info("partition %d: reconciling %s failed: %s", self.partition, node, e)
            if not ok:
                await self._shrink(node)

    async def _level(self, node: str, leader_log, run_io) -> bool:
        state = await self._call(node, "state", self.partition)
        if "log_end_offset" not in state:
            return False
        if state.get("fenced_epoch", -1) > self.epoch:
            raise Deposed(f"{node} is fenced at epoch {state['fenced_epoch']} > {self.epoch}")
        target = await self._truncation_point(node, state, leader_log, run_io)
        if target is None:
            return False
        if target < state["log_end_offset"]:
            r = await self._call(node, "truncate_to", self.partition, target, self.epoch)
            if not r.get("ok"):
                return False
        position = target
        while True:
            batches = await run_io(leader_log.read, position, CATCH_UP_CHUNK_BYTES)
            if not batches:
                return True
            r = await self._push(node, batches)
            if not r.get("ok"):
                return False
            position = batches[-1].next_offset

    async def maintain(self, leader_log, run_io) -> None:
        """One round: renew the lease by re-reading our metadata (step down if deposed), and start catching
        up out-of-sync followers unless a catch-up still runs. The catch-up runs on its own: a follower that
        hangs may hold it for ``replica.lag.time.max.ms`` per call, which must not let the lease lapse
        (Kafka's leader fetches and renews independently too: ReplicaManager's ISR expiry vs the broker's
        heartbeats to the controller)."""
        self._raise_if_catch_up_deposed()
        asked = time.monotonic()
        expansions = self._isr_expansions
        renewal = asyncio.ensure_future(self._controller.partition_state.remote(self.partition, self.epoch, self.node))
        try:
            meta = await asyncio.wait_for(asyncio.shield(renewal), self.lease_s / 2)
        except (TimeoutError, ray.exceptions.RayError) as e:
            renewal.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved, whatever happens
            await self._hold_through_followers(e)
            if renewal.done():
                return
            # A slow controller is not a lost one: its answer still renews the lease (from the asking) if it
            # comes while that lease runs, so a leader does not stop serving because the controller's answers
            # took more than half a lease (Kafka's broker heartbeats are not cut short either).
            try:
                meta = await asyncio.wait_for(renewal, max(0.0, asked + self.lease_s - time.monotonic()))
            except (TimeoutError, ray.exceptions.RayError):
                return
        if self._held is not None:
            self._held = None
            log.info("partition %d: the controller confirms its leader again", self.partition)
        if meta is None or meta["leader"] != self.node or meta["leader_epoch"] != self.epoch:
            self.stop_catch_up()
            raise Deposed(f"partition {self.partition} moved on: {meta}")
        self.confirmed_at = max(self.confirmed_at, asked)
        self.replicas = list(meta["replicas"])
        # Replicas the controller dropped (dead nodes, re-replication) are no longer ours to wait for. Not
        # when the catch-up's ISR expansion ran while we asked: the answer may predate it, and dropping a
        # follower the controller may count in sync would be unsafe.
        if expansions == self._isr_expansions and not self._expanding:
            self.isr &= set(meta["isr"]) & set(self.replicas)
        self._raise_if_catch_up_deposed()
        behind = [node for node in self.followers if node not in self.isr]
        if behind and not self._catch_up_stopped and (self._catching_up is None or self._catching_up.done()):
            self._catching_up = asyncio.get_running_loop().create_task(
                self._catch_up_all(behind, leader_log, run_io))

    async def _hold_through_followers(self, why: BaseException) -> None:
        """The controller did not answer (``why``): ask every in-sync follower to hold this leadership for a
        lease (``LogServer.hold_leadership``). All of them did: the lease counts from the asking, as the
        controller's does (each hold runs from its follower's answer, later). One fenced above this epoch:
        deposed. Otherwise (a follower unreachable, or no follower in sync) the lease runs out."""
        followers = sorted(self.isr)
        asked = time.monotonic()
        results = await asyncio.gather(*(self._call(n, "hold_leadership", self.partition, self.epoch, self.node,
                                                    self.lease_s, timeout_s=min(self.lag_s, self.lease_s / 4))
                                         for n in followers))
        if any(r.get("reason") == "fenced" for r in results):
            self.stop_catch_up()
            raise Deposed(f"partition {self.partition}: a follower is fenced above epoch {self.epoch}")
        if followers and all(r.get("ok") for r in results):
            self.confirmed_at = asked
            if self._held is not True:
                log.info("partition %d: the controller did not answer (%s); its in-sync followers %s hold its "
                         "leadership", self.partition, type(why).__name__, followers)
            self._held = True
        elif self._held is not False:
            self._held = False
            log.warning("partition %d: the controller did not answer (%s) and the followers %s could not all "
                        "hold its leadership: it stops serving when its lease ends", self.partition,
                        type(why).__name__, followers)

    async def _catch_up_all(self, nodes: list[str], leader_log, run_io) -> None:
        epoch = self.epoch
        for node in nodes:
            if self._catch_up_stopped or node in self.isr or node not in self.replicas:
                continue
            try:
                await self._catch_up(node, leader_log, run_io)
            except Deposed as e:
                self._catch_up_deposed = (epoch, e)
                return
            except Exception as e:  # noqa: BLE001 - a follower we cannot reach stays out of the ISR
                log.info("partition %d: catch-up of %s failed: %s", self.partition, node, e)

    def _raise_if_catch_up_deposed(self) -> None:
        """A catch-up that found this leader deposed makes the round step down -- unless the leader has
        renewed its epoch since (a follower fenced at the epoch this leader now holds deposes nobody)."""
        met, self._catch_up_deposed = self._catch_up_deposed, None
        if met is not None and met[0] == self.epoch:
            raise met[1]

    def stop_catch_up(self) -> None:
        """This leader stepped down: cancel the catch-up, and start none again."""
        self._catch_up_stopped = True
        if self._catching_up is not None:
            self._catching_up.cancel()
            self._catching_up = None

    async def _truncation_point(self, node: str, state: dict, leader_log, run_io) -> int | None:
        """Where the follower's log stops matching ours (KIP-279's two steps): ask our end offset for the
        follower's latest epoch; if we answer with an older epoch, the follower's own end for that epoch
        bounds it too. None if the follower cannot be asked."""
        follower_end = state["log_end_offset"]
        follower_epoch = state["latest_epoch"]
        leader_end = await run_io(lambda: leader_log.log_end_offset)
        if follower_epoch < 0:
            return 0
        epoch, end = await run_io(leader_log.end_offset_for_epoch, follower_epoch)
        if epoch < 0:
            # The follower has an epoch above every epoch in our log (batches we never kept): everything
            # of ours is older, so our latest epoch ends at our log end.
            epoch, end = await run_io(lambda: leader_log.latest_epoch), leader_end
            if epoch < 0:
                return 0
        target = min(follower_end, end, leader_end)
        if epoch < follower_epoch:
            answer = await self._call(node, "end_offset_for_epoch", self.partition, epoch)
            if isinstance(answer, dict):
                return None
            follower_epoch_end = answer[1]
            target = min(target, follower_epoch_end if follower_epoch_end >= 0 else 0)
        return target

    async def _catch_up(self, node: str, leader_log, run_io) -> None:
        state = await self._call(node, "state", self.partition)
        if "log_end_offset" not in state:
            return
        if state.get("fenced_epoch", -1) > self.epoch:
            raise Deposed(f"{node} is fenced at epoch {state['fenced_epoch']} > {self.epoch}")
        follower_end = state["log_end_offset"]
        target = await self._truncation_point(node, state, leader_log, run_io)
        if target is None:
            return
        if target < follower_end:
            r = await self._call(node, "truncate_to", self.partition, target, self.epoch)
            if not r.get("ok"):
                return
        position = target
        while True:
            async with self.lock:
                batches = await run_io(leader_log.read, position, CATCH_UP_CHUNK_BYTES)
                if not batches:
                    # Level with the leader's log end while no append can run: back in sync. Count it
                    # in before telling the controller, so that whatever the controller records, every
                    # replica it may elect has every batch we acknowledge from now on.
                    self.isr.add(node)
                    # If this call fails, whether the controller recorded it is unknown: keep counting the
                    # node in (waiting for one more replica is safe); the next maintenance round keeps it
                    # only if the controller's ISR has it.
                    self._expanding += 1
                    try:
                        ok = await self._controller.expand_isr.remote(self.partition, self.epoch, node)
                    finally:
                        self._expanding -= 1
                        self._isr_expansions += 1
                    if not ok:
                        self.isr.discard(node)
                        raise Deposed(f"the controller refused an ISR change at epoch {self.epoch}")
                    log.info("partition %d: %s rejoined the ISR at offset %d", self.partition, node, position)
                    return
            if batches[0].base_offset < position:
                # ``position`` lies inside one of our compacted batches (the compactor merges batches; Kafka's
                # cleaner does not, and Kafka's UnifiedLog.appendAsFollower refuses a first batch below the
                # log end). That range is below our high watermark and held the same records on both sides:
                # the follower, out of the ISR, drops its copy from the merged batch's start and takes ours.
                r = await self._call(node, "truncate_to", self.partition, batches[0].base_offset, self.epoch)
                if not r.get("ok"):
                    return
            r = await self._push(node, batches)
            if not r.get("ok"):
                return
            position = batches[-1].next_offset
