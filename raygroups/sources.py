"""Partitioned record sources for ``ConsumerGroup``.

``Source`` is the protocol for users' own partitioned data; ``SyntheticSource`` is a deterministic one:
record ``i`` of partition ``p`` of a topic is a pure function of ``(topic, p, i)``, so any consumer can
verify that a record is genuine and, together with the others, that none was skipped.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import time
from typing import NamedTuple, Protocol, runtime_checkable

from raygroups.coordinator.checks import is_number
from raygroups.coordinator.messages import check_int, check_type


class SourceRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes


@runtime_checkable
class Source(Protocol):
    def topics(self) -> dict[str, int]:
        """Topic name -> number of partitions."""

    def read(self, topic: str, partition: int, offset: int, max_records: int) -> list[SourceRecord]:
        """Up to ``max_records`` records starting at ``offset`` (fewer, or none, at the end)."""

    def end_offset(self, topic: str, partition: int) -> int:
        """The offset after the last available record (for lag)."""

    # Optional, used by ``raygroups offsets reset`` when present: ``start_offset(topic, partition)`` (the
    # first offset; 0 otherwise) and ``offset_for_time(topic, partition, timestamp_ms)`` (the first offset at
    # or after that time, None past the end; Kafka's offsetsForTimes).


class SyntheticSource:
    """``records_per_partition`` records in every partition of every topic (``None``: unbounded). With
    ``records_per_second`` the topic is "live": records appear at that rate per partition from creation
    (wall clock), so consumers have lag to work off."""

    def __init__(self, topics: dict[str, int], records_per_partition: int | None = 10_000,
                 records_per_second: float | None = None) -> None:
        check_type("topics", topics, dict)
        if not topics:
            raise ValueError("topics must name at least one topic")
        for name, n in topics.items():
            check_type("topic name", name, str)
            check_int(f"partitions of {name!r}", n, 1, 100_000)
        if records_per_partition is not None:
            check_int("records_per_partition", records_per_partition, 0, 2**62)
        if records_per_second is not None and (not is_number(records_per_second) or records_per_second <= 0):
            raise ValueError(f"records_per_second must be a positive number or None, got {records_per_second!r}")
        self._topics = dict(topics)
        self.records_per_partition = records_per_partition
        self.records_per_second = records_per_second
        self.created_at = time.time()

    def topics(self) -> dict[str, int]:
        return dict(self._topics)

    @staticmethod
    def value_of(topic: str, partition: int, offset: int) -> bytes:
        return hashlib.blake2b(f"{topic}/{partition}/{offset}".encode(), digest_size=16).digest()

    def verify(self, record: SourceRecord) -> bool:
        return record.value == self.value_of(record.topic, record.partition, record.offset)

    def end_offset(self, topic: str, partition: int) -> int:
        self._check(topic, partition)
        end = 2**62 if self.records_per_partition is None else self.records_per_partition
        if self.records_per_second is not None:
            end = min(end, int((time.time() - self.created_at) * self.records_per_second))
        return end

    def start_offset(self, topic: str, partition: int) -> int:
        """The first offset (Kafka's log start offset): records are never deleted here."""
        self._check(topic, partition)
        return 0

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose record appeared at or after ``timestamp_ms`` (Kafka's offsetsForTimes);
        None past the last record. Without ``records_per_second`` every record appeared at creation."""
        self._check(topic, partition)
        check_int("timestamp_ms", timestamp_ms, 0, 2**62)
        end = self.end_offset(topic, partition)
        since_s = timestamp_ms / 1000 - self.created_at
        if since_s <= 0:
            return 0 if end > 0 else None
        if self.records_per_second is None:
            return None
        first = math.ceil(since_s * self.records_per_second)
        return first if first < end else None

    def read(self, topic: str, partition: int, offset: int, max_records: int) -> list[SourceRecord]:
        self._check(topic, partition)
        check_int("offset", offset, 0, 2**62)
        check_int("max_records", max_records, 1, 1_000_000)
        end = min(offset + max_records, self.end_offset(topic, partition))
        return [
            SourceRecord(topic, partition, i, f"{topic}-{partition}-{i}".encode(), self.value_of(topic, partition, i))
            for i in range(offset, end)
        ]

    def _check(self, topic: str, partition: int) -> None:
        n = self._topics.get(topic)
        if n is None:
            raise ValueError(f"unknown topic {topic!r}; this source has {sorted(self._topics)}")
        check_int(f"partition of {topic!r}", partition, 0, n - 1)


def load_source(spec: str) -> Source:
    """The source ``spec`` names: ``MODULE:ATTR``, a ``Source`` or a callable without arguments that returns
    one, resolved in the calling process (a CLI command, a node's listener); ValueError saying what is wrong."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ValueError(f"a source {spec!r} must be MODULE:ATTR (for example mypkg.sources:events)")
    module_name, attr = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import the source module {module_name!r}: {e}") from None
    value = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        value = getattr(value, part)
    if isinstance(value, type) or (not isinstance(value, Source) and callable(value)):
        try:
            value = value()
        except Exception as e:  # noqa: BLE001 - whatever the factory raised, said in one sentence
            raise ValueError(f"{spec}() failed: {type(e).__name__}: {e}") from None
    if not isinstance(value, Source):
        raise ValueError(f"{spec} is a {type(value).__name__}, not a raygroups.Source (topics, read, end_offset) "
                         f"or a callable returning one")
    return value
