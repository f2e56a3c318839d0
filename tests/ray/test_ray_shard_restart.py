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
    # Loaded lazily: the offsets it did not need at once were turned into objects behind it.
    wait_for(lambda: "offsets_materialized" in cluster.shard_status()[victim]["start_timeline"],
             what="the restarted shard's pending offsets to be materialized")
    assert cluster.shard_status()[victim]["pending_offsets"] == 0
    for g in groups:
        fetched = client.fetch_offsets(group_id=g, partitions=[("orders", 0)]).result(60)
        assert fetched.offsets[("orders", 0)].offset == acked[g], g
    # The stable group was not rebalanced: same generation, same member, heartbeats kept succeeding.
    described = client.describe_groups([stable]).result(60)[0]
    assert described.group_state == "Stable"
    assert [m.member_id for m in described.members] == [member]
    assert client.heartbeat(group_id=stable, generation_id=1, member_id=member).result(60).error is Errors.NONE
    assert set(heartbeat_errors) == {Errors.NONE}


def test_a_spare_serves_nothing_until_it_adopts_and_serves_that_partition_again_after_a_restart(cluster, tmp_path):
    """A replicated deployment's spare shard process (``ActorFactory``): it answers nothing before it adopts
    a partition, adopts one partition only, and when Ray restarts its process it serves that partition
    again (it finds it in the GCS); ``ensure_spare`` gives a node one, which a failover onto the node
    adopts; with ``shard.standby.per.partition`` a node has one spare per partition it follows and a
    failover adopts the partition's own (the controller's ``SpareKeeper`` deciding, the seam performing);
    ``stop_spares`` leaves neither actor nor entry behind."""
    import ray
    from ray.experimental import internal_kv
    from raygroups.placement.spare_keeper import SpareKeeper

    from raygroups.deployment.seam import (
        SPARE_BOUND_KEY_PREFIX,
        ActorFactory,
        actor_id,
        actor_state,
        kv_put,
        spare_of,
    )

    namespace = "test-spare"
    factory = ActorFactory(namespace, 4, {"shard.cold.spares": 1}, str(tmp_path))  # (2 by default)
    keeper = SpareKeeper(factory)
    spare = factory.create_shard(None, "n1", {"node_id": ray.get_runtime_context().get_node_id()})
    wait_for(lambda: factory.free_spare_names("n1"), what="the spare to be named")
    (name,) = factory.free_spare_names("n1")
    with pytest.raises(ray.exceptions.RayTaskError, match="a spare shard serves no partition"):
        ray.get(spare.status.remote(), timeout=60)
    assert ray.get(spare.close.remote(), timeout=30) is None
    assert ray.get(spare.adopt.remote(2), timeout=30) is True
    assert ray.get(spare.adopt.remote(2), timeout=30) is True and ray.get(spare.adopt.remote(3), timeout=30) is False
    kv_put(SPARE_BOUND_KEY_PREFIX + name.encode(), b"2", namespace)  # as replace_shard records it
    first = ray.get(spare.status.remote(), timeout=30)
    assert first["partition"] == 2 and "adopted" in first["start_timeline"]
    ray.kill(spare, no_restart=False)
    restarted = wait_for(lambda: _status_or_none(spare, first["pid"]), what="the spare restarted by Ray")
    assert restarted["partition"] == 2 and "adopted" not in restarted["start_timeline"]
    # Recorded as a partition's shard but never handed it (the controller stopped in between): the first
    # call finds the partition. Bound to a partition whose actor is another: free to adopt again.
    other = factory.create_shard(None, "n1", {"node_id": ray.get_runtime_context().get_node_id()})
    wait_for(lambda: len(factory.free_spare_names("n1")) == 2, what="the second spare to be named")
    other_name = next(n for n in factory.free_spare_names("n1") if n != name)
    kv_put(SPARE_BOUND_KEY_PREFIX + other_name.encode(), b"1", namespace)
    assert ray.get(other.probe.remote(), timeout=60)["node"] == "n1"
    assert ray.get(other.status.remote(), timeout=30)["partition"] == 1
    # A node that never led anything gets a spare too (the controller asks with the node's disk report),
    # and a cold one beside it, once: spares still starting count.
    here = {"node_id": ray.get_runtime_context().get_node_id()}
    assert keeper.ensure_spare("n2", here) is True
    assert keeper.ensure_spare("n2", here) is False and len(factory.free_spare_names("n2")) == 2
    (n2_spare,) = [n for n in factory.free_spare_names("n2") if not spare_of(n, "n2")[2]]
    (n2_cold,) = [n for n in factory.free_spare_names("n2") if spare_of(n, "n2")[2]]
    # A failover onto n2 adopts its running spare (the one with the standbys), and a new one is started
    # behind it (``replenish``); the next failover onto n2 would take the cold spare.
    wait_for(lambda: actor_state(actor_id(ray.get_actor(n2_spare, namespace=namespace))) == "ALIVE",
             what="n2's spare to run")
    assert actor_id(keeper.replace_shard(3, "n2", here)) == actor_id(ray.get_actor(n2_spare, namespace=namespace))
    assert keeper.replenish("n2", here) is True
    wait_for(lambda: len(factory.free_spare_names("n2")) == 2, what="n2's next spare to be named")
    assert n2_spare not in factory.free_spare_names("n2") and n2_cold in factory.free_spare_names("n2")
    # A spare per followed partition (shard.standby.per.partition): one for each partition the node
    # follows, none for one it no longer follows, none for every partition; a failover onto the node
    # adopts the one of its partition.
    per = ActorFactory(namespace, 4, {"shard.standby.per.partition": True, "shard.cold.spares": 1}, str(tmp_path))
    per_keeper = SpareKeeper(per)
    assert per_keeper.ensure_spare("n3", here) is True  # its cold spare only
    assert per_keeper.ensure_standby_spares("n3", {1, 2}, here) == ([1, 2], [])
    wait_for(lambda: len(per.free_spare_names("n3")) == 3, what="the spares per partition to be named")
    tagged = {spare_of(n, "n3")[1]: n for n in per.free_spare_names("n3") if not spare_of(n, "n3")[2]}
    assert set(tagged) == {1, 2}
    assert per_keeper.ensure_standby_spares("n3", {2, 3}, here) == ([3], [tagged[1]])
    wait_for(lambda: all(actor_state(actor_id(ray.get_actor(n, namespace=namespace))) == "ALIVE"
                         for n in per.free_spare_names("n3")), what="the spares per partition to run")
    adopted = per_keeper.replace_shard(2, "n3", here)
    assert actor_id(adopted) == actor_id(ray.get_actor(tagged[2], namespace=namespace))
    left = [spare_of(n, "n3") for n in per.free_spare_names("n3")]
    assert sorted((cold, p if p is not None else -1) for _, p, cold in left) == [(False, 3), (True, -1)]  # no spare for all
    factory.stop_spares()
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace]
    assert internal_kv._internal_kv_list(SPARE_BOUND_KEY_PREFIX, namespace=namespace) == []


def _status_or_none(handle, old_pid: int):
    import ray

    try:
        status = ray.get(handle.status.remote(), timeout=10)
    except (ray.exceptions.RayError, TimeoutError):
        return None
    return status if status["pid"] != old_pid else None
