"""A chaos run on real hosts: what the nemesis needs from them, and the deployment's nodes as hosts.

The runner drives the hosts through a ``HostControl`` its launcher passes in (``deploy/chaos_hosts.py``
implements it over the namespaced SSH hosts of ``deploy/testhosts.py``): power, links, and whole process
trees. A coordinator node's stable name is its host's name (``cluster.yaml`` makes it from ``hostname -s``).

Ray's side of a host fault: a host that stays silent longer than the GCS's health checks allow (cluster.yaml:
three failed checks, each timing out after 1 s: about 3.5 s) is declared dead, and its raylet, once it hears so, exits with every process
of the node. Ray does not take such a node back: it joins again as a new incarnation under the same name when
Ray is started on it again, which ``HostControl.start_ray`` does, as the operator (or a supervisor) would.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import ray

from raygroups.deployment.seam import NODE_LABEL

RAY_START_TIMEOUT_S = 240.0  # a host's `ray start` and its raylet's registration, on a loaded machine
# After a heal, how long a node must stay alive in Ray to count as kept: a health check of the GCS that was
# under way during the fault may still declare it dead (cluster.yaml: 3 checks, each timing out after 1 s).
KEPT_AFTER_S = 4.0


class HostControl(Protocol):
    head: str  # the head's host: Ray's GCS and the controller

    def coordinator_hosts(self) -> list[str]: ...

    def power_off(self, host: str) -> None: ...

    def power_on(self, host: str) -> None: ...  # boots the host; Ray is not started on it

    def start_ray(self, host: str) -> None: ...  # the deployment's start commands for the host (stops Ray first)

    def stop_ray(self, host: str) -> None: ...  # `ray stop`: a node leaving cleanly

    def cut(self, host: str) -> None: ...  # the host's link down

    def heal(self, host: str) -> None: ...

    def isolate(self, a: str, b: str) -> None: ...  # a and b no longer reach each other; the rest still does

    def reconnect(self, a: str, b: str) -> None: ...

    def pause(self, host: str) -> None: ...  # SIGSTOP every process of the host

    def resume(self, host: str) -> None: ...

    def signal(self, host: str, pid: int, sig: int) -> bool: ...  # a process of the host, by its pid there


def alive_node_ids(name: str) -> set[str]:
    """Ray's alive incarnations of the coordinator node ``name``."""
    return {n["NodeID"] for n in ray.nodes() if n.get("Alive") and (n.get("Labels") or {}).get(NODE_LABEL) == name}


def back_in_ray(hosts: HostControl, host: str, before: set[str], timeout_s: float = RAY_START_TIMEOUT_S,
                kept_after_s: float = KEPT_AFTER_S, alive=alive_node_ids) -> str:
    """After a host fault healed, the node in Ray again: ``"kept"`` if Ray never declared its incarnation
    (``before``) dead, else ``"restarted"`` once Ray was started on it again and a new incarnation joined
    (``alive(host)``: Ray's alive incarnations of the node)."""
    kept_until = time.monotonic() + kept_after_s
    while before & alive(host):
        if time.monotonic() > kept_until:
            return "kept"
        time.sleep(0.25)
    hosts.start_ray(host)
    deadline = time.monotonic() + timeout_s
    while not alive(host):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{host} did not join Ray again within {timeout_s:g} s of its `ray start`")
        time.sleep(0.5)
    return "restarted"


class HostedCluster:
    """The deployment reached by address, whose nodes are real hosts: a node killed is its host powered off
    (``graceful``: its Ray stopped), a node restarted is its host powered on and Ray started on it. Everything
    else is the deployment's ``Cluster``."""

    def __init__(self, cluster: Any, hosts: HostControl) -> None:
        self._cluster = cluster
        self.hosts = hosts
        self.replicated = True
        # The clients (consumers, probes) on the run's own node, off the hosts the faults strike.
        self.consumer_resources = {f"node:{ray.util.get_node_ip_address()}": 0.001}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    def kill_node(self, name: str, graceful: bool = False) -> None:
        if graceful:
            self.hosts.stop_ray(name)
        else:
            self.hosts.power_off(name)

    def restart_node(self, name: str) -> None:
        self.hosts.power_on(name)
        back_in_ray(self.hosts, name, set())
