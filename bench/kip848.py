"""KIP-848 in the core, each figure with a baseline measured in the same run (no Ray: what the coordinator's
own computation costs, on one core of this machine).

* The server assignor's time for 10 000 members over 100 000 partitions (Kafka publishes 3.5-4.3 ms for
  its Java uniform assignor at this size): ``uniform`` (every member subscribed to the same topics: 1
  topic, and 100 topics of 1 000 partitions) and ``range``, a first assignment and a re-run after one
  member leaves and one joins. Baseline: the classic protocol's client-side assignors (``range`` and
  ``cooperative-sticky``, which a group leader runs in JoinGroup/SyncGroup) on the same input.
* A 1 000-member group forming through the in-process coordinator: every member joins at once, then
  heartbeats every 5 s (the manual clock's) until each holds its share at the group's epoch (consumer
  protocol; with KIP-1263's assignment interval of 1 s, the default, and with 0: one target per group
  epoch, as Kafka computed before 4.3) against every member's JoinGroup (two steps) and SyncGroup until
  all hold one generation's assignment (classic, initial delay 0): coordinator CPU seconds, requests
  answered and target computations.
* "10 consumers, the topic grows by 900 partitions" (Kafka's published case: 5 s with KIP-848 against
  103 s classic, where the classic figure is dominated by the barrier waiting on the slowest member):
  here, with members that answer at once, what is left is the coordinator's work and the number of
  round trips each member needs: requests answered and coordinator seconds until every member holds its
  new share, each protocol.

Writes ``bench/results/kip848.json``. Run: ``.venv/bin/python bench/kip848.py``.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raygroups.coordinator.consumer_protocol import (  # noqa: E402
    Subscription,
    encode_assignment,
    encode_subscription,
)
from raygroups.coordinator.server_assignors import ASSIGNORS, MemberSubscription  # noqa: E402
from raygroups.membership.assignors import get_assignor  # noqa: E402

from raygroups import Errors  # noqa: E402
from raygroups.testing import InProcessCoordinator, ManualClock  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10,
          "group.consumer.heartbeat.interval.ms": 5_000}


def _best(fn, repeat: int = 3) -> float:
    """The best of ``repeat`` wall-clock timings of ``fn()`` (seconds), collection off while timed."""
    times = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        gc.enable()
    return min(times)


def assignor_times(members: int, topics: dict[str, int]) -> dict:
    names = frozenset(topics)
    member_ids = [f"member-{i:05d}" for i in range(members)]
    subs = {m: MemberSubscription(names) for m in member_ids}
    out: dict = {"members": members, "topics": len(topics), "partitions": sum(topics.values())}
    for name in ("uniform", "range"):
        assignor = ASSIGNORS[name]
        first = assignor.assign(subs, topics)
        after = {m: MemberSubscription(names, None, first[m]) for m in member_ids[1:]}
        after["member-new"] = MemberSubscription(names)
        out[f"server_{name}_first_ms"] = round(_best(lambda a=assignor: a.assign(subs, topics)) * 1000, 1)
        out[f"server_{name}_member_swap_ms"] = round(_best(lambda a=assignor, s=after: a.assign(s, topics)) * 1000, 1)
    classic_subs = {m: Subscription(tuple(sorted(topics))) for m in member_ids}
    for name in ("range", "cooperative-sticky"):
        assignor = get_assignor(name)
        out[f"classic_{name}_first_ms"] = round(_best(lambda a=assignor: a.assign(topics, classic_subs), 1) * 1000, 1)
    return out


def _coordinator(topics: dict[str, int], **config) -> tuple[InProcessCoordinator, ManualClock]:
    clock = ManualClock(0)
    counter = itertools.count()
    coord = InProcessCoordinator(num_partitions=1, clock=clock, config={**CONFIG, **config},
                                 member_id_generator=lambda prefix: f"{prefix}-{next(counter)}")
    for name, n in topics.items():
        coord.create_topic(name, n)
    return coord, clock


def consumer_group_forms(members: int, topic: str, partitions: int, interval_ms: int) -> dict:
    """Every member joins, then heartbeats round after round, a heartbeat interval apart (reporting what it
    owns), until all are at the assignment epoch and own their target; ``interval_ms``: KIP-1263's
    ``group.consumer.assignment.interval.ms``."""
    coord, clock = _coordinator({topic: partitions}, **{"group.consumer.assignment.interval.ms": interval_ms})
    hb = coord.consumer_group_heartbeat
    start, requests = time.process_time(), 0
    state: dict[str, tuple[int, dict]] = {}
    for i in range(members):
        r = hb(group_id="g", member_id=f"m{i}", rebalance_timeout_ms=60_000, subscribed_topic_names=[topic],
               topic_partitions={}).result(0)
        requests += 1
        state[r.member_id] = (r.member_epoch, r.assignment or {})
    rounds = 0
    while True:
        described = coord.consumer_group_describe(["g"]).result(0)[0]
        if described.group_state == "Stable":
            break
        rounds += 1
        clock.advance(CONFIG["group.consumer.heartbeat.interval.ms"])
        for member_id, (epoch, owned) in list(state.items()):
            r = hb(group_id="g", member_id=member_id, member_epoch=epoch, topic_partitions=owned).result(0)
            requests += 1
            assert r.error is Errors.NONE, r
            state[member_id] = (r.member_epoch, owned if r.assignment is None else r.assignment)
    seconds = time.process_time() - start
    coord.close()
    return {"assignment_interval_ms": interval_ms, "coordinator_cpu_s": round(seconds, 3), "requests": requests,
            "heartbeat_rounds_after_joining": rounds,
            "target_computations": sum(1 for k, _ in coord.log_records(0)
                                       if type(k).__name__ == "ConsumerGroupTargetAssignmentMetadataKey")}


def classic_group_forms(members: int, topic: str, partitions: int) -> dict:
    """Every member joins (KIP-394: two JoinGroups), the leader assigns with ``range``, every member syncs."""
    coord, clock = _coordinator({topic: partitions})
    subscription = encode_subscription(Subscription((topic,)))
    join = lambda member_id="": coord.join_group(  # noqa: E731
        group_id="g", member_id=member_id, protocol_type="consumer", protocols=[("range", subscription)],
        session_timeout_ms=45_000, rebalance_timeout_ms=60_000, client_id="c")
    start, requests = time.process_time(), 0
    ids = []
    for _ in range(members):
        ids.append(join().result(0).member_id)
        requests += 1
    futures = []
    for member_id in ids:
        futures.append(join(member_id))
        requests += 1
    clock.advance(1)  # the initial delay (0 ms) ends: the join phase completes with every member
    answers = [f.result(0) for f in futures]
    generation = answers[0].generation_id
    leader = next(a for a in answers if a.members)
    plan = get_assignor("range").assign({topic: partitions}, {m: Subscription((topic,)) for m in ids})
    syncs = [coord.sync_group(group_id="g", generation_id=generation, member_id=m,
                              assignments={k: encode_assignment(v) for k, v in plan.items()} if m == leader.member_id
                              else {}) for m in ids]
    requests += len(ids)
    assert all(s.result(0).error is Errors.NONE for s in syncs)
    seconds = time.process_time() - start
    coord.close()
    return {"coordinator_cpu_s": round(seconds, 3), "requests": requests}


def topic_grows(protocol: str, members: int = 10, before: int = 100, after: int = 1_000) -> dict:
    """``members`` consumers stable on ``before`` partitions; the topic grows to ``after``: requests and
    coordinator seconds until each holds its new share."""
    if protocol == "classic":
        # A classic group re-forms in full when its leader notices the new partitions: every member rejoins
        # and syncs behind the barrier, as in a first formation (measured as one).
        return {"protocol": "classic", **classic_group_forms(members, "t", after)}
    coord, clock = _coordinator({"t": before})
    hb = coord.consumer_group_heartbeat
    state = {}
    for i in range(members):
        r = hb(group_id="g", member_id=f"m{i}", rebalance_timeout_ms=60_000, subscribed_topic_names=["t"],
               topic_partitions={}).result(0)
        state[r.member_id] = (r.member_epoch, r.assignment or {})
    for _ in range(4):
        clock.advance(CONFIG["group.consumer.heartbeat.interval.ms"])
        for member_id, (epoch, owned) in list(state.items()):
            r = hb(group_id="g", member_id=member_id, member_epoch=epoch, topic_partitions=owned).result(0)
            state[member_id] = (r.member_epoch, owned if r.assignment is None else r.assignment)
    assert coord.consumer_group_describe(["g"]).result(0)[0].group_state == "Stable"
    coord.create_topic("t", after)
    start, requests, rounds = time.process_time(), 0, 0
    while True:
        rounds += 1
        clock.advance(CONFIG["group.consumer.heartbeat.interval.ms"])
        for member_id, (epoch, owned) in list(state.items()):
            r = hb(group_id="g", member_id=member_id, member_epoch=epoch, topic_partitions=owned).result(0)
            requests += 1
            state[member_id] = (r.member_epoch, owned if r.assignment is None else r.assignment)
        if coord.consumer_group_describe(["g"]).result(0)[0].group_state == "Stable":
            break
    seconds = time.process_time() - start
    assert sum(len(o.get("t", [])) for _, o in state.values()) == after
    coord.close()
    return {"protocol": "consumer", "coordinator_cpu_s": round(seconds, 3), "requests": requests,
            "heartbeat_rounds": rounds}


def main() -> None:
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "assignor_10k_members_100k_partitions": {
            "one_topic": assignor_times(10_000, {"t": 100_000}),
            "hundred_topics": assignor_times(10_000, {f"t{i:03d}": 1_000 for i in range(100)}),
            "kafka_published_uniform_ms": [3.5, 4.3],
        },
        "group_of_1000_forms": {
            "consumer": consumer_group_forms(1_000, "t", 2_000, interval_ms=1_000),
            "consumer_one_target_per_epoch": consumer_group_forms(1_000, "t", 2_000, interval_ms=0),
            "classic": classic_group_forms(1_000, "t", 2_000),
        },
        "ten_consumers_topic_grows_by_900": {
            "consumer": topic_grows("consumer"),
            "classic": topic_grows("classic"),
            "kafka_published_s": {"consumer": 5, "classic": 103},
        },
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kip848.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
