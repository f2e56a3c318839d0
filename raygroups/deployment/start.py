"""Starting and attaching to deployments: ``start_local`` (the embedded default), ``connect``, and
``raygroups.deploy``, the one path that creates or resumes a replicated deployment on a Ray cluster.

Coordinator nodes are the Ray nodes carrying the ``coordinator`` resource, each named by its
``raygroups.io/node`` label (``placement.nodes``). ``deploy`` records the deployment in the namespace
(GCS), starts the controller if it is not running, and -- with ``wait=True`` -- returns once every
partition is served. The controller places partitions on whatever coordinator nodes exist and keeps
reconciling as nodes join and leave, so a deployment made before its workers joined (``ray up``'s head
start command) comes up as they do. Running it again is harmless: it resumes what runs in the namespace,
or, on a new Ray cluster (a restarted head), what the coordinator nodes' disks hold.

``start_simulated`` is ``start_local(num_nodes=N)``: a ``ray.cluster_utils`` cluster on this machine (a head
node plus N coordinator nodes ``node-0`` ...), then the same ``deploy``.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import tempfile
from typing import Any

import ray

from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.messages import check_int, check_type
from raygroups.deployment.cluster import DEFAULT_NAMESPACE, READY_TIMEOUT_S, Cluster
from raygroups.deployment.seam import (
    DEPLOYMENT_KEY,
    ActorFactory,
    add_simulated_node,
    create_shard,
    ensure_controller,
    kv_get_json,
    kv_put_json,
    write_topics,
)
from raygroups.gateway import register_topics
from raygroups.gateway.node import NodeListener, is_wildcard, parse_listen
from raygroups.offsets_log.replica_state import read_node_descriptor, read_topics_file, write_node_descriptor
from raygroups.placement.model import Settings
from raygroups.placement.nodes import coordinator_nodes, unlabelled_warning
from raygroups.sources import load_source

log = logging.getLogger(__name__)

# Node-death detection in Ray's GCS (GcsHealthCheckManager): a check every period; a node is dead after
# `threshold` failed checks in a row; each check waits `timeout` for its answer before the next period
# starts. A crashed raylet refuses the connection, so each check fails at once: dead 3 x 200 ms = 0.6 s
# after (measured 0.49-0.60 s). A stalled or unreachable node fails each check only at its timeout:
# 3 x (200 + 1000) ms = 3.6 s (measured 3.4 s with the raylet SIGSTOPped), so a busy node is not declared
# dead for a stall under that (ray#44680: a node declared dead by mistake cannot rejoin). The checks of a
# node start 1 s after it registers (Ray's default: 5 s), so that a node that crashes just after it
# restarted is declared dead as fast as any other (chaos runs met detections of 6.8 s there).
SIMULATED_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 200,
    "health_check_failure_threshold": 3,
    "health_check_timeout_ms": 1000,
}


def simulated_health_checks_text() -> str:
    """How the simulated cluster's health checks are set, for the benches' JSON."""
    h = SIMULATED_HEALTH_CHECKS
    return (f"{h['health_check_period_ms']} ms x {h['health_check_failure_threshold']}, timeout "
            f"{h['health_check_timeout_ms']} ms (simulated cluster)")


# GCS fault tolerance (Ray's "GCS Fault Tolerance"): the GCS keeps its tables in RocksDB on the head's disk
# (Ray's embedded backend, ``gcs_storage=rocksdb``), so a GCS that restarts resumes the same cluster: its
# actors, names, node table and key-value store. While it is away running actors keep serving, and each
# raylet waits ``gcs_rpc_server_reconnect_timeout_s`` for it before giving up (cluster.yaml: the same).
GCS_RECONNECT_TIMEOUT_S = 60


# A node's worker processes check every this often whether their raylet still lives, and exit if not (Ray's
# default 1000 ms): a leader whose node crashed stops renewing its lease within 0.1 s instead of a second.
RAYLET_DEATH_CHECK_MS = 100


def simulated_system_config(gcs_dir: str) -> dict:
    """The simulated head's Ray system config: fast health checks, workers that follow their raylet's death
    at once, and the GCS persisted in ``gcs_dir``."""
    return {**SIMULATED_HEALTH_CHECKS, "raylet_death_check_interval_milliseconds": RAYLET_DEATH_CHECK_MS,
            "gcs_storage": "rocksdb", "gcs_storage_path": gcs_dir,
            "gcs_rpc_server_reconnect_timeout_s": GCS_RECONNECT_TIMEOUT_S}


def deploy(address: str = "auto", *, data_dir: str | os.PathLike, namespace: str = DEFAULT_NAMESPACE,
           num_partitions: int = 50, config: dict[str, Any] | None = None, wait: bool = True,
           timeout_s: float = READY_TIMEOUT_S, listeners: str | None = None, advertised_host: str | None = None,
           source: str | None = None) -> Cluster:
    """Create, or resume, the replicated deployment in ``namespace`` on the Ray cluster at ``address``.

    ``data_dir`` is an absolute path that exists on every coordinator host; each node keeps its replicas
    under ``<data_dir>/<node name>``. ``config`` takes Kafka's property names
    (``offsets.topic.replication.factor``, ``min.insync.replicas``, ``group.*``...). With ``wait`` (the
    default) it returns once every partition is served, or raises ``TimeoutError`` naming what the
    deployment is still waiting for (for instance, coordinator nodes to join). Resuming a running
    deployment with another partition count, data directory or config is refused, as is a node whose
    disk holds a deployment of another partition count; nothing is changed then.

    ``listeners="HOST:PORT"`` runs a Kafka listener on every coordinator node (``raygroups.gateway``; Kafka's
    ``listeners``, port 0 picks a free one per node), telling clients to connect to ``advertised_host``
    (Kafka's ``advertised.listeners``; by default each node's IP); ``source="MODULE:ATTR"`` names the
    ``raygroups.Source`` they serve read-only (importable on every node), whose topics are registered once
    every partition serves (so it needs ``wait``)."""
    data_dir, cfg = validate_deploy_args(address, data_dir, namespace, num_partitions, config, wait, timeout_s)
    listener = listener_spec(listeners, advertised_host, source, wait)
    owns_ray = not ray.is_initialized()
    if owns_ray:
        ray.init(address=address, log_to_driver=False)
    description = {"num_partitions": num_partitions, "config": cfg.to_properties(), "data_dir": data_dir,
                   "replicated": True, "listeners": None if listener is None else listener["kwargs"]}
    existing = kv_get_json(DEPLOYMENT_KEY, namespace)
    try:
        if existing is not None:
            cfg = _resumable(existing, description, namespace, config is not None)
            listener = _resumed_listeners(existing, description, namespace, listener)
        _warn_unlabelled()
        factory = ActorFactory(namespace, num_partitions, cfg.to_properties(), data_dir, listener=listener)
        if existing is None:
            kv_put_json(DEPLOYMENT_KEY, description, namespace)
        cluster = Cluster(namespace, num_partitions, cfg, data_dir, created=True, owns_ray=owns_ray,
                          owns_data_dir=False, replicated=True, factory=factory)
        controller = ensure_controller(namespace, _settings(cfg), factory)
        try:
            ray.get(controller.start.remote(), timeout=timeout_s)
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if isinstance(e.cause, ValueError) else None
            if existing is None:
                cluster.shutdown()  # what this call created goes; the disks are untouched
            if cause is not None:
                raise ValueError(str(cause)) from None
            raise
        if existing is not None and "listeners" not in existing:  # recorded before listeners: now it has them
            kv_put_json(DEPLOYMENT_KEY, {**existing, "listeners": None if listener is None else listener["kwargs"]},
                        namespace)
    except BaseException:
        if owns_ray and ray.is_initialized():
            ray.shutdown()
        raise
    if wait:
        cluster.wait_ready(timeout_s)
    if source is not None:  # registering a topic needs the coordinator nodes (its record goes to their disks)
        register_topics(cluster, load_source(source))
    return cluster


def listener_spec(listeners: object, advertised_host: object, source: object, wait: object = True) -> dict | None:
    """``deploy``'s listener arguments checked before anything is touched: what the node listeners are made
    of, or None for none; TypeError/ValueError naming the argument."""
    check_type("listeners", listeners, str, nullable=True)
    check_type("advertised_host", advertised_host, str, nullable=True)
    check_type("source", source, str, nullable=True)
    if source is not None and not wait:
        raise ValueError("source needs wait=True: its topics are registered once the coordinator nodes serve")
    if listeners is None:
        if advertised_host is not None or source is not None:
            raise ValueError("advertised_host and source need listeners (HOST:PORT)")
        return None
    host, _ = parse_listen(listeners)
    if not _every_node_can_listen_at(host):
        # Kafka configures listeners per broker; here one HOST:PORT serves every coordinator node, and only
        # one host has a given address.
        raise ValueError(f"listeners host {host!r} is one machine's address: every coordinator node listens at "
                         f"HOST:PORT, so HOST must be a wildcard (0.0.0.0 or ::) or a loopback address")
    if source is not None:
        load_source(source)
    return {"cls": NodeListener, "kwargs": {"listen": listeners, "advertised_host": advertised_host,
                                            "source": source}}


def _every_node_can_listen_at(host: str) -> bool:
    if is_wildcard(host) or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name is one machine's


def validate_deploy_args(address: object, data_dir: object, namespace: object, num_partitions: object,
                         config: object, wait: object = True, timeout_s: object = READY_TIMEOUT_S,
                         ) -> tuple[str, CoordinatorConfig]:
    """``deploy``'s arguments checked before anything is touched: ``(absolute data_dir, config)``, or
    TypeError/ValueError naming the argument and the limit."""
    check_type("address", address, str)
    check_type("data_dir", data_dir, (str, os.PathLike))
    check_type("namespace", namespace, str)
    if not namespace:
        raise ValueError("namespace must not be empty")
    check_int("num_partitions", num_partitions, 1, 10_000)
    check_type("config", config, dict, nullable=True)
    check_type("wait", wait, bool)
    check_type("timeout_s", timeout_s, (int, float))
    data_dir = os.path.expanduser(os.fspath(data_dir))
    if not os.path.isabs(data_dir):
        raise ValueError(f"data_dir must be an absolute path (every coordinator node uses it), got {data_dir!r}")
    props = dict(config or {})
    props["offsets.topic.num.partitions"] = num_partitions
    cfg = CoordinatorConfig.from_properties(props)
    if cfg.min_insync_replicas > cfg.offsets_topic_replication_factor:
        raise ValueError(f"min.insync.replicas ({cfg.min_insync_replicas}) must not exceed "
                         f"offsets.topic.replication.factor ({cfg.offsets_topic_replication_factor}): "
                         f"no write could ever be acknowledged")
    return data_dir, cfg


def _resumable(existing: dict, wanted: dict, namespace: str, config_given: bool) -> CoordinatorConfig:
    if not existing.get("replicated"):
        raise ValueError(f"namespace {namespace!r} holds a single-node deployment (start_local()); "
                         f"deploy a replicated one in another namespace")
    for key in ("num_partitions", "data_dir"):
        if existing.get(key) != wanted[key]:
            raise ValueError(f"the deployment in namespace {namespace!r} has {key}={existing.get(key)!r}, not "
                             f"{wanted[key]!r}; it cannot change while it runs")
    # A deployment stored by an older version lacks the properties added since: they had their defaults.
    stored = CoordinatorConfig.from_properties(existing["config"]).to_properties()
    if config_given and stored != wanted["config"]:
        changed = sorted(k for k in wanted["config"] if stored.get(k) != wanted["config"][k])
        raise ValueError(f"the deployment in namespace {namespace!r} runs with other values of {', '.join(changed)}; "
                         f"shut it down (its data stays) and deploy again to change them")
    return CoordinatorConfig.from_properties(existing["config"])


def _resumed_listeners(existing: dict, wanted: dict, namespace: str, given: dict | None) -> dict | None:
    """The node listeners of a resumed deployment: those it was deployed with (resuming without
    ``listeners`` keeps them); other ones are refused, as another config is. A deployment recorded before
    listeners existed takes what this call gives."""
    if "listeners" not in existing:
        return given
    stored = existing["listeners"]
    if given is not None and stored != wanted["listeners"]:
        raise ValueError(f"the deployment in namespace {namespace!r} runs with listeners {stored!r}, not "
                         f"{wanted['listeners']!r}; shut it down (its data stays) and deploy again to change them")
    return None if stored is None else {"cls": NodeListener, "kwargs": stored}


def _settings(cfg: CoordinatorConfig) -> Settings:
    return Settings(num_partitions=cfg.offsets_topic_num_partitions,
                    replication_factor=cfg.offsets_topic_replication_factor,
                    min_insync_replicas=cfg.min_insync_replicas,
                    unclean_election=cfg.unclean_leader_election_enable,
                    shard_silence_ms=cfg.shard_session_timeout_ms)


def _warn_unlabelled() -> None:
    for node in coordinator_nodes(ray.nodes()).values():
        if node.alive and not node.labelled:
            log.warning(unlabelled_warning(node))


def start_simulated(num_partitions: int, data_dir, props: dict, namespace: str, num_nodes: int,
                    listeners: str | None = None) -> Cluster:
    """``start_local(num_nodes=N)``: a simulated cluster of N coordinator nodes, then ``deploy``."""
    from ray.cluster_utils import Cluster as RayCluster

    if ray.is_initialized():
        raise RuntimeError("start_local(num_nodes=...) starts its own simulated cluster: call ray.shutdown() first")
    rf = min(props.get("offsets.topic.replication.factor", 3), num_nodes)
    props["offsets.topic.replication.factor"] = rf
    props["min.insync.replicas"] = min(props.get("min.insync.replicas", 2), rf)
    props.setdefault("replica.lag.time.max.ms", 2_000)
    CoordinatorConfig.from_properties(props)  # bad config: refused before anything starts
    owns_data_dir = data_dir is None
    data_dir = os.path.abspath(tempfile.mkdtemp(prefix="raygroups-") if data_dir is None else os.fspath(data_dir))
    # A new Ray cluster per start: its GCS storage is fresh (the deployment resumes from the nodes' disks).
    gcs_dir = tempfile.mkdtemp(prefix="raygroups-gcs-")
    try:
        ray_cluster = RayCluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "resources": {"head": 1}, "_system_config": simulated_system_config(gcs_dir),
            "include_dashboard": False,
        })
    except BaseException:
        shutil.rmtree(gcs_dir, ignore_errors=True)
        raise
    names = [f"node-{i}" for i in range(num_nodes)]
    try:
        nodes = {n: add_simulated_node(ray_cluster, n) for n in names}
        ray_cluster.wait_for_nodes()
        ray.init(address=ray_cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        cluster = deploy(ray_cluster.address, data_dir=data_dir, namespace=namespace,
                         num_partitions=num_partitions, config=props, wait=False, listeners=listeners)
    except BaseException:
        if ray.is_initialized():
            ray.shutdown()
        ray_cluster.shutdown()
        shutil.rmtree(gcs_dir, ignore_errors=True)
        raise
    cluster._ray_cluster = ray_cluster
    cluster._gcs_dir = gcs_dir
    cluster._sim_nodes = nodes
    cluster._sim_names = list(names)
    cluster._owns_ray = True
    cluster._owns_data_dir = owns_data_dir
    cluster.consumer_resources = {"head": 0.001}
    try:
        cluster.wait_ready(READY_TIMEOUT_S)
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


def start_local(num_partitions: int = 8, data_dir: str | os.PathLike | None = None,
                config: dict[str, Any] | None = None, namespace: str | None = None,
                num_cpus: int | None = None, num_nodes: int | None = None, listeners: str | None = None) -> Cluster:
    """The embedded default: a local single-node Ray (started unless one is running) and one shard actor
    per partition, pinned to that node, data in ``data_dir`` (a temporary directory if None). Called
    again with the same ``data_dir`` after ``shutdown()`` it resumes the same data.

    ``num_nodes=N`` instead simulates N coordinator nodes (``node-0`` ... ``node-<N-1>``) on this machine
    (``ray.cluster_utils``) beside a head node that carries the driver and the controller, then runs
    ``raygroups.deploy`` on it: every partition is replicated on ``offsets.topic.replication.factor`` nodes
    (capped by N) with ``min.insync.replicas`` (capped likewise); each node's data lives under
    ``<data_dir>/<node name>``, so the same ``data_dir`` resumes the same replicated deployment; with
    ``listeners="127.0.0.1:0"`` each of them runs a Kafka listener (see ``deploy``)."""
    check_int("num_partitions", num_partitions, 1, 10_000)
    check_type("data_dir", data_dir, (str, os.PathLike), nullable=True)
    check_type("namespace", namespace, str, nullable=True)
    namespace = namespace or DEFAULT_NAMESPACE
    props = dict(config or {})
    props["offsets.topic.num.partitions"] = num_partitions
    if num_nodes is not None:
        check_int("num_nodes", num_nodes, 1, 32)
        return start_simulated(num_partitions, data_dir, props, namespace, num_nodes, listeners)
    if listeners is not None:
        raise ValueError("listeners are per coordinator node (num_nodes=...); in front of the single-node "
                         "default, run raygroups.gateway.start(cluster)")
    cfg = CoordinatorConfig.from_properties(props)
    owns_ray = not ray.is_initialized()
    if owns_ray:
        # The embedded default's Ray belongs to this process: Ray's notice that it enabled token auth (the
        # secure default) is not news to its user.
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        # address="local": a Ray of its own, never another process's Ray that this machine happens to run
        # (without it, ray.init joins the cluster named in /tmp/ray/ray_current_cluster).
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    alive = [n for n in ray.nodes() if n.get("Alive")]
    if len(alive) > 1:
        if owns_ray:
            ray.shutdown()
        raise RuntimeError(
            f"start_local() runs the single-node embedded default, but this Ray cluster has {len(alive)} nodes; "
            f"use raygroups.deploy(address, data_dir=...) to run a replicated deployment on it")
    if kv_get_json(DEPLOYMENT_KEY, namespace) is not None:
        if owns_ray:
            ray.shutdown()
        raise ValueError(f"namespace {namespace!r} already holds a raygroups deployment; use connect()")
    owns_data_dir = data_dir is None
    data_dir = os.path.abspath(tempfile.mkdtemp(prefix="raygroups-") if data_dir is None else os.fspath(data_dir))
    try:
        _check_single_node_data_dir(data_dir, num_partitions)
    except ValueError:
        if owns_ray:
            ray.shutdown()
        raise
    kv_put_json(DEPLOYMENT_KEY, {"num_partitions": num_partitions, "config": cfg.to_properties(),
                                 "data_dir": data_dir}, namespace)
    write_topics(*read_topics_file(data_dir), namespace)  # what was registered before a restart
    cluster = Cluster(namespace, num_partitions, cfg, data_dir, created=True, owns_ray=owns_ray,
                      owns_data_dir=owns_data_dir)
    try:
        node_id = ray.get_runtime_context().get_node_id()
        for p in range(num_partitions):
            create_shard(p, namespace, num_partitions, cfg.to_properties(), data_dir, node_id)
        cluster.wait_ready(READY_TIMEOUT_S)
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


def _check_single_node_data_dir(data_dir: str, num_partitions: int) -> None:
    """The embedded default keeps its partitions directly in ``data_dir``; the descriptor there says how
    many, since another count would route groups to other partitions than their offsets."""
    os.makedirs(data_dir, exist_ok=True)
    descriptor = read_node_descriptor(data_dir)
    if descriptor is None:
        write_node_descriptor(data_dir, "local", num_partitions)
    elif descriptor["num_partitions"] != num_partitions:
        raise ValueError(f"{data_dir} holds a deployment of {descriptor['num_partitions']} partitions; "
                         f"start_local(num_partitions={num_partitions}) would lose its groups' offsets")


class DeploymentNotFound(ValueError):
    """``connect`` found the Ray cluster but no deployment in the namespace."""


def connect(address: str = "auto", namespace: str = DEFAULT_NAMESPACE) -> Cluster:
    """Attach to a running deployment (``deploy``, ``start_local``; on a ``ray up`` cluster, from any
    node or through ``address``). The defaults reach the deployment ``deploy`` makes by default."""
    check_type("address", address, str)
    check_type("namespace", namespace, str)
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    deployment = kv_get_json(DEPLOYMENT_KEY, namespace)
    if deployment is None:
        raise DeploymentNotFound(f"no raygroups deployment in namespace {namespace!r}")
    cfg = CoordinatorConfig.from_properties(deployment["config"])
    replicated = bool(deployment.get("replicated"))
    factory = None
    if replicated:
        factory = ActorFactory(namespace, deployment["num_partitions"], cfg.to_properties(), deployment["data_dir"])
    return Cluster(namespace, deployment["num_partitions"], cfg, deployment["data_dir"], created=False,
                   owns_ray=False, owns_data_dir=False, replicated=replicated, factory=factory)
