"""Partition assignors: scenarios ported from Kafka's assignor tests, then properties.

Scenario numbers (topics, partition counts, owned partitions, generations) follow Kafka's
``RangeAssignorTest``, ``RoundRobinAssignorTest``, ``AbstractStickyAssignorTest``,
``StickyAssignorTest`` and ``CooperativeStickyAssignorTest``; rack-aware variants are not ported
(partitions carry no replica racks here).
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from raygroups.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

from raygroups.assignors import (
    ASSIGNORS,
    COOPERATIVE,
    DEFAULT_GENERATION,
    EAGER,
    Assignor,
    CooperativeStickyAssignor,
    MemberData,
    StickyAssignor,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    get_assignor,
    range_assign,
)

STICKY_NAMES = ["sticky", "cooperative-sticky"]
GENERATION = 1


# ------------------------------------------------------------------------------------------------
# helpers


def sub(topics, owned=(), generation=DEFAULT_GENERATION, user_data=None) -> Subscription:
    return Subscription(tuple(topics), user_data, tuple(owned), generation)


def tps(topic, *partitions):
    return [(topic, p) for p in partitions]


def plan(result: dict[str, Assignment]) -> dict[str, list]:
    return {m: list(a.partitions) for m, a in result.items()}


def rejoin(assignor: Assignor, topics, owned, generation=GENERATION) -> Subscription:
    """The Subscription a member sends after holding ``owned`` in ``generation`` (what Kafka's
    ``buildSubscriptionV2Above`` builds): owned partitions, generation and the assignor's user data."""
    user_data = assignor.subscription_user_data(topics, list(owned), generation)
    return sub(topics, owned, generation, user_data)


def run(name, partitions_per_topic, subscriptions) -> dict[str, list]:
    return plan(get_assignor(name).assign(partitions_per_topic, subscriptions))


def check_valid(partitions_per_topic, subscriptions, result, complete=True):
    """Every member gets an entry; a partition goes to at most one member (exactly one if
    ``complete``), only to a member subscribed to its topic, and only if it exists."""
    assert set(result) == set(subscriptions)
    counts = Counter(tp for parts in result.values() for tp in parts)
    assert all(c == 1 for c in counts.values()), f"partition assigned twice: {counts}"
    for member, parts in result.items():
        for topic, partition in parts:
            assert topic in subscriptions[member].topics, (member, topic)
            assert 0 <= partition < partitions_per_topic.get(topic, 0), (topic, partition)
    if complete:
        subscribed = {t for s in subscriptions.values() for t in s.topics}
        expected = {(t, p) for t in subscribed for p in range(partitions_per_topic.get(t, 0))}
        assert set(counts) == expected


def check_balanced(subscriptions, result):
    """No member has two more partitions than another member subscribed to one of its topics
    (so members with identical subscriptions differ by at most one)."""
    for b, b_parts in result.items():
        for a, a_parts in result.items():
            if len(b_parts) >= len(a_parts) + 2:
                movable = [tp for tp in b_parts if tp[0] in subscriptions[a].topics]
                assert not movable, f"{movable} could move from {b} ({len(b_parts)}) to {a} ({len(a_parts)})"


def fully_balanced(result) -> bool:
    sizes = [len(p) for p in result.values()]
    return max(sizes) - min(sizes) <= 1


def no_back_and_forth(before, after):
    """Kafka's ``isSticky`` check: within a topic, partitions never move both A->B and B->A."""
    owner_before = {tp: m for m, parts in before.items() for tp in parts}
    moves = {
        (tp[0], owner_before[tp], m)
        for m, parts in after.items()
        for tp in parts
        if tp in owner_before and owner_before[tp] != m and owner_before[tp] in after
    }
    for topic, src, dst in moves:
        assert (topic, dst, src) not in moves, f"{topic}: partitions moved both {src}->{dst} and back"


def settle(name, partitions_per_topic, subscriptions, max_rounds=4):
    """Rebalance until nobody has anything to revoke (one round for eager assignors, two for
    cooperative ones), each member rejoining with what it was given. Returns (rounds, final plan)."""
    assignor = get_assignor(name)
    subs = dict(subscriptions)
    for rounds in range(1, max_rounds + 1):
        result = plan(assignor.assign(partitions_per_topic, subs))
        check_valid(partitions_per_topic, subs, result, complete=False)
        if name == "cooperative-sticky":
            check_cooperative_round(subs, result)
        revoked = any(set(subs[m].owned_partitions) - set(result[m]) for m in subs)
        if name != "cooperative-sticky" or not revoked:
            return rounds, result
        subs = {m: rejoin(assignor, subs[m].topics, result[m], subs[m].generation_id + 1) for m in subs}
    raise AssertionError(f"not settled after {max_rounds} rounds")


def check_cooperative_round(subscriptions, result):
    """KIP-429: nothing is added to one member while another one is revoking it."""
    added = {tp for m, parts in result.items() for tp in parts if tp not in subscriptions[m].owned_partitions}
    revoked = {tp for m, s in subscriptions.items() for tp in s.owned_partitions if tp not in result[m]}
    assert not added & revoked, f"assigned while still owned elsewhere: {added & revoked}"


# ------------------------------------------------------------------------------------------------
# registry and interface


def test_registry_names_protocols_and_fresh_instances():
    assert sorted(ASSIGNORS) == ["cooperative-sticky", "range", "roundrobin", "sticky"]
    for name in ASSIGNORS:
        assignor = get_assignor(name)
        assert isinstance(assignor, Assignor) and assignor.name == name
        assert assignor.protocol in assignor.supported_protocols
    assert get_assignor("cooperative-sticky").protocol == COOPERATIVE
    assert get_assignor("cooperative-sticky").supported_protocols == (COOPERATIVE, EAGER)
    assert {get_assignor(n).protocol for n in ("range", "roundrobin", "sticky")} == {EAGER}
    assert get_assignor("sticky") is not get_assignor("sticky")


@pytest.mark.parametrize("bad", ["Range", "cooperative_sticky", "", None])
def test_unknown_assignor_names_it_and_the_known_ones(bad):
    with pytest.raises(ValueError) as e:
        get_assignor(bad)
    message = str(e.value)
    assert repr(bad) in message
    for name in ASSIGNORS:
        assert name in message


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_bad_input_is_rejected_with_the_field_named(name):
    with pytest.raises(ValueError, match=r"partitions_per_topic\['t'\]"):
        get_assignor(name).assign({"t": -1}, {"m": sub(["t"])})
    with pytest.raises(TypeError, match=r"subscriptions\['m'\]"):
        get_assignor(name).assign({"t": 1}, {"m": ["t"]})


def test_range_assign_plain_data_form_is_unchanged():
    subs = {"c-2": ["orders"], "c-1": ["orders"], "c-3": ["orders", "other"]}
    assert range_assign(subs, {"orders": 8, "other": 0}) == {
        "c-2": [("orders", 3), ("orders", 4), ("orders", 5)],
        "c-1": [("orders", 0), ("orders", 1), ("orders", 2)],
        "c-3": [("orders", 6), ("orders", 7)],
    }


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_assignments_survive_the_wire_format(name):
    assignor = get_assignor(name)
    subs = {m: sub(["t1", "t2"]) for m in ("a", "b", "c")}
    wire = {m: decode_subscription(encode_subscription(s)) for m, s in subs.items()}
    result = assignor.assign({"t1": 3, "t2": 4}, wire)
    assert {m: decode_assignment(encode_assignment(a)).partitions for m, a in result.items()} == {
        m: a.partitions for m, a in result.items()
    }


# ------------------------------------------------------------------------------------------------
# scenarios every assignor must get right (RangeAssignorTest / RoundRobinAssignorTest /
# AbstractStickyAssignorTest share them)


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_one_consumer_no_topic(name):
    assert run(name, {}, {"consumer": sub([])}) == {"consumer": []}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_one_consumer_nonexistent_topic(name):
    assert run(name, {"topic": 0}, {"consumer": sub(["topic"])}) == {"consumer": []}
    assert run(name, {}, {"consumer": sub(["topic"])}) == {"consumer": []}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_one_consumer_one_topic(name):
    assert run(name, {"topic": 3}, {"consumer": sub(["topic"])}) == {"consumer": tps("topic", 0, 1, 2)}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_only_assigns_partitions_from_subscribed_topics(name):
    # the sticky ones also see a claim on a topic the member no longer subscribes to
    owned = tps("topic", 0, 1) + tps("other", 0, 1)
    subs = {"consumer": sub(["topic"], owned, GENERATION)}
    assert run(name, {"topic": 2, "other": 2}, subs) == {"consumer": tps("topic", 0, 1)}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_one_consumer_multiple_topics(name):
    result = run(name, {"topic1": 1, "topic2": 2}, {"consumer": sub(["topic1", "topic2"])})
    assert result == {"consumer": tps("topic1", 0) + tps("topic2", 0, 1)}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_two_consumers_one_topic_one_partition(name):
    subs = {"consumer1": sub(["topic"]), "consumer2": sub(["topic"])}
    result = run(name, {"topic": 1}, subs)
    check_valid({"topic": 1}, subs, result)
    assert result == {"consumer1": tps("topic", 0), "consumer2": []}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_two_consumers_one_topic_two_partitions(name):
    subs = {"consumer1": sub(["topic"]), "consumer2": sub(["topic"])}
    assert run(name, {"topic": 2}, subs) == {"consumer1": tps("topic", 0), "consumer2": tps("topic", 1)}


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "range",
            {
                "consumer1": tps("topic1", 0),
                "consumer2": tps("topic1", 1) + tps("topic2", 0, 1),
                "consumer3": tps("topic1", 2),
            },
        ),
        (
            "roundrobin",
            {
                "consumer1": tps("topic1", 0),
                "consumer2": tps("topic1", 1) + tps("topic2", 0, 1),
                "consumer3": tps("topic1", 2),
            },
        ),
        # the sticky assignors give topic2 (one possible consumer) to consumer2 first, then balance
        (
            "sticky",
            {
                "consumer1": tps("topic1", 0, 2),
                "consumer2": tps("topic2", 0, 1),
                "consumer3": tps("topic1", 1),
            },
        ),
        (
            "cooperative-sticky",
            {
                "consumer1": tps("topic1", 0, 2),
                "consumer2": tps("topic2", 0, 1),
                "consumer3": tps("topic1", 1),
            },
        ),
    ],
)
def test_multiple_consumers_mixed_topics(name, expected):
    subs = {
        "consumer1": sub(["topic1"]),
        "consumer2": sub(["topic1", "topic2"]),
        "consumer3": sub(["topic1"]),
    }
    result = run(name, {"topic1": 3, "topic2": 2}, subs)
    check_valid({"topic1": 3, "topic2": 2}, subs, result)
    assert result == expected


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "range",
            {
                "consumer1": tps("topic1", 0, 1) + tps("topic2", 0, 1),
                "consumer2": tps("topic1", 2) + tps("topic2", 2),
            },
        ),
        (
            "roundrobin",
            {
                "consumer1": tps("topic1", 0, 2) + tps("topic2", 1),
                "consumer2": tps("topic1", 1) + tps("topic2", 0, 2),
            },
        ),
        (
            "sticky",
            {
                "consumer1": tps("topic1", 0, 2) + tps("topic2", 1),
                "consumer2": tps("topic1", 1) + tps("topic2", 0, 2),
            },
        ),
        (
            "cooperative-sticky",
            {
                "consumer1": tps("topic1", 0, 2) + tps("topic2", 1),
                "consumer2": tps("topic1", 1) + tps("topic2", 0, 2),
            },
        ),
    ],
)
def test_two_consumers_two_topics_six_partitions(name, expected):
    subs = {"consumer1": sub(["topic1", "topic2"]), "consumer2": sub(["topic1", "topic2"])}
    assert run(name, {"topic1": 3, "topic2": 3}, subs) == expected


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_stateless_assignors_ignore_previous_ownership(name):
    subs = {
        "consumer1": sub(["topic"], tps("topic", 2), GENERATION),
        "consumer2": sub(["topic"], tps("topic", 0, 1), GENERATION),
    }
    fresh = {m: sub(["topic"]) for m in subs}
    assert run(name, {"topic": 3}, subs) == run(name, {"topic": 3}, fresh)


def test_range_ranges_are_per_topic_and_lower_member_ids_get_the_extra_partition():
    subs = {f"c{i}": sub(["a", "b"]) for i in range(3)}
    result = run("range", {"a": 5, "b": 4}, subs)
    assert result == {
        "c0": tps("a", 0, 1) + tps("b", 0, 1),
        "c1": tps("a", 2, 3) + tps("b", 2),
        "c2": tps("a", 4) + tps("b", 3),
    }


def test_roundrobin_keeps_one_cursor_across_topics():
    # consumer2 alone subscribes to "b": the cursor skips the others, then resumes after consumer2
    subs = {"consumer1": sub(["a", "c"]), "consumer2": sub(["a", "b", "c"]), "consumer3": sub(["a", "c"])}
    result = run("roundrobin", {"a": 2, "b": 2, "c": 3}, subs)
    assert result == {
        "consumer1": tps("a", 0) + tps("c", 1),
        "consumer2": tps("a", 1) + tps("b", 0, 1) + tps("c", 2),
        "consumer3": tps("c", 0),
    }


@pytest.mark.parametrize(
    "name, expected_b, expected_a",
    [
        ("range", tps("topic1", 0, 1) + tps("topic2", 0, 1), tps("topic1", 2) + tps("topic2", 2)),
        ("roundrobin", tps("topic1", 0, 2) + tps("topic2", 1), tps("topic1", 1) + tps("topic2", 0, 2)),
    ],
)
@pytest.mark.parametrize("a_instance", ["instance2", None])
def test_static_members_rank_by_instance_id_before_dynamic_ones(name, expected_b, expected_a, a_instance):
    # consumer-a sorts first by member id, but consumer-b is static ("instance1"): it comes first
    # whether consumer-a is static with a later instance id or dynamic
    subs = {"consumer-b": sub(["topic1", "topic2"]), "consumer-a": sub(["topic1", "topic2"])}
    ids = {"consumer-b": "instance1", "consumer-a": a_instance}
    result = plan(get_assignor(name).assign({"topic1": 3, "topic2": 3}, subs, ids))
    assert result == {"consumer-b": expected_b, "consumer-a": expected_a}


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_static_member_assignment_survives_member_id_changes(name):
    ppt = {"topic1": 5, "topic2": 5}
    both = ["topic1", "topic2"]
    first_ids = {
        "consumer1": "instance1",
        "consumer2": "instance2",
        "consumer3": "instance3",
        "consumer4": None,
    }
    first = plan(get_assignor(name).assign(ppt, {m: sub(both) for m in first_ids}, first_ids))
    if name == "roundrobin":
        assert first == {
            "consumer1": tps("topic1", 0, 4) + tps("topic2", 3),
            "consumer2": tps("topic1", 1) + tps("topic2", 0, 4),
            "consumer3": tps("topic1", 2) + tps("topic2", 1),
            "consumer4": tps("topic1", 3) + tps("topic2", 2),
        }
    # the static members restart with new member ids that sort the other way round; a new
    # dynamic member replaces consumer4
    second_ids = {"zz-1": "instance1", "yy-2": "instance2", "xx-3": "instance3", "consumer5": None}
    second = plan(get_assignor(name).assign(ppt, {m: sub(both) for m in second_ids}, second_ids))
    by_instance = {first_ids[m] or "dynamic": parts for m, parts in first.items()}
    assert {second_ids[m] or "dynamic": parts for m, parts in second.items()} == by_instance


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_sticky_assignors_accept_instance_ids(name):
    subs = {"consumer-b": sub(["topic"]), "consumer-a": sub(["topic"])}
    ids = {"consumer-b": "instance1", "consumer-a": None}
    assert run(name, {"topic": 2}, subs) == plan(get_assignor(name).assign({"topic": 2}, subs, ids))


# ------------------------------------------------------------------------------------------------
# sticky scenarios (AbstractStickyAssignorTest), for both sticky assignors


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_consumer_owning_min_quota_expected_max_quota(name):
    a = get_assignor(name)
    topics = ["topic1", "topic2"]
    subs = {
        "consumer1": rejoin(a, topics, tps("topic1", 0) + tps("topic2", 1)),
        "consumer2": rejoin(a, topics, tps("topic1", 1) + tps("topic2", 2)),
    }
    result = plan(a.assign({"topic1": 2, "topic2": 3}, subs))
    assert result == {
        "consumer1": tps("topic1", 0) + tps("topic2", 0, 1),
        "consumer2": tps("topic1", 1) + tps("topic2", 2),
    }


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_more_max_quota_owners_than_max_quota_slots(name):
    # 4 partitions, 3 members: only one may keep 2. Kafka picks by hash order; here the first member
    # id among those owning the most keeps 2, the other keeps its lowest partition number
    a = get_assignor(name)
    topics = ["topic1", "topic2"]
    subs = {
        "consumer1": rejoin(a, topics, tps("topic1", 0) + tps("topic2", 0)),
        "consumer2": rejoin(a, topics, tps("topic1", 1) + tps("topic2", 1)),
        "consumer3": rejoin(a, topics, []),
    }
    result = plan(a.assign({"topic1": 2, "topic2": 2}, subs))
    assert result["consumer1"] == tps("topic1", 0) + tps("topic2", 0)
    assert result["consumer2"] == tps("topic1", 1)
    # topic2-1 moves from consumer2 to consumer3: cooperative withholds it for one round
    assert result["consumer3"] == ([] if name == "cooperative-sticky" else tps("topic2", 1))
    rounds, final = settle(name, {"topic1": 2, "topic2": 2}, subs)
    assert rounds == (2 if name == "cooperative-sticky" else 1)
    assert final["consumer3"] == tps("topic2", 1)


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_all_consumers_are_under_min_quota(name):
    a = get_assignor(name)
    topics = ["topic1", "topic2"]
    subs = {
        "consumer1": rejoin(a, topics, tps("topic1", 0)),
        "consumer2": rejoin(a, topics, tps("topic1", 1)),
        "consumer3": rejoin(a, topics, []),
    }
    result = plan(a.assign({"topic1": 2, "topic2": 3}, subs))
    assert result == {
        "consumer1": tps("topic1", 0) + tps("topic2", 1),
        "consumer2": tps("topic1", 1) + tps("topic2", 2),
        "consumer3": tps("topic2", 0),
    }


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_add_remove_consumer_one_topic(name):
    a = get_assignor(name)
    ppt = {"topic": 3}
    first = plan(a.assign(ppt, {"consumer1": sub(["topic"])}))
    assert first == {"consumer1": tps("topic", 0, 1, 2)}

    subs = {"consumer1": rejoin(a, ["topic"], first["consumer1"]), "consumer2": rejoin(a, ["topic"], [])}
    second = plan(a.assign(ppt, subs))
    assert second["consumer1"] == tps("topic", 0, 1)
    assert second["consumer2"] == ([] if name == "cooperative-sticky" else tps("topic", 2))
    rounds, second = settle(name, ppt, subs)
    assert second == {"consumer1": tps("topic", 0, 1), "consumer2": tps("topic", 2)}

    third = plan(a.assign(ppt, {"consumer2": rejoin(a, ["topic"], second["consumer2"])}))
    assert third == {"consumer2": tps("topic", 0, 1, 2)}


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_topic_balance_after_reassignment(name):
    topics = ["topic1", "topic2"]
    ppt = {"topic1": 12, "topic2": 12}
    a = get_assignor(name)

    def per_topic_counts(result):
        return {m: Counter(t for t, _ in parts) for m, parts in result.items()}

    _, result = settle(name, ppt, {"consumer1": sub(topics)})
    members = ["consumer1"]
    for new_members, removed, expected in [
        (["consumer2"], [], 6),
        (["consumer3", "consumer4"], [], 3),
        ([], ["consumer1", "consumer2"], 6),
    ]:
        subs = {m: rejoin(a, topics, result[m]) for m in members if m not in removed}
        subs.update({m: rejoin(a, topics, []) for m in new_members})
        members = sorted(subs)
        _, result = settle(name, ppt, subs)
        check_valid(ppt, subs, result)
        assert all(c == {"topic1": expected, "topic2": expected} for c in per_topic_counts(result).values())


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_add_remove_two_consumers_two_topics(name):
    topics = ["topic1", "topic2"]
    ppt = {"topic1": 3, "topic2": 4}
    a = get_assignor(name)
    first = plan(a.assign(ppt, {"consumer1": sub(topics), "consumer2": sub(topics)}))
    assert first == {
        "consumer1": tps("topic1", 0, 2) + tps("topic2", 1, 3),
        "consumer2": tps("topic1", 1) + tps("topic2", 0, 2),
    }

    subs = {
        "consumer1": rejoin(a, topics, first["consumer1"]),
        "consumer2": rejoin(a, topics, first["consumer2"]),
        "consumer3": rejoin(a, topics, []),
        "consumer4": rejoin(a, topics, []),
    }
    expected = {
        "consumer1": tps("topic1", 0) + tps("topic2", 1),
        "consumer2": tps("topic1", 1) + tps("topic2", 0),
        "consumer3": tps("topic1", 2) + tps("topic2", 3),
        "consumer4": tps("topic2", 2),
    }
    second = plan(a.assign(ppt, subs))
    if name == "cooperative-sticky":
        # the three partitions changing hands are what Kafka calls partitionsTransferringOwnership
        assert second == {**expected, "consumer3": [], "consumer4": []}
    else:
        assert second == expected
    _, second = settle(name, ppt, subs)
    assert second == expected

    subs = {m: rejoin(a, topics, second[m]) for m in ("consumer3", "consumer4")}
    third = plan(a.assign(ppt, subs))
    assert third == {
        "consumer3": tps("topic1", 0, 2) + tps("topic2", 1, 3),
        "consumer4": tps("topic1", 1) + tps("topic2", 0, 2),
    }


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_poor_round_robin_assignment_scenario(name):
    # topic1..topic5 with 2,1,2,1,2 partitions; consumers 2 and 3 skip the single-partition topics.
    # Round-robin leaves consumer3 with nothing; the sticky assignors give everybody two.
    ppt = {f"topic{i}": (i % 2) + 1 for i in range(1, 6)}
    everything = sorted(ppt)
    odd = ["topic1", "topic3", "topic5"]
    subs = {
        "consumer1": sub(everything),
        "consumer2": sub(odd),
        "consumer3": sub(odd),
        "consumer4": sub(everything),
    }
    assert run("roundrobin", ppt, subs)["consumer3"] == []
    result = run(name, ppt, subs)
    check_valid(ppt, subs, result)
    check_balanced(subs, result)
    assert [len(p) for p in result.values()] == [2, 2, 2, 2]


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_add_remove_topic_two_consumers(name):
    a = get_assignor(name)
    ppt = {"topic": 3}
    first = plan(a.assign(ppt, {"consumer1": sub(["topic"]), "consumer2": sub(["topic"])}))
    assert sorted(len(p) for p in first.values()) == [1, 2]

    ppt = {"topic": 3, "topic2": 3}
    both = ["topic", "topic2"]
    subs = {m: rejoin(a, both, first[m]) for m in first}
    second = plan(a.assign(ppt, subs))
    assert [len(p) for p in second.values()] == [3, 3]
    assert all(set(first[m]) <= set(second[m]) for m in first)

    ppt = {"topic2": 3}
    subs = {m: rejoin(a, ["topic2"], second[m]) for m in second}
    third = plan(a.assign(ppt, subs))
    assert sorted(len(p) for p in third.values()) == [1, 2]
    assert all(set(third[m]) <= set(second[m]) for m in third)


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_reassignment_after_one_consumer_leaves(name):
    # topic01..topic19 with i partitions; consumer i subscribes to topics 1..i
    a = get_assignor(name)
    ppt = {f"topic{i:02d}": i for i in range(1, 20)}
    subs = {f"consumer{i:02d}": sub([f"topic{j:02d}" for j in range(1, i + 1)]) for i in range(1, 20)}
    _, first = settle(name, ppt, subs)
    check_valid(ppt, subs, first)
    check_balanced(subs, first)

    subs = {m: rejoin(a, s.topics, first[m]) for m, s in subs.items() if m != "consumer10"}
    _, second = settle(name, ppt, subs)
    check_valid(ppt, subs, second)
    check_balanced(subs, second)
    no_back_and_forth(first, second)


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_reassignment_after_one_consumer_added(name):
    a = get_assignor(name)
    ppt = {"topic": 20}
    subs = {f"consumer{i}": sub(["topic"]) for i in range(1, 10)}
    first = plan(a.assign(ppt, subs))
    check_valid(ppt, subs, first)
    assert fully_balanced(first)

    subs = {m: rejoin(a, ["topic"], first[m]) for m in subs}
    subs["consumer10"] = rejoin(a, ["topic"], [])
    _, second = settle(name, ppt, subs)
    check_valid(ppt, subs, second)
    assert fully_balanced(second)
    # everyone had 2 or 3 and now has 2: each old member keeps two of its own
    assert all(len(set(first[m]) & set(second[m])) == 2 for m in first)


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_same_subscriptions_one_consumer_leaves(name):
    a = get_assignor(name)
    ppt = {f"topic{i:02d}": i for i in range(1, 15)}
    subs = {f"consumer{i}": sub(sorted(ppt)) for i in range(1, 9)}
    first = plan(a.assign(ppt, subs))
    check_valid(ppt, subs, first)
    assert fully_balanced(first)

    subs = {m: rejoin(a, sorted(ppt), first[m]) for m in subs if m != "consumer5"}
    result = plan(a.assign(ppt, subs))
    # 105 partitions over 7: everybody stays within the new quota, so nothing moves and nothing waits
    check_valid(ppt, subs, result)
    assert fully_balanced(result)
    assert all(set(first[m]) <= set(result[m]) for m in subs)


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_stickiness_when_the_leader_leaves(name):
    a = get_assignor(name)
    ppt = {"topic1": 3}
    subs = {f"consumer{i}": sub(["topic1"]) for i in range(1, 5)}
    first = plan(a.assign(ppt, subs))
    assert all(len(p) <= 1 for p in first.values())

    subs = {m: rejoin(a, ["topic1"], first[m]) for m in subs if m != "consumer1"}
    second = plan(a.assign(ppt, subs))
    assert all(len(p) == 1 for p in second.values())
    assert all(set(first[m]) <= set(second[m]) for m in second)


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_assignment_updated_for_deleted_topic(name):
    subs = {"consumer": sub(["topic1", "topic2", "topic3"])}
    result = run(name, {"topic1": 1, "topic3": 100}, subs)
    assert len(result["consumer"]) == 101


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_only_subscribed_topic_deleted(name):
    a = get_assignor(name)
    first = plan(a.assign({"topic": 3}, {"consumer": sub(["topic"])}))
    subs = {"consumer": rejoin(a, ["topic"], first["consumer"])}
    assert plan(a.assign({}, subs)) == {"consumer": []}


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_all_consumers_reach_expected_quota(name):
    a = get_assignor(name)
    subs = {
        "consumer1": rejoin(a, ["topic"], tps("topic", 0, 1)),
        "consumer2": rejoin(a, ["topic"], tps("topic", 2)),
        "consumer3": rejoin(a, ["topic"], []),
    }
    assert plan(a.assign({"topic": 4}, subs)) == {
        "consumer1": tps("topic", 0, 1),
        "consumer2": tps("topic", 2),
        "consumer3": tps("topic", 3),
    }


@pytest.mark.parametrize("name", STICKY_NAMES)
@pytest.mark.parametrize("older", [9, DEFAULT_GENERATION])
def test_owned_partitions_invalidated_for_stale_or_missing_generation(name, older):
    a = get_assignor(name)
    topics = ["topic", "topic2"]
    claim = tps("topic", 0, 2) + tps("topic2", 1)
    subs = {"consumer1": rejoin(a, topics, claim, 10), "consumer2": rejoin(a, topics, claim, older)}
    result = plan(a.assign({"topic": 3, "topic2": 3}, subs))
    assert result == {
        "consumer1": tps("topic", 0, 2) + tps("topic2", 1),
        "consumer2": tps("topic", 1) + tps("topic2", 0, 2),
    }


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_owned_partitions_invalidated_for_consumer_with_multiple_generations(name):
    a = get_assignor(name)
    topics = ["topic", "topic2"]
    subs = {
        "consumer1": rejoin(a, topics, tps("topic", 0, 1) + tps("topic2", 1), 10),
        "consumer2": rejoin(a, topics, tps("topic", 0) + tps("topic2", 1, 2), 8),
    }
    result = plan(a.assign({"topic": 3, "topic2": 3}, subs))
    assert result == {
        "consumer1": tps("topic", 0, 1) + tps("topic2", 1),
        "consumer2": tps("topic", 2) + tps("topic2", 0, 2),
    }


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_partitions_go_to_the_highest_generation(name):
    a = get_assignor(name)
    topics = ["topic", "topic2", "topic3"]
    subs = {
        "consumer1": rejoin(a, topics, tps("topic", 0) + tps("topic2", 0) + tps("topic3", 0), 10),
        "consumer2": rejoin(a, topics, tps("topic", 1) + tps("topic2", 1) + tps("topic3", 1), 9),
        "consumer3": rejoin(a, topics, tps("topic2", 1) + tps("topic3", 0, 2), 8),
    }
    result = plan(a.assign({t: 3 for t in topics}, subs))
    assert result == {
        "consumer1": tps("topic", 0) + tps("topic2", 0) + tps("topic3", 0),
        "consumer2": tps("topic", 1) + tps("topic2", 1) + tps("topic3", 1),
        "consumer3": tps("topic", 2) + tps("topic2", 2) + tps("topic3", 2),
    }


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_three_generations_claiming_one_partition_in_every_order(name):
    # Kafka's testSubscriptionNotEqualAndAssignSamePartitionWith3Generation: whichever order the
    # generations come in, topic-2 goes to the newest claimant and nobody gets a partition twice
    a = get_assignor(name)
    ppt = {"topic": 6, "topic1": 1}
    for gens in ([1, 2, 3], [1, 3, 2], [2, 1, 3], [2, 3, 1], [3, 1, 2], [3, 2, 1]):
        claims = {
            "consumer1": tps("topic", 0, 2),
            "consumer2": tps("topic", 1, 2, 3),
            "consumer3": tps("topic", 2, 4, 5),
        }
        subs = {m: rejoin(a, ["topic"], claims[m], g) for m, g in zip(sorted(claims), gens, strict=True)}
        subs["consumer4"] = rejoin(a, ["topic1"], tps("topic1", 0), 2)
        result = plan(a.assign(ppt, subs))
        check_valid(ppt, subs, result, complete=name != "cooperative-sticky")
        newest = sorted(claims)[gens.index(3)]
        assert ("topic", 2) in result[newest]
        assert all(1 <= len(p) <= 2 for p in result.values())


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_no_reassignment_of_current_members(name):
    a = get_assignor(name)
    topics = ["topic", "topic1", "topic2", "topic3"]
    subs = {
        "consumer1": rejoin(a, topics, [], DEFAULT_GENERATION),
        "consumer2": rejoin(a, topics, tps("topic", 0) + tps("topic2", 0) + tps("topic1", 0), 9),
        "consumer3": rejoin(a, topics, tps("topic3", 2) + tps("topic2", 2) + tps("topic1", 1), 8),
        "consumer4": rejoin(a, topics, tps("topic3", 1) + tps("topic", 1, 2), 7),
    }
    result = plan(a.assign({t: 3 for t in topics}, subs))
    assert result["consumer1"] == tps("topic1", 2) + tps("topic2", 1) + tps("topic3", 0)
    assert all(
        set(subs[m].owned_partitions) == set(result[m]) for m in ("consumer2", "consumer3", "consumer4")
    )


@pytest.mark.parametrize("equal", [True, False])
@pytest.mark.parametrize("name", STICKY_NAMES)
def test_assignment_with_multiple_generations(name, equal):
    # Kafka's testAssignmentWithMultipleGenerations1
    a = get_assignor(name)
    everything = ["topic", "topic2"]
    c2_topics = everything if equal else ["topic"]
    ppt = {"topic": 6, "topic2": 6}
    subs = {"consumer1": sub(everything), "consumer2": sub(c2_topics), "consumer3": sub(everything)}
    r1 = plan(a.assign(ppt, subs))
    assert [len(p) for p in r1.values()] == [4, 4, 4]

    subs = {
        "consumer1": rejoin(a, everything, r1["consumer1"], 1),
        "consumer2": rejoin(a, c2_topics, r1["consumer2"], 1),
    }
    _, r2 = settle(name, ppt, subs)
    assert [len(p) for p in r2.values()] == [6, 6]
    assert set(r1["consumer2"]) <= set(r2["consumer2"])
    if equal:
        assert set(r1["consumer1"]) <= set(r2["consumer1"])

    # consumer3 comes back with its generation-1 view while consumer2 is at generation 2
    subs = {
        "consumer2": rejoin(a, c2_topics, r2["consumer2"], 2),
        "consumer3": rejoin(a, everything, r1["consumer3"], 1),
    }
    _, r3 = settle(name, ppt, subs)
    check_valid(ppt, subs, r3)
    assert [len(p) for p in r3.values()] == [6, 6]
    if name == "sticky":
        # the generation-2 owner keeps all it had; the stale claims of consumer3 count for nothing
        assert set(r3["consumer2"]) == set(r2["consumer2"])


@pytest.mark.parametrize("equal", [True, False])
@pytest.mark.parametrize("name", STICKY_NAMES)
def test_assignment_with_conflicting_previous_generations(name, equal):
    a = get_assignor(name)
    everything = ["topic", "topic2", "topic3"]
    c1_topics = everything if equal else ["topic"]
    c2_topics = everything if equal else ["topic", "topic2"]
    c1 = tps("topic", 0, 1, 2) + tps("topic2", 2, 3) + tps("topic3", 0) if equal else tps("topic", 0, 1, 2, 3)
    c2 = tps("topic", 0, 1) + tps("topic2", 0, 1, 2, 3)
    c3 = tps("topic", 2, 3) + tps("topic3", 0, 1, 2, 3)
    subs = {
        "consumer1": rejoin(a, c1_topics, c1, 1),
        "consumer2": rejoin(a, c2_topics, c2, 2),
        "consumer3": rejoin(a, everything, c3, 2),
    }
    ppt = {t: 4 for t in everything}
    _, result = settle(name, ppt, subs)
    assert [len(p) for p in result.values()] == [4, 4, 4]
    if name == "sticky":
        assert set(result["consumer2"]) <= set(c2) and set(result["consumer3"]) <= set(c3)


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_mixed_subscriptions_keep_what_balance_allows(name):
    # consumer2 reads everything and owned topic2-0; consumer1 can only read topic2. Balance says
    # 2 + 1, and the only balanced choice that keeps topic2-0 gives consumer1 topic2-1.
    a = get_assignor(name)
    subs = {
        "consumer1": rejoin(a, ["topic2"], []),
        "consumer2": rejoin(a, ["topic1", "topic2"], tps("topic2", 0)),
    }
    expected = {"consumer1": tps("topic2", 1), "consumer2": tps("topic1", 0) + tps("topic2", 0)}
    assert run(name, {"topic1": 1, "topic2": 2}, subs) == expected


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_member_owning_one_of_a_shared_topic(name):
    # consumer1 reads both topics and owned t0-0; consumer2 reads only t0: consumer1 keeps t0-0
    # and takes t3, consumer2 takes the rest of t0 (2 + 3, the only balanced split keeping t0-0)
    a = get_assignor(name)
    subs = {"consumer1": rejoin(a, ["t3", "t0"], tps("t0", 0)), "consumer2": rejoin(a, ["t0"], [])}
    result = run(name, {"t0": 3, "t3": 2}, subs)
    assert result == {"consumer1": tps("t0", 0) + tps("t3", 0, 1), "consumer2": tps("t0", 1, 2)}


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_balance_beats_stickiness_along_a_chain(name):
    # A reads x, B reads x and y, C reads y and z, D reads z. D owns two partitions and A none:
    # balancing takes three moves of owned partitions in a chain (x-0 B->A, y-0 C->B, z-1 D->C),
    # which lowers the imbalance by less than it costs in stickiness, yet balance must win
    a = get_assignor(name)
    subs = {
        "A": rejoin(a, ["x"], []),
        "B": rejoin(a, ["x", "y"], tps("x", 0)),
        "C": rejoin(a, ["y", "z"], tps("y", 0)),
        "D": rejoin(a, ["z"], tps("z", 0, 1)),
    }
    ppt = {"x": 1, "y": 1, "z": 2}
    expected = {"A": tps("x", 0), "B": tps("y", 0), "C": tps("z", 1), "D": tps("z", 0)}
    if name == "cooperative-sticky":
        assert plan(a.assign(ppt, subs)) == {"A": [], "B": [], "C": [], "D": tps("z", 0)}
    rounds, result = settle(name, ppt, subs)
    assert result == expected
    assert rounds == (2 if name == "cooperative-sticky" else 1)


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_groups_reading_disjoint_topics_are_balanced_separately(name):
    # Kafka's testAssignmentAndGroupWithNonEqualSubscriptionNotTimeout, scaled down: every fourth
    # consumer reads the first half of the topics, the others the second half
    a = get_assignor(name)
    ppt = {f"topic{i:02d}": 20 for i in range(20)}
    names = sorted(ppt)
    subs = {f"consumer{i:03d}": sub(names[:10] if i % 4 == 0 else names[10:]) for i in range(100)}
    first = plan(a.assign(ppt, subs))
    check_valid(ppt, subs, first)
    check_balanced(subs, first)
    first_half = [m for m in subs if int(m[-3:]) % 4 == 0]
    assert {len(first[m]) for m in first_half} == {8}  # 200 partitions over 25
    assert {len(first[m]) for m in subs if m not in first_half} == {2, 3}  # 200 over 75
    again = {m: rejoin(a, s.topics, first[m]) for m, s in subs.items()}
    assert plan(a.assign(ppt, again)) == first


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_large_uniform_group_then_a_member_leaves(name):
    a = get_assignor(name)
    ppt = {f"topic{i:02d}": 200 for i in range(50)}
    subs = {f"consumer{i:04d}": sub(sorted(ppt)) for i in range(1000)}
    first = plan(a.assign(ppt, subs))
    assert {len(p) for p in first.values()} == {10}
    subs = {m: rejoin(a, sorted(ppt), first[m]) for m in subs if m != "consumer0500"}
    second = plan(a.assign(ppt, subs))
    check_valid(ppt, subs, second)
    assert fully_balanced(second)
    assert all(set(first[m]) <= set(second[m]) for m in subs)


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_uniform_three_topics_matches_kafka(name):
    # the non-rack-aware expectation of Kafka's testRackAwareAssignmentWithUniformSubscription
    ppt = {"t1": 6, "t2": 7, "t3": 2}
    subs = {f"c{i}": sub(["t1", "t2", "t3"]) for i in range(3)}
    assert run(name, ppt, subs) == {
        "c0": tps("t1", 0, 3) + tps("t2", 0, 3, 6),
        "c1": tps("t1", 1, 4) + tps("t2", 1, 4) + tps("t3", 0),
        "c2": tps("t1", 2, 5) + tps("t2", 2, 5) + tps("t3", 1),
    }


# ------------------------------------------------------------------------------------------------
# the same partition claimed twice in one generation (Sticky/CooperativeStickyAssignorTest)


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_claim_in_the_same_generation_by_two_members_is_invalidated_equal(name):
    a = get_assignor(name)
    subs = {
        "consumer1": rejoin(a, ["topic"], tps("topic", 0, 1)),
        "consumer2": rejoin(a, ["topic"], tps("topic", 0, 2)),
        "consumer3": rejoin(a, ["topic"], []),
    }
    result = plan(a.assign({"topic": 3}, subs))
    # both keep their undisputed partition; topic-0 goes to consumer3, but under the cooperative
    # protocol only once both claimants have revoked it
    assert result == {
        "consumer1": tps("topic", 1),
        "consumer2": tps("topic", 2),
        "consumer3": [] if name == "cooperative-sticky" else tps("topic", 0),
    }
    _, final = settle(name, {"topic": 3}, subs)
    assert final["consumer3"] == tps("topic", 0)


@pytest.mark.parametrize("name", STICKY_NAMES)
def test_claim_in_the_same_generation_by_two_members_is_invalidated_unequal(name):
    a = get_assignor(name)
    subs = {
        "consumer1": rejoin(a, ["topic"], tps("topic", 0, 1)),
        "consumer2": rejoin(a, ["topic"], tps("topic", 0, 2)),
        "consumer3": rejoin(a, ["topic"], []),
    }
    result = plan(a.assign({"topic": 4}, subs))
    assert result == {
        "consumer1": tps("topic", 1, 3),
        "consumer2": tps("topic", 2),
        "consumer3": [] if name == "cooperative-sticky" else tps("topic", 0),
    }


def test_cooperative_withholds_a_doubly_claimed_partition_even_from_a_claimant():
    # same-generation claims by consumer1 and consumer2; the target gives topic-0 to consumer1,
    # which claims it, but consumer2 may still be fetching it: nobody gets it this round
    a = get_assignor("cooperative-sticky")
    subs = {
        "consumer1": rejoin(a, ["topic"], tps("topic", 0)),
        "consumer2": rejoin(a, ["topic"], tps("topic", 0, 1)),
    }
    assert plan(get_assignor("sticky").assign({"topic": 2}, subs)) == {
        "consumer1": tps("topic", 0),
        "consumer2": tps("topic", 1),
    }
    assert plan(a.assign({"topic": 2}, subs)) == {"consumer1": [], "consumer2": tps("topic", 1)}


def test_cooperative_newer_generation_owner_keeps_a_partition_a_stale_member_claims():
    a = get_assignor("cooperative-sticky")
    subs = {
        "consumer1": rejoin(a, ["topic"], tps("topic", 0), 5),
        "consumer2": rejoin(a, ["topic"], tps("topic", 0, 1), 4),
    }
    assert plan(a.assign({"topic": 2}, subs)) == {"consumer1": tps("topic", 0), "consumer2": tps("topic", 1)}


# ------------------------------------------------------------------------------------------------
# member data and user data


def test_sticky_user_data_is_kafkas_byte_layout():
    data = encode_sticky_user_data([("t2", 1), ("t1", 0), ("t2", 0)], 7)
    assert data == (
        b"\x00\x00\x00\x02"
        + b"\x00\x02t1"
        + b"\x00\x00\x00\x01"
        + b"\x00\x00\x00\x00"
        + b"\x00\x02t2"
        + b"\x00\x00\x00\x02"
        + b"\x00\x00\x00\x00"
        + b"\x00\x00\x00\x01"
        + b"\x00\x00\x00\x07"
    )
    assert decode_sticky_user_data(data) == MemberData((("t1", 0), ("t2", 0), ("t2", 1)), 7)
    # v0 (no generation), as written by old clients
    assert decode_sticky_user_data(encode_sticky_user_data([("t", 3)], None)) == MemberData((("t", 3),), -1)
    # garbage means "no previous assignment", not a failed rebalance
    for garbage in (
        b"\x00",
        b"\x7f\xff\xff\xff",
        b"\x00\x00\x00\x01\x00\x09ab",
        b"\x00\x00\x00\x01\x00\x02\xff\xfe",
    ):
        assert decode_sticky_user_data(garbage) == MemberData()


def test_sticky_user_data_after_on_assignment():
    a = StickyAssignor()
    assert a.subscription_user_data({"t"}) is None  # never assigned: nothing to say (as Kafka)
    # before any on_assignment, what the caller holds stands in
    explicit = a.subscription_user_data({"t"}, [("t", 0)], 4)
    assert decode_sticky_user_data(explicit) == MemberData((("t", 0),), 4)
    a.on_assignment(Assignment((("t", 1),)), 3)
    assert decode_sticky_user_data(a.subscription_user_data({"t"})) == MemberData((("t", 1),), 3)
    # an EAGER member has revoked everything before it rejoins, so it owns nothing (and may have
    # been reset to no generation): the user data still carries its last assignment
    after_revoke = a.subscription_user_data({"t"}, (), DEFAULT_GENERATION)
    assert decode_sticky_user_data(after_revoke) == MemberData((("t", 1),), 3)


def test_sticky_stays_sticky_under_eager_rejoins():
    # members as Kafka's eager consumer runs them: revoke all, rejoin with empty owned_partitions
    ppt = {"topic": 6}
    members = {m: StickyAssignor() for m in ("consumer1", "consumer2", "consumer3")}
    leader = StickyAssignor()

    def join(ms, generation):
        subs = {
            m: sub(["topic"], (), generation, members[m].subscription_user_data(["topic"], (), generation))
            for m in ms
        }
        result = leader.assign(ppt, subs)
        for m, assignment in result.items():
            members[m].on_assignment(assignment, generation + 1)
        return plan(result)

    first = join(["consumer1", "consumer2", "consumer3"], 0)
    second = join(["consumer1", "consumer2"], 1)
    assert all(set(first[m]) <= set(second[m]) for m in second)
    third = join(["consumer1", "consumer2", "consumer3"], 2)
    assert all(len(set(second[m]) & set(third[m])) == 2 for m in second)


def test_sticky_member_data_honours_user_data_over_subscription_fields():
    a = StickyAssignor()
    user_data = encode_sticky_user_data(tps("topic1", 0) + tps("topic2", 1), GENERATION - 1)
    s = Subscription(("topic",), user_data, tps("topic", 0), GENERATION)
    assert a.member_data(s) == MemberData((("topic1", 0), ("topic2", 1)), GENERATION - 1)
    # without user data, the v1+/v2+ fields are the claim
    assert a.member_data(sub(["topic"], tps("topic", 0), GENERATION)) == MemberData(
        (("topic", 0),), GENERATION
    )


def test_sticky_old_schema_claims_still_count():
    # Kafka's testSchemaBackwardCompatibility: consumer2 sends v0 user data (no generation)
    a = StickyAssignor()
    subs = {
        "consumer1": rejoin(a, ["topic"], tps("topic", 0, 2), 1),
        "consumer2": sub(["topic"], user_data=encode_sticky_user_data(tps("topic", 1), None)),
        "consumer3": sub(["topic"]),
    }
    result = plan(a.assign({"topic": 3}, subs))
    assert result["consumer2"] == tps("topic", 1)
    assert result["consumer1"] in (tps("topic", 0), tps("topic", 2))
    assert [len(p) for p in result.values()] == [1, 1, 1]


def test_cooperative_user_data_and_member_data():
    a = CooperativeStickyAssignor()
    assert decode_cooperative_user_data(a.subscription_user_data({"t"})) == DEFAULT_GENERATION
    assert a.subscription_user_data({"t"}, (), 7) == encode_cooperative_user_data(7)
    a.on_assignment(Assignment(), 10)
    assert a.subscription_user_data({"t"}) == encode_cooperative_user_data(10) == b"\x00\x00\x00\x0a"
    assert a.subscription_user_data({"t"}, (), DEFAULT_GENERATION) == encode_cooperative_user_data(10)
    assert decode_cooperative_user_data(None) == DEFAULT_GENERATION
    assert decode_cooperative_user_data(b"\x01") == DEFAULT_GENERATION
    # generation_id in the subscription wins; owned partitions always come from the subscription
    s = Subscription(("topic",), encode_cooperative_user_data(3), tps("topic", 0), 5)
    assert a.member_data(s) == MemberData((("topic", 0),), 5)
    # a v1 subscription (no generation field): the generation comes from the user data
    s = Subscription(
        ("topic",), encode_cooperative_user_data(3), tps("topic", 0), DEFAULT_GENERATION, version=1
    )
    assert a.member_data(s) == MemberData((("topic", 0),), 3)
    assert a.member_data(sub(["topic"])) == MemberData((), DEFAULT_GENERATION)


def test_cooperative_with_old_version_subscriptions():
    a = CooperativeStickyAssignor()
    subs = {
        "consumer1": Subscription(("topic1",), None, tps("topic1", 0), version=1),
        "consumer2": Subscription(("topic1",), None, tps("topic1", 1), version=1),
        "consumer3": rejoin(a, ["topic1"], []),
    }
    assert plan(a.assign({"topic1": 3}, subs)) == {
        "consumer1": tps("topic1", 0),
        "consumer2": tps("topic1", 1),
        "consumer3": tps("topic1", 2),
    }


# ------------------------------------------------------------------------------------------------
# properties

TOPICS = ["t0", "t1", "t2", "t3", "gone"]  # "gone" is never in the metadata


@st.composite
def groups(draw, uniform=None, claims="random"):
    """(partitions_per_topic, subscriptions) with 1-6 members.

    ``claims``: "none" (fresh members), "random" (arbitrary, possibly conflicting or invalid claims
    with random generations) or "valid" (a previous assignment: disjoint claims, one generation).
    """
    ppt = {t: draw(st.integers(0, 7)) for t in TOPICS[:4] if draw(st.booleans()) or t == "t0"}
    members = [f"m{i}" for i in range(draw(st.integers(1, 6)))]
    if uniform is None:
        uniform = draw(st.booleans())
    topic_sets = st.lists(st.sampled_from(TOPICS), max_size=4, unique=True)
    common = draw(topic_sets)
    subs_topics = {m: (common if uniform else draw(topic_sets)) for m in members}
    every = [(t, p) for t in TOPICS for p in range(8)]
    if claims == "valid":
        owner = {tp: draw(st.sampled_from(members + [None])) for tp in every if tp[1] < ppt.get(tp[0], 0)}
        owned = {m: sorted(tp for tp, o in owner.items() if o == m) for m in members}
        gens = {m: GENERATION for m in members}
    elif claims == "random":
        owned = {m: draw(st.lists(st.sampled_from(every), max_size=6, unique=True)) for m in members}
        gens = {m: draw(st.sampled_from([DEFAULT_GENERATION, 1, 2])) for m in members}
    else:
        owned = {m: [] for m in members}
        gens = {m: DEFAULT_GENERATION for m in members}
    subs = {m: Subscription(tuple(subs_topics[m]), None, tuple(owned[m]), gens[m]) for m in members}
    return ppt, subs


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(group=groups(), name=st.sampled_from(sorted(ASSIGNORS)), seed=st.integers(0, 1000))
def test_property_valid_and_deterministic(group, name, seed):
    ppt, subs = group
    result = run(name, ppt, subs)
    # cooperative may withhold partitions claimed elsewhere; every other assignor assigns them all
    check_valid(ppt, subs, result, complete=name != "cooperative-sticky")
    shuffled = list(subs.items())
    random.Random(seed).shuffle(shuffled)
    assert run(name, dict(reversed(list(ppt.items()))), dict(shuffled)) == result
    for parts in result.values():
        assert parts == sorted(parts)


@FAST
@given(group=groups(uniform=True), name=st.sampled_from(["roundrobin", "sticky"]))
def test_property_identical_subscriptions_are_fully_balanced(group, name):
    ppt, subs = group
    assert fully_balanced(run(name, ppt, subs))


@FAST
@given(group=groups())
def test_property_range_is_balanced_per_topic(group):
    ppt, subs = group
    result = run("range", ppt, subs)
    for topic in ppt:
        counts = [sum(1 for t, _ in result[m] if t == topic) for m in sorted(subs) if topic in subs[m].topics]
        if counts:
            assert max(counts) - min(counts) <= 1
            assert counts == sorted(counts, reverse=True)  # lower member ids get the extra ones


@FAST
@given(group=groups())
def test_property_sticky_is_balanced(group):
    ppt, subs = group
    check_balanced(subs, run("sticky", ppt, subs))


@FAST
@given(group=groups(uniform=True, claims="valid"))
def test_property_sticky_keeps_as_much_as_possible_with_identical_subscriptions(group):
    ppt, subs = group
    result = run("sticky", ppt, subs)
    kept = {m: len(set(subs[m].owned_partitions) & set(result[m])) for m in subs}
    valid_owned = {m: len([tp for tp in subs[m].owned_partitions if tp[0] in subs[m].topics]) for m in subs}
    # nobody loses a partition while staying under its final count ...
    assert all(kept[m] == min(valid_owned[m], len(result[m])) for m in subs)
    # ... and the larger quotas went to the members that owned the most: the optimum
    total = sum(len(p) for p in result.values())
    q, extra = divmod(total, len(subs))
    quotas = [q + 1] * extra + [q] * (len(subs) - extra)
    best = sum(
        min(o, quota) for o, quota in zip(sorted(valid_owned.values(), reverse=True), quotas, strict=True)
    )
    assert sum(kept.values()) == best


@FAST
@given(group=groups(claims="none"), name=st.sampled_from(STICKY_NAMES))
def test_property_a_settled_assignment_is_a_fixed_point(group, name):
    ppt, subs = group
    a = get_assignor(name)
    first = plan(a.assign(ppt, subs))
    again = {m: rejoin(a, s.topics, first[m]) for m, s in subs.items()}
    assert plan(a.assign(ppt, again)) == first


@FAST
@given(group=groups(uniform=True, claims="none"), data=st.data(), name=st.sampled_from(STICKY_NAMES))
def test_property_members_leaving_take_nothing_from_those_who_stay(group, data, name):
    ppt, subs = group
    a = get_assignor(name)
    first = plan(a.assign(ppt, subs))
    stay = data.draw(st.lists(st.sampled_from(sorted(subs)), min_size=1, unique=True))
    second = plan(a.assign(ppt, {m: rejoin(a, subs[m].topics, first[m]) for m in stay}))
    assert all(set(first[m]) <= set(second[m]) for m in stay)
    check_valid(ppt, {m: subs[m] for m in stay}, second)


@FAST
@given(group=groups(claims="valid"), data=st.data())
def test_property_kip429_two_rounds(group, data):
    ppt, subs = group
    # some members leave, some arrive with nothing, everyone may change its subscription
    stay = data.draw(st.lists(st.sampled_from(sorted(subs)), min_size=1, unique=True))
    topic_sets = st.lists(st.sampled_from(TOPICS), max_size=4, unique=True).map(tuple)
    subs = {
        m: Subscription(data.draw(topic_sets), None, subs[m].owned_partitions, subs[m].generation_id)
        if data.draw(st.booleans())
        else subs[m]
        for m in stay
    }
    for i in range(data.draw(st.integers(0, 2))):
        subs[f"new{i}"] = Subscription(data.draw(topic_sets), None, (), -1)
    a = get_assignor("cooperative-sticky")

    round1 = plan(a.assign(ppt, subs))
    check_valid(ppt, subs, round1, complete=False)
    owned_by_others = {m: {tp for o, s in subs.items() if o != m for tp in s.owned_partitions} for m in subs}
    assert all(not set(round1[m]) & owned_by_others[m] for m in subs)
    # partitions that stay put are never interrupted
    target = plan(
        get_assignor("sticky").assign(
            ppt, {m: rejoin(StickyAssignor(), s.topics, s.owned_partitions) for m, s in subs.items()}
        )
    )
    for m, s in subs.items():
        assert set(s.owned_partitions) & set(target[m]) <= set(round1[m])

    # members revoke what they lost, keep the rest, and rejoin: round 2 assigns everything, revokes
    # nothing, and is the balanced target
    subs2 = {m: rejoin(a, s.topics, round1[m], GENERATION + 1) for m, s in subs.items()}
    round2 = plan(a.assign(ppt, subs2))
    check_valid(ppt, subs2, round2, complete=True)
    assert all(set(round1[m]) <= set(round2[m]) for m in subs)
    check_balanced(subs2, round2)
    assert sorted(map(len, round2.values())) == sorted(map(len, target.values()))


def _resolved_claims(ppt, subs):
    """The spec of claim resolution, independently of the implementation: a claim on an existing
    partition of a subscribed topic counts if its generation is the unique highest among claimants."""
    claims = {}
    for m, s in subs.items():
        for t, p in set(s.owned_partitions):
            if t in s.topics and p < ppt.get(t, 0):
                claims.setdefault((t, p), []).append((s.generation_id, m))
    owned = {m: set() for m in subs}
    for tp, cs in claims.items():
        top = max(g for g, _ in cs)
        if [g for g, _ in cs].count(top) == 1:
            owned[next(m for g, m in cs if g == top)].add(tp)
    return owned


@st.composite
def small_groups(draw):
    ppt = {t: draw(st.integers(0, 3)) for t in ("t0", "t1", "t2")}
    members = [f"m{i}" for i in range(draw(st.integers(1, 3)))]
    every = [(t, p) for t in ("t0", "t1", "t2", "gone") for p in range(3)]
    subs = {
        m: Subscription(
            tuple(draw(st.lists(st.sampled_from(["t0", "t1", "t2", "gone"]), max_size=3, unique=True))),
            None,
            tuple(draw(st.lists(st.sampled_from(every), max_size=4, unique=True))),
            draw(st.sampled_from([DEFAULT_GENERATION, 1, 2])),
        )
        for m in members
    }
    subscribed = [
        (t, p) for t in sorted({t for s in subs.values() for t in s.topics}) for p in range(ppt.get(t, 0))
    ]
    assume(len(subscribed) <= 6)
    return ppt, subs, subscribed


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=small_groups())
def test_property_sticky_matches_a_brute_force_optimum(group):
    """Against every possible assignment: the sticky one has the smallest sum of squared counts and,
    among those, keeps the most valid previous ownership."""
    ppt, subs, subscribed = group
    owned = _resolved_claims(ppt, subs)
    choices = [[m for m in sorted(subs) if t in subs[m].topics] for t, _ in subscribed]
    best = None
    for owners in itertools.product(*choices):
        loads = Counter(owners)
        score = (
            sum(c * c for c in loads.values()),
            -sum(tp in owned[m] for tp, m in zip(subscribed, owners, strict=True)),
        )
        best = score if best is None else min(best, score)
    result = run("sticky", ppt, subs)
    kept = sum(len(set(parts) & owned[m]) for m, parts in result.items())
    assert (sum(len(p) ** 2 for p in result.values()), -kept) == best
