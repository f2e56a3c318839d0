"""Kafka's wire format, decoded and encoded with ``kio`` (message classes generated from Kafka's own JSON
message schemas, every API and version, flexible versions with tagged fields and compact strings included).

A frame is a 4-byte big-endian size and that many bytes: a request header (v1, or v2 for a flexible
version) and the request body; the answer is a response header (v0, or v1 for a flexible version, except
ApiVersions whose response header is always v0, KIP-511) and the response body (Kafka's
``RequestContext``/``NetworkClient`` framing). Nothing here knows what a request means.

The handlers build their answers as plain dicts with the fields of the newest version they serve;
``to_entity`` shapes one into the message class of the version asked for, dropping the fields that
version does not have, so one handler serves every version of its API.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import BufferUnderflow, DecodeError

from raygroups.client.kafka_wire import to_entity
from raygroups.gateway.frame_check import MalformedRequest, check_request

_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id: the same in every header version
_SIZE = struct.Struct(">i")
_MS = datetime.timedelta(milliseconds=1)


@dataclasses.dataclass(frozen=True, slots=True)
class Frame:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    request: Any  # the kio request object


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame (without its size prefix)."""
    if len(frame) < _HEAD.size:
        raise MalformedRequest(f"a request frame needs at least {_HEAD.size} bytes for its header, got {len(frame)}")
    return _HEAD.unpack_from(frame, 0)


@cache
def request_schema(api_key: int, api_version: int) -> type:
    return load_request_schema(api_key, api_version)


@cache
def response_schema(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


@cache
def _reader(entity_type: type):
    return entity_reader(entity_type)


@cache
def _writer(entity_type: type):
    return entity_writer(entity_type)


def decode_request(frame: bytes) -> Frame:
    """Parse a whole request frame whose API key and version the caller knows are served."""
    api_key, api_version, correlation_id = peek_header(frame)
    schema = request_schema(api_key, api_version)
    try:
        check_request(frame, schema)  # before kio allocates what a count claims
        header, size = _reader(schema.__header_schema__)(frame, 0)
        request, _ = _reader(schema)(frame, size)
    except BufferUnderflow:
        raise MalformedRequest(f"api key {api_key} v{api_version}: the frame ends inside the request") from None
    except (DecodeError, ValueError, TypeError, OverflowError, UnicodeDecodeError) as e:
        raise MalformedRequest(f"api key {api_key} v{api_version}: {e}") from None
    return Frame(api_key, api_version, correlation_id, header.client_id, request)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """The whole response frame, size prefix included; ``body`` is a kio response object."""
    schema = type(body)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_schema = schema.__header_schema__
    _writer(header_schema)(buffer, header_schema(correlation_id=correlation_id))
    _writer(schema)(buffer, body)
    out = buffer.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buffer.getvalue()


def response(api_key: int, api_version: int, values: dict) -> Any:
    """The kio response object of ``api_key`` at ``api_version`` built from ``values``."""
    return to_entity(response_schema(api_key, api_version), values)


def ms(value: datetime.timedelta) -> int:
    """A kio duration field (decoded as a timedelta) in Kafka's milliseconds."""
    return value // _MS
