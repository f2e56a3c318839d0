"""Coordinator nodes and their stable names (pure: no Ray, no I/O).

A coordinator node is a Ray node carrying the ``coordinator`` resource. Ray gives a node a new id every
time it starts, so replicas, leaders and ISRs name nodes by the Ray node label ``raygroups.io/node``
instead: the worker's start command sets it (``ray up``: from the host's name or a name file in its data
directory; a simulated cluster: ``node-0``, ``node-1``, ...), and a node that restarts under the same
label is the same replica, with the same data directory ``<data_dir>/<name>``. A coordinator node without
the label is named ``ray-<first 12 hex digits of its node id>``: it works, but after a restart it is a
stranger (:func:`unlabelled_warning` says so).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

NODE_LABEL = "raygroups.io/node"
COORDINATOR_RESOURCE = "coordinator"
UNLABELLED_PREFIX = "ray-"
# Ray's rule for label values (ray._private.label_utils): at most 63 characters, alphanumerics with
# '-', '_' or '.' inside.
_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class NodeObservation:
    """One coordinator node as Ray reports it."""

    name: str
    node_id: str  # Ray's id of this incarnation of the node
    alive: bool
    labelled: bool  # named by the raygroups.io/node label (else by its Ray node id)


def validate_node_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"node name must be a str, got {type(name).__name__}")
    if not _NAME_RE.match(name):
        raise ValueError(f"node name {name!r} is not a valid Ray label value: 1-63 characters, letters, "
                         f"digits, '-', '_' or '.', starting and ending with a letter or digit")
    return name


def name_of(ray_node: Mapping[str, Any]) -> tuple[str, bool]:
    """``(name, labelled)`` of one entry of ``ray.nodes()``."""
    label = (ray_node.get("Labels") or {}).get(NODE_LABEL)
    if label:
        return label, True
    return UNLABELLED_PREFIX + ray_node["NodeID"][:12], False


def is_coordinator(ray_node: Mapping[str, Any]) -> bool:
    return bool((ray_node.get("Resources") or {}).get(COORDINATOR_RESOURCE)) or \
        NODE_LABEL in (ray_node.get("Labels") or {})


def coordinator_nodes(ray_nodes: Iterable[Mapping[str, Any]], known: Mapping[str, str] | None = None,
                      superseded: Iterable[str] = ()) -> dict[str, NodeObservation]:
    """The coordinator nodes of ``ray.nodes()``, by name. Ray keeps dead incarnations in its node table,
    so a name can appear several times: an alive entry wins, an incarnation already ``superseded`` by a
    newer one never comes back (it is dead to us, whatever Ray still says), and of two other alive ones
    (a node restarted before Ray declared its old incarnation dead) the one that is not the ``known``
    incarnation."""
    known = known or {}
    gone = set(superseded)
    out: dict[str, NodeObservation] = {}
    for entry in ray_nodes:
        if not is_coordinator(entry):
            continue
        name, labelled = name_of(entry)
        seen = NodeObservation(name, entry["NodeID"], bool(entry.get("Alive")) and entry["NodeID"] not in gone,
                               labelled)
        prior = out.get(name)
        if prior is None or _better(seen, prior, known.get(name)):
            out[name] = seen
    return out


def _better(a: NodeObservation, b: NodeObservation, known_id: str | None) -> bool:
    if a.alive != b.alive:
        return a.alive
    if a.alive and b.alive:
        return b.node_id == known_id
    return False


def unlabelled_warning(node: NodeObservation) -> str:
    return (f"coordinator node {node.node_id[:12]} has no {NODE_LABEL} label: it is named {node.name!r}, and "
            f"after a restart it will be a new, empty node. Start it with "
            f"--labels={NODE_LABEL}=<a name that survives restarts>")


def scheduling_for(node: NodeObservation | None, name: str) -> dict[str, Any]:
    """How to place an actor on node ``name`` so that it never runs anywhere else: by its label, or,
    for an unlabelled node, on its Ray node id (``{"node_id": ...}``, hard affinity)."""
    if node is not None and not node.labelled:
        return {"node_id": node.node_id}
    return {"label_selector": {NODE_LABEL: name}}
