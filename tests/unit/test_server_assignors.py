"""KIP-848 server-side assignors: scenarios ported from Kafka's ``UniformHomogeneousAssignmentBuilderTest``
(``OptimizedUniformAssignmentBuilderTest`` before it was renamed), ``UniformHeterogeneousAssignmentBuilderTest``
and the sticky ``RangeAssignorTest`` of Kafka 3.5-3.8, then properties.

Kafka's heterogeneous and range tests visit members in id order and topics in id order, which is
the name order here, so their expected assignments carry over unchanged. Kafka's homogeneous tests
depend on hash order; those scenarios keep Kafka's inputs with the assignment this module's order
(topic names, then partitions, ascending) gives. Where Kafka raises for a subscribed topic missing from
the metadata, the topic is ignored here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raygroups.coordinator.server_assignors import (
    ASSIGNORS,
    RANGE,
    UNIFORM,
    MemberSubscription,
    PartitionAssignorError,
)


def member(*topics: str, **assignment: set[int]) -> MemberSubscription:
    """A member subscribed to ``topics`` whose current target assignment is ``assignment``."""
    return MemberSubscription(frozenset(topics), assignment={t: frozenset(p) for t, p in assignment.items()})


def rejoin(members: dict[str, MemberSubscription], result) -> dict[str, MemberSubscription]:
    """The same members, each now holding what ``result`` gave it."""
    return {
        m: MemberSubscription(s.subscribed_topics, s.rack_id, result.get(m, {})) for m, s in members.items()
    }


def sizes(result) -> dict[str, int]:
    return {m: sum(len(p) for p in a.values()) for m, a in result.items()}


def check_valid(members, topics, result) -> None:
    """An entry per member, no empty set, only subscribed existing partitions, and every partition of a
    subscribed existing topic assigned exactly once."""
    assert set(result) == set(members)
    owners: dict[tuple[str, int], str] = {}
    for m, assignment in result.items():
        for topic, partitions in assignment.items():
            assert isinstance(partitions, frozenset) and partitions, (m, topic, partitions)
            assert topic in members[m].subscribed_topics, (m, topic)
            for p in partitions:
                assert 0 <= p < topics[topic], (topic, p)
                assert (topic, p) not in owners, f"{topic}-{p} owned by {owners[(topic, p)]} and {m}"
                owners[(topic, p)] = m
    subscribed = {t for s in members.values() for t in s.subscribed_topics if t in topics}
    assert set(owners) == {(t, p) for t in subscribed for p in range(topics[t])}


# ------------------------------------------------------------------------------------------------
# Registry and input


def test_registry_names_both_assignors():
    assert ASSIGNORS == {"uniform": UNIFORM, "range": RANGE}
    assert (UNIFORM.name, RANGE.name) == ("uniform", "range")


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_no_members_no_assignment(assignor):
    assert assignor.assign({}, {"topic1": 3}) == {}


@pytest.mark.parametrize(
    "members, topics, named",
    [
        ({"A": member("t")}, {"t": -1}, "'t'"),
        ({"A": member("t")}, {"t": True}, "'t'"),
        ({"A": member("t")}, {"t": 2.0}, "'t'"),
        ({"A": "t"}, {"t": 1}, "'A'"),
        ({1: member("t")}, {"t": 1}, "member ids"),
        ({"A": member("t", t={-1})}, {"t": 3}, "-1"),
        ({"A": member("t", t={"0"})}, {"t": 3}, "'0'"),
    ],
)
def test_bad_input_is_rejected_naming_what_is_wrong(members, topics, named):
    for assignor in (UNIFORM, RANGE):
        with pytest.raises(PartitionAssignorError, match=named):
            assignor.assign(members, topics)


def test_member_subscription_takes_any_set_of_names_and_rejects_a_string():
    subscription = MemberSubscription({"b", "a"})
    assert subscription.subscribed_topics == frozenset({"a", "b"})
    assert subscription.assignment == {} and subscription.rack_id is None
    assert hash(subscription) == hash(MemberSubscription(frozenset({"a", "b"})))
    with pytest.raises(PartitionAssignorError, match="subscribed_topics"):
        MemberSubscription("topic1")


# ------------------------------------------------------------------------------------------------
# Uniform, homogeneous (Kafka's UniformHomogeneousAssignmentBuilderTest)


def test_uniform_one_member_no_subscription():
    assert UNIFORM.assign({"A": member()}, {"topic1": 3}) == {"A": {}}


def test_uniform_one_member_subscribed_to_a_missing_topic_gets_nothing():
    assert UNIFORM.assign({"A": member("topic2")}, {"topic1": 3}) == {"A": {}}


def test_uniform_first_assignment_two_members_two_topics():
    members = {"A": member("topic1", "topic3"), "B": member("topic1", "topic3")}
    topics = {"topic1": 3, "topic3": 2}
    result = UNIFORM.assign(members, topics)
    # 5 partitions: A is first in id order and takes the extra one; topic1 is handed out before topic3.
    assert result == {"A": {"topic1": {0, 1, 2}}, "B": {"topic3": {0, 1}}}
    check_valid(members, topics, result)


def test_uniform_more_members_than_partitions():
    members = {m: member("topic3") for m in "ABC"}
    result = UNIFORM.assign(members, {"topic3": 2})
    assert result == {"A": {"topic3": {0}}, "B": {"topic3": {1}}, "C": {}}


def test_uniform_large_sample_is_valid_and_balanced():
    topics = {f"topic-{i}": 3 for i in range(1, 100)}
    members = {f"member{i}": member(*topics) for i in range(1, 50)}
    result = UNIFORM.assign(members, topics)
    check_valid(members, topics, result)
    assert set(sizes(result).values()) == {6, 7}


def test_uniform_rebalances_an_unbalanced_previous_assignment():
    members = {
        "A": member("topic1", "topic2", topic1={0, 1}, topic2={0, 1}),
        "B": member("topic1", "topic2", topic1={2}, topic2={2}),
    }
    result = UNIFORM.assign(members, {"topic1": 3, "topic2": 3})
    assert result == {"A": {"topic1": {0, 1}, "topic2": {0}}, "B": {"topic1": {2}, "topic2": {1, 2}}}


def test_uniform_partitions_added_to_both_topics():
    members = {
        "A": member("topic1", "topic2", topic1={0, 2}, topic2={0}),
        "B": member("topic1", "topic2", topic1={1}, topic2={1, 2}),
    }
    result = UNIFORM.assign(members, {"topic1": 6, "topic2": 5})
    # 11 partitions: A (first) may hold 6, B 5; both keep everything they had.
    assert result == {
        "A": {"topic1": {0, 2, 3, 4, 5}, "topic2": {0}},
        "B": {"topic1": {1}, "topic2": {1, 2, 3, 4}},
    }


def test_uniform_member_added_takes_only_what_others_give_up():
    members = {
        "A": member("topic1", "topic2", topic1={0, 2}, topic2={0}),
        "B": member("topic1", "topic2", topic1={1}, topic2={1, 2}),
        "C": member("topic1", "topic2"),
    }
    result = UNIFORM.assign(members, {"topic1": 3, "topic2": 3})
    assert result == {
        "A": {"topic1": {0, 2}},
        "B": {"topic1": {1}, "topic2": {1}},
        "C": {"topic2": {0, 2}},
    }


def test_uniform_member_removed_leaves_its_partitions_to_the_others():
    members = {  # C, which held topic1-2 and topic2-2, has left
        "A": member("topic1", "topic2", topic1={0}, topic2={0}),
        "B": member("topic1", "topic2", topic1={1}, topic2={1}),
    }
    result = UNIFORM.assign(members, {"topic1": 3, "topic2": 3})
    assert result == {"A": {"topic1": {0, 2}, "topic2": {0}}, "B": {"topic1": {1}, "topic2": {1, 2}}}


def test_uniform_subscription_removed_drops_the_topic():
    members = {
        "A": member("topic2", topic1={0}, topic2={0}),
        "B": member("topic2", topic1={1}, topic2={1}),
    }
    result = UNIFORM.assign(members, {"topic1": 2, "topic2": 2})
    assert result == {"A": {"topic2": {0}}, "B": {"topic2": {1}}}


def test_uniform_extra_partitions_stay_with_the_members_holding_them():
    # Not in Kafka's tests: Kafka hands the P % M extra partitions to the first members in hash order;
    # here the members already above the floor keep theirs, so a joining member costs one move.
    members = {
        "0": member("t"),
        "A": member("t", t={0, 1, 2}),
        "B": member("t", t={3, 4}),
        "C": member("t", t={5, 6}),
    }
    result = UNIFORM.assign(members, {"t": 7})
    assert result == {"0": {"t": {2}}, "A": {"t": {0, 1}}, "B": {"t": {3, 4}}, "C": {"t": {5, 6}}}


def test_uniform_member_over_quota_keeps_its_first_topics_in_name_order():
    # Kafka keeps whatever its hash iteration meets first; here it is topic names, then partitions.
    members = {"A": MemberSubscription(frozenset({"t0", "t1"}), assignment={"t1": frozenset({2, 1, 0}),
                                                                             "t0": frozenset({2, 0, 1})}),
               "B": member("t0", "t1")}
    assert UNIFORM.assign(members, {"t0": 3, "t1": 3}) == {"A": {"t0": {0, 1, 2}}, "B": {"t1": {0, 1, 2}}}
    members["A"] = member("t0", "t1", t0={0, 1}, t1={0, 1})
    assert UNIFORM.assign(members, {"t0": 3, "t1": 3}) == {"A": {"t0": {0, 1}, "t1": {0}},
                                                            "B": {"t0": {2}, "t1": {1, 2}}}


def test_uniform_partitions_past_a_recreated_topic_end_are_dropped():
    members = {"A": member("t", t={0, 1, 2, 3}), "B": member("t")}
    assert UNIFORM.assign(members, {"t": 2}) == {"A": {"t": {0}}, "B": {"t": {1}}}


def test_uniform_partition_claimed_twice_stays_with_the_first_member_id():
    members = {"B": member("t", t={0, 1}), "A": member("t", t={1})}
    assert UNIFORM.assign(members, {"t": 4}) == {"A": {"t": {1, 2}}, "B": {"t": {0, 3}}}


# ------------------------------------------------------------------------------------------------
# Uniform, heterogeneous (Kafka's UniformHeterogeneousAssignmentBuilderTest, same expectations)


def test_uniform_two_members_no_subscriptions():
    assert UNIFORM.assign({"A": member(), "B": member()}, {"topic1": 3}) == {"A": {}, "B": {}}


def test_uniform_two_members_subscribed_to_missing_topics_get_nothing():
    members = {"A": member("topic3"), "B": member("topic2")}
    assert UNIFORM.assign(members, {"topic1": 3}) == {"A": {}, "B": {}}


def test_uniform_heterogeneous_first_assignment_two_members_two_topics():
    members = {"A": member("topic1", "topic3"), "B": member("topic3")}
    topics = {"topic1": 3, "topic3": 6}
    result = UNIFORM.assign(members, topics)
    assert result == {"A": {"topic1": {0, 1, 2}, "topic3": {4}}, "B": {"topic3": {0, 1, 2, 3, 5}}}
    check_valid(members, topics, result)


def test_uniform_heterogeneous_more_members_than_partitions():
    members = {"A": member("topic3"), "B": member("topic3"), "C": member("topic1")}
    result = UNIFORM.assign(members, {"topic1": 2, "topic3": 1})
    assert result == {"A": {"topic3": {0}}, "B": {}, "C": {"topic1": {0, 1}}}


def test_uniform_heterogeneous_rebalances_three_topics():
    members = {
        "A": member("topic1", topic1={0, 1, 2}),
        "B": member("topic1", "topic2", topic1={3}, topic2={0}),
        "C": member("topic1", "topic2", "topic3", topic1={4, 5}, topic2={1, 2, 3}, topic3={0, 1, 2, 3}),
    }
    result = UNIFORM.assign(members, {"topic1": 6, "topic2": 4, "topic3": 4})
    assert result == {
        "A": {"topic1": {0, 1, 2, 5}},
        "B": {"topic1": {3}, "topic2": {0, 1, 2, 3}},
        "C": {"topic1": {4}, "topic3": {0, 1, 2, 3}},
    }


def test_uniform_heterogeneous_partitions_added():
    members = {
        "A": member("topic1", "topic3", topic1={0, 1, 2, 3}, topic3={0, 1}),
        "B": member("topic1", "topic2", "topic3", "topic4", topic2={0, 1, 2}, topic4={0, 1, 2}),
    }
    result = UNIFORM.assign(members, {"topic1": 6, "topic2": 5, "topic3": 3, "topic4": 3})
    assert result == {
        "A": {"topic1": {0, 1, 2, 3, 4, 5}, "topic3": {0, 1, 2}},
        "B": {"topic2": {0, 1, 2, 3, 4}, "topic4": {0, 1, 2}},
    }


def test_uniform_heterogeneous_member_and_partitions_added():
    members = {
        "A": member("topic1", topic1={0, 2}, topic2={0}),
        "B": member("topic1", "topic2", topic1={1}, topic2={1, 2}),
        "C": member("topic1", "topic2"),
    }
    result = UNIFORM.assign(members, {"topic1": 6, "topic2": 7})
    assert result == {
        "A": {"topic1": {0, 2, 3, 4, 5}},
        "B": {"topic1": {1}, "topic2": {1, 2, 6}},
        "C": {"topic2": {0, 3, 4, 5}},
    }


def test_uniform_heterogeneous_member_removed():
    members = {  # C, which held topic2 0-2 and 7 and topic3-2, has left
        "A": member("topic1", "topic3", topic1={0, 1, 2}, topic3={0, 1}),
        "B": member("topic2", topic2={3, 4, 5, 6}),
    }
    result = UNIFORM.assign(members, {"topic1": 3, "topic2": 8, "topic3": 3})
    assert result == {
        "A": {"topic1": {0, 1, 2}, "topic3": {0, 1, 2}},
        "B": {"topic2": {0, 1, 2, 3, 4, 5, 6, 7}},
    }


def test_uniform_heterogeneous_subscription_removed():
    members = {
        "A": member("topic1", topic1={0, 2}, topic2={1, 3}),
        "B": member("topic1", "topic2", topic1={1}, topic2={0, 2, 4}),
    }
    result = UNIFORM.assign(members, {"topic1": 3, "topic2": 5})
    assert result == {"A": {"topic1": {0, 1, 2}}, "B": {"topic2": {0, 1, 2, 3, 4}}}


def test_uniform_heterogeneous_balancing_stops_when_a_topic_runs_out():
    # Kafka's edge case: the least loaded subscriber holds nothing of the topic being balanced.
    members = {
        "A": member("topic1", "topic2", "topic3", topic1={0, 1}, topic2={0, 1}, topic3={0, 1}),
        "B": member("topic1", "topic2", "topic3"),
        "C": member("topic4"),  # makes the group heterogeneous; topic4 does not exist
    }
    result = UNIFORM.assign(members, {"topic1": 2, "topic2": 2, "topic3": 2})
    assert result == {
        "A": {"topic2": {0}, "topic3": {0, 1}},
        "B": {"topic1": {0, 1}, "topic2": {1}},
        "C": {},
    }


def test_uniform_heterogeneous_member_without_subscriptions():
    result = UNIFORM.assign({"A": member("topic1"), "B": member()}, {"topic1": 3})
    assert result == {"A": {"topic1": {0, 1, 2}}, "B": {}}


# ------------------------------------------------------------------------------------------------
# Range (Kafka 3.5-3.8's sticky RangeAssignorTest, same expectations)


def test_range_one_member_no_topic():
    assert RANGE.assign({"A": member()}, {"topic1": 3}) == {"A": {}}


def test_range_one_member_subscribed_to_a_missing_topic_gets_nothing():
    assert RANGE.assign({"A": member("topic2")}, {"topic1": 3}) == {"A": {}}


def test_range_first_assignment_two_members_same_subscriptions():
    members = {"A": member("topic1", "topic3"), "B": member("topic1", "topic3")}
    result = RANGE.assign(members, {"topic1": 3, "topic3": 2})
    assert result == {"A": {"topic1": {0, 1}, "topic3": {0}}, "B": {"topic1": {2}, "topic3": {1}}}


def test_range_first_assignment_three_members_different_subscriptions():
    members = {"A": member("topic1", "topic2"), "B": member("topic3"), "C": member("topic2", "topic3")}
    result = RANGE.assign(members, {"topic1": 3, "topic2": 3, "topic3": 2})
    assert result == {
        "A": {"topic1": {0, 1, 2}, "topic2": {0, 1}},
        "B": {"topic3": {0}},
        "C": {"topic2": {2}, "topic3": {1}},
    }


def test_range_more_members_than_partitions():
    members = {m: member("topic1", "topic3") for m in "ABC"}
    result = RANGE.assign(members, {"topic1": 3, "topic3": 2})
    assert result == {
        "A": {"topic1": {0}, "topic3": {0}},
        "B": {"topic1": {1}, "topic3": {1}},
        "C": {"topic1": {2}},
    }


def test_range_member_added_to_a_full_group_gets_nothing():
    members = {
        "A": member("topic1", "topic2", topic1={0}, topic2={0}),
        "B": member("topic1", "topic2", topic1={1}, topic2={1}),
        "C": member("topic1", "topic2"),
    }
    result = RANGE.assign(members, {"topic1": 2, "topic2": 2})
    assert result == {"A": {"topic1": {0}, "topic2": {0}}, "B": {"topic1": {1}, "topic2": {1}}, "C": {}}


def test_range_partition_added_to_both_topics():
    members = {
        "A": member("topic1", "topic2", topic1={0, 1}, topic2={0, 1}),
        "B": member("topic1", "topic2", topic1={2}, topic2={2}),
    }
    result = RANGE.assign(members, {"topic1": 4, "topic2": 4})
    assert result == {"A": {"topic1": {0, 1}, "topic2": {0, 1}}, "B": {"topic1": {2, 3}, "topic2": {2, 3}}}


def test_range_member_added():
    members = {
        "A": member("topic1", "topic2", topic1={0, 1}, topic2={0, 1}),
        "B": member("topic1", "topic2", topic1={2}, topic2={2}),
        "C": member("topic1", "topic2"),
    }
    result = RANGE.assign(members, {"topic1": 3, "topic2": 3})
    assert result == {
        "A": {"topic1": {0}, "topic2": {0}},
        "B": {"topic1": {2}, "topic2": {2}},
        "C": {"topic1": {1}, "topic2": {1}},
    }


def test_range_member_and_partition_added():
    members = {
        "A": member("topic1", "topic2", topic1={0, 1}, topic2={0, 1}),
        "B": member("topic1", "topic2", topic1={2}, topic2={2}),
        "C": member("topic1"),
    }
    result = RANGE.assign(members, {"topic1": 4, "topic2": 3})
    assert result == {
        "A": {"topic1": {0, 1}, "topic2": {0, 1}},
        "B": {"topic1": {2}, "topic2": {2}},
        "C": {"topic1": {3}},
    }


def test_range_member_removed():
    members = {"B": member("topic1", "topic2", topic1={2}, topic2={2})}  # A has left
    result = RANGE.assign(members, {"topic1": 3, "topic2": 3})
    assert result == {"B": {"topic1": {0, 1, 2}, "topic2": {0, 1, 2}}}


def test_range_subscriptions_changed():
    # Before: A -> topic1, topic2; B -> topic2; C -> topic2, topic3. Now: A -> topic1;
    # B -> all three; C -> topic2.
    members = {
        "A": member("topic1", topic1={0, 1, 2}, topic2={0}),
        "B": member("topic1", "topic2", "topic3", topic2={1}),
        "C": member("topic2", topic2={2}, topic3={0, 1}),
    }
    result = RANGE.assign(members, {"topic1": 3, "topic2": 3, "topic3": 2})
    assert result == {
        "A": {"topic1": {0, 1}},
        "B": {"topic1": {2}, "topic2": {0, 1}, "topic3": {0, 1}},
        "C": {"topic2": {2}},
    }


# ------------------------------------------------------------------------------------------------
# Properties

TOPIC_NAMES = ["t0", "t1", "t2", "t3", "t4"]
NAMES = [*TOPIC_NAMES, "gone"]  # "gone" is subscribed to or held, but never exists
ASSIGNOR_PARAMS = pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
PROPERTY_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


MEMBER_IDS = ["A", "B", "a", "b", "m0", "m1", "m10", "m2"]
PARTITION_IDS = 15  # held partitions range over 0..14, past the end of every topic


def _names(mask: int) -> frozenset[str]:
    return frozenset(name for bit, name in enumerate(NAMES) if mask >> bit & 1)


@st.composite
def groups(draw, homogeneous: bool = False, fresh: bool = False):
    """(members, topics): up to 8 members and 5 topics of up to 12 partitions. Subscriptions may name
    a missing topic; current assignments (unless ``fresh``) are arbitrary: unsubscribed or missing
    topics, partitions past the end, partitions two members claim. Drawn as integers (subsets as bit
    masks, held partitions as topic * PARTITION_IDS + partition), which keeps generation fast."""
    counts = draw(st.lists(st.integers(-1, 12), min_size=len(TOPIC_NAMES), max_size=len(TOPIC_NAMES)))
    topics = {name: count for name, count in zip(TOPIC_NAMES, counts, strict=True) if count >= 0}
    member_ids = draw(st.lists(st.sampled_from(MEMBER_IDS), unique=True, max_size=len(MEMBER_IDS)))
    masks = st.integers(0, 2 ** len(NAMES) - 1)
    shared = draw(masks)
    members = {}
    for member_id in member_ids:
        held: dict[str, set[int]] = {}
        if not fresh:
            for code in draw(st.lists(st.integers(0, len(NAMES) * PARTITION_IDS - 1), max_size=8)):
                topic, partition = divmod(code, PARTITION_IDS)
                held.setdefault(NAMES[topic], set()).add(partition)
        subscribed = _names(shared if homogeneous else draw(masks))
        members[member_id] = MemberSubscription(
            subscribed, assignment={t: frozenset(p) for t, p in held.items()})
    return members, topics


def reordered(members, topics, data):
    """The same group, every mapping and set built in another insertion order."""
    shuffled_members = {
        m: MemberSubscription(
            frozenset(reversed(sorted(members[m].subscribed_topics))),
            assignment=dict(reversed(list(members[m].assignment.items()))),
        )
        for m in data.draw(st.permutations(list(members)))
    }
    return shuffled_members, {t: topics[t] for t in data.draw(st.permutations(list(topics)))}


def check_uniform_balance(members, result) -> None:
    """Kafka's heterogeneous balance: a member never holds a partition that a subscriber of its topic
    with two partitions fewer could take. (It holds once balancing converges within Kafka's bound of
    rounds, which groups this small always do.)"""
    held = sizes(result)
    for owner, assignment in result.items():
        for topic in assignment:
            for other, subscription in members.items():
                if topic in subscription.subscribed_topics:
                    assert held[owner] - held[other] <= 1, (topic, owner, other, result)


def check_range_balance(members, topics, result) -> None:
    """Per topic, its subscribers' counts differ by one at most."""
    for topic in topics:
        counts = [len(result[m].get(topic, ())) for m, s in members.items() if topic in s.subscribed_topics]
        assert not counts or max(counts) - min(counts) <= 1, (topic, counts)


@ASSIGNOR_PARAMS
@PROPERTY_SETTINGS
@given(group=groups(), data=st.data())
def test_any_group_is_assigned_validly_deterministically_stickily_and_balanced(assignor, group, data):
    """One drawn group, every property: validity; the same output for the same input and for the
    input built in another order; re-running on the output changes nothing; the assignor's balance."""
    members, topics = group
    result = assignor.assign(members, topics)
    check_valid(members, topics, result)

    assert assignor.assign(members, topics) == result
    assert assignor.assign(*reordered(members, topics, data)) == result

    assert assignor.assign(rejoin(members, result), topics) == result

    if assignor is UNIFORM:
        check_uniform_balance(members, result)
    else:
        check_range_balance(members, topics, result)


@PROPERTY_SETTINGS
@given(group=groups(homogeneous=True), data=st.data())
def test_uniform_homogeneous_counts_differ_by_one_at_most(group, data):
    members, topics = group
    result = UNIFORM.assign(members, topics)
    counts = sizes(result).values()
    assert not counts or max(counts) - min(counts) <= 1
    assert UNIFORM.assign(*reordered(members, topics, data)) == result


@PROPERTY_SETTINGS
@given(group=groups(homogeneous=True, fresh=True), data=st.data())
def test_uniform_homogeneous_member_leaving_costs_no_one_else_a_partition(group, data):
    members, topics = group
    if not members:
        return
    before = UNIFORM.assign(members, topics)
    leaver = data.draw(st.sampled_from(sorted(members)))
    staying = {m: s for m, s in rejoin(members, before).items() if m != leaver}
    after = UNIFORM.assign(staying, topics)
    for m in staying:
        for topic, partitions in before[m].items():
            assert partitions <= after[m].get(topic, frozenset()), (m, topic)


@PROPERTY_SETTINGS
@given(group=groups(homogeneous=True, fresh=True), joiner=st.text("abcAB0", min_size=4, max_size=4))
def test_uniform_homogeneous_member_joining_moves_the_fewest_partitions(group, joiner):
    """Only the newcomer receives partitions, and only floor(P / M) of them: the members holding the
    extra partitions keep them (Kafka would give the newcomer an extra one if its id sorted first)."""
    members, topics = group
    if not members or joiner in members:
        return
    before = UNIFORM.assign(members, topics)
    subscribed = next(iter(members.values())).subscribed_topics
    grown = rejoin(members, before) | {joiner: MemberSubscription(subscribed)}
    after = UNIFORM.assign(grown, topics)
    for m in members:
        for topic, partitions in after[m].items():
            assert partitions <= before[m].get(topic, frozenset()), (m, topic)
    total = sum(topics[t] for t in subscribed if t in topics)
    assert sizes(after)[joiner] == total // len(grown)


@PROPERTY_SETTINGS
@given(group=groups(fresh=True))
def test_range_first_assignment_is_contiguous_ranges_in_member_order(group):
    """With nothing held yet the sticky range assignor gives Kafka 3.9's plain ranges: per topic, the
    subscribers in id order take consecutive runs, the longer ones first."""
    members, topics = group
    result = RANGE.assign(members, topics)
    for topic, count in topics.items():
        subscribers = sorted(m for m, s in members.items() if topic in s.subscribed_topics)
        if not subscribers:
            continue
        quota, extras = divmod(count, len(subscribers))
        start = 0
        for rank, m in enumerate(subscribers):
            end = start + quota + (1 if rank < extras else 0)
            assert result[m].get(topic, frozenset()) == frozenset(range(start, end)), (topic, m)
            start = end


def test_output_does_not_depend_on_string_hashing():
    """The same group under two hash seeds: iteration follows sorted names, never hash order."""
    script = (
        "import json\n"
        "from raygroups.coordinator.server_assignors import ASSIGNORS, MemberSubscription as S\n"
        "topics = {f't{i}': 5 + i for i in range(8)}\n"
        "members = {f'm{i}': S({f't{j}' for j in range(8) if (i + j) % 3}, assignment={'t1': frozenset({i})})\n"
        "           for i in range(9)}\n"
        "print(json.dumps({n: {m: {t: sorted(p) for t, p in a.items()} for m, a in\n"
        "      ASSIGNORS[n].assign(members, topics).items()} for n in sorted(ASSIGNORS)}, sort_keys=True))\n"
    )
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1]
    assert set(outputs[0]["uniform"]) == {f"m{i}" for i in range(9)}
