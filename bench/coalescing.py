"""Request coalescing (``raygroups.client.ray_client``): what one shard answers when its clients merge the requests
bound for it into one Ray call, each figure with its baseline measured in the same run.

* heartbeats answered per second by one shard, members spread over ``--processes`` client processes
  (Ray actors, each one ``RayGroupClient`` shared by its members), every member heartbeating every 3 s
  for ``--seconds``: sustained rate, answers that were not NONE (a member expelled would show here),
  latency p50/p99; baseline: the rate of no-op calls (``ping``) to the same shard from the same
  processes;
* commits per second, 64 closed-loop committers of one partition each in one process, fsync every batch:
  coalesced against a single Ray call per commit (``client.max.batch.requests`` = 1) and against the
  no-op call rate at the same concurrency;
* a rebalance of 1 000 members (two-step join and sync, initial delay 0) through the client: seconds and
  Ray calls made, coalesced and not.

Writes ``bench/results/coalescing.json``. Run: ``.venv/bin/python bench/coalescing.py [--members 21000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
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

from bench.throughput import _rate  # noqa: E402
from raygroups.chaos.run import quiet_output  # noqa: E402
from raygroups.client.ray_client import RayGroupClient  # noqa: E402
from raygroups.deployment.start import connect, start_local  # noqa: E402
from raygroups.stats import percentile  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10,
          "group.max.session.timeout.ms": 1_800_000}
SESSION_MS = 45_000  # Kafka's default session.timeout.ms (KIP-735)
INTERVAL_S = 3.0


def _join_args(group_id: str, member_id: str = "") -> dict:
    return dict(group_id=group_id, member_id=member_id, protocol_type="consumer", protocols=[("range", b"")],
                session_timeout_ms=SESSION_MS, rebalance_timeout_ms=60_000, client_id="bench")


def join_members(client, group_id: str, n: int) -> tuple[int, list[str], float]:
    """n dynamic members join ``group_id`` (KIP-394 two steps) and sync, each on its own as a Kafka member
    does -- join, sync, then heartbeat, rejoining when a heartbeat says the group rebalances -- until all of
    them hold an assignment of one generation (an initial delay of 0 may complete a first generation before
    every member joined); (generation, member ids, seconds from the first JoinGroup to the SyncGroup
    answer that left every member holding an assignment of one generation)."""
    wrap = asyncio.wrap_future
    done: dict[str, int] = {}
    settled_at: list[float] = []

    def settled() -> bool:
        return len(done) == n and len(set(done.values())) == 1

    async def member(m: str) -> None:
        while True:
            j = await wrap(client.join_group(**_join_args(group_id, m)))
            assert j.error is Errors.NONE, f"JoinGroup failed: {j.error.name}"
            assignments = {x.member_id: b"" for x in j.members} if j.members else {}
            r = await wrap(client.sync_group(group_id=group_id, generation_id=j.generation_id, member_id=m,
                                             assignments=assignments))
            if r.error is Errors.REBALANCE_IN_PROGRESS:
                continue
            assert r.error is Errors.NONE, f"SyncGroup failed: {r.error.name}"
            done[m] = j.generation_id
            if settled() and not settled_at:
                settled_at.append(time.perf_counter())
            while not settled():
                await asyncio.sleep(0.2)
                h = await wrap(client.heartbeat(group_id=group_id, generation_id=j.generation_id, member_id=m))
                if h.error is Errors.REBALANCE_IN_PROGRESS:
                    break
                assert h.error is Errors.NONE, f"Heartbeat failed: {h.error.name}"
            else:
                return

    async def everyone() -> list[str]:
        firsts = await asyncio.gather(*(wrap(client.join_group(**_join_args(group_id))) for _ in range(n)))
        ids = [f.member_id for f in firsts]
        await asyncio.gather(*(member(m) for m in ids))
        return ids

    started = time.perf_counter()
    ids = asyncio.run(everyone())
    return max(done.values()), ids, settled_at[0] - started


class HeartbeatDriver:
    """A client process: its members join their groups and heartbeat every 3 s from then on, spread over
    the interval (a background thread); ``measure`` counts what is answered in a window."""

    def __init__(self, namespace: str, groups: list[str], members_per_group: int) -> None:
        self.cluster = connect(namespace=namespace)
        self.client = self.cluster.client()
        self.groups = groups
        self.members_per_group = members_per_group
        self.members: list[tuple[str, int, str]] = []
        self._lock = threading.Lock()
        self._answers: list[tuple[float, float, str]] = []  # (sent at, latency, error name)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def join(self) -> int:
        """Join every member, then keep them heartbeating."""
        for g in self.groups:
            generation, ids, _ = join_members(self.client, g, self.members_per_group)
            self.members.extend((g, generation, m) for m in ids)
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()
        return len(self.members)

    def _beat(self) -> None:
        n = len(self.members)
        tick = 0.01
        started = time.perf_counter()
        sent = 0
        while not self._stop.is_set():
            due = int((time.perf_counter() - started) / INTERVAL_S * n)
            while sent < due:
                g, generation, m = self.members[sent % n]
                at = time.perf_counter()
                f = self.client.heartbeat(group_id=g, generation_id=generation, member_id=m)
                f.add_done_callback(lambda f, at=at: self._answered(at, f))
                sent += 1
            time.sleep(tick)

    def _answered(self, at: float, f) -> None:
        error = f.result().error.name
        with self._lock:
            self._answers.append((time.time() - (time.perf_counter() - at), time.perf_counter() - at, error))

    def ping_rate(self, seconds: float, concurrency: int) -> float:
        """``bench.throughput._rate``'s loop, in this process (a Ray worker that cannot import ``bench``)."""
        shard = self.cluster.shard(0)

        async def run() -> int:
            stop_at = time.perf_counter() + seconds
            count = 0

            async def worker() -> None:
                nonlocal count
                while time.perf_counter() < stop_at:
                    await shard.ping.remote()
                    count += 1

            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return count

        started = time.perf_counter()
        count = asyncio.run(run())
        return count / (time.perf_counter() - started)

    def measure(self, start_at: float, seconds: float) -> dict:
        """What was answered of the heartbeats sent in [start_at, start_at + seconds) (wall clock)."""
        time.sleep(max(0.0, start_at + seconds - time.time()))
        deadline = time.time() + 60  # the answers to heartbeats sent in the window, however late
        calls_before = dict(self.client.batch_stats)
        while time.time() < deadline:
            with self._lock:
                late = sum(1 for t, _, _ in self._answers if t >= start_at + seconds)
            if late or time.time() > start_at + seconds + 30:
                break
            time.sleep(0.1)
        with self._lock:
            window = [(lat, e) for t, lat, e in self._answers if start_at <= t < start_at + seconds]
        errors: dict[str, int] = {}
        for _, e in window:
            if e != "NONE":
                errors[e] = errors.get(e, 0) + 1
        lat = sorted(lat for lat, _ in window)
        return {"answered": len(window), "ok": len(window) - sum(errors.values()), "errors": errors,
                "p50_ms": 1000 * percentile(lat, 0.5) if lat else None,
                "p99_ms": 1000 * percentile(lat, 0.99) if lat else None,
                "calls": calls_before["calls"], "requests": calls_before["requests"]}

    def stop(self) -> None:
        self._stop.set()


def bench_heartbeats(cluster, processes: int, members: int, seconds: float) -> dict:
    per_process = members // processes
    make = ray.remote(HeartbeatDriver).options(num_cpus=0, max_concurrency=4)
    drivers = [make.remote(cluster.namespace, [f"hb-{i}"], per_process) for i in range(processes)]
    noop = sum(ray.get([d.ping_rate.remote(4.0, 16) for d in drivers]))  # the processes idle yet
    started = time.perf_counter()
    # One process's group after the other (each then heartbeats from its own thread): a join phase of
    # 21 000 members at once would be a benchmark of its own.
    joined = sum(ray.get(d.join.remote(), timeout=600) for d in drivers)
    join_s = time.perf_counter() - started
    time.sleep(2 * INTERVAL_S)  # every member has heartbeated since the last join
    start_at = time.time() + 1
    runs = ray.get([d.measure.remote(start_at, seconds) for d in drivers], timeout=seconds + 300)
    ray.get([d.stop.remote() for d in drivers])
    for d in drivers:
        ray.kill(d)
    answered = sum(r["answered"] for r in runs)
    errors: dict[str, int] = {}
    for r in runs:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    calls = sum(r["calls"] for r in runs)
    requests = sum(r["requests"] for r in runs)
    return {"processes": processes, "members": joined, "session_timeout_ms": SESSION_MS,
            "join_seconds": round(join_s, 1), "window_s": seconds,
            "heartbeats_answered": answered, "heartbeats_ok": answered - sum(errors.values()), "errors": errors,
            "heartbeats_per_s": round(answered / seconds, 1),
            "heartbeats_due_per_s": round(joined / INTERVAL_S, 1),
            "p50_ms_worst_process": round(max(r["p50_ms"] or 0 for r in runs), 2),
            "p99_ms_worst_process": round(max(r["p99_ms"] or 0 for r in runs), 2),
            "requests_per_call": round(requests / max(1, calls), 1),
            "noop_calls_per_s_same_processes": round(noop, 1)}


def single_call_client(cluster) -> RayGroupClient:
    """A client of the same deployment that sends every request in a call of its own (the baseline)."""
    return RayGroupClient(cluster.namespace, cluster.num_partitions,
                          dataclasses.replace(cluster.config, client_max_batch_requests=1))


def bench_commits(cluster, clients: int, seconds: float) -> dict:
    shard = cluster.shard(0)

    def committers(client) -> float:
        async def commit(i: int, n: int) -> None:
            r = await asyncio.wrap_future(client.commit_offsets(group_id=f"c-{i}", offsets={("bench", i % 16): (n, "")}))
            assert r.errors == {("bench", i % 16): Errors.NONE}, r

        return asyncio.run(_rate(commit, clients, seconds))[0]

    def pings() -> float:
        async def ping(i: int, n: int) -> None:
            await shard.ping.remote()

        return asyncio.run(_rate(ping, clients, seconds))[0]

    single = single_call_client(cluster)
    try:
        noop = pings()
        before = ray.get(shard.status.remote())
        coalesced = committers(cluster.client())
        mid = ray.get(shard.status.remote())
        alone = committers(single)
    finally:
        single.close()
    return {"clients": clients, "noop_calls_per_s": round(noop, 1), "coalesced_commits_per_s": round(coalesced, 1),
            "single_call_commits_per_s": round(alone, 1), "coalesced_vs_noop": round(coalesced / noop, 2),
            "single_vs_noop": round(alone / noop, 2),
            "records_per_fsync_coalesced": round((mid["records"] - before["records"])
                                                 / max(1, mid["batches"] - before["batches"]), 1)}


def bench_rebalance(cluster, members: int) -> dict:
    out = {}
    single = single_call_client(cluster)
    try:
        for name, client in (("coalesced", cluster.client()), ("single_calls", single)):
            before = dict(client.batch_stats)
            generation, _, seconds = join_members(client, f"rebalance-{name}", members)
            calls = sum(client.batch_stats[k] - before[k] for k in ("calls", "single_calls"))
            out[name] = {"seconds": round(seconds, 3), "generation": generation, "ray_calls": calls}
    finally:
        single.close()
    out["members"] = members
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=21_000)
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    with quiet_output(RESULTS / "coalescing-ray-output.log"):
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        cluster = start_local(num_partitions=1, config=CONFIG)
        try:
            cluster.create_topic("bench", 16)
            rebalance = bench_rebalance(cluster, 1_000)
            commits = bench_commits(cluster, 64, 6.0)
            heartbeats = bench_heartbeats(cluster, args.processes, args.members, args.seconds)
        finally:
            cluster.shutdown()
            ray.shutdown()
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform(), "ray": ray.__version__},
              "heartbeats": heartbeats, "commits": commits, "rebalance": rebalance}
    (RESULTS / "coalescing.json").write_text(json.dumps(result, indent=2))
    h, c, r = heartbeats, commits, rebalance
    print(f"heartbeats/s, one shard, {h['members']} members over {h['processes']} processes: "
          f"{h['heartbeats_per_s']:,.0f} of {h['heartbeats_due_per_s']:,.0f} due (errors {h['errors'] or 'none'}; "
          f"p50 {h['p50_ms_worst_process']} ms, p99 {h['p99_ms_worst_process']} ms; "
          f"{h['requests_per_call']} per call) vs no-op calls/s from the same processes "
          f"{h['noop_calls_per_s_same_processes']:,.0f}")
    print(f"commits/s, 64 clients: coalesced {c['coalesced_commits_per_s']:,.0f} ({c['coalesced_vs_noop']}x no-op), "
          f"one call each {c['single_call_commits_per_s']:,.0f} ({c['single_vs_noop']}x), no-op "
          f"{c['noop_calls_per_s']:,.0f}; {c['records_per_fsync_coalesced']} records per fsync")
    print(f"rebalance of {r['members']} members: coalesced {r['coalesced']['seconds']} s in "
          f"{r['coalesced']['ray_calls']} calls; one call each {r['single_calls']['seconds']} s in "
          f"{r['single_calls']['ray_calls']} calls")


if __name__ == "__main__":
    main()
