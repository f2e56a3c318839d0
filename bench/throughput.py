"""Throughput of one coordinator shard actor, compared with the Ray call floor measured in the same run.

* commit calls/s and committed offsets/s at 1, 8 and 64 concurrent clients, against a no-op async
  method of the same actor under the same concurrency (``ping``): the goal is commit throughput
  >= 50 % of the no-op rate at 64 clients, which group commit (one fsynced batch in flight, the next
  accumulating) is there to make possible;
* heartbeats/s one shard sustains, and the members it can carry at 3 s heartbeats;
* rebalance latency (first JoinGroup to the last successful SyncGroup, initial delay 0) for groups of
  10, 100 and 1000 members.

Writes ``bench/results/throughput.json`` and prints a table. Run: ``.venv/bin/python bench/throughput.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402
from raygroups.coordinator.errors import Errors  # noqa: E402
from raygroups.coordinator.messages import (  # noqa: E402
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)

from raygroups.deployment.start import start_local  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


async def _rate(make_call, concurrency: int, duration_s: float) -> tuple[float, int]:
    """Run ``concurrency`` closed-loop callers for ``duration_s``; return (calls/s, calls)."""
    stop_at = time.perf_counter() + duration_s
    count = 0

    async def worker(i: int) -> None:
        nonlocal count
        n = 0
        while time.perf_counter() < stop_at:
            await make_call(i, n)
            n += 1
            count += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return count / (time.perf_counter() - start), count


async def bench_commits(shard, concurrencies, duration_s, partitions_per_commit):
    rows = []
    for c in concurrencies:
        noop_rate, _ = await _rate(lambda i, n: shard.ping.remote(), c, duration_s)

        async def commit(i, n):
            offsets = {("bench", p): (n, "", -1) for p in range(partitions_per_commit)}
            r = await shard.handle.remote(OffsetCommitRequest(f"group-{i}", offsets))
            assert all(e is Errors.NONE for e in r.errors.values()), r

        commit_rate, _ = await _rate(commit, c, duration_s)
        rows.append({
            "clients": c,
            "noop_calls_per_s": round(noop_rate, 1),
            "commit_calls_per_s": round(commit_rate, 1),
            "committed_offsets_per_s": round(commit_rate * partitions_per_commit, 1),
            "commit_vs_noop": round(commit_rate / noop_rate, 3),
        })
    return rows


async def _join_group(shard, group_id: str, members: int):
    """Drive ``members`` dynamic members through the KIP-394 join, rebalances and SyncGroup until every
    one of them holds an assignment of the same generation. Returns (seconds, generation, calls)."""
    calls = 0

    async def call(req):
        nonlocal calls
        calls += 1
        return await shard.handle.remote(req)

    def join_req(member_id):
        return JoinGroupRequest(group_id, member_id, "consumer", (("range", b""),), 30_000, 30_000,
                                None, "bench", "/127.0.0.1", True, None)

    start = time.perf_counter()
    firsts = await asyncio.gather(*(call(join_req("")) for _ in range(members)))
    ids = [r.member_id for r in firsts]
    done: dict[str, int] = {}

    async def member(member_id: str) -> None:
        while True:
            j = await call(join_req(member_id))
            if j.error is not Errors.NONE:
                raise RuntimeError(f"join failed: {j.error.name}")
            assignments = {m.member_id: b"x" for m in j.members} if j.members else {}
            s = await call(SyncGroupRequest(group_id, j.generation_id, member_id, assignments))
            if s.error is Errors.NONE:
                done[member_id] = j.generation_id
                return
            if s.error is not Errors.REBALANCE_IN_PROGRESS:
                raise RuntimeError(f"sync failed: {s.error.name}")

    await asyncio.gather(*(member(m) for m in ids))
    elapsed = time.perf_counter() - start
    # A member that synced in an early generation rejoins when it learns of a rebalance (heartbeat).
    while len(set(done.values())) > 1:
        latest = max(done.values())
        stale = [m for m, g in done.items() if g < latest]
        await asyncio.gather(*(member(m) for m in stale))
        elapsed = time.perf_counter() - start
    return elapsed, max(done.values()), calls, ids


async def bench_rebalance(shard, sizes):
    rows = []
    for size in sizes:
        seconds, generation, calls, _ = await _join_group(shard, f"rebalance-{size}", size)
        rows.append({"members": size, "seconds": round(seconds, 3), "final_generation": generation,
                     "calls": calls})
    return rows


async def bench_heartbeats(shard, members: int, concurrency: int, duration_s: float):
    group = f"heartbeats-{concurrency}"
    _, generation, _, ids = await _join_group(shard, group, members)

    async def beat(i, n):
        member_id = ids[(i + n * concurrency) % len(ids)]
        r = await shard.handle.remote(HeartbeatRequest(group, generation, member_id))
        assert r.error is Errors.NONE, r

    rate, _ = await _rate(beat, concurrency, duration_s)
    return {"group_members": members, "clients": concurrency, "heartbeats_per_s": round(rate, 1),
            "members_at_3s_heartbeats": int(rate * 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per throughput point")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    args = parser.parse_args()
    concurrencies = [1, 8, 64]
    sizes = [10, 100] if args.quick else [10, 100, 1000]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cluster = start_local(num_partitions=1, config={"group.initial.rebalance.delay.ms": 0,
                                                    "group.min.session.timeout.ms": 10})
    try:
        shard = cluster.shard(0)
        cluster.create_topic("bench", 16)
        loop = asyncio.new_event_loop()
        commits_1 = loop.run_until_complete(bench_commits(shard, concurrencies, args.duration, 1))
        commits_10 = loop.run_until_complete(bench_commits(shard, [64], args.duration, 10))
        heartbeats = [loop.run_until_complete(bench_heartbeats(shard, 200 if args.quick else 1000, c, args.duration))
                      for c in (64, 256)]
        noop_256, _ = loop.run_until_complete(_rate(lambda i, n: shard.ping.remote(), 256, args.duration))
        rebalances = loop.run_until_complete(bench_rebalance(shard, sizes))
        status = ray.get(shard.status.remote())
    finally:
        cluster.shutdown()
        ray.shutdown()
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "ray": ray.__version__},
        "fsync": "every batch",
        "commits_1_partition": commits_1,
        "commits_10_partitions": commits_10,
        "heartbeats": heartbeats,
        "noop_calls_per_s_at_256_clients": round(noop_256, 1),
        "rebalance_latency": rebalances,
        "shard_batches": status["batches"],
        "shard_records": status["records"],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "throughput.json").write_text(json.dumps(result, indent=2))
    print(f"{'clients':>8} {'no-op/s':>10} {'commit/s':>10} {'offsets/s':>10} {'ratio':>7}")
    for row in commits_1 + commits_10:
        print(f"{row['clients']:>8} {row['noop_calls_per_s']:>10} {row['commit_calls_per_s']:>10} "
              f"{row['committed_offsets_per_s']:>10} {row['commit_vs_noop']:>7}")
    for hb in heartbeats:
        print(f"heartbeats/s at {hb['clients']} clients: {hb['heartbeats_per_s']} -> "
              f"{hb['members_at_3s_heartbeats']} members at 3 s")
    print(f"no-op calls/s at 256 clients: {noop_256:.1f}")
    for row in rebalances:
        print(f"rebalance of {row['members']:>5} members: {row['seconds']} s "
              f"(generation {row['final_generation']}, {row['calls']} calls)")
    print(f"records written in {status['batches']} batches: {status['records']} "
          f"({status['records'] / max(1, status['batches']):.1f} per fsync)")


if __name__ == "__main__":
    main()
