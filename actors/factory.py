"""The one seam for Ray: every ``ray.remote`` option of this project's actors is set here, so the actor
classes stay plain classes that unit tests construct directly."""

from __future__ import annotations

from typing import Any

import ray

from actors.shard_actor import CoordinatorShard, shard_name

# Coordinator nodes carry this custom resource on a real cluster (cluster.yaml); a local single-node
# Ray has no such resource, so it is only requested when the deployment says so.
COORDINATOR_RESOURCE = "coordinator"


def shard_actor_options(partition: int, namespace: str, on_coordinator_nodes: bool = False) -> dict[str, Any]:
    options: dict[str, Any] = {
        "name": shard_name(partition),
        "namespace": namespace,
        "lifetime": "detached",
        # A crashed shard process is restarted (re-running __init__, which replays the log).
        "max_restarts": -1,
        # No Ray-level retries: Ray gives no ordering for retried calls; the client retries instead,
        # with requests that carry member id and generation.
        "max_task_retries": 0,
        "max_concurrency": 10_000,
        "num_cpus": 0,
    }
    if on_coordinator_nodes:
        options["resources"] = {COORDINATOR_RESOURCE: 0.001}
    return options


def create_shard(partition: int, namespace: str, num_partitions: int, config: dict[str, int], data_dir: str,
                 leader_epoch: int = 0, topics: dict[str, int] | None = None,
                 on_coordinator_nodes: bool = False):
    cls = ray.remote(CoordinatorShard)
    return cls.options(**shard_actor_options(partition, namespace, on_coordinator_nodes)).remote(
        partition, num_partitions, config, data_dir, leader_epoch, topics, namespace,
    )


def create_worker(cls: type, namespace: str, *args: Any):
    """A consumer worker actor: threaded (its loop blocks in one thread while ``stats``/``stop`` are served
    by others), no CPU reservation so that many fit on a small machine, not restarted by Ray (a dead
    consumer is the group's business: its partitions move after the session timeout)."""
    return ray.remote(cls).options(namespace=namespace, max_concurrency=4, num_cpus=0, max_restarts=0).remote(*args)
