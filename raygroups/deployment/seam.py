"""The one seam between raygroups and Ray. Everything Ray-facing of the server side is here: every actor's
name, Ray options, creation and lookup (controller, shards, LogServers, consumer workers); the GCS
key-value entries of a deployment; the resources and labels that place actors. ``start_local``,
``deploy``, ``connect`` and a ``ray up`` deployment (whose head runs ``raygroups deploy``) all go through
it; the controller is handed an ``ActorFactory`` and each shard a ``Directory``, so the actor classes stay
plain classes that unit tests construct directly and that import nothing of this module."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.experimental import internal_kv
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raygroups.actors.log_server import LogServer
from raygroups.actors.shard_actor import CoordinatorShard
from raygroups.coordinator.config import CoordinatorConfig, leadership_lease_s
from raygroups.offsets_log import replica_state
from raygroups.placement.controller import Controller
from raygroups.placement.model import Settings
from raygroups.placement.nodes import COORDINATOR_RESOURCE, NODE_LABEL  # noqa: F401  (re-exported: placement defines them)
from raygroups.placement.spares import Spare, free_spares

# ----------------------------------------------------------------------------------------------
# Names, resources, GCS keys
# ----------------------------------------------------------------------------------------------
CONTROLLER_NAME = "raygroups-controller"
# Ray gives its head node this resource (a new head keeps it, unlike a node id).
HEAD_RESOURCE = "node:__internal_head__"

DEPLOYMENT_KEY = b"raygroups/deployment"
TOPICS_KEY = b"raygroups/topics"
TOPICS_VERSION_KEY = b"raygroups/topics-version"
PARTITIONS_KEY = b"raygroups/partitions"  # the controller's cache of the partition states
DEPLOYMENT_KEYS = (DEPLOYMENT_KEY, TOPICS_KEY, TOPICS_VERSION_KEY, PARTITIONS_KEY)
# Which actor serves a partition when it is not the one named ``shard_name(p)`` (an adopted spare), and,
# the other way, which partition a spare adopted (so that a spare Ray restarts serves it again).
SHARD_ACTOR_KEY_PREFIX = b"raygroups/shard-actor/"
SPARE_BOUND_KEY_PREFIX = b"raygroups/spare-bound/"
SPARE_PREFIX = "raygroups-spare-"
# Each coordinator node's Kafka listener, and where it listens (written by the listener itself).
LISTENER_PREFIX = "raygroups-listener-"
LISTENER_KEY_PREFIX = b"raygroups/listener/"
ADOPT_TIMEOUT_S = 5.0

log = logging.getLogger(__name__)


def add_simulated_node(ray_cluster, name: str):
    """A coordinator node named ``name`` in a ``ray.cluster_utils.Cluster`` (one CPU, like a small host)."""
    return ray_cluster.add_node(num_cpus=1, resources={COORDINATOR_RESOURCE: 1}, labels={NODE_LABEL: name})


def shard_name(partition: int) -> str:
    return f"raygroups-shard-{partition}"


def listener_name(node: str) -> str:
    return f"{LISTENER_PREFIX}{node}"


def listener_key(node: str) -> bytes:
    return LISTENER_KEY_PREFIX + node.encode()


def read_listeners(namespace: str) -> dict[str, dict]:
    """Every node listener's registration (``node_id``, ``host``, ``port``, and its renewal mark:
    ``incarnation``, ``renewal``), by node name."""
    out = {}
    for key in internal_kv._internal_kv_list(LISTENER_KEY_PREFIX, namespace=namespace):
        value = kv_get_json(key, namespace)
        if value is not None:
            out[key[len(LISTENER_KEY_PREFIX):].decode()] = value
    return out


def log_server_name(node: str) -> str:
    return f"raygroups-logserver-{node}"


def new_spare_name(node: str, standby_for: int | None = None, cold: bool = False) -> str:
    """A new spare's name: ``raygroups-spare-<node>-<id>``, and after it ``-p<partition>`` for a spare that
    stands by for one partition only (``shard.standby.per.partition``), or ``-c`` for a cold spare (a
    process ready to adopt any partition, keeping no standby)."""
    tag = "-c" if cold else "" if standby_for is None else f"-p{standby_for}"
    return f"{SPARE_PREFIX}{node}-{uuid.uuid4().hex[:8]}{tag}"


_SPARE_REST = re.compile(r"[0-9a-f]{8}(?:-p(0|[1-9][0-9]*)|(-c))?")


def spare_of(name: str, node: str) -> tuple[bool, int | None, bool]:
    """Whether ``name`` is one of ``node``'s spares (not one of node ``<node>-x``'s: names may have hyphens),
    the partition it stands by for (None: every partition the node follows, or none), and whether it is
    cold."""
    prefix = f"{SPARE_PREFIX}{node}-"
    m = _SPARE_REST.fullmatch(name[len(prefix):]) if name.startswith(prefix) else None
    if m is None:
        return False, None, False
    return True, None if m.group(1) is None else int(m.group(1)), m.group(2) is not None


def is_spare_of(name: str, node: str) -> bool:
    return spare_of(name, node)[0]


def _shard_actor_key(partition: int) -> bytes:
    return SHARD_ACTOR_KEY_PREFIX + str(partition).encode()


def _spare_bound_key(name: str) -> bytes:
    return SPARE_BOUND_KEY_PREFIX + name.encode()


def shard_actor_name(partition: int, namespace: str) -> str:
    """The name of the actor serving ``partition``: an adopted spare's, or ``shard_name(partition)``."""
    raw = kv_get(_shard_actor_key(partition), namespace)
    return shard_name(partition) if raw is None else raw.decode()


def kv_get(key: bytes, namespace: str) -> bytes | None:
    """The deployment's entry ``key`` in the GCS key-value store (scoped by its namespace)."""
    return internal_kv._internal_kv_get(key, namespace=namespace)


def kv_put(key: bytes, value: bytes, namespace: str) -> None:
    internal_kv._internal_kv_put(key, value, overwrite=True, namespace=namespace)


def kv_get_json(key: bytes, namespace: str) -> Any:
    raw = kv_get(key, namespace)
    return None if raw is None else json.loads(raw)


def kv_put_json(key: bytes, value: Any, namespace: str) -> None:
    kv_put(key, json.dumps(value).encode(), namespace)


def kv_delete(key: bytes, namespace: str) -> None:
    internal_kv._internal_kv_del(key, namespace=namespace)


def read_topics(namespace: str) -> dict[str, int]:
    return dict(kv_get_json(TOPICS_KEY, namespace) or {})


def read_topics_versioned(namespace: str) -> tuple[dict[str, int], int]:
    return read_topics(namespace), int(kv_get_json(TOPICS_VERSION_KEY, namespace) or 0)


def write_topics(topics: dict[str, int], version: int, namespace: str) -> None:
    kv_put_json(TOPICS_KEY, topics, namespace)
    kv_put_json(TOPICS_VERSION_KEY, version, namespace)


@dataclass(frozen=True)
class Directory:
    """Finds the actors and metadata of the deployment in ``namespace`` (handed to each shard)."""

    namespace: str

    def shard(self, partition: int):
        return ray.get_actor(shard_actor_name(partition, self.namespace), namespace=self.namespace)

    def spare_binding(self) -> int | None:
        """Called in a spare's constructor: the partition this actor adopted before Ray restarted it."""
        try:
            name = ray.get_runtime_context().get_actor_name()
        except Exception:  # noqa: BLE001 - not an actor: no binding
            return None
        raw = None if not name else kv_get(_spare_bound_key(name), self.namespace)
        return None if raw is None else int(raw)

    def controller(self):
        return ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)

    def log_server(self, node: str):
        return ray.get_actor(log_server_name(node), namespace=self.namespace)

    def listener(self, node: str):
        return ray.get_actor(listener_name(node), namespace=self.namespace)

    def topics(self) -> dict[str, int]:
        """The registered topics cached in the GCS."""
        return read_topics(self.namespace)


# ----------------------------------------------------------------------------------------------
# Ray options and creation
# ----------------------------------------------------------------------------------------------
def shard_actor_options(partition: int, namespace: str, node_id: str | None = None) -> dict[str, Any]:
    options: dict[str, Any] = {
        "name": shard_name(partition),
        "namespace": namespace,
        "lifetime": "detached",
        # A crashed shard process is restarted (re-running __init__, which replays the log) -- on the same
        # node only: it is pinned there, because only that node holds its log.
        "max_restarts": -1,
        # No Ray-level retries: Ray gives no ordering for retried calls; the client retries instead,
        # with requests that carry member id and generation.
        "max_task_retries": 0,
        "max_concurrency": 10_000,
        "num_cpus": 0,
    }
    if node_id is not None:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return options


def create_shard(partition: int, namespace: str, num_partitions: int, config: dict[str, int], data_dir: str,
                 node_id: str, topics: dict[str, int] | None = None):
    """A shard of the single-node embedded default, pinned to the one node whose disk holds its log."""
    cls = ray.remote(CoordinatorShard)
    return cls.options(**shard_actor_options(partition, namespace, node_id)).remote(
        partition, num_partitions, config, data_dir, 0, topics, Directory(namespace),
    )


def placement_options(scheduling: dict[str, Any]) -> dict[str, Any]:
    """Ray options for ``placement.nodes.scheduling_for``'s answer: a label selector, or hard affinity to
    a node id (unlabelled nodes)."""
    if "node_id" in scheduling:
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(scheduling["node_id"], soft=False)}
    return {"label_selector": dict(scheduling["label_selector"])}


def actor_id(handle) -> str:
    return handle._actor_id.hex()


def _actor_info(actor_id_hex: str) -> dict:
    """Ray's actor table entry of an actor, read from the GCS (works without the dashboard); empty if Ray
    does not know it or the GCS does not answer."""
    from ray._private.state import state

    try:
        return state.actor_table(actor_id_hex) or {}
    except Exception:  # noqa: BLE001 - unknown or unreachable: the callers treat it as unknown
        return {}


def actor_state(actor_id_hex: str) -> str | None:
    """Ray's state of an actor (``PENDING_CREATION``, ``ALIVE``, ``RESTARTING``, ``DEAD``, ...); None if Ray
    does not know it."""
    return _actor_info(actor_id_hex).get("State")


def actor_node_id(actor_id_hex: str) -> str | None:
    """The Ray node id an actor last ran on (Ray's actor table keeps it while Ray restarts the actor, which
    for an actor pinned to its node's label waits for that node); None if unknown or never placed."""
    node_id = (_actor_info(actor_id_hex).get("Address") or {}).get("NodeID")
    return node_id if node_id and node_id.strip("0") else None


def create_worker(cls: type, namespace: str, *args: Any, resources: dict[str, float] | None = None):
    """A consumer worker actor: threaded (its loop blocks in one thread while ``stats``/``stop`` are served
    by others), no CPU reservation so that many fit on a small machine, not restarted by Ray (a dead
    consumer is the group's business: its partitions move after the session timeout). ``resources``
    places it (a simulated cluster keeps consumers off the coordinator nodes it kills)."""
    options: dict[str, Any] = {"namespace": namespace, "max_concurrency": 4, "num_cpus": 0, "max_restarts": 0}
    if resources:
        options["resources"] = resources
    return ray.remote(cls).options(**options).remote(*args)


def ensure_controller(namespace: str, settings: Settings, factory: ActorFactory):
    """The controller actor of ``namespace``, created if none runs: detached, restarted by Ray on a crash,
    on the head node (the GCS lives there: losing the head is losing the cluster anyway; losing a
    coordinator node must not take the controller with it). It keeps nothing on disk of its own: a
    restart rebuilds from the GCS cache, or, after a head restart, from the coordinator nodes' disks."""
    options: dict[str, Any] = {
        "name": CONTROLLER_NAME, "namespace": namespace, "lifetime": "detached", "get_if_exists": True,
        "max_restarts": -1, "max_task_retries": 0, "max_concurrency": 1_000, "num_cpus": 0,
        "resources": {HEAD_RESOURCE: 0.001},
    }
    return ray.remote(Controller).options(**options).remote(namespace, settings, factory)


@dataclass(frozen=True)
class ActorFactory:
    """Creates and finds the actors of a replicated deployment; handed to the controller (which must not
    import actor classes). Every LogServer and shard actor is placed on its node by the node's stable
    name (``placement.nodes.scheduling_for``): a crashed process restarts there, a node that comes back
    under its name gets its actors back, and a dead node's partitions are moved by the controller to a
    node that holds their logs -- never by Ray to a node that does not.

    Spares are shard processes started unbound (named ``raygroups-spare-<node>-<id>``, ``-p<partition>``
    after it for one standing by for one partition); one that adopts a partition becomes its actor,
    recorded in the GCS for everyone who looks a shard up. Which spares a node keeps and which adopts a
    partition is decided in ``placement.spares`` and performed by the controller's
    ``placement.spare_keeper.SpareKeeper``: here they are only listed, created, asked to adopt and
    killed."""

    namespace: str
    num_partitions: int
    config: dict
    data_root: str
    # Each coordinator node's Kafka listener: ``{"cls": the actor class, "kwargs": its arguments}`` (handed
    # in by ``deploy``, which knows the gateway), or None for none.
    listener: dict | None = None
    # The controller's record of which actor serves each partition (the controller alone changes it).
    _names: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def directory(self) -> Directory:
        return Directory(self.namespace)

    def node_dir(self, node: str) -> str:
        # Each coordinator node has its own disk; on a simulated cluster, its own directory.
        return replica_state.node_dir(self.data_root, node)

    def create_log_server(self, node: str, scheduling: dict[str, Any]):
        options = {"name": log_server_name(node), "namespace": self.namespace, "lifetime": "detached",
                   "max_restarts": -1, "max_task_retries": 0, "max_concurrency": 1_000, "num_cpus": 0,
                   **placement_options(scheduling)}
        segment_bytes = self.config.get("offsets.topic.segment.bytes", 100 * 1024 * 1024)
        fsync = self.config.get("log.flush.interval.ms", 0) or None
        # A restarted server forgot the leadership holds it gave: it keeps every partition held for a lease.
        hold_guard_s = leadership_lease_s(self.config.get("shard.session.timeout.ms",
                                                          CoordinatorConfig().shard_session_timeout_ms))
        return ray.remote(LogServer).options(**options).remote(node, self.node_dir(node), segment_bytes, fsync,
                                                               self.num_partitions,
                                                               self.config.get("min.insync.replicas"),
                                                               hold_guard_s=hold_guard_s, namespace=self.namespace)

    def log_server(self, node: str):
        return self.directory.log_server(node)

    def ensure_log_server(self, node: str, scheduling: dict[str, Any]):
        """The node's LogServer, created if it does not exist (two callers racing: one wins, both get it)."""
        for _ in range(100):
            try:
                return self.log_server(node)
            except ValueError:
                pass
            try:
                return self.create_log_server(node, scheduling)
            except ValueError:  # created by someone else in between, or its old name not yet released
                time.sleep(0.05)
        return self.log_server(node)

    def ensure_listener(self, node: str, scheduling: dict[str, Any]) -> bool:
        """The node's Kafka listener, created if the deployment has them and it does not exist; True if
        created. Detached and restarted by Ray on its node, like the LogServer."""
        if self.listener is None:
            return False
        name = listener_name(node)
        try:
            ray.get_actor(name, namespace=self.namespace)
            return False
        except ValueError:
            pass
        options = {"name": name, "namespace": self.namespace, "lifetime": "detached", "max_restarts": -1,
                   "max_task_retries": 0, "max_concurrency": 16, "num_cpus": 0, **placement_options(scheduling)}
        try:
            ray.remote(self.listener["cls"]).options(**options).remote(
                self.namespace, node, self.num_partitions, self.config, **self.listener["kwargs"])
        except ValueError:  # created by someone else in between
            return False
        return True

    def stop_listeners(self) -> None:
        """Kill every node listener of the deployment and remove their registrations (shutdown)."""
        for a in ray.util.list_named_actors(all_namespaces=True):
            if a["namespace"] == self.namespace and a["name"].startswith(LISTENER_PREFIX):
                self._kill_named(a["name"])
        for key in internal_kv._internal_kv_list(LISTENER_KEY_PREFIX, namespace=self.namespace):
            kv_delete(key, self.namespace)

    @property
    def standby_per_partition(self) -> bool:
        config = CoordinatorConfig.from_properties(self.config)
        return config.shard_standby_enable and config.shard_standby_per_partition

    @property
    def cold_spares(self) -> int:
        return CoordinatorConfig.from_properties(self.config).shard_cold_spares

    @property
    def cold_spares_max(self) -> int:
        return CoordinatorConfig.from_properties(self.config).shard_cold_spares_max

    def create_shard(self, partition: int | None, node: str, scheduling: dict[str, Any],
                     standby_for: int | None = None, cold: bool = False):
        """The shard of ``partition`` on ``node``, or (``None``) a spare for that node: one standing by for
        every partition the node follows, or (``standby_for``) for that partition only, or (``cold``) for
        none."""
        options = {**shard_actor_options(0 if partition is None else partition, self.namespace),
                   **placement_options(scheduling)}
        if partition is None:
            options["name"] = new_spare_name(node, standby_for, cold)
        return ray.remote(CoordinatorShard).options(**options).remote(
            partition, self.num_partitions, self.config, self.node_dir(node), 0, None, self.directory, True, node,
            standby_for=standby_for, cold=cold,
        )

    def _shard_name(self, partition: int) -> str:
        name = self._names.get(partition)
        if name is None:
            name = self._names[partition] = shard_actor_name(partition, self.namespace)
        return name

    def _set_shard_name(self, partition: int, name: str) -> None:
        if name == shard_name(partition):
            kv_delete(_shard_actor_key(partition), self.namespace)
        else:
            kv_put(_shard_actor_key(partition), name.encode(), self.namespace)
        self._names[partition] = name

    def shard(self, partition: int):
        return ray.get_actor(self._shard_name(partition), namespace=self.namespace)

    def kill_shard(self, partition: int) -> None:
        name = self._shard_name(partition)
        self._kill_named(name)
        if name != shard_name(partition):
            kv_delete(_spare_bound_key(name), self.namespace)

    def _kill_named(self, name: str) -> None:
        """Kill the deployment's actor ``name`` for good, if it exists."""
        try:
            ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)
        except ValueError:
            pass

    def list_spares(self, node: str) -> list[Spare]:
        """``node``'s spares (starting ones included): the partition each stands by for, the one it was
        recorded as adopting, and whether it serves one (recorded as a partition's actor; one bound to a
        partition whose actor is another, a controller stopped between the two entries, serves none)."""
        recorded = set(self._names.values())
        out = []
        for a in ray.util.list_named_actors(all_namespaces=True):
            name = a["name"]
            mine, standby_for, cold = spare_of(name, node)
            if a["namespace"] != self.namespace or not mine:
                continue
            raw = kv_get(_spare_bound_key(name), self.namespace)
            bound = None if raw is None else int(raw)
            serving = name in recorded or (bound is not None and shard_actor_name(bound, self.namespace) == name)
            out.append(Spare(name, standby_for, bound, serving, cold))
        return out

    def free_spare_names(self, node: str) -> list[str]:
        return [s.name for s in free_spares(self.list_spares(node))]

    def adopt(self, partition: int, name: str) -> tuple[Any, str]:
        """Ask the spare ``name`` to adopt ``partition``, its name recorded first (so that the controller
        knows it as the partition's shard when it asks for its epoch): ``(handle, "adopted")``; ``(None,
        "gone")`` if it no longer exists, ``(None, "starting")`` if it does not run yet (nothing done), ``(None,
        "failed")`` if it did not adopt (then it is killed and the records undone)."""
        try:
            handle = ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            return None, "gone"
        if actor_state(actor_id(handle)) != "ALIVE":
            return None, "starting"
        kv_put(_spare_bound_key(name), str(partition).encode(), self.namespace)
        self._set_shard_name(partition, name)
        try:
            if ray.get(handle.adopt.remote(partition), timeout=ADOPT_TIMEOUT_S):
                return handle, "adopted"
        except (ray.exceptions.RayError, TimeoutError) as e:
            log.warning("spare %s did not adopt partition %d: %s", name, partition, e)
        ray.kill(handle, no_restart=True)
        kv_delete(_spare_bound_key(name), self.namespace)
        self._set_shard_name(partition, shard_name(partition))
        return None, "failed"

    def start_shard(self, partition: int, node: str, scheduling: dict[str, Any], timeout_s: float = 10.0):
        """A new shard actor of ``partition`` on ``node``, under the partition's own name (its predecessor
        killed: the name is released asynchronously, so this retries until ``timeout_s``)."""
        self._set_shard_name(partition, shard_name(partition))
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.create_shard(partition, node, scheduling)
            except ValueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def create_spare(self, node: str, scheduling: dict[str, Any], standby_for: int | None = None,
                     cold: bool = False):
        return self.create_shard(None, node, scheduling, standby_for, cold)

    def kill_spare(self, name: str) -> None:
        self._kill_named(name)

    def standbys(self, node: str, timeout_s: float = 10) -> dict[str, dict]:
        """``standby_status()`` of each of ``node``'s running spares that keeps a standby, by name."""
        refs = {}
        for name in self.free_spare_names(node):
            try:
                handle = ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                continue
            if actor_state(actor_id(handle)) == "ALIVE":
                refs[name] = handle.standby_status.remote()
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
        out = {}
        for name, ref in refs.items():
            if ref in ready:
                try:
                    status = ray.get(ref, timeout=0)
                except ray.exceptions.RayError:
                    continue
                if status is not None:
                    out[name] = status
        return out

    def stop_spares(self) -> None:
        """Kill every spare of the deployment and forget which partitions spares serve (shutdown)."""
        for a in ray.util.list_named_actors(all_namespaces=True):
            if a["namespace"] == self.namespace and a["name"].startswith(SPARE_PREFIX):
                self._kill_named(a["name"])
        for prefix in (SHARD_ACTOR_KEY_PREFIX, SPARE_BOUND_KEY_PREFIX):
            for key in internal_kv._internal_kv_list(prefix, namespace=self.namespace):
                kv_delete(key, self.namespace)
        self._names.clear()

    @staticmethod
    def ray_nodes() -> list[dict]:
        """Ray's node table (every node Ray has known, dead incarnations included)."""
        return ray.nodes()

    def load_partitions(self) -> bytes | None:
        """The controller's cache of the partition states in the GCS (None after a head restart)."""
        return kv_get(PARTITIONS_KEY, self.namespace)

    def store_partitions(self, value: bytes) -> None:
        kv_put(PARTITIONS_KEY, value, self.namespace)

    def read_topics(self) -> tuple[dict[str, int], int]:
        """The registered topics cached in the GCS, and their version."""
        return read_topics_versioned(self.namespace)

    def write_topics(self, topics: dict[str, int], version: int) -> None:
        write_topics(topics, version, self.namespace)

    actor_id = staticmethod(actor_id)
    actor_state = staticmethod(actor_state)
    actor_node_id = staticmethod(actor_node_id)
