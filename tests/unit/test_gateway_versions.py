"""The gateway's version-specific answers, without Ray or sockets: a request of one version is encoded with
``kio`` (as a client would send it), decoded and answered by the gateway's handler over an
``InProcessCoordinator``, encoded, and read back with ``kio`` as the client would read it."""

from __future__ import annotations

import asyncio
import io

import pytest
from kio.serial import entity_reader, entity_writer

from raygroups import Errors, partition_for
from raygroups.gateway import apis, wire
from raygroups.gateway.broker import Broker
from raygroups.gateway.topology import BrokerAddress, SingleListener
from raygroups.testing import InProcessCoordinator

CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10}


class NotHere(SingleListener):
    """A listener that coordinates no group (another node's listener does)."""

    def serves_group(self, group_id: str) -> bool:
        return False


@pytest.fixture
def coordinator():
    with InProcessCoordinator(num_partitions=2, config=CONFIG) as c:
        c.create_topic("t", 2)
        yield c


def _broker(coordinator, topology=None):
    return Broker(coordinator, None, topology or SingleListener(BrokerAddress(0, "127.0.0.1", 9092)), "unit", 1 << 20)


def _send(broker, key: int, version: int, values: dict):
    """The gateway's answer to ``values`` as request ``key`` v``version``, as the client decodes it."""
    schema = wire.request_schema(key, version)
    header_schema = schema.__header_schema__
    out = io.BytesIO()
    entity_writer(header_schema)(out, header_schema(request_api_key=key, request_api_version=version,
                                                    correlation_id=7, client_id="unit"))
    entity_writer(schema)(out, wire.to_entity(schema, values))
    frame = wire.decode_request(out.getvalue())
    answer = asyncio.run(apis.API_TABLE[key].handler(broker, apis.Call(frame, "/127.0.0.1")))
    encoded = wire.encode_response(key, version, 7, wire.response(key, version, answer))
    response_schema = wire.response_schema(key, version)
    header, header_size = entity_reader(response_schema.__header_schema__)(encoded, 4)  # (entity, bytes read)
    assert header.correlation_id == 7
    body, body_size = entity_reader(response_schema)(encoded, 4 + header_size)
    assert 4 + header_size + body_size == len(encoded)
    return body


def _commit(coordinator, group_id, offsets):
    answer = coordinator.commit_offsets(group_id=group_id, offsets=offsets).result()
    assert set(answer.errors.values()) == {Errors.NONE}


# --- OffsetFetch: where a group error goes -----------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 2, 5, 7])
def test_offset_fetch_single_group_answers_offsets(coordinator, version):
    _commit(coordinator, "g", {("t", 0): (5, "m")})
    body = _send(_broker(coordinator), 9, version, {"group_id": "g", "topics": (
        {"name": "t", "partition_indexes": (0, 1)},)})
    [topic] = body.topics
    assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in topic.partitions] == [
        (0, 5, "m", 0), (1, -1, "", 0)]
    if version >= 2:
        assert body.error_code == 0


def test_offset_fetch_v1_puts_the_group_error_on_every_partition(coordinator):
    body = _send(_broker(coordinator, NotHere(BrokerAddress(0, "h", 1))), 9, 1, {"group_id": "g", "topics": (
        {"name": "t", "partition_indexes": (0, 1)}, {"name": "u", "partition_indexes": (3,)})})
    assert [(t.name, p.partition_index, p.committed_offset, p.error_code) for t in body.topics for p in t.partitions] == [
        ("t", 0, -1, Errors.NOT_COORDINATOR), ("t", 1, -1, Errors.NOT_COORDINATOR),
        ("u", 3, -1, Errors.NOT_COORDINATOR)]


@pytest.mark.parametrize("version", [2, 7])
def test_offset_fetch_v2_plus_answers_a_group_error_with_no_topics(coordinator, version):
    coordinator.set_loading_for_testing(partition_for("g", 2), True)
    body = _send(_broker(coordinator), 9, version, {"group_id": "g", "topics": (
        {"name": "t", "partition_indexes": (0,)},)})
    assert body.error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS and body.topics == ()


def test_offset_fetch_v8_answers_each_group_on_its_own(coordinator):
    _commit(coordinator, "a", {("t", 1): (9, "")})
    loading = next(g for g in (f"b{i}" for i in range(100))
                   if partition_for(g, 2) != partition_for("a", 2))
    coordinator.set_loading_for_testing(partition_for(loading, 2), True)
    body = _send(_broker(coordinator), 9, 8, {"require_stable": False, "groups": (
        {"group_id": "a", "topics": None}, {"group_id": loading, "topics": ({"name": "t", "partition_indexes": (0,)},)},
    )})
    a, b = body.groups
    assert (a.group_id, a.error_code) == ("a", 0)
    assert [(t.name, p.partition_index, p.committed_offset) for t in a.topics for p in t.partitions] == [("t", 1, 9)]
    assert (b.group_id, b.error_code, b.topics) == (loading, Errors.COORDINATOR_LOAD_IN_PROGRESS, ())
