"""Kill a shard actor during continuous commits: every acknowledged commit is still there afterwards,
and a stable group whose member kept heartbeating through the outage is not rebalanced."""

from __future__ import annotations

import threading

import pytest

from raygroups import Errors, partition_for
from tests.ray.conftest import wait_for
from tests.ray.test_ray_client_api import _stable_member

pytestmark = pytest.mark.ray


def test_kill_a_shard_during_commits(cluster):
    cluster.create_topic("orders", 1)
    client = cluster.client()
    victim = 0
    groups = [g for g in (f"app-{i}" for i in range(40)) if partition_for(g, cluster.num_partitions) == victim][:3]
    groups += [g for g in (f"other-{i}" for i in range(40)) if partition_for(g, cluster.num_partitions) != victim][:2]
    stable = groups[0]
    member = _stable_member(client, group_id=stable)
    before = cluster.shard_status()[victim]

    stop = threading.Event()
    acked: dict[str, int] = {}
    heartbeat_errors: list[Errors] = []

    def commit_loop(group: str) -> None:
        offset = 0
        kw = {"generation_id": 1, "member_id": member} if group == stable else {}
        while not stop.is_set():
            offset += 1
            r = client.commit_offsets(group_id=group, offsets={("orders", 0): (offset, "")}, **kw).result(60)
            if r.errors[("orders", 0)] is Errors.NONE:
                acked[group] = offset

    def heartbeat_loop() -> None:
        while not stop.is_set():
            r = client.heartbeat(group_id=stable, generation_id=1, member_id=member).result(60)
            heartbeat_errors.append(r.error)
            stop.wait(0.1)

    threads = [threading.Thread(target=commit_loop, args=(g,)) for g in groups]
    threads.append(threading.Thread(target=heartbeat_loop))
    for t in threads:
        t.start()
    try:
        wait_for(lambda: all(acked.get(g, 0) >= 5 for g in groups), what="commits before the kill")
        at_kill = dict(acked)
        cluster.kill_shard(victim)
        wait_for(lambda: cluster.shard_status()[victim]["pid"] != before["pid"], what="the shard to restart")
        wait_for(lambda: all(acked.get(g, 0) >= at_kill[g] + 5 for g in groups), what="commits after the restart")
    finally:
        stop.set()
        for t in threads:
            t.join(60)

    after = cluster.shard_status()[victim]
    assert after["leader_epoch"] > before["leader_epoch"]
    assert after["load_records"] > 0
    for g in groups:
        fetched = client.fetch_offsets(group_id=g, partitions=[("orders", 0)]).result(60)
        assert fetched.offsets[("orders", 0)].offset == acked[g], g
    # The stable group was not rebalanced: same generation, same member, heartbeats kept succeeding.
    described = client.describe_groups([stable]).result(60)[0]
    assert described.group_state == "Stable"
    assert [m.member_id for m in described.members] == [member]
    assert client.heartbeat(group_id=stable, generation_id=1, member_id=member).result(60).error is Errors.NONE
    assert set(heartbeat_errors) == {Errors.NONE}
