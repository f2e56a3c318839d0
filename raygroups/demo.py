"""``make demo``: the main job on the embedded default.

``start_local`` starts a local Ray with 8 coordinator shards; a ``ConsumerGroup`` of 4 consumer actors
(cooperative-sticky) works through a live synthetic topic of 12 partitions and commits as it goes.
Mid-run the shard that coordinates the group is killed (Ray restarts it; it replays its log), later one
consumer leaves and the group rebalances. A live table shows generation, members, assignments,
committed offsets and lag; at the end the demo checks that no acknowledged commit was lost and that
no record was skipped.

``python -m raygroups.demo_inprocess`` shows the protocol step by step without Ray.
"""

from __future__ import annotations

import argparse
import sys
import time

from raygroups import ConsumerGroup, SyntheticSource, VerifyingProcessor, partition_for, start_local

TOPIC = "orders"
GROUP = "orders-app"


def _table(t: float, stats: dict, shards: list[dict]) -> str:
    lines = [f"t={t:5.1f}s  group {stats['group_id']}: {stats['state']}, generation {stats['generation']}, "
             f"{stats['members']} members"]
    for w in stats["workers"]:
        tps = ",".join(str(p) for _, p in w.get("assignment", [])) or "-"
        lines.append(f"          consumer {w.get('worker')}: partitions {tps}")
    committed = "  ".join(f"{p['partition']:>2}:{max(p['committed'], 0):>6}" for p in stats["partitions"])
    lag = sum(p["lag"] for p in stats["partitions"])
    lines.append(f"          committed {committed}")
    lines.append(f"          total lag {lag} records; shard epochs {[s.get('leader_epoch') for s in shards]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="raygroups demo: a consumer group on Ray through a shard crash")
    parser.add_argument("--seconds", type=float, default=24.0)
    args = parser.parse_args(argv)

    print("starting a local deployment: 8 coordinator shards (one Ray actor per __consumer_offsets partition)")
    cluster = start_local(num_partitions=8, config={"group.initial.rebalance.delay.ms": 1_000,
                                                    "group.min.session.timeout.ms": 1_000})
    ok = True
    try:
        source = SyntheticSource({TOPIC: 12}, records_per_partition=None, records_per_second=400)
        shard = partition_for(GROUP, cluster.num_partitions)
        print(f"group {GROUP!r} is coordinated by shard {shard}; 4 consumer actors join it")
        group = ConsumerGroup(VerifyingProcessor, cluster, GROUP, [TOPIC], source, 4, processor_args=(source,),
                              assignors=("cooperative-sticky",), session_timeout_ms=6_000,
                              heartbeat_interval_ms=500, commit_interval_s=0.5)
        start = time.monotonic()
        killed = left = False
        while (elapsed := time.monotonic() - start) < args.seconds:
            if not killed and elapsed > args.seconds * 0.3:
                print(f"\n*** killing shard {shard} (the group's coordinator) mid-run ***\n")
                cluster.kill_shard(shard)
                killed = True
            if not left and elapsed > args.seconds * 0.6:
                print("\n*** consumer 3 leaves the group: the group rebalances ***\n")
                group.scale(3)
                left = True
            print(_table(elapsed, group.stats(), cluster.shard_status()), flush=True)
            time.sleep(1.5)
        group.stop()
        final = group.stats()
        committed = {(p["topic"], p["partition"]): p["committed"] for p in final["partitions"]}
        acked: dict[tuple[str, int], int] = {}
        processed = 0
        for w in final["retired"]:
            processed += w["processor"]["processed"]
            for topic, partition, offset in w["acked"]:
                acked[(topic, partition)] = max(offset, acked.get((topic, partition), 0))
        lost = {tp: (acked[tp], committed.get(tp, -1)) for tp in acked if committed.get(tp, -1) < acked[tp]}
        invalid = sum(w["processor"]["invalid"] for w in final["retired"])
        print(f"\nprocessed {processed} records; {len(acked)} partitions with acknowledged commits")
        print(f"check: every acknowledged commit is still committed ... {'OK' if not lost else 'LOST ' + str(lost)}")
        print(f"check: every record verified against the source ...... {'OK' if invalid == 0 else invalid}")
        ok = not lost and invalid == 0 and len(acked) == len(committed)
    finally:
        cluster.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
