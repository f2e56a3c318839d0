"""Raw-socket helpers for the gateway's hostile-input tests: well-formed frames built with kio (from
Kafka's message schemas), answers read with kio, and a gateway in front of an ``InProcessCoordinator``
with offsets committed before each test. Only a test's bad parts are written as bytes."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import socket
import struct
import sys
import time
import types
import typing
import uuid

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from raygroups import Errors, gateway
from raygroups.gateway import GatewayLimits
from raygroups.sources import SyntheticSource
from raygroups.testing import InProcessCoordinator

TOPIC = "events"
GROUP = "g"
COMMITTED = {(TOPIC, 0): (5, "five"), (TOPIC, 1): (7, "")}
LIMITS = GatewayLimits(max_request_bytes=64 * 1024, max_connections=6, max_in_flight_requests=4,
                       connections_max_idle_ms=60_000, fetch_max_bytes=256 * 1024)
DEADLINE_S = 10.0
ZERO = datetime.timedelta(0)


# --- well-formed frames, built with kio ------------------------------------------------------------
def request(api_key: int, version: int, **fields):
    """A kio request object of ``api_key`` at ``version``; nested entities by class name via ``entity``."""
    return load_request_schema(api_key, version)(**fields)


def entity(api_key: int, version: int, class_name: str, **fields):
    module = sys.modules[load_request_schema(api_key, version).__module__]
    return getattr(module, class_name)(**fields)


def encode(body, correlation_id: int = 1, *, api_key: int | None = None, version: int | None = None) -> bytes:
    """A whole frame (size prefix included) of a kio request; ``api_key``/``version`` override the header's."""
    schema = type(body)
    header_schema = schema.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_schema)(buffer, header_schema(
        request_api_key=schema.__api_key__ if api_key is None else api_key,
        request_api_version=schema.__version__ if version is None else version,
        correlation_id=correlation_id, client_id="hostile"))
    entity_writer(schema)(buffer, body)
    payload = buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


def header_only(header_schema, api_key: int, version: int, correlation_id: int = 1) -> bytes:
    """A request header without a body (what a frame for an unknown API key can be built from)."""
    buffer = io.BytesIO()
    entity_writer(header_schema)(buffer, header_schema(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="hostile"))
    return buffer.getvalue()


def api_versions(version: int = 3):
    if version >= 3:
        return request(18, version, client_software_name="hostile", client_software_version="1")
    return request(18, version)


def metadata_v12():
    return request(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def fetch_v12(partitions: list[tuple[int, int]], max_bytes: int = 1 << 20):
    """A Fetch v12 of ``(partition, fetch_offset)`` pairs of the topic, answered at once (max_wait 0)."""
    return request(1, 12, replica_id=-1, max_wait=ZERO, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                   session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="", topics=(
                       entity(1, 12, "FetchTopic", topic=TOPIC, partitions=tuple(
                           entity(1, 12, "FetchPartition", partition=p, current_leader_epoch=-1, fetch_offset=o,
                                  last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes)
                           for p, o in partitions)),))


def join_group_v3(group_id: str):
    """A JoinGroup that parks: the group's initial rebalance delay runs on a ManualClock nobody advances."""
    return request(11, 3, group_id=group_id, session_timeout=datetime.timedelta(seconds=10),
                   rebalance_timeout=datetime.timedelta(seconds=10), member_id="", protocol_type="consumer",
                   protocols=(entity(11, 3, "JoinGroupRequestProtocol", name="range", metadata=b""),))


def offset_commit_v8(group_id: str, partition: int, offset: int, metadata: str):
    return request(8, 8, group_id=group_id, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                   topics=(entity(8, 8, "OffsetCommitRequestTopic", name=TOPIC, partitions=(
                       entity(8, 8, "OffsetCommitRequestPartition", partition_index=partition,
                              committed_offset=offset, committed_leader_epoch=-1, committed_metadata=metadata),)),))


# --- raw sockets ------------------------------------------------------------------------------------
def connect(gw, **options) -> socket.socket:
    host, port = gw.bootstrap_servers.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    for name, value in options.items():
        sock.setsockopt(socket.SOL_SOCKET, getattr(socket, name), value)
    sock.settimeout(DEADLINE_S)
    try:
        sock.connect((host, int(port)))
    except OSError:
        sock.close()
        raise
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError(f"connection closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def read_answer(sock: socket.socket, api_key: int, version: int):
    """(correlation id, kio response body) of the next answer on ``sock``."""
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    payload = recv_exact(sock, size)
    schema = load_response_schema(api_key, version)
    header, offset = entity_reader(schema.__header_schema__)(payload, 0)
    body, _ = entity_reader(schema)(payload, offset)
    return header.correlation_id, body


def ask(sock: socket.socket, body, correlation_id: int = 1):
    sock.sendall(encode(body, correlation_id))
    got_id, answer = read_answer(sock, type(body).__api_key__, type(body).__version__)
    assert got_id == correlation_id
    return answer


def assert_closed(sock: socket.socket) -> None:
    """The gateway closes ``sock`` without answering (EOF or reset within the deadline)."""
    with contextlib.closing(sock):
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return
        assert data == b"", f"expected the connection closed, got {len(data)} bytes of answer"


def wait_for(condition, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


# --- the world ---------------------------------------------------------------------------------------
class World:
    """A gateway (small ``LIMITS``) in front of an ``InProcessCoordinator`` whose group ``GROUP`` has
    ``COMMITTED`` offsets; ``assert_unharmed`` checks that a fresh connection is served and they hold."""

    def __init__(self, limits: GatewayLimits = LIMITS, source=None) -> None:
        self.coordinator = InProcessCoordinator(num_partitions=2)
        self.source = source or SyntheticSource({TOPIC: 2}, records_per_partition=100_000)
        self.gw = gateway.start(self.coordinator, source=self.source, limits=limits)
        self.coordinator.commit_offsets(group_id=GROUP, offsets=COMMITTED).result()
        self.committed = self.offsets(GROUP)
        self.groups = self.group_ids()
        self.sockets: list[socket.socket] = []

    def connect(self, **options) -> socket.socket:
        sock = connect(self.gw, **options)
        self.sockets.append(sock)
        return sock

    def offsets(self, group_id: str) -> dict:
        return {tp: (o.offset, o.metadata) for tp, o in
                self.coordinator.fetch_offsets(group_id=group_id).result().offsets.items()}

    def group_ids(self) -> set[str]:
        return {g.group_id for g in self.coordinator.list_groups().result().groups}

    def stats(self) -> dict:
        return self.gw.stats()

    def assert_unharmed(self, groups: bool = True) -> None:
        """A fresh connection is answered correctly, and nothing committed changed."""
        with contextlib.closing(connect(self.gw)) as sock:
            versions = ask(sock, api_versions(3), 101)
            assert versions.error_code == Errors.NONE
            served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            assert served[18] == (0, 4) and served[3][1] == 12
            md = ask(sock, metadata_v12(), 102)
            assert [(t.name, len(t.partitions), t.error_code) for t in md.topics] == [(TOPIC, 2, Errors.NONE)]
            host, port = self.gw.bootstrap_servers.rsplit(":", 1)
            assert [(b.host, b.port) for b in md.brokers] == [(host, int(port))]
        assert self.offsets(GROUP) == self.committed == COMMITTED
        if groups:
            assert self.group_ids() == self.groups

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.gw.stop()
        self.coordinator.close()


# --- bytes a test bends, and whole messages to check the length walk with -----------------------------
def uvarint(value: int) -> bytes:
    """Kafka's unsigned varint, of any size (a bad one too)."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes([value])


def sample(entity_type):
    """An instance of a kio message class with every field set (nullable ones too, arrays of two)."""
    hints = typing.get_type_hints(entity_type)
    values = {}
    for field in dataclasses.fields(entity_type):
        hint = hints[field.name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if typing.get_origin(hint) is tuple:
            element = typing.get_args(hint)[0]
            values[field.name] = tuple(value_of(element, field.metadata.get("kafka_type"), i) for i in range(2))
        else:
            values[field.name] = value_of(hint, field.metadata.get("kafka_type"), 1)
    return entity_type(**values)


def value_of(hint, kafka_type, i):
    if dataclasses.is_dataclass(hint):
        return sample(hint)
    return {"bool": True, "string": f"s{i}", "bytes": b"b" * (i + 1), "records": b"r" * (i + 1),
            "uuid": uuid.UUID(int=i + 1), "timedelta_i32": datetime.timedelta(milliseconds=i + 1),
            "timedelta_i64": datetime.timedelta(milliseconds=i + 1)}.get(kafka_type, i + 1)
