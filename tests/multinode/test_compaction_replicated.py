"""Spark compaction on a replicated deployment (a simulated 3-node cluster, real Spark on Ray through raydp):
committed offsets read through the client stay the same through a run whose partition leader is killed
between the proof and the swap (that partition's replicas all keep their originals), through the next run
(which swaps every replica, the one that missed the first run included), and after killing the node that
leads a compacted partition (its new leader replays a compacted log)."""

from __future__ import annotations

import pytest

from raygroups import Errors
from tests.multinode.conftest import (
    check_followers_match_leader,
    check_one_shard_per_partition,
    leader_balance_every,
    wait_for,
)

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow]
CONFIG = {"offsets.topic.segment.bytes": 2048, "group.initial.rebalance.delay.ms": 0,
          "request.timeout.ms": 30_000}
GROUPS = [f"pipeline-{i}" for i in range(8)]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    import ray

    from raygroups.compaction.spark_session import spark_session, stop_spark_session
    from raygroups.deployment.seam import HEAD_RESOURCE
    from raygroups.deployment.start import start_local

    if ray.is_initialized():  # another module's Ray: this module needs its own cluster
        ray.shutdown()
    # Leadership goes back to the preferred replicas 1 s after the killed node is in sync again, not 10 s:
    # the test waits for it before the second run (which no leadership change may interrupt).
    with leader_balance_every(1_000):
        cluster = start_local(num_partitions=2, num_nodes=3, data_dir=tmp_path_factory.mktemp("data"),
                              config=CONFIG)
    cluster.create_topic("events", 4)
    # Executors on the head node, beside Spark's master: killing a coordinator node must not end the job.
    spark = spark_session(executor_resources={HEAD_RESOURCE: 0.001})
    yield cluster, spark
    stop_spark_session()
    cluster.shutdown()


def _fetch_all(client) -> dict:
    out = {}
    for g in GROUPS:
        response = client.fetch_offsets(group_id=g).result(60)
        assert response.error is Errors.NONE, response
        out[g] = {tp: (po.offset, po.metadata) for tp, po in response.offsets.items()}
    return out


def _spark_driver_node() -> str | None:
    """The coordinator node Spark's JVM driver attached to, if any. On a simulated cluster every node has
    the same IP, and Ray's Java driver attaches to the first node of that IP the GCS names (on real hosts it
    attaches to its own host): killing that node would end the Spark job, so the test kills others."""
    import ray
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    from tests.multinode.conftest import node_labels

    ours = ray.get_runtime_context().get_job_id()
    for raw in state._connect_and_get_accessor().get_job_table(skip_submission_job_info_field=True,
                                                               skip_is_running_tasks_field=True):
        entry = gcs_pb2.JobTableData.FromString(raw)
        if not entry.is_dead and entry.job_id.hex() != ours:
            return node_labels().get(entry.driver_address.node_id.hex())
    return None


def _partition_led_elsewhere(cluster, avoid: str | None) -> int:
    return next(p for p in range(cluster.num_partitions) if cluster.partition_state(p)["leader"] != avoid)


def _settled(cluster) -> bool:
    """Every ISR full and every partition back on its preferred leader (the controller moves leadership
    back once a restarted node is in sync): no leader change is still to come."""
    states = [cluster.partition_state(p) for p in range(cluster.num_partitions)]
    return all(len(s["isr"]) == 3 and s["leader"] == s["replicas"][0] for s in states)


def test_replicated_compaction_survives_a_leader_change_mid_run_and_a_node_kill(env):
    from raygroups.compaction import read_snapshot, run, run_with_progress

    cluster, spark = env
    client = cluster.client()
    for r in range(30):  # a round's commits travel together; rounds follow each other (later ones win)
        futures = [client.commit_offsets(group_id=g, offsets={("events", p): (r * 10 + p, f"r{r}") for p in range(4)})
                   for g in GROUPS]
        for f in futures:
            assert set(f.result(60).errors.values()) == {Errors.NONE}
    before = _fetch_all(client)
    spark_node = _spark_driver_node()
    p = _partition_led_elsewhere(cluster, spark_node)
    victim = cluster.partition_state(p)["leader"]
    epoch = cluster.partition_state(p)["leader_epoch"]

    # Run 1: partition p's leader node dies after the proof, and a new leader takes over before the swap.
    def kill_leader_before_swap(step: str, done: int, total: int, **_detail) -> None:
        if (step, done) == ("compact", 3):
            cluster.kill_node(victim)
            wait_for(lambda: cluster.partition_state(p)["leader"] not in (victim, None), timeout_s=60,
                     what=f"a new leader of partition {p}")
            cluster.wait_ready()

    first = run_with_progress(cluster, spark=spark, progress=kill_leader_before_swap)
    rows = {r["partition"]: r for r in first.partitions}
    assert rows[p]["equivalent"] and not rows[p]["swapped"] and not rows[p]["ok"], rows[p]
    assert "swap refused" in rows[p]["error"]
    assert not first.ok
    cluster.wait_ready()
    assert cluster.partition_state(p)["leader"] != victim and cluster.partition_state(p)["leader_epoch"] > epoch
    assert _fetch_all(client) == before
    cluster.restart_node(victim)
    wait_for(lambda: _settled(cluster), timeout_s=120, what="every ISR full, preferred leaders back")
    cluster.wait_ready()

    # Run 2, without faults: every replica of every partition ends compacted, the one that missed run 1 too.
    second = run(cluster, spark=spark)
    assert second.ok, [(r["partition"], r.get("error"), r.get("note"), r.get("replicas")) for r in second.partitions]
    for row in second.partitions:
        assert row["segments_in"] > 0 and row["swapped"], row
        assert sorted(row["replicas"].values()) == ["swapped"] * 3, row
        assert set(row["replicas"]) == set(cluster.coordinator_nodes())
    check_followers_match_leader(cluster)  # the same compacted records on every replica
    assert _fetch_all(client) == before

    # A node leading a compacted partition dies: a follower with the compacted log takes over, replays it.
    leader = cluster.partition_state(_partition_led_elsewhere(cluster, spark_node))["leader"]
    cluster.kill_node(leader)
    cluster.wait_ready()
    check_one_shard_per_partition(cluster)
    assert _fetch_all(client) == before
    snapshot: dict = {}
    for row in read_snapshot(None, second.snapshot_path).to_pylist():
        snapshot.setdefault(row["group_id"], {})[(row["topic"], row["partition"])] = (row["offset"], row["metadata"])
    assert snapshot == before
