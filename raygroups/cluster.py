"""Deployments: ``start_local`` (the embedded default) and ``connect`` (an existing deployment).

A deployment is one Ray namespace holding one detached ``CoordinatorShard`` actor per
``__consumer_offsets`` partition, plus its description (partition count, config, data directory) and
topic metadata in Ray's GCS key-value store, so that ``connect`` and restarted shards find them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from typing import Any

import ray

from actors.factory import COORDINATOR_RESOURCE, ActorFactory, create_shard
from actors.metadata import DEPLOYMENT_KEY, TOPICS_KEY, kv_delete, kv_get_json, kv_put_json, read_topics
from actors.shard_actor import shard_name
from coordinator.config import CoordinatorConfig
from coordinator.messages import check_int, check_type
from placement.controller import CONTROLLER_NAME, Controller
from raygroups.client import RayGroupClient

READY_TIMEOUT_S = 120


class Cluster:
    """A handle on a deployment. ``shutdown()`` removes every actor this handle created (detached ones
    included) and, for ``start_local``, the Ray instance and temporary data it started."""

    def __init__(self, namespace: str, num_partitions: int, config: CoordinatorConfig, data_dir: str,
                 created: bool, owns_ray: bool, owns_data_dir: bool, replicated: bool = False,
                 ray_cluster: Any = None, factory: Any = None) -> None:
        self.namespace = namespace
        self.replicated = replicated
        self._ray_cluster = ray_cluster  # ray.cluster_utils.Cluster of a simulated multi-node deployment
        self._factory = factory
        # Where consumer actors go: on a simulated cluster, the head node, which is never killed.
        self.consumer_resources = {"head": 0.001} if ray_cluster is not None else None
        self.num_partitions = num_partitions
        self.config = config
        self.data_dir = data_dir
        self._created = created
        self._owns_ray = owns_ray
        self._owns_data_dir = owns_data_dir
        self._client: RayGroupClient | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"Cluster(namespace={self.namespace!r}, num_partitions={self.num_partitions})"

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------------------------------------
    def client(self) -> RayGroupClient:
        """The group API (same methods as ``raygroups.testing.InProcessCoordinator``); thread-safe."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this cluster handle is shut down")
            if self._client is None:
                self._client = RayGroupClient(self.namespace, self.num_partitions, self.config)
            return self._client

    def shard(self, partition: int):
        check_int("partition", partition, 0, self.num_partitions - 1)
        return ray.get_actor(shard_name(partition), namespace=self.namespace)

    def shard_status(self, timeout_s: float = 30) -> list[dict]:
        """Each shard's ``status()``; a shard that cannot answer (restarting, dead) shows as UNAVAILABLE."""
        refs = []
        for p in range(self.num_partitions):
            try:
                refs.append(self.shard(p).status.remote())
            except ValueError:
                refs.append(None)
        out = []
        for p, ref in enumerate(refs):
            try:
                out.append(ray.get(ref, timeout=timeout_s) if ref is not None else None)
            except (ray.exceptions.RayError, TimeoutError):
                out.append(None)
            if out[-1] is None:
                out[-1] = {"partition": p, "state": "UNAVAILABLE", "pid": None, "leader_epoch": None}
        return out

    def kill_shard(self, partition: int) -> None:
        """Kill a shard's process the way a crash would; Ray restarts it and it replays its log."""
        ray.kill(self.shard(partition), no_restart=False)

    # --- replicated deployments ----------------------------------------------------------------------
    def _controller(self):
        if not self.replicated:
            raise RuntimeError("this deployment is not replicated (start_local(num_nodes=...) makes one)")
        return ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)

    def coordinator_nodes(self) -> list[str]:
        """Ids of the alive nodes that carry the coordinator resource."""
        return sorted(Controller.alive_coordinator_nodes())

    def partition_state(self, partition: int) -> dict:
        """``{"replicas", "leader", "leader_epoch", "isr"}`` of one partition, from the controller."""
        check_int("partition", partition, 0, self.num_partitions - 1)
        return ray.get(self._controller().partition_state.remote(partition), timeout=30)

    def partition_leaders(self) -> dict[int, str | None]:
        meta = ray.get(self._controller().metadata.remote(), timeout=30)
        return {int(p): a["leader"] for p, a in meta.items()}

    def controller_events(self) -> list[dict]:
        return ray.get(self._controller().recent_events.remote(), timeout=30)

    def replica_records(self, partition: int, node_id: str, up_to_offset: int | None = None) -> list:
        """The records of one replica of ``partition`` (the leader's log or a follower's)."""
        state = self.partition_state(partition)
        if node_id == state["leader"]:
            return ray.get(self.shard(partition).replica_records.remote(up_to_offset), timeout=60)
        return ray.get(self._factory.log_server(node_id).records.remote(partition, up_to_offset), timeout=60)

    def kill_node(self, node_id: str, graceful: bool = False) -> None:
        """Simulated clusters only: remove a coordinator node (``graceful=False``: its raylet is killed)."""
        node = self._simulated_node(node_id)
        self._ray_cluster.remove_node(node, allow_graceful=graceful)

    def add_node(self) -> str:
        """Simulated clusters only: add a coordinator node; returns its node id."""
        if self._ray_cluster is None:
            raise RuntimeError("add_node() needs a simulated cluster: start_local(num_nodes=...)")
        node = self._ray_cluster.add_node(num_cpus=1, resources={COORDINATOR_RESOURCE: 1})
        return node.node_id

    def _simulated_node(self, node_id: str):
        if self._ray_cluster is None:
            raise RuntimeError("kill_node() needs a simulated cluster: start_local(num_nodes=...)")
        for node in self._ray_cluster.worker_nodes:
            if node.node_id == node_id:
                return node
        raise ValueError(f"{node_id!r} is not a live coordinator node of this cluster")

    def node_pid_for_testing(self, node_id: str) -> int:
        return self._simulated_node(node_id).all_processes["raylet"][0].process.pid

    # --- topic metadata --------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int) -> None:
        """Register a topic; commits to unregistered topics or partitions answer UNKNOWN_TOPIC_OR_PARTITION."""
        check_type("name", name, str)
        if not name or len(name) > 249:
            raise ValueError(f"topic name must be 1..249 characters, got {len(name)}")
        check_int("partitions", partitions, 1, 1_000_000)
        topics = self.topics()
        if name in topics and topics[name] > partitions:
            raise ValueError(f"topic {name!r} already has {topics[name]} partitions; cannot shrink to {partitions}")
        topics[name] = partitions
        kv_put_json(TOPICS_KEY, topics, self.namespace)
        ray.get([self.shard(p).set_topics.remote(topics) for p in range(self.num_partitions)], timeout=60)

    def topics(self) -> dict[str, int]:
        return read_topics(self.namespace)

    # ------------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            client.close()
        if self._created:
            handles = []
            if self.replicated:
                try:
                    ray.kill(self._controller(), no_restart=True)  # first, so that it restarts nothing
                except (ValueError, RuntimeError):
                    pass
            for p in range(self.num_partitions):
                try:
                    handles.append(self.shard(p))
                except ValueError:
                    continue
            try:
                ray.get([h.close.remote() for h in handles], timeout=30)
            except ray.exceptions.RayError:
                pass
            for h in handles:
                ray.kill(h, no_restart=True)
            if self.replicated:
                for node_id in self.coordinator_nodes():
                    try:
                        ray.kill(self._factory.log_server(node_id), no_restart=True)
                    except ValueError:
                        pass
            for key in (DEPLOYMENT_KEY, TOPICS_KEY):
                kv_delete(key, self.namespace)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        if self._ray_cluster is not None:
            self._ray_cluster.shutdown()
        if self._owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def start_local(num_partitions: int = 8, data_dir: str | os.PathLike | None = None,
                config: dict[str, Any] | None = None, namespace: str | None = None,
                num_cpus: int | None = None, num_nodes: int | None = None) -> Cluster:
    """Start (or attach to) a local Ray and create one shard actor per partition, ready to serve.

    ``num_nodes=N`` instead simulates N coordinator nodes on this machine (``ray.cluster_utils``) beside
    a head node that carries the driver and the controller but no coordinator resource: every
    partition is replicated on ``offsets.topic.replication.factor`` nodes (capped by N) with
    ``min.insync.replicas`` (capped likewise), and killing a node fails its partitions over."""
    check_int("num_partitions", num_partitions, 1, 10_000)
    check_type("data_dir", data_dir, (str, os.PathLike), nullable=True)
    check_type("namespace", namespace, str, nullable=True)
    props = dict(config or {})
    props["offsets.topic.num.partitions"] = num_partitions
    if num_nodes is not None:
        check_int("num_nodes", num_nodes, 1, 32)
        return _start_simulated(num_partitions, data_dir, props, namespace, num_nodes)
    cfg = CoordinatorConfig.from_properties(props)
    owns_ray = not ray.is_initialized()
    if owns_ray:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    namespace = namespace or f"raygroups-{uuid.uuid4().hex[:8]}"
    owns_data_dir = data_dir is None
    data_dir = tempfile.mkdtemp(prefix="raygroups-") if data_dir is None else os.fspath(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    if kv_get_json(DEPLOYMENT_KEY, namespace) is not None:
        raise ValueError(f"namespace {namespace!r} already holds a raygroups deployment; use connect()")
    kv_put_json(DEPLOYMENT_KEY, {"num_partitions": num_partitions, "config": cfg.to_properties(),
                                   "data_dir": os.path.abspath(data_dir)}, namespace)
    cluster = Cluster(namespace, num_partitions, cfg, data_dir, created=True, owns_ray=owns_ray,
                      owns_data_dir=owns_data_dir)
    try:
        shards = [create_shard(p, namespace, num_partitions, cfg.to_properties(), os.path.abspath(data_dir))
                  for p in range(num_partitions)]
        _wait_ready(shards)
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


def _wait_ready(shards: list) -> None:
    statuses = ray.get([s.ready.remote() for s in shards], timeout=READY_TIMEOUT_S)
    failed = [s for s in statuses if s["state"] != "ACTIVE"]
    if failed:
        raise RuntimeError(f"shards failed to load: {failed}")


def connect(address: str = "auto", namespace: str | None = None) -> Cluster:
    """Attach to a running deployment (started by ``start_local`` or on a ``ray up`` cluster)."""
    check_type("namespace", namespace, str)
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    deployment = kv_get_json(DEPLOYMENT_KEY, namespace)
    if deployment is None:
        raise ValueError(f"no raygroups deployment in namespace {namespace!r}")
    cfg = CoordinatorConfig.from_properties(deployment["config"])
    replicated = bool(deployment.get("replicated"))
    factory = None
    if replicated:
        factory = ActorFactory(namespace, deployment["num_partitions"], cfg.to_properties(), deployment["data_dir"],
                               CONTROLLER_NAME)
    return Cluster(namespace, deployment["num_partitions"], cfg, deployment["data_dir"], created=False,
                   owns_ray=False, owns_data_dir=False, replicated=replicated, factory=factory)


# Node-death detection in ~1.5-2.5 s instead of Ray's default ~15 s (reference ray-and-raydp.md §1: 500 ms
# x 3 measured 2.3 s); lower thresholds risk declaring busy nodes dead (ray#44680).
SIMULATED_HEALTH_CHECKS = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
    "health_check_timeout_ms": 500,
}


def _start_simulated(num_partitions: int, data_dir, props: dict, namespace: str | None, num_nodes: int) -> Cluster:
    from ray.cluster_utils import Cluster as RayCluster

    if ray.is_initialized():
        raise RuntimeError("start_local(num_nodes=...) starts its own simulated cluster: call ray.shutdown() first")
    rf = min(props.get("offsets.topic.replication.factor", 3), num_nodes)
    props["offsets.topic.replication.factor"] = rf
    props["min.insync.replicas"] = min(props.get("min.insync.replicas", 2), rf)
    props.setdefault("replica.lag.time.max.ms", 2_000)
    cfg = CoordinatorConfig.from_properties(props)
    ray_cluster = RayCluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"head": 1}, "_system_config": SIMULATED_HEALTH_CHECKS,
    })
    try:
        for _ in range(num_nodes):
            ray_cluster.add_node(num_cpus=1, resources={COORDINATOR_RESOURCE: 1})
        ray_cluster.wait_for_nodes()
        ray.init(address=ray_cluster.address, log_to_driver=False)
    except BaseException:
        ray_cluster.shutdown()
        raise
    namespace = namespace or f"raygroups-{uuid.uuid4().hex[:8]}"
    owns_data_dir = data_dir is None
    data_dir = tempfile.mkdtemp(prefix="raygroups-") if data_dir is None else os.fspath(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    data_dir = os.path.abspath(data_dir)
    kv_put_json(DEPLOYMENT_KEY, {"num_partitions": num_partitions, "config": cfg.to_properties(),
                                 "data_dir": data_dir, "replicated": True}, namespace)
    factory = ActorFactory(namespace, num_partitions, cfg.to_properties(), data_dir, CONTROLLER_NAME)
    cluster = Cluster(namespace, num_partitions, cfg, data_dir, created=True, owns_ray=True,
                      owns_data_dir=owns_data_dir, replicated=True, ray_cluster=ray_cluster, factory=factory)
    try:
        controller = ray.remote(Controller).options(
            name=CONTROLLER_NAME, namespace=namespace, lifetime="detached", max_restarts=-1, max_task_retries=0,
            max_concurrency=1_000, num_cpus=0, resources={"head": 0.001},
        ).remote(namespace, num_partitions, rf, False, factory)
        ray.get(controller.start.remote(), timeout=READY_TIMEOUT_S)
        _wait_ready([factory.shard(p) for p in range(num_partitions)])
    except BaseException:
        cluster.shutdown()
        raise
    return cluster
