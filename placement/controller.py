"""The controller: which node holds which replica, who leads, leader epochs, ISR; failure detection and
failover. A detached named Ray actor (``raygroups-controller``) on the head node; its metadata lives in
Ray's GCS key-value store, so a controller restart loses nothing.

It reconciles towards the pure ``placement.plan.plan`` in an idempotent loop that logs and carries on
after any single failure. Failover of a partition whose leader's node died, or whose leader shard stopped
answering (a paused "zombie"): elect the first live in-sync replica, bump the leader epoch, fence every
live replica at the new epoch (so the old leader cannot get anything acknowledged), persist the metadata,
then start the shard actor on the new leader's node, where it replays its local replica. No live in-sync
replica: the partition stays offline until one returns (no unclean election unless configured).

Guarantees: leader epochs only grow; a leader is only ever chosen from the ISR; followers are fenced
before the new leader serves. Not guaranteed: availability of a partition whose whole ISR is gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from typing import Any

import ray
from ray.experimental import internal_kv

from placement.plan import PartitionAssignment, elect_leader, needs_leader_rebalance, plan

log = logging.getLogger(__name__)

CONTROLLER_NAME = "raygroups-controller"
PARTITIONS_KEY = b"raygroups/partitions"
COORDINATOR_RESOURCE = "coordinator"
MONITOR_INTERVAL_S = 0.2
PING_INTERVAL_S = 0.5
PING_TIMEOUT_S = 1.0
# A leader shard that has not answered for this long while its node is alive is deemed paused or hung.
# Longer than Ray's restart of a crashed process (about 1.3 s measured), so a crash is not a failover.
SHARD_SILENCE_S = 3.0
LEADER_BALANCE_INTERVAL_S = 10.0  # Kafka's leader.imbalance.check.interval.seconds is 300; ours is cheap


def _to_json(assignments: dict[int, PartitionAssignment]) -> bytes:
    return json.dumps({str(p): dataclasses.asdict(a) for p, a in assignments.items()}).encode()


def _from_json(raw: bytes) -> dict[int, PartitionAssignment]:
    out = {}
    for p, a in json.loads(raw).items():
        out[int(p)] = PartitionAssignment(tuple(a["replicas"]), a["leader"], a["leader_epoch"], tuple(a["isr"]))
    return out


class Controller:
    def __init__(self, namespace: str, num_partitions: int, replication_factor: int, unclean_election: bool,
                 actors: Any) -> None:
        """``actors`` creates and finds the actors the controller manages (``actors.factory.ActorFactory``:
        ``create_log_server(node_id)``, ``log_server(node_id)``, ``create_shard(partition, node_id)``,
        ``shard(partition)``), so that placement does not depend on the actor classes."""
        self.namespace = namespace
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.unclean = unclean_election
        self._actors = actors
        self.partitions: dict[int, PartitionAssignment] = {}
        self._known_nodes: set[str] = set()
        self._last_answer: dict[int, float] = {}
        self._monitor: asyncio.Task | None = None
        self._lock: asyncio.Lock | None = None
        self.events: list[dict] = []

    # ------------------------------------------------------------------------------------------
    # Metadata
    # ------------------------------------------------------------------------------------------
    def _save(self) -> None:
        internal_kv._internal_kv_put(PARTITIONS_KEY, _to_json(self.partitions), overwrite=True,
                                     namespace=self.namespace)

    def _load(self) -> None:
        raw = internal_kv._internal_kv_get(PARTITIONS_KEY, namespace=self.namespace)
        if raw is not None:
            self.partitions = _from_json(raw)

    def _event(self, kind: str, **fields) -> None:
        self.events.append({"t": time.time(), "event": kind, **fields})
        log.info("controller %s %s", kind, fields)

    @staticmethod
    def alive_coordinator_nodes() -> set[str]:
        return {n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(COORDINATOR_RESOURCE)}

    # ------------------------------------------------------------------------------------------
    # Start and reconcile
    # ------------------------------------------------------------------------------------------
    async def _ensure_running(self) -> None:
        """After a restart Ray re-runs only ``__init__``: reload the metadata from the GCS and resume
        watching. Nodes that died while the controller was down are then seen as dead."""
        if self._lock is not None:
            return
        self._lock = asyncio.Lock()
        self._load()
        self._known_nodes = {n for a in self.partitions.values() for n in a.replicas}
        if self._monitor is None:
            self._monitor = asyncio.get_running_loop().create_task(self._monitor_loop())

    async def start(self) -> dict:
        await self._ensure_running()
        async with self._lock:
            nodes = self.alive_coordinator_nodes()
            if not nodes:
                raise RuntimeError("no alive node carries the 'coordinator' resource")
            self._known_nodes = set(nodes)
            await asyncio.gather(*(self._ensure_log_server(n) for n in nodes))
            target = plan(self.num_partitions, sorted(nodes), self.partitions or None, self.replication_factor)
            self.partitions = dict(target.partitions)
            self._save()
            for p in range(self.num_partitions):
                await self._ensure_shard(p)
        return await self.metadata()

    async def _ensure_log_server(self, node_id: str):
        try:
            handle = self._actors.log_server(node_id)
        except ValueError:
            handle = self._actors.create_log_server(node_id)
        await handle.ping.remote()
        return handle

    def _log_server(self, node_id: str):
        return self._actors.log_server(node_id)

    async def _ensure_shard(self, partition: int) -> None:
        """Make sure the leader's shard actor exists (idempotent)."""
        a = self.partitions[partition]
        if a.leader is None:
            return
        try:
            self._actors.shard(partition)
        except ValueError:
            await self._start_shard(partition, a.leader)

    async def _start_shard(self, partition: int, node_id: str) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                handle = self._actors.create_shard(partition, node_id)
                handle.ready.remote()  # start its load now rather than on the first client request
                self._last_answer[partition] = time.monotonic()
                return
            except ValueError:
                # The killed predecessor's name is released asynchronously.
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    # ------------------------------------------------------------------------------------------
    # Requests from leaders (epoch-checked)
    # ------------------------------------------------------------------------------------------
    async def leader_started(self, partition: int, node_id: str) -> dict | None:
        """A shard actor on ``node_id`` is about to serve ``partition``: give it a fresh epoch (above every
        earlier incarnation's), fence the followers at it, and tell it the replicas and the ISR."""
        await self._ensure_running()
        async with self._lock:
            a = self.partitions.get(partition)
            if a is None or a.leader != node_id:
                return None
            a = dataclasses.replace(a, leader_epoch=a.leader_epoch + 1)
            self.partitions[partition] = a
            self._save()
            await self._fence(partition, a, exclude=node_id)
            self._last_answer[partition] = time.monotonic()
            return {"leader_epoch": a.leader_epoch, "replicas": list(a.replicas), "isr": list(a.isr)}

    async def shrink_isr(self, partition: int, leader_epoch: int, node_id: str) -> bool:
        await self._ensure_running()
        async with self._lock:
            a = self.partitions.get(partition)
            if a is None or a.leader_epoch != leader_epoch:
                return False
            if node_id in a.isr:
                self.partitions[partition] = dataclasses.replace(a, isr=tuple(n for n in a.isr if n != node_id))
                self._save()
                self._event("isr-shrink", partition=partition, node=node_id)
            return True

    async def expand_isr(self, partition: int, leader_epoch: int, node_id: str) -> bool:
        await self._ensure_running()
        async with self._lock:
            a = self.partitions.get(partition)
            if a is None or a.leader_epoch != leader_epoch or node_id not in a.replicas:
                return False
            if node_id not in a.isr:
                self.partitions[partition] = dataclasses.replace(a, isr=(*a.isr, node_id))
                self._save()
                self._event("isr-expand", partition=partition, node=node_id)
            return True

    async def metadata(self) -> dict:
        await self._ensure_running()
        return {p: dataclasses.asdict(a) for p, a in self.partitions.items()}

    async def partition_state(self, partition: int) -> dict | None:
        await self._ensure_running()
        a = self.partitions.get(partition)
        return None if a is None else dataclasses.asdict(a)

    async def recent_events(self) -> list[dict]:
        return list(self.events)

    # ------------------------------------------------------------------------------------------
    # Failure detection and failover
    # ------------------------------------------------------------------------------------------
    async def _fence(self, partition: int, a: PartitionAssignment, exclude: str | None = None) -> None:
        async def fence_one(node_id: str) -> None:
            try:
                handle = self._log_server(node_id)
                if node_id == a.leader:
                    await asyncio.wait_for(handle.release.remote(partition, a.leader_epoch), 5)
                else:
                    await asyncio.wait_for(handle.fence.remote(partition, a.leader_epoch), 5)
            except (TimeoutError, ray.exceptions.RayError, ValueError) as e:
                log.warning("could not fence partition %d on %s: %s", partition, node_id, e)

        alive = self.alive_coordinator_nodes()
        await asyncio.gather(*(fence_one(n) for n in a.replicas if n in alive and n != exclude),
                             *([fence_one(a.leader)] if a.leader == exclude and a.leader in alive else []))

    async def _failover(self, partition: int, reason: str, exclude_leader: bool) -> None:
        a = self.partitions[partition]
        alive = self.alive_coordinator_nodes()
        old = a.leader
        candidates = alive - ({old} if exclude_leader and old is not None else set())
        isr = tuple(n for n in a.isr if n in candidates)
        new = elect_leader(dataclasses.replace(a, isr=isr), candidates, unclean=self.unclean)
        if new is None:
            # Offline. As Kafka, never shrink the ISR below its last members: they are the replicas
            # that hold every acknowledged batch, and the partition comes back when one of them does.
            isr = a.isr
        elif new not in isr:
            isr = (*isr, new)  # unclean election: the new leader defines the log
        a = dataclasses.replace(a, leader=new, leader_epoch=a.leader_epoch + 1, isr=isr)
        self.partitions[partition] = a
        self._save()
        self._event("failover", partition=partition, reason=reason, old=old, new=new, epoch=a.leader_epoch)
        if new is not None:
            await self._fence(partition, a)
        await self._replace_shard(partition)

    async def _replace_shard(self, partition: int) -> None:
        try:
            ray.kill(self._actors.shard(partition), no_restart=True)
        except ValueError:
            pass
        a = self.partitions[partition]
        if a.leader is not None:
            await self._start_shard(partition, a.leader)

    async def _monitor_loop(self) -> None:
        last_ping = 0.0
        last_balance = time.monotonic()
        while True:
            try:
                await self._reconcile_nodes()
                if time.monotonic() - last_ping >= PING_INTERVAL_S:
                    last_ping = time.monotonic()
                    await self._check_shards()
                if time.monotonic() - last_balance >= LEADER_BALANCE_INTERVAL_S:
                    last_balance = time.monotonic()
                    await self.balance_leaders()
            except Exception:  # noqa: BLE001 - the loop logs and carries on after any single failure
                log.exception("controller reconcile step failed")
            await asyncio.sleep(MONITOR_INTERVAL_S)

    async def _reconcile_nodes(self) -> None:
        alive = self.alive_coordinator_nodes()
        dead = self._known_nodes - alive
        joined = alive - self._known_nodes
        if not dead and not joined and all(a.leader is not None for a in self.partitions.values()):
            return
        async with self._lock:
            for node in sorted(dead):
                self._event("node-dead", node=node)
            self._known_nodes = set(alive)
            for node in sorted(joined):
                self._event("node-joined", node=node)
                await self._ensure_log_server(node)
            for p, a in sorted(self.partitions.items()):
                if a.leader in dead or (a.leader is None and any(n in alive for n in a.isr)) or \
                        (a.leader is None and self.unclean and any(n in alive for n in a.replicas)):
                    await self._failover(p, "leader node dead" if a.leader in dead else "replica back",
                                         exclude_leader=True)
                elif any(n in dead for n in a.isr):
                    self.partitions[p] = dataclasses.replace(a, isr=tuple(n for n in a.isr if n not in dead))
            if joined or dead:
                # Re-replicate: replace replicas on dead nodes by replicas on live ones (they join the
                # ISR once their leader has caught them up).
                target = plan(self.num_partitions, sorted(alive), self.partitions, self.replication_factor)
                for p, a in target.partitions.items():
                    old = self.partitions[p]
                    isr = tuple(n for n in old.isr if n in a.replicas)
                    self.partitions[p] = dataclasses.replace(old, replicas=a.replicas, isr=isr)
            self._save()

    async def balance_leaders(self) -> int:
        """Preferred-leader balancing: when Kafka's 10 % imbalance trigger fires, move leadership back to
        each partition's preferred replica (first in ``replicas``) that is alive and in sync. Returns the
        number of leaders moved."""
        await self._ensure_running()
        moved = 0
        async with self._lock:
            alive = self.alive_coordinator_nodes()
            if not needs_leader_rebalance(self.partitions, sorted(alive)):
                return 0
            for p, a in sorted(self.partitions.items()):
                preferred = a.replicas[0]
                if a.leader is not None and a.leader != preferred and preferred in alive and preferred in a.isr:
                    a = dataclasses.replace(a, leader=preferred, leader_epoch=a.leader_epoch + 1)
                    self.partitions[p] = a
                    self._save()
                    self._event("preferred-leader", partition=p, new=preferred, epoch=a.leader_epoch)
                    await self._fence(p, a)
                    await self._replace_shard(p)
                    moved += 1
        return moved

    async def _check_shards(self) -> None:
        """Ping every leader shard; one silent (or FAILED) for SHARD_SILENCE_S while its node lives is
        failed over."""
        now = time.monotonic()

        async def ping(p: int) -> None:
            try:
                state = await asyncio.wait_for(self._actors.shard(p).ping.remote(), PING_TIMEOUT_S)
                if state != "FAILED":  # a leader that stepped down counts as silent
                    self._last_answer[p] = time.monotonic()
            except (TimeoutError, ray.exceptions.RayError, ValueError):
                pass

        leaders = [p for p, a in self.partitions.items() if a.leader is not None]
        for p in leaders:
            # A failover interrupted by a controller restart may have left no shard: start it.
            await self._ensure_shard(p)
        await asyncio.gather(*(ping(p) for p in leaders))
        alive = self.alive_coordinator_nodes()
        for p in leaders:
            # After a controller restart nothing has answered yet: silence counts from now.
            last = self._last_answer.setdefault(p, now)
            if self.partitions[p].leader in alive and now - last > SHARD_SILENCE_S:
                async with self._lock:
                    a = self.partitions[p]  # re-read under the lock: reconcile may have moved it
                    if a.leader in alive and now - self._last_answer.get(p, now) > SHARD_SILENCE_S:
                        await self._failover(p, "leader shard silent", exclude_leader=len(a.isr) > 1)
