"""Failover on a simulated 3-node cluster, under continuous commits and a heartbeating stable group,
checked against the invariants Jepsen, Kafka's ducktape and Redpanda's chaos tests use (no acknowledged
commit lost, offsets never backwards, no rebalance of a heartbeating group, one serving shard per
partition, followers equal to the leader). The scenarios run in order on one cluster; each one ends with
the killed nodes restarted under their names, every ISR full and every leader its preferred replica."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from raygroups import Errors, partition_for
from raygroups.deployment.seam import shard_actor_name
from tests.multinode.conftest import (
    Workload,
    check_followers_match_leader,
    check_one_shard_per_partition,
    wait_for,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _full_isr(cluster) -> bool:
    nodes = set(cluster.coordinator_nodes())
    for p in range(cluster.num_partitions):
        s = cluster.partition_state(p)
        if s["leader"] not in nodes or len(s["isr"]) < 3 or not set(s["isr"]) <= nodes:
            return False
    return True


def _restore(cluster, *killed: str) -> None:
    for name in killed:
        cluster.restart_node(name)
    wait_for(lambda: _full_isr(cluster), timeout_s=90, what="every partition back to a full ISR")
    _wait_balanced(cluster)
    check_one_shard_per_partition(cluster)


def _wait_balanced(cluster) -> None:
    """Leadership back on the preferred replicas: the controller's leader balance would otherwise move
    partitions during the next scenario, under its feet."""
    wait_for(lambda: all(cluster.partition_state(p)["leader"] == cluster.partition_state(p)["replicas"][0]
                         for p in range(cluster.num_partitions)), timeout_s=90, what="leaders balanced back")


def _busiest_leader(cluster) -> str:
    return Counter(cluster.partition_leaders().values()).most_common(1)[0][0]


@pytest.mark.parametrize("graceful", [True, False], ids=["graceful-removal", "raylet-killed"])
def test_leader_node_loss(cluster, graceful):
    with Workload(cluster, f"loss-{graceful}") as work:
        wait_for(lambda: work.progressed({}), what="commits before the fault")
        victim = _busiest_leader(cluster)
        moved = [p for p, n in cluster.partition_leaders().items() if n == victim]
        epochs = {p: cluster.partition_state(p)["leader_epoch"] for p in moved}
        wait_for(lambda: all(_standing_by(cluster, n, p) for p in moved for n in _followers(cluster, p)),
                 what="a running spare on each follower of each moved partition, standing by for it")
        survivors = [n for n in cluster.coordinator_nodes() if n != victim]
        spares_before = {n: cluster.standby_status(n) for n in survivors}
        before = dict(work.acked)
        cluster.kill_node(victim, graceful=graceful)
        wait_for(lambda: all(cluster.partition_state(p)["leader"] not in (None, victim) for p in moved),
                 what="new leaders")
        wait_for(lambda: work.progressed(before), what="commits after the failover")
        work.observe()
    statuses = cluster.shard_status()
    adopted = {}
    for p in moved:
        assert cluster.partition_state(p)["leader_epoch"] > epochs[p]
        # Every partition of the lost leader was a promotion by the spare that stood by for it alone
        # (shard.standby.per.partition) ...
        timeline = statuses[p]["start_timeline"]
        assert "standby_promoted" in timeline and statuses[p]["standby_refused"] is None, (p, statuses[p])
        name = shard_actor_name(p, cluster.namespace)
        assert spares_before[statuses[p]["node"]][name]["standby_for"] == p, (p, name, spares_before)
        adopted[name] = p
    # ... and the new leaders' other spares go on standing by, untouched, for what their nodes still follow
    # (with one spare per node, a promotion takes the standbys of every partition the node follows).
    for n in survivors:
        still = {name for name, s in spares_before[n].items() if name not in adopted
                 and s["standby_for"] in _followed(cluster, n)}
        assert still <= set(cluster.standby_status(n)), (n, still, cluster.standby_status(n))
    work.check_invariants()
    check_one_shard_per_partition(cluster)
    check_followers_match_leader(cluster)
    _restore(cluster, victim)


def test_paused_leader_shard_is_fenced_and_replaced_by_the_successors_spare(cluster):
    """The new leader's shard is the spare process its node kept running for the partition (no process to
    start), which continues the hot standby it kept of it (no whole-log replay), and the old leader's
    node, a follower now, gets a spare standing by for it."""
    with Workload(cluster, "pause") as work:
        wait_for(lambda: work.progressed({}), what="commits before the fault")
        p = partition_for(work.stable, cluster.num_partitions)
        state = cluster.partition_state(p)
        followers = _followers(cluster, p)
        wait_for(lambda: all(_standing_by(cluster, n, p) for n in followers),
                 what="a running spare on each follower, standing by for the partition")
        pid = cluster.shard_status()[p]["pid"]
        before = dict(work.acked)
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: cluster.partition_state(p)["leader_epoch"] > state["leader_epoch"]
                     and cluster.shard_status()[p]["state"] == "ACTIVE", what="a new leader for the paused shard")
            adopted = cluster.shard_status()[p]
            wait_for(lambda: work.progressed(before), what="commits after the failover")
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass  # the controller already killed the zombie
        work.observe()
    events = [e for e in cluster.controller_events() if e.get("partition") == p][-5:]
    assert adopted["pid"] != pid and adopted["node"] in followers, (followers, adopted, events)
    timeline = adopted["start_timeline"]
    assert "adopted" in timeline, (followers, adopted, events)
    assert timeline["process_started"] < timeline["adopted"] - 1, timeline  # running before the failover
    assert adopted["standby_refused"] is None and adopted["standby_tailed"] is not None, adopted
    assert "standby_promoted" in timeline, timeline
    # The paused leader's node now follows the partition: it gets a spare standing by for it.
    wait_for(lambda: _standing_by(cluster, state["leader"], p), timeout_s=60,
             what="a spare standing by for the partition on the old leader's node")
    work.check_invariants()
    check_one_shard_per_partition(cluster)
    check_followers_match_leader(cluster)
    _restore(cluster)


def test_a_leader_flap_fails_over_three_times_keeping_every_replica_in_sync(cluster):
    """A leader shard's process killed again and again, each time once its successor serves (the chaos
    catalogue's leader-flap), until three failovers. Only processes died, so the old leaders' replicas stay
    in the ISR (each new leader levels them to its log before it serves): each failover finds an in-sync
    replica elsewhere as the first did, with no ISR shrink or re-expansion, and nothing acknowledged is
    lost. (A process Ray restarts and serves again before the controller saw it down is a restart in place,
    not a failover: it is killed again.)"""
    nodes = set(cluster.coordinator_nodes())
    with Workload(cluster, "flap") as work:
        wait_for(lambda: work.progressed({}), what="commits before the fault")
        p = partition_for(work.stable, cluster.num_partitions)
        wait_for(lambda: set(cluster.partition_state(p)["isr"]) == nodes, what="a full ISR before the flap")
        began = time.time()
        failovers = 0
        for _ in range(6):
            state = cluster.partition_state(p)
            os.kill(cluster.shard_status()[p]["pid"], signal.SIGKILL)
            wait_for(lambda: (s := cluster.partition_state(p))["leader_epoch"] > state["leader_epoch"]  # noqa: B023
                     and s["leader"] is not None, what="a new leader epoch")
            wait_for(lambda: (s := cluster.shard_status(timeout_s=5)[p])["state"] == "ACTIVE"
                     and s["leader_epoch"] == cluster.partition_state(p)["leader_epoch"], what="the partition served")
            after = cluster.partition_state(p)
            if after["leader"] != state["leader"]:
                failovers += 1
                assert set(after["isr"]) == nodes, (state, after)
            if failovers == 3:
                break
        assert failovers == 3
        before = dict(work.acked)
        wait_for(lambda: work.progressed(before), what="commits after the third failover")
        work.observe()
    events = [e for e in cluster.controller_events() if e["t"] >= began and e.get("partition") == p]
    assert [e["event"] for e in events if e["event"] in ("isr-shrink", "isr-expand")] == [], events
    assert {e["reason"] for e in events if e["event"] == "failover"} == {"leader shard died (Ray is restarting it)"}
    work.check_invariants()
    check_one_shard_per_partition(cluster)
    check_followers_match_leader(cluster)
    _restore(cluster)


def _followers(cluster, partition: int) -> list[str]:
    state = cluster.partition_state(partition)
    return [n for n in state["isr"] if n != state["leader"]]


def _followed(cluster, node: str) -> set[int]:
    return {p for p in range(cluster.num_partitions) if node in _followers(cluster, p)}


def _standing_by(cluster, node: str, partition: int) -> bool:
    """Whether a running spare of ``node`` keeps a hot standby of ``partition``."""
    return any(partition in s["partitions"] for s in cluster.standby_status(node).values())


def test_followers_lost_then_writes_refused_then_back(cluster):
    with Workload(cluster, "followers") as work:
        wait_for(lambda: work.progressed({}), what="commits before the fault")
        p = partition_for(work.stable, cluster.num_partitions)
        state = cluster.partition_state(p)
        leader = state["leader"]
        followers = [n for n in state["replicas"] if n != leader]
        before = dict(work.acked)
        cluster.kill_node(followers[0], graceful=False)
        wait_for(lambda: followers[0] not in cluster.partition_state(p)["isr"], what="the ISR to shrink")
        wait_for(lambda: work.progressed(before), what="writes continuing with 2 in-sync replicas")
        # Losing a second follower leaves the leader alone: min.insync.replicas=2 refuses writes.
        cluster.kill_node(followers[1], graceful=False)
        wait_for(lambda: list(cluster.partition_state(p)["isr"]) == [leader], what="the ISR down to the leader")
        stalled = dict(work.acked)
        wait_for(lambda: Errors.COORDINATOR_NOT_AVAILABLE in work.commit_errors or
                 Errors.NOT_COORDINATOR in work.commit_errors, timeout_s=90, what="writes refused")
        assert work.acked.get(work.stable, 0) <= stalled.get(work.stable, 0) + 1
        # The nodes come back under their names: their replicas are caught up and the ISR grows again.
        cluster.restart_node(followers[0])
        cluster.restart_node(followers[1])
        wait_for(lambda: _full_isr(cluster), timeout_s=120, what="the ISR to grow back")
        resumed = dict(work.acked)
        wait_for(lambda: work.progressed(resumed), what="writes after the ISR grew back")
        work.observe()
    work.check_invariants()
    _wait_balanced(cluster)
    check_one_shard_per_partition(cluster)
    check_followers_match_leader(cluster)


def _actor_pid(cluster, name: str) -> int:
    import ray

    handle = ray.get_actor(name, namespace=cluster.namespace)
    return ray.get(handle.__ray_call__.remote(lambda _self: os.getpid()), timeout=30)


def _group_of(partition: int, num_partitions: int, prefix: str) -> str:
    return next(g for g in (f"{prefix}-{i}" for i in range(10_000)) if partition_for(g, num_partitions) == partition)


def test_the_alert_rules_fire_on_a_stalled_standby_and_a_follower_holding_appends_back(cluster, tmp_path):
    """deploy/prometheus/raygroups-rules.yml, evaluated by a real Prometheus scraping the nodes: a follower's
    spare paused while its partition takes 12 000 records is a standby far behind (its node's LogServer
    measures the lag); the follower's LogServer paused for 3 s holds every append of the partition back
    (acks=all), so the append p99 is above its bound. Both paused processes resume; nothing is lost."""
    from raygroups.deployment.seam import log_server_name
    from tests.prometheus import need_prometheus, start_prometheus

    need_prometheus()
    p = 0
    follower = _followers(cluster, p)[0]
    wait_for(lambda: _standing_by(cluster, follower, p), what="a spare standing by for the partition")
    (spare,) = [name for name, s in cluster.standby_status(follower).items() if p in s["partitions"]]
    cluster.create_topic("alerts", 1000)
    client = cluster.client()
    group = _group_of(p, cluster.num_partitions, "alerts")

    took = []

    def commit(offset: int) -> None:
        offsets = {("alerts", i): (offset, "") for i in range(1000)}
        started = time.monotonic()
        errors = client.commit_offsets(group_id=group, offsets=offsets).result(60).errors
        took.append(round(time.monotonic() - started, 3))
        assert set(errors.values()) == {Errors.NONE}

    with start_prometheus(tmp_path / "standby") as prom:
        spare_pid = _actor_pid(cluster, spare)
        os.kill(spare_pid, signal.SIGSTOP)
        try:
            for offset in range(12):
                commit(offset)
            alert = prom.wait_firing("RaygroupsStandbyFarBehind", namespace=cluster.namespace, node=follower,
                                     partition=str(p))
            assert float(alert["value"]) >= 12_000
        finally:
            os.kill(spare_pid, signal.SIGCONT)
    # A Prometheus of its own for the appends, whose rate() window starts after the commits above.
    with start_prometheus(tmp_path / "appends") as prom:
        # The leader's append histogram scraped before the fault, so that the slow appends are an increase of
        # it that rate() sees (a series' first sample is no increase); and the same leader throughout.
        leader = cluster.partition_state(p)["leader"]
        took.clear()
        for offset in range(20, 32):
            commit(offset)
        wait_for(lambda: any(float(r["value"][1]) >= 12 for r in prom.query(
            f'ray_raygroups_append_latency_seconds_count{{namespace="{cluster.namespace}",partition="{p}",'
            f'node="{leader}"}}')), what="the leader's append latencies scraped")
        assert not [a for a in prom.alerts() if a["labels"]["alertname"] == "RaygroupsAppendLatencyHigh"], took
        server_pid = _actor_pid(cluster, log_server_name(follower))
        slow = []
        os.kill(server_pid, signal.SIGSTOP)
        try:
            with ThreadPoolExecutor(4) as pool:
                waiting = [pool.submit(commit, 100 + i) for i in range(4)]
                time.sleep(3)  # the fault's length: a follower holding appends back for 3 s
                os.kill(server_pid, signal.SIGCONT)
                slow = [f.result() for f in waiting]
        finally:
            os.kill(server_pid, signal.SIGCONT)
        assert len(slow) == 4
        assert cluster.partition_state(p)["leader"] == leader, cluster.controller_events()[-5:]
        alert = prom.wait_firing("RaygroupsAppendLatencyHigh", namespace=cluster.namespace)
        assert float(alert["value"]) > 0.5, took
    # one append each: the last one appended holds every partition's offset
    last = {po.offset for po in client.fetch_offsets(group_id=group).result(60).offsets.values()}
    assert len(last) == 1 and last <= {100, 101, 102, 103}
    wait_for(lambda: _full_isr(cluster), timeout_s=90, what="every partition back to a full ISR")
    check_followers_match_leader(cluster)


def test_controller_restart_loses_nothing(cluster):
    import ray

    from raygroups.deployment.seam import CONTROLLER_NAME

    before = {p: cluster.partition_state(p) for p in range(cluster.num_partitions)}
    ray.kill(ray.get_actor(CONTROLLER_NAME, namespace=cluster.namespace), no_restart=False)
    after = wait_for(lambda: _states_or_none(cluster), what="the controller to answer again")
    assert after == before
    with Workload(cluster, "after-controller-restart") as work:
        wait_for(lambda: work.progressed({}), what="commits after the controller restart")
    work.check_invariants()


def _states_or_none(cluster):
    import ray

    try:
        return {p: cluster.partition_state(p) for p in range(cluster.num_partitions)}
    except (ray.exceptions.RayError, TimeoutError):
        return None


def test_the_heads_gcs_and_controller_lost_and_back_while_commits_flow_then_a_node_loss_fails_over(cluster):
    """GCS fault tolerance: the head's GCS and the controller are killed for 8 s. Meanwhile the leaders,
    their leadership held by their followers, keep acknowledging commits and heartbeats; the GCS comes back
    from its storage, Ray restarts the controller, which resumes from the same state; a node lost after
    that fails over as before, and no acknowledged commit is lost."""
    before = {p: cluster.partition_state(p) for p in range(cluster.num_partitions)}
    with Workload(cluster, "head") as work:
        wait_for(lambda: work.progressed({}), what="commits before the head's loss")
        seen = {}

        def while_down():
            seen["at_kill"] = dict(work.acked)
            wait_for(lambda: work.progressed(seen["at_kill"], by=10), timeout_s=6,
                     what="commits acknowledged on every partition while the head is down")
            seen["heartbeats"] = list(work.heartbeat_errors)

        outage = cluster.restart_head(8, while_down=while_down)
        assert outage["down_s"] >= 8
        assert Errors.NONE in seen["heartbeats"]
        assert wait_for(lambda: _states_or_none(cluster), what="the controller back with the head") == before
        resumed = dict(work.acked)
        wait_for(lambda: work.progressed(resumed), what="commits after the head is back")
        victim = _busiest_leader(cluster)
        moved = [p for p, n in cluster.partition_leaders().items() if n == victim]
        cluster.kill_node(victim, graceful=False)
        wait_for(lambda: all(cluster.partition_state(p)["leader"] not in (None, victim) for p in moved),
                 what="new leaders after a node loss that follows the head's return")
        after_loss = dict(work.acked)
        wait_for(lambda: work.progressed(after_loss), what="commits after the failover")
        work.observe()
    assert all(cluster.partition_state(p)["leader_epoch"] > before[p]["leader_epoch"] for p in moved)
    work.check_invariants()
    _restore(cluster, victim)


def test_a_kafka_consumer_follows_its_coordinator_across_the_leader_node_loss(cluster):
    """A confluent-kafka (librdkafka) consumer commits through the nodes' listeners while the node leading its
    group's partition dies: it finds the new coordinator as it does with Kafka (its coordinator's connection
    drops, FindCoordinator names the new leader's listener), its commits go on, and the committed offsets
    never go backwards."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from raygroups.gateway import bootstrap_servers, listeners

    wait_for(lambda: len(listeners(cluster)) == 3, what="a listener on each node")
    group = "kafka-failover"
    victim = cluster.partition_leaders()[partition_for(group, cluster.num_partitions)]
    consumer = Consumer({"bootstrap.servers": bootstrap_servers(cluster), "group.id": group,
                         "enable.auto.commit": False, "session.timeout.ms": 30_000, "log_level": 0})
    client = cluster.client()
    acked, observed, errors, killed_at = 0, [], [], None
    try:
        consumer.subscribe(["orders"])

        def assigned() -> bool:
            consumer.poll(0.1)
            return bool(consumer.assignment())

        wait_for(assigned, what="the assignment")
        offset = 0
        while acked < 40:
            offset += 1
            try:
                consumer.commit(offsets=[TopicPartition("orders", 0, offset)], asynchronous=False)
                acked = offset
            except KafkaException as e:  # a commit in flight when the coordinator went: the loop goes on
                errors.append(e.args[0].name())
            observed.append(client.fetch_offsets(group_id=group, partitions=[("orders", 0)]).result(60)
                            .offsets[("orders", 0)].offset)
            if acked == 10 and killed_at is None:
                killed_at = offset
                cluster.kill_node(victim, graceful=False)
        assert killed_at is not None
        new_leader = cluster.partition_leaders()[partition_for(group, cluster.num_partitions)]
        assert new_leader not in (None, victim)
        wait_for(lambda: victim not in listeners(cluster), what="the lost node's listener gone from the brokers")
        committed = consumer.committed([TopicPartition("orders", 0)], timeout=30)[0].offset
        assert committed == acked == 40
        assert observed == sorted(observed), f"committed offsets moved backwards: {observed} (errors {errors})"
        assert client.fetch_offsets(group_id=group, partitions=[("orders", 0)]).result(60) \
            .offsets[("orders", 0)].offset == 40
    finally:
        consumer.close()
    _restore(cluster, victim)
