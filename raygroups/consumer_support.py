"""Support for ``raygroups.Consumer``: the rebalance-listener base class, the wall clock, argument checks
and assignor resolution.

The checks raise ``TypeError``/``ValueError`` naming the argument and the limit, before the consumer
changes anything. Assignor names resolve to fresh instances (sticky assignors keep per-member state).
``ConsumerRebalanceListener`` is re-exported by ``raygroups.consumer`` (and ``raygroups``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

_REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms
TopicPartition = tuple[str, int]
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


class _WallClock:
    def now_ms(self) -> int:
        return int(time.monotonic() * 1000)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def _kwargs(request: Any) -> dict[str, Any]:
    return {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}


def _check_int(name: str, value: Any, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < lo or value > 2**31 - 1:
        raise ValueError(f"{name} must be in [{lo}, {2**31 - 1}], got {value}")


def _check_timeout(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return float(value)


def _check_tp(name: str, tp: Any) -> TopicPartition:
    if (not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) or isinstance(tp[1], bool)
            or not isinstance(tp[1], int) or tp[1] < 0):
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
