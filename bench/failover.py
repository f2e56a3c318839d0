"""Failover of a coordinator partition on a simulated 3-node cluster, and the cost of replication.

For partitions holding 10 k / 100 k / 1 M records: kill the leader's node (raylet SIGKILL) and measure
the time from the kill to the first successful commit on that partition, broken down into detection
(kill → the controller sees the node dead), election (→ new leader chosen, epoch bumped, followers
fenced, shard started), replay (the new shard's load of its local replica) and client rediscovery (the
rest). Then the loss of a node leading several partitions (3 of 9 by default, 1 M records each), with
one spare per node and with one per followed partition (``shard.standby.per.partition``): each
partition's kill → first commit and whether its new shard was a promoted standby, a spare that replayed
the log or a new process. Then commit throughput at 64 clients with replication factor 3 vs 1, measured
in the same run.
Goals: failover ≤ detection + 1 s with 1 M records; RF 3 throughput ≥ 50 % of RF 1.

Writes ``bench/results/failover.json`` and prints a table. Run: ``.venv/bin/python bench/failover.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402
from raygroups.coordinator.errors import Errors  # noqa: E402
from raygroups.coordinator.messages import OffsetCommitRequest  # noqa: E402

from bench.throughput import _rate  # noqa: E402
from raygroups import partition_for  # noqa: E402
from raygroups.deployment.start import simulated_health_checks_text, start_local  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
OUT = sys.stdout  # the figures' stream: the real terminal once Ray's output goes to a log (never
# sys.stdout itself: Ray prints its raylets' messages to whatever sys.stdout is)
FILL_TOPIC = "fill"
FILL_PARTITIONS = 1000  # keys per commit request while filling


def _group_on(partition: int, num_partitions: int, prefix: str) -> str:
    return next(g for g in (f"{prefix}-{i}" for i in range(10_000)) if partition_for(g, num_partitions) == partition)


def _fill(cluster, group: str, records: int) -> float:
    client = cluster.client()
    start = time.perf_counter()
    sent = 0
    futures = []
    offset = 0
    while sent < records:
        n = min(FILL_PARTITIONS, records - sent)
        offset += 1
        futures.append(client.commit_offsets(group_id=group, offsets={(FILL_TOPIC, p): (offset, "") for p in range(n)}))
        sent += n
        if len(futures) >= 16:
            for f in futures:
                assert set(f.result(120).errors.values()) == {Errors.NONE}
            futures = []
    for f in futures:
        assert set(f.result(120).errors.values()) == {Errors.NONE}
    return time.perf_counter() - start


class DeclarationWatch:
    """When Ray declares a node dead: ``ray.nodes()`` read every 20 ms from the moment of the kill (a GCS
    call of about a millisecond), so the step from the kill to Ray's declaration is measured apart from the
    controller's reaction to it."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.declared_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> DeclarationWatch:
        self._thread.start()
        return self

    def _alive(self) -> bool:
        from raygroups.placement.nodes import NODE_LABEL

        return any(n.get("Alive") and (n.get("Labels") or {}).get(NODE_LABEL) == self.node for n in ray.nodes())

    def _watch(self) -> None:
        while not self._stop.is_set():
            if not self._alive():
                self.declared_at = time.time()
                return
            time.sleep(0.02)

    def stop(self) -> float | None:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.declared_at


def _failover_once(cluster, partition: int, group: str) -> dict:
    client = cluster.client()
    assert client.commit_offsets(group_id=group, offsets={(FILL_TOPIC, 0): (0, "")}).result(60).errors[(FILL_TOPIC, 0)] is Errors.NONE
    state = cluster.partition_state(partition)
    victim = state["leader"]
    events_before = len(cluster.controller_events())
    watch = DeclarationWatch(victim)
    t_kill = time.time()
    cluster.kill_node(victim, graceful=False)
    watch.start()
    # The killed node's worker processes can keep answering for up to ~1 s (its followers still accept
    # the old epoch, so what it acknowledges is durable): only commits served by the new leader count.
    attempts = 0
    while True:
        attempts += 1
        r = client.commit_offsets(group_id=group, offsets={(FILL_TOPIC, 0): (attempts, "")}).result(120)
        if r.errors[(FILL_TOPIC, 0)] is Errors.NONE and cluster.shard_status()[partition].get("node") not in (
                None, victim):
            t_ok = time.time()
            break
    declared = watch.stop()
    events = cluster.controller_events()[events_before:]
    dead = next((e["t"] for e in events if e["event"] == "node-dead" and e.get("node") == victim), None)
    elected = next((e["t"] for e in events if e["event"] == "failover" and e.get("partition") == partition), None)
    status = cluster.shard_status()[partition]
    replay_s = status.get("load_seconds") or 0.0
    total = t_ok - t_kill
    detection = (dead - t_kill) if dead else None
    election = (elected - dead) if (elected and dead) else None
    rediscovery = total - (detection or 0) - (election or 0) - replay_s
    # The new shard's own timeline: a spare the node kept running adopts the partition at once; without
    # one, a process is started (Ray's worker start and imports, about a second here).
    timeline = status.get("start_timeline") or {}
    began = timeline.get("adopted", timeline.get("constructed"))
    steps = {}
    if elected and began and "active" in timeline:
        steps = {"decision_to_shard_running_s": round(began - elected, 3),
                 "shard_load_s": round(timeline["active"] - began, 3),
                 # Within the load: the controller's epoch (which waits out the previous leader's lease
                 # while it may still be answering somewhere) and the in-sync followers levelled.
                 **({"epoch_granted_s": round(timeline["leader_granted"] - timeline["load_started"], 3)}
                    if "leader_granted" in timeline and "load_started" in timeline else {}),
                 **({"isr_reconciled_s": round(timeline["isr_reconciled"] - timeline["replayed"], 3)}
                    if "isr_reconciled" in timeline and "replayed" in timeline else {}),
                 "active_to_first_commit_s": round(t_ok - timeline["active"], 3)}
    return {"records": status.get("load_records"), "total_s": round(total, 3),
            # kill -> Ray declares the node dead -> the controller's node-dead event (its decision follows).
            "ray_declared_s": None if declared is None else round(declared - t_kill, 3),
            "controller_saw_death_s": None if declared is None or dead is None else round(dead - declared, 3),
            "detection_s": None if detection is None else round(detection, 3),
            "election_s": None if election is None else round(election, 3),
            "replay_s": round(replay_s, 3), "rediscovery_and_rest_s": round(rediscovery, 3),
            "new_shard": _new_shard(timeline), **steps,
            # A promoted hot standby replays only the records it had not read yet.
            "standby_tailed_records": status.get("standby_tailed"), "standby_refused": status.get("standby_refused"),
            "new_epoch": status.get("leader_epoch"), "victim": victim}


def _new_shard(timeline: dict) -> str:
    if "standby_promoted" in timeline:
        return "promoted standby"
    return "adopted spare" if "adopted" in timeline else "new process"


def _throughput(cluster, duration_s: float) -> float:
    cluster.create_topic("bench", 1)
    shard = cluster.shard(0)

    async def commit(i, n):  # one partition: every group lives on shard 0
        r = await shard.handle.remote(OffsetCommitRequest(f"tp{i}", {("bench", 0): (n, "", -1)}))
        assert r.errors[("bench", 0)] is Errors.NONE, r

    rate, _ = asyncio.new_event_loop().run_until_complete(_rate(commit, 64, duration_s))
    return rate


def _wait_full_isr(cluster, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        nodes = set(cluster.coordinator_nodes())
        states = [cluster.partition_state(p) for p in range(cluster.num_partitions)]
        if all(s["leader"] in nodes and len(s["isr"]) >= 3 for s in states):
            return
        time.sleep(0.5)
    states = {p: cluster.partition_state(p) for p in range(cluster.num_partitions)}
    raise TimeoutError(f"partitions did not get back to a full ISR: nodes {cluster.coordinator_nodes()}, "
                       f"partitions {states}, shards {cluster.shard_status()}")


CONFIG = {"group.min.session.timeout.ms": 10, "request.timeout.ms": 120_000}


def measure_failovers(sizes: list[int]) -> list[dict]:
    """On a simulated 3-node cluster, one partition per size: fill it with that many records, kill its
    leader's node and measure (``_failover_once``), then bring the node back under its name."""
    failovers = []
    cluster = start_local(num_partitions=len(sizes), num_nodes=3, config=CONFIG)
    try:
        cluster.create_topic(FILL_TOPIC, FILL_PARTITIONS)
        for partition, size in enumerate(sizes):
            group = _group_on(partition, cluster.num_partitions, "fill")
            fill_s = _fill(cluster, group, size)
            result = _failover_once(cluster, partition, group)
            result["fill_s"] = round(fill_s, 1)
            failovers.append(result)
            print(f"failover with {size:>10} records: {result}", flush=True, file=OUT)
            cluster.restart_node(result["victim"])  # back under its name: it rejoins the ISR of its partitions
            _wait_full_isr(cluster)
    finally:
        cluster.shutdown()
    return failovers


def _served_by_new_leader(cluster, partition: int, victim: str) -> dict | None:
    try:
        status = ray.get(cluster.shard(partition).status.remote(), timeout=5)
    except (ValueError, ray.exceptions.RayError):
        return None
    return status if status.get("node") not in (None, victim) else None


def _standbys_read(cluster, partitions: list[int]) -> bool:
    """Whether every follower of each of ``partitions`` has a running spare whose standby read its log to
    the end (the leader's log end offset)."""
    ends = {p: s["log_end_offset"] for p, s in enumerate(cluster.shard_status()) if p in partitions}
    for p in partitions:
        state = cluster.partition_state(p)
        for node in (n for n in state["isr"] if n != state["leader"]):
            standbys = cluster.standby_status(node).values()
            if not any(s["partitions"].get(p, {}).get("next_offset", -1) >= (ends[p] or 0) for s in standbys):
                return False
    return True


def _spare_costs(cluster, window_s: float = 5.0) -> dict:
    """Resident and unique memory of the running spares' processes (all on this machine), and the CPU they
    and the whole machine use over ``window_s`` while nothing is written (the standbys' polling)."""
    import psutil  # Ray's own dependency

    procs = []
    for node in cluster.coordinator_nodes():
        for s in cluster.standby_status(node).values():
            try:
                procs.append(psutil.Process(s["pid"]))
            except psutil.Error:
                continue
    rss, uss, cpu0 = [], [], {}
    for proc in procs:
        try:
            info = proc.memory_full_info()
            cpu0[proc.pid] = sum(proc.cpu_times()[:2])
        except psutil.Error:
            continue
        rss.append(info.rss)
        uss.append(info.uss)
    machine0, t0 = psutil.cpu_times(), time.monotonic()
    time.sleep(window_s)
    spent = 0.0
    for proc in procs:
        try:
            spent += sum(proc.cpu_times()[:2]) - cpu0[proc.pid]
        except (psutil.Error, KeyError):
            continue
    machine1, elapsed = psutil.cpu_times(), time.monotonic() - t0
    busy = (machine1.user + machine1.system - machine0.user - machine0.system) / elapsed
    return {"spares": len(rss), "rss_mb_mean": round(sum(rss) / len(rss) / 2**20, 1) if rss else None,
            "uss_mb_mean": round(sum(uss) / len(uss) / 2**20, 1) if uss else None,
            "spares_cpu_cores_idle": round(spent / elapsed, 3), "machine_cpu_cores_idle": round(busy, 3)}


def measure_node_loss(per_partition: bool, num_partitions: int, records: int) -> dict:
    """A node leading several partitions is lost (raylet SIGKILL) on a simulated 3-node cluster: each of its
    partitions, filled with ``records`` records, is measured from the kill to its first commit served by
    its new leader, with one spare per node (the default) or one per followed partition
    (``shard.standby.per.partition``)."""
    cluster = start_local(num_partitions=num_partitions, num_nodes=3,
                          config={**CONFIG, "shard.standby.per.partition": per_partition})
    try:
        cluster.create_topic(FILL_TOPIC, FILL_PARTITIONS)
        leaders = cluster.partition_leaders()
        victim = max(sorted(set(leaders.values())), key=list(leaders.values()).count)
        moved = sorted(p for p, n in leaders.items() if n == victim)
        groups = {p: _group_on(p, num_partitions, "loss") for p in moved}
        for p in moved:
            _fill(cluster, groups[p], records)
        deadline = time.monotonic() + 300
        while not _standbys_read(cluster, moved):
            if time.monotonic() > deadline:
                raise TimeoutError("the followers' standbys did not read the filled logs")
            time.sleep(0.5)
        memory = _spare_costs(cluster)
        client = cluster.client()
        events_before = len(cluster.controller_events())
        done: dict[int, tuple[float, dict]] = {}

        failed: dict[int, str] = {}
        give_up = time.monotonic() + 300

        def first_commit(p: int) -> None:
            n = 0
            try:
                while time.monotonic() < give_up:
                    n += 1
                    r = client.commit_offsets(group_id=groups[p], offsets={(FILL_TOPIC, 0): (n, "")}).result(120)
                    if r.errors[(FILL_TOPIC, 0)] is Errors.NONE:
                        status = _served_by_new_leader(cluster, p, victim)
                        if status is not None:
                            done[p] = (time.time(), status)
                            return
                failed[p] = "no commit served by a new leader within 300 s"
            except Exception as e:  # noqa: BLE001 - reported below with the partition
                failed[p] = f"{type(e).__name__}: {e}"

        t_kill = time.time()
        cluster.kill_node(victim, graceful=False)
        threads = [threading.Thread(target=first_commit, args=(p,), daemon=True) for p in moved]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failed:
            raise RuntimeError(f"node loss: partitions without a first commit: {failed}")
        events = cluster.controller_events()[events_before:]
        dead = next((e["t"] for e in events if e["event"] == "node-dead" and e.get("node") == victim), None)
        partitions = []
        for p in moved:
            t_ok, status = done[p]
            timeline = status.get("start_timeline") or {}
            partitions.append({"partition": p, "records": status.get("load_records"), "node": status["node"],
                               "total_s": round(t_ok - t_kill, 3), "new_shard": _new_shard(timeline),
                               "load_s": round(timeline["active"] - timeline.get("adopted", timeline["constructed"]), 3)
                               if "active" in timeline else None,
                               "standby_tailed_records": status.get("standby_tailed"),
                               "standby_refused": status.get("standby_refused")})
        return {"per_partition_spares": per_partition, "partitions_in_cluster": num_partitions,
                "records_per_partition": records, "victim": victim,
                "detection_s": None if dead is None else round(dead - t_kill, 3),
                "spare_processes_before": memory, "failovers": partitions}
    finally:
        cluster.shutdown()


def _machine() -> dict:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "ray": ray.__version__, "load_average_1m_at_end": round(os.getloadavg()[0], 2)}


def _print_failovers(failovers: list[dict]) -> None:
    print(f"{'records':>9} {'total':>7} {'Ray':>7} {'ctrl':>7} {'detect':>7} {'elect':>7} {'replay':>7} "
          f"{'rest':>7}  new shard", file=OUT)
    for f in failovers:
        print(f"{f['records'] or 0:>9} {f['total_s']:>7} {f['ray_declared_s']!s:>7} {f['controller_saw_death_s']!s:>7} "
              f"{f['detection_s']!s:>7} {f['election_s']!s:>7} {f['replay_s']:>7} {f['rediscovery_and_rest_s']:>7}  "
              f"{f['new_shard']}", file=OUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--node-loss-partitions", type=int, default=9,
                        help="partitions of the cluster whose busiest leader's node is lost (0: skip)")
    parser.add_argument("--node-loss-records", type=int, default=1_000_000, help="records in each of its partitions")
    parser.add_argument("--failover-only", action="store_true",
                        help="only the failovers of --sizes, with their steps; writes failover-steps.json")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    failovers = measure_failovers(sizes) if sizes else []
    if args.failover_only:
        RESULTS.mkdir(exist_ok=True)
        steps = {"machine": _machine(), "health_checks": simulated_health_checks_text(), "failover": failovers}
        (RESULTS / "failover-steps.json").write_text(json.dumps(steps, indent=2))
        _print_failovers(failovers)
        return
    node_loss = []
    if args.node_loss_partitions:
        for per_partition in (False, True):
            node_loss.append(measure_node_loss(per_partition, args.node_loss_partitions, args.node_loss_records))
            print(f"node loss, spare per partition {per_partition}: {node_loss[-1]}", flush=True, file=OUT)
    rates = {}
    for rf in (3, 1):
        c = start_local(num_partitions=1, num_nodes=3, config={**CONFIG, "offsets.topic.replication.factor": rf,
                                                              "min.insync.replicas": min(2, rf)})
        try:
            rates[rf] = _throughput(c, args.duration)
        finally:
            c.shutdown()
    result = {
        "machine": _machine(),
        "health_checks": simulated_health_checks_text(),
        "failover": failovers,
        "node_loss": node_loss,
        "commit_calls_per_s_64_clients": {"rf3": round(rates[3], 1), "rf1": round(rates[1], 1),
                                          "rf3_vs_rf1": round(rates[3] / rates[1], 3)},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "failover.json").write_text(json.dumps(result, indent=2))
    _print_failovers(failovers)
    for loss in node_loss:
        mode = "a spare per partition" if loss["per_partition_spares"] else "one spare per node"
        print(f"node leading {len(loss['failovers'])} partitions lost ({mode}; detection {loss['detection_s']} s, "
              f"spares {loss['spare_processes_before']}):", file=OUT)
        for f in loss["failovers"]:
            print(f"  partition {f['partition']} on {f['node']}: kill -> first commit {f['total_s']} s, "
                  f"{f['new_shard']}, load {f['load_s']} s", file=OUT)
    print(f"commit calls/s at 64 clients: RF 3 {rates[3]:.0f}, RF 1 {rates[1]:.0f} "
          f"({rates[3] / rates[1]:.0%} of RF 1)", file=OUT)


if __name__ == "__main__":
    # Killed nodes make Ray print raylet state dumps on this process's terminal: they go to a log file, the
    # figures to the terminal.
    from raygroups.chaos.run import quiet_output

    RESULTS.mkdir(exist_ok=True)
    with quiet_output(str(RESULTS / "failover-ray-output.log"), restore=False) as terminal:
        OUT = terminal
        main()
