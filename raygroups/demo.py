"""``make demo``: the failover chaos benchmark on the embedded default, about two and a half minutes.

A simulated cluster of three coordinator nodes beside a head node (8 ``__consumer_offsets`` partitions,
each replicated on all three, min ISR 2); three consumer groups of three consumer actors each (the middle
one speaks KIP-848's consumer protocol, the others the classic protocol) work through
a live synthetic topic and commit as they go, probes read the committed offsets, a client deletes scratch
groups; then 90 seconds of faults drawn from the whole catalogue with a fixed seed (shard kills and
pauses, node kills and restarts, a follower's torn or bit-flipped log, the controller killed mid-failover,
consumer kills and pauses, a full restart...). It ends with the checker's verdict on the history and the
paths of ``history.jsonl``, ``report.json`` and ``timeline.png`` (in ``chaos-demo/``).

``raygroups chaos run --help`` has every option; ``python -m raygroups.demo_inprocess`` shows the protocol
step by step without Ray.
"""

from __future__ import annotations

import argparse
import sys

from raygroups.chaos.faults import faults_for


def main(argv: list[str] | None = None, restore_output: bool = True) -> int:
    from raygroups.chaos.run import RunOptions
    from raygroups.cli.chaos import run_benchmark

    parser = argparse.ArgumentParser(description="raygroups demo: the failover chaos benchmark, shortened")
    parser.add_argument("--seconds", type=float, default=90.0, help="how long faults are injected")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--nodes", type=int, default=3, help="simulated coordinator nodes (1: a single-node Ray)")
    parser.add_argument("--group-protocol", choices=("classic", "consumer", "mixed"), default="mixed",
                        help="the groups' protocol: classic, consumer (KIP-848), or mixed (every other group)")
    parser.add_argument("--out", default="chaos-demo")
    args = parser.parse_args(argv)
    options = RunOptions(seconds=args.seconds, seed=args.seed, nodes=args.nodes, out=args.out,
                         group_protocol=args.group_protocol)
    return run_benchmark(options, faults_for(replicated=args.nodes > 1), restore_output=restore_output)


if __name__ == "__main__":
    sys.exit(main(restore_output=False))
