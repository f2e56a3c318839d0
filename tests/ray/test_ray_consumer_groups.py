"""Consumer groups of real consumer actors: cooperative-sticky rebalances while consumers come and go,
one owner per partition per generation, nothing skipped; a killed consumer's partitions move after the
session timeout."""

from __future__ import annotations

import pytest

from raygroups import ConsumerGroup, SyntheticSource, VerifyingProcessor
from tests.ray.conftest import wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TOPIC = "events"
PARTITIONS = 8


def _all_owned(group: ConsumerGroup, members: int):
    s = group.stats()
    owned = [tp for w in s["workers"] for tp in w.get("assignment", [])]
    ok = s["state"] == "Stable" and s["members"] == members and len(owned) == PARTITIONS \
        and len(set(map(tuple, owned))) == PARTITIONS
    return s if ok else None


def _progressed(group: ConsumerGroup, floor: int):
    s = group.stats()
    return s if all(p["committed"] >= floor for p in s["partitions"]) else None


def _check_one_owner_per_generation(histories):
    owners: dict[tuple[int, tuple], str] = {}
    for entry in histories:
        for tp in entry["assignment"]:
            key = (entry["generation"], tuple(tp))
            previous = owners.setdefault(key, entry["member_id"])
            assert previous == entry["member_id"], f"{tp} owned twice in generation {entry['generation']}"


def _check_nothing_skipped(stats_list, committed):
    covered: dict[str, list] = {}
    invalid = 0
    for stats in stats_list:
        processor = stats["processor"]
        invalid += processor["invalid"]
        for tp, spans in processor["ranges"].items():
            covered.setdefault(tp, []).extend(spans)
    assert invalid == 0
    for (topic, partition), offset in committed.items():
        spans = sorted(covered.get(f"{topic}:{partition}", []))
        reach = 0
        for start, end in spans:
            assert start <= reach, f"{topic}-{partition}: offsets {reach}..{start - 1} were never processed"
            reach = max(reach, end)
        assert reach >= offset, f"{topic}-{partition}: committed {offset} but processed only up to {reach}"


def test_three_groups_of_four_cooperative_consumers_scale_up_and_down(cluster):
    """app-1's members run two per consumer process (sharing the process's client): scaling it down to 2
    retires a whole process."""
    source = SyntheticSource({TOPIC: PARTITIONS}, records_per_partition=None)
    groups = [
        ConsumerGroup(VerifyingProcessor, cluster, f"app-{i}", [TOPIC], source, 4, processor_args=(source,),
                      assignors=("cooperative-sticky",), session_timeout_ms=6_000, heartbeat_interval_ms=500,
                      max_records_per_poll=200, members_per_process=2 if i == 1 else 1)
        for i in range(3)
    ]
    try:
        for g in groups:
            wait_for(lambda g=g: _all_owned(g, 4), timeout_s=90, what=f"{g.group_id} stable with 4 members")
        for g in groups:
            wait_for(lambda g=g: _progressed(g, 200), timeout_s=60, what=f"{g.group_id} commits")
        groups[0].scale(5)
        groups[1].scale(2)
        wait_for(lambda: _all_owned(groups[0], 5), timeout_s=90, what="app-0 with 5 members")
        wait_for(lambda: _all_owned(groups[1], 2), timeout_s=90, what="app-1 with 2 members")
        before = {g.group_id: {(p["topic"], p["partition"]): p["committed"] for p in g.stats()["partitions"]}
                  for g in groups}
        for g in groups:
            wait_for(lambda g=g: all(p["committed"] > before[g.group_id][(p["topic"], p["partition"])]
                                     for p in g.stats()["partitions"]), timeout_s=60,
                     what=f"{g.group_id} progressing after scaling")
    finally:
        for g in groups:
            g.stop()
    for g in groups:
        final = g.stats()
        retired = final["retired"]
        assert len(retired) == {"app-0": 5, "app-1": 4, "app-2": 4}[g.group_id]
        _check_one_owner_per_generation([h for w in retired for h in w["history"]])
        committed = {(p["topic"], p["partition"]): p["committed"] for p in final["partitions"]}
        assert all(offset > 0 for offset in committed.values())
        _check_nothing_skipped(retired, committed)
        assert all(w["fatal"] is None for w in retired)


def test_a_killed_consumer_loses_its_partitions_after_the_session_timeout(cluster):
    source = SyntheticSource({TOPIC: PARTITIONS}, records_per_partition=None)
    group = ConsumerGroup(VerifyingProcessor, cluster, "victims", [TOPIC], source, 3, processor_args=(source,),
                          assignors=("range",), session_timeout_ms=3_000, heartbeat_interval_ms=300)
    try:
        stable = wait_for(lambda: _all_owned(group, 3), timeout_s=90, what="3 members")
        generation = stable["generation"]
        victim = stable["workers"][0]["member_id"]
        group.kill_consumer(0)
        after = wait_for(lambda: _all_owned(group, 2), timeout_s=60, what="the survivors to own everything")
        assert after["generation"] > generation
        described = cluster.client().describe_groups(["victims"]).result(30)[0]
        assert victim not in [m.member_id for m in described.members]
    finally:
        group.stop()


def test_a_consumer_protocol_group_scales_up_and_down_and_survives_its_shard_restart(cluster):
    """KIP-848 (``group_protocol="consumer"``): members reconcile on their own heartbeats through scale-up,
    scale-down and the group's shard killed and restarted (it replays the group's records); one owner per
    partition per member epoch, nothing skipped, commits moving on."""
    from raygroups import partition_for

    source = SyntheticSource({TOPIC: PARTITIONS}, records_per_partition=None)
    group = ConsumerGroup(VerifyingProcessor, cluster, "kip848-app", [TOPIC], source, 2, processor_args=(source,),
                          group_protocol="consumer", max_records_per_poll=200)
    try:
        wait_for(lambda: _all_owned(group, 2), timeout_s=90, what="2 consumer-protocol members")
        wait_for(lambda: _progressed(group, 200), timeout_s=60, what="commits")
        group.scale(4)
        wait_for(lambda: _all_owned(group, 4), timeout_s=90, what="4 members")
        group.scale(3)
        stable = wait_for(lambda: _all_owned(group, 3), timeout_s=90, what="3 members")
        shard = partition_for("kip848-app", cluster.num_partitions)
        pid = cluster.shard_status()[shard]["pid"]
        cluster.kill_shard(shard)
        wait_for(lambda: cluster.shard_status()[shard]["pid"] != pid, what="the shard to restart")
        before = {(p["topic"], p["partition"]): p["committed"] for p in stable["partitions"]}
        wait_for(lambda: all(p["committed"] > before[(p["topic"], p["partition"])]
                             for p in group.stats()["partitions"]), timeout_s=90,
                 what="every partition committing after the shard restart")
        after = wait_for(lambda: _all_owned(group, 3), timeout_s=60, what="3 members after the restart")
        assert after["state"] == "Stable"
    finally:
        group.stop()
    final = group.stats()
    retired = final["retired"]
    assert len(retired) == 4
    assert [w["fatal"] for w in retired] == [None] * 4
    _check_one_owner_per_generation([h for w in retired for h in w["history"]])
    committed = {(p["topic"], p["partition"]): p["committed"] for p in final["partitions"]}
    _check_nothing_skipped(retired, committed)
