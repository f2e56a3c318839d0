"""``KafkaAdminClient`` without Ray: the bootstrap list's rules, and the client against a gateway in front of
an ``InProcessCoordinator`` (retries of coordinator errors, surfaced when the time is up) or against a
listener that never answers (TimeoutError). Its parity with ``cluster.client()`` on a deployment is
tests/gateway/test_kafka_admin.py."""

from __future__ import annotations

import contextlib
import io
import socket
import struct
import threading
import time
from concurrent.futures import Future

import pytest
from kio.index import load_response_schema
from kio.serial import entity_writer
from raygroups.coordinator.messages import DescribeGroupsRequest, OffsetFetchRequest
from raygroups.coordinator.requests import REQUESTS

from raygroups import Errors, admin, gateway
from raygroups.client.kafka_admin import KafkaAdminClient
from raygroups.client.kafka_wire import (
    API_VERSIONS,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    OFFSET_DELETE,
    OFFSET_FETCH,
    BrokerConnection,
    ProtocolError,
    parse_bootstrap,
    to_entity,
)
from raygroups.gateway import GatewayLimits
from raygroups.sources import SyntheticSource
from raygroups.testing import InProcessCoordinator


# --- bootstrap ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("localhost:9092", [("localhost", 9092)]),
    ("a:1, b:65535 ,a:1", [("a", 1), ("b", 65535)]),
    ("[::1]:9092,10.0.0.2:19092", [("::1", 9092), ("10.0.0.2", 19092)]),
])
def test_bootstrap_lists_host_port_pairs_in_order_without_duplicates(text, expected):
    assert parse_bootstrap(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("", "bootstrap is empty"),
    ("  ", "bootstrap is empty"),
    ("localhost", "'localhost' has no port"),
    ("a:1,,b:2", "has an empty entry"),
    (":9092", "':9092' has no valid host"),
    ("my host:9092", "'my host:9092' has no valid host"),
    ("h:0", "the port must be a number 1..65535, got '0'"),
    ("h:65536", "the port must be a number 1..65535, got '65536'"),
    ("h:-1", "got '-1'"),
    ("h:ninety", "got 'ninety'"),
    ("h:", "got ''"),
    ("::1:9092", "an IPv6 host goes in brackets"),
])
def test_a_bad_bootstrap_is_refused_naming_what_is_wrong(text, message):
    with pytest.raises(ValueError, match="bootstrap") as e:
        parse_bootstrap(text)
    assert message in str(e.value)


def test_the_client_refuses_a_bad_bootstrap_or_timeout_before_connecting():
    with pytest.raises(ValueError, match="must be a string"):
        KafkaAdminClient(["localhost:9092"])
    with pytest.raises(ValueError, match="port must be a number 1..65535"):
        KafkaAdminClient("localhost:99999")
    for bad in (0, -1.0, float("inf"), "30", True):
        with pytest.raises(ValueError, match="timeout_s must be a number of seconds > 0"):
            KafkaAdminClient("localhost:9092", timeout_s=bad)


# --- against listeners -------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bootstrap_servers_that_refuse_fail_at_once_naming_each_address():
    a, b = _free_port(), _free_port()
    with KafkaAdminClient(f"127.0.0.1:{a},127.0.0.1:{b}", timeout_s=30) as client:
        with pytest.raises(ConnectionError) as e:
            client.list_groups().result(timeout=10)
    assert str(e.value) == (f"cannot connect to the bootstrap servers 127.0.0.1:{a}: connection refused; "
                            f"127.0.0.1:{b}: connection refused")


def test_a_listener_that_never_answers_is_a_timeout_naming_what_was_awaited():
    with socket.socket() as silent:  # the kernel accepts connections; nothing ever answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with KafkaAdminClient(f"127.0.0.1:{port}", timeout_s=0.3) as client:
            with pytest.raises(TimeoutError, match=rf"the answer of 127\.0\.0\.1:{port} to ApiVersions v3"):
                client.describe_groups(["g"]).result(timeout=10)


def test_a_silent_bootstrap_server_gives_way_to_the_next_one(monkeypatch):
    """Kafka's socket.connection.setup.timeout.ms: a server that never answers (powered off, paused) is given
    its share, then the next bootstrap server is asked, within the call's timeout."""
    import raygroups.client.kafka_admin as kafka_admin

    monkeypatch.setattr(kafka_admin, "CONNECT_TIMEOUT_S", 0.3)
    coordinator = InProcessCoordinator(num_partitions=2)
    coordinator.commit_offsets(group_id="g", offsets={("events", 1): (7, "")}).result()
    with socket.socket() as silent, _gateway(coordinator) as gw:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        with KafkaAdminClient(f"127.0.0.1:{silent.getsockname()[1]},{gw.bootstrap_servers}", timeout_s=20) as client:
            fetched = client.fetch_offsets(group_id="g").result(timeout=30)
    assert {tp: o.offset for tp, o in fetched.offsets.items()} == {("events", 1): 7}


class _Unavailable(InProcessCoordinator):
    """Answers the first ``failures`` DescribeGroups and OffsetFetch requests with ``error``."""

    def __init__(self, failures: int, error: Errors) -> None:
        super().__init__(num_partitions=2)
        self.failures, self.error, self.refused = failures, error, 0

    def _submit(self, request, validated=False) -> Future:
        if isinstance(request, DescribeGroupsRequest | OffsetFetchRequest) and self.refused < self.failures:
            self.refused += 1
            future: Future = Future()
            future.set_result(REQUESTS.spec(request).error_response(request, self.error))
            return future
        return super()._submit(request, validated)


@contextlib.contextmanager
def _gateway(coordinator, limits=None):
    gw = gateway.start(coordinator, source=SyntheticSource({"events": 2}, records_per_partition=10), limits=limits)
    try:
        yield gw
    finally:
        gw.stop()


@pytest.mark.parametrize("error", [Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE,
                                   Errors.COORDINATOR_LOAD_IN_PROGRESS])
def test_coordinator_errors_are_retried_until_the_coordinator_answers(error):
    coordinator = _Unavailable(failures=2, error=error)
    coordinator.commit_offsets(group_id="g", offsets={("events", 0): (5, "m")}).result()
    with _gateway(coordinator) as gw, KafkaAdminClient(gw.bootstrap_servers, timeout_s=20) as client:
        fetched = client.fetch_offsets(group_id="g").result(timeout=30)
    assert coordinator.refused == 2
    assert fetched.error is Errors.NONE
    assert {tp: (o.offset, o.metadata) for tp, o in fetched.offsets.items()} == {("events", 0): (5, "m")}


def test_a_coordinator_that_stays_unavailable_is_answered_with_its_error_when_the_time_is_up():
    coordinator = _Unavailable(failures=10**6, error=Errors.COORDINATOR_NOT_AVAILABLE)
    with _gateway(coordinator) as gw, KafkaAdminClient(gw.bootstrap_servers, timeout_s=0.5) as client:
        (described,) = client.describe_groups(["g"]).result(timeout=10)
        assert described.error is Errors.COORDINATOR_NOT_AVAILABLE
        assert coordinator.refused >= 2  # retried, not given up at once
        # What admin.py makes of it: the deployment is Unreachable (the CLI's exit code 3).
        with pytest.raises(admin.Unreachable, match="COORDINATOR_NOT_AVAILABLE"):
            admin.describe_group(client, "g", timeout_s=10)


def test_the_member_apis_are_refused_before_anything_is_sent():
    client = KafkaAdminClient(f"127.0.0.1:{_free_port()}")
    try:
        with pytest.raises(NotImplementedError, match="admin APIs only .* not HeartbeatRequest"):
            client.heartbeat(group_id="g", generation_id=1, member_id="m")
    finally:
        client.close()


def test_a_connection_the_listener_closed_while_idle_is_replaced_before_the_next_request():
    coordinator = InProcessCoordinator(num_partitions=2)
    coordinator.commit_offsets(group_id="g", offsets={("events", 1): (9, "")}).result()
    limits = GatewayLimits(connections_max_idle_ms=50)
    with _gateway(coordinator, limits) as gw, KafkaAdminClient(gw.bootstrap_servers, timeout_s=10) as client:
        assert [g.group_id for g in client.list_groups().result(timeout=20).groups] == ["g"]
        deadline = time.monotonic() + 10
        while gw.stats()["closed_connections"].get("idle", 0) < 1:
            assert time.monotonic() < deadline, f"the gateway closed no idle connection: {gw.stats()}"
            time.sleep(0.01)
        fetched = client.fetch_offsets(group_id="g").result(timeout=20)
        assert fetched.error is Errors.NONE and fetched.offsets[("events", 1)].offset == 9


# --- versions ----------------------------------------------------------------------------------------
def test_each_api_goes_at_the_highest_version_both_sides_speak():
    connection = BrokerConnection("h", 1, "test")
    connection.versions = {OFFSET_FETCH: (0, 7), LIST_GROUPS: (0, 9), DESCRIBE_GROUPS: (6, 9)}
    assert connection.version_for(OFFSET_FETCH) == 7  # theirs is lower
    assert connection.version_for(LIST_GROUPS) == 5  # ours is lower
    with pytest.raises(ProtocolError, match=r"h:1 serves DescribeGroups v6\.\.v9 and this client v0\.\.v5: no "
                                            r"version in common"):
        connection.version_for(DESCRIBE_GROUPS)
    with pytest.raises(ProtocolError, match=r"h:1 does not serve OffsetDelete \(absent from its ApiVersions\)"):
        connection.version_for(OFFSET_DELETE)


def _answer(sock, api_key: int, version: int, values: dict) -> int:
    """Read one request frame from ``sock`` and answer it with ``values`` at ``version``; its version."""
    (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
    frame = sock.recv(size, socket.MSG_WAITALL)
    asked, version_asked, correlation_id = struct.unpack_from(">hhi", frame)
    assert asked == api_key
    schema = load_response_schema(api_key, version)
    buffer = io.BytesIO()
    entity_writer(schema.__header_schema__)(buffer, schema.__header_schema__(correlation_id=correlation_id))
    entity_writer(schema)(buffer, to_entity(schema, values))
    sock.sendall(struct.pack(">i", len(buffer.getvalue())) + buffer.getvalue())
    return version_asked


def test_a_listener_without_our_api_versions_version_is_asked_again_at_its_highest():
    """KIP-511: a listener answers an ApiVersions version it does not speak with UNSUPPORTED_VERSION in a v0
    body that lists its own range; the client asks again at the highest version both speak."""
    served = {"api_keys": ({"api_key": API_VERSIONS, "min_version": 0, "max_version": 2},
                           {"api_key": OFFSET_FETCH, "min_version": 1, "max_version": 6})}
    asked = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)

        def listener():
            sock, _ = server.accept()
            with sock:
                asked.append(_answer(sock, API_VERSIONS, 0, {"error_code": Errors.UNSUPPORTED_VERSION, **served}))
                asked.append(_answer(sock, API_VERSIONS, 2, {"error_code": Errors.NONE, "throttle_time": 0,
                                                              **served}))

        thread = threading.Thread(target=listener, daemon=True)
        thread.start()
        connection = BrokerConnection("127.0.0.1", server.getsockname()[1], "test")
        connection.open(time.monotonic() + 10)
        thread.join(10)
    connection.close()
    assert asked == [3, 2]
    assert connection.versions == {API_VERSIONS: (0, 2), OFFSET_FETCH: (1, 6)}
    assert connection.version_for(OFFSET_FETCH) == 6
