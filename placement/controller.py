"""The controller actor: a thin loop that observes the cluster, calls the pure ``placement.decide.decide``
and performs what it decides (a detached named Ray actor, ``raygroups-controller``, on the head node).

Each round: read Ray's node table (coordinator nodes by their stable names), collect the disk report of
every node incarnation that has not reported yet (its LogServer is created if missing), probe every leader
shard (and, for one that does not answer, ask Ray for the actor's state), then decide and perform under
the lock that also serialises the leaders' requests (``leader_started``, ``shrink_isr``, ``expand_isr``).

Performing a commit persists the partition's new state on the disks of its alive replicas — the leader and
every in-sync replica must take it; ``placement.commits`` decides what is tried next when some did not —
then in Ray's GCS key-value store (a cache: a restarted controller starts from it; a controller
on a restarted head, with an empty GCS, rebuilds everything from the nodes' disks). Only then is it applied
in memory, and only then are the shard actors it implies started or stopped.

Guarantees: leader epochs and partition epochs only grow; a leader is only ever chosen from the ISR
(unless unclean election is configured); a state takes effect only once the replicas that may be elected
next have it on disk. Not guaranteed: availability of a partition whose whole ISR is gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray
from raygroups.placement.commits import COMMIT_ATTEMPTS, after_persist, numbered, persist_targets
from raygroups.placement.decide import decide
from raygroups.placement.metrics import ControllerMetrics
from raygroups.placement.model import (
    STARTING,
    Commit,
    Decision,
    Event,
    MarkLayout,
    Metadata,
    NodeReport,
    Observations,
    ReplicaReport,
    Settings,
    ShardObservation,
    StartShard,
    StopShard,
    SyncStates,
)
from raygroups.placement.nodes import coordinator_nodes, scheduling_for, unlabelled_warning
from raygroups.placement.plan import PartitionAssignment
from raygroups.placement.requests import (
    Wait,
    leases_at_start,
    on_expand_isr,
    on_granted,
    on_leader_started,
    on_lease_renewed,
    on_shrink_isr,
    readiness,
)
from raygroups.placement.spare_keeper import SpareKeeper
from raygroups.placement.spares import SparesSeen, cold_spares_wanted, inheritable, standby_spares_due

log = logging.getLogger(__name__)

MONITOR_INTERVAL_S = 0.2
PROBE_STATE_CHECK_S = 0.15  # a probe not answered by then asks Ray whether the shard's process still runs
PROBE_TIMEOUT_S = 1.0  # at most; a third of shard.session.timeout.ms when that is shorter
NODES_RECHECK_S = 0.05  # while probes are unanswered, Ray's node table is read again this often
# The controller's own responsiveness: its event loop is sampled every LOOP_SAMPLE_S, and a wake-up later
# than LOOP_LAG_EVENT_S is an event (``loop-lag``): leases are renewed on this loop, so a stalled loop is
# what lets leaders' leases lapse (as Kafka's controller reports its event queue time).
LOOP_SAMPLE_S = 0.05
LOOP_LAG_EVENT_S = 0.25
NODES_WATCH_S = 0.05  # between rounds too: a node's death (or arrival) starts the next round at once
PERSIST_TIMEOUT_S = 5.0
REPORT_TIMEOUT_S = 60.0  # a LogServer Ray is still starting on a busy node may take this long
START_REPORTS_TIMEOUT_S = 30.0
STANDBY_SPARES_RECHECK_MS = 10_000  # a node's spares per followed partition are checked at least this often


def _newly_dead(nodes: dict, fresh: dict) -> bool:
    """Whether a node alive in ``nodes`` is dead (or gone) in the later read ``fresh``."""
    return any(o.alive and not (fresh.get(n) and fresh[n].alive) for n, o in nodes.items())


def _now_ms() -> int:
    """Monotonic: every time in the metadata is this process's own (a clock step is not silence)."""
    return int(time.monotonic() * 1000)


def assignment_from_dict(d: dict) -> PartitionAssignment:
    return PartitionAssignment(tuple(d["replicas"]), d["leader"], d["leader_epoch"], tuple(d["isr"]),
                               d.get("partition_epoch", 0))


def assignment_to_dict(a: PartitionAssignment) -> dict:
    return {"replicas": list(a.replicas), "leader": a.leader, "leader_epoch": a.leader_epoch,
            "isr": list(a.isr), "partition_epoch": a.partition_epoch}


def _to_json(assignments: dict[int, PartitionAssignment]) -> bytes:
    return json.dumps({str(p): assignment_to_dict(a) for p, a in assignments.items()}).encode()


def _from_json(raw: bytes) -> dict[int, PartitionAssignment]:
    return {int(p): assignment_from_dict(a) for p, a in json.loads(raw).items()}


def node_report(raw: dict, node_id: str) -> NodeReport:
    """A LogServer's ``report()`` as the decision's input."""
    replicas = {}
    for p, r in raw["replicas"].items():
        state = None if r["state"] is None else assignment_from_dict(r["state"])
        replicas[int(p)] = ReplicaReport(state, r["fenced_epoch"])
    d = raw.get("descriptor") or {}
    return NodeReport(node_id, d.get("num_partitions"), replicas, min_insync_replicas=d.get("min_insync_replicas"),
                      layout_created=bool(d.get("layout_created")), error=raw.get("descriptor_error"))


class Controller:
    def __init__(self, namespace: str, settings: Settings, actors: Any) -> None:
        """``actors`` is everything outside the controller (``raygroups.deployment.seam.ActorFactory``): it creates and
        finds the actors the controller manages, reads Ray's node table and actor states, and holds the
        GCS key-value store -- so that placement depends neither on the actor classes nor on Ray's APIs
        beyond calling actors."""
        self.namespace = namespace
        self.settings = settings
        self._actors = actors
        self._meta = Metadata(settings)
        self._obs: Observations | None = None
        self._lock: asyncio.Lock | None = None
        self._task: asyncio.Task | None = None
        self._reports: dict[str, tuple[str, asyncio.Task, float]] = {}  # node -> (incarnation, report, since)
        self._warned: set[str] = set()
        self._topics_version = 0
        self._pe_floor: dict[int, int] = {}  # per partition: the highest partition epoch sent or seen on a disk
        self.events: deque[dict] = deque(maxlen=2_000)
        self._metrics = ControllerMetrics(namespace)
        self._spares = SpareKeeper(actors)
        # Per node: what its spares per partition were last seen to (``shard.standby.per.partition``), and
        # the one task that sees to them.
        self._standby_spares: dict[str, SparesSeen] = {}
        self._standby_task: asyncio.Task | None = None
        self._cold_task: asyncio.Task | None = None  # the one task that starts cold spares a node came to want
        self._cold_seen: tuple | None = None  # (partitions, live nodes, reports) the cold spares were last seen to
        # Ray's node table read between rounds (``_watch_nodes``), on a thread of its own so that blocking
        # calls on the shared pool (spares started, actor states) never delay it.
        self._wake: asyncio.Event | None = None
        self._watch_task: asyncio.Task | None = None
        self._lag_task: asyncio.Task | None = None
        self._nodes_reader = ThreadPoolExecutor(1, thread_name_prefix="controller-nodes")
        # Shards started for a failover get threads of their own: they never queue behind the lookups and
        # spare upkeep of the shared pool (measured under chaos: up to 1.8 s of queueing before a start).
        self._starter = ThreadPoolExecutor(4, thread_name_prefix="controller-starts")
        if ray.is_initialized():  # (never start a Ray just to ask: a plain instance has no loop to start)
            try:  # run the loop from the start, not from the first call (after a restart nobody may call)
                ray.get_runtime_context().current_actor.ensure_running.remote()
            except Exception:  # noqa: BLE001 - constructed outside an actor: nothing to start
                pass

    # ------------------------------------------------------------------------------------------
    # Start
    # ------------------------------------------------------------------------------------------
    async def _ensure_running(self) -> None:
        """After a restart Ray re-runs only ``__init__``: start from the GCS cache (if the head kept it)
        and resume the loop; the nodes' disk reports then fill in or correct the rest."""
        if self._lock is not None:
            return
        self._lock = asyncio.Lock()
        # Every GCS call of the controller runs on a thread (``asyncio.to_thread``) and mostly waits: more
        # threads than asyncio's default (cores + 4), so that lookups never queue behind each other.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(32, thread_name_prefix="controller"))
        raw = self._actors.load_partitions()
        cached = {} if raw is None else _from_json(raw)
        if cached and set(cached) <= set(range(self.settings.num_partitions)):
            self._meta = dataclasses.replace(self._meta, partitions=cached, leases=leases_at_start(cached, _now_ms()))
        elif cached:
            log.warning("ignoring a cached partition table that does not fit %d partitions", self.settings.num_partitions)
        self._topics_version = self._actors.read_topics()[1]
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._watch_task = asyncio.get_running_loop().create_task(self._watch_nodes())
        self._lag_task = asyncio.get_running_loop().create_task(self._watch_loop_lag())

    async def ensure_running(self) -> None:
        await self._ensure_running()

    async def start(self) -> dict:
        """Start (idempotent) and wait until every alive coordinator node's disk has reported, so that a
        node holding another deployment's data is refused here, with the reason, rather than later."""
        await self._ensure_running()
        deadline = time.monotonic() + START_REPORTS_TIMEOUT_S
        while time.monotonic() < deadline:
            obs = self._obs
            if obs is not None and all(self._meta.reported.get(n) == o.node_id
                                       for n, o in obs.nodes.items() if o.alive):
                break
            await asyncio.sleep(MONITOR_INTERVAL_S)
        if self._meta.refused:
            reasons = "; ".join(f"node {n}: {why}" for n, why in sorted(self._meta.refused.items()))
            raise ValueError(f"refusing coordinator nodes whose data belongs to another deployment: {reasons}")
        return await self.readiness()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self._round()
            except Exception:  # noqa: BLE001 - the loop logs and carries on after any single failure
                log.exception("controller round failed")
            try:
                await asyncio.wait_for(self._wake.wait(), MONITOR_INTERVAL_S)
            except TimeoutError:
                pass

    async def _watch_nodes(self) -> None:
        """Between rounds, Ray's node table is read every ``NODES_WATCH_S`` (a GCS call of about a
        millisecond): when the set of alive nodes changes, the next round starts at once, so that a node's
        death is acted on as Ray declares it rather than after the round's pause (a round under way
        notices it in ``_probe_shards``)."""
        loop = asyncio.get_running_loop()
        alive: frozenset[str] | None = None
        while True:
            try:
                nodes = await loop.run_in_executor(self._nodes_reader, self._actors.ray_nodes)
                now = frozenset(n["NodeID"] for n in nodes if n.get("Alive"))
                if alive is not None and now != alive:
                    self._wake.set()
                alive = now
            except Exception as e:  # noqa: BLE001 - the GCS away (the head restarting): the rounds notice too
                log.debug("could not read Ray's node table: %s", e)
            await asyncio.sleep(NODES_WATCH_S)

    async def _watch_loop_lag(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(LOOP_SAMPLE_S)
            lag = time.monotonic() - before - LOOP_SAMPLE_S
            if lag > LOOP_LAG_EVENT_S:
                self._event({"event": "loop-lag", "lag_s": round(lag, 3)})

    async def _round(self) -> None:
        obs = await self._observe()
        async with self._lock:
            now_ms = _now_ms()
            before = self._meta
            decision = decide(before, obs, now_ms)
            decided = time.monotonic()
            self._meta = decision.metadata
            self._obs = obs
            failed = await self._perform(decision)
            if failed:
                # Something it decided did not take effect: keep what did (partitions, holders, marks) and
                # decide the rest again from the state of before, so that nothing seen this round (a
                # restarted node, a report) is forgotten; leases renewed meanwhile stay renewed.
                self._meta = dataclasses.replace(before, partitions=self._meta.partitions, held=self._meta.held,
                                                 marked=self._meta.marked, leases=self._meta.leases,
                                                 unclaimed=self._meta.unclaimed)
            self._metrics.refresh(self._meta.partitions, self.settings.replication_factor, self._shard_states())
        # Shards are started (a spare adopting, or a new process) after the lock: a new leader asking for
        # its epoch (``leader_started``) does not wait for the other partitions' shards to start.
        await self._start_and_stop_shards(decision, failed, decided)
        self._see_to_standby_spares(now_ms)
        self._see_to_cold_spares()

    # ------------------------------------------------------------------------------------------
    # Observe
    # ------------------------------------------------------------------------------------------
    async def _observe(self) -> Observations:
        nodes = await self._coordinator_nodes()
        for name, o in nodes.items():
            if o.alive and not o.labelled and name not in self._warned:
                self._warned.add(name)
                log.warning(unlabelled_warning(o))
        reports = asyncio.ensure_future(self._collect_reports(nodes))
        nodes, shards = await self._probe_shards(nodes)
        return Observations(nodes, shards, await reports)

    async def _coordinator_nodes(self) -> dict:
        ray_nodes = await asyncio.to_thread(self._actors.ray_nodes)
        return coordinator_nodes(ray_nodes, self._meta.incarnations, self._meta.superseded)

    async def _collect_reports(self, nodes) -> dict[str, NodeReport]:
        out: dict[str, NodeReport] = {}
        for name, o in sorted(nodes.items()):
            if not o.alive or self._meta.reported.get(name) == o.node_id:
                self._reports.pop(name, None)
                continue
            pending = self._reports.get(name)
            if pending is not None and pending[0] == o.node_id and not pending[1].done():
                if time.monotonic() - pending[2] < REPORT_TIMEOUT_S:
                    continue
                pending[1].cancel()
            elif pending is not None and pending[0] == o.node_id and pending[1].done():
                task = self._reports.pop(name)[1]
                try:
                    raw = task.result()
                    if raw.get("ray_node_id") not in (None, o.node_id):
                        raise RuntimeError(f"the report came from incarnation {raw['ray_node_id']}, not {o.node_id}")
                    out[name] = node_report(raw, o.node_id)
                    await self._reconcile_topics(name, raw)
                    await self._ensure_spare(name, o)
                    await self._ensure_listener(name, o)
                    continue
                except Exception as e:  # noqa: BLE001 - asked again below
                    log.info("disk report of node %s failed: %s", name, e)
            self._reports[name] = (o.node_id, asyncio.ensure_future(self._report(name, o)), time.monotonic())
        return out

    async def _ensure_spare(self, name: str, node) -> None:
        """Once per incarnation of a coordinator node (with its disk report): a spare shard process there,
        whether or not it leads anything yet, so that a failover onto it adopts instead of starting one."""
        self._spares.forget_cold(name)  # a new incarnation inherits nothing yet: its rounds say what it wants
        try:
            if await asyncio.to_thread(self._spares.ensure_spare, name, scheduling_for(node, name)):
                self._event({"event": "spare-started", "node": name})
        except Exception as e:  # noqa: BLE001 - the node gets one with the first shard started there
            log.info("could not start a spare on %s: %s", name, e)

    async def _ensure_listener(self, name: str, node) -> None:
        """Once per incarnation of a coordinator node: its Kafka listener, when the deployment has them."""
        try:
            if await asyncio.to_thread(self._actors.ensure_listener, name, scheduling_for(node, name)):
                self._event({"event": "listener-started", "node": name})
        except Exception as e:  # noqa: BLE001 - tried again with the node's next report
            log.info("could not start the Kafka listener on %s: %s", name, e)

    def _see_to_standby_spares(self, now_ms: int) -> None:
        """In the background (one task at a time): the nodes ``spares.standby_spares_due`` names get a spare
        per partition they follow (``SpareKeeper.ensure_standby_spares``, which does nothing without
        ``shard.standby.per.partition``)."""
        if self._obs is None or (self._standby_task is not None and not self._standby_task.done()):
            return
        # What each node followed once this round's failovers were performed, fixed now: read later, a
        # failover decided in the next round but not yet performed could make the spare it is about to adopt
        # look unwanted.
        due = standby_spares_due(self._meta, self._obs, self._standby_spares, now_ms, STANDBY_SPARES_RECHECK_MS)
        todo = {name: (incarnation, followed, scheduling_for(self._obs.nodes[name], name))
                for name, (incarnation, followed) in due.items()}
        if todo:
            self._standby_task = asyncio.get_running_loop().create_task(self._ensure_standby_spares(todo))

    def _see_to_cold_spares(self) -> None:
        """In the background (one task at a time): a node that would now inherit more partitions from one
        lost node than its spares cover (``spares.cold_spares_wanted``) gets the cold spares it lacks, before
        that loss rather than at it."""
        if self._obs is None or self._spares.per_partition or \
                (self._cold_task is not None and not self._cold_task.done()):
            return
        nodes = self._obs.nodes
        live = frozenset(n for n, o in nodes.items() if o.alive and n not in self._meta.refused)
        seen = (self._meta.partitions, live, self._meta.reported)
        if seen == self._cold_seen:
            return  # nothing it depends on changed since the last round
        self._cold_seen = seen
        todo, configured, most = {}, self._actors.cold_spares, self._actors.cold_spares_max
        for name, inherit in sorted(inheritable(self._meta.partitions, live).items()):
            if self._meta.reported.get(name) != nodes[name].node_id:
                continue  # its spares come with its disk report (``_ensure_spare``)
            if self._spares.want_cold(name, cold_spares_wanted(configured, inherit, False, most)):
                todo[name] = scheduling_for(nodes[name], name)
        if todo:
            self._cold_task = asyncio.get_running_loop().create_task(self._ensure_cold_spares(todo))

    async def _ensure_cold_spares(self, todo: dict) -> None:
        for name, scheduling in sorted(todo.items()):
            try:
                if await asyncio.to_thread(self._spares.ensure_spare, name, scheduling):
                    self._event({"event": "spare-started", "node": name, "cold_wanted": self._spares.cold_wanted(name)})
            except Exception as e:  # noqa: BLE001 - wanted again from the next change of leadership
                self._spares.forget_cold(name)
                self._cold_seen = None
                log.info("could not start cold spares on %s: %s", name, e)

    async def _ensure_standby_spares(self, todo: dict) -> None:
        for name, (incarnation, followed, scheduling) in sorted(todo.items()):
            try:
                started, stopped = await asyncio.to_thread(self._spares.ensure_standby_spares, name, followed,
                                                           scheduling)
            except Exception as e:  # noqa: BLE001 - tried again next round
                log.info("could not see to the spares per partition on %s: %s", name, e)
                continue
            self._standby_spares[name] = SparesSeen(incarnation, followed, _now_ms())
            if started or stopped:
                self._event({"event": "standby-spares", "node": name, "started": started, "stopped": stopped})

    async def _report(self, name: str, node) -> dict:
        handle = await asyncio.to_thread(self._actors.ensure_log_server, name, scheduling_for(node, name))
        return await handle.report.remote()

    async def _probe_shards(self, nodes: dict) -> tuple[dict, dict[int, ShardObservation]]:
        """Every leader shard probed, and the node table this round decides on. A probe of a shard whose node
        is gone hangs until its timeout, and the node's death must not wait for it: while probes are out
        the node table is read again, and once a node alive at the start of the round is dead the round goes
        on with that table, the probes still out counted as unanswered (as a timed-out probe is), so the
        failover is decided as soon as Ray declares the death."""
        leaders = [p for p, a in self._meta.partitions.items() if a.leader is not None]
        probes = {p: asyncio.ensure_future(self._probe(p)) for p in leaders}
        pending = set(probes.values())
        died = False
        while pending:
            _, pending = await asyncio.wait(pending, timeout=NODES_RECHECK_S)
            if pending:
                fresh = await self._coordinator_nodes()
                if _newly_dead(nodes, fresh):
                    nodes, died = fresh, True
                    break
        shards: dict[int, ShardObservation] = {}
        for p, probe in probes.items():
            if probe.done():
                shards[p] = probe.result()
            else:
                probe.cancel()
                shards[p] = await self._unanswered(p)
        await self._where_starting_shards_ran(nodes, shards)
        if not died and any(o.actor_state == "RESTARTING" for o in shards.values()):
            # Ray marks a node dead before it moves the node's actors to RESTARTING: a shard seen restarting
            # after the table was last read may have gone with its node, which a read now shows. Decided on
            # the older table, it would look like a process dead on a live node, whose node stays in the ISR
            # (``decide``), and the failover's commit would wait for that node's disk.
            fresh = await self._coordinator_nodes()
            if _newly_dead(nodes, fresh):
                nodes = fresh
        return nodes, shards

    async def _where_starting_shards_ran(self, nodes: dict, shards: dict[int, ShardObservation]) -> None:
        """A shard actor Ray is restarting, seen with the coordinator node it last ran on (by name): a
        controller that started after its predecessor committed a failover but before it moved the shard
        finds the partition's name still held by the old leader's actor, which Ray restarts only when that
        node is back (``decide`` starts the shard on the new leader then, rather than waiting for it as for
        a shard queued for a process)."""
        by_id = {o.node_id: name for name, o in nodes.items()}
        for p, o in list(shards.items()):
            if o.actor_state == "RESTARTING" and o.node is None and o.actor_id is not None:
                node_id = await asyncio.to_thread(self._actors.actor_node_id, o.actor_id)
                if node_id in by_id:
                    shards[p] = dataclasses.replace(o, node=by_id[node_id])

    async def _probe(self, partition: int) -> ShardObservation:
        try:
            # Looked up on a thread, as every GCS call of the controller: its loop answers the leaders' lease
            # renewals, which must not wait behind a busy GCS.
            handle = await asyncio.to_thread(self._actors.shard, partition)
        except ValueError:
            return ShardObservation(None)
        actor_id = self._actors.actor_id(handle)
        timeout_s = min(PROBE_TIMEOUT_S, self.settings.shard_silence_ms / 3000)
        probe = asyncio.ensure_future(handle.probe.remote())
        probe.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved, even when given up on
        try:
            done, _ = await asyncio.wait({probe}, timeout=PROBE_STATE_CHECK_S)
            if not done:
                # Ray holds calls to an actor it is restarting until it runs again: a probe not answered at
                # once asks Ray's actor table, so that a shard whose process died is seen now, not after the
                # probe's timeout.
                state = await asyncio.to_thread(self._actors.actor_state, actor_id)
                if state in STARTING or state == "DEAD":  # (unknown: the GCS away, say, proves nothing)
                    probe.cancel()
                    return ShardObservation(state, actor_id)
            answer = await asyncio.wait_for(probe, max(0.0, timeout_s - PROBE_STATE_CHECK_S))
            return ShardObservation("ALIVE", actor_id, answer["state"], answer["node"], answer.get("pid"))
        except (TimeoutError, ray.exceptions.RayError):
            probe.cancel()
            state = await asyncio.to_thread(self._actors.actor_state, actor_id)
            return ShardObservation(state, actor_id)

    async def _unanswered(self, partition: int) -> ShardObservation:
        """A shard whose probe was given up on: Ray's state of the actor under its name, no answer."""
        try:
            actor_id = self._actors.actor_id(await asyncio.to_thread(self._actors.shard, partition))
        except ValueError:
            return ShardObservation(None)
        return ShardObservation(await asyncio.to_thread(self._actors.actor_state, actor_id), actor_id)

    async def _reconcile_topics(self, node: str, report: dict) -> None:
        """Registered topics live on every coordinator node's disk: after a full restart the newest copy
        comes back (before any shard starts, since shards start only after reports); a node with an older
        copy is brought up to date."""
        topics, version = report.get("topics") or {}, report.get("topics_version", 0)
        if version > self._topics_version:
            self._topics_version = version
            await asyncio.to_thread(self._actors.write_topics, topics, version)
            self._event({"event": "topics-recovered", "node": node, "version": version, "topics": len(topics)})
        elif version < self._topics_version:
            current, _ = await asyncio.to_thread(self._actors.read_topics)
            handle = await asyncio.to_thread(self._actors.log_server, node)
            await handle.update_topics.remote(current, self._topics_version)

    # ------------------------------------------------------------------------------------------
    # Perform
    # ------------------------------------------------------------------------------------------
    async def _perform(self, decision: Decision) -> set[int]:
        """Perform the decision's commits and disk updates; the partitions whose commit did not take effect."""
        commits = decision.of(Commit)
        for event in decision.of(Event):
            self._event(event.as_dict())
        results = await asyncio.gather(*(self._commit(c) for c in commits))
        failed = {c.partition for c, ok in zip(commits, results, strict=True) if not ok}
        for mark in decision.of(MarkLayout):
            await self._mark_layout(mark.nodes)
        for sync in decision.of(SyncStates):
            for p in sync.partitions:
                if p in self._meta.partitions:
                    await self._persist(p, self._meta.partitions[p], [sync.node])
        return failed

    async def _start_and_stop_shards(self, decision: Decision, failed: set[int], decided: float) -> None:
        """The decision's shard starts and stops, but none of a partition whose commit failed. The starts of
        several partitions (a lost node's) run at once: each waits for its own only."""
        starts = []
        for action in decision.actions:
            if isinstance(action, StartShard) and action.partition not in failed:
                starts.append(self._start_shard(action, decided))
            elif isinstance(action, StopShard) and action.partition not in failed:
                self._actors.kill_shard(action.partition)
                self._event({"event": "shard-stopped", "partition": action.partition, "reason": action.reason})
        await asyncio.gather(*starts)

    async def _mark_layout(self, nodes: tuple[str, ...]) -> None:
        async def one(node: str) -> str | None:
            try:
                handle = await asyncio.to_thread(self._actors.log_server, node)
                ok = await asyncio.wait_for(handle.mark_layout.remote(), PERSIST_TIMEOUT_S)
                return node if ok else None
            except (TimeoutError, ray.exceptions.RayError, ValueError):
                return None

        done = {n for n in await asyncio.gather(*(one(n) for n in nodes)) if n is not None}
        self._meta = dataclasses.replace(self._meta, marked=self._meta.marked | done)

    async def _commit(self, c: Commit) -> bool:
        """Persist ``c`` on the replicas' disks (the leader and every alive in-sync replica must take it),
        then in the GCS cache, then apply it. False (nothing applied) if that is impossible now."""
        a = c.assignment
        p = c.partition
        current = self._meta.partitions.get(p)
        if current is not None and current.partition_epoch >= a.partition_epoch:
            return False  # a leader's request committed a newer state meanwhile: decide again
        if self._obs is None:
            return False  # not looked at the cluster yet: no idea which replicas must take it
        alive = self._alive()
        for _attempt in range(COMMIT_ATTEMPTS):
            # Never reuse a partition epoch: one a failed commit left on some disk names another state.
            a = numbered(a, self._pe_floor.get(p, -1))
            self._pe_floor[p] = a.partition_epoch
            targets, required = persist_targets(c, a, alive)
            persisted, stale = await self._persist(p, a, sorted(targets), required)
            outcome = after_persist(a, required, persisted, stale)
            if outcome.done or outcome.retry is None:
                break
            if outcome.floor is not None:
                self._pe_floor[p] = max(self._pe_floor[p], outcome.floor)
            a = outcome.retry
        if not outcome.done:
            self._event({"event": "commit-failed", "partition": p, "reason": c.reason,
                         "unreachable": sorted(outcome.missing)})
            return False
        self._meta = self._meta.with_partition(p, a, c.holders & persisted, c.elected)
        await self._save()
        self._metrics.on_commit(p, current, a)
        self._metrics.refresh(self._meta.partitions, self.settings.replication_factor, self._shard_states())
        return True

    async def _persist(self, partition: int, a: PartitionAssignment, nodes: list[str],
                       required: set[str] | None = None) -> tuple[set[str], dict[str, int]]:
        """Push ``a`` to the LogServers of ``nodes``: the nodes that persisted it, and those that refused it as
        stale with the partition epoch they hold. With ``required``, wait only for those nodes' answers (and
        take whatever the others answered by then): a dead node that Ray has not declared dead yet must not
        hold every partition's ISR change for the persist timeout, under the lock that serializes them
        (Kafka's controller, likewise, does not wait for the replicas an ISR change leaves out)."""
        state = assignment_to_dict(a)

        async def one(node: str) -> dict:
            try:
                handle = await asyncio.to_thread(self._actors.log_server, node)
                return await asyncio.wait_for(handle.update_partition.remote(partition, state), PERSIST_TIMEOUT_S)
            except (TimeoutError, ray.exceptions.RayError, ValueError) as e:
                log.info("partition %d: could not persist its state on %s: %s", partition, node, e)
                return {"ok": False}

        tasks = {n: asyncio.ensure_future(one(n)) for n in nodes}
        wait_for = [t for n, t in tasks.items() if required is None or n in required] or list(tasks.values())
        if wait_for:
            await asyncio.wait(wait_for)
        results = {n: t.result() for n, t in tasks.items() if t.done()}
        stale = {n: r["partition_epoch"] for n, r in results.items() if r.get("reason") == "stale"}
        return {n for n, r in results.items() if r.get("ok")}, stale

    async def _save(self) -> None:
        try:
            await asyncio.to_thread(self._actors.store_partitions, _to_json(dict(self._meta.partitions)))
        except Exception as e:  # noqa: BLE001 - the disks hold the state; the cache catches up next commit
            log.warning("could not cache the partition metadata in the GCS: %s", e)

    async def _start_shard(self, action: StartShard, decided: float) -> None:
        node = self._obs.nodes.get(action.node) if self._obs else None
        try:
            asked = time.monotonic()
            await asyncio.get_running_loop().run_in_executor(
                self._starter, self._spares.replace_shard, action.partition, action.node,
                scheduling_for(node, action.node))
            # How long from the decision: its commit (and the other partitions' starts before this one),
            # then this replacement, step by step.
            took = {"before_s": round(asked - decided, 3), **self._spares.took.get(action.partition, {}),
                    "in_all_s": round(time.monotonic() - decided, 3)}
            self._event({"event": "shard-started", "partition": action.partition, "node": action.node,
                         "reason": action.reason, "took": took})
            await asyncio.get_running_loop().run_in_executor(self._starter, self._spares.replenish, action.node,
                                                             scheduling_for(node, action.node))
        except Exception as e:  # noqa: BLE001 - the next round sees no shard and starts it again
            log.warning("could not start the shard of partition %d on %s: %s", action.partition, action.node, e)

    def _shard_states(self) -> dict[int, str]:
        """Each leader shard's state as last probed, for the offline gauge (``placement.metrics.is_offline``):
        its answer; ``INITIAL`` while Ray starts it (or before a first probe); ``DEAD`` or ``UNANSWERED``."""
        shards = self._obs.shards if self._obs is not None else {}
        out = {}
        for p in self._meta.partitions:
            o = shards.get(p)
            if o is None or o.actor_state in STARTING:
                out[p] = "INITIAL"
            elif o.answer is not None:
                out[p] = o.answer
            else:
                out[p] = "UNANSWERED" if o.actor_state == "ALIVE" else "DEAD"
        return out

    def _alive(self) -> set[str]:
        if self._obs is None:
            return set()
        return self._obs.alive() - set(self._meta.refused)

    def _event(self, event: dict) -> None:
        event = {"t": time.time(), **event}  # wall time, for people reading the timeline
        self.events.append(event)
        log.info("controller %s", event)

    # ------------------------------------------------------------------------------------------
    # Requests from leaders (epoch-checked)
    # ------------------------------------------------------------------------------------------
    async def leader_started(self, partition: int, node: str, ray_node_id: str | None = None,
                             actor_id: str | None = None) -> dict | None:
        """A shard actor on ``node`` (Ray node ``ray_node_id``; Ray actor ``actor_id``) is about to serve
        ``partition``: give it the epoch the round that elected it chose (already persisted and fenced on the
        replicas), or, if a shard had that one, a fresh epoch above every earlier incarnation's, persisted
        and fenced first; with the replicas and the ISR (``requests.on_leader_started`` decides). None if ``node`` does not lead the partition, or if the
        calling actor is no longer the partition's shard (replaced while its call was in flight: the new
        shard gets the epoch, never the old one); ``{"wait": reason}`` while this controller has not yet
        checked that incarnation of the node and its disk, or while the previous leader's lease runs (then
        with ``retry_in_s``, how much of it is left)."""
        await self._ensure_running()
        async with self._lock:
            now_ms = _now_ms()  # after the shard asked: the lease recorded ends no earlier than its own
            if self._obs is None:
                return {"wait": "the controller has not looked at the cluster yet"}
            if actor_id is not None and await asyncio.to_thread(self._current_shard_id, partition) != actor_id:
                return None
            answer = on_leader_started(self._meta, partition, node, ray_node_id, now_ms)
            if answer is None:
                return None
            if isinstance(answer, Wait):
                if answer.retry_in_ms is None:
                    return {"wait": answer.reason}
                return {"wait": answer.reason, "retry_in_s": answer.retry_in_ms / 1000}
            if answer.persist:
                await self._commit_or_raise(Commit(partition, answer.assignment, self._meta.partitions[partition],
                                                   "leader started"))
            self._meta = on_granted(self._meta, partition, node, now_ms)
            a = self._meta.partitions[partition]
            return {"leader_epoch": a.leader_epoch, "replicas": list(a.replicas), "isr": list(a.isr)}

    def _current_shard_id(self, partition: int) -> str | None:
        """The Ray actor id of the shard actor registered under the partition's name now (None: none)."""
        try:
            return self._actors.actor_id(self._actors.shard(partition))
        except ValueError:
            return None

    async def _commit_or_raise(self, c: Commit) -> None:
        """A leader's request: a state that cannot be persisted now is an error the leader retries, not a
        refusal (False means deposed)."""
        if self._obs is None or not await self._commit(c):
            raise RuntimeError(f"could not persist the state of partition {c.partition} ({c.reason}) on its "
                               f"leader and in-sync replicas; try again")

    async def shrink_isr(self, partition: int, leader_epoch: int, node: str) -> bool:
        """The leader of ``leader_epoch`` drops ``node`` from the ISR: True once persisted, False if that
        epoch no longer leads (deposed); raises if it cannot be persisted now."""
        await self._ensure_running()
        async with self._lock:
            ok, new = on_shrink_isr(self._meta, partition, leader_epoch, node)
            if new is not None:
                await self._commit_or_raise(Commit(partition, new, self._meta.partitions[partition], f"{node} lagging"))
                self._event({"event": "isr-shrink", "partition": partition, "nodes": [node]})
            return ok

    async def expand_isr(self, partition: int, leader_epoch: int, node: str) -> bool:
        """The leader of ``leader_epoch`` caught ``node`` up: True once it is in the persisted ISR, False if
        that epoch no longer leads (deposed); raises if it cannot be persisted now."""
        await self._ensure_running()
        async with self._lock:
            ok, new = on_expand_isr(self._meta, partition, leader_epoch, node)
            if new is not None:
                # Caught up by the leader: from now on this node's disk holds the partition.
                await self._commit_or_raise(Commit(partition, new, self._meta.partitions[partition], f"{node} caught up",
                                                   frozenset({node})))
                self._event({"event": "isr-expand", "partition": partition, "node": node})
            return ok

    async def register_topics(self, topics: dict[str, int]) -> dict[str, int]:
        """Add (or grow) registered topics: persisted on every alive coordinator node, then in the GCS,
        before this returns the whole registry. Partition counts never shrink."""
        await self._ensure_running()
        async with self._lock:
            current, _ = await asyncio.to_thread(self._actors.read_topics)
            merged = {**current, **{t: max(n, current.get(t, 0)) for t, n in topics.items()}}
            version = self._topics_version + 1
            nodes = sorted(self._alive())

            async def one(node: str) -> bool:
                try:
                    r = await asyncio.wait_for(self._actors.log_server(node).update_topics.remote(merged, version),
                                               PERSIST_TIMEOUT_S)
                    return bool(r.get("ok"))
                except (TimeoutError, ray.exceptions.RayError, ValueError):
                    return False

            results = await asyncio.gather(*(one(n) for n in nodes))
            failed = [n for n, ok in zip(nodes, results, strict=True) if not ok]
            if failed or not nodes:
                raise RuntimeError(f"could not record the topics on coordinator nodes {failed or '(none alive)'}; "
                                   f"nothing was registered")
            self._topics_version = version
            await asyncio.to_thread(self._actors.write_topics, merged, version)
            return merged

    # ------------------------------------------------------------------------------------------
    # Reads
    # ------------------------------------------------------------------------------------------
    async def metadata(self) -> dict:
        await self._ensure_running()
        return {p: assignment_to_dict(a) for p, a in self._meta.partitions.items()}

    async def partition_state(self, partition: int, leader_epoch: int | None = None,
                              node: str | None = None) -> dict | None:
        """The partition's state. A leader renewing its lease names its epoch and node: an answer that
        confirms it is remembered, so that no leader on another node gets an epoch before that lease ran
        out (``leader_started``)."""
        await self._ensure_running()
        self._meta = on_lease_renewed(self._meta, partition, leader_epoch, node, _now_ms())
        a = self._meta.partitions.get(partition)
        return None if a is None else assignment_to_dict(a)

    async def nodes(self) -> dict[str, dict]:
        """Every coordinator node this deployment knows, by name: alive or not, its Ray node id, the
        incarnation (Ray node id) the decisions have taken in, and why it is refused if it is."""
        await self._ensure_running()
        obs = self._obs
        names = set(self._meta.incarnations) | {n for a in self._meta.partitions.values() for n in a.replicas}
        out = {}
        for name in sorted(names | (set(obs.nodes) if obs else set())):
            o = obs.nodes.get(name) if obs else None
            out[name] = {"alive": bool(o and o.alive), "node_id": o.node_id if o else None,
                         "incarnation": self._meta.incarnations.get(name),
                         "labelled": o.labelled if o else True, "refused": self._meta.refused.get(name)}
        return out

    async def readiness(self) -> dict:
        await self._ensure_running()
        return readiness(self._meta, self._obs)

    async def recent_events(self) -> list[dict]:
        return list(self.events)
