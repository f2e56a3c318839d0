"""A replicated deployment's life beyond one failover, on a simulated 3-node cluster: a full restart of every
process (head included) on the same data directories, then every node lost one after another and restarted
under its name. Invariants: every acknowledged commit and every group's generation come back (Redpanda's
test_group_recovery, Kafka's broker bounce tests); a partition whose in-sync replicas are all gone stays
offline -- no shard serves it anywhere, no out-of-sync replica is elected -- until one of them returns."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from raygroups import Errors, partition_for
from raygroups.cli import main
from tests.conditions import scrape_metrics
from tests.multinode.conftest import check_followers_match_leader, check_one_shard_per_partition, wait_for
from tests.prometheus import start_prometheus

pytestmark = [pytest.mark.ray, pytest.mark.slow]

CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10, "request.timeout.ms": 30_000}
PARTITIONS = 4


def _group_on(partition: int, prefix: str) -> str:
    return next(g for g in (f"{prefix}-{i}" for i in range(10_000)) if partition_for(g, PARTITIONS) == partition)


def _stable_member(client, group: str) -> tuple[str, int]:
    kw = {"group_id": group, "protocol_type": "consumer", "protocols": [("range", b"")],
          "session_timeout_ms": 120_000, "rebalance_timeout_ms": 30_000}
    first = client.join_group(member_id="", **kw).result(60)
    assert first.error is Errors.MEMBER_ID_REQUIRED, first
    joined = client.join_group(member_id=first.member_id, **kw).result(60)
    assert joined.error is Errors.NONE, joined
    synced = client.sync_group(group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                               assignments={joined.member_id: b"orders"}).result(60)
    assert synced.error is Errors.NONE, synced
    return joined.member_id, joined.generation_id


def _check_data(client, acked: dict, members: dict) -> None:
    for (group, tp), (offset, metadata) in acked.items():
        got = client.fetch_offsets(group_id=group, partitions=[tp]).result(60).offsets[tp]
        assert (got.offset, got.metadata) == (offset, metadata), (group, tp, got)
    for group, (member, generation) in members.items():
        hb = client.heartbeat(group_id=group, generation_id=generation, member_id=member).result(60)
        assert hb.error is Errors.NONE, (group, hb)  # same member, same generation: no rebalance
        (described,) = client.describe_groups([group]).result(60)
        assert described.group_state == "Stable" and [m.member_id for m in described.members] == [member]


def _all_led_by(cluster, node: str, isr: list[str]) -> bool:
    return all((s["leader"], s["isr"]) == (node, isr) for s in map(cluster.partition_state, range(PARTITIONS)))


def _status(c):
    result = CliRunner().invoke(main, ["status", "--json", "--namespace", c.namespace])
    return result.exit_code, json.loads(result.stdout)


def _gauge(c, name):
    return [v for n, labels, v in scrape_metrics() if n == name and labels.get("namespace") == c.namespace]


def test_full_restart_then_every_node_lost_and_restarted_under_its_name(tmp_path):
    import ray

    from raygroups.deployment.start import start_local

    if ray.is_initialized():
        ray.shutdown()
    data = tmp_path / "data"
    c = start_local(num_partitions=PARTITIONS, num_nodes=3, data_dir=data, config=CONFIG)
    try:
        c.create_topic("orders", 20)
        client = c.client()
        acked = {}
        for i in range(20):
            group, tp = _group_on(i % PARTITIONS, f"commits-{i}"), ("orders", i)
            r = client.commit_offsets(group_id=group, offsets={tp: (1_000 + i, f"m{i}")}).result(60)
            assert r.errors[tp] is Errors.NONE
            acked[(group, tp)] = (1_000 + i, f"m{i}")
        members = {g: _stable_member(client, g) for g in (_group_on(p, "stable") for p in range(PARTITIONS))}
        before = {p: c.partition_state(p) for p in range(PARTITIONS)}
    finally:
        c.shutdown()

    # Every process is gone, the GCS with the head; only the nodes' data directories remain.
    c = start_local(num_partitions=PARTITIONS, num_nodes=3, data_dir=data, config=CONFIG)
    prom = None
    try:
        client = c.client()
        assert c.coordinator_nodes() == ["node-0", "node-1", "node-2"]
        assert c.topics() == {"orders": 20}
        _check_data(client, acked, members)
        for p in range(PARTITIONS):
            state = c.partition_state(p)
            assert state["replicas"] == before[p]["replicas"] and state["leader_epoch"] > before[p]["leader_epoch"]
        recovered = {e["partition"] for e in c.controller_events() if e["event"] == "partition-recovered"}
        assert recovered == set(range(PARTITIONS))
        group0, tp0 = next(iter(acked))
        r = client.commit_offsets(group_id=group0, offsets={tp0: (5_000, "after")}).result(60)
        assert r.errors[tp0] is Errors.NONE  # the topic registry came back with the data
        acked[(group0, tp0)] = (5_000, "after")
        check_one_shard_per_partition(c)

        # Every node lost, one after another: the last one standing holds every ISR alone. A real Prometheus
        # scrapes the nodes and evaluates deploy/prometheus/raygroups-rules.yml meanwhile.
        prom = start_prometheus(tmp_path / "prometheus")
        last = c.partition_state(0)["leader"]
        first, second = [n for n in c.coordinator_nodes() if n != last]
        c.kill_node(first)
        wait_for(lambda: all(first not in c.partition_state(p)["isr"] for p in range(PARTITIONS)),
                 what=f"{first} out of every ISR")
        c.kill_node(second)
        wait_for(lambda: _all_led_by(c, last, [last]), what=f"{last} leading every partition alone")
        # What an operator sees: every partition under-replicated but served (the health check passes), and
        # the controller's gauges on the metrics endpoint say the same.
        code, status = wait_for(lambda: (r := _status(c))[0] == 0 and r, what="every partition served by its shard")
        assert status["under_replicated_partitions"] == list(range(PARTITIONS))
        assert {p["leader"] for p in status["partitions"]} == {last} and status["offline_partitions"] == []
        wait_for(lambda: _gauge(c, "ray_raygroups_under_replicated_partitions") == [PARTITIONS], timeout_s=60,
                 interval_s=1, what="the under-replicated gauge")
        assert sum(_gauge(c, "ray_raygroups_leader_changes_total")) >= PARTITIONS
        if prom:
            alert = prom.wait_firing("RaygroupsUnderReplicatedPartitions", namespace=c.namespace)
            assert float(alert["value"]) == PARTITIONS
            assert not [a for a in prom.alerts() if a["labels"]["alertname"] == "RaygroupsPartitionOffline"]
        c.kill_node(last)
        wait_for(lambda: all(c.partition_state(p)["leader"] is None for p in range(PARTITIONS)),
                 what="every partition offline")
        code, status = _status(c)
        assert code == 4 and status["offline_partitions"] == list(range(PARTITIONS))  # the health check fails
        assert all(c.partition_state(p)["isr"] == [last] for p in range(PARTITIONS))
        assert "offline partitions" in c.readiness()["waiting_for"]
        assert all(s["state"] != "ACTIVE" for s in c.shard_status(timeout_s=5))
        if prom:
            alert = prom.wait_firing("RaygroupsPartitionOffline", namespace=c.namespace)
            assert float(alert["value"]) == PARTITIONS and alert["labels"]["severity"] == "critical"
            prom.close()
            prom = None

        # The out-of-sync nodes come back first: nothing is elected from them.
        c.restart_node(first)
        c.restart_node(second)
        wait_for(lambda: set(c.coordinator_nodes()) == {first, second}, what="two nodes back")
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            assert all(c.partition_state(p)["leader"] is None for p in range(PARTITIONS))
            assert all(s["state"] != "ACTIVE" for s in c.shard_status(timeout_s=5))
            time.sleep(0.5)

        # The last in-sync replica returns under its name: every partition comes back, the others catch up.
        c.restart_node(last)
        wait_for(lambda: all(len(c.partition_state(p)["isr"]) == 3 and c.partition_state(p)["leader"]
                             for p in range(PARTITIONS)), timeout_s=120, what="every partition back with a full ISR")
        assert any(e["event"] == "node-restarted" and e["node"] == last for e in c.controller_events())
        _check_data(client, acked, members)
        check_one_shard_per_partition(c)
        check_followers_match_leader(c)
    finally:
        if prom:
            prom.close()
        c.shutdown()
