"""The one seam for Ray: every ``ray.remote`` option of this project's actors is set here, so the actor
classes stay plain classes that unit tests construct directly."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.log_server import LogServer, log_server_name
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


def create_worker(cls: type, namespace: str, *args: Any, resources: dict[str, float] | None = None):
    """A consumer worker actor: threaded (its loop blocks in one thread while ``stats``/``stop`` are served
    by others), no CPU reservation so that many fit on a small machine, not restarted by Ray (a dead
    consumer is the group's business: its partitions move after the session timeout). ``resources``
    places it (a simulated cluster keeps consumers off the coordinator nodes it kills)."""
    options: dict[str, Any] = {"namespace": namespace, "max_concurrency": 4, "num_cpus": 0, "max_restarts": 0}
    if resources:
        options["resources"] = resources
    return ray.remote(cls).options(**options).remote(*args)


@dataclass(frozen=True)
class ActorFactory:
    """Creates and finds the actors of a replicated deployment; handed to the controller (which must not
    import actor classes). Every actor is pinned to its node: a crashed process restarts there, and a
    dead node's actors are replaced by the controller on another node, never by Ray."""

    namespace: str
    num_partitions: int
    config: dict
    data_root: str
    controller_name: str

    def node_dir(self, node_id: str) -> str:
        # Each coordinator node has its own disk; on a simulated cluster, its own directory.
        return os.path.join(self.data_root, f"node-{node_id[:16]}")

    def _pinned(self, node_id: str) -> dict[str, Any]:
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}

    def create_log_server(self, node_id: str):
        options = {"name": log_server_name(node_id), "namespace": self.namespace, "lifetime": "detached",
                   "max_restarts": -1, "max_task_retries": 0, "max_concurrency": 1_000, "num_cpus": 0,
                   **self._pinned(node_id)}
        segment_bytes = self.config.get("offsets.topic.segment.bytes", 100 * 1024 * 1024)
        fsync = self.config.get("log.flush.interval.ms", 0) or None
        return ray.remote(LogServer).options(**options).remote(node_id, self.node_dir(node_id), segment_bytes, fsync)

    def log_server(self, node_id: str):
        return ray.get_actor(log_server_name(node_id), namespace=self.namespace)

    def create_shard(self, partition: int, node_id: str):
        options = {**shard_actor_options(partition, self.namespace), **self._pinned(node_id)}
        return ray.remote(CoordinatorShard).options(**options).remote(
            partition, self.num_partitions, self.config, self.node_dir(node_id), 0, None, self.namespace,
            self.controller_name, node_id,
        )

    def shard(self, partition: int):
        return ray.get_actor(shard_name(partition), namespace=self.namespace)
