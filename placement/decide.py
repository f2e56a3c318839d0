"""The controller's decisions as a pure function: ``decide(metadata, observations, now_ms) -> Decision``.

The controller actor observes (Ray's node table, one probe per leader shard, each node's disk report),
calls :func:`decide` and performs what it returns; the time is an argument, so every failover case is a
unit test. Durable state is ``Metadata.partitions`` (replicas, leader, leader epoch, ISR, partition epoch):
:func:`decide` returns a :class:`Commit` per changed partition, which takes effect only once persisted on
the leader's and the in-sync replicas' disks; a commit that cannot be persisted is dropped and the next
round decides again. Everything else in :class:`Metadata` is soft and returned updated.

A round, in order:

1. **Nodes**: known by stable name; a new Ray node id under a known name is a restart. A node whose disk
   belongs to another deployment shape is refused.
2. **Disks**: a partition state newer than the cache is adopted (the disk is the source of truth); a
   partition the cache lacks is recovered once ``RF - min.insync.replicas + 1`` replicas of its newest
   replica set have reported (such a set meets every ISR that acknowledged a write), with a leader epoch
   above every reported fence.
3. **Creation**: only when no disk holds any state, every alive node has reported and at least the
   replication factor of them are alive (as Kafka creates ``__consumer_offsets``).
4. **Failures**: a leader on a dead or restarted node fails over to the first live in-sync replica whose
   disk reported the partition, epoch + 1; none: offline, keeping the last ISR. Dead and restarted
   followers leave the ISR (KIP-903) until caught up. Unclean election only if configured. An elected
   leader's epoch is fenced by this round's commit, and the shard started for it confirms that epoch
   (``requests.on_leader_started``), so a failover persists once.
5. **Shards**: a shard runs only on its leader's node; one that is starting or loading is not silent. A
   shard silent for ``shard_silence_ms``, stepped down, or not started in time is failed over (or
   restarted in place when no other in-sync replica exists). "In time": ``shard_start_timeout_ms`` from
   when its process runs, and ``QUEUED_START_FACTOR`` times that while it waits for Ray to start the process;
   but a shard actor that Ray restarts on another node than the leader's (a failover committed by a
   controller that died before moving the shard) is replaced on the leader's node at once.
6. **Placement**: replica sets are re-planned when the placement nodes change (alive nodes, plus dead ones
   within ``node_replacement_delay_ms``).
7. **Leader balance**: Kafka's preferred-leader election at its 10 % imbalance trigger, only when every
   leader shard answered ACTIVE and not within ``leader_balance_interval_ms`` of a leadership change.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from raygroups.placement.model import (
    HEALTHY,
    QUEUED_START_FACTOR,
    STARTING,
    Action,
    Commit,
    Decision,
    Event,
    MarkLayout,
    Metadata,
    Observations,
    ReplicaReport,
    ShardObservation,
    ShardTrack,
    StartShard,
    StopShard,
    SyncStates,
    bump,
)
from raygroups.placement.plan import PartitionAssignment, elect_leader, needs_leader_rebalance, plan

# --------------------------------------------------------------------------- the round


class _Round:
    """One call of :func:`decide`: working copies of the metadata, changed in place, then returned."""

    def __init__(self, meta: Metadata, obs: Observations, now_ms: int) -> None:
        self.meta = meta
        self.s = meta.settings
        self.obs = obs
        self.now = now_ms
        self.parts: dict[int, PartitionAssignment] = dict(meta.partitions)
        self.reasons: dict[int, str] = {}
        self.incarnations = dict(meta.incarnations)
        self.dead_since = dict(meta.dead_since_ms)
        self.reported = dict(meta.reported)
        self.held = dict(meta.held)
        self.refused = dict(meta.refused)
        self.superseded = set(meta.superseded)
        self.marked = set(meta.marked)
        self.min_isr_seen = meta.min_isr_seen
        self.holders: dict[int, frozenset[str]] = {}
        self.resync: dict[str, set[int]] = {}
        # A recovered partition leaves the recovery table only once its commit took effect.
        self.recovery = {p: dict(r) for p, r in meta.recovery.items() if p not in meta.partitions}
        self.shards = dict(meta.shards)
        self.placed_on = meta.placed_on
        self.started = meta.started_ms
        self.last_balance = meta.last_balance_ms
        self.restarted: set[str] = set()
        self.to_start: dict[int, tuple[str, str]] = {}
        self.elected: set[int] = set()  # partitions given a new leader (and epoch) by this round
        self.events: list[Event] = []

    # --- helpers ------------------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> None:
        self.events.append(Event(kind, tuple(sorted(fields.items()))))

    def alive(self) -> set[str]:
        return self.obs.alive() - set(self.refused)

    def change(self, p: int, a: PartitionAssignment, reason: str) -> None:
        if self.parts.get(p) == a:
            return
        self.parts[p] = a
        self.reasons[p] = reason if p not in self.reasons else f"{self.reasons[p]}; {reason}"

    def min_isr_seen_or_settings(self) -> int:
        return min(self.s.min_insync_replicas, self.min_isr_seen or self.s.min_insync_replicas)

    def leader_changed(self, p: int) -> bool:
        old, a = self.meta.partitions.get(p), self.parts[p]
        return old is None or (old.leader, old.leader_epoch) != (a.leader, a.leader_epoch)

    def start(self, p: int, node: str, reason: str) -> None:
        self.to_start[p] = (node, reason)
        self.shards[p] = ShardTrack(node, self.now)

    def lost(self, node: str, p: int) -> bool:
        """``node``'s current incarnation reported a disk that does not hold ``p`` (wiped, replaced)."""
        return self.reported.get(node) == self.incarnations.get(node) is not None and \
            p not in self.held.get(node, ()) and node not in self.holders.get(p, ()) and node not in self.refused

    def electable(self, p: int, candidates: set[str]) -> tuple[list[str], bool]:
        """The ``candidates`` whose disk is known to hold ``p``, and whether some other candidate has not
        reported its disk yet (then an election waits for it rather than pass it over)."""
        ok = [n for n in candidates if p in self.held.get(n, ())]
        pending = any(self.reported.get(n) != self.incarnations.get(n) for n in candidates if n not in ok)
        return ok, pending

    def failover(self, p: int, reason: str, exclude: str | None, shard_only: bool = False) -> None:
        """Elect the first live in-sync replica other than ``exclude`` (restarted nodes last resort) whose
        disk holds the partition; an in-sync replica whose disk lost it leaves the ISR.

        ``shard_only``: only the old leader's shard process died (Ray saw it die), not its node: that node's
        replica stays in the ISR when its disk holds the partition. Its log holds every batch ever
        acknowledged (the leader appends before anyone acknowledges), the new leader levels it to its own
        log (truncating what was never acknowledged) before serving, or drops it from the ISR if it cannot,
        and nothing writes to it meanwhile (the dead process' lock died with it). As Kafka keeps the ISR
        when leadership moves between live brokers (``PartitionChangeBuilder``; the old leader truncates as
        a follower, KIP-101), so that a second and third leader failure in a row still find an in-sync
        replica elsewhere rather than wait for Ray to restart the one left."""
        a = self.parts[p]
        candidates = self.alive() - self.restarted - {exclude}
        ok, pending = self.electable(p, {n for n in a.isr if n in candidates})
        if not ok and pending:
            return  # decided again once their disks have reported
        kept = {exclude} if shard_only and exclude in self.alive() - self.restarted and \
            exclude in self.electable(p, {exclude})[0] else set()
        isr = tuple(n for n in a.isr if n in ok or n in kept)
        new = elect_leader(replace(a, isr=isr), sorted(candidates)) if isr else None
        if new is None:
            # Offline. As Kafka, the ISR keeps its last members: they hold every acknowledged batch, and
            # the partition comes back when one of them does.
            b = bump(a, leader=None, leader_epoch=a.leader_epoch + 1)
        else:
            b = bump(a, leader=new, leader_epoch=a.leader_epoch + 1, isr=isr)
            self.elected.add(p)
        self.change(p, b, reason)
        self.event("failover", partition=p, reason=reason, old=a.leader, new=new, epoch=b.leader_epoch)

    # --- 1. nodes -----------------------------------------------------------------------------
    def nodes(self) -> None:
        for name, o in sorted(self.obs.nodes.items()):
            if not o.alive:
                continue
            known = self.incarnations.get(name)
            if known is None:
                self.event("node-joined", node=name, node_id=o.node_id)
            elif known != o.node_id:
                self.restarted.add(name)
                self.superseded.add(known)
                self.held.pop(name, None)  # known again once this incarnation has reported its disk
                self.marked.discard(name)
                self.event("node-restarted", node=name, node_id=o.node_id)
            self.incarnations[name] = o.node_id
            self.dead_since.pop(name, None)

    def mark_dead(self) -> None:
        """Every node the metadata knows (replicas included, also of states recovered this round) that is
        not alive is dead from the first round that sees it so."""
        known_names = set(self.incarnations) | {n for a in self.parts.values() for n in a.replicas}
        for name in sorted(known_names):
            o = self.obs.nodes.get(name)
            if (o is None or not o.alive) and name not in self.dead_since:
                self.dead_since[name] = self.now
                self.event("node-dead", node=name)

    # --- 2. disks -----------------------------------------------------------------------------
    def reports(self) -> None:
        for name, r in sorted(self.obs.reports.items()):
            o = self.obs.nodes.get(name)
            if o is None or not o.alive or o.node_id != r.node_id:
                continue  # from an incarnation that is gone: its successor reports again
            self.reported[name] = r.node_id
            why = None
            if r.error is not None:
                why = f"its data directory cannot be read: {r.error}"
            elif r.num_partitions is not None and r.num_partitions != self.s.num_partitions:
                why = (f"its data directory belongs to a deployment of {r.num_partitions} partitions, not "
                       f"{self.s.num_partitions}")
            if why is not None:
                if self.refused.get(name) != why:
                    self.event("node-refused", node=name, reason=why)
                self.refused[name] = why
                continue
            self.refused.pop(name, None)
            self.held[name] = frozenset(p for p, rr in r.replicas.items() if rr.state is not None)
            if r.layout_created:
                self.marked.add(name)
            if r.min_insync_replicas is not None:
                self.min_isr_seen = min(r.min_insync_replicas, self.min_isr_seen or r.min_insync_replicas)
            for p, rr in sorted(r.replicas.items()):
                if not 0 <= p < self.s.num_partitions:
                    continue
                if p in self.parts:
                    self._merge(p, name, rr)
                    if rr.state is not None and rr.state.partition_epoch < self.parts[p].partition_epoch:
                        self.resync.setdefault(name, set()).add(p)
                else:
                    self.recovery.setdefault(p, {})[name] = rr
        for p in sorted(self.recovery):
            self._maybe_recover(p)

    def _merge(self, p: int, name: str, rr: ReplicaReport) -> None:
        a = self.parts[p]
        if rr.state is not None and rr.state.partition_epoch > a.partition_epoch:
            # A commit reached this disk but not the cache (the controller stopped between the two).
            a = bump(rr.state)
            self.change(p, a, f"newer state on the disk of {name}")
        if rr.fenced_epoch > a.leader_epoch:
            self.change(p, bump(a, leader_epoch=rr.fenced_epoch), f"{name} is fenced at epoch {rr.fenced_epoch}")

    def _maybe_recover(self, p: int) -> None:
        seen = self.recovery[p]
        held = {n: rr.state for n, rr in seen.items() if rr.state is not None}
        if not held:
            return
        newest = max(held.values(), key=lambda a: a.partition_epoch)
        holders = sorted(n for n in held if n in newest.replicas)
        quorum = self.s.recovery_quorum(len(newest.replicas), self.min_isr_seen_or_settings())
        if len(holders) < quorum:
            # A partition that never had a leader (epoch 0: created, nothing acknowledged) is known well
            # enough once a quorum of its replicas has reported at all: had it ever been led, they would
            # hold a newer state.
            reporters = [n for n in newest.replicas if self.reported.get(n) == self.incarnations.get(n)]
            if newest.leader_epoch > 0 or len(reporters) < quorum:
                return
        fenced = max(rr.fenced_epoch for rr in seen.values())
        a = bump(newest, leader_epoch=max(newest.leader_epoch, fenced))
        self.parts[p] = a
        self.reasons[p] = f"recovered from the disks of {', '.join(holders)}"
        self.event("partition-recovered", partition=p, nodes=holders, epoch=a.leader_epoch)

    # --- 3. creation --------------------------------------------------------------------------
    def create(self) -> None:
        missing = [p for p in range(self.s.num_partitions) if p not in self.parts and
                   not any(rr.state is not None for rr in self.recovery.get(p, {}).values())]
        if not missing:
            return
        alive = self.alive()
        if not alive or any(self.reported.get(n) != self.incarnations.get(n) for n in alive):
            return  # every disk that is up must have reported first
        if self.marked:
            return  # every partition was created once: the missing ones wait for their replicas
        if self.parts or any(rr.state is not None for r in self.recovery.values() for rr in r.values()):
            # A layout exists; a partition no disk knows was never created (the controller stopped while
            # creating), unless its replicas are all away: every node any state names must have reported.
            named = {n for a in self.parts.values() for n in a.replicas}
            named |= {n for r in self.recovery.values() for rr in r.values() if rr.state for n in rr.state.replicas}
            if any(n not in alive for n in named):
                return
        elif len(alive) < self.s.replication_factor:
            return  # Kafka creates __consumer_offsets only once replication.factor brokers are alive
        nodes = sorted(alive)
        target = plan(self.s.num_partitions, nodes, self.parts or None, self.s.replication_factor)
        for p in missing:
            a = bump(target.partitions[p])
            self.change(p, a, "created")
            self.holders[p] = frozenset(a.replicas)
        self.event("partitions-created", partitions=missing, nodes=nodes)

    # --- 4. failures --------------------------------------------------------------------------
    def failures(self) -> None:
        gone = set(self.dead_since) | self.restarted
        alive = self.alive()
        for p in sorted(self.parts):
            a = self.parts[p]
            if a.leader is not None and a.leader in gone:
                why = "restarted" if a.leader in self.restarted else "dead"
                self.failover(p, f"leader node {a.leader} {why}", exclude=a.leader)
            elif a.leader is not None and a.leader not in a.replicas:
                self.failover(p, f"leader {a.leader} is no longer a replica", exclude=a.leader)
            elif a.leader is not None and self.lost(a.leader, p):
                self.failover(p, f"the disk of leader {a.leader} does not hold the partition", exclude=a.leader)
            a = self.parts[p]
            if a.leader is not None:
                drop = [n for n in a.isr if n != a.leader and (n in gone or self.lost(n, p))]
                if drop:
                    self.change(p, bump(a, isr=tuple(n for n in a.isr if n not in drop)),
                                f"{', '.join(drop)} left the ISR")
                    self.event("isr-shrink", partition=p, nodes=drop)
            else:
                ok, pending = self.electable(p, set(a.isr) & alive)
                new = elect_leader(a, sorted(ok))
                isr = a.isr
                if new is None and pending:
                    continue  # an in-sync replica is back but has not reported its disk yet
                if new is None and self.s.unclean_election:
                    new = elect_leader(a, sorted(alive), unclean=True)
                    isr = (new,) if new is not None else isr
                if new is not None:
                    b = bump(a, leader=new, leader_epoch=a.leader_epoch + 1,
                             isr=tuple(n for n in isr if n in alive))
                    self.change(p, b, f"in-sync replica {new} is back")
                    self.elected.add(p)
                    self.event("failover", partition=p, reason="replica back", old=None, new=new,
                               epoch=b.leader_epoch)

    # --- 5. shards ----------------------------------------------------------------------------
    def shard_health(self) -> None:
        for p in sorted(self.parts):
            a = self.parts[p]
            if a.leader is None or self.leader_changed(p) or a.leader not in self.alive():
                continue  # offline, a new leader or epoch this round (its shard starts below), or its
                # node is down (the failover waits for a disk report)
            o = self.obs.shards.get(p)
            t = self.shards.get(p)
            if o is None or o.actor_state in (None, "DEAD"):
                self.start(p, a.leader, "no shard actor")
                continue
            if t is None or t.actor_id != o.actor_id:
                # First sight of this actor: created by the last round (keep its start time) or unknown.
                ours = t is not None and t.actor_id is None and t.node == a.leader
                t = ShardTrack(a.leader, t.since_ms if ours else self.now, o.actor_id)
            if o.actor_state == "RESTARTING" and o.node is not None and o.node != a.leader:
                # The partition's name is held by an actor of another node (the old leader's, its node
                # lost): a controller that took over after a failover was committed but before its shard
                # was started. Ray restarts that actor only when its node is back: start the leader's now.
                self.start(p, a.leader, f"the shard actor holding the name is restarting on {o.node}; the "
                                        f"leader is {a.leader}")
                continue
            if o.actor_state in STARTING and (t.first_answer_ms is not None or t.running_ms is not None):
                if t.first_answer_ms is not None and self.in_sync_elsewhere(p):
                    # The leader's process died after it had answered, and Ray is starting it again: an
                    # in-sync replica on another node takes over now (its hot standby is promoted) rather
                    # than the partition waiting for a new process and its load, as Kafka elects another
                    # in-sync replica when a leader's broker dies.
                    self.failover(p, "leader shard died (Ray is restarting it)", exclude=a.leader, shard_only=True)
                    continue
                t = ShardTrack(a.leader, self.now, o.actor_id)  # Ray is restarting it: a new start
            if o.answer is not None:
                if (o.process is not None and t.process is not None and o.process != t.process
                        and o.answer != "ACTIVE" and self.in_sync_elsewhere(p)):
                    # Ray restarted the leader's process between two rounds (its RESTARTING never seen): the
                    # new process reloads the whole log; an in-sync replica elsewhere takes over now, as above.
                    self.failover(p, "leader shard died (Ray restarted it)", exclude=a.leader)
                    continue
                t = replace(t, first_answer_ms=t.first_answer_ms or self.now, last_answer_ms=self.now,
                            unanswered_ms=None, process=o.process)
                self.shards[p] = t
                if o.node is not None and o.node != a.leader:
                    self.start(p, a.leader, f"a shard on {o.node} holds the name; the leader is {a.leader}")
                elif o.answer not in HEALTHY:
                    self.unhealthy(p, t, f"leader shard answers {o.answer}")
                continue
            if o.actor_state not in STARTING and t.running_ms is None:
                t = replace(t, running_ms=self.now)
            self.shards[p] = t
            if o.actor_state in STARTING or t.first_answer_ms is None:
                # Many shards created at once on few cores queue for Ray's worker starts: replacing one that
                # waits there adds a start to the same queue (a storm of restarts on a loaded machine).
                if t.running_ms is None:
                    limit, since, what = self.s.shard_start_timeout_ms * QUEUED_START_FACTOR, t.since_ms, "get a process"
                else:
                    limit, since, what = self.s.shard_start_timeout_ms, t.running_ms, "answer after its process started"
                if self.now - since > limit:
                    self.unhealthy(p, t, f"shard did not {what} within {limit} ms")
                continue
            if t.unanswered_ms is None:
                t = self.shards[p] = replace(t, unanswered_ms=self.now)
            # Silence the controller watched: after a stall of its own (its rounds late on a loaded machine),
            # the shard's last answer is old but no probe went unanswered meanwhile; it is silent once probes
            # have gone unanswered for half the silence too (in steady rounds, within a round of its last answer).
            if self.now - t.last_answer_ms > self.s.shard_silence_ms \
                    and self.now - t.unanswered_ms >= self.s.shard_silence_ms // 2:
                self.unhealthy(p, t, f"leader shard silent for {self.now - t.last_answer_ms} ms")

    def in_sync_elsewhere(self, p: int) -> bool:
        """Another in-sync replica of ``p`` is on a live node (not one just restarted): a failover can go there."""
        a = self.parts[p]
        return any(n != a.leader and n in self.alive() - self.restarted for n in a.isr)

    def unhealthy(self, p: int, t: ShardTrack, reason: str) -> None:
        a = self.parts[p]
        if self.in_sync_elsewhere(p):
            self.failover(p, reason, exclude=a.leader)
        elif self.now - t.since_ms >= self.s.shard_silence_ms:  # at most one restart in place per silence
            self.start(p, a.leader, f"{reason}; restarted in place (no other in-sync replica)")
            self.event("shard-restart", partition=p, node=a.leader, reason=reason)

    # --- 6. placement -------------------------------------------------------------------------
    def replan(self) -> None:
        if len(self.parts) < self.s.num_partitions:
            return  # still recovering: a plan would lay out the missing partitions afresh
        grace = self.s.node_replacement_delay_ms
        # A node gets replicas once its disk has reported (it may yet be refused); one that already holds
        # some keeps them meanwhile, and a dead one keeps them during the replacement delay.
        current = {n for a in self.parts.values() for n in a.replicas}
        ready = {n for n in self.alive() if n in current or self.reported.get(n) == self.incarnations.get(n)}
        nodes = sorted(ready | {n for n, t in self.dead_since.items() if self.now - t < grace and n not in self.refused})
        if not nodes or tuple(nodes) == self.placed_on:
            return
        target = plan(self.s.num_partitions, nodes, self.parts, self.s.replication_factor)
        self.placed_on = tuple(nodes)
        for p, t in sorted(target.partitions.items()):
            a = self.parts[p]
            if t.replicas == a.replicas:
                continue
            isr = tuple(n for n in a.isr if n in t.replicas) or a.isr
            self.change(p, bump(a, replicas=t.replicas, isr=isr), f"replicas {list(a.replicas)} -> {list(t.replicas)}")
            self.event("replicas-moved", partition=p, old=list(a.replicas), new=list(t.replicas))
            if a.leader is not None and a.leader not in t.replicas:
                self.failover(p, f"leader {a.leader} is no longer a replica", exclude=a.leader)

    # --- 7. leader balance --------------------------------------------------------------------
    def balance(self) -> None:
        if self.reasons or self.to_start or len(self.parts) < self.s.num_partitions:
            return
        serving = all(a.leader is not None and self.obs.shards.get(p, ShardObservation(None)).answer == "ACTIVE"
                      for p, a in self.parts.items())
        if not serving:
            return
        if self.started is None:
            self.started = self.last_balance = self.now  # start-up is over; balance from now on
            self.event("deployment-serving")
            return
        if self.now - self.last_balance < self.s.leader_balance_interval_ms:
            return
        self.last_balance = self.now
        live = sorted(self.alive() - self.restarted)
        if not needs_leader_rebalance(self.parts, live):
            return
        for p in sorted(self.parts):
            a = self.parts[p]
            preferred = a.replicas[0]
            if a.leader != preferred and preferred in live and preferred in a.isr and p in self.held.get(preferred, ()):
                b = bump(a, leader=preferred, leader_epoch=a.leader_epoch + 1)
                self.change(p, b, f"preferred leader {preferred}")
                self.elected.add(p)
                self.event("preferred-leader", partition=p, old=a.leader, new=preferred, epoch=b.leader_epoch)

    # --- result -------------------------------------------------------------------------------
    def result(self) -> Decision:
        actions: list[Action] = list(self.events)
        for p in sorted(self.reasons):
            actions.append(Commit(p, self.parts[p], self.meta.partitions.get(p), self.reasons[p],
                                  self.holders.get(p, frozenset()),
                                  elected=p in self.elected and self.parts[p].leader is not None))
        for node, partitions in sorted(self.resync.items()):
            stale = tuple(sorted(p for p in partitions if p not in self.reasons))  # a commit updates the others
            if stale:
                actions.append(SyncStates(node, stale))
        if len(self.meta.partitions) == self.s.num_partitions:
            unmarked = tuple(sorted(n for n in self.alive() if n not in self.marked and
                                    self.reported.get(n) == self.incarnations.get(n)))
            if unmarked:
                actions.append(MarkLayout(unmarked))
        for p in sorted(set(self.reasons) | set(self.to_start)):
            a = self.parts[p]
            old = self.meta.partitions.get(p)
            if a.leader is None:
                if old is not None and old.leader is not None:
                    actions.append(StopShard(p, self.reasons.get(p, "offline")))
                self.shards.pop(p, None)
            elif p in self.to_start:
                actions.append(StartShard(p, *self.to_start[p]))
            elif self.leader_changed(p):
                # A leader or epoch chosen here (not by the shard's own start): whatever shard holds the
                # name is not it.
                actions.append(StartShard(p, a.leader, self.reasons[p]))
                self.shards[p] = ShardTrack(a.leader, self.now)
        if any(self.leader_changed(p) for p in self.reasons) or self.to_start:
            self.last_balance = self.now  # let leadership settle for a whole interval before balancing
        meta = replace(
            self.meta, incarnations=self.incarnations, dead_since_ms=self.dead_since, reported=self.reported,
            held=self.held, superseded=frozenset(self.superseded), marked=frozenset(self.marked),
            min_isr_seen=self.min_isr_seen,
            refused=self.refused, recovery=self.recovery, shards=self.shards, placed_on=self.placed_on,
            started_ms=self.started, last_balance_ms=self.last_balance,
        )
        return Decision(meta, tuple(actions))


def decide(meta: Metadata, obs: Observations, now_ms: int) -> Decision:
    """One round of the controller (see the module docstring for the rules, in order)."""
    r = _Round(meta, obs, now_ms)
    r.nodes()
    r.reports()
    r.mark_dead()
    r.create()
    r.failures()
    r.shard_health()
    r.replan()
    r.balance()
    return r.result()
