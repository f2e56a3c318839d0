"""The consumer-group steps of confluent-kafka-python's admin integration tests, run against a gateway
(docs/client-suites.md): from test_basic_operations, list_groups, list_consumer_groups, its
verify_consumer_group_offsets_operations helper (imported) and delete_consumer_groups; from
test_describe_operations, the describe_consumer_groups / describe_cluster / describe_topics checks of its
verify_provided_describe_for_authorized_operations helper before its ACL steps. Those tests need a topic
created and 2 messages produced (or a SASL cluster), which the gateway does not serve; here the topics come
from the gateway's source. Run from a checkout of confluent-kafka-python with it on PYTHONPATH:

    python scripts/client_suites_confluent_groups.py BOOTSTRAP TWO_PARTITION_TOPIC ONE_PARTITION_TOPIC

Prints ``RESULT PASS|FAIL <step>`` for each step.
"""
import sys
import traceback
import uuid

from confluent_kafka import Consumer, ConsumerGroupState, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient
from tests.integration.admin.test_basic_operations import verify_consumer_group_offsets_operations

B, TOPIC = sys.argv[1], sys.argv[2]
results = {}


def step(name):
    def run(fn):
        try:
            fn()
            results[name] = "PASS"
        except Exception:
            results[name] = "FAIL"
            traceback.print_exc()
    return run


def consume_one_per_partition(group):
    c = Consumer({"bootstrap.servers": B, "group.id": group, "session.timeout.ms": 6000,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe([TOPIC])
    seen = set()
    while len(seen) < 2:
        m = c.poll(10)
        assert m is not None, "no message in 10 s"
        if m.error() or m.partition() in seen:
            continue
        c.commit(m, asynchronous=False)
        seen.add(m.partition())
    c.close()


run = uuid.uuid4().hex[:8]
g1, g2 = f"test-group-1-{run}", f"test-group-2-{run}"
admin = AdminClient({"bootstrap.servers": B})


@step("consume and commit (two groups)")
def _():
    consume_one_per_partition(g1)
    consume_one_per_partition(g2)


@step("list_groups (all, by name)")
def _():
    groups = {g.id for g in admin.list_groups(timeout=10)}
    assert g1 in groups and g2 in groups
    assert g1 in {g.id for g in admin.list_groups(g1)}


@step("list_consumer_groups (all, states={STABLE} empty)")
def _():
    ids = [g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid]
    assert g1 in ids and g2 in ids
    result = admin.list_consumer_groups(request_timeout=10, states={ConsumerGroupState.STABLE}).result()
    assert isinstance(result.valid, list) and not result.valid, [(g.group_id, g.state) for g in result.valid]


@step("verify_consumer_group_offsets_operations")
def _():
    verify_consumer_group_offsets_operations(admin, TOPIC, g1)


@step("describe_consumer_groups include_authorized_operations=False")
def _():
    desc = admin.describe_consumer_groups([g2], request_timeout=10, include_authorized_operations=False)[g2].result()
    assert desc.authorized_operations is None, desc.authorized_operations
    assert desc.group_id == g2 and desc.is_simple_consumer_group is False
    assert desc.state == ConsumerGroupState.EMPTY, desc.state


@step("describe_consumer_groups include_authorized_operations=True")
def _():
    desc = admin.describe_consumer_groups([g2], request_timeout=10, include_authorized_operations=True)[g2].result()
    print("group authorized_operations:", desc.authorized_operations)
    assert desc.authorized_operations and AclOperation.READ in desc.authorized_operations \
        and AclOperation.DELETE in desc.authorized_operations


@step("describe_cluster include_authorized_operations=False")
def _():
    desc = admin.describe_cluster(request_timeout=10, include_authorized_operations=False).result()
    assert desc.authorized_operations is None, desc.authorized_operations
    assert isinstance(desc.cluster_id, str) and len(desc.nodes) > 0 and desc.controller is not None


@step("describe_cluster include_authorized_operations=True")
def _():
    desc = admin.describe_cluster(request_timeout=10, include_authorized_operations=True).result()
    print("cluster authorized_operations:", desc.authorized_operations)
    assert desc.authorized_operations and AclOperation.ALTER in desc.authorized_operations \
        and AclOperation.ALTER_CONFIGS in desc.authorized_operations


@step("describe_topics include_authorized_operations=False (1-partition topic)")
def _():
    name = sys.argv[3]
    desc = admin.describe_topics(TopicCollection([name]), request_timeout=10,
                                 include_authorized_operations=False)[name].result()
    assert desc.authorized_operations is None, desc.authorized_operations
    assert desc.name == name and len(desc.partitions) == 1 and not desc.is_internal
    p = desc.partitions[0]
    assert p.id == 0 and p.leader is not None and len(p.replicas) == 1 and len(p.isr) == 1


@step("describe_topics include_authorized_operations=True (1-partition topic)")
def _():
    name = sys.argv[3]
    desc = admin.describe_topics(TopicCollection([name]), request_timeout=10,
                                 include_authorized_operations=True)[name].result()
    print("topic authorized_operations:", desc.authorized_operations)
    assert desc.authorized_operations and AclOperation.READ in desc.authorized_operations \
        and AclOperation.DELETE in desc.authorized_operations


@step("delete_consumer_groups")
def _():
    fs = admin.delete_consumer_groups([g1, g2], request_timeout=10)
    fs[g1].result()
    fs[g2].result()
    assert g1 not in {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid}


for name, outcome in results.items():
    print(f"RESULT {outcome} {name}")
