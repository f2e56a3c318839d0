"""A Kafka listener on each coordinator node of a replicated deployment, as every Kafka broker has one.

``NodeListener`` is a plain class that the deployment's ``ActorFactory`` makes a detached actor on its node
(like Ray Serve's per-node ``ProxyActor``); the controller starts one with each node's first report.
Every listener registers where clients reach it (``advertised_host``: Kafka's ``advertised.listeners``;
by default the address it listens on, or the node's IP if that is a wildcard) and renews that every
``REFRESH_S``; Metadata lists as the brokers the listeners whose renewals a listener has seen within the
last ``LISTENER_STALE_S`` seconds of its own clock (no two hosts' clocks are compared), FindCoordinator answers the listener of the node whose shard
leads the group's ``__consumer_offsets`` partition, and a listener answers NOT_COORDINATOR for a group
whose partition its node does not lead. So a failover reaches clients as it does with Kafka: their
coordinator stops answering or answers NOT_COORDINATOR, they ask FindCoordinator again and go to the new
leader's listener. What the listeners know of the deployment (registrations, partition leaders) is read
on a thread every ``REFRESH_S`` and never on the event loop.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import secrets
import threading
import time
import zlib
from typing import Any

import ray

from raygroups.client.ray_client import RayGroupClient
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.partitioning import partition_for
from raygroups.deployment.seam import (
    Directory,
    kv_delete,
    kv_put_json,
    listener_key,
    read_listeners,
    read_topics,
)
from raygroups.gateway.broker import Broker
from raygroups.gateway.server import GatewayLimits, Listener
from raygroups.gateway.topology import BrokerAddress
from raygroups.sources import load_source

log = logging.getLogger("raygroups.gateway")

REFRESH_S = 0.5
LISTENER_STALE_S = 5.0
BIND_RETRY_S = 5.0  # how often a node listener that cannot listen (its port taken) tries again
# How long a listener's group client retries a retriable coordinator error before the Kafka client sees it
# (then it asks FindCoordinator again, as it does with Kafka).
GATEWAY_RETRY_MS = 2_000


def is_wildcard(host: str) -> bool:
    """Whether a listen host means every address of the machine (``""``, ``0.0.0.0``, ``::``)."""
    if host == "":
        return True
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def node_id_of(node: str) -> int:
    """A stable Kafka broker id for a coordinator node name."""
    return zlib.crc32(node.encode()) & 0x7FFF_FFFF


def parse_listen(value: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (``[v6]:PORT`` for IPv6) -> (host, port); ValueError naming what is wrong."""
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(f"a listener address must be HOST:PORT, got {value!r}")
    host, _, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port.isdigit() or not 0 <= int(port) <= 65_535:
        raise ValueError(f"the port of listener address {value!r} must be 0..65535")
    return host, int(port)


class RenewalWatch:
    """Which registrations are live, judged on this process's monotonic clock: one is live while its
    renewal mark (the registering incarnation and its renewal count) changed within ``LISTENER_STALE_S`` of
    the watcher's clock. A mark seen for the first time is not evidence of life (a dead node's
    registration stays behind): it counts once it changes, a renewal later. As Kafka's broker liveness goes
    by heartbeats received (``BrokerHeartbeatManager``), never by comparing timestamps written on other
    hosts."""

    def __init__(self) -> None:
        # node -> (renewal mark, when this watcher saw it, whether it has seen the mark change)
        self._seen: dict[str, tuple[Any, float, bool]] = {}

    def live(self, registrations: dict[str, dict], now: float | None = None) -> dict[str, dict]:
        now = time.monotonic() if now is None else now
        out = {}
        for name, r in registrations.items():
            mark = (r.get("incarnation"), r.get("renewal"))
            seen = self._seen.get(name)
            if seen is None:
                seen = self._seen[name] = (mark, now, False)
            elif seen[0] != mark:
                seen = self._seen[name] = (mark, now, True)
            if seen[2] and now - seen[1] <= LISTENER_STALE_S:
                out[name] = r
        for name in self._seen.keys() - registrations.keys():
            del self._seen[name]
        return out


def answering_listeners(namespace: str, timeout_s: float = 2.0) -> dict[str, str]:
    """The node listeners that answer their actor within ``timeout_s`` and listen: node name ->
    ``"host:port"`` clients reach it at (for a one-off look, which has no renewals to watch)."""
    asked = {}
    directory = Directory(namespace)
    for node in read_listeners(namespace):
        try:
            asked[node] = directory.listener(node).status.remote()
        except ValueError:  # registered, but its actor is gone (the deployment is stopping)
            continue
    ready, _ = ray.wait(list(asked.values()), num_returns=len(asked), timeout=timeout_s)
    out = {}
    for node, ref in asked.items():
        if ref not in ready:
            continue
        try:
            status = ray.get(ref)
        except ray.exceptions.RayError:
            continue
        if status["error"] is None and status["bootstrap"]:
            out[node] = status["bootstrap"]
    return out


class Deployment:
    """What a ``Broker`` needs of the deployment: its group API and its registered topics."""

    def __init__(self, client: Any, namespace: str) -> None:
        self._client = client
        self._namespace = namespace

    def client(self) -> Any:
        return self._client

    def topics(self) -> dict[str, int]:
        return read_topics(self._namespace)


class NodeTopology:
    """This node's place among the deployment's listeners, from a snapshot refreshed on a thread."""

    def __init__(self, namespace: str, node: str, num_partitions: int) -> None:
        self.namespace = namespace
        self.node = node
        self.num_partitions = num_partitions
        self.address: BrokerAddress | None = None
        self._brokers: dict[str, BrokerAddress] = {}
        self._leaders: dict[int, str | None] = {}
        self._watch = RenewalWatch()
        self._incarnation = secrets.token_hex(8)
        self._renewal = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresh_loop, name="raygroups-listener-refresh", daemon=True)

    def start(self, address: BrokerAddress) -> None:
        self.address = address
        self._refresh()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _refresh_loop(self) -> None:
        while not self._stop.wait(REFRESH_S):
            try:
                self._refresh()
            except Exception as e:  # noqa: BLE001 - the snapshot stays as it was until the next try
                log.debug("listener refresh failed: %s", e)

    def _refresh(self) -> None:
        a = self.address
        self._renewal += 1
        kv_put_json(listener_key(self.node), {"node_id": a.node_id, "host": a.host, "port": a.port,
                                              "incarnation": self._incarnation, "renewal": self._renewal},
                    self.namespace)
        live = self._watch.live(read_listeners(self.namespace))
        live.setdefault(self.node, {"node_id": a.node_id, "host": a.host, "port": a.port})
        self._brokers = {name: BrokerAddress(r["node_id"], r["host"], r["port"]) for name, r in live.items()}
        try:
            meta = ray.get(Directory(self.namespace).controller().metadata.remote(), timeout=2)
            self._leaders = {int(p): m["leader"] for p, m in meta.items()}
        except (ray.exceptions.RayError, ValueError, TimeoutError) as e:
            log.debug("partition leaders unknown for now: %s", e)

    # --- Topology --------------------------------------------------------------------------------------
    def brokers(self) -> list[BrokerAddress]:
        return sorted(self._brokers.values(), key=lambda b: b.node_id)

    def controller_id(self) -> int:
        return min((b.node_id for b in self._brokers.values()), default=self.address.node_id)

    def leader_of(self, topic: str, partition: int) -> int:
        # Any listener serves any topic partition (the source is read-only): spread them over the brokers.
        brokers = self.brokers()
        return brokers[zlib.crc32(f"{topic}/{partition}".encode()) % len(brokers)].node_id

    def _leader_node(self, group_id: str) -> str | None:
        return self._leaders.get(partition_for(group_id, self.num_partitions))

    def serves_group(self, group_id: str) -> bool:
        return self._leader_node(group_id) == self.node

    async def find_coordinator(self, group_id: str) -> dict:
        leader = self._leader_node(group_id)
        b = None if leader is None else self._brokers.get(leader)
        if b is None:
            return {"error_code": Errors.COORDINATOR_NOT_AVAILABLE,
                    "error_message": "the group's coordinator partition has no leader with a listener now"}
        return {"error_code": Errors.NONE, "node_id": b.node_id, "host": b.host, "port": b.port}


class NodeListener:
    """The Kafka listener of one coordinator node (a Ray actor; see the module docstring). If it cannot
    listen (the port is taken), it says so in its log and ``status()``, stays up (so that Ray does not
    restart it in a loop) and tries again every ``BIND_RETRY_S`` until it listens."""

    def __init__(self, namespace: str, node: str, num_partitions: int, config: dict, listen: str,
                 advertised_host: str | None = None, source: str | None = None) -> None:
        self.node = node
        self.error: str | None = None
        self._namespace = namespace
        self._listen = listen
        self._advertised_host = advertised_host
        self._lock = threading.Lock()
        self._listener: Listener | None = None
        cfg = dataclasses.replace(CoordinatorConfig.from_properties(config), request_timeout_ms=GATEWAY_RETRY_MS)
        self._client = RayGroupClient(namespace, num_partitions, cfg)
        self.topology = NodeTopology(namespace, node, num_partitions)
        self._limits = GatewayLimits()
        self._broker = Broker(Deployment(self._client, namespace), load_source(source) if source else None,
                              self.topology, f"raygroups-{namespace}", self._limits.fetch_max_bytes)
        self._closing = threading.Event()
        if not self._try_listen():
            threading.Thread(target=self._retry_listen, name="raygroups-listener-bind", daemon=True).start()

    def _try_listen(self) -> bool:
        host, port = parse_listen(self._listen)
        with self._lock:
            if self._closing.is_set():
                return True
            listener = Listener(self._broker, self._limits, loop=self._client.loop)
            try:
                _, bound_port = listener.start(host, port)
            except OSError as e:
                error = f"cannot listen on {self._listen}: {e.strerror or e}"
                if error != self.error:
                    log.error("Kafka listener of node %s: %s; trying again every %g s", self.node, error, BIND_RETRY_S)
                self.error = error
                return False
            # Kafka's advertised.listeners defaults to listeners; a wildcard address is no address to connect to.
            advertised = self._advertised_host or (
                ray.util.get_node_ip_address() if is_wildcard(host) else host)
            self._listener = listener
            self.topology.start(BrokerAddress(node_id_of(self.node), advertised, bound_port))
            self.error = None
            return True

    def _retry_listen(self) -> None:
        while not self._closing.wait(BIND_RETRY_S):
            if self._try_listen():
                return

    def status(self) -> dict:
        a = self.topology.address
        listener = self._listener
        return {"node": self.node, "error": self.error,
                "bootstrap": None if a is None or listener is None else f"{a.host}:{a.port}",
                **({} if listener is None else listener.stats())}

    def close(self) -> None:
        with self._lock:  # a bind under way finishes first; none starts after
            self._closing.set()
        self.topology.stop()
        if self._listener is not None:
            self._listener.stop()
        self._broker.close()
        self._client.close()
        if self._listener is not None:
            kv_delete(listener_key(self.node), self._namespace)
