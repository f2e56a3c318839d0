"""The Kafka wire-protocol gateway (``raygroups.gateway``) under librdkafka clients (confluent-kafka), each
figure next to its baseline measured in the same run, on the same deployment, through the same client
(the gateway forwards to ``cluster.client()``, the very client the baselines call):

* commits/s: ``--committers`` confluent consumers of one group, each committing its own partition
  synchronously in a loop from its own thread (``commit(offsets=..., asynchronous=False)``), against as
  many members of a group joined through ``cluster.client()`` committing their partitions from as many
  threads (``commit_offsets(...).result()``); and the same at one committer;
* heartbeats/s: ``--heartbeaters`` confluent consumers of one group with ``heartbeat.interval.ms`` 1, so
  that each member sends its next heartbeat as soon as librdkafka lets it (one in flight per member),
  against as many members heartbeating through ``cluster.client()`` from as many threads on the same rule
  (the next heartbeat once the previous one is answered and the interval has passed); beside it, the round
  trip librdkafka measured to its coordinator (its statistics);
* the gateway's CPU per request in those windows: the listener's event loop thread
  (``gw.stats()["loop_cpu_s"]``) over the requests it served. The listener runs on the Ray client's loop
  thread, so this includes the client's work, which the baseline spends too (shown beside it); it excludes
  the source's thread pool (Fetch reads and encodes there) and librdkafka's threads;
* rebalance of ``--members`` confluent consumers, first ``subscribe()`` -> every member holding its
  assignment (``on_assign``) of one stable generation, against as many ``raygroups.Consumer`` s with the
  same session and heartbeat settings, and against the protocol floor (``GroupApi`` join and sync only,
  ``bench/coalescing.py``'s ``join_members``): the median of ``--rebalances`` new groups of each kind;
* fetch: one confluent consumer reading a ``SyntheticSource`` topic to its end, MB/s of key + value bytes,
  next to the gateway's own steps on the same records in this process: the source's ``read`` and
  ``raygroups.gateway.records.encode_batch`` (the raw encode rate), in the chunks a fetch encodes.

Writes ``bench/results/gateway.json``. Run: ``.venv/bin/python bench/gateway.py [--quick] [--note TEXT]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import confluent_kafka  # noqa: E402
import ray  # noqa: E402
from confluent_kafka import KafkaException, TopicPartition  # noqa: E402

from bench.coalescing import join_members  # noqa: E402
from bench.gateway_harness import WARMUP_S, KafkaGroup, Window, kafka_consumer, measure_counts, wait_stable  # noqa: E402
from bench.log_bench import machine  # noqa: E402
from raygroups import Consumer, ConsumerRebalanceListener, Errors  # noqa: E402
from raygroups import gateway as raygroups_gateway  # noqa: E402
from raygroups.chaos.run import quiet_output  # noqa: E402
from raygroups.deployment.start import start_local  # noqa: E402
from raygroups.gateway.broker import MAX_RECORDS_PER_PARTITION_FETCH  # noqa: E402
from raygroups.gateway.records import BATCH_OVERHEAD_BYTES, encode_batch, record_size  # noqa: E402
from raygroups.sources import SyntheticSource  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10}
SESSION_MS = 45_000  # both clients' default session.timeout.ms (KIP-735)
HEARTBEAT_MS = 3_000  # both clients' default heartbeat.interval.ms
PARTITION_FETCH_BYTES = 1_048_576  # librdkafka's max.partition.fetch.bytes
out = sys.stdout  # the terminal (Ray's and the clients' own output go to a log file)


def say(text: str) -> None:
    print(text, file=out, flush=True)


# --- commits -----------------------------------------------------------------------------------------
def kafka_commits(gw, cluster, n: int, seconds: float, tag: str) -> dict:
    def work(group: KafkaGroup, i: int, consumer) -> None:
        partition = group.assigned[i][0]
        k = 0
        while not group.stop.is_set():
            k += 1
            try:
                consumer.commit(offsets=[TopicPartition("commits", partition, k)], asynchronous=False)
                group.counts[i] += 1
            except KafkaException as e:
                group.error(e.args[0].name())

    group = KafkaGroup(gw, f"commits-kafka-{n}-{tag}", "commits", n, work, **{"session.timeout.ms": SESSION_MS})
    try:
        group.subscribe()
        wait_stable(cluster, group.group_id, n, lambda: group.all_assigned() and all(group.assigned))
        group.go.set()
        with Window(gw) as w:
            done, elapsed = measure_counts(group.counts, seconds)
    finally:
        group.close()
    return {"commits_per_s": round(done / elapsed, 1), "errors": group.errors, **w.costs(done)}


def api_members(cluster, group_id: str, n: int, seconds: float, call, interval_ms: int = 0) -> tuple[float, dict]:
    """``n`` members of ``group_id`` joined through ``cluster.client()``, each calling ``call(client,
    generation, member_id, i, k)`` (its k-th call; the error name, or None) from its own thread, the next
    call when the last is answered and ``interval_ms`` has passed since it was made: (calls/s, costs)."""
    client = cluster.client()
    generation, ids, _ = join_members(client, group_id, n)
    counts, errors, stop = [0] * n, {}, threading.Event()

    def work(i: int) -> None:
        k = 0
        while not stop.is_set():
            k += 1
            sent = time.perf_counter()
            error = call(client, generation, ids[i], i, k)
            if error is None:
                counts[i] += 1
            else:
                errors[error] = errors.get(error, 0) + 1
            time.sleep(max(0.0, sent + interval_ms / 1000 - time.perf_counter()))

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    try:
        with Window() as w:
            done, elapsed = measure_counts(counts, seconds)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        client.leave_group(group_id=group_id, members=[(m, None) for m in ids]).result(timeout=30)
    return round(done / elapsed, 1), {"errors": errors, **w.costs(done)}


def api_commits(cluster, n: int, seconds: float, tag: str) -> dict:
    group_id = f"commits-api-{n}-{tag}"

    def commit(client, generation, member_id, i, k) -> str | None:
        r = client.commit_offsets(group_id=group_id, offsets={("commits", i): (k, "")}, generation_id=generation,
                                  member_id=member_id).result(timeout=60)
        e = r.errors[("commits", i)]
        return None if e is Errors.NONE else e.name

    rate, costs = api_members(cluster, group_id, n, seconds, commit)
    return {"commits_per_s": rate, **costs}


def paired(rounds: int, api, kafka, key: str) -> tuple[dict, dict, float]:
    """``rounds`` rounds of the baseline then librdkafka (alternating, so that a busy spell of a shared
    machine falls on both); each side: the mean of its rounds' ``key`` and every round's figures."""
    runs = [(api(str(r)), kafka(str(r))) for r in range(rounds)]
    sides = []
    for side in (1, 0):
        rows = [run[side] for run in runs]
        sides.append({key: round(sum(r[key] for r in rows) / rounds, 1), "rounds": rows})
    return sides[0], sides[1], round(sides[0][key] / sides[1][key], 3)


def bench_commits(gw, cluster, clients: list[int], seconds: float, rounds: int) -> list[dict]:
    rows = []
    for n in clients:
        kafka, api, ratio = paired(rounds, lambda tag, n=n: api_commits(cluster, n, seconds, tag),
                                   lambda tag, n=n: kafka_commits(gw, cluster, n, seconds, tag), "commits_per_s")
        loop_us = [r["gateway_loop_cpu_us_per_request"] for r in kafka["rounds"]]
        rows.append({"clients": n, "kafka_via_gateway": kafka, "cluster_client": api, "kafka_vs_client": ratio})
        say(f"commits/s, {n:>3} committer(s): librdkafka via the gateway {kafka['commits_per_s']:>8,.1f}  "
            f"cluster.client() {api['commits_per_s']:>8,.1f}  ratio {ratio}  gateway loop {loop_us} us/request")
    return rows


# --- heartbeats --------------------------------------------------------------------------------------
def kafka_heartbeats(gw, cluster, n: int, interval_ms: int, seconds: float, tag: str) -> dict:
    stats: list[tuple[float, str]] = []  # librdkafka's statistics, each second, from every member
    group = KafkaGroup(gw, f"heartbeats-kafka-{tag}", "heartbeats", n,
                       **{"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": interval_ms,
                          "statistics.interval.ms": 1000, "stats_cb": lambda s: stats.append((time.perf_counter(), s))})
    try:
        group.subscribe()
        wait_stable(cluster, group.group_id, n, group.all_assigned)
        time.sleep(WARMUP_S)
        with Window(gw) as w:
            time.sleep(seconds)
        beats = w.requests("Heartbeat")
    finally:
        group.close()
    # The round trip librdkafka measured to the group coordinator (the gateway) in the window's seconds.
    rtt = [json.loads(s)["brokers"].get("GroupCoordinator", {}).get("rtt", {}) for t, s in stats
           if w.start["t"] + 1 <= t <= w.end["t"]]
    p50 = sorted(r["p50"] for r in rtt if r.get("cnt"))
    return {"heartbeats_per_s": round(beats / w.seconds, 1), "errors": group.errors,
            "librdkafka_coordinator_rtt_p50_ms": round(p50[len(p50) // 2] / 1000, 2) if p50 else None,
            **w.costs(beats)}


def api_heartbeats(cluster, n: int, interval_ms: int, seconds: float, tag: str) -> dict:
    group_id = f"heartbeats-api-{tag}"

    def beat(client, generation, member_id, i, k) -> str | None:
        r = client.heartbeat(group_id=group_id, generation_id=generation, member_id=member_id).result(timeout=60)
        return None if r.error is Errors.NONE else r.error.name

    rate, costs = api_members(cluster, group_id, n, seconds, beat, interval_ms)
    return {"heartbeats_per_s": rate, **costs}


def bench_heartbeats(gw, cluster, n: int, seconds: float, rounds: int, interval_ms: int = 1) -> dict:
    kafka, api, ratio = paired(rounds, lambda tag: api_heartbeats(cluster, n, interval_ms, seconds, tag),
                               lambda tag: kafka_heartbeats(gw, cluster, n, interval_ms, seconds, tag),
                               "heartbeats_per_s")
    for side in (kafka, api):
        side["ms_between_a_members_heartbeats"] = round(1000 * n / max(side["heartbeats_per_s"], 1e-9), 1)
    loop = [(r["gateway_loop_cpu_us_per_request"], r["gateway_loop_busy"]) for r in kafka["rounds"]]
    say(f"heartbeats/s, {n} members: librdkafka via the gateway {kafka['heartbeats_per_s']:,.1f}  "
        f"cluster.client() {api['heartbeats_per_s']:,.1f}  ratio {ratio}  gateway loop (us/request, busy) {loop}")
    return {"members": n, "heartbeat_interval_ms": interval_ms, "kafka_via_gateway": kafka, "cluster_client": api,
            "kafka_vs_client": ratio}


# --- rebalance ---------------------------------------------------------------------------------------
def kafka_rebalance(gw, cluster, n: int, tag: str) -> dict:
    group = KafkaGroup(gw, f"rebalance-kafka-{tag}", "rebalance", n,
                       **{"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
    try:
        with Window(gw) as w:
            started = time.perf_counter()
            group.subscribe()
            wait_stable(cluster, group.group_id, n, group.all_assigned)
        seconds = max(e[1] for e in group.events) - started
        spread = callbacks(group.history, started)  # before close() revokes
    finally:
        group.close()
    costs = w.costs(n)  # per member; the window ends when the group is seen stable
    return {"seconds": round(seconds, 3), **spread, "errors": group.errors,
            **{k: v for k, v in costs.items() if k.startswith("gateway_")}}


def callbacks(history: list[tuple[str, float]], started: float) -> dict:
    """How the members' assignments spread in time: the first one, and the callbacks made."""
    assigned = [t for kind, t in history if kind == "assign"]
    return {"first_assigned_s": round(min(assigned) - started, 3) if assigned else None,
            "assign_callbacks": len(assigned), "revoke_callbacks": len(history) - len(assigned)}


class _Recorder(ConsumerRebalanceListener):
    def __init__(self, events: list, history: list, i: int) -> None:
        self.events, self.history, self.i = events, history, i

    def on_partitions_assigned(self, partitions) -> None:
        self.events[self.i] = ("assign", time.perf_counter())
        self.history.append(self.events[self.i])

    def on_partitions_revoked(self, partitions) -> None:
        self.events[self.i] = ("revoke", time.perf_counter())
        self.history.append(self.events[self.i])


def api_rebalance(cluster, n: int, tag: str) -> dict:
    events: list = [None] * n
    history: list = []
    stop = threading.Event()
    group_id = f"rebalance-api-{tag}"

    def run(consumer) -> None:
        # poll() returns at once when the member is stable (there is no fetcher to wait for): a loop at
        # librdkafka's pace here (its poll(0.05) blocks), not 100 threads spinning on the GIL.
        while not stop.is_set():
            until = time.monotonic() + 0.05
            consumer.poll(0.05)
            time.sleep(max(0.0, until - time.monotonic()))
        consumer.close()

    consumers = [Consumer(cluster, group_id, ["rebalance"], listener=_Recorder(events, history, i), enable_auto_commit=False,
                          session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS) for i in range(n)]
    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in consumers]
    started = time.perf_counter()  # a member joins from its first poll(), as librdkafka's after subscribe()
    for t in threads:
        t.start()
    try:
        wait_stable(cluster, group_id, n, lambda: all(e is not None and e[0] == "assign" for e in events))
        seconds = max(e[1] for e in events) - started
        spread = callbacks(history, started)  # before close() revokes
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    return {"seconds": round(seconds, 3), **spread}


def bench_rebalance(gw, cluster, n: int, trials: int) -> dict:
    """``trials`` new groups of each kind, alternating; the median of each kind's seconds, every trial kept
    (with an initial rebalance delay of 0 a group may go through a few generations, more or fewer by luck)."""
    def median(rows: list[dict]) -> float:
        return sorted(r["seconds"] for r in rows)[len(rows) // 2]

    runs = [(api_rebalance(cluster, n, str(t)), kafka_rebalance(gw, cluster, n, str(t))) for t in range(trials)]
    floors = []
    for t in range(trials):
        _, ids, floor = join_members(cluster.client(), f"rebalance-floor-{t}", n)
        cluster.client().leave_group(group_id=f"rebalance-floor-{t}", members=[(m, None) for m in ids]).result(timeout=30)
        floors.append({"seconds": round(floor, 3)})
    sides = {name: {"seconds": median(rows), "trials": rows} for name, rows in (
        ("kafka_via_gateway", [k for _, k in runs]), ("raygroups_consumer", [a for a, _ in runs]),
        ("group_api_join_sync_only", floors))}
    say(f"rebalance of {n} members (median of {trials}): librdkafka via the gateway "
        f"{[r['seconds'] for _, r in runs]} -> {sides['kafka_via_gateway']['seconds']} s  raygroups.Consumer "
        f"{[r['seconds'] for r, _ in runs]} -> {sides['raygroups_consumer']['seconds']} s  GroupApi join+sync only "
        f"{sides['group_api_join_sync_only']['seconds']} s")
    return {"members": n, **sides}


# --- fetch -------------------------------------------------------------------------------------------
def kafka_fetch(gw, topic: str, partitions: int, records: int) -> dict:
    consumer = kafka_consumer(gw, "fetch-kafka")
    want = partitions * records
    got = payload = 0
    errors: dict[str, int] = {}
    try:
        with Window(gw) as w:
            consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
            deadline = time.monotonic() + 600
            while got < want and time.monotonic() < deadline:
                for m in consumer.consume(10_000, 1.0):
                    if m.error():
                        errors[m.error().name()] = errors.get(m.error().name(), 0) + 1
                        continue
                    got += 1
                    payload += len(m.key()) + len(m.value())
    finally:
        consumer.close()
    gateway_cpu = w.cpu_s("loop") + (w.cpu_s("source") or 0.0)
    return {"records": got, "key_value_bytes": payload, "seconds": round(w.seconds, 3),
            "mb_per_s": round(payload / w.seconds / 1e6, 3), "records_per_s": round(got / w.seconds),
            "fetch_requests": w.requests("Fetch"), "errors": errors,
            "gateway_cpu_s_per_mb": round(gateway_cpu / (payload / 1e6), 3),
            "gateway_loop_cpu_us_per_request": w.costs(got)["gateway_loop_cpu_us_per_request"]}


def raw_fetch_steps(source: SyntheticSource, topic: str, partitions: int, records: int) -> dict:
    """The source's read and the encode of the same records, in the chunks one partition's fetch holds
    (librdkafka's ``max.partition.fetch.bytes``, the broker's record cap), in this thread."""
    sample = source.read(topic, 0, 0, 1)[0]
    chunk = min(MAX_RECORDS_PER_PARTITION_FETCH, (PARTITION_FETCH_BYTES - BATCH_OVERHEAD_BYTES) // record_size(sample))
    t, cpu = time.perf_counter(), time.thread_time()
    chunks = [source.read(topic, p, o, min(chunk, records - o)) for p in range(partitions) for o in range(0, records, chunk)]
    read_s, read_cpu = time.perf_counter() - t, time.thread_time() - cpu
    payload = sum(len(r.key) + len(r.value) for c in chunks for r in c)
    now_ms = int(time.time() * 1000)
    t, cpu = time.perf_counter(), time.thread_time()
    wire = sum(len(encode_batch(c, now_ms)) for c in chunks)
    encode_s, encode_cpu = time.perf_counter() - t, time.thread_time() - cpu
    n = partitions * records
    return {"records": n, "records_per_batch": chunk, "key_value_bytes": payload, "batch_bytes": wire,
            "source_read_mb_per_s": round(payload / read_s / 1e6, 3), "source_read_records_per_s": round(n / read_s),
            "encode_mb_per_s": round(payload / encode_s / 1e6, 3), "encode_records_per_s": round(n / encode_s),
            "read_and_encode_mb_per_s": round(payload / (read_s + encode_s) / 1e6, 3),
            "read_and_encode_cpu_s_per_mb": round((read_cpu + encode_cpu) / (payload / 1e6), 3)}


def bench_fetch(gw, source: SyntheticSource, topic: str, partitions: int, records: int) -> dict:
    kafka = kafka_fetch(gw, topic, partitions, records)
    raw = raw_fetch_steps(source, topic, partitions, records)
    row = {"partitions": partitions, "records_per_partition": records, "kafka_via_gateway": kafka, "raw": raw,
           "kafka_vs_encode": round(kafka["mb_per_s"] / raw["encode_mb_per_s"], 3),
           "kafka_vs_read_and_encode": round(kafka["mb_per_s"] / raw["read_and_encode_mb_per_s"], 3)}
    say(f"fetch, {partitions} x {records:,} records: librdkafka via the gateway {kafka['mb_per_s']} MB/s "
        f"({kafka['records_per_s']:,} records/s); raw encode {raw['encode_mb_per_s']} MB/s, source read "
        f"{raw['source_read_mb_per_s']} MB/s, both {raw['read_and_encode_mb_per_s']} MB/s (key + value bytes)")
    return row


# --- the run -----------------------------------------------------------------------------------------
def machine_info() -> dict:
    info = machine()
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
        info["memory_gib"] = round(kib / 2**20, 1)
    except (OSError, StopIteration):
        info["memory_gib"] = None
    info.update({"ray": ray.__version__, "confluent_kafka": confluent_kafka.__version__,
                 "librdkafka": confluent_kafka.libversion()[0]})
    return info


def main() -> None:
    global out
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per throughput window")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of each throughput pair")
    parser.add_argument("--committers", type=int, default=None)
    parser.add_argument("--heartbeaters", type=int, default=None)
    parser.add_argument("--members", type=int, default=None, help="members of the rebalanced group")
    parser.add_argument("--rebalances", type=int, default=3, help="groups formed of each kind (the median is kept)")
    parser.add_argument("--fetch-records", type=int, default=None, help="records per partition of the fetched topic")
    parser.add_argument("--note", action="append", default=[], help="a note for the JSON (e.g. the machine was shared)")
    parser.add_argument("--output", default=str(RESULTS / "gateway.json"))
    args = parser.parse_args()
    seconds = args.seconds or (2.0 if args.quick else 4.0)
    committers = args.committers or (4 if args.quick else 32)
    heartbeaters = args.heartbeaters or (8 if args.quick else 50)
    members = args.members or (10 if args.quick else 100)
    fetch_partitions = 4
    fetch_records = args.fetch_records or (5_000 if args.quick else 50_000)
    info = machine_info()
    RESULTS.mkdir(exist_ok=True)
    with quiet_output(str(RESULTS / "gateway-ray-output.log")) as terminal:
        out = terminal
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        cluster = start_local(num_partitions=1, config=CONFIG)
        source = SyntheticSource({"fetch": fetch_partitions}, records_per_partition=fetch_records)
        gw = raygroups_gateway.start(cluster, source=source)
        try:
            cluster.create_topic("commits", committers)
            cluster.create_topic("heartbeats", heartbeaters)
            cluster.create_topic("rebalance", members)
            say(f"gateway at {gw.bootstrap_servers}, one shard; {info['nproc']} CPUs, load {info['load_average_1m_at_start']}")
            commits = bench_commits(gw, cluster, sorted({1, committers}), seconds, args.rounds)
            heartbeats = bench_heartbeats(gw, cluster, heartbeaters, seconds, args.rounds)
            rebalance = bench_rebalance(gw, cluster, members, args.rebalances)
            fetch = bench_fetch(gw, source, "fetch", fetch_partitions, fetch_records)
            final_stats = gw.stats()
        finally:
            gw.stop()
            cluster.shutdown()
            ray.shutdown()
    info["load_average_1m_at_end"] = os.getloadavg()[0]
    top, hb, rb = commits[-1], heartbeats, rebalance

    def loop_us(side: dict) -> float:  # the loop's CPU over every request of every round
        cpu = sum(r["gateway_loop_cpu_us_per_request"] * r["gateway_requests"] for r in side["rounds"])
        return round(cpu / sum(r["gateway_requests"] for r in side["rounds"]), 1)

    summary = {
        "goal": "librdkafka via the gateway >= 0.8 of cluster.client() for commits/s and heartbeats/s",
        f"commits_per_s_{top['clients']}_committers": {
            "kafka_via_gateway": top["kafka_via_gateway"]["commits_per_s"],
            "cluster_client": top["cluster_client"]["commits_per_s"], "ratio": top["kafka_vs_client"]},
        "commits_per_s_1_committer": {
            "kafka_via_gateway": commits[0]["kafka_via_gateway"]["commits_per_s"],
            "cluster_client": commits[0]["cluster_client"]["commits_per_s"], "ratio": commits[0]["kafka_vs_client"]},
        f"heartbeats_per_s_{hb['members']}_members": {
            "kafka_via_gateway": hb["kafka_via_gateway"]["heartbeats_per_s"],
            "cluster_client": hb["cluster_client"]["heartbeats_per_s"], "ratio": hb["kafka_vs_client"]},
        f"rebalance_s_{rb['members']}_members": {
            "kafka_via_gateway": rb["kafka_via_gateway"]["seconds"], "raygroups_consumer": rb["raygroups_consumer"]["seconds"],
            "group_api_join_sync_only": rb["group_api_join_sync_only"]["seconds"]},
        "fetch_mb_per_s": {"kafka_via_gateway": fetch["kafka_via_gateway"]["mb_per_s"],
                           "raw_encode": fetch["raw"]["encode_mb_per_s"],
                           "raw_source_read_and_encode": fetch["raw"]["read_and_encode_mb_per_s"]},
        "gateway_loop_cpu_us_per_request": {
            f"commits_{top['clients']}_committers": loop_us(top["kafka_via_gateway"]),
            f"heartbeats_{hb['members']}_members": loop_us(hb["kafka_via_gateway"]),
            "measures": "the listener's event loop thread (gw.stats()['loop_cpu_s']) over the requests it served; "
                        "the listener runs on the group client's loop, so this is the gateway's work and the client's "
                        "together (the baseline's ray_client_thread_cpu_us_per_op is the client's share)",
            "excludes": "the source thread pool (Fetch reads and encodes there), librdkafka's threads"},
    }
    result = {
        "machine": info,
        "summary": summary,
        "notes": args.note,
        "deployment": {"shards": 1, "config": CONFIG, "fsync": "every batch",
                       "gateway": "in this process, one listener (raygroups.gateway.start) in front of the deployment"},
        "same_load": {
            "commits": "N members of one group, each with one synchronous commit of its own partition in flight, "
                       "the next sent when it is answered; librdkafka: commit(offsets=[one partition], "
                       "asynchronous=False) from one thread per consumer (partitions paused, so no Fetch); "
                       "cluster.client(): commit_offsets(generation_id, member_id).result() from one thread per member",
            "heartbeats": "N members of one group, each with at most one heartbeat in flight, the next sent when the "
                          "previous is answered and heartbeat.interval.ms (1) has passed since it was sent, so a "
                          "member's rate is 1 / its round trip (librdkafka schedules its own: its coordinator round "
                          "trip from its statistics is given beside it); the gateway's loop busy share says whether "
                          "the gateway's loop was the limit",
            "rebalance": "N consumers polling from one thread each, subscribed to a topic of N partitions, session "
                         f"{SESSION_MS} ms, heartbeat {HEARTBEAT_MS} ms, range assignor; from the first subscribe() "
                         "(librdkafka) or the first poll() (raygroups.Consumer) to the last assignment callback "
                         "that left every member assigned in a stable group",
            "fetch": "one consumer assigned every partition from offset 0, reading to the end; raw: the same records "
                     "read from the source and encoded in the chunks one partition's fetch carries",
        },
        "commits": commits,
        "heartbeats": heartbeats,
        "rebalance": rebalance,
        "fetch": fetch,
        "gateway_requests_total": final_stats["requests"],
        "gateway_closed_connections": final_stats["closed_connections"],
    }
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
