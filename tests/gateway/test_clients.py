"""Unmodified Kafka clients from PyPI (confluent-kafka on librdkafka, kafka-python, aiokafka) against one
gateway in front of a local deployment: consumer groups join, split, rebalance and commit; admin clients
list, describe, read, alter and delete; offsets agree with ``cluster.client()`` both ways; a producer is
refused cleanly. Every test has its own group ids and topic, so the order of the tests does not matter."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from raygroups import Errors
from raygroups.sources import SyntheticSource

pytestmark = [
    pytest.mark.ray,
    # kafka-python 3.0 loads its message schemas with importlib.resources' legacy calls.
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

RECORDS = 30  # records per partition of every source topic
TOPICS = {"split": 4, "kpy": 2, "aio": 3, "cadmin": 2, "parity": 4, "refused": 1, "coop": 3, "fenced": 3, "k848": 6}
CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10, "request.timeout.ms": 20_000,
          # KIP-848 members heartbeat at the interval the coordinator gives them (5 s by default).
          "group.consumer.heartbeat.interval.ms": 300, "group.consumer.min.heartbeat.interval.ms": 100}
SESSION = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "topic.metadata.refresh.interval.ms": 1000,
           "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 50}
QUIET = logging.getLogger("tests.gateway.librdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False
DEADLINE_S = 60.0
_RUNNING: dict = {}  # the module's deployment and gateway, for the report of a wait that timed out


def _timed_out(what: str) -> AssertionError:
    """A wait's failure with what the gateway served and the groups' states (a client's own logs are off)."""
    cluster, gw = _RUNNING["cluster"], _RUNNING["gateway"]
    try:
        groups = [(g.group_id, g.group_state) for g in cluster.client().list_groups().result(30).groups]
    except Exception as e:  # the report must not hide the timeout
        groups = repr(e)
    return AssertionError(f"timed out after {DEADLINE_S}s waiting for {what}; gateway: {gw.stats()}; groups: {groups}")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """One deployment and one gateway for the module: ``(cluster, gateway)``."""
    import raygroups
    from raygroups import gateway

    loggers = [logging.getLogger(name) for name in ("kafka", "aiokafka")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:  # their connection errors and retries are theirs to handle, not news here
        logger.setLevel(logging.CRITICAL)
    cluster = raygroups.start_local(num_partitions=4, data_dir=tmp_path_factory.mktemp("data"), config=CONFIG,
                                    namespace=f"gw-{uuid.uuid4().hex[:8]}")
    try:
        gw = gateway.start(cluster, source=SyntheticSource(TOPICS, records_per_partition=RECORDS))
        try:
            _RUNNING.update(cluster=cluster, gateway=gw)
            yield cluster, gw
        finally:
            _RUNNING.clear()
            gw.stop()
    finally:
        cluster.shutdown()
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _confluent(gw, **extra):
    return {"bootstrap.servers": gw.bootstrap_servers, "logger": QUIET, "log_level": 0, **extra}


def _consumer(gw, group_id, **extra):
    from confluent_kafka import Consumer

    return Consumer(_confluent(gw, **{"group.id": group_id, "auto.offset.reset": "earliest",
                                      "enable.auto.commit": False, **SESSION, **extra}))


def _committed(cluster, group_id, topic):
    """{partition: committed offset} of ``group_id`` for ``topic``, read through the Python API."""
    answer = cluster.client().fetch_offsets(group_id=group_id).result(30)
    assert answer.error is Errors.NONE
    return {p: o.offset for (t, p), o in answer.offsets.items() if t == topic}


def _state(cluster, group_id):
    described = cluster.client().describe_groups([group_id]).result(30)[0]
    return described.group_state, len(described.members)


def _poll_until(consumers, condition, what, on_message=None):
    """Poll every consumer in turn (each must keep polling to take part in a rebalance) until
    ``condition()`` holds; every message goes to ``on_message(consumer, message)``."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise _timed_out(what)
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and not m.error() and on_message is not None:
                on_message(c, m)


def _partitions(consumer):
    return {tp.partition for tp in consumer.assignment()}


# --- KIP-848: a confluent-kafka group with group.protocol=consumer -----------------------------------------
def test_confluent_consumer_protocol_group_reconciles_without_stopping_the_others(deployment):
    """librdkafka's KIP-848 consumer (``group.protocol=consumer``): two members split the topic; a third joins
    while the two keep their partitions (no group-wide barrier: neither is ever left with none); the split
    stays disjoint; one closes and the others take its partitions; commits and ConsumerGroupDescribe agree."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    cluster, gw = deployment
    group, topic = "kip848", "k848"

    def member():
        c = Consumer(_confluent(gw, **{"group.id": group, "group.protocol": "consumer",
                                       "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                       "topic.metadata.refresh.interval.ms": 1000, "retry.backoff.ms": 50}))
        c.subscribe([topic])
        return c

    def split(consumers):
        parts = [_partitions(c) for c in consumers]
        union = set().union(*parts)
        return parts if union == set(range(6)) and sum(map(len, parts)) == 6 and all(parts) else None

    a, b = member(), member()
    c = None
    try:
        _poll_until([a, b], lambda: split([a, b]), "two KIP-848 members to split the topic")
        c = member()
        smallest = {"a": 6, "b": 6}
        deadline = time.monotonic() + DEADLINE_S
        # Until the three hold two each (a split of 1/2/3 on the way is a reconciliation in progress: the
        # newcomer already has what was released while another member still revokes).
        while not (split([a, b, c]) and sorted(len(_partitions(x)) for x in (a, b, c)) == [2, 2, 2]):
            if time.monotonic() > deadline:
                raise _timed_out("a third KIP-848 member to get its share")
            for consumer in (a, b, c):
                consumer.poll(0.05)
            smallest["a"] = min(smallest["a"], len(_partitions(a)))
            smallest["b"] = min(smallest["b"], len(_partitions(b)))
        assert smallest["a"] > 0 and smallest["b"] > 0, smallest  # they kept consuming throughout
        assert sorted(len(_partitions(x)) for x in (a, b, c)) == [2, 2, 2]
        for x in (a, b, c):
            x.commit(offsets=[TopicPartition(topic, p, 7) for p in _partitions(x)], asynchronous=False)
        assert _committed(cluster, group, topic) == dict.fromkeys(range(6), 7)
        (described,) = cluster.client().consumer_group_describe([group]).result(30)
        assert described.group_state == "Stable" and len(described.members) == 3
        assert {m.member_epoch for m in described.members} == {described.assignment_epoch}
        admin = AdminClient(_confluent(gw))
        (future,) = admin.describe_consumer_groups([group]).values()
        seen = future.result(30)
        assert len(seen.members) == 3 and str(seen.state).endswith("STABLE")
        c.close()
        c = None
        _poll_until([a, b], lambda: split([a, b]), "the two left to take the third one's partitions")
    finally:
        for x in (a, b, c):
            if x is not None:
                x.close()
    assert cluster.client().consumer_group_describe([group]).result(30)[0].group_state == "Empty"


# --- 1. a confluent-kafka group of two -------------------------------------------------------------------
def test_confluent_group_of_two_splits_then_one_takes_over(deployment):
    from confluent_kafka import TopicPartition

    cluster, gw = deployment
    group = "confluent-two"
    a, b = _consumer(gw, group), _consumer(gw, group)
    try:
        a.subscribe(["split"])
        b.subscribe(["split"])
        first: dict[int, int] = {}

        def note(consumer, m):
            first.setdefault(m.partition(), m.offset())

        _poll_until([a, b], lambda: _partitions(a) and _partitions(b), "both members to be assigned")
        assert _partitions(a).isdisjoint(_partitions(b))
        assert _partitions(a) | _partitions(b) == {0, 1, 2, 3}
        assert _state(cluster, group) == ("Stable", 2)
        held_by_a = _partitions(a)

        # b reads its partitions to the end and commits them; a commits offset 10 on its own.
        ends: dict[int, int] = {}
        _poll_until([a, b], lambda: all(ends.get(p) == RECORDS - 1 for p in _partitions(b)), "b to read its share",
                    on_message=lambda c, m: ends.__setitem__(m.partition(), m.offset()) if c is b else None)
        b.commit(asynchronous=False)
        a.commit(offsets=[TopicPartition("split", p, 10) for p in held_by_a], asynchronous=False)
        assert _committed(cluster, group, "split") == {p: RECORDS if p not in held_by_a else 10 for p in range(4)}

        a.close()
        first.clear()
        _poll_until([b], lambda: _partitions(b) == {0, 1, 2, 3}, "b to take over every partition", on_message=note)
        assert _state(cluster, group) == ("Stable", 1)
        ends.clear()
        _poll_until([b], lambda: all(ends.get(p) == RECORDS - 1 for p in held_by_a), "b to read a's share",
                    on_message=lambda c, m: (note(c, m), ends.__setitem__(m.partition(), m.offset())))
        assert {p: first[p] for p in held_by_a} == dict.fromkeys(held_by_a, 10)  # resumed where a committed
        assert set(first) == held_by_a  # b's own partitions had nothing left past its commit
        b.commit(asynchronous=False)
        committed = b.committed([TopicPartition("split", p) for p in range(4)], timeout=30)
        assert [(tp.partition, tp.offset) for tp in committed] == [(p, RECORDS) for p in range(4)]
    finally:
        a.close()
        b.close()
    assert _committed(cluster, group, "split") == dict.fromkeys(range(4), RECORDS)
    assert _state(cluster, group) == ("Empty", 0)


# --- 2. kafka-python: a consumer and its KafkaAdminClient --------------------------------------------------
def _kafka_python_consumer(gw, group_id, topic):
    from kafka import KafkaConsumer

    return KafkaConsumer(topic, bootstrap_servers=gw.bootstrap_servers, group_id=group_id,
                         auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                         heartbeat_interval_ms=300, retry_backoff_ms=50, metadata_max_age_ms=1000)


def _read_to_end(poll, partitions, what):
    """Poll (``poll()`` -> records) until every partition in ``partitions`` was read to its last record;
    returns {partition: [offsets]}."""
    seen: dict[int, list[int]] = {p: [] for p in partitions}
    deadline = time.monotonic() + DEADLINE_S
    while not all(seen[p] and seen[p][-1] == RECORDS - 1 for p in partitions):
        if time.monotonic() > deadline:
            raise _timed_out(f"{what} (read {seen})")
        for record in poll():
            seen[record.partition].append(record.offset)
    return seen


def test_kafka_python_consumer_and_admin(deployment):
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.structs import OffsetAndMetadata

    cluster, gw = deployment
    group, idle = "kpy-group", "kpy-idle"
    consumer = _kafka_python_consumer(gw, group, "kpy")
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap_servers, retry_backoff_ms=50)
    try:
        # The topic's metadata first: a kafka-python 3.0 leader that assigns before it knows the topic hands out
        # an empty assignment, rejoins, and can then stall with the new one never applied. A broker's initial
        # rebalance delay usually hides that race; this deployment's is 0.
        assert consumer.partitions_for_topic("kpy") == {0, 1}

        def poll():
            return [r for records in consumer.poll(timeout_ms=100).values() for r in records]

        seen = _read_to_end(poll, (0, 1), "the kafka-python consumer to read both partitions")
        assert seen == {p: list(range(RECORDS)) for p in (0, 1)}
        consumer.commit()
        assert _committed(cluster, group, "kpy") == {0: RECORDS, 1: RECORDS}
        assert consumer.committed(TopicPartition("kpy", 1)) == RECORDS

        # An empty group with offsets only, committed through the Python API.
        assert cluster.client().commit_offsets(group_id=idle, offsets={("kpy", 0): (5, "")}).result(30).errors == {
            ("kpy", 0): Errors.NONE}

        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed[group]["protocol_type"] == "consumer" and listed[group]["group_state"] == "Stable"
        assert listed[idle]["group_state"] == "Empty"
        described = admin.describe_groups([group, idle])
        assert described[group]["error"] is None and described[group]["group_state"] == "Stable"
        assert sorted(described[group]["authorized_operations"]) == ["DELETE", "DESCRIBE", "READ"]
        assert described[group]["protocol_type"] == "consumer" and described[group]["protocol_data"] == "range"
        [member] = described[group]["members"]
        assert member["client_host"] == "/127.0.0.1" and member["member_metadata"]["topics"] == ["kpy"]
        assert member["member_assignment"]["assigned_partitions"] == [{"topic": "kpy", "partitions": [0, 1]}]
        assert described[idle]["group_state"] == "Empty" and described[idle]["members"] == []

        offsets = admin.list_group_offsets([group, idle])
        assert {tp: o.offset for tp, o in offsets[group].items()} == {
            TopicPartition("kpy", 0): RECORDS, TopicPartition("kpy", 1): RECORDS}
        assert {tp: o.offset for tp, o in offsets[idle].items()} == {TopicPartition("kpy", 0): 5}

        assert admin.delete_groups([group, idle]) == {group: "NonEmptyGroupError", idle: "OK"}
        assert _state(cluster, idle) == ("Dead", 0)
        # An admin commit (no member) to a group with members is refused; OffsetDelete of a subscribed topic too.
        altered = admin.alter_group_offsets(group, {TopicPartition("kpy", 0): OffsetAndMetadata(3, "", None)})
        assert altered[TopicPartition("kpy", 0)].errno == Errors.UNKNOWN_MEMBER_ID
        refused = admin.delete_group_offsets(group, [TopicPartition("kpy", 0)])
        assert refused[TopicPartition("kpy", 0)].errno == Errors.GROUP_SUBSCRIBED_TO_TOPIC

        consumer.close()
        assert _state(cluster, group) == ("Empty", 0)
        altered = admin.alter_group_offsets(group, {TopicPartition("kpy", 0): OffsetAndMetadata(3, "meta", None),
                                                    TopicPartition("kpy", 2): OffsetAndMetadata(1, "", None),
                                                    TopicPartition("nowhere", 0): OffsetAndMetadata(1, "", None)})
        assert {tp: e.errno for tp, e in altered.items()} == {
            TopicPartition("kpy", 0): 0, TopicPartition("kpy", 2): Errors.UNKNOWN_TOPIC_OR_PARTITION,
            TopicPartition("nowhere", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
        deleted = admin.delete_group_offsets(group, [TopicPartition("kpy", 1)])
        assert deleted[TopicPartition("kpy", 1)].errno == 0
        after = admin.list_group_offsets(group)[group]
        assert {tp: (o.offset, o.metadata) for tp, o in after.items()} == {TopicPartition("kpy", 0): (3, "meta")}
        assert admin.delete_groups([group]) == {group: "OK"}
        assert _committed(cluster, group, "kpy") == {}
    finally:
        consumer.close()
        admin.close()


# --- 3. aiokafka (old versions: ApiVersions v0, FindCoordinator v1, OffsetCommit/Fetch v3, LeaveGroup v1) ------
def test_aiokafka_consumer_joins_consumes_commits(deployment):
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    cluster, gw = deployment
    group = "aio-group"

    async def run():
        consumer = AIOKafkaConsumer("aio", bootstrap_servers=gw.bootstrap_servers, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                                    heartbeat_interval_ms=300, retry_backoff_ms=50, metadata_max_age_ms=1000)
        await consumer.start()
        try:
            seen: dict[int, list[int]] = {p: [] for p in range(3)}
            deadline = time.monotonic() + DEADLINE_S
            while not all(offsets and offsets[-1] == RECORDS - 1 for offsets in seen.values()):
                if time.monotonic() > deadline:
                    raise _timed_out(f"aiokafka to read every partition (read {seen})")
                for tp, records in (await consumer.getmany(timeout_ms=100)).items():
                    seen[tp.partition] += [r.offset for r in records]
                    assert all(r.value == SyntheticSource.value_of("aio", tp.partition, r.offset) for r in records)
            assert consumer.assignment() == {TopicPartition("aio", p) for p in range(3)}
            assert seen == {p: list(range(RECORDS)) for p in range(3)}
            assert _state(cluster, group) == ("Stable", 1)
            await consumer.commit({TopicPartition("aio", 0): 7, TopicPartition("aio", 1): RECORDS})
            assert await consumer.committed(TopicPartition("aio", 0)) == 7
            assert await consumer.committed(TopicPartition("aio", 2)) is None
        finally:
            await consumer.stop()

    asyncio.run(run())
    assert _committed(cluster, group, "aio") == {0: 7, 1: RECORDS}
    assert _state(cluster, group) == ("Empty", 0)


# --- 4. confluent's AdminClient ------------------------------------------------------------------------------
def test_confluent_admin_client(deployment):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
    from confluent_kafka.admin import AclOperation, AdminClient

    cluster, gw = deployment
    group, idle = "cadmin-group", "cadmin-idle"
    admin = AdminClient(_confluent(gw))
    consumer = _consumer(gw, group)
    try:
        consumer.subscribe(["cadmin"])
        ends: dict[int, int] = {}
        _poll_until([consumer], lambda: ends == {0: RECORDS - 1, 1: RECORDS - 1}, "the consumer to read cadmin",
                    on_message=lambda c, m: ends.__setitem__(m.partition(), m.offset()))
        consumer.commit(asynchronous=False)
        assert cluster.client().commit_offsets(group_id=idle, offsets={("cadmin", 1): (4, "x")}).result(30).errors == {
            ("cadmin", 1): Errors.NONE}

        listed = {g.group_id: g for g in admin.list_consumer_groups(request_timeout=30).result(30).valid}
        assert listed[group].state is ConsumerGroupState.STABLE and not listed[group].is_simple_consumer_group
        assert listed[idle].state is ConsumerGroupState.EMPTY
        stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(30).valid
        assert group in {g.group_id for g in stable} and idle not in {g.group_id for g in stable}

        described = {g: f.result(30) for g, f in admin.describe_consumer_groups(
            [group, idle], include_authorized_operations=True).items()}
        assert set(described[group].authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE,
                                                                 AclOperation.DELETE}
        assert admin.describe_cluster(include_authorized_operations=True).result(30).authorized_operations == [
            AclOperation.DESCRIBE]
        assert described[group].state is ConsumerGroupState.STABLE and described[group].partition_assignor == "range"
        [member] = described[group].members
        assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) == [
            ("cadmin", 0), ("cadmin", 1)]
        assert described[group].coordinator.host == gw.bootstrap_servers.split(":")[0]
        assert described[idle].state is ConsumerGroupState.EMPTY and described[idle].members == []

        def offsets(g, partitions=None):
            request = ConsumerGroupTopicPartitions(g, partitions)
            answer = admin.list_consumer_group_offsets([request])[g].result(30)
            return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions}

        assert offsets(group) == {("cadmin", 0): RECORDS, ("cadmin", 1): RECORDS}
        assert offsets(idle, [TopicPartition("cadmin", 0), TopicPartition("cadmin", 1)]) == {
            ("cadmin", 0): -1001, ("cadmin", 1): 4}  # -1001: librdkafka's OFFSET_INVALID, nothing committed

        # Altering the offsets of a group with members is refused (Kafka: UNKNOWN_MEMBER_ID) ...
        alter = ConsumerGroupTopicPartitions(group, [TopicPartition("cadmin", 0, 2)])
        refused_alter = admin.alter_consumer_group_offsets([alter])[group].result(30)
        assert [tp.error.code() for tp in refused_alter.topic_partitions] == [KafkaError.UNKNOWN_MEMBER_ID]
        # ... and deleting it too.
        with pytest.raises(Exception) as refused:
            admin.delete_consumer_groups([group])[group].result(30)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

        consumer.close()
        altered = admin.alter_consumer_group_offsets([alter])[group].result(30)
        assert [(tp.topic, tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions] == [
            ("cadmin", 0, 2, None)]
        assert offsets(group) == {("cadmin", 0): 2, ("cadmin", 1): RECORDS}
        assert _committed(cluster, group, "cadmin") == {0: 2, 1: RECORDS}

        deleted = admin.delete_consumer_groups([group, idle])
        assert [deleted[g].result(30) for g in (group, idle)] == [None, None]
        assert _state(cluster, group) == ("Dead", 0) and _committed(cluster, idle, "cadmin") == {}
        with pytest.raises(Exception) as missing:
            admin.delete_consumer_groups([group])[group].result(30)
        assert missing.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    finally:
        consumer.close()


# --- 5. offsets agree with the Python API, both ways -----------------------------------------------------------
def test_offsets_parity_with_the_python_api(deployment):
    from confluent_kafka import TopicPartition

    cluster, gw = deployment
    group, resumed = "parity-gateway", "parity-python"
    # Committed through the gateway, read through cluster.client().
    consumer = _consumer(gw, group)
    try:
        consumer.subscribe(["parity"])
        _poll_until([consumer], lambda: _partitions(consumer) == {0, 1, 2, 3}, "the consumer to be assigned")
        consumer.commit(offsets=[TopicPartition("parity", p, 3 * p + 1, "m" + str(p)) for p in range(4)],
                        asynchronous=False)
    finally:
        consumer.close()
    answer = cluster.client().fetch_offsets(group_id=group).result(30)
    # confluent-kafka sends a TopicPartition's metadata with its C string's terminating NUL.
    assert {tp: (o.offset, o.metadata, o.error) for tp, o in answer.offsets.items()} == {
        ("parity", p): (3 * p + 1, f"m{p}\0", Errors.NONE) for p in range(4)}

    # Committed through cluster.client(), a confluent consumer of that group resumes exactly there.
    committed = cluster.client().commit_offsets(
        group_id=resumed, offsets={("parity", p): (RECORDS - 5 * p - 2, "") for p in range(4)}).result(30)
    assert set(committed.errors.values()) == {Errors.NONE}
    consumer = _consumer(gw, resumed)
    first: dict[int, int] = {}
    try:
        consumer.subscribe(["parity"])
        _poll_until([consumer], lambda: len(first) == 4, "the consumer to read every partition",
                    on_message=lambda c, m: first.setdefault(m.partition(), m.offset()))
        assert consumer.committed([TopicPartition("parity", p) for p in range(4)], timeout=30)[3].offset == RECORDS - 17
    finally:
        consumer.close()
    assert first == {p: RECORDS - 5 * p - 2 for p in range(4)}

    # librdkafka's default, auto-commit, leaves what it consumed committed once it closes.
    consumer = _consumer(gw, "parity-auto", **{"enable.auto.commit": True, "auto.commit.interval.ms": 200})
    ends: dict[int, int] = {}
    try:
        consumer.subscribe(["parity"])
        _poll_until([consumer], lambda: ends == dict.fromkeys(range(4), RECORDS - 1), "the consumer to read parity",
                    on_message=lambda c, m: ends.__setitem__(m.partition(), m.offset()))
    finally:
        consumer.close()
    assert _committed(cluster, "parity-auto", "parity") == dict.fromkeys(range(4), RECORDS)


# --- 6. a producer and CreateTopics refused cleanly --------------------------------------------------------------
def test_producer_and_create_topics_are_refused_cleanly(deployment):
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster, gw = deployment
    producer = Producer(_confluent(gw, **{"message.timeout.ms": 30_000, "linger.ms": 0}))
    reports = []
    producer.produce("refused", value=b"v", key=b"k", partition=0, on_delivery=lambda err, msg: reports.append(err))
    producer.produce("refused", value=b"w", on_delivery=lambda err, msg: reports.append(err))
    deadline = time.monotonic() + DEADLINE_S
    while len(reports) < 2 and time.monotonic() < deadline:
        producer.poll(0.05)
    assert [e.code() if e else None for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 2
    assert not reports[0].retriable()
    assert producer.flush(10) == 0

    admin = AdminClient(_confluent(gw))
    future = admin.create_topics([NewTopic("new-topic", num_partitions=1, replication_factor=1)],
                                 operation_timeout=10)["new-topic"]
    with pytest.raises(Exception) as refused:
        future.result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "new-topic" not in cluster.topics()

    # Nothing broke: the source is unchanged and a consumer still reads and commits.
    consumer = _consumer(gw, "refused-after")
    offsets: list[int] = []
    stamps: set[int] = set()

    def note(c, m):
        offsets.append(m.offset())
        stamps.add(m.timestamp()[0])

    try:
        consumer.assign([TopicPartition("refused", 0, 0)])
        _poll_until([consumer], lambda: len(offsets) == RECORDS, "the consumer to read the whole partition",
                    on_message=note)
        assert offsets == list(range(RECORDS))
        assert stamps == {TIMESTAMP_LOG_APPEND_TIME}  # a source's records are stamped when served
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert _committed(cluster, "refused-after", "refused") == {0: RECORDS}


# --- 7. librdkafka's incremental (cooperative-sticky) rebalance -------------------------------------------------
def test_confluent_cooperative_sticky_moves_only_what_it_must(deployment):
    cluster, gw = deployment
    group = "coop-group"
    revoked: dict[str, list[set[int]]] = {"a": [], "b": []}

    def subscribe(consumer, name):
        consumer.subscribe(["coop"], on_revoke=lambda c, ps: revoked[name].append({tp.partition for tp in ps}))

    a = _consumer(gw, group, **{"partition.assignment.strategy": "cooperative-sticky"})
    b = _consumer(gw, group, **{"partition.assignment.strategy": "cooperative-sticky"})
    try:
        subscribe(a, "a")
        _poll_until([a], lambda: _partitions(a) == {0, 1, 2}, "a to hold every partition")
        subscribe(b, "b")
        _poll_until([a, b], lambda: _partitions(b) and _partitions(a) | _partitions(b) == {0, 1, 2},
                    "the partitions to be shared")
        assert _partitions(a).isdisjoint(_partitions(b)) and len(_partitions(a)) + len(_partitions(b)) == 3
        # a gave up exactly what b took and kept the rest all along (KIP-429: no stop-the-world revocation).
        assert [ps for ps in revoked["a"] if ps] == [_partitions(b)]
        described = cluster.client().describe_groups([group]).result(30)[0]
        assert (described.group_state, described.protocol_data, len(described.members)) == (
            "Stable", "cooperative-sticky", 2)
    finally:
        a.close()
        b.close()


# --- 8. fenced members: removed by an admin, or committing for a generation that is gone ------------------------
def test_fenced_members_rejoin(deployment):
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioPartition
    from aiokafka.errors import CommitFailedError
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove

    cluster, gw = deployment
    # A confluent member removed with kafka-python's admin (LeaveGroup v3+, a batch of members) rejoins.
    consumer = _consumer(gw, "fenced-removed")
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap_servers, retry_backoff_ms=50)
    try:
        consumer.subscribe(["fenced"])
        _poll_until([consumer], lambda: _partitions(consumer) == {0, 1, 2}, "the member to be assigned")
        [member] = cluster.client().describe_groups(["fenced-removed"]).result(30)[0].members
        removed = admin.remove_group_members("fenced-removed", [MemberToRemove(member_id=member.member_id),
                                                                MemberToRemove(member_id="nobody")])
        assert {m: e.errno for m, e in removed.items()} == {member.member_id: 0, "nobody": Errors.UNKNOWN_MEMBER_ID}

        def rejoined():
            described = cluster.client().describe_groups(["fenced-removed"]).result(30)[0]
            members = [m.member_id for m in described.members]
            return described.group_state == "Stable" and len(members) == 1 and members != [member.member_id]

        _poll_until([consumer], lambda: rejoined() and _partitions(consumer) == {0, 1, 2}, "the member to rejoin")
    finally:
        consumer.close()
        admin.close()

    # An aiokafka member whose generation is gone has its commit refused, then rejoins and commits.
    async def run():
        aio = AIOKafkaConsumer("fenced", bootstrap_servers=gw.bootstrap_servers, group_id="fenced-stale",
                               auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                               heartbeat_interval_ms=300, retry_backoff_ms=50)
        await aio.start()
        try:
            deadline = time.monotonic() + DEADLINE_S
            while len(aio.assignment()) < 3:
                if time.monotonic() > deadline:
                    raise _timed_out("aiokafka to be assigned")
                await aio.getmany(timeout_ms=100)
            [member] = cluster.client().describe_groups(["fenced-stale"]).result(30)[0].members
            left = cluster.client().leave_group(group_id="fenced-stale", members=[(member.member_id, None)]).result(30)
            assert left.members[0].error is Errors.NONE
            with pytest.raises(CommitFailedError):
                await aio.commit({AioPartition("fenced", 0): 3})
            while _state(cluster, "fenced-stale") != ("Stable", 1) or len(aio.assignment()) < 3:
                if time.monotonic() > deadline:
                    raise _timed_out("aiokafka to rejoin")
                await aio.getmany(timeout_ms=100)
            await aio.commit({AioPartition("fenced", 0): 3})
        finally:
            await aio.stop()

    asyncio.run(run())
    assert _committed(cluster, "fenced-stale", "fenced") == {0: 3}


def test_the_gateway_command_serves_a_deployment_until_sigterm(deployment):
    """``raygroups gateway --listen 127.0.0.1:0 --address A --namespace NS`` in a process of its own, as an
    operator starts it: a Kafka admin client lists the deployment's groups through it, and SIGTERM stops it
    with exit 0 (after Ray's own SIGTERM handler was installed by connecting)."""
    import re
    import signal
    import subprocess
    import sys

    import ray
    from confluent_kafka.admin import AdminClient

    cluster, _ = deployment
    group = f"cli-{uuid.uuid4().hex[:6]}"
    committed = cluster.client().commit_offsets(group_id=group, offsets={("split", 0): (7, "")}).result(30)
    assert committed.errors == {("split", 0): Errors.NONE}
    proc = subprocess.Popen(
        [sys.executable, "-m", "raygroups", "gateway", "--listen", "127.0.0.1:0",
         "--address", ray.get_runtime_context().gcs_address, "--namespace", cluster.namespace],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # the command prints where it serves once it does
        found = re.search(r"serving Kafka clients at (\S+) ", line)
        assert found, (line, proc.poll())
        admin = AdminClient({"bootstrap.servers": found.group(1), "logger": QUIET, "log_level": 0})
        listed = admin.list_consumer_groups().result(timeout=DEADLINE_S)
        assert group in {g.group_id for g in listed.valid}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        out, err = proc.communicate(timeout=10)
        assert "stopped" in out and "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_node_listener_whose_port_is_taken_listens_once_it_is_free(deployment, monkeypatch):
    """A coordinator node's listener that cannot bind (its port taken) says so in ``status()``, stays up
    and binds once the port is free, without waiting for its node to restart; a Kafka client then reaches
    the deployment through it."""
    import socket

    from confluent_kafka.admin import AdminClient

    from raygroups.gateway import node

    cluster, _ = deployment
    monkeypatch.setattr(node, "BIND_RETRY_S", 0.2)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    listener = node.NodeListener(cluster.namespace, "bind-test", cluster.num_partitions, {}, f"127.0.0.1:{port}")
    try:
        status = listener.status()
        assert status["error"].startswith(f"cannot listen on 127.0.0.1:{port}: ") and status["bootstrap"] is None
        blocker.close()
        deadline = time.monotonic() + DEADLINE_S
        while listener.status()["error"] is not None:
            assert time.monotonic() < deadline, listener.status()
            time.sleep(0.05)
        assert listener.status()["bootstrap"] == f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "logger": QUIET, "log_level": 0})
        assert "split" in admin.list_topics(timeout=DEADLINE_S).topics
    finally:
        listener.close()
        blocker.close()
