"""A scale model of one coordinator shard: what a group, a member and a committed offset cost in memory,
how long a partition takes to replay, and how long a failover takes, at 1 M and 10 M records; and from
those, where a deployment of 50 partitions x 10 M offsets hits its limits.

* memory (in process, ``tracemalloc``): stable groups of 1 and of 20 members formed through the
  in-process coordinator give the cost of a group and of a member (a line through the two points); a
  loaded log of all-distinct keys gives the cost of a committed offset;
* replay of a partition log of all-distinct keys (a compacted log: the worst case) at 1 M and 10 M
  records, against raw msgpack decode of the same payloads including every key; eager, and lazy (a
  shard's: it serves once the log is read, the offsets turned into objects behind it);
* failover (``bench/failover.py``'s measurement) of a partition of 1 M and 10 M records on a simulated
  3-node cluster: kill of the leader's node -> first commit served by the new leader, with detection.

Writes ``bench/results/scale.json``. Run: ``.venv/bin/python bench/scale.py [--sizes 1000000,10000000]
[--skip-failover]``.

The extrapolation to 50 partitions x 10 M offsets (printed and written with the figures): memory per node
is offsets x bytes per offset x the partitions whose replicas the node holds (all 50 at replication
factor 3 on 3 nodes); replay of one partition bounds how long a restarted partition stays loading; a
failover onto a node whose spare kept a hot standby of the partition replays only what the standby had
not read yet (otherwise the new leader's whole replica); the standbys cost each node the followed
partitions' offsets in their pending form (``bytes_per_pending_offset``). The knobs: more nodes (replicas per node fall as nodes / replication factor), compaction
(a compacted partition replays only its live offsets), ``offsets.retention.minutes`` (expired offsets
leave the state), and more partitions (smaller each).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgpack  # noqa: E402
from raygroups.coordinator.records import OffsetCommitKey  # noqa: E402
from raygroups.coordinator.state import DurableState  # noqa: E402
from raygroups.offsets_log import open_log, replay  # noqa: E402

from bench.log_bench import commit_batches, machine, payloads_of, write_log  # noqa: E402
from raygroups import Errors  # noqa: E402
from raygroups.testing import InProcessCoordinator, ManualClock  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
OUT = sys.stdout  # the figures' stream: the real terminal once Ray's output goes to a log (never
# sys.stdout itself: Ray prints its raylets' messages to whatever sys.stdout is)


def _stable_groups(groups: int, members: int) -> int:
    """Bytes held after forming ``groups`` stable groups of ``members`` members each (in process)."""
    clock = ManualClock(0)
    counter = itertools.count()
    gc.collect()
    tracemalloc.start()
    coord = InProcessCoordinator(num_partitions=1, clock=clock, member_id_generator=lambda p: f"{p}-{next(counter)}",
                                 config={"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10})
    base = tracemalloc.get_traced_memory()[0]
    for g in range(groups):
        gid = f"scale-group-{g}"
        kw = dict(group_id=gid, protocol_type="consumer", protocols=[("range", b"subscription-bytes-x32" * 2)],
                  session_timeout_ms=45_000, rebalance_timeout_ms=60_000, client_id="consumer-client")
        ids = [coord.join_group(member_id="", **kw).result(timeout=0).member_id for _ in range(members)]
        joins = [coord.join_group(member_id=m, **kw) for m in ids]
        clock.advance(1)
        generation = joins[0].result(timeout=0).generation_id
        leader = joins[0].result(timeout=0).leader
        for m in ids:
            sync = coord.sync_group(group_id=gid, generation_id=generation, member_id=m,
                                    assignments={x: b"assignment-bytes-x32" * 2 for x in ids} if m == leader else {})
            assert sync.result(timeout=0).error is Errors.NONE
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del coord
    return held


def memory_model() -> dict:
    one = _stable_groups(2_000, 1)
    many = _stable_groups(200, 20)
    # held = groups x (group + members x member): two equations, two unknowns.
    member = (many / 200 - one / 2_000) / 19
    group = one / 2_000 - member
    return {"bytes_per_group": round(group), "bytes_per_member": round(member),
            "measured": {"2000 groups x 1 member": one, "200 groups x 20 members": many},
            "member_metadata_bytes": {"subscription": 44, "assignment": 40}}


def replay_scale(root: str, n: int) -> dict:
    keys = [OffsetCommitKey(f"group-{i // 1000}", f"topic-{(i // 100) % 10}", i) for i in range(n)]
    d = os.path.join(root, f"distinct-{n}")
    write_log(d, commit_batches(n, 250, keys))  # n a multiple of 250
    del keys
    payloads = payloads_of(d)
    unpackb = msgpack.unpackb
    gc.disable()
    t = time.perf_counter()
    for p in payloads:
        flat = unpackb(p, use_list=False)[7]
        for kb in flat[0::2]:
            unpackb(kb, use_list=False)
    raw_s = time.perf_counter() - t
    gc.enable()
    del payloads
    log = open_log(d)
    gc.collect()
    tracemalloc.start()
    state = DurableState()
    summary = replay(log, state)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    gc.collect()
    state = DurableState()
    t = time.perf_counter()
    replay(log, state)
    load_s = time.perf_counter() - t
    offsets = sum(len(v) for v in state.offsets.values())
    del state
    gc.collect()
    # What a lazily loaded shard, and a hot standby, hold per offset before it becomes an object: its
    # encoded key and its decoded raw value.
    gc.collect()
    tracemalloc.start()
    pending = DurableState()
    replay(log, pending, lazy=True)
    pending_held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del pending
    gc.collect()
    lazy = DurableState()
    t = time.perf_counter()
    replay(log, lazy, lazy=True)  # what a shard does: it serves from here, the offsets still pending
    lazy_s = time.perf_counter() - t
    t = time.perf_counter()
    lazy.materialize()
    materialize_s = time.perf_counter() - t
    log.close()
    assert offsets == n and summary.records == n and lazy.pending_offsets == 0
    return {"records": n, "replay_s": round(load_s, 3), "replay_records_per_s": round(n / load_s),
            "lazy_replay_s": round(lazy_s, 3), "lazy_replay_records_per_s": round(n / lazy_s),
            "lazy_then_materialize_s": round(lazy_s + materialize_s, 3),
            "raw_decode_incl_keys_records_per_s": round(n / raw_s), "replay_vs_raw": round(raw_s / load_s, 3),
            "bytes_per_committed_offset": round(held / offsets, 1), "state_bytes": held,
            "bytes_per_pending_offset": round(pending_held / offsets, 1)}


def failover_scale(sizes: list[int]) -> list[dict]:
    from bench.failover import measure_failovers

    return measure_failovers(sizes)


def extrapolate(mem: dict, replays: list[dict], failovers: list[dict]) -> dict:
    per_offset = max(r["bytes_per_committed_offset"] for r in replays)
    biggest = max(replays, key=lambda r: r["records"])
    partitions, offsets, nodes, rf = 50, 10_000_000, 3, 3
    per_node_gib = partitions * rf / nodes * offsets * per_offset / 2**30
    return {
        "deployment": f"{partitions} partitions x {offsets:,} offsets, replication factor {rf} on {nodes} nodes",
        "leader_state_gib_per_node": round(partitions / nodes * offsets * per_offset / 2**30, 1),
        "state_gib_per_node_if_every_replica_kept_live_state": round(per_node_gib, 1),
        # Hot standbys (shard.standby.enable): each node's spare holds the partitions it follows as they
        # are before they become objects (encoded key, raw value).
        "standby_gib_per_node": round(partitions * (rf - 1) / nodes * offsets * biggest["bytes_per_pending_offset"]
                                      / 2**30, 1),
        "replay_s_per_partition": round(offsets / biggest["replay_records_per_s"], 1),
        "replay_s_all_leaders_of_a_node_one_core": round(partitions / nodes * offsets / biggest["replay_records_per_s"], 0),
        "lazy_replay_s_per_partition_until_it_serves": round(offsets / biggest["lazy_replay_records_per_s"], 1),
        "failover_s_at_largest_measured": failovers[-1]["total_s"] if failovers else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--skip-failover", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    info = machine()
    mem = memory_model()
    print(f"memory: a group {mem['bytes_per_group']:,} B, a member {mem['bytes_per_member']:,} B", flush=True, file=OUT)
    root = tempfile.mkdtemp(prefix="raygroups-scale-")
    replays = []
    try:
        for n in sizes:
            r = replay_scale(root, n)
            replays.append(r)
            print(f"replay of {n:>10,} distinct keys: {r['replay_s']} s ({r['replay_records_per_s']:,}/s, "
                  f"{r['replay_vs_raw']} of raw decode incl. keys); lazily {r['lazy_replay_s']} s "
                  f"({r['lazy_replay_records_per_s']:,}/s), materialized by {r['lazy_then_materialize_s']} s; "
                  f"{r['bytes_per_committed_offset']} B per offset", flush=True, file=OUT)
            shutil.rmtree(os.path.join(root, f"distinct-{n}"), ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    failovers = [] if args.skip_failover else failover_scale(sizes)
    result = {"machine": info, "memory": mem, "replay": replays, "failover": failovers,
              "extrapolation": extrapolate(mem, replays, failovers)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scale.json").write_text(json.dumps(result, indent=2))
    for k, v in result["extrapolation"].items():
        print(f"{k}: {v}", file=OUT)


if __name__ == "__main__":
    from raygroups.chaos.run import quiet_output

    RESULTS.mkdir(exist_ok=True)
    with quiet_output(str(RESULTS / "scale-ray-output.log"), restore=False) as terminal:
        OUT = terminal
        main()
