"""The nemesis: injects a chaos run's planned faults into a live deployment, one after another.

Each injection is a nemesis ``info`` event in the history (``f`` the fault's name, ``value`` its target);
the end of a fault that lasts (a pause, a node down) is a ``heal`` event. For every injection that takes a
coordinator partition away from its leader, the nemesis keeps a ``Disruption``: when it happened, which
partitions it hit, and what the controller and the new leader shard said about the failover (detection,
election and load times), from which the report derives failover times.

Process signals (SIGKILL, SIGTERM, SIGSTOP, SIGCONT) go to processes on this host only: the embedded
default and simulated clusters run here; on a real deployment a shard on another host is killed through
Ray instead, and pauses of remote processes are skipped.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import ray

from raygroups.chaos.compaction import KILL_POINTS, ROUND_WAIT_S, about_to_swap
from raygroups.chaos.faults import PlannedFault
from raygroups.chaos.hosts import alive_node_ids, back_in_ray
from raygroups.chaos.workload import EventLog, clock
from raygroups.deployment.seam import NODE_LABEL, Directory
from raygroups.offsets_log.log import LOCK_FILE
from raygroups.offsets_log.replica_state import node_dir, partition_dir

SETTLE_TIMEOUT_S = 90.0
SERVE_TIMEOUT_S = 45.0


class FaultSkipped(Exception):
    """The fault has no target right now (e.g. no follower is up); nothing was done."""


@dataclass
class Disruption:
    fault: str
    time: float  # run time of the kill or pause
    partitions: list[int]
    breakdown: dict[int, dict] = field(default_factory=dict)  # partition -> detection/election/load seconds
    old: dict[int, dict] = field(default_factory=dict, repr=False)  # the shards' status before it
    node: str | None = None  # the node it took down, if any


class Nemesis:
    def __init__(self, cluster: Any, workload: Any, events: EventLog, session_timeout_s: float) -> None:
        self.cluster = cluster
        self.workload = workload
        self.events = events
        self.t0 = events.t0
        self.session_timeout_s = session_timeout_s
        self.disruptions: list[Disruption] = []
        self.injected = 0
        self.skipped: dict[str, int] = {}
        self.errors: list[dict] = []
        self._lock = threading.Lock()
        self.controller_events: Any = None  # the run's ControllerEvents
        self.compaction: Any = None  # the run's CompactionRounds (--compaction-every)
        self.faults_until: float | None = None  # on clock(): when the run's faults window ends
        self.wall_t0 = time.time() - (clock() - self.t0)  # the run's start on the wall clock
        self._local_ip = ray.util.get_node_ip_address()
        self.hosts = getattr(cluster, "hosts", None)  # a HostControl when the nodes are real hosts

    # ------------------------------------------------------------------------------------------
    def inject(self, fault: PlannedFault, groups: list[str]) -> None:
        group = groups[fault.group]
        partition = self.workload.partition_of(group)
        try:
            getattr(self, "_" + fault.name.replace("-", "_"))(fault, group, partition)
        except FaultSkipped as e:
            with self._lock:
                self.skipped[f"{fault.name}: {e}"] = self.skipped.get(f"{fault.name}: {e}", 0) + 1

    def settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> bool:
        """Wait until every coordinator node is up and every partition is led by an ACTIVE shard with a full
        ISR (so that faults never pile up into a loss of quorum the run did not ask for)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                statuses = self.cluster.shard_status(timeout_s=3)
                if all(s["state"] == "ACTIVE" for s in statuses):
                    if not self.cluster.replicated:
                        return True
                    rf = self.cluster.config.offsets_topic_replication_factor
                    states = [self.cluster.partition_state(p) for p in range(self.cluster.num_partitions)]
                    if self._controller_caught_up() and all(s["leader"] and len(s["isr"]) >= rf for s in states):
                        return True
            except (ray.exceptions.RayError, TimeoutError, ValueError):
                pass
            time.sleep(0.3)
        return False

    def _controller_caught_up(self) -> bool:
        """The controller knows every coordinator node's current incarnation (just after a restart its ISRs
        may still count the previous one)."""
        live = {(n.get("Labels") or {}).get(NODE_LABEL): n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        known = self.cluster.nodes()
        return bool(known) and all(info["alive"] and live.get(name) == info["node_id"] == info["incarnation"]
                                   for name, info in known.items() if not info["refused"])

    def unsettled(self) -> dict:
        """What the deployment looks like when it did not settle (for the report)."""
        out: dict = {}
        try:
            out["shards"] = {s["partition"]: s["state"] for s in self.cluster.shard_status(timeout_s=3)}
            if self.cluster.replicated:
                out["nodes"] = self.cluster.coordinator_nodes()
                out["partitions"] = {p: self.cluster.partition_state(p) for p in range(self.cluster.num_partitions)}
                out["controller_events"] = self.cluster.controller_events()[-15:]
        except (ray.exceptions.RayError, TimeoutError, ValueError) as e:
            out["error"] = f"{type(e).__name__}: {e}"
        return out

    # --- what the faults need ------------------------------------------------------------------------
    def _now(self) -> float:
        return clock() - self.t0

    def _run_time(self, wall: float) -> float:
        """A wall-clock timestamp (the controller's events) on the run's clock."""
        return wall - self.wall_t0

    def _record(self, name: str, target: dict) -> float:
        with self._lock:  # two lanes inject at once
            self.injected += 0 if target.get("continues") else 1
        t = self._now()
        self.events.add("info", name, target)
        return t

    def _heal(self, name: str, target: dict) -> None:
        self.events.add("info", "heal", {"fault": name, **target})

    def _status(self, partition: int) -> dict:
        status = self.cluster.shard_status(timeout_s=5)[partition]
        if status["state"] != "ACTIVE" or not status.get("pid"):
            raise FaultSkipped(f"partition {partition} has no active leader shard")
        return status

    def _is_local(self, status: dict) -> bool:
        node_id = status.get("ray_node_id")
        ips = {n["NodeID"]: n.get("NodeManagerAddress") for n in ray.nodes()}
        return node_id is None or ips.get(node_id) == self._local_ip

    def _signal_shard(self, partition: int, sig: int, name: str, extra: dict | None = None) -> tuple[dict, float]:
        status = self._status(partition)
        target = {"partition": partition, "pid": status["pid"], "node": status.get("node"),
                  "leader_epoch": status.get("leader_epoch"), **(extra or {})}
        if self._is_local(status):
            with Process(status["pid"]) as process:  # the process of that status, even if it dies meanwhile
                t = self._record(name, target)
                process.signal(sig)
        elif self.hosts is not None:
            t = self._record(name, target)
            self.hosts.signal(status["node"], status["pid"], sig)
        elif sig in (signal.SIGKILL, signal.SIGTERM):
            t = self._record(name, target)
            ray.kill(self.cluster.shard(partition), no_restart=False)
        else:
            raise FaultSkipped("the shard runs on another host")
        return status, t

    def _partitions_led_by(self, node: str) -> list[int]:
        return [p for p, leader in self.cluster.partition_leaders().items() if leader == node]

    def _disrupted(self, fault: str, t: float, partitions: list[int], old: dict[int, dict]) -> None:
        self._served(Disruption(fault, t, sorted(partitions), old=old))

    def _wait_served(self, d: Disruption, old: dict[int, dict]) -> None:
        """Wait (bounded) until each disrupted partition is served by a new shard incarnation, then note what
        the controller and the shard say about the failover."""
        deadline = time.monotonic() + SERVE_TIMEOUT_S
        pending = set(d.partitions)
        while pending and time.monotonic() < deadline:
            statuses = self.cluster.shard_status(timeout_s=2)
            for p in list(pending):
                s = statuses[p]
                before = old.get(p, {})
                if s["state"] == "ACTIVE" and (s.get("pid"), s.get("leader_epoch")) != \
                        (before.get("pid"), before.get("leader_epoch")):
                    # served_from: from when only the new incarnation can acknowledge a commit: when it says it
                    # became active (its start timeline, on the wall clock; a process that served before the
                    # fault keeps its first mark), else now.
                    active = (s.get("start_timeline") or {}).get("active")
                    active = None if active is None else self._run_time(active)
                    served_from = self._now() if active is None or active < d.time else min(self._now(), active)
                    d.breakdown[p] = {"load_s": s.get("load_seconds"), "new_epoch": s.get("leader_epoch"),
                                      "served_from": round(served_from, 3)}
                    pending.discard(p)
            if pending:
                time.sleep(0.1)
        if self.cluster.replicated:
            self._controller_times(d)

    def _controller_times(self, d: Disruption) -> None:
        try:
            events = self.cluster.controller_events()
        except (ray.exceptions.RayError, TimeoutError):
            return
        for p, b in d.breakdown.items():
            after = [e for e in events if self._run_time(e["t"]) >= d.time - 0.05]
            # Detection: the controller's first reaction to this fault: the node declared dead, or this
            # partition's shard failed over, restarted or stopped.
            detected = next((self._run_time(e["t"]) for e in after
                             if (e["event"] == "node-dead" and e.get("node") == d.node)
                             or (e.get("partition") == p and e["event"] in ("failover", "shard-restart",
                                                                           "shard-stopped"))), None)
            # Election ends when the new leader's shard is started (its load follows).
            elected = next((self._run_time(e["t"]) for e in after if e.get("partition") == p
                            and e["event"] == "shard-started"), None)
            if detected is not None:
                b["detection_s"] = round(detected - d.time, 3)
                if elected is not None:
                    b["election_s"] = round(max(0.0, elected - detected), 3)

    # --- shard faults ------------------------------------------------------------------------------
    def _shard_kill(self, fault: PlannedFault, group: str, partition: int, name: str = "shard-kill",
                    extra: dict | None = None) -> None:
        status, t = self._signal_shard(partition, signal.SIGKILL, name, extra)
        self._disrupted(name, t, [partition], {partition: status})

    def _shard_stop(self, fault: PlannedFault, group: str, partition: int) -> None:
        status, t = self._signal_shard(partition, signal.SIGTERM, "shard-stop")
        self._disrupted("shard-stop", t, [partition], {partition: status})

    def _leader_flap(self, fault: PlannedFault, group: str, partition: int) -> None:
        """One fault of three kills (each a failover of its own): the later two ``continue`` it."""
        for kill in range(3):
            self._shard_kill(fault, group, partition, "leader-flap", {"continues": True} if kill else None)

    def _leader_pause(self, fault: PlannedFault, group: str, partition: int) -> None:
        status = self._status(partition)
        if self._is_local(status):
            with Process(status["pid"]) as process:  # the process of that status, even if it dies meanwhile
                t = self._pause_shard(fault, partition, status, process.signal)
        elif self.hosts is not None:
            t = self._pause_shard(fault, partition, status,
                                  lambda sig: self.hosts.signal(status["node"], status["pid"], sig))
        else:
            raise FaultSkipped("the shard runs on another host")
        if self.cluster.replicated:
            self._disrupted("leader-pause", t, [partition], {partition: status})
        else:  # no other replica: the same process serves again once it resumes
            self.disruptions.append(Disruption("leader-pause", t, [partition]))

    def _pause_shard(self, fault: PlannedFault, partition: int, status: dict, send) -> float:
        t = self._record("leader-pause", {"partition": partition, "pid": status["pid"], "node": status.get("node"),
                                          "leader_epoch": status.get("leader_epoch")})
        send(signal.SIGSTOP)
        try:
            time.sleep(fault.duration)
        finally:
            # The controller may have replaced (killed) the silent shard meanwhile: nothing to resume then.
            resumed = send(signal.SIGCONT)
            self._heal("leader-pause", {"partition": partition, "pid": status["pid"], "resumed": resumed})
        return t

    # --- compaction faults (--compaction-every) ---------------------------------------------------------
    def _compaction_rounds(self) -> Any:
        if self.compaction is None:
            raise FaultSkipped("no compaction rounds in this run")
        return self.compaction

    def _round_wait_s(self, rounds: Any) -> float:
        """How long a compaction fault waits for a round to reach its point: a round's period and more, but
        not past the end of the run's faults window."""
        wait = rounds.every_s + ROUND_WAIT_S
        return wait if self.faults_until is None else max(0.0, min(wait, self.faults_until - clock()))

    def _compaction_kill(self, fault: PlannedFault, group: str, partition: int) -> None:
        rounds = self._compaction_rounds()
        where, reached = KILL_POINTS[fault.pick % len(KILL_POINTS)]
        hit = rounds.wait_for(reached, self._round_wait_s(rounds))
        if hit is None:
            raise FaultSkipped(f"no compaction round got {where}")
        pid = rounds.kill()
        if pid is None:
            raise FaultSkipped("the compaction job was not running")
        self._record("compaction-kill", {"round": hit[0], "where": where, "step": hit[1], "pid": pid})

    def _compaction_failover(self, fault: PlannedFault, group: str, partition: int) -> None:
        """Once a round's proof is in, the leader of the partition it is about to swap last is killed: its swap
        meets a new leader, whose epoch fences it."""
        rounds = self._compaction_rounds()
        hit = rounds.wait_for(about_to_swap, self._round_wait_s(rounds))
        if hit is None:
            raise FaultSkipped("no compaction round came to swap a partition")
        round_, step = hit
        self._shard_kill(fault, group, step["proved"][-1], "compaction-failover", {"round": round_})

    # --- consumer faults -------------------------------------------------------------------------------
    def _consumer_kill(self, fault: PlannedFault, group: str, partition: int) -> None:
        process = self.workload.kill_consumer(group, fault.pick, lambda target: self._record("consumer-kill", target))
        if process is None:
            raise FaultSkipped("no consumer to kill")

    def _consumer_pause(self, fault: PlannedFault, group: str, partition: int) -> None:
        process, pid = self.workload.consumer_pid(group, fault.pick)
        if pid is None:
            raise FaultSkipped("no consumer process to pause")
        target = {"group": group, "consumer": process, "pid": pid}
        with Process(pid) as handle:
            self._record("consumer-pause", target)
            handle.signal(signal.SIGSTOP)
            try:
                time.sleep(self.session_timeout_s + fault.duration)
            finally:
                handle.signal(signal.SIGCONT)
                self._heal("consumer-pause", target)

    # --- node faults (simulated clusters) ------------------------------------------------------------
    def _leader_node(self, partition: int) -> str:
        leader = self.cluster.partition_state(partition)["leader"]
        if leader is None or leader not in self.cluster.coordinator_nodes():
            raise FaultSkipped(f"partition {partition} has no live leader node")
        return leader

    def _kill_node(self, name: str, fault: str, graceful: bool, extra: dict | None = None) -> Disruption:
        """Kill a node; the returned disruption is waited on by ``_served`` (after whatever else the fault
        does while the node is down)."""
        led = self._partitions_led_by(name)
        old = {s["partition"]: s for s in self.cluster.shard_status(timeout_s=3)}
        t = self._record(fault, {"node": name, "leads": led, **(extra or {})})
        self.cluster.kill_node(name, graceful=graceful)
        return Disruption(fault, t, sorted(led), old=old, node=name)

    def _served(self, d: Disruption) -> None:
        self.disruptions.append(d)
        self._wait_served(d, d.old)

    def _restart(self, name: str, fault: str) -> None:
        self.cluster.restart_node(name)
        self._heal(fault, {"node": name})

    def _node_down(self, fault: PlannedFault, node: str, graceful: bool, extra: dict | None = None) -> None:
        self._served(self._kill_node(node, fault.name, graceful, extra))
        time.sleep(fault.duration)
        self._restart(node, fault.name)

    def _node_kill(self, fault: PlannedFault, group: str, partition: int) -> None:
        self._node_down(fault, self._leader_node(partition), graceful=False)

    def _node_stop(self, fault: PlannedFault, group: str, partition: int) -> None:
        self._node_down(fault, self._leader_node(partition), graceful=True)

    def _node_restart(self, fault: PlannedFault, group: str, partition: int) -> None:
        node = self._leader_node(partition)
        d = self._kill_node(node, "node-restart", graceful=False)
        self._restart(node, "node-restart")
        self._served(d)

    def _follower(self, fault: PlannedFault, partition: int) -> str:
        state = self.cluster.partition_state(partition)
        alive = set(self.cluster.coordinator_nodes())
        followers = sorted(n for n in state["isr"] if n != state["leader"] and n in alive)
        if not followers:
            raise FaultSkipped(f"partition {partition} has no live follower in its ISR")
        return followers[fault.pick % len(followers)]

    def _follower_loss(self, fault: PlannedFault, group: str, partition: int) -> None:
        self._node_down(fault, self._follower(fault, partition), graceful=False, extra={"partition": partition})

    def _controller_kill(self, fault: PlannedFault, group: str, partition: int) -> None:
        node = self._leader_node(partition)
        d = self._kill_node(node, "controller-kill", graceful=False)
        time.sleep(0.3)
        ray.kill(Directory(self.cluster.namespace).controller(), no_restart=False)
        self._served(d)
        time.sleep(fault.duration)
        self._restart(node, "controller-kill")

    def _corrupt_follower(self, fault: PlannedFault, partition: int, how: str) -> None:
        node = self._follower(fault, partition)
        self._served(self._kill_node(node, fault.name, graceful=False, extra={"partition": partition}))
        directory = partition_dir(node_dir(self.cluster.data_dir, node), partition)
        _wait_unlocked(directory)  # the node's processes die a moment after its raylet: not while they write
        segments = sorted(glob.glob(os.path.join(directory, "*.log")))
        rng = random.Random(fault.pick)
        if segments and os.path.getsize(segments[-1]) > 0:
            path, size = segments[-1], os.path.getsize(segments[-1])
            if how == "torn-tail":
                cut = rng.randint(1, min(size, 200))
                os.truncate(path, size - cut)
                self._heal(fault.name, {"node": node, "partition": partition, "file": os.path.basename(path),
                                        "cut_bytes": cut, "step": "corrupted while down"})
            else:
                at = size - 1 - rng.randrange(min(size, 64))
                with open(path, "r+b") as f:
                    f.seek(at)
                    byte = f.read(1)[0]
                    f.seek(at)
                    f.write(bytes([byte ^ (1 << rng.randrange(8))]))
                self._heal(fault.name, {"node": node, "partition": partition, "file": os.path.basename(path),
                                        "flipped_at": at, "step": "corrupted while down"})
        time.sleep(fault.duration)
        self._restart(node, fault.name)

    def _torn_tail(self, fault: PlannedFault, group: str, partition: int) -> None:
        self._corrupt_follower(fault, partition, "torn-tail")

    def _bit_flip(self, fault: PlannedFault, group: str, partition: int) -> None:
        self._corrupt_follower(fault, partition, "bit-flip")

    def _disk_full(self, fault: PlannedFault, group: str, partition: int) -> None:
        node = self._leader_node(partition)
        directory = node_dir(self.cluster.data_dir, node)
        if not os.path.ismount(directory):
            raise FaultSkipped("the node's data directory is not a filesystem of its own")
        led = self._partitions_led_by(node)
        old = {s["partition"]: s for s in self.cluster.shard_status(timeout_s=3)}
        ballast = os.path.join(directory, BALLAST)
        try:
            filled = fill_disk(ballast)
            # The fault takes effect once the disk is full (the leader served until then).
            t = self._record("disk-full", {"node": node, "leads": led, "filled_bytes": filled})
            d = Disruption("disk-full", t, sorted(led), old=old, node=node)
            time.sleep(fault.duration)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(ballast)
        self._heal("disk-full", {"node": node, "step": "freed"})
        # A log that failed on a full disk stays failed until its node restarts (Kafka's offline log
        # directory, KIP-112): the operator's restart.
        self._restart(node, "disk-full")
        self._served(d)

    def _full_restart(self, fault: PlannedFault, group: str, partition: int) -> None:
        nodes = self.cluster.coordinator_nodes()
        if not nodes:
            raise FaultSkipped("no coordinator node is up")
        old = {s["partition"]: s for s in self.cluster.shard_status(timeout_s=3)}
        t = self._record("full-restart", {"nodes": nodes})
        for node in nodes:
            self.cluster.kill_node(node, graceful=False)
        time.sleep(fault.duration)
        for node in nodes:
            self.cluster.restart_node(node)
        self._heal("full-restart", {"nodes": nodes})
        self._disrupted("full-restart", t, list(range(self.cluster.num_partitions)), old)

    def _head_restart(self, fault: PlannedFault, group: str, partition: int) -> None:
        """The head's GCS and the controller down for the fault's duration: nothing fails over (no node is
        lost), so this is no disruption of a partition; the checker judges the groups' commits across it."""
        self._record("head-restart", {"down_s": fault.duration})
        outage = self.cluster.restart_head(fault.duration)
        self._heal("head-restart", outage)


    # --- host faults (real hosts: deploy/chaos_hosts.py) ---------------------------------------------------
    def _need_hosts(self) -> Any:
        if self.hosts is None:
            raise FaultSkipped("this run has no real hosts")
        return self.hosts

    def _host_down(self, fault: PlannedFault, node: str, inject, undo, what: dict) -> None:
        """A fault that silences the host of ``node`` until it is undone: its partitions fail over meanwhile
        (waited on, bounded), then after the fault's duration it is undone and the node is back in Ray (started
        again if Ray declared it dead meanwhile)."""
        hosts = self._need_hosts()
        before = alive_node_ids(node)
        led = self._partitions_led_by(node)
        old = {s["partition"]: s for s in self.cluster.shard_status(timeout_s=3)}
        t = self._record(fault.name, {"node": node, "leads": led, **what})
        inject()
        try:
            self._served(Disruption(fault.name, t, sorted(led), old=old, node=node))
            time.sleep(fault.duration)
        finally:
            undo()
        self._heal(fault.name, {"node": node, **what})
        self._heal(fault.name, {"node": node, "step": "back in Ray", "ray": back_in_ray(hosts, node, before)})

    def _host_partition(self, fault: PlannedFault, group: str, partition: int) -> None:
        node = self._leader_node(partition)
        hosts = self._need_hosts()
        self._host_down(fault, node, lambda: hosts.cut(node), lambda: hosts.heal(node), {"link": "down"})

    def _leader_isolate(self, fault: PlannedFault, group: str, partition: int) -> None:
        node = self._leader_node(partition)
        hosts = self._need_hosts()
        self._host_down(fault, node, lambda: hosts.isolate(node, hosts.head), lambda: hosts.reconnect(node, hosts.head),
                        {"isolated_from": hosts.head})

    def _host_pause(self, fault: PlannedFault, group: str, partition: int) -> None:
        node = self._leader_node(partition)
        hosts = self._need_hosts()
        self._host_down(fault, node, lambda: hosts.pause(node), lambda: hosts.resume(node), {"paused": True})

    def _head_isolate(self, fault: PlannedFault, group: str, partition: int) -> None:
        """The head cut off every coordinator host (its clients still reach it): no partition is disrupted
        by the cut itself; whatever Ray does about nodes its GCS cannot see is what the run measures."""
        hosts = self._need_hosts()
        nodes = [n for n in hosts.coordinator_hosts() if alive_node_ids(n)]
        before = {n: alive_node_ids(n) for n in nodes}
        old = {s["partition"]: s for s in self.cluster.shard_status(timeout_s=3)}
        leaders = self.cluster.partition_leaders()
        t = self._record("head-isolate", {"head": hosts.head, "nodes": nodes})
        for n in nodes:
            hosts.isolate(hosts.head, n)
        try:
            time.sleep(fault.duration)
        finally:
            for n in nodes:
                hosts.reconnect(hosts.head, n)
        self._heal("head-isolate", {"head": hosts.head, "nodes": nodes})
        with ThreadPoolExecutor(len(nodes) or 1) as pool:  # Ray started on each host at once, as after an outage
            back = dict(zip(nodes, pool.map(lambda n: back_in_ray(hosts, n, before[n]), nodes), strict=True))
        self._heal("head-isolate", {"head": hosts.head, "step": "back in Ray", "ray": back})
        restarted = [p for p, leader in leaders.items() if back.get(leader) == "restarted"]
        if restarted:
            self._disrupted("head-isolate", t, restarted, old)


def _wait_unlocked(directory: str, timeout_s: float = 30.0) -> None:
    """Wait until no process holds the replica's log open (its writer's flock on ``.lock``)."""
    path = os.path.join(directory, LOCK_FILE)
    if not os.path.exists(path):
        return
    deadline = time.monotonic() + timeout_s
    fd = os.open(path, os.O_RDWR)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the log in {directory} is still open {timeout_s:g} s after its node was "
                                       f"killed") from None
                time.sleep(0.05)
    finally:
        os.close(fd)


BALLAST = ".chaos-ballast"


def fill_disk(path: str, chunk: int = 1 << 20) -> int:
    """Write zeros to ``path`` until its filesystem is full (ENOSPC); the bytes written."""
    written = 0
    block = bytes(chunk)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            try:
                n = os.write(fd, block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    return written
                block = bytes(max(1, len(block) // 16))  # fill the last bytes too
                continue
            written += n
    finally:
        os.close(fd)


class Process:
    """A process to signal by a pidfd (Linux): the signal reaches the process the pid named when this was
    opened, never another one that reused its pid after it died."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd: int | None = None

    def __enter__(self) -> Process:
        try:
            self._fd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            raise FaultSkipped(f"process {self.pid} is gone") from None
        return self

    def signal(self, sig: int) -> bool:
        """Send ``sig``; False if the process has exited meanwhile."""
        try:
            signal.pidfd_send_signal(self._fd, sig)
            return True
        except ProcessLookupError:
            return False

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
