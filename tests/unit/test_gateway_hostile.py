"""Bad input on the wire never harms the deployment or other connections (the gateway's listener, no Ray).

Each test sends something a Kafka broker refuses (Kafka's ``SocketServer`` and ``KafkaApis``) over a raw
socket, checks Kafka's answer or a closed connection, then checks that a fresh connection is still
answered (ApiVersions v3 and Metadata v12) and that the offsets committed before are unchanged.
Well-formed requests are built with kio from Kafka's message schemas; only the bad parts are bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import random
import socket
import struct
import threading
import time

import pytest
from kio.index import load_request_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2

from raygroups import Errors
from raygroups.gateway import GatewayLimits
from raygroups.sources import SourceRecord, SyntheticSource
from tests.unit.gateway_world import (
    DEADLINE_S,
    GROUP,
    LIMITS,
    TOPIC,
    ZERO,
    World,
    api_versions,
    ask,
    assert_closed,
    connect,
    encode,
    entity,
    fetch_v12,
    header_only,
    join_group_v3,
    metadata_v12,
    offset_commit_v8,
    read_answer,
    recv_exact,
    request,
    sample,
    uvarint,
    wait_for,
)


@pytest.fixture
def world():
    w = World()
    yield w
    w.close()


# --- frame sizes --------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [-1, -(2**31), LIMITS.max_request_bytes + 1, 2**31 - 1])
def test_a_size_outside_the_limits_closes_before_the_body_is_read(world, size):
    sock = world.connect()
    sock.sendall(struct.pack(">i", size))  # and no body: the gateway must not wait for it
    assert_closed(sock)
    assert world.stats()["closed_connections"]["frame size outside [8, max_request_bytes]"] == 1
    world.assert_unharmed()


@pytest.mark.parametrize("size", [0, 1, 7])
def test_a_frame_shorter_than_a_request_header_closes(world, size):
    sock = world.connect()
    sock.sendall(struct.pack(">i", size) + bytes(size))
    assert_closed(sock)
    world.assert_unharmed()


def test_a_frame_of_exactly_max_request_bytes_is_read(world):
    sock = world.connect()
    frame = encode(api_versions(3), 9)
    # Padding after the body is ignored as Kafka ignores it; the frame is exactly the limit.
    padded = struct.pack(">i", LIMITS.max_request_bytes) + frame[4:] + bytes(LIMITS.max_request_bytes - len(frame) + 4)
    sock.sendall(padded)
    correlation_id, answer = read_answer(sock, 18, 3)
    assert (correlation_id, answer.error_code) == (9, Errors.NONE)
    world.assert_unharmed()


def test_a_truncated_frame_then_the_client_closes(world):
    sock = world.connect()
    frame = encode(metadata_v12(), 3)
    sock.sendall(struct.pack(">i", len(frame) + 100) + frame[4:])  # the size promises 100 bytes more
    sock.shutdown(socket.SHUT_WR)
    assert_closed(sock)
    wait_for(lambda: world.stats()["closed_connections"].get("truncated frame") == 1, "the truncated frame counted")
    world.assert_unharmed()


def test_a_body_shorter_than_its_schema_closes(world):
    sock = world.connect()
    frame = encode(offset_commit_v8(GROUP, 0, 99, ""), 4)
    cut = frame[4:-6]  # the size is right for what is sent, but the request ends inside its last partition
    sock.sendall(struct.pack(">i", len(cut)) + cut)
    assert_closed(sock)
    assert world.stats()["closed_connections"]["malformed request"] == 1
    world.assert_unharmed()


def test_a_null_where_the_schema_forbids_one_closes(world):
    # OffsetCommit v8's group id as a compact string of length -1 (varint 0): kio's UnexpectedNull.
    sock = world.connect()
    frame = encode(offset_commit_v8(GROUP, 0, 99, ""), 5)
    header = header_only(RequestHeaderV2, 8, 8, 5)
    body = frame[4 + len(header):]
    assert body[:2] == bytes([len(GROUP) + 1]) + GROUP.encode()
    bad = header + b"\x00" + body[2:]
    sock.sendall(struct.pack(">i", len(bad)) + bad)
    assert_closed(sock)
    assert world.stats()["closed_connections"]["malformed request"] == 1
    world.assert_unharmed()


@pytest.mark.parametrize(("api_key", "version", "body"), [
    (3, 12, uvarint(2**32 - 1) + b"\x00"),  # Metadata: 4 G topics (kio would ask for 32 GiB and abort)
    (3, 12, uvarint(2**35) + b"\x00"),  # a varint longer than Kafka's five bytes
    (9, 1, struct.pack(">h", 1) + b"g" + struct.pack(">i", 2**31 - 1)),  # OffsetFetch v1: 2 G topics
    (1, 12, bytes(25) + b"\x01" + b"\x01" + b"\x00" + b"\x01" + b"\x02" + uvarint(2**30)),  # a tagged field's size
], ids=["compact-count", "long-varint", "legacy-count", "tagged-size"])
def test_a_count_or_length_beyond_the_frame_closes_before_decoding(world, api_key, version, body):
    # Kafka's generated readers refuse a count above the bytes left before allocating; the process (and
    # with it every connection) must survive it.
    sock = world.connect()
    header = header_only(load_request_schema(api_key, version).__header_schema__, api_key, version)
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    assert_closed(sock)
    assert world.stats()["closed_connections"]["malformed request"] == 1
    world.assert_unharmed()


def test_the_length_check_accepts_every_served_request_exactly():
    """The walk before kio follows every served API's every version: a well-formed frame with every
    field set is accepted and walked to its last byte."""
    from raygroups.gateway.apis import API_TABLE
    from raygroups.gateway.frame_check import _entity, check_request

    for api in API_TABLE.values():
        for version in range(api.min_version, api.max_version + 1):
            schema = load_request_schema(api.key, version)
            frame = encode(sample(schema), 3)[4:]
            check_request(frame, schema)
            after_header = _entity(schema.__header_schema__)(frame, 0, len(frame))
            assert _entity(schema)(frame, after_header, len(frame)) == len(frame), (api.name, version)


# --- garbage, unknown keys and versions ------------------------------------------------------------
def test_garbage_closes(world):
    rng = random.Random(32)
    for _ in range(20):
        sock = world.connect()
        sock.sendall(rng.randbytes(rng.randrange(1, 3000)))
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            sock.shutdown(socket.SHUT_WR)
        assert_closed(sock)
    world.assert_unharmed()


def test_garbage_bodies_of_every_served_api_close_or_are_answered(world):
    """Random bodies behind well-formed headers of every served API (lowest, middle and highest version):
    each is answered or closed as malformed, never anything else (and the gateway keeps serving)."""
    from raygroups.gateway.apis import API_TABLE

    rng = random.Random(11)
    outcomes = {"answered": 0, "closed": 0}
    for api in API_TABLE.values():
        if api.key in (8, 11, 13, 14, 42, 47):
            continue  # group writes: covered field by field below, where nothing may be committed
        for version in sorted({api.min_version, (api.min_version + api.max_version) // 2, api.max_version}):
            schema = load_request_schema(api.key, version)
            header = header_only(schema.__header_schema__, api.key, version, 77)
            sock = world.connect()
            body = rng.randbytes(rng.randrange(0, 64))
            sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
            try:
                (size,) = struct.unpack(">i", recv_exact(sock, 4))
                outcomes["answered"] += 1
                assert struct.unpack(">i", recv_exact(sock, size)[:4]) == (77,)
            except (EOFError, ConnectionResetError):
                outcomes["closed"] += 1
            sock.close()
    assert outcomes["answered"] and outcomes["closed"]
    assert world.stats()["closed_connections"]["malformed request"] == outcomes["closed"]
    wait_for(lambda: world.stats()["connections"] == 0, "every connection closed")
    world.assert_unharmed()


def test_well_formed_requests_with_random_fields_are_answered():
    """Every served API at its highest version, with fields drawn from their whole kio types (negative
    counts, huge sizes, odd strings): each is answered, none breaks its handler. A Fetch is asked not to
    wait; a JoinGroup may park for its rebalance, as Kafka's does."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    from raygroups.gateway.apis import API_TABLE

    apis = [(api.key, api.max_version) for api in API_TABLE.values() if api.key != 0]  # Produce: no strategy
    w = World(dataclasses.replace(LIMITS, max_connections=1_000))

    @settings(max_examples=2, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        for api_key, version in apis:
            body = data.draw(st.from_type(load_request_schema(api_key, version)))
            if api_key == 1:
                body = dataclasses.replace(body, max_wait=ZERO)
            with contextlib.closing(connect(w.gw)) as sock:
                sock.settimeout(1.0 if api_key == 11 else DEADLINE_S)
                sock.sendall(encode(body, 5))
                try:
                    correlation_id, _ = read_answer(sock, api_key, version)
                except TimeoutError:
                    assert api_key == 11, f"api key {api_key} v{version} not answered: {body}"
                    continue
                assert correlation_id == 5

    try:
        run()
        assert set(w.stats()["closed_connections"]) <= {"closed by the client"}
        w.assert_unharmed(groups=False)  # random commits may create random groups; "g" is untouched
    finally:
        w.close()


def test_an_unknown_api_key_closes(world):
    for api_key in (22, 1000, -1):  # InitProducerId (a Kafka API not served), and keys Kafka has not
        sock = world.connect()
        frame = header_only(RequestHeaderV1, api_key, 0)
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        assert_closed(sock)
    assert world.stats()["closed_connections"]["unknown api key"] == 3
    world.assert_unharmed()


@pytest.mark.parametrize(("api_key", "version"), [(1, 3), (3, 13), (8, 1), (47, 1)])
def test_an_unsupported_version_of_a_served_api_closes(world, api_key, version):
    sock = world.connect()
    frame = header_only(RequestHeaderV1, api_key, version)
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    assert_closed(sock)
    assert world.stats()["closed_connections"]["unsupported version"] == 1
    world.assert_unharmed()


def test_api_versions_of_an_unknown_version_is_answered_in_v0_and_the_connection_stays_open(world):
    # KIP-511: a client sends its newest ApiVersions (header v2, its own body); the broker answers
    # UNSUPPORTED_VERSION in a v0 body listing its ApiVersions range, and the client retries.
    sock = world.connect()
    sock.sendall(encode(api_versions(3), 41, version=99))
    correlation_id, answer = read_answer(sock, 18, 0)
    assert correlation_id == 41
    assert answer.error_code == Errors.UNSUPPORTED_VERSION == 35
    assert [(k.min_version, k.max_version) for k in answer.api_keys if k.api_key == 18] == [(0, 4)]
    retried = ask(sock, api_versions(3), 42)
    assert retried.error_code == Errors.NONE
    assert ask(sock, metadata_v12(), 43).topics[0].name == TOPIC
    world.assert_unharmed()


# --- fields out of Kafka's ranges ---------------------------------------------------------------------
def test_offset_commit_with_a_negative_partition_commits_nothing(world):
    sock = world.connect()
    answer = ask(sock, offset_commit_v8(GROUP, -1, 99, ""))
    [[partition]] = [t.partitions for t in answer.topics]
    # Kafka's broker: UNKNOWN_TOPIC_OR_PARTITION (no topic has it), before the coordinator sees it.
    assert partition.partition_index == -1
    assert partition.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    world.assert_unharmed()


def test_offset_commit_with_huge_metadata_commits_nothing(world):
    sock = world.connect()
    answer = ask(sock, offset_commit_v8(GROUP, 0, 99, "m" * 5000))  # offset.metadata.max.bytes is 4096
    assert [(p.partition_index, p.error_code) for t in answer.topics for p in t.partitions] == [
        (0, Errors.OFFSET_METADATA_TOO_LARGE)]
    world.assert_unharmed()


@pytest.mark.parametrize("instance_id", ["", "bad id!", "x" * 300, ".."])
def test_join_group_with_an_illegal_group_instance_id_joins_nothing(world, instance_id):
    sock = world.connect()
    body = request(11, 7, group_id="new-group", session_timeout=datetime.timedelta(seconds=10),
                   rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=instance_id,
                   protocol_type="consumer", protocols=(entity(11, 7, "JoinGroupRequestProtocol", name="range",
                                                               metadata=b""),))
    answer = ask(sock, body)
    assert answer.error_code != Errors.NONE and answer.generation_id == -1
    assert world.coordinator.group_for_testing("new-group") is None
    world.assert_unharmed()


def test_fetch_with_a_negative_offset_or_partition(world):
    sock = world.connect()
    answer = ask(sock, fetch_v12([(0, -5), (-1, 0), (1, 0)]))
    by_partition = {p.partition_index: p for t in answer.responses for p in t.partitions}
    assert by_partition[0].error_code == Errors.OFFSET_OUT_OF_RANGE and by_partition[0].records == b""
    assert by_partition[-1].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert by_partition[1].error_code == Errors.NONE and by_partition[1].records
    world.assert_unharmed()


# --- a client that stops reading ------------------------------------------------------------------------
class _BigRecords(SyntheticSource):
    """Records of 32 KiB values: Fetch answers as big as ``fetch_max_bytes`` from a few records."""

    def read(self, topic, partition, offset, max_records):
        return [SourceRecord(topic, partition, i, b"k", bytes(32 * 1024))
                for i in range(offset, min(offset + max_records, self.end_offset(topic, partition), offset + 16))]


def test_a_client_that_stops_reading_stops_being_read():
    """It pipelines Fetch requests with big answers and reads nothing: the gateway holds at most
    ``max_in_flight_requests`` frames read ahead and about one answer, stops reading from it (so the
    client cannot send more), and serves other connections meanwhile."""
    w = World(source=_BigRecords({TOPIC: 2}))
    try:
        sock = w.connect(SO_RCVBUF=4096)
        frame = encode(fetch_v12([(0, 0), (1, 0)], max_bytes=LIMITS.fetch_max_bytes), 7)
        sock.setblocking(False)

        def held_within_bounds() -> dict:
            stats = w.stats()
            assert stats["read_ahead_frames"] <= LIMITS.max_in_flight_requests
            assert stats["read_ahead_bytes"] <= LIMITS.max_in_flight_requests * (len(frame) - 4)
            # One Fetch answer (its records and a little framing) and the transport's 64 KiB high-water mark.
            assert stats["unsent_bytes"] <= LIMITS.fetch_max_bytes + 4096 + 64 * 1024
            return stats

        def stalled(stats: dict) -> bool:
            # Waiting for the client to read an answer, with the read-ahead full: nothing more is read.
            return stats["unsent_bytes"] > 0 and stats["read_ahead_frames"] == LIMITS.max_in_flight_requests

        sent = 0
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                sent += sock.send(frame[sent % len(frame):])
                continue
            except BlockingIOError:
                pass  # the client's buffers are full: the gateway is not taking its bytes
            if stalled(held_within_bounds()):
                break
            assert time.monotonic() < deadline, f"the gateway kept reading: {w.stats()}"
            time.sleep(0.01)
        # Another connection is served meanwhile, and the stalled one stays within its bounds.
        w.assert_unharmed()
        wait_for(lambda: w.stats()["connections"] == 1, "the other connection closed")
        wait_for(lambda: stalled(held_within_bounds()), "the stalled connection still stalled")
        sock.close()
        wait_for(lambda: w.stats()["connections"] == 0, "the stalled connection closed")
        assert w.stats()["unsent_bytes"] == 0 and w.stats()["read_ahead_bytes"] == 0
    finally:
        w.close()


def test_pipelined_requests_are_answered_in_order(world):
    sock = world.connect()
    sock.sendall(b"".join(encode(metadata_v12() if i % 2 else api_versions(3), 1000 + i) for i in range(40)))
    for i in range(40):
        correlation_id, _ = read_answer(sock, 3 if i % 2 else 18, 12 if i % 2 else 3)
        assert correlation_id == 1000 + i
    world.assert_unharmed()


def test_a_client_that_resets_while_its_answers_are_written():
    w = World(source=_BigRecords({TOPIC: 2}))
    try:
        sock = w.connect(SO_RCVBUF=4096)
        sock.sendall(encode(fetch_v12([(0, 0), (1, 0)], max_bytes=LIMITS.fetch_max_bytes), 1) * 40)
        wait_for(lambda: w.stats()["unsent_bytes"] > 0, "an answer waiting for the client")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset, with answers half written and requests read ahead
        wait_for(lambda: w.stats()["connections"] == 0, "the reset connection closed")
        assert w.stats()["closed_connections"]["closed by the client"] == 1
        w.assert_unharmed()
    finally:
        w.close()


# --- connections --------------------------------------------------------------------------------------
def test_connections_beyond_max_connections_are_closed(world):
    socks = [world.connect() for _ in range(LIMITS.max_connections)]
    for i, sock in enumerate(socks):
        assert ask(sock, api_versions(3), i).error_code == Errors.NONE
    extra = world.connect()
    assert_closed(extra)
    assert world.stats()["closed_connections"]["max_connections"] == 1
    for i, sock in enumerate(socks):
        assert ask(sock, metadata_v12(), 100 + i).topics[0].name == TOPIC
    socks.pop().close()
    wait_for(lambda: world.stats()["connections"] < LIMITS.max_connections, "a connection slot freed")
    world.assert_unharmed()


def test_idle_connections_are_closed():
    w = World(GatewayLimits(connections_max_idle_ms=200, max_in_flight_requests=2))
    try:
        parked = w.connect()
        parked.sendall(encode(join_group_v3("parked")))
        wait_for(lambda: w.stats()["requests"].get("JoinGroup") == 1, "the JoinGroup in flight")
        silent = w.connect()
        answered = w.connect()
        assert ask(answered, api_versions(3)).error_code == Errors.NONE
        half = w.connect()
        half.sendall(encode(metadata_v12())[:10])  # a frame begun and never finished
        for sock in (silent, answered, half):
            assert_closed(sock)
        closed = w.stats()["closed_connections"]
        assert closed["idle"] == 2 and closed["truncated frame"] == 1
        # Silent for longer than the others, but waiting for its answer: not idle (Kafka's broker mutes
        # such a channel rather than expiring it).
        assert w.stats()["connections"] == 1
        parked.setblocking(False)
        with pytest.raises(BlockingIOError):
            parked.recv(1)
        w.assert_unharmed(groups=False)
    finally:
        w.close()


def test_clients_that_leave_while_their_requests_park_free_their_connections(world):
    """A JoinGroup parked for its rebalance and a Fetch waiting for bytes that will not come: once their
    clients are gone, their connections are too, so leaving clients cannot use up ``max_connections``."""
    for round_ in range(2):
        socks = [world.connect() for _ in range(LIMITS.max_connections)]
        for i, sock in enumerate(socks):
            if i % 2:
                sock.sendall(encode(join_group_v3(f"parked-{round_}-{i}")))
            else:
                waiting = dataclasses.replace(fetch_v12([(0, 100_000)]), max_wait=datetime.timedelta(minutes=10),
                                              min_bytes=2**31 - 1)
                sock.sendall(encode(waiting))
        in_flight = (round_ + 1) * LIMITS.max_connections
        wait_for(lambda n=in_flight: sum(world.stats()["requests"].values()) == n, "every request in flight")
        for sock in socks:
            sock.close()
        wait_for(lambda: world.stats()["connections"] == 0, "the connections of the clients gone closed")
    world.assert_unharmed(groups=False)


# --- handler failures and stop ------------------------------------------------------------------------
class _BrokenSource(SyntheticSource):
    def read(self, topic, partition, offset, max_records):
        raise RuntimeError("the source is broken")


def test_a_failing_handler_closes_its_connection_only(caplog):
    w = World(source=_BrokenSource({TOPIC: 2}))
    try:
        sock = w.connect()
        with caplog.at_level("CRITICAL", logger="raygroups.gateway"):
            sock.sendall(encode(fetch_v12([(0, 0)]), 1))
            assert_closed(sock)
        assert w.stats()["closed_connections"]["handler failed"] == 1
        w.assert_unharmed()
    finally:
        w.close()


def _gateway_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("raygroups-gateway")]


def test_stop_closes_everything_and_is_idempotent():
    before = set(_gateway_threads())
    w = World()
    idle = w.connect()
    busy = w.connect()
    busy.sendall(encode(metadata_v12())[:10])  # mid-frame
    parked = w.connect()
    # A JoinGroup that parks for the initial rebalance delay (the ManualClock never advances here).
    parked.sendall(encode(join_group_v3("parked")))
    wait_for(lambda: w.stats()["requests"].get("JoinGroup") == 1, "the JoinGroup in flight")
    w.gw.stop()
    for sock in (idle, busy, parked):
        assert_closed(sock)
    with pytest.raises(OSError):
        connect(w.gw)
    w.gw.stop()  # idempotent
    assert w.stats()["connections"] == 0
    wait_for(lambda: set(_gateway_threads()) <= before, "the gateway's threads ended")
    w.close()
