"""``make demo``: the main job on the embedded default.

``start_local(num_nodes=3)`` simulates three coordinator nodes (``node-0`` ... ``node-2``) beside a head
node (8 partitions, each replicated on all three, min ISR 2); a ``ConsumerGroup`` of 4 consumer actors
(cooperative-sticky) works through a live synthetic topic of 12 partitions and commits as it goes. Once
the group is stable and committing on every partition, the faults start: the node that leads the group's
partition is killed (its raylet dies; the controller elects a new leader from the ISR, which replays its
replica), the node restarts under its name and rejoins the ISR of its partitions, and one consumer leaves
so that the group rebalances. With ``--nodes 1`` it runs on a single-node Ray and kills the coordinating
shard's process instead. A live table shows generation, members, assignments, committed offsets, lag,
leaders and in-sync replicas; at the end the demo checks that no acknowledged commit was lost and that
no record was skipped (and, if a check fails, prints the controller's timeline).

``python -m raygroups.demo_inprocess`` shows the protocol step by step without Ray.
"""

from __future__ import annotations

import argparse
import sys
import time

from raygroups import ConsumerGroup, SyntheticSource, VerifyingProcessor, partition_for, start_local

TOPIC = "orders"
GROUP = "orders-app"
START_TIMEOUT_S = 180


def _until_processing(group: ConsumerGroup, cluster) -> bool:
    """Show the group forming until it is Stable and has committed on every partition (the faults start
    then, so that they hit a working group)."""
    start = time.monotonic()
    while time.monotonic() - start < START_TIMEOUT_S:
        stats = group.stats()
        print(_table(time.monotonic() - start, stats, cluster), flush=True)
        if stats["state"] == "Stable" and all(p["committed"] > 0 for p in stats["partitions"]):
            print("\n*** the group is stable and committing: the faults start ***\n")
            return True
        time.sleep(1.5)
    return False


def _print_timeline(cluster) -> None:
    """What the controller did, for a run whose checks failed."""
    events = cluster.controller_events()
    print("\nthe controller's timeline:")
    first = events[0]["t"] if events else 0.0
    for e in events[-60:]:
        fields = ", ".join(f"{k}={v}" for k, v in e.items() if k not in ("t", "event"))
        print(f"  {e['t'] - first:7.2f}s  {e['event']}: {fields}")


def _table(t: float, stats: dict, cluster) -> str:
    # A shard Ray is still starting answers nothing yet: shown as unavailable rather than waited for.
    shards = cluster.shard_status(timeout_s=2)
    lines = [f"t={t:5.1f}s  group {stats['group_id']}: {stats['state']}, generation {stats['generation']}, "
             f"{stats['members']} members"]
    for w in stats["workers"]:
        tps = ",".join(str(p) for _, p in w.get("assignment", [])) or "-"
        lines.append(f"          consumer {w.get('worker')}: partitions {tps}")
    committed = "  ".join(f"{p['partition']:>2}:{max(p['committed'], 0):>6}" for p in stats["partitions"])
    lag = sum(p["lag"] for p in stats["partitions"])
    lines.append(f"          committed {committed}")
    lines.append(f"          total lag {lag} records; leader epochs {[s.get('leader_epoch') for s in shards]}")
    if cluster.replicated:
        states = [cluster.partition_state(p) for p in range(cluster.num_partitions)]
        led = "  ".join(f"{p}:{s['leader'] or 'offline'}/{len(s['isr'])}" for p, s in enumerate(states))
        lines.append(f"          partition:leader/in-sync replicas  {led}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="raygroups demo: a consumer group on Ray through a node's "
                                                 "failure and return")
    parser.add_argument("--seconds", type=float, default=24.0)
    parser.add_argument("--nodes", type=int, default=3, help="simulated coordinator nodes (1: a single-node Ray)")
    args = parser.parse_args(argv)

    config = {"group.initial.rebalance.delay.ms": 1_000, "group.min.session.timeout.ms": 1_000}
    if args.nodes > 1:
        print(f"starting a simulated cluster: head node + {args.nodes} coordinator nodes, 8 partitions, "
              f"each replicated on {min(3, args.nodes)} nodes")
        cluster = start_local(num_partitions=8, num_nodes=args.nodes, config=config)
    else:
        print("starting a local deployment: 8 coordinator shards (one Ray actor per __consumer_offsets partition)")
        cluster = start_local(num_partitions=8, config=config)
    ok = True
    try:
        source = SyntheticSource({TOPIC: 12}, records_per_partition=None, records_per_second=400)
        shard = partition_for(GROUP, cluster.num_partitions)
        print(f"group {GROUP!r} is coordinated by shard {shard}; 4 consumer actors join it")
        group = ConsumerGroup(VerifyingProcessor, cluster, GROUP, [TOPIC], source, 4, processor_args=(source,),
                              assignors=("cooperative-sticky",), session_timeout_ms=6_000,
                              heartbeat_interval_ms=500, commit_interval_s=0.5)
        if not _until_processing(group, cluster):
            print(f"\nthe group did not start processing within {START_TIMEOUT_S} s")
            if cluster.replicated:
                _print_timeline(cluster)
            return 1
        start = time.monotonic()
        killed = left = False
        victim = None
        # Every step happens, in order, even when one takes longer than its share of --seconds, and the last
        # one (the consumer leaving) is watched for 40 % of --seconds.
        left_at = float("inf")
        while (elapsed := time.monotonic() - start) < max(args.seconds, left_at + args.seconds * 0.4):
            if not killed and elapsed > args.seconds * 0.3:
                if cluster.replicated:
                    victim = cluster.partition_state(shard)["leader"]
                    print(f"\n*** killing node {victim} (leader of partition {shard}, the group's "
                          f"coordinator) mid-run ***\n")
                    cluster.kill_node(victim, graceful=False)
                else:
                    print(f"\n*** killing shard {shard} (the group's coordinator) mid-run ***\n")
                    cluster.kill_shard(shard)
                killed = True
            if victim is not None and elapsed > args.seconds * 0.45:
                print(f"\n*** {victim} restarts under its name: it rejoins the ISR of its partitions ***")
                began = time.monotonic()
                cluster.restart_node(victim)  # as a rebooted host: after Ray declared the old one dead
                print(f"*** {victim} is back after {time.monotonic() - began:.1f} s ***\n")
                victim = None
            if not left and killed and victim is None and elapsed > args.seconds * 0.6:
                print("\n*** consumer 3 leaves the group: the group rebalances ***\n")
                group.scale(3)
                left, left_at = True, time.monotonic() - start
            print(_table(time.monotonic() - start, group.stats(), cluster), flush=True)
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
        if not ok and cluster.replicated:
            _print_timeline(cluster)
    finally:
        cluster.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
