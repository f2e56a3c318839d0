"""The handle on a deployment (``Cluster``); ``raygroups.deployment.start`` makes one (``start_local``,
``deploy``, ``connect``).

A deployment is one Ray namespace holding one detached ``CoordinatorShard`` actor per
``__consumer_offsets`` partition, plus its description (partition count, config, data directory) and
topic metadata in Ray's GCS key-value store, so that ``connect`` and restarted shards find them. A
replicated deployment adds the controller and one ``LogServer`` per coordinator node; its nodes are
named by their stable names (``placement.nodes``).
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from raygroups.client.ray_client import RayGroupClient
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.messages import check_int, check_type
from raygroups.deployment.seam import (
    DEPLOYMENT_KEYS,
    NODE_LABEL,
    Directory,
    actor_id,
    actor_state,
    add_simulated_node,
    kv_delete,
    read_topics,
    read_topics_versioned,
    write_topics,
)
from raygroups.offsets_log.replica_state import (
    write_topics_file,
)
from raygroups.placement.nodes import validate_node_name

READY_TIMEOUT_S = 180
DEFAULT_NAMESPACE = "raygroups"


class Cluster:
    """A handle on a deployment. ``shutdown()`` removes every actor of a deployment this handle created
    or resumed (``start_local``, ``deploy``; detached ones included; the data directories stay unless
    ``start_local`` made a temporary one) and the Ray instance it started; a handle from ``connect``
    only detaches."""

    def __init__(self, namespace: str, num_partitions: int, config: CoordinatorConfig, data_dir: str,
                 created: bool, owns_ray: bool, owns_data_dir: bool, replicated: bool = False,
                 factory: Any = None) -> None:
        self.namespace = namespace
        self.replicated = replicated
        self._factory = factory
        # A simulated multi-node cluster (ray.cluster_utils.Cluster) and its coordinator nodes by name.
        self._ray_cluster: Any = None
        self._sim_nodes: dict[str, Any] = {}
        self._sim_names: list[str] = []
        self._gcs_dir: str | None = None  # the simulated head's GCS storage (a temporary directory)
        # Where consumer actors go: on a simulated cluster, the head node, which is never killed.
        self.consumer_resources: dict[str, float] | None = None
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
        """The shard actor of ``partition``, looked up by name (so never a handle a failover replaced)."""
        check_int("partition", partition, 0, self.num_partitions - 1)
        return Directory(self.namespace).shard(partition)

    def shard_status(self, timeout_s: float = 30) -> list[dict]:
        """Each shard's ``status()``, waiting at most ``timeout_s`` in all; a shard that cannot answer by
        then (being started or restarted, dead) shows as UNAVAILABLE."""
        refs: dict[int, Any] = {}
        for p in range(self.num_partitions):
            try:
                refs[p] = self.shard(p).status.remote()
            except ValueError:
                pass
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
        done = set(ready)
        out = []
        for p in range(self.num_partitions):
            status = None
            if p in refs and refs[p] in done:
                try:
                    status = ray.get(refs[p], timeout=0)
                except (ray.exceptions.RayError, TimeoutError):
                    status = None
            out.append(status or {"partition": p, "state": "UNAVAILABLE", "pid": None, "leader_epoch": None,
                                  "node": None})
        return out

    def standby_status(self, node: str, timeout_s: float = 10) -> dict[str, dict]:
        """The hot standbys of ``node``'s running spares (replicated deployments), by spare name: the
        partition each stands by for (None: every partition the node follows) and how far it has read."""
        if not self.replicated:
            raise ValueError("hot standbys are kept on a replicated deployment's nodes only")
        return self._factory.standbys(node, timeout_s)

    def kill_shard(self, partition: int) -> None:
        """Kill a shard's process the way a crash would; Ray restarts it (on its node) and it replays its log."""
        ray.kill(self.shard(partition), no_restart=False)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Return once every partition is served by an ACTIVE shard (its leader's, on a replicated
        deployment); TimeoutError naming what the deployment still waits for otherwise. Actors are looked
        up by name on every attempt: one the controller replaced meanwhile is never waited on."""
        check_type("timeout_s", timeout_s, (int, float))
        deadline = time.monotonic() + timeout_s
        waiting = "the first look"
        while True:
            if self.replicated:
                try:
                    r = ray.get(self._controller().readiness.remote(), timeout=10)
                    waiting = r["waiting_for"]
                    ready = r["ready"]
                except (ray.exceptions.RayError, ValueError) as e:
                    waiting, ready = f"the controller ({type(e).__name__})", False
            else:
                ready, waiting = True, None
            if ready:
                statuses = self.shard_status(timeout_s=10)
                failed = [s for s in statuses if s.get("load_error")]
                if failed and not self.replicated:
                    raise RuntimeError(f"shards failed to load: {failed}")
                if all(s["state"] == "ACTIVE" for s in statuses):
                    return
                waiting = "shards " + ", ".join(str(s["partition"]) for s in statuses if s["state"] != "ACTIVE")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the deployment in namespace {self.namespace!r} is not ready after "
                                   f"{timeout_s:g} s; waiting for {waiting}")
            time.sleep(0.2)

    # --- replicated deployments ----------------------------------------------------------------------
    def _controller(self):
        if not self.replicated:
            raise RuntimeError("this deployment is not replicated (raygroups.deploy or start_local(num_nodes=...) "
                               "makes one)")
        return Directory(self.namespace).controller()

    def nodes(self, timeout_s: float = 30) -> dict[str, dict]:
        """Every coordinator node the deployment knows, by stable name: ``alive``, ``node_id`` (Ray's id of
        its current incarnation), ``labelled``, ``refused`` (why its disk is not used, or None)."""
        if not self.replicated:
            return {}
        return ray.get(self._controller().nodes.remote(), timeout=timeout_s)

    def coordinator_nodes(self) -> list[str]:
        """The stable names of the alive coordinator nodes (``raygroups.io/node`` labels)."""
        return sorted(n for n, info in self.nodes().items() if info["alive"] and not info["refused"])

    def partition_state(self, partition: int, timeout_s: float = 30) -> dict:
        """``{"replicas", "leader", "leader_epoch", "isr", "partition_epoch"}`` of one partition, nodes named
        by their stable names (None until the partition exists or is recovered)."""
        check_int("partition", partition, 0, self.num_partitions - 1)
        return ray.get(self._controller().partition_state.remote(partition), timeout=timeout_s)

    def partition_metadata(self, timeout_s: float = 30) -> dict[int, dict]:
        """Every partition's ``partition_state`` at once, as the controller holds it."""
        meta = ray.get(self._controller().metadata.remote(), timeout=timeout_s)
        return {int(p): a for p, a in meta.items()}

    def partition_leaders(self) -> dict[int, str | None]:
        meta = ray.get(self._controller().metadata.remote(), timeout=30)
        return {int(p): a["leader"] for p, a in meta.items()}

    def controller_events(self) -> list[dict]:
        return ray.get(self._controller().recent_events.remote(), timeout=30)

    def readiness(self) -> dict:
        return ray.get(self._controller().readiness.remote(), timeout=30)

    def replica_records(self, partition: int, node: str, up_to_offset: int | None = None) -> list:
        """The records of one replica of ``partition`` (the leader's log or a follower's)."""
        state = self.partition_state(partition)
        if node == state["leader"]:
            return ray.get(self.shard(partition).replica_records.remote(up_to_offset), timeout=60)
        return ray.get(self._factory.log_server(node).records.remote(partition, up_to_offset), timeout=60)

    # --- simulated clusters --------------------------------------------------------------------------
    def _simulated(self, what: str):
        if self._ray_cluster is None:
            raise RuntimeError(f"{what} needs a simulated cluster: start_local(num_nodes=...)")
        return self._ray_cluster

    def kill_node(self, name: str, graceful: bool = False) -> None:
        """Simulated clusters only: stop coordinator node ``name`` (``graceful=False``: its raylet is killed,
        as a crash would). Its data directory stays; ``restart_node(name)`` brings it back."""
        rc = self._simulated("kill_node()")
        node = self._sim_nodes.pop(self._known_name(name), None)
        if node is None:
            raise ValueError(f"node {name!r} is not running (restart_node({name!r}) starts it again)")
        rc.remove_node(node, allow_graceful=graceful)

    def restart_node(self, name: str, timeout_s: float = 120) -> None:
        """Simulated clusters only: (stop, if it runs, and) start coordinator node ``name`` again under the
        same name and data directory; returns once Ray reports it alive. Like a rebooted host, it comes
        back only after Ray declared its previous incarnation dead."""
        rc = self._simulated("restart_node()")
        name = self._known_name(name)
        if name in self._sim_nodes:
            self.kill_node(name)
        deadline = time.monotonic() + timeout_s
        while any(n.get("Alive") and (n.get("Labels") or {}).get(NODE_LABEL) == name for n in ray.nodes()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"Ray did not declare node {name!r} dead within {timeout_s:g} s")
            time.sleep(0.1)
        self._sim_nodes[name] = add_simulated_node(rc, name)

    def add_node(self, name: str | None = None) -> str:
        """Simulated clusters only: add a new coordinator node (``node-<k>`` unless named); returns its name."""
        rc = self._simulated("add_node()")
        if name is None:
            name = f"node-{len(self._sim_names)}"
        validate_node_name(name)
        if name in self._sim_names:
            raise ValueError(f"node {name!r} already exists in this cluster; restart_node({name!r}) restarts it")
        self._sim_names.append(name)
        self._sim_nodes[name] = add_simulated_node(rc, name)
        return name

    def restart_head(self, down_s: float, while_down: Callable[[], object] | None = None) -> dict:
        """Simulated clusters only: what losing the head takes from a deployment, and its return. The head's
        GCS process and the controller's process are killed (SIGKILL), stay down ``down_s`` seconds, then
        the GCS starts again from its storage (``gcs_storage=rocksdb``) and Ray restarts the controller.
        Meanwhile the coordinator nodes' shards keep serving the clients connected to them (their in-sync
        followers hold their leaderships, ``LogServer.hold_leadership``); nothing needing the GCS (a new
        actor, a failover, a lookup of an actor by name) happens until it is back. ``while_down`` is called
        once the head is down; the GCS starts again when it returned and ``down_s`` passed. Returns
        ``{"down_s", "gcs_back_s"}``: seconds from the kill to the GCS's start, and to its process running."""
        rc = self._simulated("restart_head()")
        if not isinstance(down_s, int | float) or isinstance(down_s, bool) or not 0 <= down_s <= 50:
            raise ValueError(f"down_s must be between 0 and 50 s (Ray's raylets give up on a GCS away for "
                             f"gcs_rpc_server_reconnect_timeout_s), got {down_s!r}")
        pid = ray.get(self._controller().__ray_call__.remote(lambda _self: os.getpid()), timeout=30)
        head = rc.head_node
        start = time.monotonic()
        head.kill_gcs_server()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            if while_down is not None:
                while_down()
            time.sleep(max(0.0, start + down_s - time.monotonic()))
        finally:  # whatever ``while_down`` raised, the head comes back
            back = time.monotonic()
            head.start_gcs_server()
        return {"down_s": round(back - start, 3), "gcs_back_s": round(time.monotonic() - start, 3)}

    def _known_name(self, name: str) -> str:
        check_type("name", name, str)
        if name not in self._sim_names:
            raise ValueError(f"{name!r} is not a coordinator node of this cluster (its nodes: {self._sim_names})")
        return name

    def node_pid_for_testing(self, name: str) -> int:
        return self._sim_nodes[self._known_name(name)].all_processes["raylet"][0].process.pid

    # --- topic metadata --------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int) -> None:
        """Register a topic; commits to unregistered topics or partitions answer UNKNOWN_TOPIC_OR_PARTITION.
        Registered topics are kept with the data (the coordinator nodes' disks, or the embedded default's
        data directory), so they survive a full restart."""
        check_type("name", name, str)
        if not name or len(name) > 249:
            raise ValueError(f"topic name must be 1..249 characters, got {len(name)}")
        check_int("partitions", partitions, 1, 1_000_000)
        topics, version = read_topics_versioned(self.namespace)
        if name in topics and topics[name] > partitions:
            raise ValueError(f"topic {name!r} already has {topics[name]} partitions; cannot shrink to {partitions}")
        if self.replicated:
            try:
                topics = ray.get(self._controller().register_topics.remote({name: partitions}), timeout=60)
            except ray.exceptions.RayTaskError as e:
                raise RuntimeError(str(e.cause)) from None
        else:
            topics[name] = partitions
            write_topics_file(self.data_dir, topics, version + 1)
            write_topics(topics, version + 1, self.namespace)
        self._push_topics(topics)

    def _push_topics(self, topics: dict[str, int], timeout_s: float = 60) -> None:
        """Hand the registered topics to every partition's shard. A shard replaced meanwhile (a leadership
        move, a failover) is asked again under its name: its successor read the registry when it started,
        but may have read it just before this registration."""
        deadline = time.monotonic() + timeout_s
        pending = set(range(self.num_partitions))
        while pending:
            refs = {}
            for p in sorted(pending):
                try:
                    refs[p] = self.shard(p).set_topics.remote(topics)
                except ValueError:  # between two actors under its name: asked again below
                    continue
            for p, ref in refs.items():
                try:
                    ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
                    pending.discard(p)
                except ray.exceptions.RayActorError:
                    pass
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"partitions {sorted(pending)} did not take the new topics in {timeout_s:g} s")
            if pending:
                time.sleep(0.2)

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
            node_names = self._stop_controller()
            self._stop_shards()
            if self.replicated:
                self._factory.stop_listeners()
                self._stop_log_servers(node_names)
            for key in DEPLOYMENT_KEYS:
                kv_delete(key, self.namespace)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        if self._ray_cluster is not None:
            self._ray_cluster.shutdown()
        if self._gcs_dir is not None:
            shutil.rmtree(self._gcs_dir, ignore_errors=True)
        if self._owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _stop_controller(self) -> set[str]:
        """Stop the controller first, so that it restarts nothing; the nodes it knew."""
        if not self.replicated:
            return set()
        names = set(self._sim_names)
        try:
            controller = self._controller()
        except ValueError:
            return names
        try:
            names |= set(ray.get(controller.nodes.remote(), timeout=10))
        except (ray.exceptions.RayError, TimeoutError):
            pass
        ray.kill(controller, no_restart=True)
        # Wait for it to be gone: a kill returns at once, and a controller still running could start a
        # spare after ``_stop_shards`` has listed them.
        deadline = time.monotonic() + 10
        while actor_state(actor_id(controller)) not in ("DEAD", None) and time.monotonic() < deadline:
            time.sleep(0.05)
        return names

    def _stop_shards(self) -> None:
        handles = []
        for p in range(self.num_partitions):
            try:
                handles.append(self.shard(p))
            except ValueError:
                continue
        # Close what answers (a shard pending on a dead node never will), then kill them all.
        ray.wait([h.close.remote() for h in handles], num_returns=len(handles), timeout=30)
        for h in handles:
            ray.kill(h, no_restart=True)
        if self.replicated:
            self._factory.stop_spares()

    def _stop_log_servers(self, names: set[str]) -> None:
        handles = []
        for name in sorted(names):
            try:
                handles.append(self._factory.log_server(name))
            except ValueError:
                continue
        ray.wait([h.close.remote() for h in handles], num_returns=len(handles), timeout=10)
        for h in handles:
            ray.kill(h, no_restart=True)
