"""``raygroups.admin`` through ``KafkaAdminClient`` (Kafka's protocol, no Ray in the client) against one
gateway in front of a local deployment, and through ``cluster.client()``: the same answers, to the offset,
state and error name. A write is made through each client on twin groups set up alike, and the twins
compared. Every test has groups of its own, so the order of the tests does not matter."""

from __future__ import annotations

import socket
import uuid

import pytest
from raygroups.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)

from raygroups import Errors, admin
from raygroups.client.kafka_admin import KafkaAdminClient
from raygroups.sources import SyntheticSource

pytestmark = pytest.mark.ray

TOPIC = "orders"
SOURCE = SyntheticSource({TOPIC: 2}, records_per_partition=50)
CONFIG = {"group.initial.rebalance.delay.ms": 0}
STABLE = "ka-stable"  # a group with one member, which owns both partitions


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """One deployment (2 partitions), one gateway, and a group with a member: ``(cluster, kafka)``, where
    ``kafka`` is a ``KafkaAdminClient`` bootstrapped from the gateway."""
    import raygroups
    from raygroups import gateway

    cluster = raygroups.start_local(num_partitions=2, data_dir=tmp_path_factory.mktemp("data"), config=CONFIG,
                                    namespace=f"ka-{uuid.uuid4().hex[:8]}")
    try:
        gw = gateway.start(cluster, source=SOURCE)
        try:
            _stable_member(cluster.client(), STABLE)
            with KafkaAdminClient(gw.bootstrap_servers, timeout_s=30) as kafka:
                yield cluster, kafka
        finally:
            gw.stop()
    finally:
        cluster.shutdown()


def _stable_member(client, group):
    sub = encode_subscription(Subscription(topics=(TOPIC,)))
    join = dict(group_id=group, protocol_type="consumer", protocols=[("range", sub)], session_timeout_ms=300_000,
                rebalance_timeout_ms=30_000, client_id="app")
    first = client.join_group(member_id="", **join).result(30)
    joined = client.join_group(member_id=first.member_id, **join).result(30)
    assignment = encode_assignment(Assignment(partitions=((TOPIC, 0), (TOPIC, 1))))
    assert client.sync_group(group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                             assignments={joined.member_id: assignment}).result(30).error is Errors.NONE
    assert set(client.commit_offsets(group_id=group, offsets={(TOPIC, 0): (12, "")}, generation_id=joined.generation_id,
                                     member_id=joined.member_id).result(30).errors.values()) == {Errors.NONE}


def _commit(cluster, group, offsets):
    answer = cluster.client().commit_offsets(group_id=group, offsets={
        (TOPIC, p): (o, "") for p, o in offsets.items()}).result(30)
    assert set(answer.errors.values()) == {Errors.NONE}


def _committed(cluster, group):
    answer = cluster.client().fetch_offsets(group_id=group).result(30)
    assert answer.error is Errors.NONE
    return {p: o.offset for (t, p), o in answer.offsets.items() if t == TOPIC}


def _twins(cluster, name, offsets):
    """Two groups with the same committed offsets: one to change through Kafka, one through Ray."""
    k, r = f"{name}-kafka", f"{name}-ray"
    for group in (k, r):
        _commit(cluster, group, offsets)
    return k, r


def test_list_and_describe_agree_with_the_ray_client(deployment):
    cluster, kafka = deployment
    ray_client = cluster.client()
    _commit(cluster, "ka-idle", {0: 3, 1: 7})

    listed = admin.list_groups(kafka)
    assert listed == admin.list_groups(ray_client)
    assert {"group": STABLE, "state": "Stable", "protocol_type": "consumer"} in listed
    assert {"group": "ka-idle", "state": "Empty", "protocol_type": ""} in listed
    assert admin.list_groups(kafka, states=["Stable"]) == admin.list_groups(ray_client, states=["Stable"]) == [
        {"group": STABLE, "state": "Stable", "protocol_type": "consumer"}]

    for group in (STABLE, "ka-idle"):
        assert admin.describe_group(kafka, group, SOURCE) == admin.describe_group(ray_client, group, SOURCE)
    stable = admin.describe_group(kafka, STABLE, SOURCE)
    (member,) = stable["members"]
    assert (stable["state"], stable["assignment_strategy"], member["client_id"], member["partitions"]) == (
        "Stable", "range", "app", [[TOPIC, 0], [TOPIC, 1]])
    assert [(o["partition"], o["current_offset"], o["log_end_offset"], o["lag"], o["member_id"])
            for o in stable["offsets"]] == [(0, 12, 50, 38, member["member_id"]), (1, None, 50, None, member["member_id"])]
    idle = admin.describe_group(kafka, "ka-idle")
    assert (idle["state"], idle["members"], [(o["partition"], o["current_offset"]) for o in idle["offsets"]]) == (
        "Empty", [], [(0, 3), (1, 7)])

    for client in (kafka, ray_client):
        with pytest.raises(admin.UnknownGroupError, match="consumer group 'ka-nobody' does not exist"):
            admin.describe_group(client, "ka-nobody")


def test_topics_come_from_metadata_as_the_deployment_registers_them(deployment):
    cluster, kafka = deployment
    assert kafka.topics() == cluster.topics() == {TOPIC: 2}
    assert kafka.find_coordinator(STABLE)["error"] == "NONE"


def test_reset_plans_and_executes_as_through_the_ray_client(deployment):
    cluster, kafka = deployment
    k, r = _twins(cluster, "ka-reset", {0: 10, 1: 40})
    topics = kafka.topics()
    spec = [admin.parse_topic_spec(TOPIC)]

    shift = admin.ResetStrategy("shift", -15)
    plan_k = admin.plan_reset(kafka, k, spec, shift, topics, SOURCE)
    assert plan_k == admin.plan_reset(cluster.client(), r, spec, shift, cluster.topics(), SOURCE) == [
        {"topic": TOPIC, "partition": 0, "current_offset": 10, "new_offset": 0},
        {"topic": TOPIC, "partition": 1, "current_offset": 40, "new_offset": 25}]
    executed = admin.execute_reset(kafka, k, plan_k)
    assert executed == admin.execute_reset(cluster.client(), r, plan_k) == {(TOPIC, 0): "NONE", (TOPIC, 1): "NONE"}
    assert _committed(cluster, k) == _committed(cluster, r) == {0: 0, 1: 25}

    # A group with a member is not reset, with the same sentence either way.
    for client in (kafka, cluster.client()):
        with pytest.raises(admin.AdminError, match=f"group '{STABLE}' is inactive, but the current state is Stable"):
            admin.plan_reset(client, STABLE, spec, admin.ResetStrategy("earliest"), topics)


def test_delete_offsets_as_through_the_ray_client(deployment):
    cluster, kafka = deployment
    k, r = _twins(cluster, "ka-deloff", {0: 5, 1: 6})
    topics = kafka.topics()
    spec = [admin.parse_topic_spec(f"{TOPIC}:0")]

    deleted = admin.delete_offsets(kafka, k, spec, topics)
    assert deleted == admin.delete_offsets(cluster.client(), r, spec, topics) == {
        "error": "NONE", "partitions": {(TOPIC, 0): "NONE"}}
    assert _committed(cluster, k) == _committed(cluster, r) == {1: 6}

    # The member's group is subscribed to the topic: Kafka refuses per partition.
    refused = admin.delete_offsets(kafka, STABLE, spec, topics)
    assert refused == admin.delete_offsets(cluster.client(), STABLE, spec, topics) == {
        "error": "NONE", "partitions": {(TOPIC, 0): "GROUP_SUBSCRIBED_TO_TOPIC"}}
    assert _committed(cluster, STABLE) == {0: 12}


def test_delete_groups_as_through_the_ray_client(deployment):
    cluster, kafka = deployment
    k, r = _twins(cluster, "ka-delgroup", {0: 1})

    deleted = admin.delete_groups(kafka, [k, "ka-missing-kafka", STABLE])
    assert deleted == {k: "NONE", "ka-missing-kafka": "GROUP_ID_NOT_FOUND", STABLE: "NON_EMPTY_GROUP"}
    assert list(admin.delete_groups(cluster.client(), [r, "ka-missing-ray", STABLE]).values()) == list(
        deleted.values())
    listed = {g["group"] for g in admin.list_groups(kafka)}
    assert STABLE in listed and not listed & {k, r}


def test_a_bad_bootstrap_or_a_closed_port_is_one_clear_sentence(deployment):
    with pytest.raises(ValueError, match=r"bootstrap entry 'localhost:0': the port must be a number 1\.\.65535"):
        KafkaAdminClient("localhost:0")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with KafkaAdminClient(f"127.0.0.1:{port}", timeout_s=10) as closed:
        with pytest.raises(ConnectionError) as e:
            admin.list_groups(closed)
    assert str(e.value) == f"cannot connect to the bootstrap server 127.0.0.1:{port}: connection refused"
