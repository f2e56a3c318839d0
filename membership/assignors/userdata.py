"""What sticky members say they owned: ``MemberData`` and the user-data formats of Kafka's sticky assignors.

``encode_sticky_user_data``/``decode_sticky_user_data`` are byte-compatible with Kafka's
``StickyAssignor`` user data (v0 and v1); ``encode_cooperative_user_data``/``decode_cooperative_user_data``
with ``CooperativeStickyAssignor``'s (the int32 generation). Decoding never raises on malformed input: as in
Kafka, unreadable data counts as "no previous assignment". Pure: standard library only.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from raygroups.membership.assignors.base import DEFAULT_GENERATION, TopicPartition


@dataclass(frozen=True)
class MemberData:
    """A member's claim: the partitions it owned before this rebalance and the generation it owned
    them in (``DEFAULT_GENERATION`` when unknown, e.g. from a client that never said)."""

    partitions: tuple[TopicPartition, ...] = ()
    generation: int = DEFAULT_GENERATION


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ValueError("truncated user data")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def count(self) -> int:
        n = self.take(">i")
        if n < 0 or n > len(self.data) - self.pos:
            raise ValueError(f"invalid array length {n}")
        return n

    def string(self) -> str:
        n = self.take(">h")
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"invalid string length {n}")
        s = self.data[self.pos : self.pos + n].decode("utf-8")
        self.pos += n
        return s


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int | None) -> bytes:
    """Kafka's ``StickyAssignor`` user data: ``[topic [partition]]`` then, in v1, ``generation``.

    Byte-compatible with Kafka's ``STICKY_ASSIGNOR_USER_DATA_V1`` (``V0`` when ``generation`` is
    ``None``): int32 array lengths, int16-prefixed UTF-8 topic names, int32 partitions and generation.
    """
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(set(partitions)):
        by_topic.setdefault(topic, []).append(partition)
    out = [struct.pack(">i", len(by_topic))]
    for topic, ps in by_topic.items():
        name = topic.encode("utf-8")
        out.append(struct.pack(">h", len(name)) + name + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    if generation is not None:
        out.append(struct.pack(">i", generation))
    return b"".join(out)


def decode_sticky_user_data(data: bytes) -> MemberData:
    """Inverse of :func:`encode_sticky_user_data`, v0 or v1. Like Kafka, data that cannot be parsed
    is taken as "no previous assignment" rather than failing the whole rebalance."""
    try:
        r = _Cursor(data)
        partitions = []
        for _ in range(r.count()):
            topic = r.string()
            partitions.extend((topic, r.take(">i")) for _ in range(r.count()))
        generation = r.take(">i") if len(r.data) - r.pos >= 4 else DEFAULT_GENERATION
    except (ValueError, UnicodeDecodeError, struct.error):
        return MemberData()
    return MemberData(tuple(partitions), generation)


def encode_cooperative_user_data(generation: int) -> bytes:
    """Kafka's ``CooperativeStickyAssignor`` user data: the int32 generation of the last assignment."""
    return struct.pack(">i", generation)


def decode_cooperative_user_data(data: bytes | None) -> int:
    if data is None or len(data) < 4:
        return DEFAULT_GENERATION
    return struct.unpack_from(">i", data)[0]
