"""``raygroups chaos run``: the failover chaos benchmark.

A run starts the embedded default (a simulated cluster of ``nodes`` coordinator nodes; ``nodes=1``: a
single-node Ray) or attaches to a deployment (``address``), then:

1. the workload: ``groups`` groups of ``consumers`` consumer actors over a live synthetic topic, committing
   as they go, each group speaking the classic protocol or KIP-848's consumer protocol (``group_protocol``:
   classic, consumer, or mixed: every other group), plus probes fetching committed offsets, a client deleting
   scratch groups, and an availability probe per coordinator partition committing at a fixed rate
   (``raygroups.chaos.workload``), all recording their operations;
2. once every group is stable and committing, the seeded fault schedule (``raygroups.chaos.faults``) for
   ``seconds``, injected one fault after another by the nemesis (``raygroups.chaos.nemesis``), which lets the
   deployment settle (every node up, every partition fully replicated) after each;
3. a calm end: the consumers stop (commit, leave), the probes read every partition once more, and the
   audit asks every leader for the digests of its live state and of its log's replay and for the membership
   changes its log records (written into the history as operations of the ``coordinator`` process), and
   every in-sync replica for its batches per leader epoch;
4. ``DIR/history.jsonl`` (the pinned schema), the checker's verdict, ``DIR/report.json``,
   ``DIR/timeline.png`` and ``DIR/failover-cdf.png`` (``raygroups.chaos.report``).

Everything Ray, raylets and Spark would print goes to ``DIR/ray-output.log``; the terminal shows a live
view and the summary.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import ray

from raygroups.chaos.faults import COMPACTION_FAULTS, CONSUMER_FAULTS, PlannedFault, schedule
from raygroups.chaos.nemesis import Nemesis
from raygroups.chaos.workload import (
    TOPIC,
    AvailabilityProbe,
    ChaosConsumer,
    EventLog,
    HistoryEvent,
    Lifecycle,
    Probe,
    clock,
    fetch,
)
from raygroups.coordinator.partitioning import partition_for
from raygroups.deployment.seam import create_worker
from raygroups.sources import SyntheticSource
from raygroups.stats import percentile

WARMUP_TIMEOUT_S = 180.0
CALM_S = 3.0


@dataclass
class RunOptions:
    seconds: float = 60.0
    seed: int = 1
    faults: list[str] = field(default_factory=list)
    rate: float = 12.0  # faults per minute
    groups: int = 3
    consumers: int = 3
    topic_partitions: int = 6
    nodes: int = 3
    num_partitions: int = 8
    records_per_second: float = 200.0
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 10_000
    probes: int = 2
    # Each coordinator partition's availability probe commits this often (the report's availability).
    availability_interval_s: float = 0.5
    # Kafka's group.protocol of the groups: "classic", "consumer" (KIP-848) or "mixed" (every other group
    # speaks the consumer protocol, the first classic).
    group_protocol: str = "mixed"
    out: str = "chaos-out"
    address: str | None = None
    namespace: str = "raygroups"
    config: dict = field(default_factory=dict)  # properties of the embedded default's coordinator
    # A compaction round this often (seconds) by the operator's watch mode beside the run; None: none.
    compaction_every_s: float | None = None


GROUP_PROTOCOLS = ("classic", "consumer", "mixed")
HEARTBEAT_INTERVAL_MS = 1_000


def coordinator_config(extra: dict, session_timeout_ms: int = RunOptions.session_timeout_ms) -> dict:
    """The embedded default's coordinator properties: the run's own, then ``extra`` (checked: a
    ``ValueError`` names a property that does not exist, a value out of its range, or session bounds that
    refuse the workload's consumers). A consumer-protocol group's session is the coordinator's
    (``group.consumer.session.timeout.ms``, KIP-848): the run gives it the classic consumers' timeout, so
    that both kinds of group lose a member as fast."""
    from raygroups.coordinator.config import CoordinatorConfig

    config = {"group.initial.rebalance.delay.ms": 1_000, "group.min.session.timeout.ms": 1_000,
              "group.consumer.min.session.timeout.ms": 1_000,
              "group.consumer.session.timeout.ms": session_timeout_ms,
              "group.consumer.min.heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
              "group.consumer.heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS, **extra}
    c = CoordinatorConfig.from_properties(config)
    if not c.group_min_session_timeout_ms <= session_timeout_ms <= c.group_max_session_timeout_ms:
        raise ValueError(f"the workload's consumers use {session_timeout_ms} ms sessions: "
                         f"group.min.session.timeout.ms ({c.group_min_session_timeout_ms}) and "
                         f"group.max.session.timeout.ms ({c.group_max_session_timeout_ms}) must allow them")
    return config


def group_protocols(groups: list[str], group_protocol: str) -> dict[str, str]:
    """Each group's protocol for a run's ``--group-protocol`` (``ValueError`` for an unknown one)."""
    if group_protocol not in GROUP_PROTOCOLS:
        raise ValueError(f"group protocol must be one of {', '.join(GROUP_PROTOCOLS)}, got {group_protocol!r}")
    if group_protocol != "mixed":
        return dict.fromkeys(groups, group_protocol)
    return {g: "consumer" if i % 2 else "classic" for i, g in enumerate(groups)}


@dataclass
class RunResult:
    ok: bool
    report: dict
    out: str


class Workload:
    """The clients of a run: consumer actors per group (replaced when they die), probes and the lifecycle
    client; collects what they record."""

    def __init__(self, cluster: Any, options: RunOptions, t0: float) -> None:
        self.cluster = cluster
        self.options = options
        self.t0 = t0
        self.groups = [f"chaos-group-{i}" for i in range(options.groups)]
        self.protocols = group_protocols(self.groups, options.group_protocol)
        self.source = SyntheticSource({TOPIC: options.topic_partitions}, records_per_partition=None,
                                      records_per_second=options.records_per_second)
        self.events: list[HistoryEvent] = []
        self.outcomes = {"ok": 0, "fail": 0, "info": 0}
        self.views = {g: {"generation": -1, "commits": 0} for g in self.groups}
        self.committed: set[tuple[str, int]] = set()
        self.log = EventLog("workload", t0)
        self._lock = threading.RLock()
        self._next = 0
        self._slots: dict[str, list[dict]] = {g: [] for g in self.groups}
        self._retired: list[dict] = []
        self._early: list[HistoryEvent] = []  # drained from a consumer just before the nemesis killed it
        self._stop = threading.Event()
        self._threads: list[Any] = []
        self._availability: list[AvailabilityProbe] = []
        if cluster.replicated or cluster.consumer_resources:
            self._resources = cluster.consumer_resources
        else:  # a deployment reached by address: keep the clients on this host (one clock for the history)
            self._resources = {f"node:{ray.util.get_node_ip_address()}": 0.001}

    def partition_of(self, group: str) -> int:
        return partition_for(group, self.cluster.num_partitions)

    # --- starting and stopping ----------------------------------------------------------------------
    def start(self) -> None:
        if self.cluster.topics().get(TOPIC) != self.options.topic_partitions:
            self.cluster.create_topic(TOPIC, self.options.topic_partitions)
        for group in self.groups:
            for _ in range(self.options.consumers):
                self._start_consumer(group)
        client = self.cluster.client()
        keys = [(g, TOPIC, p) for g in self.groups for p in range(self.options.topic_partitions)]
        for i in range(self.options.probes):
            self._threads.append(Probe(client, f"probe-{i}", self.t0, keys[i::self.options.probes] or keys, self._stop))
        self._threads.append(Lifecycle(client, "scratch", self.t0, "chaos-scratch", self._stop))
        # The availability probes get a client of their own, as another application would have.
        probe_client = self.cluster.client()
        self._availability = [AvailabilityProbe(probe_client, p, self.cluster.num_partitions, self.t0, self._stop,
                                                self.options.availability_interval_s)
                              for p in range(self.cluster.num_partitions)]
        self._threads.extend(self._availability)
        for t in self._threads:
            t.start()

    def _start_consumer(self, group: str) -> None:
        with self._lock:
            process = f"g{self.groups.index(group)}-c{self._next}"
            self._next += 1
            # A consumer-protocol group's session is the coordinator's, which ``coordinator_config`` sets to
            # the same timeout (a deployment reached by address keeps its own: the checker's allowance then
            # assumes this one).
            value = {"group": group, "consumer": process, "session_timeout_ms": self.options.session_timeout_ms,
                     "rebalance_timeout_ms": self.options.rebalance_timeout_ms,
                     "group_protocol": self.protocols[group]}
            self.log.add("invoke", "start-consumer", value)
            self.log.add("ok", "start-consumer", value)
            options = {"assignors": ("cooperative-sticky",), "session_timeout_ms": self.options.session_timeout_ms,
                       "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
                       "max_poll_interval_ms": self.options.rebalance_timeout_ms,
                       "group_protocol": self.protocols[group]}
            actor = create_worker(ChaosConsumer, self.cluster.namespace, self.cluster.namespace, group, process,
                                  self.source, self.t0, options, 0.5, resources=self._resources)
            self._slots[group].append({"process": process, "actor": actor, "run": actor.run.remote(),
                                       "pid": actor.pid.remote(), "drain": None, "dead": False})

    def kill_consumer(self, group: str, pick: int, record) -> str | None:
        with self._lock:
            live = [s for s in self._slots[group] if not s["dead"]]
            if not live:
                return None
            slot = live[pick % len(live)]
            # What it recorded up to now (its last acknowledged commits matter most) goes with it otherwise.
            try:
                self._early.extend(ray.get(slot["actor"].drain.remote(), timeout=2))
            except (ray.exceptions.RayError, TimeoutError):
                pass
            record({"group": group, "consumer": slot["process"]})
            ray.kill(slot["actor"], no_restart=True)
            slot["dead"] = True
        return slot["process"]

    def consumer_pid(self, group: str, pick: int) -> tuple[str | None, int | None]:
        with self._lock:
            live = [s for s in self._slots[group] if not s["dead"]]
            if not live:
                return None, None
            slot = live[pick % len(live)]
        try:
            return slot["process"], ray.get(slot["pid"], timeout=10)
        except (ray.exceptions.RayError, TimeoutError):
            return None, None

    def maintain(self) -> None:
        """Replace consumers that died (killed by the nemesis, or ended by a fatal error)."""
        with self._lock:
            for group, slots in self._slots.items():
                for slot in list(slots):
                    if not slot["dead"]:
                        ready, _ = ray.wait([slot["run"]], timeout=0)
                        if not ready:
                            continue
                        slot["dead"] = True
                        try:
                            slot["fatal"] = ray.get(slot["run"], timeout=0)
                        except ray.exceptions.RayError as e:
                            slot["fatal"] = type(e).__name__
                    if slot["dead"] and slot["drain"] is None:
                        slots.remove(slot)
                        self._retired.append(slot)
                        self._start_consumer(group)

    def collect(self, wait_s: float = 0.0) -> None:
        """Take what every client recorded so far (a paused consumer's share comes later)."""
        pending = []
        with self._lock:
            slots = [s for slots in self._slots.values() for s in slots] + self._retired
            for slot in slots:
                if slot["drain"] is None and not (slot["dead"] and slot.get("drained")):
                    slot["drain"] = slot["actor"].drain.remote()
                pending.append(slot)
        refs = [s["drain"] for s in pending if s["drain"] is not None]
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=wait_s)[0]) if refs else set()
        out: list[HistoryEvent] = []
        with self._lock:
            for slot in pending:
                ref = slot["drain"]
                if ref is None or ref not in ready:
                    continue
                slot["drain"] = None
                try:
                    out.extend(ray.get(ref, timeout=0))
                except ray.exceptions.RayError:
                    slot["drained"] = True  # dead: what it did not hand over is gone with it
                if slot["dead"]:
                    slot["drained"] = True
            self._retired = [s for s in self._retired if not s.get("drained")]
        for t in self._threads:
            out.extend(t.events.drain())
        out.extend(self.log.drain())
        with self._lock:
            out.extend(self._early)
            self._early = []
        self._count(out)
        self.events.extend(out)

    def _count(self, events: list[HistoryEvent]) -> None:
        """Keep what the live view shows up to date as events come in (never rescanning the history)."""
        for _t, _process, type_, f, value in events:
            if type_ in self.outcomes:
                self.outcomes[type_] += 1
            g = value.get("group")
            if g in self.views:
                if f == "assign" and type_ == "ok":
                    self.views[g]["generation"] = max(self.views[g]["generation"], value["generation"])
                elif f == "commit" and type_ == "ok":
                    self.views[g]["commits"] += 1
                    self.committed.add((g, value["partition"]))

    def stop(self) -> None:
        """Stop every consumer (each commits and leaves), then the probes after a last read of each key."""
        with self._lock:
            slots = [s for slots in self._slots.values() for s in slots if not s["dead"]]
            for slot in slots:
                self.log.add("invoke", "stop-consumer", {"group": self._group_of(slot), "consumer": slot["process"]})
                self.log.add("ok", "stop-consumer", {"group": self._group_of(slot), "consumer": slot["process"]})
            for slot in slots:
                slot["actor"].stop.remote()
        ray.wait([s["run"] for s in slots], num_returns=len(slots), timeout=60)
        self.collect(wait_s=10)
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)
        final = EventLog("final-read", self.t0)
        client = self.cluster.client()
        for group in self.groups:
            for p in range(self.options.topic_partitions):
                fetch(client, final, group, TOPIC, p, 30)
        for probe in self._availability:
            probe.final_read(client, final, 30)
        finals = final.drain()
        self._count(finals)
        self.events.extend(finals)
        for slot in slots:
            ray.kill(slot["actor"], no_restart=True)
            slot["dead"] = True
        self.collect()

    def abort(self) -> None:
        """Stop every client thread (idempotent; ``stop`` is the orderly end): a run cut short by an error
        must leave no probe looping against a closed client."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=20)

    def _group_of(self, slot: dict) -> str:
        return next(g for g, slots in self._slots.items() if slot in slots)

    # --- what the live view shows ----------------------------------------------------------------
    def group_views(self) -> dict[str, dict]:
        with self._lock:
            return {g: {**v, "consumers": sum(1 for s in self._slots[g] if not s["dead"]),
                        "protocol": self.protocols[g]} for g, v in self.views.items()}

    def committing_everywhere(self) -> bool:
        return len(self.committed) >= self.options.groups * self.options.topic_partitions


COORDINATOR_PROCESS = "coordinator"


def coordinator_events(changes: list[dict], wall_t0: float) -> list[HistoryEvent]:
    """The membership changes a leader's log shows (``offsets_log.membership``) as operations of the
    ``coordinator`` process: ``member-added`` / ``member-removed``, invoked and acknowledged at the run time
    of the batch that recorded it (its wall-clock timestamp less the run's wall-clock start ``wall_t0``);
    value: group, member, client_id, group_instance_id, generation (classic) or epoch (consumer group),
    offset. Changes from before the run started are left out."""
    out: list[HistoryEvent] = []
    for c in sorted(changes, key=lambda c: c["timestamp_ms"]):
        t = c["timestamp_ms"] / 1000.0 - wall_t0
        if t < 0:
            continue
        value = {k: c[k] for k in ("group", "member", "client_id", "group_instance_id", "offset")}
        if c["protocol"] == "classic":
            value["generation"] = c["generation"]
        else:
            value["epoch"] = c["epoch"]
        f = f"member-{c['change']}"
        out.append((t, COORDINATOR_PROCESS, "invoke", f, value))
        out.append((t, COORDINATOR_PROCESS, "ok", f, value))
    return out


def audit(cluster: Any, t0: float, wall_t0: float | None = None) -> list[HistoryEvent]:
    """The shards' own records at the end: per partition, the leader's digests and every in-sync replica's
    batches per epoch, below the lowest log end among them and from the furthest compacted prefix's end;
    and, with the run's wall-clock start ``wall_t0``, the membership changes each leader's log shows
    (``coordinator_events``)."""
    log = EventLog("auditor", t0)
    decided: list[dict] = []
    from raygroups.deployment.seam import Directory

    directory = Directory(cluster.namespace)
    for p in range(cluster.num_partitions):
        isr: list[str] = []
        leader = None
        if cluster.replicated:
            state = cluster.partition_state(p)
            leader, isr = state["leader"], [n for n in state["isr"] if n != state["leader"]]
        try:
            states = [ray.get(cluster.shard(p).status.remote(), timeout=30)]
            states += [ray.get(directory.log_server(node).state.remote(p), timeout=30) for node in isr]
            ends = [s["log_end_offset"] for s in states]
            cleaned = [s.get("cleaned_offset") or 0 for s in states]
        except (ray.exceptions.RayError, TimeoutError, KeyError, ValueError):
            continue
        up_to = min(e for e in ends if e is not None) if all(e is not None for e in ends) else None
        # Below the furthest compacted prefix, each replica holds a version of the segments that compaction
        # proved equivalent (one that missed a swap keeps its originals): the batches are compared from there.
        since = max(cleaned)
        value = {"partition": p, "node": leader, "up_to": up_to}
        log.add("invoke", "digest", value)
        try:
            a = ray.get(cluster.shard(p).audit.remote(up_to, since), timeout=120)
        except (ray.exceptions.RayError, TimeoutError) as e:
            log.add("info", "digest", {**value, "error": type(e).__name__})
            continue
        log.add("ok", "digest", {**value, "live": a["live"], "replay": a["replay"], "leader_epoch": a["leader_epoch"]})
        decided.extend(a.get("membership") or [])
        log.add("invoke", "replica-log", {"partition": p, "node": a["node"] or "local"})
        log.add("ok", "replica-log", {"partition": p, "node": a["node"] or "local", "up_to": up_to, "since": since,
                                      "runs": a["runs"]})
        for node in isr:
            log.add("invoke", "replica-log", {"partition": p, "node": node})
            try:
                r = ray.get(directory.log_server(node).audit.remote(p, up_to, since), timeout=120)
            except (ray.exceptions.RayError, TimeoutError) as e:
                log.add("info", "replica-log", {"partition": p, "node": node, "error": type(e).__name__})
                continue
            log.add("ok", "replica-log", {"partition": p, "node": node, "up_to": up_to, "since": since,
                                          "runs": r["runs"]})
    return log.drain() + (coordinator_events(decided, wall_t0) if wall_t0 is not None else [])


def write_history(path: str, events: list[HistoryEvent]) -> int:
    """Write the events merged by time (each client's own events are already in order: a stable sort keeps
    them so)."""
    events = sorted(events, key=lambda e: e[0])
    with open(path, "w", encoding="utf-8") as f:
        for t, process, type_, fn, value in events:
            f.write(json.dumps({"time": round(max(t, 0.0), 6), "process": process, "type": type_, "f": fn,
                                "value": value}, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return len(events)


@contextlib.contextmanager
def quiet_output(log_path: str, restore: bool = True):
    """Send this process's file descriptors 1 and 2 (and so everything Ray's processes started from here
    print: raylet state dumps, worker logs) to ``log_path``; yield a text stream to the real terminal.
    ``restore=False`` leaves them there (a command line that exits next: Ray's exit handlers print too)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    terminal = os.fdopen(os.dup(saved_out), "w", buffering=1)
    try:
        yield terminal
    finally:
        terminal.flush()
        if restore:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            for f in (fd, saved_out, saved_err):
                os.close(f)
            terminal.close()


def run(options: RunOptions, faults: list[str], view: Any, hosts: Any = None) -> RunResult:
    """One chaos run (see the module docstring); ``view`` shows progress (``raygroups.chaos.live``). With
    ``hosts`` (a ``raygroups.chaos.hosts.HostControl``), the deployment at ``options.address`` runs on those
    real hosts, and this process on a Ray node of its own beside them, where the clients run."""
    from raygroups.chaos.checker import check
    from raygroups.chaos.compaction import CHAOS_SEGMENT_BYTES
    from raygroups.chaos.history import read_history
    from raygroups.chaos.report import build_report, plot_failover_cdf, plot_timeline
    from raygroups.deployment.start import connect, start_local

    os.makedirs(options.out, exist_ok=True)
    extra = options.config
    if options.compaction_every_s is not None:  # segments the rounds can compact within a run of minutes
        extra = {"offsets.topic.segment.bytes": CHAOS_SEGMENT_BYTES, **extra}
    config = coordinator_config(extra, options.session_timeout_ms)
    disks = NodeDisks(options.nodes) if options.address is None and options.nodes > 1 and "disk-full" in faults \
        else None
    left_out = None
    if disks is not None and not disks.mounted:
        faults = [f for f in faults if f != "disk-full"]
        left_out, disks = f"disk-full left out: {disks.why}", None
    plan = schedule(options.seed, options.seconds, options.rate, faults, options.groups)
    view.starting(options, plan)
    if left_out:
        view.phase(left_out)
    try:
        if hosts is not None:
            from raygroups.chaos.hosts import HostedCluster

            cluster = HostedCluster(connect(options.address, options.namespace), hosts)
        elif options.address is not None:
            cluster = connect(options.address, options.namespace)
        elif options.nodes > 1:
            cluster = start_local(num_partitions=options.num_partitions, num_nodes=options.nodes, config=config,
                                  namespace=options.namespace, data_dir=disks.root if disks else None)
        else:
            cluster = start_local(num_partitions=options.num_partitions, config=config, namespace=options.namespace)
    except BaseException:
        if disks is not None:
            disks.remove()
        raise
    workload = nemesis = None
    try:
        baseline = _noop_call_ms(cluster)
        t0 = clock()
        wall_t0 = time.time()  # the same instant on the wall clock: the coordinators' batches are timed on it
        workload = Workload(cluster, options, t0)
        nemesis = Nemesis(cluster, workload, EventLog("nemesis", t0), options.session_timeout_ms / 1000.0)
        nemesis.controller_events = ControllerEvents(cluster)
        workload.start()
        view.phase("warm-up: the groups form and start committing")
        deadline = time.monotonic() + WARMUP_TIMEOUT_S
        while not workload.committing_everywhere():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the groups did not commit on every partition within {WARMUP_TIMEOUT_S:g} s")
            _tick(workload, view, nemesis, [])
        faults_started = clock()
        view.phase(f"faults: {len(plan)} planned over {options.seconds:g} s")
        # The nemesis runs in this thread (Ray starts a simulated node's processes from the main thread
        # only); collecting the clients' events and the view run beside it.
        current: list[PlannedFault | None] = [None, None, None]
        stop_ticking = threading.Event()
        ticker = threading.Thread(target=_tick_until, args=(stop_ticking, workload, view, nemesis, current),
                                  daemon=True)
        ticker.start()
        nemesis.faults_until = faults_started + options.seconds
        if options.compaction_every_s is not None:
            nemesis.compaction = _start_compaction(cluster, options, t0)
        try:
            _run_nemesis(nemesis, plan, workload, faults_started, options.seconds, current)
            nemesis.events.add("info", "heal", {"fault": "end-of-faults"})
            if nemesis.compaction is not None:
                view.phase("compaction: the watch process stops")
                nemesis.compaction.stop()
            view.phase("calm: settling, then the consumers stop and the probes read once more")
            nemesis.settle()
            time.sleep(CALM_S)
        finally:
            stop_ticking.set()
            ticker.join(timeout=30)
        workload.stop()
        view.phase("audit: digests and replicas' batches per epoch")
        events = workload.events + nemesis.events.drain() + audit(cluster, t0, wall_t0)
        if nemesis.compaction is not None:
            events += nemesis.compaction.events.drain()
        if cluster.replicated:
            nemesis.controller_events.write(os.path.join(options.out, "controller-events.jsonl"), nemesis.wall_t0)
        history_path = os.path.join(options.out, "history.jsonl")
        write_history(history_path, events)
        history = read_history(history_path)
        result = check(history)
        report = build_report(history, result, nemesis, options, faults_started - t0,
                              {"replicated": cluster.replicated, "coordinator_partitions": cluster.num_partitions,
                               "group_partitions": {g: workload.partition_of(g) for g in workload.groups},
                               "faults_planned": dict(Counter(f.name for f in plan)),
                               "group_protocols": workload.protocols})
        report["options"] = {**asdict(options), "faults": faults}
        report["baseline"] = {"noop_actor_call_ms": baseline}
        with open(os.path.join(options.out, "report.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, sort_keys=True)
        plot_timeline(history, report, os.path.join(options.out, "timeline.png"))
        plot_failover_cdf(report, os.path.join(options.out, "failover-cdf.png"))
        return RunResult(result.ok, report, options.out)
    finally:
        try:
            if nemesis is not None and nemesis.compaction is not None:
                nemesis.compaction.stop()
            if workload is not None:
                workload.abort()
            cluster.shutdown()
        finally:
            if disks is not None:
                disks.remove()


class NodeDisks:
    """For a simulated cluster: each coordinator node's data directory on a small filesystem of its own (a
    tmpfs of ``size_mb``), so that ``disk-full`` fills one node's disk and nothing else. Needs the right to
    mount (root); otherwise ``mounted`` is False and ``why`` says why."""

    def __init__(self, nodes: int, size_mb: int = 512) -> None:
        self.root = tempfile.mkdtemp(prefix="raygroups-chaos-")
        self.mounts: list[str] = []
        self.why = ""
        for i in range(nodes):
            path = os.path.join(self.root, f"node-{i}")
            os.makedirs(path)
            try:
                done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", path],
                                      capture_output=True, text=True, check=False)
            except OSError as e:  # no mount(8) here
                self.why = f"cannot mount a tmpfs per node ({e})"
                break
            if done.returncode != 0:
                self.why = f"cannot mount a tmpfs per node ({done.stderr.strip() or done.returncode})"
                break
            self.mounts.append(path)
        self.mounted = len(self.mounts) == nodes
        if not self.mounted:
            self.remove()

    def remove(self) -> None:
        for path in self.mounts:
            with contextlib.suppress(OSError):
                subprocess.run(["umount", "-l", path], capture_output=True, check=False)
        self.mounts = []
        shutil.rmtree(self.root, ignore_errors=True)


def _noop_call_ms(cluster: Any, calls: int = 200) -> dict:
    """The floor a commit's latency compares with, measured in the same run: a no-op call to a shard actor
    (its ``ping``), one after another."""
    shard = cluster.shard(0)
    ray.get(shard.ping.remote(), timeout=60)
    took = []
    for _ in range(calls):
        start = time.perf_counter()
        ray.get(shard.ping.remote(), timeout=60)
        took.append((time.perf_counter() - start) * 1000)
    return {"p50": round(percentile(took, 0.5), 3), "p99": round(percentile(took, 0.99), 3)}


class ControllerEvents:
    """The controller's recent events, gathered during the run (a restarted controller starts a new list),
    for ``controller-events.jsonl`` beside the history: what a reader of a violation wants next."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.events: dict[str, dict] = {}
        self._next = 0.0

    def poll(self, every_s: float = 3.0) -> None:
        if not self.cluster.replicated or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + every_s
        try:
            for e in self.cluster.controller_events():
                self.events.setdefault(json.dumps(e, sort_keys=True, default=str), e)
        except (ray.exceptions.RayError, TimeoutError, ValueError):
            pass

    def write(self, path: str, t0: float) -> None:
        self.poll(every_s=0)
        with open(path, "w", encoding="utf-8") as f:
            for e in sorted(self.events.values(), key=lambda e: e["t"]):
                f.write(json.dumps({**e, "t": round(e["t"] - t0, 3)}, default=str) + "\n")


def _start_compaction(cluster: Any, options: RunOptions, t0: float) -> Any:
    """The operator's watch mode against this run's deployment, supervised (``raygroups.chaos.compaction``)."""
    from raygroups.chaos.compaction import CompactionRounds

    address = options.address or ray.get_runtime_context().gcs_address
    rounds = CompactionRounds(address, cluster.namespace, options.compaction_every_s, t0,
                              os.path.join(options.out, "compaction.log"))
    rounds.start()
    return rounds


def _tick(workload: Workload, view: Any, nemesis: Nemesis, faults: list[PlannedFault]) -> None:
    workload.collect(wait_s=0.3)
    workload.maintain()
    view.update(workload, nemesis, faults)
    nemesis.controller_events.poll()
    time.sleep(0.2)


def _tick_until(stop: threading.Event, workload: Workload, view: Any, nemesis: Nemesis, current: list) -> None:
    while not stop.is_set():
        _tick(workload, view, nemesis, [f for f in current if f is not None])


def _run_nemesis(nemesis: Nemesis, plan: list[PlannedFault], workload: Workload, started: float,
                 seconds: float, current: list) -> None:
    """Three lanes, each in schedule order: consumer faults and compaction faults (which wait for a round to
    reach their point) in threads of their own, every other fault in this thread (a simulated node starts
    from the main thread only), the deployment settling after each."""
    lanes = [threading.Thread(target=_lane, args=(nemesis, [f for f in plan if f.name in names], workload, started,
                                                  seconds, current, slot, False), daemon=True)
             for slot, names in ((1, CONSUMER_FAULTS), (2, COMPACTION_FAULTS))]
    for lane in lanes:
        lane.start()
    _lane(nemesis, [f for f in plan if f.name not in (*CONSUMER_FAULTS, *COMPACTION_FAULTS)], workload, started,
          seconds, current, 0, True)
    for lane in lanes:
        lane.join()


def _lane(nemesis: Nemesis, plan: list[PlannedFault], workload: Workload, started: float, seconds: float,
          current: list, slot: int, settle: bool) -> None:
    for fault in plan:
        wait = started + fault.at - clock()
        if wait > 0:
            time.sleep(wait)
        if clock() - started > seconds:
            break
        current[slot] = fault
        try:
            nemesis.inject(fault, workload.groups)
        except Exception as e:  # noqa: BLE001 - a fault that could not be carried out is reported, the run goes on
            nemesis.errors.append({"fault": fault.name, "at": fault.at, "error": f"{type(e).__name__}: {e}"})
        current[slot] = None
        if settle and not nemesis.settle():
            nemesis.errors.append({"fault": fault.name, "at": fault.at, "error": "the deployment did not settle "
                                   "within the settle timeout", "state": nemesis.unsettled()})
    remaining = started + seconds - clock()
    if remaining > 0:
        time.sleep(remaining)
