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

from actors.factory import create_shard
from actors.metadata import DEPLOYMENT_KEY, TOPICS_KEY, kv_delete, kv_get_json, kv_put_json, read_topics
from actors.shard_actor import shard_name
from coordinator.config import CoordinatorConfig
from coordinator.messages import check_int, check_type
from raygroups.client import RayGroupClient

READY_TIMEOUT_S = 120


class Cluster:
    """A handle on a deployment. ``shutdown()`` removes every actor this handle created (detached ones
    included) and, for ``start_local``, the Ray instance and temporary data it started."""

    def __init__(self, namespace: str, num_partitions: int, config: CoordinatorConfig, data_dir: str,
                 created: bool, owns_ray: bool, owns_data_dir: bool) -> None:
        self.namespace = namespace
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
            for key in (DEPLOYMENT_KEY, TOPICS_KEY):
                kv_delete(key, self.namespace)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        if self._owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def start_local(num_partitions: int = 8, data_dir: str | os.PathLike | None = None,
                config: dict[str, Any] | None = None, namespace: str | None = None,
                num_cpus: int | None = None) -> Cluster:
    """Start (or attach to) a local Ray and create one shard actor per partition, ready to serve."""
    check_int("num_partitions", num_partitions, 1, 10_000)
    check_type("data_dir", data_dir, (str, os.PathLike), nullable=True)
    check_type("namespace", namespace, str, nullable=True)
    props = dict(config or {})
    props["offsets.topic.num.partitions"] = num_partitions
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
        statuses = ray.get([s.ready.remote() for s in shards], timeout=READY_TIMEOUT_S)
        failed = [s for s in statuses if s["state"] != "ACTIVE"]
        if failed:
            raise RuntimeError(f"shards failed to load: {failed}")
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


def connect(address: str = "auto", namespace: str | None = None) -> Cluster:
    """Attach to a running deployment (started by ``start_local`` or on a ``ray up`` cluster)."""
    check_type("namespace", namespace, str)
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    deployment = kv_get_json(DEPLOYMENT_KEY, namespace)
    if deployment is None:
        raise ValueError(f"no raygroups deployment in namespace {namespace!r}")
    cfg = CoordinatorConfig.from_properties(deployment["config"])
    return Cluster(namespace, deployment["num_partitions"], cfg, deployment["data_dir"], created=False,
                   owns_ray=False, owns_data_dir=False)
