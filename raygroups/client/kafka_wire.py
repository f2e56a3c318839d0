"""The client's half of Kafka's wire protocol, encoded and decoded with ``kio`` (as the gateway's
``raygroups.gateway.wire`` does for the broker's half): the bootstrap list, the versions this client
implements of each API, and one blocking connection to a Kafka listener.

A connection negotiates versions once, when it opens (ApiVersions, KIP-35 and KIP-511, as Kafka's
``NetworkClient`` does), then sends one request at a time and reads its answer. Requests are given as
dicts with the fields of the newest version (``to_entity`` drops the fields an older version does not
have, so the caller may give the fields of several versions at once).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import select
import socket
import struct
import time
import types
import typing
import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import BufferUnderflow, DecodeError

from raygroups import __version__
from raygroups.coordinator.errors import Errors

_SIZE = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")
MAX_RESPONSE_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes, the same bound for an answer


@dataclass(frozen=True, slots=True)
class ClientApi:
    key: int
    name: str
    min_version: int
    max_version: int


# The versions this client implements, a registry of its own (the gateway's is ``gateway.apis.API_TABLE``).
# OffsetFetch starts at v2, the first that fetches every partition of a group (topics null); OffsetCommit at
# v2, the oldest one Kafka 4 still accepts (KIP-896).
API_VERSIONS, METADATA, FIND_COORDINATOR = 18, 3, 10
LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS = 16, 15, 42
OFFSET_FETCH, OFFSET_COMMIT, OFFSET_DELETE = 9, 8, 47
CLIENT_APIS: dict[int, ClientApi] = {api.key: api for api in (
    ClientApi(API_VERSIONS, "ApiVersions", 0, 3),
    ClientApi(METADATA, "Metadata", 1, 12),
    ClientApi(FIND_COORDINATOR, "FindCoordinator", 0, 4),
    ClientApi(LIST_GROUPS, "ListGroups", 0, 5),
    ClientApi(DESCRIBE_GROUPS, "DescribeGroups", 0, 5),
    ClientApi(DELETE_GROUPS, "DeleteGroups", 0, 2),
    ClientApi(OFFSET_FETCH, "OffsetFetch", 2, 9),
    ClientApi(OFFSET_COMMIT, "OffsetCommit", 2, 9),
    ClientApi(OFFSET_DELETE, "OffsetDelete", 0, 0),
)}
CLIENT_SOFTWARE_NAME = "raygroups"


class ProtocolError(RuntimeError):
    """The listener's answer cannot be used: it is malformed, or no version of an API is spoken by both."""


class ConnectFailed(ConnectionError):
    """A connection could not be opened: nothing was sent on it."""


# --- bootstrap ------------------------------------------------------------------------------------
def parse_bootstrap(bootstrap: Any) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` (an IPv6 host in brackets, ``[::1]:9092``) as ``[(host, port)]`` in
    order, duplicates dropped. ValueError naming what is wrong."""
    if not isinstance(bootstrap, str):
        raise ValueError(f"bootstrap must be a string HOST:PORT[,HOST:PORT...], got {type(bootstrap).__name__}")
    if not bootstrap.strip():
        raise ValueError("bootstrap is empty: give HOST:PORT[,HOST:PORT...]")
    out: list[tuple[str, int]] = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            raise ValueError(f"bootstrap {bootstrap!r} has an empty entry: give HOST:PORT[,HOST:PORT...]")
        host, sep, port = item.rpartition(":")
        if not sep:
            raise ValueError(f"bootstrap entry {item!r} has no port: give HOST:PORT")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        elif ":" in host:
            raise ValueError(f"bootstrap entry {item!r}: an IPv6 host goes in brackets, [HOST]:PORT")
        if not host or any(c.isspace() for c in host) or "[" in host or "]" in host:
            raise ValueError(f"bootstrap entry {item!r} has no valid host before the port")
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"bootstrap entry {item!r}: the port must be a number 1..65535, got {port!r}")
        if (host, int(port)) not in out:
            out.append((host, int(port)))
    return out


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def error_of(code: Any) -> Errors:
    """A decoded error code as ``Errors``; a code this project does not know is UNKNOWN_SERVER_ERROR."""
    try:
        return Errors(int(code))
    except ValueError:
        return Errors.UNKNOWN_SERVER_ERROR


# --- dicts into version-specific message classes (the gateway's too) -------------------------------------
def to_entity(entity_type: type, values: dict) -> Any:
    return entity_type(**{name: convert(values[name]) for name, convert in _plan(entity_type) if name in values})


@cache
def _plan(entity_type: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(entity_type)
    return tuple((f.name, _converter(hints[f.name])) for f in dataclasses.fields(entity_type))


def _converter(hint: Any):
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        convert = _converter(inner[0]) if len(inner) == 1 else _same
        return lambda v: None if v is None else convert(v)
    if origin is tuple:
        item = _converter(typing.get_args(hint)[0])
        return lambda v: tuple(item(x) for x in v)
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint):
            return lambda v: v if isinstance(v, hint) else to_entity(hint, v)
        if issubclass(hint, datetime.timedelta):
            return lambda v: v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=v)
        if issubclass(hint, ErrorCode):
            return lambda v: ErrorCode(int(v))
        if issubclass(hint, uuid.UUID):
            return lambda v: v if isinstance(v, uuid.UUID) else uuid.UUID(int=v or 0)
        if issubclass(hint, str):
            # A field an older version has as non-nullable (JoinGroup's protocol name before v7): Kafka
            # writes "" where a newer version writes null.
            return lambda v: "" if v is None else v
    return _same


def _same(v: Any) -> Any:
    return v


@cache
def _request_schema(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


@cache
def _response_schema(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


@cache
def _writer(entity_type: type):
    return entity_writer(entity_type)


@cache
def _reader(entity_type: type):
    return entity_reader(entity_type)


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str, values: dict) -> bytes:
    """The whole request frame, size prefix included."""
    schema = _request_schema(api_key, version)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header = schema.__header_schema__
    _writer(header)(buffer, to_entity(header, {"request_api_key": api_key, "request_api_version": version,
                                              "correlation_id": correlation_id, "client_id": client_id}))
    _writer(schema)(buffer, to_entity(schema, values))
    out = buffer.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buffer.getvalue()


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio response object) of a response frame without its size prefix."""
    schema = _response_schema(api_key, version)
    header, offset = _reader(schema.__header_schema__)(frame, 0)
    body, _ = _reader(schema)(frame, offset)
    return header.correlation_id, body


# --- one connection -------------------------------------------------------------------------------------
class BrokerConnection:
    """One blocking TCP connection to a Kafka listener, one request at a time (not thread-safe: its owner
    serialises the calls). An answer is matched to its request by correlation id. After any failure or
    timeout on an open connection it is closed, since where the next answer starts is no longer known;
    ``closed`` and ``stale()`` then say so and the owner opens a new one."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host, self.port = host, port
        self.address = address(host, port)
        self.client_id = client_id
        self.versions: dict[int, tuple[int, int]] = {}  # the listener's ApiVersions: key -> (min, max)
        self._sock: socket.socket | None = None
        self._correlation_id = 0

    @property
    def closed(self) -> bool:
        return self._sock is None

    def stale(self) -> bool:
        """Closed, or closed by the listener while idle (Kafka's connections.max.idle.ms): an idle
        connection has nothing to read, so anything readable (the end of the stream) makes it unusable.
        A stale connection is closed here, before a request is sent on it."""
        if self._sock is None:
            return True
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            readable = [self._sock]
        if readable:
            self.close()
        return self._sock is None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def open(self, deadline: float) -> None:
        """Connect and negotiate versions. ConnectFailed (refused, unreachable, unknown host) names the
        address; TimeoutError names what was waited for."""
        remaining = _remaining(deadline, f"a connection to {self.address}")
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=remaining)
        except TimeoutError:
            raise TimeoutError(f"timed out waiting for a connection to {self.address}") from None
        except socket.gaierror:
            raise ConnectFailed(f"cannot connect to {self.address}: the host name does not resolve") from None
        except OSError as e:
            reason = "connection refused" if isinstance(e, ConnectionRefusedError) else (e.strerror or str(e))
            raise ConnectFailed(f"cannot connect to {self.address}: {reason.lower()}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._negotiate(deadline)
        except BaseException:
            self.close()
            raise

    def _negotiate(self, deadline: float) -> None:
        mine = CLIENT_APIS[API_VERSIONS]
        version = mine.max_version
        for _ in range(2):
            frame = self._exchange(API_VERSIONS, version, {"client_software_name": CLIENT_SOFTWARE_NAME,
                                                           "client_software_version": __version__},
                                   deadline)
            # KIP-511: a listener that does not speak this version answers UNSUPPORTED_VERSION in a v0 body
            # listing its own range, and the client asks again with the highest version both speak.
            code = _ERROR_CODE.unpack_from(frame, 4)[0] if len(frame) >= 6 else None
            body = self._decode(API_VERSIONS, 0 if code == Errors.UNSUPPORTED_VERSION else version, frame)
            if error_of(body.error_code) is Errors.NONE:
                self.versions = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in body.api_keys}
                return
            theirs = {int(a.api_key): int(a.max_version) for a in body.api_keys}.get(API_VERSIONS, -1)
            if code != Errors.UNSUPPORTED_VERSION or not mine.min_version <= theirs < version:
                break
            version = theirs
        raise ProtocolError(f"{self.address} refused ApiVersions v{version}: {error_of(body.error_code).name}")

    def version_for(self, api_key: int) -> int:
        """The highest version of ``api_key`` both this client and the listener speak."""
        mine = CLIENT_APIS[api_key]
        theirs = self.versions.get(api_key)
        if theirs is None:
            raise ProtocolError(f"{self.address} does not serve {mine.name} (absent from its ApiVersions)")
        version = min(mine.max_version, theirs[1])
        if version < max(mine.min_version, theirs[0]):
            raise ProtocolError(f"{self.address} serves {mine.name} v{theirs[0]}..v{theirs[1]} and this client "
                                f"v{mine.min_version}..v{mine.max_version}: no version in common")
        return version

    def call(self, api_key: int, values: dict, deadline: float) -> tuple[int, Any]:
        """Send ``api_key`` at the negotiated version; (version, kio response object)."""
        version = self.version_for(api_key)
        return version, self._decode(api_key, version, self._exchange(api_key, version, values, deadline))

    def _exchange(self, api_key: int, version: int, values: dict, deadline: float) -> bytes:
        name = f"{CLIENT_APIS[api_key].name} v{version}"
        if self._sock is None:
            raise ConnectionError(f"the connection to {self.address} is closed")
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        request = encode_request(api_key, version, self._correlation_id, self.client_id, values)
        try:
            self._sock.settimeout(_remaining(deadline, f"the answer of {self.address} to {name}"))
            self._sock.sendall(request)
            (size,) = _SIZE.unpack(self._read(_SIZE.size, deadline, name))
            if not _SIZE.size <= size <= MAX_RESPONSE_BYTES:
                raise ProtocolError(f"{self.address} answered {name} with a frame of {size} bytes")
            frame = self._read(size, deadline, name)
        except _Expired:
            self.close()
            raise
        except TimeoutError:
            self.close()
            raise TimeoutError(f"timed out waiting for the answer of {self.address} to {name}") from None
        except OSError as e:
            self.close()
            if e.errno is None:  # ours, already naming the address
                raise
            raise ConnectionError(f"the connection to {self.address} failed before the answer to {name}: "
                                  f"{e.strerror or e}") from None
        except BaseException:
            self.close()
            raise
        if struct.unpack_from(">i", frame, 0)[0] != self._correlation_id:
            self.close()
            raise ProtocolError(f"{self.address} answered {name} with another request's correlation id")
        return frame

    def _read(self, n: int, deadline: float, name: str) -> bytes:
        chunks, have = [], 0
        while have < n:
            self._sock.settimeout(_remaining(deadline, f"the answer of {self.address} to {name}"))
            chunk = self._sock.recv(min(n - have, 1 << 20))
            if not chunk:
                raise ConnectionError(f"{self.address} closed the connection before answering {name}")
            chunks.append(chunk)
            have += len(chunk)
        return b"".join(chunks)

    def _decode(self, api_key: int, version: int, frame: bytes) -> Any:
        try:
            _, body = decode_response(api_key, version, frame)
        except (BufferUnderflow, DecodeError, ValueError, TypeError, OverflowError, UnicodeDecodeError) as e:
            self.close()
            raise ProtocolError(f"{self.address} answered {CLIENT_APIS[api_key].name} v{version} with a frame "
                                f"that does not decode: {e}") from None
        return body


class _Expired(TimeoutError):
    """The caller's deadline passed before an operation could start."""


def _remaining(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Expired(f"timed out waiting for {what}")
    return left
