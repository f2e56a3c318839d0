"""A Kafka wire-protocol gateway in front of a deployment: unmodified Kafka clients (librdkafka and its
bindings, the Java client, kafka-python, aiokafka, their admin clients) use raygroups groups and offsets.

    gw = raygroups.gateway.start(cluster, source=SyntheticSource({"events": 4}))
    consumer = confluent_kafka.Consumer({"bootstrap.servers": gw.bootstrap_servers, "group.id": "g"})

It is a shell: requests are decoded with ``kio`` (generated from Kafka's message schemas), the group APIs go
through the same request registry as the Python client, and a source's topics are served read-only
(Metadata, ListOffsets, Fetch). See ``docs/kafka-clients.md`` for the APIs and versions served.
"""

from __future__ import annotations

import dataclasses
import socket
from typing import Any

from raygroups.client.ray_client import RayGroupClient
from raygroups.coordinator.messages import check_int, check_type
from raygroups.deployment.cluster import Cluster
from raygroups.gateway.broker import Broker
from raygroups.gateway.node import GATEWAY_RETRY_MS, Deployment, answering_listeners, is_wildcard
from raygroups.gateway.server import GatewayLimits, Listener
from raygroups.gateway.topology import BrokerAddress, SingleListener
from raygroups.sources import Source

__all__ = ["Gateway", "GatewayLimits", "bootstrap_servers", "listeners", "start"]


class Gateway:
    """A running listener. ``bootstrap_servers`` is what clients bootstrap from; ``stop()`` closes every
    connection and the listening socket (idempotent)."""

    def __init__(self, listener: Listener, broker: Broker, bootstrap_servers: str, client: Any = None) -> None:
        self._listener = listener
        self._broker = broker
        self._client = client
        self.bootstrap_servers = bootstrap_servers

    def __repr__(self) -> str:
        return f"Gateway(bootstrap_servers={self.bootstrap_servers!r})"

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> dict:
        return self._listener.stats()

    def stop(self) -> None:
        self._listener.stop()
        self._broker.close()
        if self._client is not None:
            self._client.close()


def start(cluster: Any, *, host: str = "127.0.0.1", port: int = 0, source: Source | None = None,
          advertised_host: str | None = None, limits: GatewayLimits | None = None) -> Gateway:
    """Listen on ``host:port`` (port 0: a free one) in front of ``cluster`` (from ``start_local`` or
    ``connect``, or an ``InProcessCoordinator``). ``source``: topics served read-only, registered with the
    deployment so that their offsets can be committed. ``advertised_host``: the host clients are told to
    connect to (Kafka's ``advertised.listeners``; default ``host``, or this machine's name when ``host``
    is a wildcard address)."""
    check_type("host", host, str)
    check_int("port", port, 0, 65_535)
    check_type("advertised_host", advertised_host, str, nullable=True)
    check_type("limits", limits, GatewayLimits, nullable=True)
    if source is not None and not isinstance(source, Source):
        raise TypeError(f"source must be a raygroups.Source (topics, read, end_offset), got {type(source).__name__}")
    if not all(callable(getattr(cluster, name, None)) for name in ("client", "topics", "create_topic")):
        raise TypeError(f"cluster must be a deployment handle (start_local, connect), got {type(cluster).__name__}")
    limits = limits or GatewayLimits()
    if source is not None:
        register_topics(cluster, source)
    listener: Listener | None = None
    broker: Broker | None = None
    address = BrokerAddress(0, "", 0)
    topology = SingleListener(address)
    deployment, own_client = _deployment(cluster)
    try:
        broker = Broker(deployment, source, topology, f"raygroups-{getattr(cluster, 'namespace', 'local')}",
                        limits.fetch_max_bytes)
        listener = Listener(broker, limits, loop=None if own_client is None else own_client.loop)
        bound_host, bound_port = listener.start(host, port)
    except BaseException as e:
        if broker is not None:
            broker.close()
        if own_client is not None:
            own_client.close()
        if isinstance(e, OSError):
            raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        raise
    topology.address = BrokerAddress(0, advertised_host or _advertised(host, bound_host), bound_port)
    return Gateway(listener, broker, f"{topology.address.host}:{bound_port}", own_client)


def _deployment(cluster: Any) -> tuple[Any, Any]:
    """What the gateway forwards to: in front of a Ray deployment, a group client of its own whose retries of
    a retriable coordinator error end after ``GATEWAY_RETRY_MS``, so that a Kafka client sees the error and
    finds its coordinator again, as with Kafka; in front of anything else (``InProcessCoordinator``), the
    handle's own client."""
    if not isinstance(cluster, Cluster):
        return cluster, None
    config = dataclasses.replace(cluster.config, request_timeout_ms=GATEWAY_RETRY_MS)
    client = RayGroupClient(cluster.namespace, cluster.num_partitions, config)
    return Deployment(client, cluster.namespace), client


def listeners(cluster: Any) -> dict[str, str]:
    """The Kafka listeners of a replicated deployment's coordinator nodes (``deploy(listeners=...)``) that
    answer and listen now: node name -> ``"host:port"``."""
    return dict(sorted(answering_listeners(cluster.namespace).items()))


def bootstrap_servers(cluster: Any) -> str:
    """``listeners(cluster)`` as a Kafka client's ``bootstrap.servers`` string."""
    return ",".join(listeners(cluster).values())


def register_topics(cluster: Any, source: Source) -> None:
    """Register the source's topics with the deployment (commits to unregistered topics are refused)."""
    registered = cluster.topics()
    for name, partitions in source.topics().items():
        if registered.get(name, 0) < partitions:
            cluster.create_topic(name, partitions)


def _advertised(host: str, bound_host: str) -> str:
    if is_wildcard(bound_host):
        return socket.gethostname()
    return host or bound_host
