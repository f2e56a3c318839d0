"""Kafka's ``consumer`` embedded protocol: Subscription and Assignment, versions 0-3.

The coordinator reads the topics out of members' subscriptions (for offset expiration and OffsetDelete,
as Kafka's ``ClassicGroup.computeSubscribedTopics`` does), so the format is Kafka's own big-endian
layout, parsed with the standard library only: ``int16 version`` then, for a Subscription,
``[topics] user_data`` (v0), ``+ [owned_partitions]`` (v1), ``+ generation_id`` (v2), ``+ rack_id`` (v3);
for an Assignment, ``[assigned_partitions] user_data``. Newer versions are read as their v3 prefix,
exactly as Kafka reads forward-compatible versions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

PROTOCOL_TYPE = "consumer"


class SchemaError(ValueError):
    """Bytes that are not a valid Subscription/Assignment."""


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[tuple[str, int], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 3


@dataclass(frozen=True)
class Assignment:
    partitions: tuple[tuple[str, int], ...] = ()
    user_data: bytes | None = None
    version: int = 3
    extra: dict = field(default_factory=dict, compare=False)


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, v: int) -> None:
        self.parts.append(struct.pack(">h", v))

    def int32(self, v: int) -> None:
        self.parts.append(struct.pack(">i", v))

    def string(self, s: str | None) -> None:
        if s is None:
            self.int16(-1)
            return
        b = s.encode("utf-8")
        self.int16(len(b))
        self.parts.append(b)

    def nbytes(self, b: bytes | None) -> None:
        if b is None:
            self.int32(-1)
            return
        self.int32(len(b))
        self.parts.append(bytes(b))

    def topic_partitions(self, tps) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        self.int32(len(by_topic))
        for topic, partitions in by_topic.items():
            self.string(topic)
            self.int32(len(partitions))
            for p in partitions:
                self.int32(p)

    def value(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(bytes(data))
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise SchemaError(f"truncated data: need {n} bytes at position {self.pos}, have {len(self.data) - self.pos}")
        v = self.data[self.pos : self.pos + n]
        self.pos += n
        return v

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        if n < 0:
            raise SchemaError(f"negative string length {n}")
        try:
            return bytes(self._take(n)).decode("utf-8")
        except UnicodeDecodeError as e:
            raise SchemaError(f"string is not UTF-8: {e}") from None

    def nbytes(self) -> bytes | None:
        n = self.int32()
        if n == -1:
            return None
        return bytes(self._take(n))

    def array_len(self) -> int:
        n = self.int32()
        if n < 0 or n > self.remaining():
            raise SchemaError(f"invalid array length {n}")
        return n

    def topic_partitions(self) -> tuple[tuple[str, int], ...]:
        out = []
        for _ in range(self.array_len()):
            topic = self.string()
            if topic is None:
                raise SchemaError("null topic name")
            for _ in range(self.array_len()):
                out.append((topic, self.int32()))
        return tuple(out)


def encode_subscription(sub: Subscription) -> bytes:
    w = _Writer()
    version = min(sub.version, 3)
    w.int16(version)
    w.int32(len(sub.topics))
    for t in sub.topics:
        w.string(t)
    w.nbytes(sub.user_data)
    if version >= 1:
        w.topic_partitions(sub.owned_partitions)
    if version >= 2:
        w.int32(sub.generation_id)
    if version >= 3:
        w.string(sub.rack_id)
    return w.value()


def decode_subscription(data: bytes) -> Subscription:
    r = _Reader(data)
    version = r.int16()
    if version < 0:
        raise SchemaError(f"invalid subscription version {version}")
    topics = []
    for _ in range(r.array_len()):
        t = r.string()
        if t is None:
            raise SchemaError("null topic in subscription")
        topics.append(t)
    user_data = r.nbytes()
    owned: tuple[tuple[str, int], ...] = ()
    generation_id = -1
    rack_id = None
    if version >= 1:
        owned = r.topic_partitions()
    if version >= 2:
        generation_id = r.int32()
    if version >= 3:
        rack_id = r.string()
    return Subscription(tuple(topics), user_data, owned, generation_id, rack_id, version)


def encode_assignment(assignment: Assignment) -> bytes:
    w = _Writer()
    w.int16(min(assignment.version, 3))
    w.topic_partitions(assignment.partitions)
    w.nbytes(assignment.user_data)
    return w.value()


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment()
    r = _Reader(data)
    version = r.int16()
    if version < 0:
        raise SchemaError(f"invalid assignment version {version}")
    partitions = r.topic_partitions()
    user_data = r.nbytes()
    return Assignment(partitions, user_data, version)
