"""Start-up and full restart of a replicated deployment on a simulated 3-node cluster.

Measures, in one run: the Ray cluster itself starting (head + 3 coordinator nodes + driver: the baseline
every restart pays), ``deploy()`` of a new deployment until every partition serves, then -- after filling
the partitions with committed offsets and stopping every process (head included) -- a new Ray cluster on
the same data directories and ``deploy()`` until every partition serves again, recovered from the
nodes' disks, with the shards' replay time. Checks that every committed offset came back.

Writes ``bench/results/restart.json``. Run: ``.venv/bin/python bench/restart.py [--offsets N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402
from ray.cluster_utils import Cluster as RayCluster  # noqa: E402
from raygroups.coordinator.errors import Errors  # noqa: E402

from raygroups import partition_for  # noqa: E402
from raygroups.deployment.seam import add_simulated_node  # noqa: E402
from raygroups.deployment.start import SIMULATED_HEALTH_CHECKS, deploy  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
OUT = sys.stdout  # the figures' stream: the real terminal once Ray's output goes to a log (never
# sys.stdout itself: Ray prints its raylets' messages to whatever sys.stdout is)
PARTITIONS = 8
TOPIC = "bench"
PER_COMMIT = 1_000  # offsets per commit request


def _ray_cluster() -> tuple[RayCluster, float]:
    start = time.perf_counter()
    rc = RayCluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"head": 1},
                                                          "_system_config": SIMULATED_HEALTH_CHECKS})
    for i in range(3):
        add_simulated_node(rc, f"node-{i}")
    rc.wait_for_nodes()
    ray.init(address=rc.address, log_to_driver=False)
    return rc, time.perf_counter() - start


def _deploy(rc: RayCluster, data_dir: str) -> tuple[object, float]:
    start = time.perf_counter()
    cluster = deploy(rc.address, data_dir=data_dir, num_partitions=PARTITIONS, config={"request.timeout.ms": 120_000})
    return cluster, time.perf_counter() - start


def _groups() -> list[str]:
    return [next(g for g in (f"bench-{p}-{i}" for i in range(10_000)) if partition_for(g, PARTITIONS) == p)
            for p in range(PARTITIONS)]


def _fill(cluster, offsets: int) -> dict:
    client = cluster.client()
    groups = _groups()
    per_group = offsets // len(groups)
    cluster.create_topic(TOPIC, max(per_group, 1))
    futures = []
    for g in groups:
        for first in range(0, per_group, PER_COMMIT):
            tps = {(TOPIC, i): (i + 1, "") for i in range(first, min(first + PER_COMMIT, per_group))}
            futures.append(client.commit_offsets(group_id=g, offsets=tps))
    for f in futures:
        assert set(f.result(300).errors.values()) == {Errors.NONE}
    return {g: per_group for g in groups}


def _count_back(cluster, filled: dict) -> int:
    client = cluster.client()
    back = 0
    for g in filled:
        offsets = client.fetch_offsets(group_id=g).result(300).offsets
        back += sum(1 for (_, i), o in offsets.items() if o.offset == i + 1)
    return back


def _stop(cluster, rc) -> None:
    cluster.shutdown()
    ray.shutdown()
    rc.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offsets", type=int, default=200_000)
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="raygroups-bench-")

    rc, cluster_new_s = _ray_cluster()
    cluster, deploy_new_s = _deploy(rc, data_dir)
    filled = _fill(cluster, args.offsets)
    total = sum(filled.values())
    _stop(cluster, rc)

    rc, cluster_again_s = _ray_cluster()
    cluster, deploy_again_s = _deploy(rc, data_dir)
    statuses = cluster.shard_status()
    back = _count_back(cluster, filled)
    events = cluster.controller_events()
    recovered = sum(1 for e in events if e["event"] == "partition-recovered")
    _stop(cluster, rc)

    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "ray": ray.__version__},
        "partitions": PARTITIONS, "nodes": 3, "committed_offsets": total,
        "baseline_ray_cluster_start_s": {"new": round(cluster_new_s, 2), "restart": round(cluster_again_s, 2)},
        "new_deployment_ready_s": round(deploy_new_s, 2),
        "full_restart_ready_s": round(deploy_again_s, 2),
        "full_restart_max_shard_replay_s": round(max(s.get("load_seconds") or 0 for s in statuses), 3),
        "full_restart_records_replayed": sum(s.get("load_records") or 0 for s in statuses),
        "partitions_recovered_from_disks": recovered,
        "offsets_back": back,
    }
    assert back == total, f"only {back} of {total} committed offsets came back"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "restart.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2), file=OUT)


if __name__ == "__main__":
    # Killed nodes make Ray print raylet state dumps on this process's terminal: they go to a log file, the
    # figures to the terminal.
    from raygroups.chaos.run import quiet_output

    RESULTS.mkdir(exist_ok=True)
    with quiet_output(str(RESULTS / "restart-ray-output.log"), restore=False) as terminal:
        OUT = terminal
        main()
