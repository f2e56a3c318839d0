"""A Ray-free world for the controller's pure decisions: nodes that die, restart, lose their disks and
pause, LogServers that do not answer, shard actors that take their time to start, disks that keep
partition states. ``World.step`` observes the world as the controller actor does, calls
``placement.decide.decide`` and performs its actions as the actor does (commit = persist on the alive
replicas' disks -- the leader and every in-sync replica must take it, an unreachable follower leaves the
ISR, a disk holding a newer partition epoch makes the state renumbered above it -- then the cache; a failed
commit keeps the soft state of before the round; start shard = replace the actor holding the shard's
name). The decisions under test are the real ones; only Ray and the disks are played by this file."""

from __future__ import annotations

from dataclasses import dataclass, replace

from raygroups.placement.commits import COMMIT_ATTEMPTS, after_persist, numbered, persist_targets
from raygroups.placement.decide import decide
from raygroups.placement.model import (
    Commit,
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
    bump,
)
from raygroups.placement.nodes import NodeObservation
from raygroups.placement.requests import Wait, on_expand_isr, on_granted, on_leader_started, on_shrink_isr

NODES = ("node-0", "node-1", "node-2")


@dataclass
class FakeShard:
    partition: int
    node: str
    actor_id: str
    alive_at_ms: int  # Ray has started its process from then on
    incarnation: str  # the node incarnation it runs on
    epoch: int | None = None  # granted by leader_started; None until then
    state: str = "INITIAL"
    killed: bool = False
    process: int = 1  # its process' pid, as the probe reports it: Ray's restarts in place change it


@dataclass
class Disk:
    replicas: dict  # partition -> ReplicaReport
    num_partitions: int | None = None
    layout_created: bool = False


class World:
    def __init__(self, nodes=NODES, num_partitions=4, rf=3, min_isr=2, start_delay_ms=500, **settings) -> None:
        self.settings = Settings(num_partitions, rf, min_isr, **settings)
        self.meta = Metadata(self.settings)
        self.now = 0
        self.node_ids: dict[str, str] = {}
        self.alive: dict[str, bool] = {}
        self.paused: set[str] = set()  # nodes whose shard processes are stopped (SIGSTOP)
        self.unreachable: set[str] = set()  # nodes whose LogServer does not answer at all
        self.refuse_writes: set[str] = set()  # nodes whose LogServer answers reports but persists nothing
        self.disks: dict[str, Disk] = {}
        self.gcs: dict = {}
        self.shards: dict[int, FakeShard] = {}
        self.start_delay_ms = start_delay_ms
        self.events: list[dict] = []
        self.starts: list[tuple[int, str]] = []
        self.pe_floor: dict[int, int] = {}
        self.persists: list[tuple[int, object]] = []  # every state a commit sent to the disks, in order
        self.recorded_min_isr: int | None = None  # what the disks' descriptors say, if not the setting
        self._ids = 0
        for n in nodes:
            self.boot(n)

    # --- the environment -------------------------------------------------------------------------
    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids}"

    def boot(self, name: str) -> None:
        """A node (re)starts under ``name``: a new Ray node id, the same disk."""
        self.node_ids[name] = self._next_id(f"{name}#")
        self.alive[name] = True
        self.disks.setdefault(name, Disk({}))

    def kill(self, name: str) -> None:
        self.alive[name] = False

    def wipe(self, name: str) -> None:
        """The node's disk is replaced by an empty one (same name)."""
        self.disks[name] = Disk({})

    def observe(self) -> Observations:
        nodes = {n: NodeObservation(n, self.node_ids[n], self.alive[n], True) for n in self.node_ids}
        reports = {}
        for n in nodes:
            if self.alive[n] and n not in self.unreachable and self.meta.reported.get(n) != self.node_ids[n]:
                d = self.disks[n]
                if d.num_partitions is None:
                    d.num_partitions = self.settings.num_partitions
                reports[n] = NodeReport(self.node_ids[n], d.num_partitions, dict(d.replicas),
                                        min_insync_replicas=self.recorded_min_isr or self.settings.min_insync_replicas,
                                        layout_created=d.layout_created)
        shards = {p: self._observe_shard(p) for p, a in self.meta.partitions.items() if a.leader is not None}
        return Observations(nodes, shards, reports)

    def _observe_shard(self, p: int) -> ShardObservation:
        s = self.shards.get(p)
        if s is None or s.killed:
            return ShardObservation(None)
        if not self.alive[s.node] or self.node_ids[s.node] != s.incarnation:
            # Ray waits for a node with its label; the controller reads the node it last ran on
            return ShardObservation("RESTARTING", s.actor_id, node=s.node)
        if self.now < s.alive_at_ms:
            return ShardObservation("PENDING_CREATION", s.actor_id)
        if s.node in self.paused:
            return ShardObservation("ALIVE", s.actor_id)
        answer = s.state
        if s.state == "INITIAL":  # the process is up: it asks for its epoch (maybe told to wait), then loads
            granted = self.leader_started(p, s.node, s.incarnation)
            if granted is None:
                s.state = "FAILED"
            elif granted != "wait":
                s.epoch, s.state = granted, "LOADING"
        elif s.state == "LOADING":
            s.state = "ACTIVE"
        return ShardObservation("ALIVE", s.actor_id, answer, s.node, s.process)

    # --- the controller's side ---------------------------------------------------------------------
    def step(self, advance_ms: int = 200):
        self.now += advance_ms
        observations = self.observe()  # first: shards answering may have committed their epochs
        before = self.meta
        decision = decide(before, observations, self.now)
        self.meta = decision.metadata
        failed = set()
        for action in decision.actions:
            if isinstance(action, Event):
                self.events.append({"t": self.now, **action.as_dict()})
            elif isinstance(action, Commit) and not self.commit(action.partition, action.assignment,
                                                                 action.previous, action.holders, action.elected):
                failed.add(action.partition)
            elif isinstance(action, SyncStates):
                for p in action.partitions:
                    self.persist(action.node, p, self.meta.partitions[p])
            elif isinstance(action, MarkLayout):
                done = {n for n in action.nodes if self.alive[n] and n not in self.unreachable}
                for n in done:
                    self.disks[n].layout_created = True
                self.meta = replace(self.meta, marked=self.meta.marked | done)
        for action in decision.actions:
            if isinstance(action, StartShard) and action.partition not in failed:
                self.start_shard(action.partition, action.node)
            elif isinstance(action, StopShard) and action.partition not in failed:
                self.shards.pop(action.partition, None)
        if failed:  # as the controller: keep what took effect, decide the rest again
            self.meta = replace(before, partitions=self.meta.partitions, held=self.meta.held, marked=self.meta.marked,
                                leases=self.meta.leases, unclaimed=self.meta.unclaimed)
        return decision

    def run(self, ms: int, advance_ms: int = 200) -> None:
        for _ in range(ms // advance_ms):
            self.step(advance_ms)

    def run_until(self, condition, limit_ms: int = 120_000, advance_ms: int = 200) -> None:
        waited = 0
        while not condition():
            assert waited < limit_ms, f"not reached in {limit_ms} ms: {self.meta.partitions} {self.events[-5:]}"
            self.step(advance_ms)
            waited += advance_ms

    def persist(self, n: str, p: int, a) -> str:
        """One LogServer's update_partition: 'ok', 'stale' (it holds a newer or another state under that
        partition epoch) or 'down'."""
        if not self.alive[n] or n in self.unreachable or n in self.refuse_writes:
            return "down"
        d = self.disks[n]
        old = d.replicas.get(p, ReplicaReport(None))
        if old.state is not None and (old.state.partition_epoch > a.partition_epoch or
                                      (old.state.partition_epoch == a.partition_epoch and old.state != a)):
            return "stale"
        if n in a.replicas or old.state is not None:
            d.replicas[p] = ReplicaReport(a, max(old.fenced_epoch, a.leader_epoch))
        return "ok"

    def commit(self, p, a, previous, holders=frozenset(), elected=False) -> bool:
        current = self.meta.partitions.get(p)
        if current is not None and current.partition_epoch >= a.partition_epoch:
            return False
        c = Commit(p, a, previous, "", holders, elected)
        for _ in range(COMMIT_ATTEMPTS):
            a = numbered(a, self.pe_floor.get(p, -1))
            self.pe_floor[p] = a.partition_epoch
            targets, required = persist_targets(c, a, self.up())
            self.persists.append((p, a))
            results = {n: self.persist(n, p, a) for n in targets}
            persisted = {n for n, r in results.items() if r == "ok"}
            stale = {n: self.disks[n].replicas[p].state.partition_epoch for n, r in results.items() if r == "stale"}
            outcome = after_persist(a, required, persisted, stale)
            if outcome.done or outcome.retry is None:
                break
            if outcome.floor is not None:
                self.pe_floor[p] = max(self.pe_floor[p], outcome.floor)
            a = outcome.retry
        if not outcome.done:
            return False
        self.meta = self.meta.with_partition(p, a, holders & persisted, elected)
        self.gcs[p] = a
        return True

    def up(self) -> set[str]:
        return {n for n, ok in self.alive.items() if ok}

    def start_shard(self, p: int, node: str) -> None:
        old = self.shards.get(p)
        if old is not None:
            old.killed = True
        self.starts.append((p, node))
        self.shards[p] = FakeShard(p, node, self._next_id("actor-"), self.now + self.start_delay_ms,
                                   self.node_ids[node])

    def leader_started(self, p: int, node: str, incarnation: str | None = None):
        """The epoch granted, "wait", or None (not the leader: the shard steps down)."""
        answer = on_leader_started(self.meta, p, node, incarnation, self.now)
        if isinstance(answer, Wait):
            return "wait"
        if answer is None or (answer.persist and not self.commit(p, answer.assignment, self.meta.partitions[p])):
            return None
        self.meta = on_granted(self.meta, p, node, self.now)
        return self.meta.partitions[p].leader_epoch

    def shrink(self, p: int, node: str) -> bool:
        ok, new = on_shrink_isr(self.meta, p, self.meta.partitions[p].leader_epoch, node)
        return ok and (new is None or self.commit(p, new, self.meta.partitions[p]))

    def expand(self, p: int, node: str) -> bool:
        ok, new = on_expand_isr(self.meta, p, self.meta.partitions[p].leader_epoch, node)
        return ok and (new is None or self.commit(p, new, self.meta.partitions[p], frozenset({node})))

    def restart_controller(self, keep_gcs: bool = True) -> None:
        """A new controller: empty memory, the GCS cache if it survived."""
        self.meta = Metadata(self.settings, partitions=dict(self.gcs) if keep_gcs else {})
        if not keep_gcs:
            self.gcs = {}

    def full_restart(self, nodes) -> None:
        """Every process stops (head included: GCS gone); ``nodes`` boot again with their disks."""
        self.shards = {}
        for n in list(self.alive):
            self.alive[n] = False
        self.restart_controller(keep_gcs=False)
        for n in nodes:
            self.boot(n)

    # --- what tests look at --------------------------------------------------------------------
    def state(self, p: int):
        return self.meta.partitions.get(p)

    def serving(self) -> bool:
        """Every partition led, its shard alive on the leader with the leader's epoch and ACTIVE."""
        if len(self.meta.partitions) < self.settings.num_partitions:
            return False
        for p, a in self.meta.partitions.items():
            s = self.shards.get(p)
            if a.leader is None or s is None or s.killed or s.node != a.leader or s.epoch != a.leader_epoch \
                    or s.state != "ACTIVE" or not self.alive[s.node] or self.node_ids[s.node] != s.incarnation:
                return False
        return True

    def catch_up(self, p: int) -> None:
        """What the leader's maintenance does: every alive replica out of the ISR rejoins it (no leader, no
        catch-up)."""
        a = self.meta.partitions[p]
        if a.leader is None:
            return
        for n in a.replicas:
            if n not in a.isr and self.alive.get(n):
                assert self.expand(p, n)

    def holds(self, node: str, p: int) -> bool:
        return self.disks[node].replicas.get(p, ReplicaReport(None)).state is not None


__all__ = ["NODES", "World", "bump"]
