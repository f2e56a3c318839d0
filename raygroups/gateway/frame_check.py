"""Every length and count in a request frame checked against the bytes left, before kio reads it.

Kafka's generated readers refuse an array whose count exceeds the bytes remaining before they allocate
anything ("Tried to allocate a collection of size ..."). kio's native reader sizes its list from the count
first, so a frame of a few bytes that claims 2**32 elements makes it ask for tens of GiB and abort the
whole process. This walk follows the same kio message classes (field order, flexible versions, compact
and legacy encodings, tagged fields) but only reads lengths: a count above the bytes left, a length past
the end of the frame, or a varint longer than Kafka allows is ``MalformedRequest``, which closes the
connection as any other frame that does not parse.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from functools import cache

# (buffer, position, end) -> the position after the field; raises MalformedRequest.
Step = Callable[[bytes, int, int], int]

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8,
          "uuid": 16, "timedelta_i32": 4, "timedelta_i64": 8, "datetime_i64": 8, "error_code": 2}
_MAX_VARINT_BYTES = 5  # Kafka's ByteUtils.readUnsignedVarint: an int in at most five bytes


class MalformedRequest(ValueError):
    """A frame that does not parse against its schema: Kafka closes the connection."""


def check_request(frame: bytes, schema: type) -> None:
    """Raise ``MalformedRequest`` unless every length and count in ``frame`` (a request frame without
    its size prefix, of the kio request class ``schema``) fits in the frame."""
    if not _has_arrays(schema):
        return  # kio checks a string's or bytes' length against the frame itself; only counts are at risk
    end = len(frame)
    position = _entity(schema.__header_schema__)(frame, 0, end)
    _entity(schema)(frame, position, end)


@cache
def _has_arrays(entity_type: type) -> bool:
    for hint in typing.get_type_hints(entity_type).values():
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if typing.get_origin(hint) is tuple or (dataclasses.is_dataclass(hint) and _has_arrays(hint)):
            return True
    return False


def _short(what: str, need: int, left: int) -> MalformedRequest:
    return MalformedRequest(f"{what} needs {need} bytes, {left} left in the frame")


def _varint(buffer: bytes, position: int, end: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(_MAX_VARINT_BYTES):
        if position + i >= end:
            raise _short("an unsigned varint", i + 1, end - position)
        byte = buffer[position + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position + i + 1
        shift += 7
    raise MalformedRequest(f"an unsigned varint longer than {_MAX_VARINT_BYTES} bytes")


def _signed(buffer: bytes, position: int, end: int, size: int) -> tuple[int, int]:
    if position + size > end:
        raise _short("a length", size, end - position)
    return int.from_bytes(buffer[position:position + size], "big", signed=True), position + size


def _fixed(size: int) -> Step:
    def step(buffer: bytes, position: int, end: int) -> int:
        if position + size > end:
            raise _short("a field", size, end - position)
        return position + size
    return step


def _sized(compact: bool, legacy_length_bytes: int) -> Step:
    """A string, bytes or records field: a length (-1 or compact 0: null), then that many bytes."""
    def step(buffer: bytes, position: int, end: int) -> int:
        if compact:
            length, position = _varint(buffer, position, end)
            length -= 1
        else:
            length, position = _signed(buffer, position, end, legacy_length_bytes)
        if length > end - position:
            raise _short("a string or bytes field", length, end - position)
        return position + max(length, 0)
    return step


def _array(compact: bool, element: Step) -> Step:
    def step(buffer: bytes, position: int, end: int) -> int:
        if compact:
            count, position = _varint(buffer, position, end)
            count -= 1
        else:
            count, position = _signed(buffer, position, end, 4)
        if count > end - position:  # every element takes at least one byte
            raise MalformedRequest(f"an array of {count} elements with {end - position} bytes left in the frame")
        for _ in range(count):
            position = element(buffer, position, end)
        return position
    return step


@cache
def _entity(entity_type: type) -> Step:
    flexible = entity_type.__flexible__
    header = entity_type.__name__ == "RequestHeader"
    hints = typing.get_type_hints(entity_type)
    steps: list[Step] = []
    tagged: dict[int, Step] = {}
    fixed = 0  # consecutive fixed-size fields are checked as one
    for field in dataclasses.fields(entity_type):
        kafka_type = field.metadata.get("kafka_type")
        hint = hints[field.name]
        if "tag" not in field.metadata and kafka_type in _FIXED and typing.get_origin(hint) is not tuple:
            fixed += _FIXED[kafka_type]
            continue
        if fixed:
            steps.append(_fixed(fixed))
            fixed = 0
        # A request header's client id is a legacy string even in the flexible header v2 (KIP-482).
        compact = flexible and not (header and field.name == "client_id")
        step = _field(hint, kafka_type, compact)
        if "tag" in field.metadata:
            tagged[field.metadata["tag"]] = step
        else:
            steps.append(step)
    if fixed:
        steps.append(_fixed(fixed))

    def walk(buffer: bytes, position: int, end: int) -> int:
        for s in steps:
            position = s(buffer, position, end)
        if flexible:
            position = _tagged_fields(buffer, position, end, tagged)
        return position
    return walk


def _tagged_fields(buffer: bytes, position: int, end: int, known: dict[int, Step]) -> int:
    count, position = _varint(buffer, position, end)
    if count > end - position:
        raise MalformedRequest(f"{count} tagged fields with {end - position} bytes left in the frame")
    for _ in range(count):
        tag, position = _varint(buffer, position, end)
        size, position = _varint(buffer, position, end)
        if size > end - position:
            raise _short(f"tagged field {tag}", size, end - position)
        field = known.get(tag)
        if field is not None and field(buffer, position, position + size) > position + size:
            raise MalformedRequest(f"tagged field {tag} overruns its size")
        position += size
    return position


def _field(hint: typing.Any, kafka_type: str | None, compact: bool) -> Step:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        element = typing.get_args(hint)[0]
        inner = _entity(element) if dataclasses.is_dataclass(element) else _field(element, kafka_type, compact)
        return _array(compact, inner)
    if dataclasses.is_dataclass(hint):
        return _entity(hint)
    if kafka_type in _FIXED:
        return _fixed(_FIXED[kafka_type])
    if kafka_type == "string":
        return _sized(compact, 2)
    if kafka_type in ("bytes", "records"):
        return _sized(compact, 4)
    raise TypeError(f"no length check for kafka type {kafka_type!r} ({hint!r})")
