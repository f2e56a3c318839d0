"""``raygroups.deploy`` on a Ray cluster this test builds itself (``ray.cluster_utils``: a head node and
coordinator nodes labelled with their names), as ``ray up cluster.yaml`` does on real hosts: the deployment
is made before its workers join and comes up as they do, fails over when a node dies, can be run again
harmlessly, refuses what would lose data, and is reached by ``connect()`` and the CLI with their defaults."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from tests.multinode.conftest import (
    Workload,
    check_followers_match_leader,
    check_one_shard_per_partition,
    wait_for,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10, "request.timeout.ms": 30_000,
          "replica.lag.time.max.ms": 2_000}
NAMES = ["coord-a", "coord-b", "coord-c"]


@pytest.fixture(scope="module")
def ray_cluster():
    import ray
    from ray.cluster_utils import Cluster as RayCluster

    from raygroups.deployment.start import SIMULATED_HEALTH_CHECKS

    if ray.is_initialized():
        ray.shutdown()
    rc = RayCluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"head": 1},
                                                          "_system_config": SIMULATED_HEALTH_CHECKS})
    ray.init(address=rc.address, log_to_driver=False)
    yield rc
    ray.shutdown()
    rc.shutdown()


def _add(rc, name: str):
    return rc.add_node(num_cpus=1, resources={"coordinator": 1}, labels={"raygroups.io/node": name})


def test_deploy_before_the_workers_join_then_fail_over_resume_and_refuse(ray_cluster, tmp_path):
    import ray

    from raygroups import connect, deploy, start_local
    from raygroups.cli import main as cli

    data = str(tmp_path / "data")
    cluster = deploy(ray_cluster.address, data_dir=data, num_partitions=4, config=CONFIG, wait=False)
    try:
        assert "3 coordinator nodes" in cluster.readiness()["waiting_for"]
        nodes = {name: _add(ray_cluster, name) for name in NAMES}
        cluster.wait_ready(120)
        assert cluster.coordinator_nodes() == NAMES
        cluster.create_topic("orders", 1)
        check_one_shard_per_partition(cluster)
        for name in NAMES:
            assert os.path.isfile(os.path.join(data, name, "deployment.json"))

        # A node dies: its partitions fail over to in-sync replicas on the others.
        with Workload(cluster, "deployed") as work:
            wait_for(lambda: work.progressed({}), what="commits before the fault")
            victim = Counter(cluster.partition_leaders().values()).most_common(1)[0][0]
            moved = [p for p, n in cluster.partition_leaders().items() if n == victim]
            survivors = [n for n in NAMES if n != victim]
            wait_for(lambda: all(any(p in s["partitions"] for s in cluster.standby_status(n).values())
                                 for p in moved for n in survivors if n in cluster.partition_state(p)["isr"]),
                     what="each survivor's spare standing by for the partitions it follows")
            before = dict(work.acked)
            ray_cluster.remove_node(nodes.pop(victim), allow_graceful=False)
            wait_for(lambda: all(cluster.partition_state(p)["leader"] not in (None, victim) for p in moved),
                     what="new leaders")
            wait_for(lambda: work.progressed(before), what="commits after the failover")
        # One spare per node (the default): on each node that took a moved partition, the first was the
        # node's spare continuing its hot standby, and the node has a new spare behind it.
        statuses = cluster.shard_status()
        for n in sorted({statuses[p]["node"] for p in moved}):
            taken = [statuses[p] for p in moved if statuses[p]["node"] == n]
            assert any("standby_promoted" in s["start_timeline"] for s in taken), taken
            wait_for(lambda n=n: cluster.standby_status(n), what=f"a new spare on {n}")
        work.check_invariants()
        check_one_shard_per_partition(cluster)
        check_followers_match_leader(cluster)

        # A multi-node Ray cluster is not for the single-node default.
        with pytest.raises(RuntimeError, match=r"raygroups\.deploy"):
            start_local(num_partitions=4)

        # Running deploy again is harmless: the same deployment, nothing restarted.
        states = {p: cluster.partition_state(p) for p in range(4)}
        pids = [s["pid"] for s in cluster.shard_status()]
        again = deploy(ray_cluster.address, data_dir=data, num_partitions=4)
        assert {p: again.partition_state(p) for p in range(4)} == states
        assert [s["pid"] for s in cluster.shard_status()] == pids
        with pytest.raises(ValueError, match="num_partitions=4, not 8"):
            deploy(ray_cluster.address, data_dir=data, num_partitions=8)

        # The CLI resumes it too, and says what it serves.
        from click.testing import CliRunner

        result = CliRunner().invoke(cli, ["deploy", "--address", ray_cluster.address, "--data-dir", data,
                                          "--partitions", "4", "--json"])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["ready"] and [p["leader"] for p in summary["partitions"]] == \
            [states[p]["leader"] for p in range(4)]
        bad = CliRunner().invoke(cli, ["deploy", "--address", ray_cluster.address, "--data-dir", data,
                                       "--partitions", "8"])
        assert bad.exit_code == 1 and "cannot change while it runs" in bad.stderr

        # connect() with its defaults reaches the deployment deploy() made with its defaults.
        attached = connect()
        assert attached.namespace == "raygroups" and attached.replicated
        r = attached.client().fetch_offsets(group_id=work.groups[0]).result(60)
        assert r.offsets[("orders", 0)].offset >= work.acked[work.groups[0]]
        attached.shutdown()  # a handle that created nothing removes nothing

        # A node whose disk belongs to a deployment of another shape is refused, and gets nothing.
        os.makedirs(os.path.join(data, "coord-x"))
        with open(os.path.join(data, "coord-x", "deployment.json"), "w") as f:
            json.dump({"format": 1, "num_partitions": 8, "node": "coord-x"}, f)
        _add(ray_cluster, "coord-x")
        wait_for(lambda: cluster.nodes().get("coord-x", {}).get("refused"), what="coord-x refused")
        assert "8 partitions, not 4" in cluster.nodes()["coord-x"]["refused"]
        with pytest.raises(ValueError, match="coord-x"):
            deploy(ray_cluster.address, data_dir=data, num_partitions=4)
        assert all("coord-x" not in cluster.partition_state(p)["replicas"] for p in range(4))
        assert "coord-x" in cluster.readiness()["refused"]  # shown to the operator; the others serve
    finally:
        cluster.shutdown()
    for p in range(4):
        with pytest.raises(ValueError):
            ray.get_actor(f"raygroups-shard-{p}", namespace="raygroups")
    # Nothing of the deployment is left: no shard, no spare, no LogServer, no controller.
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == "raygroups"]
