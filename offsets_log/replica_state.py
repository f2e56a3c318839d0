"""What a coordinator node's disk knows about the partitions it replicates, beside their logs.

Two small JSON files, each replaced atomically (temporary file, fsync, rename, fsync of the directory):

* ``<node_dir>/deployment.json`` — the node's **descriptor**: which deployment shape its data belongs to
  (``num_partitions``; changing it would route groups to other partitions, so a mismatch is refused).
* ``<node_dir>/topics.json`` — the topics registered with the deployment and a version (the newest copy
  among the nodes wins), so that commits to them are accepted again after a full restart.
* ``<node_dir>/__consumer_offsets-<p>/partition-state.json`` — the **replica state**: the latest partition
  state the controller gave this replica (replicas, leader, leader epoch, ISR, partition epoch) and the
  **fence epoch** below which this replica refuses appends. It lives in the partition's directory, so a
  replica whose log is gone has no state either and is never mistaken for an in-sync copy.

The coordinator nodes' disks are the source of truth for partition metadata, as Kafka's metadata log
is: a controller that starts without its cache rebuilds the metadata from these files. Every reader
validates what it reads and names the file and the field that is wrong; nothing here guesses.
"""

from __future__ import annotations

import json
import os
from typing import Any

from raygroups.coordinator.checks import is_int
from raygroups.offsets_log.errors import LogError
from raygroups.offsets_log.fsutil import atomic_write

FORMAT = 1
DESCRIPTOR_FILE = "deployment.json"
STATE_FILE = "partition-state.json"
_STATE_KEYS = ("replicas", "leader", "leader_epoch", "isr", "partition_epoch")


class ReplicaStateError(LogError):
    """A descriptor or replica-state file is unreadable or does not describe a valid state."""


PARTITION_DIR_PREFIX = "__consumer_offsets-"


def node_dir(data_dir: str, node: str) -> str:
    """Where a node of a replicated deployment keeps its replicas: ``<data_dir>/<node>``."""
    return os.path.join(data_dir, node)


def partition_dir(node_dir: str, partition: int) -> str:
    """A partition's log directory: ``<node_dir>/__consumer_offsets-<p>`` (the embedded default's
    ``node_dir`` is its ``data_dir``)."""
    return os.path.join(node_dir, f"{PARTITION_DIR_PREFIX}{partition}")


def partition_of_dir(name: str) -> int | None:
    """The partition a directory entry of a node's directory holds (``partition_dir``'s last part), or None."""
    suffix = name[len(PARTITION_DIR_PREFIX):] if name.startswith(PARTITION_DIR_PREFIX) else ""
    return int(suffix) if suffix.isdigit() else None


def _int(value: Any, field: str, where: str, minimum: int) -> int:
    if not is_int(value):
        raise ReplicaStateError(f"{where}: {field} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ReplicaStateError(f"{where}: {field} must be >= {minimum}, got {value}")
    return value


def _names(value: Any, field: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
        raise ReplicaStateError(f"{where}: {field} must be a list of node names, got {value!r}")
    if len(set(value)) != len(value):
        raise ReplicaStateError(f"{where}: {field} names a node twice: {value!r}")
    return list(value)


def validate_partition_state(state: Any, where: str = "partition state") -> dict:
    """The partition state as a plain dict with exactly the keys of ``_STATE_KEYS``, or ReplicaStateError."""
    if not isinstance(state, dict):
        raise ReplicaStateError(f"{where}: must be a mapping, got {type(state).__name__}")
    missing = [k for k in _STATE_KEYS if k not in state]
    if missing:
        raise ReplicaStateError(f"{where}: missing {', '.join(missing)}")
    replicas = _names(state["replicas"], "replicas", where)
    if not replicas:
        raise ReplicaStateError(f"{where}: replicas must name at least one node")
    isr = _names(state["isr"], "isr", where)
    if not set(isr) <= set(replicas):
        raise ReplicaStateError(f"{where}: isr {isr} is not a subset of replicas {replicas}")
    leader = state["leader"]
    if leader is not None and leader not in replicas:
        raise ReplicaStateError(f"{where}: leader {leader!r} is not one of the replicas {replicas}")
    return {
        "replicas": replicas,
        "leader": leader,
        "leader_epoch": _int(state["leader_epoch"], "leader_epoch", where, 0),
        "isr": isr,
        "partition_epoch": _int(state["partition_epoch"], "partition_epoch", where, 0),
    }


def _read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ReplicaStateError(f"{path}: unreadable: {e}") from e
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ReplicaStateError(f"{path}: not valid JSON ({e})") from e


def _remove_leftover(path: str) -> None:
    try:
        os.unlink(path + ".tmp")  # an interrupted atomic write left its temporary file
    except FileNotFoundError:
        pass


# --------------------------------------------------------------------------- replica state


def read_replica_state(directory: str) -> tuple[dict | None, int]:
    """``(partition state or None, fenced_epoch)`` persisted in a partition directory; ``(None, -1)`` when
    the replica has none (a new or wiped replica)."""
    path = os.path.join(directory, STATE_FILE)
    _remove_leftover(path)
    data = _read_json(path)
    if data is None:
        return None, -1
    if not isinstance(data, dict):
        raise ReplicaStateError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise ReplicaStateError(f"{path}: unknown format {data.get('format')!r} (this version reads {FORMAT})")
    fenced = _int(data.get("fenced_epoch"), "fenced_epoch", path, -1)
    state = data.get("state")
    if state is not None:
        state = validate_partition_state(state, path)
    return state, fenced


def write_replica_state(directory: str, state: dict | None, fenced_epoch: int) -> None:
    """Persist (atomically, fsynced) the partition state and fence epoch of one replica."""
    if state is not None:
        state = validate_partition_state(state)
    _int(fenced_epoch, "fenced_epoch", "replica state", -1)
    os.makedirs(directory, exist_ok=True)
    payload = {"format": FORMAT, "state": state, "fenced_epoch": fenced_epoch}
    atomic_write(os.path.join(directory, STATE_FILE), json.dumps(payload, sort_keys=True).encode())


# --------------------------------------------------------------------------- node descriptor


def read_node_descriptor(node_dir: str) -> dict | None:
    """The node's descriptor or None on a fresh disk: ``num_partitions``, ``node``, ``min_insync_replicas``
    (the lowest the deployment ever ran with: acknowledged writes are held by at least that many
    replicas, which is what a recovery quorum must be measured against) and ``layout_created`` (every
    partition of the deployment was created: a partition no disk knows must not be created again)."""
    path = os.path.join(node_dir, DESCRIPTOR_FILE)
    _remove_leftover(path)
    data = _read_json(path)
    if data is None:
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReplicaStateError(f"{path}: not a raygroups node descriptor of format {FORMAT}")
    num = _int(data.get("num_partitions"), "num_partitions", path, 1)
    node = data.get("node")
    if not isinstance(node, str) or not node:
        raise ReplicaStateError(f"{path}: node must be a non-empty name, got {node!r}")
    min_isr = data.get("min_insync_replicas")
    if min_isr is not None:
        _int(min_isr, "min_insync_replicas", path, 1)
    created = data.get("layout_created", False)
    if not isinstance(created, bool):
        raise ReplicaStateError(f"{path}: layout_created must be true or false, got {created!r}")
    return {"num_partitions": num, "node": node, "min_insync_replicas": min_isr, "layout_created": created}


def write_node_descriptor(node_dir: str, node: str, num_partitions: int, min_insync_replicas: int | None = None,
                          layout_created: bool = False) -> None:
    _int(num_partitions, "num_partitions", "node descriptor", 1)
    if min_insync_replicas is not None:
        _int(min_insync_replicas, "min_insync_replicas", "node descriptor", 1)
    os.makedirs(node_dir, exist_ok=True)
    payload = {"format": FORMAT, "node": node, "num_partitions": num_partitions,
               "min_insync_replicas": min_insync_replicas, "layout_created": bool(layout_created)}
    atomic_write(os.path.join(node_dir, DESCRIPTOR_FILE), json.dumps(payload, sort_keys=True).encode())


# --------------------------------------------------------------------------- topics


TOPICS_FILE = "topics.json"


def validate_topics(topics: Any, where: str = "topics") -> dict[str, int]:
    if not isinstance(topics, dict):
        raise ReplicaStateError(f"{where}: must be a mapping of topic name to partition count")
    for name, count in topics.items():
        if not isinstance(name, str) or not name:
            raise ReplicaStateError(f"{where}: topic names must be non-empty strings, got {name!r}")
        _int(count, f"partitions of {name!r}", where, 1)
    return dict(topics)


def read_topics_file(directory: str) -> tuple[dict[str, int], int]:
    """``(topics, version)`` registered in ``directory`` (``({}, 0)`` when none ever were)."""
    path = os.path.join(directory, TOPICS_FILE)
    _remove_leftover(path)
    data = _read_json(path)
    if data is None:
        return {}, 0
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReplicaStateError(f"{path}: not a raygroups topics file of format {FORMAT}")
    return validate_topics(data.get("topics"), path), _int(data.get("version"), "version", path, 0)


def write_topics_file(directory: str, topics: dict[str, int], version: int) -> None:
    topics = validate_topics(topics)
    _int(version, "version", "topics", 0)
    os.makedirs(directory, exist_ok=True)
    payload = {"format": FORMAT, "topics": topics, "version": version}
    atomic_write(os.path.join(directory, TOPICS_FILE), json.dumps(payload, sort_keys=True).encode())
