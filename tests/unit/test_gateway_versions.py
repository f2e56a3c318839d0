"""The gateway's version-specific answers, without Ray or sockets: a request of one version is encoded with
``kio`` (as a client would send it), decoded and answered by the gateway's handler over an
``InProcessCoordinator``, encoded, and read back with ``kio`` as the client would read it."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import io
import types
import typing
import uuid

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


class Serves(SingleListener):
    """A listener that coordinates only some groups (the others' listeners coordinate the rest)."""

    def __init__(self, groups):
        super().__init__(BrokerAddress(0, "h", 1))
        self.groups = set(groups)

    def serves_group(self, group_id: str) -> bool:
        return group_id in self.groups


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
    answer = asyncio.run(_answer(broker, frame))
    if answer is None:
        return None
    encoded = wire.encode_response(key, version, 7, wire.response(key, version, answer))
    response_schema = wire.response_schema(key, version)
    header, header_size = entity_reader(response_schema.__header_schema__)(encoded, 4)  # (entity, bytes read)
    assert header.correlation_id == 7
    body, body_size = entity_reader(response_schema)(encoded, 4 + header_size)
    assert 4 + header_size + body_size == len(encoded)
    return body


async def _answer(broker, frame):
    """The handler's answer; the coordinator's manual clock moves on while it waits (rebalance timers)."""
    task = asyncio.ensure_future(apis.API_TABLE[frame.api_key].handler(broker, apis.Call(frame, "/127.0.0.1")))
    while not task.done():
        await asyncio.sleep(0)
        broker.cluster.clock.advance(100)
    return task.result()


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


# --- LeaveGroup and JoinGroup: before and after their batch / known-member versions ---------------------------
def _join(broker, version, group_id="g", member_id=""):
    values = {"group_id": group_id, "session_timeout": 10_000, "rebalance_timeout": 10_000, "member_id": member_id,
              "group_instance_id": None, "protocol_type": "consumer", "reason": None,
              "protocols": ({"name": "range", "metadata": b"\0\0\0\0\0\0\0\0\0\0"},)}
    return _send(broker, 11, version, values)


def test_join_group_requires_a_known_member_id_from_v4_only(coordinator):
    broker = _broker(coordinator)
    joined = _join(broker, 3, "old")
    assert joined.error_code == 0 and joined.generation_id == 1 and joined.leader == joined.member_id != ""
    first = _join(broker, 4, "new")
    assert first.error_code == Errors.MEMBER_ID_REQUIRED and first.member_id != ""
    second = _join(broker, 4, "new", first.member_id)
    assert (second.error_code, second.generation_id, second.member_id) == (0, 1, first.member_id)
    assert [m.member_id for m in second.members] == [first.member_id]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_leave_group_v0_to_2_answers_its_one_member_at_the_top(coordinator, version):
    broker = _broker(coordinator)
    member = _join(broker, 3).member_id
    stranger = _send(broker, 13, version, {"group_id": "g", "member_id": "someone-else"})
    assert stranger.error_code == Errors.UNKNOWN_MEMBER_ID
    left = _send(broker, 13, version, {"group_id": "g", "member_id": member})
    assert left.error_code == 0
    assert coordinator.describe_groups(["g"]).result()[0].group_state == "Empty"


@pytest.mark.parametrize("version", [3, 4, 5])
def test_leave_group_v3_plus_answers_each_member(coordinator, version):
    broker = _broker(coordinator)
    member = _join(broker, 3).member_id
    left = _send(broker, 13, version, {"group_id": "g", "members": (
        {"member_id": member, "group_instance_id": None, "reason": "done"},
        {"member_id": "someone-else", "group_instance_id": None, "reason": None})})
    assert left.error_code == 0
    assert [(m.member_id, m.error_code) for m in left.members] == [(member, 0), ("someone-else", Errors.UNKNOWN_MEMBER_ID)]


def test_leave_group_v0_names_not_coordinator_at_the_top(coordinator):
    body = _send(_broker(coordinator, NotHere(BrokerAddress(0, "h", 1))), 13, 0, {"group_id": "g", "member_id": "m"})
    assert body.error_code == Errors.NOT_COORDINATOR


# --- FindCoordinator: one key (v0-3) and a batch of keys (v4+) ------------------------------------------------
@pytest.mark.parametrize("version", [0, 1, 3])
def test_find_coordinator_single_key(coordinator, version):
    body = _send(_broker(coordinator), 10, version, {"key": "g", "key_type": 0})
    assert (body.error_code, body.node_id, body.host, body.port) == (0, 0, "127.0.0.1", 9092)


def test_find_coordinator_v4_answers_every_key(coordinator):
    body = _send(_broker(coordinator), 10, 4, {"key_type": 0, "coordinator_keys": ("a", "b")})
    assert [(c.key, c.error_code, c.node_id, c.port) for c in body.coordinators] == [("a", 0, 0, 9092), ("b", 0, 0, 9092)]
    transactional = _send(_broker(coordinator), 10, 4, {"key_type": 1, "coordinator_keys": ("tx",)})
    assert [(c.key, c.error_code) for c in transactional.coordinators] == [("tx", Errors.COORDINATOR_NOT_AVAILABLE)]


# --- every served version of every API answers something its client can read --------------------------------
def _blank(hint):
    """The plainest value of a kio field type: null where nullable, empty, zero."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return None
    if typing.get_origin(hint) is tuple:
        return ()
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return {f.name: _blank(hints[f.name]) for f in dataclasses.fields(hint)}
    for kind, value in ((bool, False), (datetime.timedelta, 0), (uuid.UUID, 0), (str, ""), (bytes, b""), (int, 0)):
        if isinstance(hint, type) and issubclass(hint, kind):
            return value
    raise AssertionError(f"no blank value for {hint!r}")


@pytest.mark.parametrize("key, version", [(api.key, v) for api in apis.API_TABLE.values()
                                          for v in range(api.min_version, api.max_version + 1)])
def test_every_served_version_answers_a_blank_request(coordinator, key, version):
    """A request of that version with empty and zero fields decodes, is answered, and the answer encodes in
    that version's schema and reads back (a refused Produce with acks=0 closes the connection instead, as
    Kafka's KafkaApis.handleProduceRequest does: a producer that reads no answers notices that)."""
    if key == 0:
        with pytest.raises(apis.CloseConnection, match="acks=0"):
            _send(_broker(coordinator), key, version, _blank(wire.request_schema(key, version)))
        return
    body = _send(_broker(coordinator), key, version, _blank(wire.request_schema(key, version)))
    assert type(body) is wire.response_schema(key, version)


# --- ListOffsets from a source -----------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 4, 8])
def test_list_offsets_answers_bounds_and_times(coordinator, version):
    from raygroups.sources import SyntheticSource

    source = SyntheticSource({"s": 5}, records_per_partition=25)
    broker = Broker(coordinator, source, SingleListener(BrokerAddress(0, "127.0.0.1", 9092)), "unit", 1 << 20)
    now_ms = int(source.created_at * 1000)
    wanted = ((0, -1), (1, -2), (2, now_ms - 60_000), (3, now_ms + 3_600_000), (4, 2**63 - 1), (5, -1))
    body = _send(broker, 2, version, {"replica_id": -1, "isolation_level": 0, "topics": (
        {"name": "s", "partitions": tuple({"partition_index": p, "current_leader_epoch": -1, "timestamp": t}
                                          for p, t in wanted)},
        {"name": "unknown", "partitions": ({"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1},)})})
    answers = [(t.name, p.partition_index, p.error_code, p.offset, p.timestamp) for t in body.topics for p in t.partitions]
    assert answers == [
        ("s", 0, 0, 25, -1),  # latest: the high watermark
        ("s", 1, 0, 0, -1),  # earliest: the log start offset
        ("s", 2, 0, 0, now_ms - 60_000),  # before every record: the first one
        ("s", 3, 0, -1, -1),  # after every record: Kafka's unknown offset and timestamp
        ("s", 4, 0, -1, -1),
        ("s", 5, Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        ("unknown", 0, Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]
    broker.close()


# --- Fetch from a source ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_serves_record_batches_from_a_source(coordinator, version):
    from kio.records.readers import read_batch

    from raygroups.gateway.records import LOG_APPEND_TIME
    from raygroups.sources import SyntheticSource

    source = SyntheticSource({"f": 4}, records_per_partition=10)
    broker = Broker(coordinator, source, SingleListener(BrokerAddress(0, "127.0.0.1", 9092)), "unit", 1 << 20)
    partition = {"current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}
    body = _send(broker, 1, version, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": (), "rack_id": "",
        "topics": ({"topic": "f", "partitions": tuple({**partition, "partition": p, "fetch_offset": o}
                                                      for p, o in ((0, 3), (1, 10), (2, 11), (9, 0)))},)})
    if version >= 7:  # KIP-227's fields; no fetch session is kept
        assert (body.error_code, body.session_id) == (0, 0)
    [topic] = body.responses
    answers = {p.partition_index: p for p in topic.partitions}
    assert {i: (p.error_code, p.high_watermark) for i, p in answers.items()} == {
        0: (0, 10), 1: (0, 10), 2: (Errors.OFFSET_OUT_OF_RANGE, 10), 9: (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1)}
    assert not answers[1].records and not answers[2].records
    batch, size = read_batch(answers[0].records, 0)  # its CRC-32C is checked as it is read
    assert size == len(answers[0].records)
    assert (batch.base_offset, batch.last_offset_delta, batch.attributes & LOG_APPEND_TIME) == (3, 6, LOG_APPEND_TIME)
    assert [(r.offset, r.key, r.value) for r in batch.records] == [
        (o, f"f-0-{o}".encode(), SyntheticSource.value_of("f", 0, o)) for o in range(3, 10)]
    broker.close()


# --- authorized operations (KIP-430): answered when asked ---------------------------------------------------------
@pytest.mark.parametrize("asked", [False, True])
def test_authorized_operations_only_when_asked(coordinator, asked):
    broker = _broker(coordinator)
    not_asked = apis.NO_AUTHORIZED_OPERATIONS
    groups = _send(broker, 15, 5, {"groups": ("g",), "include_authorized_operations": asked}).groups
    # READ 3, DELETE 6, DESCRIBE 8 for groups; READ and DESCRIBE for topics; DESCRIBE for the cluster.
    assert [g.authorized_operations for g in groups] == [(1 << 3 | 1 << 6 | 1 << 8) if asked else not_asked]
    coordinator.create_topic("m", 1)
    metadata = _send(broker, 3, 10, {"topics": ({"name": "m", "topic_id": 0},), "allow_auto_topic_creation": False,
                                     "include_cluster_authorized_operations": asked,
                                     "include_topic_authorized_operations": asked})
    assert [t.topic_authorized_operations for t in metadata.topics] == [(1 << 3 | 1 << 8) if asked else not_asked]
    assert metadata.cluster_authorized_operations == (1 << 8 if asked else not_asked)
    cluster = _send(broker, 60, 0, {"include_cluster_authorized_operations": asked})
    assert cluster.cluster_authorized_operations == (1 << 8 if asked else not_asked)


# --- a listener among several answers for its own groups only -------------------------------------------------
def test_list_and_describe_groups_answer_for_the_listeners_own_groups(coordinator):
    for group in ("mine", "theirs"):
        _commit(coordinator, group, {("t", 0): (1, "")})
    broker = _broker(coordinator, Serves({"mine"}))
    for version in (0, 4, 5):
        listed = _send(broker, 16, version, {"states_filter": (), "types_filter": ()})
        assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("mine", "")]
    described = _send(broker, 15, 0, {"groups": ("mine", "theirs")}).groups
    assert [(g.group_id, g.error_code, g.group_state) for g in described] == [
        ("mine", 0, "Empty"), ("theirs", Errors.NOT_COORDINATOR, "")]
    deleted = _send(broker, 42, 2, {"groups_names": ("theirs", "mine")}).results
    assert [(d.group_id, d.error_code) for d in deleted] == [("theirs", Errors.NOT_COORDINATOR), ("mine", 0)]


@pytest.mark.parametrize(("endpoint_type", "error"), [
    (1, Errors.NONE), (2, Errors.MISMATCHED_ENDPOINT_TYPE), (7, Errors.UNSUPPORTED_ENDPOINT_TYPE)])
def test_describe_cluster_lists_brokers_and_refuses_other_endpoint_types(coordinator, endpoint_type, error):
    # AuthHelper.computeDescribeClusterResponse (KIP-919): a broker answers for endpoint type 1 only.
    body = _send(_broker(coordinator), 60, 1, {"include_cluster_authorized_operations": False,
                                               "endpoint_type": endpoint_type})
    assert body.error_code == error and body.endpoint_type == 1
    assert [(b.broker_id, b.host, b.port) for b in body.brokers] == ([(0, "127.0.0.1", 9092)] if error is Errors.NONE
                                                                     else [])
    assert (body.error_message is None) == (error is Errors.NONE)
