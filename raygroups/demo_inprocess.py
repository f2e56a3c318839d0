"""A scripted rebalance on the in-process coordinator, printed step by step.

Three consumers join group "demo" (KIP-394 two-step join, initial rebalance delay), the leader runs
the range assignor and syncs, they commit; then one leaves, the others rejoin and get its partitions.
Everything runs on a ManualClock, so the output is the same on every run.
"""

from __future__ import annotations

import itertools

from raygroups import Errors, partition_for
from raygroups.assignors import range_assign
from raygroups.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from raygroups.testing import InProcessCoordinator, ManualClock

GROUP = "demo"
TOPIC = "orders"
PARTITIONS = 6


def _fmt(tps) -> str:
    return ",".join(f"{t}-{p}" for t, p in tps) or "-"


def main() -> None:
    clock = ManualClock(0)
    ids = itertools.count(1)
    coord = InProcessCoordinator(
        num_partitions=50, clock=clock,
        config={"group.initial.rebalance.delay.ms": 3000, "group.min.session.timeout.ms": 1000},
        member_id_generator=lambda prefix: f"{prefix}-{next(ids)}",
    )
    print(f"group {GROUP!r} lives on __consumer_offsets-{partition_for(GROUP, 50)}")
    sub = encode_subscription(Subscription(topics=(TOPIC,)))
    members: dict[str, str] = {}

    def join(client, member_id=""):
        return coord.join_group(group_id=GROUP, member_id=member_id, protocol_type="consumer",
                                protocols=[("range", sub)], session_timeout_ms=10_000,
                                rebalance_timeout_ms=30_000, client_id=client)

    def rebalance(futures):
        while not all(f.done() for f in futures.values()):
            clock.advance(1000)
        responses = {c: f.result() for c, f in futures.items()}
        gen = next(iter(responses.values())).generation_id
        leader = next(r.member_id for r in responses.values() if r.leader == r.member_id)
        print(f"t={clock.now_ms():>6} ms  join complete: generation {gen}, leader {leader}")
        lead = responses[next(c for c, r in responses.items() if r.member_id == leader)]
        subs = {m.member_id: decode_subscription(m.metadata).topics for m in lead.members}
        plan = range_assign(subs, {TOPIC: PARTITIONS})
        syncs = {}
        for client, r in responses.items():
            assignments = {}
            if r.member_id == leader:
                assignments = {m: encode_assignment(Assignment(partitions=tuple(tps))) for m, tps in plan.items()}
            syncs[client] = coord.sync_group(group_id=GROUP, generation_id=gen, member_id=r.member_id,
                                             assignments=assignments)
        for client, f in syncs.items():
            s = f.result(timeout=0)
            assert s.error is Errors.NONE, s
            tps = decode_assignment(s.assignment).partitions
            print(f"          {client:<10} {responses[client].member_id:<12} gets {_fmt(tps)}")
        print(f"          state: {coord.group_state_for_testing(GROUP)}")
        return gen, {c: r.member_id for c, r in responses.items()}

    print("three consumers join (JoinGroup v9: MEMBER_ID_REQUIRED first, then join with the id)")
    futures = {}
    for client in ("consumer-a", "consumer-b", "consumer-c"):
        first = join(client).result(timeout=0)
        print(f"t={clock.now_ms():>6} ms  {client}: {first.error.name}, assigned member id {first.member_id}")
        futures[client] = join(client, first.member_id)
        clock.advance(500)
    gen, members = rebalance(futures)

    for i, member_id in enumerate(members.values()):
        coord.commit_offsets(group_id=GROUP, offsets={(TOPIC, i): (100 * (i + 1), "")},
                             generation_id=gen, member_id=member_id).result(timeout=0)
    print(f"t={clock.now_ms():>6} ms  each consumer committed one offset")

    print(f"t={clock.now_ms():>6} ms  consumer-b leaves the group")
    left = coord.leave_group(group_id=GROUP, members=[(members["consumer-b"], None)]).result(timeout=0)
    print(f"          LeaveGroup: {left.members[0].error.name}; state: {coord.group_state_for_testing(GROUP)}")
    for client in ("consumer-a", "consumer-c"):
        hb = coord.heartbeat(group_id=GROUP, generation_id=gen, member_id=members[client]).result(timeout=0)
        print(f"          {client} heartbeat: {hb.error.name} -> rejoins")
    futures = {c: join(c, members[c]) for c in ("consumer-a", "consumer-c")}
    gen, members = rebalance(futures)

    fetched = coord.fetch_offsets(group_id=GROUP).result(timeout=0)
    print("committed offsets: " + ", ".join(f"{t}-{p}={o.offset}" for (t, p), o in fetched.offsets.items()))
    print(f"records in __consumer_offsets-{partition_for(GROUP, 50)}:")
    for key, value in coord.log_records(partition_for(GROUP, 50)):
        kind = type(key).__name__.replace("Key", "")
        if kind == "GroupMetadata":
            detail = f"generation {value.generation}, {len(value.members)} members" if value else "tombstone"
        else:
            detail = f"{key.topic}-{key.partition} offset {value.offset}" if value else "tombstone"
        print(f"  {kind:<14} {detail}")
    coord.close()


if __name__ == "__main__":
    main()
