"""Support for ``raygroups.Consumer``: the rebalance-listener base class, argument checks and assignor
resolution.

The checks raise ``TypeError``/``ValueError`` naming the argument and the limit, before the consumer
changes anything. Assignor names resolve to fresh instances (sticky assignors keep per-member state).
``ConsumerRebalanceListener`` is re-exported by ``raygroups.client.consumer`` (and ``raygroups``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from raygroups.coordinator.checks import is_int, is_number
from raygroups.coordinator.messages import check_instance_id, check_int

_REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms
TopicPartition = tuple[str, int]
log = logging.getLogger("raygroups.client.consumer")
_LISTENER_METHODS = ("on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost")


class ConsumerRebalanceListener:
    """Base class for rebalance listeners; every method is optional. As in Kafka, ``on_partitions_lost``
    defaults to ``on_partitions_revoked`` (but committing there fails: the partitions are gone)."""

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        pass

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.on_partitions_revoked(partitions)


def _check_timeout(name: str, value: Any) -> float:
    if not is_number(value):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return float(value)


def _check_tp(name: str, tp: Any) -> TopicPartition:
    if not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) or not is_int(tp[1]) or tp[1] < 0:
        raise TypeError(f"{name} must be a (topic, partition) tuple with partition >= 0, got {tp!r}")
    return tp


def _resolve_assignors(assignors: Any) -> list[Any]:
    if isinstance(assignors, (str, bytes)) or not isinstance(assignors, (list, tuple)):
        raise TypeError(f"assignors must be a list of assignor names, got {type(assignors).__name__}")
    if not assignors:
        raise ValueError("assignors must name at least one assignor")
    out = []
    for a in assignors:
        if isinstance(a, str):
            out.append(_get_assignor(a))
        elif all(hasattr(a, attr) for attr in ("name", "assign")):
            out.append(a)
        else:
            raise TypeError(f"assignors entries must be assignor names or assignor objects, got {a!r}")
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise ValueError(f"assignors must not repeat a name, got {names}")
    return out


def _get_assignor(name: str) -> Any:
    from raygroups.assignors import get_assignor  # a fresh instance: sticky assignors keep per-member state

    try:
        return get_assignor(name)
    except ValueError as e:
        raise ValueError(f"assignors: {e}") from None


def check_consumer_args(cluster: Any, group_id: Any, topics: Any, assignors: Any, group_instance_id: Any,
                        session_timeout_ms: Any, heartbeat_interval_ms: Any, max_poll_interval_ms: Any,
                        auto_commit_interval_ms: Any, enable_auto_commit: Any, listener: Any, client_id: Any,
                        clock: Any) -> tuple[list[str], list[Any]]:
    """``Consumer``'s arguments checked before it changes anything: the topics as a list and the assignors
    resolved to fresh instances."""
    if not callable(getattr(cluster, "client", None)) or not callable(getattr(cluster, "topics", None)):
        raise TypeError("cluster must offer client() and topics() (a raygroups cluster or InProcessCoordinator)")
    if not isinstance(group_id, str):
        raise TypeError(f"group_id must be a str, got {type(group_id).__name__}")
    if not group_id:
        raise ValueError("group_id must not be empty")
    if isinstance(topics, (str, bytes)) or not isinstance(topics, (list, tuple, set, frozenset)):
        raise TypeError(f"topics must be a list of topic names, got {type(topics).__name__}")
    topics = list(topics)
    if not topics:
        raise ValueError("topics must name at least one topic")
    for t in topics:
        if not isinstance(t, str):
            raise TypeError(f"topics entries must be str, got {type(t).__name__}")
        if not t:
            raise ValueError("topics entries must not be empty")
    check_instance_id(group_instance_id)
    check_int("session_timeout_ms", session_timeout_ms, 1)
    check_int("heartbeat_interval_ms", heartbeat_interval_ms, 1)
    if heartbeat_interval_ms >= session_timeout_ms:
        raise ValueError(f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be lower than "
                         f"session_timeout_ms ({session_timeout_ms})")
    check_int("max_poll_interval_ms", max_poll_interval_ms, 1)
    check_int("auto_commit_interval_ms", auto_commit_interval_ms, 1)
    if not isinstance(enable_auto_commit, bool):
        raise TypeError(f"enable_auto_commit must be a bool, got {type(enable_auto_commit).__name__}")
    if listener is not None and not any(callable(getattr(listener, m, None)) for m in _LISTENER_METHODS):
        raise TypeError("listener must define on_partitions_revoked/assigned/lost "
                        "(see raygroups.consumer.ConsumerRebalanceListener)")
    if client_id is not None and not isinstance(client_id, str):
        raise TypeError(f"client_id must be a str or None, got {type(client_id).__name__}")
    if clock is not None and not callable(getattr(clock, "now_ms", None)):
        raise TypeError("clock must have a now_ms() method")
    return topics, _resolve_assignors(assignors)


def invoke_listener(listener: Any, event: Any) -> BaseException | None:
    """Run one rebalance callback; what it raises is returned, not raised: Kafka finishes the rebalance step,
    then surfaces the callback's error. ``on_partitions_lost`` falls back to ``on_partitions_revoked``."""
    if listener is None:
        return None
    method = getattr(listener, event.method, None)
    if method is None and event.method == "on_partitions_lost":
        method = getattr(listener, "on_partitions_revoked", None)
    if method is None:
        return None
    try:
        method(event.partitions)
    except Exception as e:
        log.error("rebalance listener %s(%s) failed", event.method, sorted(event.partitions), exc_info=True)
        return e
    return None


def check_offsets(offsets: Any) -> dict[TopicPartition, int]:
    """The offsets a consumer is asked to commit: ``(topic, partition) -> offset >= 0``."""
    if not isinstance(offsets, Mapping):
        raise TypeError(f"offsets must be a dict of (topic, partition) -> offset, got {type(offsets).__name__}")
    out = {}
    for tp, offset in offsets.items():
        _check_tp("offsets key", tp)
        if not is_int(offset):
            raise TypeError(f"offsets[{tp!r}] must be an int, got {type(offset).__name__}")
        if offset < 0:
            raise ValueError(f"offsets[{tp!r}] must be >= 0, got {offset}")
        out[tp] = offset
    return out
