"""KIP-848 consumer groups on the in-process coordinator, with a manual clock: Kafka's scenarios from
``GroupMetadataManagerTest`` (consumerGroupHeartbeat*, session and rebalance timeouts, static members) and
``CurrentAssignmentBuilderTest``, ported as our own tests. Each walks requests and time and asserts
error codes, epochs, assignments, states and the records written; and that replaying the log gives the
live state."""

from __future__ import annotations

import pytest
from raygroups.coordinator.consumer_group import MemberState
from raygroups.coordinator.consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from raygroups.coordinator.records import GroupMetadataKey

from raygroups import Errors
from tests.unit.helpers import Ctx

G = "cg"
SESSION_MS = 45_000
REBALANCE_MS = 30_000


class C(Ctx):
    """The shared context plus consumer-protocol helpers."""

    def __init__(self, topics=None, config=None, **kw):
        # Kafka's GroupMetadataManagerTest scenarios predate KIP-1263's assignment interval: a target per
        # epoch, as with an interval of 0 (test_assignment_interval_* cover the interval).
        super().__init__(config={"group.consumer.assignment.interval.ms": 0, **(config or {})}, **kw)
        for name, n in (topics or {"foo": 6, "bar": 3}).items():
            self.coord.create_topic(name, n)

    def hb(self, member_id="", member_epoch=0, group_id=G, **kw):
        if member_epoch == 0:
            kw.setdefault("rebalance_timeout_ms", REBALANCE_MS)
            kw.setdefault("topic_partitions", {})
            if "subscribed_topic_regex" not in kw:
                kw.setdefault("subscribed_topic_names", ["foo", "bar"])
        return self.coord.consumer_group_heartbeat(group_id=group_id, member_id=member_id,
                                                   member_epoch=member_epoch, **kw).result(timeout=0)

    def describe(self, group_id=G):
        (d,) = self.coord.consumer_group_describe([group_id]).result(timeout=0)
        return d

    def records(self):
        return self.coord.log_records(0)

    def check_replay(self):
        assert self.coord.replayed_state_for_testing(0) == self.coord.durable_state_for_testing(0)


def ok(response):
    assert response.error is Errors.NONE, response
    return response


def owned_everywhere(ctx: C, group_id=G) -> dict:
    """(topic, partition) -> owner over every member's assignment; fails if a partition has two owners."""
    owners: dict = {}
    for m in ctx.describe(group_id).members:
        for topic, ps in m.assignment.items():
            for p in ps:
                assert (topic, p) not in owners, f"{topic}:{p} owned by {owners[(topic, p)]} and {m.member_id}"
                owners[(topic, p)] = m.member_id
    return owners


# ---------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(("kw", "error", "message"), [
    ({"group_id": " "}, Errors.INVALID_REQUEST, "GroupId can't be empty."),
    ({"member_epoch": 1}, Errors.INVALID_REQUEST, "MemberId can't be empty."),
    ({"member_epoch": -1}, Errors.INVALID_REQUEST, "MemberId can't be empty."),
    ({"instance_id": ""}, Errors.INVALID_REQUEST, "InstanceId can't be empty."),
    ({"rack_id": ""}, Errors.INVALID_REQUEST, "RackId can't be empty."),
    ({"rebalance_timeout_ms": -1}, Errors.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."),
    ({"topic_partitions": None}, Errors.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
    ({"topic_partitions": {"foo": [0]}}, Errors.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
    ({"subscribed_topic_names": None}, Errors.INVALID_REQUEST,
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    ({"member_id": "m", "member_epoch": -2}, Errors.INVALID_REQUEST, "InstanceId can't be null."),
    ({"member_id": "m", "member_epoch": -3}, Errors.INVALID_REQUEST, "MemberEpoch is invalid."),
    ({"server_assignor": "sticky"}, Errors.UNSUPPORTED_ASSIGNOR,
     "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
    ({"subscribed_topic_names": None, "subscribed_topic_regex": "fo(?=o)"}, Errors.INVALID_REGULAR_EXPRESSION, None),
    ({"subscribed_topic_names": None, "subscribed_topic_regex": "fo[o"}, Errors.INVALID_REGULAR_EXPRESSION, None),
])
def test_invalid_heartbeats_are_refused_with_kafkas_message_and_change_nothing(kw, error, message):
    ctx = C()
    member_id = kw.pop("member_id", "")
    member_epoch = kw.pop("member_epoch", 0)
    if member_epoch == 0:
        kw.setdefault("rebalance_timeout_ms", REBALANCE_MS)
        kw.setdefault("topic_partitions", {})
        kw.setdefault("subscribed_topic_names", ["foo"])
    response = ctx.coord.consumer_group_heartbeat(group_id=kw.pop("group_id", G), member_id=member_id,
                                                  member_epoch=member_epoch, **kw).result(timeout=0)
    assert response.error is error
    if message is not None:
        assert response.error_message == message
    else:
        assert "SubscribedTopicRegex" in response.error_message
    assert ctx.records() == []


def test_bad_argument_types_raise_in_the_caller():
    ctx = C()
    with pytest.raises(TypeError, match="subscribed_topic_names"):
        ctx.coord.consumer_group_heartbeat(group_id=G, subscribed_topic_names="foo")
    with pytest.raises(TypeError, match="topic_partitions"):
        ctx.coord.consumer_group_heartbeat(group_id=G, topic_partitions=[("foo", 0)])
    with pytest.raises(ValueError, match=r"topic_partitions\['foo'\] partition"):
        ctx.coord.consumer_group_heartbeat(group_id=G, topic_partitions={"foo": [-1]})
    with pytest.raises(TypeError, match="group_ids"):
        ctx.coord.consumer_group_describe("cg")


# ----------------------------------------------------------------------------------------- joining, epochs
def test_first_member_creates_the_group_and_gets_every_partition_at_epoch_1():
    ctx = C()
    r = ok(ctx.hb())
    assert r.member_id == "consumer-1" and r.member_epoch == 1 and r.heartbeat_interval_ms == 5_000
    assert r.assignment == {"bar": [0, 1, 2], "foo": [0, 1, 2, 3, 4, 5]}
    keys = [type(k) for k, _ in ctx.records()]
    assert keys == [ConsumerGroupMemberMetadataKey, ConsumerGroupMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                    ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupCurrentMemberAssignmentKey]
    epoch_record = ctx.records()[1][1]
    assert epoch_record == ConsumerGroupMetadataValue(1, (("bar", 3), ("foo", 6)))
    d = ctx.describe()
    assert (d.error, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (
        Errors.NONE, "Stable", 1, 1, "uniform")
    (m,) = d.members
    assert m.member_epoch == 1 and m.assignment == m.target_assignment == r.assignment
    assert m.subscribed_topic_names == ["bar", "foo"]
    ctx.check_replay()


def test_a_client_chosen_member_id_is_used_as_given_and_an_incremental_heartbeat_returns_no_assignment():
    ctx = C()
    r = ok(ctx.hb(member_id="my-uuid"))
    assert r.member_id == "my-uuid" and r.member_epoch == 1
    again = ok(ctx.hb(member_id="my-uuid", member_epoch=1))
    assert again.member_epoch == 1 and again.assignment is None  # nothing changed: Kafka's null
    n = len(ctx.records())
    ok(ctx.hb(member_id="my-uuid", member_epoch=1))
    assert len(ctx.records()) == n  # a heartbeat that changes nothing writes nothing
    # A full request (rebalance timeout, names and owned partitions all sent) gets the assignment again.
    full = ok(ctx.hb(member_id="my-uuid", member_epoch=1, rebalance_timeout_ms=REBALANCE_MS,
                     subscribed_topic_names=["foo", "bar"], topic_partitions=r.assignment))
    assert full.assignment == r.assignment


def test_unknown_group_unknown_member_and_fenced_epochs():
    ctx = C()
    r = ctx.hb(member_id="x", member_epoch=1)
    assert r.error is Errors.GROUP_ID_NOT_FOUND
    first = ok(ctx.hb())
    assert ctx.hb(member_id="ghost", member_epoch=1).error is Errors.UNKNOWN_MEMBER_ID
    ahead = ctx.hb(member_id=first.member_id, member_epoch=2)
    assert ahead.error is Errors.FENCED_MEMBER_EPOCH and "greater member epoch (2)" in ahead.error_message
    # The previous epoch (0) with owned partitions within the assignment: the response that moved it on was
    # lost; it is answered at its current epoch.
    lost = ok(ctx.hb(member_id=first.member_id, member_epoch=0, rebalance_timeout_ms=REBALANCE_MS,
                     subscribed_topic_names=["foo", "bar"], topic_partitions={}))
    assert lost.member_epoch == 1 and lost.assignment == first.assignment


def test_epoch_below_the_previous_one_is_fenced():
    ctx = C(topics={"foo": 2})
    a = ok(ctx.hb(subscribed_topic_names=["foo"]))
    b = ok(ctx.hb(subscribed_topic_names=["foo"]))
    assert b.member_epoch == 2
    # a moves to epoch 2 once it revokes what b gets.
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": [0, 1]}))
    assert r.member_epoch == 1 and r.assignment == {"foo": [0]}
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": [0]}))
    assert r.member_epoch == 2
    # Now epoch 1 is its previous epoch and it owns a subset: accepted; epoch 0 is neither: fenced.
    assert ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": [0]})).member_epoch == 2
    stale = ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": [0, 1]})
    assert stale.error is Errors.FENCED_MEMBER_EPOCH and "smaller member epoch (1)" in stale.error_message


# ----------------------------------------------------------------------------------------- reconciliation
def test_a_joining_member_waits_for_the_owner_to_revoke_and_no_partition_ever_has_two_owners():
    ctx = C(topics={"foo": 4})
    a = ok(ctx.hb(subscribed_topic_names=["foo"]))
    assert a.assignment == {"foo": [0, 1, 2, 3]}
    b = ok(ctx.hb(subscribed_topic_names=["foo"]))
    # The group epoch moved to 2 and the target splits the partitions; b's share is still a's: it waits.
    assert b.member_epoch == 2 and b.assignment == {}
    cur_b = ctx.coord.durable_state_for_testing(0).consumer_groups[G].current[b.member_id]
    assert cur_b.state == MemberState.UNRELEASED_PARTITIONS.value
    assert ctx.describe().group_state == "Reconciling"
    owned_everywhere(ctx)
    # a is told to revoke (its epoch stays 1 until it acknowledges).
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": [0, 1, 2, 3]}))
    target_a = ctx.describe().members[0].target_assignment if ctx.describe().members[0].member_id == a.member_id \
        else ctx.describe().members[1].target_assignment
    assert r.member_epoch == 1 and r.assignment == target_a
    cur_a = ctx.coord.durable_state_for_testing(0).consumer_groups[G].current[a.member_id]
    assert cur_a.state == MemberState.UNREVOKED_PARTITIONS.value and cur_a.pending_revocation
    # b still gets nothing: a still owns them (pending revocation).
    assert ok(ctx.hb(member_id=b.member_id, member_epoch=2)).assignment is None
    owned_everywhere(ctx)
    # a acknowledges: it moves to epoch 2, stable.
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions=target_a))
    assert r.member_epoch == 2
    # Now b gets its partitions.
    rb = ok(ctx.hb(member_id=b.member_id, member_epoch=2))
    assert rb.member_epoch == 2 and sorted(rb.assignment["foo"] + target_a["foo"]) == [0, 1, 2, 3]
    assert ctx.describe().group_state == "Stable"
    assert len(owned_everywhere(ctx)) == 4
    ctx.check_replay()


def test_a_member_that_reports_nothing_owned_is_not_held_in_revocation():
    ctx = C(topics={"foo": 2})
    a = ok(ctx.hb(subscribed_topic_names=["foo"]))
    ok(ctx.hb(subscribed_topic_names=["foo"]))
    # a's owned list already excludes what it must give up: it moves to the new epoch at once.
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": [0]}))
    assert r.member_epoch == 2 and r.assignment == {"foo": [0]}


def test_subscription_change_and_topic_growth_bump_the_group_epoch():
    ctx = C(topics={"foo": 2, "bar": 2})
    a = ok(ctx.hb(subscribed_topic_names=["foo"]))
    assert a.assignment == {"foo": [0, 1]}
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, subscribed_topic_names=["foo", "bar"]))
    assert r.member_epoch == 2 and r.assignment == {"bar": [0, 1], "foo": [0, 1]}
    ctx.coord.create_topic("bar", 4)  # grown
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=2))
    assert r.member_epoch == 3 and r.assignment["bar"] == [0, 1, 2, 3]
    assert ctx.describe().group_epoch == 3
    # A topic subscribed before it exists is assigned once it is created.
    b = ok(ctx.hb(subscribed_topic_names=["later"], group_id="g2"))
    assert b.assignment == {}
    ctx.coord.create_topic("later", 1)
    assert ok(ctx.hb(member_id=b.member_id, member_epoch=1, group_id="g2")).assignment == {"later": [0]}
    ctx.check_replay()


def test_regex_subscription_follows_topics_created_later():
    ctx = C(topics={"orders-eu": 1, "payments": 1})
    a = ok(ctx.hb(subscribed_topic_names=None, subscribed_topic_regex="orders-.*"))
    assert a.assignment == {"orders-eu": [0]}
    ctx.coord.create_topic("orders-us", 2)
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1))
    assert r.assignment == {"orders-eu": [0], "orders-us": [0, 1]} and r.member_epoch == 2
    (m,) = ctx.describe().members
    assert m.subscribed_topic_regex == "orders-.*" and m.subscribed_topic_names == []


def test_the_server_assignor_most_members_ask_for_is_used():
    ctx = C(topics={"foo": 4, "bar": 4})
    ok(ctx.hb(subscribed_topic_names=["foo", "bar"], server_assignor="range"))
    ok(ctx.hb(subscribed_topic_names=["foo", "bar"], server_assignor="range"))
    d = ctx.describe()
    assert d.assignor_name == "range"
    # Range: each member gets a contiguous range of each topic (here, the same ranges of both topics).
    targets = sorted(tuple(m.target_assignment["foo"]) for m in d.members)
    assert targets == [(0, 1), (2, 3)]
    assert all(m.target_assignment["foo"] == m.target_assignment["bar"] for m in d.members)


def test_group_consumer_max_size():
    ctx = C(config={"group.consumer.max.size": 2})
    a, b = ok(ctx.hb()), ok(ctx.hb())
    r = ctx.hb()
    assert r.error is Errors.GROUP_MAX_SIZE_REACHED and "maximum capacity of 2 members" in r.error_message
    assert ok(ctx.hb(member_id=a.member_id, member_epoch=a.member_epoch)).member_epoch >= 1  # members stay
    assert b.member_epoch == 2


# ------------------------------------------------------------------------------ KIP-1263: the assignment interval
def _assignment_epochs(ctx) -> list[int]:
    """The assignment epochs the log holds, in order: one per target computation."""
    return [v.assignment_epoch for k, v in ctx.records() if type(k) is ConsumerGroupTargetAssignmentMetadataKey]


def test_assignment_interval_batches_a_burst_of_joins_into_one_target():
    """KIP-1263 (Kafka 4.3's group.consumer.assignment.interval.ms, 1 s by default): the group's first target
    at once; members joining within the interval join at the assignment epoch with nothing assigned; the
    first heartbeat after the interval computes one target for every epoch the burst moved through."""
    ctx = C(topics={"foo": 6}, config={"group.consumer.assignment.interval.ms": 1_000})
    a = ok(ctx.hb(subscribed_topic_names=["foo"]))
    assert a.member_epoch == 1 and a.assignment == {"foo": [0, 1, 2, 3, 4, 5]}
    ctx.clock.advance(100)
    b, c = ok(ctx.hb(subscribed_topic_names=["foo"])), ok(ctx.hb(subscribed_topic_names=["foo"]))
    assert (b.member_epoch, b.assignment, c.member_epoch, c.assignment) == (1, {}, 1, {})
    d = ctx.describe()
    assert (d.group_epoch, d.assignment_epoch, d.group_state) == (3, 1, "Assigning")
    # a heartbeats within the interval: epoch 1's target is still its target, nothing to do.
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": [0, 1, 2, 3, 4, 5]}))
    assert (r.member_epoch, r.assignment) == (1, None) and _assignment_epochs(ctx) == [1]
    ctx.clock.advance(900)
    r = ok(ctx.hb(member_id=b.member_id, member_epoch=1, topic_partitions={}))
    assert _assignment_epochs(ctx) == [1, 3]  # one computation for epochs 2 and 3
    assert r.member_epoch == 3 and r.assignment is None  # still nothing: its share is a's, which must revoke first
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": [0, 1, 2, 3, 4, 5]}))
    assert r.member_epoch == 1 and len(r.assignment["foo"]) == 2  # revoking 4 partitions
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions=r.assignment))
    assert r.member_epoch == 3
    for m in (b, c):
        assert len(ok(ctx.hb(member_id=m.member_id, member_epoch=m.member_epoch if m is c else 3,
                             topic_partitions={})).assignment["foo"]) == 2
    assert ctx.describe().group_state == "Stable" and _assignment_epochs(ctx) == [1, 3]
    ctx.check_replay()


def test_assignment_interval_does_not_defer_a_members_own_subscription_change_nor_a_reloaded_group(tmp_path):
    ctx = C(topics={"foo": 2, "bar": 2}, config={"group.consumer.assignment.interval.ms": 60_000}, log_dir=tmp_path)
    a = ok(ctx.hb(subscribed_topic_names=["foo", "bar"]))
    assert a.assignment == {"bar": [0, 1], "foo": [0, 1]}
    # Within the interval a leaves bar: its target is recomputed at once, so it revokes bar now.
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, subscribed_topic_names=["foo"]))
    assert _assignment_epochs(ctx) == [1, 2] and r.assignment == {"foo": [0, 1]} and r.member_epoch == 1
    # A join within the interval waits; a shard that loads the group again computes at its first heartbeat.
    b = ok(ctx.hb(subscribed_topic_names=["foo"]))
    assert (b.member_epoch, _assignment_epochs(ctx)) == (2, [1, 2])
    ctx.coord.unload(0, None)
    ctx.coord.load(0, 1)
    ok(ctx.hb(member_id=b.member_id, member_epoch=2, topic_partitions={}))
    assert _assignment_epochs(ctx) == [1, 2, 3]
    ctx.check_replay()


# ------------------------------------------------------------------------------------------ leave, timers
def test_leaving_removes_the_member_and_bumps_the_epoch():
    ctx = C()
    a, b = ok(ctx.hb()), ok(ctx.hb())
    r = ok(ctx.hb(member_id=b.member_id, member_epoch=-1))
    assert (r.member_id, r.member_epoch) == (b.member_id, -1)
    d = ctx.describe()
    assert d.group_epoch == 3 and [m.member_id for m in d.members] == [a.member_id]
    assert d.group_state == "Assigning"  # the target is recomputed on the next heartbeat
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1))
    # a never heartbeated since b joined: it still owns all 9, its new target: nothing changes for it but
    # its epoch (an unchanged assignment is not sent again).
    assert r.member_epoch == 3 and r.assignment is None
    assert sum(map(len, ctx.describe().members[0].assignment.values())) == 9
    assert ctx.hb(member_id=b.member_id, member_epoch=-1).error is Errors.UNKNOWN_MEMBER_ID
    ok(ctx.hb(member_id=a.member_id, member_epoch=-1))
    assert ctx.describe().group_state == "Empty"
    ctx.check_replay()


def test_session_timeout_fences_a_silent_member():
    ctx = C()
    a, b = ok(ctx.hb()), ok(ctx.hb())
    ctx.clock.advance(SESSION_MS - 1)
    ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions=None))
    ctx.clock.advance(1)  # b's session ends; a's was renewed
    d = ctx.describe()
    assert [m.member_id for m in d.members] == [a.member_id] and d.group_epoch == 3
    assert ctx.hb(member_id=b.member_id, member_epoch=2).error is Errors.UNKNOWN_MEMBER_ID
    ctx.check_replay()


def test_rebalance_timeout_fences_a_member_that_does_not_revoke():
    ctx = C(topics={"foo": 2})
    a = ok(ctx.hb(subscribed_topic_names=["foo"], rebalance_timeout_ms=10_000))
    b = ok(ctx.hb(subscribed_topic_names=["foo"]))
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": [0, 1]}))
    assert r.assignment == {"foo": [0]}  # revoke 1
    for _ in range(3):  # it heartbeats (its session lives) but never lets go of partition 1
        ctx.clock.advance(3_000)
        ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": [0, 1]}))
    ctx.clock.advance(1_000)
    assert [m.member_id for m in ctx.describe().members] == [b.member_id]
    rb = ok(ctx.hb(member_id=b.member_id, member_epoch=2))
    assert rb.assignment == {"foo": [0, 1]} and rb.member_epoch == 3
    ctx.check_replay()


# ---------------------------------------------------------------------------------------- static members
def test_static_member_leaves_temporarily_and_rejoins_with_its_assignment_and_no_rebalance():
    ctx = C()
    a = ok(ctx.hb(instance_id="i-a"))
    b = ok(ctx.hb(instance_id="i-b"))
    ok(ctx.hb(member_id=a.member_id, member_epoch=1, instance_id="i-a", topic_partitions=None))
    rounds = 0
    while ctx.describe().group_state != "Stable" and rounds < 5:  # reconcile both
        for m in ctx.describe().members:
            ok(ctx.hb(member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id,
                      topic_partitions=m.assignment))
        rounds += 1
    before = ctx.describe()
    epoch, a_assignment = before.group_epoch, next(m.assignment for m in before.members if m.instance_id == "i-a")
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=-2, instance_id="i-a"))
    assert r.member_epoch == -2
    assert ctx.describe().group_epoch == epoch  # no rebalance
    # Another process with the same instance id while the member is active is refused; after the
    # temporary leave it takes the place, assignment and epoch of the old one.
    rejoined = ok(ctx.hb(member_id="new-a", instance_id="i-a"))
    assert rejoined.member_epoch == epoch and rejoined.assignment == a_assignment
    d = ctx.describe()
    assert d.group_epoch == epoch and sorted(m.member_id for m in d.members) == sorted(["new-a", b.member_id])
    unreleased = ctx.hb(member_id="other", instance_id="i-a")
    assert unreleased.error is Errors.UNRELEASED_INSTANCE_ID
    fenced = ctx.hb(member_id=a.member_id, member_epoch=epoch, instance_id="i-a")
    assert fenced.error is Errors.FENCED_INSTANCE_ID
    assert ctx.hb(member_id="x", member_epoch=1, instance_id="i-zzz").error is Errors.UNKNOWN_MEMBER_ID
    ctx.check_replay()


def test_a_static_member_that_does_not_come_back_is_fenced_after_its_session():
    ctx = C()
    a = ok(ctx.hb(instance_id="i-a"))
    ok(ctx.hb(member_id=a.member_id, member_epoch=-2, instance_id="i-a"))
    ctx.clock.advance(SESSION_MS)
    d = ctx.describe()
    assert d.members == [] and d.group_epoch == 2 and d.group_state == "Empty"


# --------------------------------------------------------------------------------------- offsets, states
def test_offsets_of_a_consumer_group_are_checked_against_member_epochs():
    ctx = C(topics={"foo": 1})
    a = ok(ctx.hb(subscribed_topic_names=["foo"]))
    c = ctx.coord
    commit = lambda **kw: c.commit_offsets(group_id=G, offsets={("foo", 0): (5, "")}, **kw).result(0).errors  # noqa: E731
    assert commit(generation_id=1, member_id=a.member_id) == {("foo", 0): Errors.NONE}
    assert commit(generation_id=0, member_id=a.member_id) == {("foo", 0): Errors.STALE_MEMBER_EPOCH}
    assert commit(generation_id=1, member_id="ghost") == {("foo", 0): Errors.UNKNOWN_MEMBER_ID}
    assert commit() == {("foo", 0): Errors.UNKNOWN_MEMBER_ID}  # an admin commit needs an empty group
    fetch = lambda **kw: c.fetch_offsets(group_id=G, **kw).result(0)  # noqa: E731
    assert fetch().offsets[("foo", 0)].offset == 5  # no member id: anyone may read
    assert fetch(member_id=a.member_id, member_epoch=1).error is Errors.NONE
    assert fetch(member_id=a.member_id, member_epoch=7).error is Errors.STALE_MEMBER_EPOCH
    assert fetch(member_id="ghost", member_epoch=1).error is Errors.UNKNOWN_MEMBER_ID
    ok(ctx.hb(member_id=a.member_id, member_epoch=-1))
    assert commit() == {("foo", 0): Errors.NONE}  # empty now
    # ListGroups by type; DeleteGroups takes an empty consumer group and its offsets.
    listed = c.list_groups(types_filter=["consumer"]).result(0).groups
    assert [(g.group_id, g.group_state, g.group_type) for g in listed] == [(G, "Empty", "consumer")]
    assert c.list_groups(types_filter=["classic"]).result(0).groups == []
    assert c.delete_groups([G]).result(0) == {G: Errors.NONE}
    assert ctx.describe().error is Errors.GROUP_ID_NOT_FOUND
    assert fetch().offsets == {}
    ctx.check_replay()


def test_an_empty_simple_group_becomes_a_consumer_group_with_its_offsets():
    ctx = C(topics={"foo": 1})
    assert ctx.coord.commit_offsets(group_id=G, offsets={("foo", 0): (42, "m")}).result(0).errors == {
        ("foo", 0): Errors.NONE}
    ok(ctx.hb(subscribed_topic_names=["foo"]))
    assert ctx.coord.fetch_offsets(group_id=G).result(0).offsets[("foo", 0)].offset == 42
    assert ctx.describe().group_state == "Stable"
    assert G not in ctx.coord.durable_state_for_testing(0).groups
    ctx.check_replay()
    # An empty classic group gives way too (its metadata tombstone is written); one with members does not.
    ctx.join_new_dynamic(group_id="classic")
    r = ctx.hb(group_id="classic", subscribed_topic_names=["foo"])
    assert r.error is Errors.GROUP_ID_NOT_FOUND and "not a consumer group" in r.error_message
    # A classic JoinGroup to a consumer group with members is refused (no classic members inside one).
    assert ctx.join(group_id=G).result(0).error is Errors.INCONSISTENT_GROUP_PROTOCOL


def test_a_load_restores_consumer_groups_and_restarts_their_sessions(tmp_path):
    ctx = C(log_dir=tmp_path)
    a = ok(ctx.hb())
    ctx.clock.advance(SESSION_MS - 1_000)
    ctx.coord.unload(0, None)
    ctx.coord.load(0, 1)
    d = ctx.describe()
    assert d.group_epoch == 1 and [m.member_id for m in d.members] == [a.member_id]
    ctx.clock.advance(2_000)  # the old session would have ended: the load started a new one
    assert [m.member_id for m in ctx.describe().members] == [a.member_id]
    ctx.clock.advance(SESSION_MS)
    assert ctx.describe().members == []
    ctx.check_replay()


def test_unknown_and_classic_groups_are_not_found_by_consumer_group_describe():
    ctx = C()
    ctx.join_new_dynamic(group_id="classic")
    out = ctx.coord.consumer_group_describe(["nope", "classic"]).result(0)
    assert [(d.group_id, d.error) for d in out] == [("nope", Errors.GROUP_ID_NOT_FOUND),
                                                     ("classic", Errors.GROUP_ID_NOT_FOUND)]
    assert "not a consumer group" in out[1].error_message


def test_records_of_a_deleted_group_are_tombstones_of_every_key():
    ctx = C(topics={"foo": 1})
    a = ok(ctx.hb(subscribed_topic_names=["foo"]))
    ok(ctx.hb(member_id=a.member_id, member_epoch=-1))
    n = len(ctx.records())
    assert ctx.coord.delete_groups([G]).result(0) == {G: Errors.NONE}
    tail = ctx.records()[n:]
    assert all(v is None for _, v in tail)
    assert type(tail[-1][0]) is ConsumerGroupMetadataKey
    assert G not in ctx.coord.durable_state_for_testing(0).consumer_groups
    ctx.check_replay()
    assert not any(type(k) is GroupMetadataKey for k, _ in tail)


def test_offsets_of_topics_no_member_subscribes_to_expire_and_then_the_empty_group_goes():
    """Kafka's ConsumerGroup.offsetExpirationCondition: from the commit timestamp, only for topics the group
    does not subscribe to; cleanupGroupMetadata then deletes an empty group with no offsets."""
    ctx = C(topics={"foo": 1, "bar": 1}, config={"offsets.retention.minutes": 1,
                                                 "offsets.retention.check.interval.ms": 10_000})
    a = ok(ctx.hb(subscribed_topic_names=["foo"]))
    commit = ctx.coord.commit_offsets(group_id=G, offsets={("foo", 0): (1, ""), ("bar", 0): (2, "")},
                                      generation_id=1, member_id=a.member_id).result(0)
    assert set(commit.errors.values()) == {Errors.NONE}
    for _ in range(7):  # past the retention, with the member heartbeating
        ctx.clock.advance(10_000)
        ok(ctx.hb(member_id=a.member_id, member_epoch=1))
    offsets = ctx.coord.fetch_offsets(group_id=G).result(0).offsets
    assert sorted(offsets) == [("foo", 0)]  # bar's expired; foo is subscribed
    ok(ctx.hb(member_id=a.member_id, member_epoch=-1))
    assert ctx.describe().group_state == "Empty"
    ctx.clock.advance(10_000)  # an empty group: foo is no longer subscribed, its offset expires, then the group
    assert ctx.coord.fetch_offsets(group_id=G).result(0).offsets == {}
    assert ctx.describe().error is Errors.GROUP_ID_NOT_FOUND
    ctx.check_replay()


# ------------------------------------------------------------------------------- from a second read
@pytest.mark.parametrize("how", ["static-rejoin", "leave", "session-timeout"])
def test_a_failed_append_leaves_the_member_guarded_by_its_timers(how):
    """Kafka keeps a member's timers when it writes its removal (replaceMember) and retries a timer's
    failed write: a member whose removal could not be appended is fenced by its session later."""
    ctx = C(topics={"foo": 2})
    a = ok(ctx.hb(subscribed_topic_names=["foo"], instance_id="i-a" if how == "static-rejoin" else None))
    if how == "static-rejoin":
        ok(ctx.hb(member_id=a.member_id, member_epoch=-2, instance_id="i-a"))
        ctx.coord.fail_next_append_for_testing(0, Errors.NOT_ENOUGH_REPLICAS)
        assert ctx.hb(member_id="new", instance_id="i-a", subscribed_topic_names=["foo"]).error is \
            Errors.COORDINATOR_NOT_AVAILABLE
    elif how == "leave":
        ctx.coord.fail_next_append_for_testing(0, Errors.NOT_ENOUGH_REPLICAS)
        assert ctx.hb(member_id=a.member_id, member_epoch=-1).error is Errors.COORDINATOR_NOT_AVAILABLE
    else:
        ctx.clock.advance(SESSION_MS - 1)
        ctx.coord.fail_next_append_for_testing(0, Errors.NOT_ENOUGH_REPLICAS)
        ctx.clock.advance(1)  # the fence's append fails: the member is still there
    assert [m.member_id for m in ctx.describe().members] == [a.member_id]
    ctx.clock.advance(SESSION_MS)  # its session (or the timer's retry) fences it now
    assert ctx.describe().members == [] and ctx.describe().group_epoch == 2
    ctx.check_replay()


def test_offset_delete_on_a_consumer_group_refuses_subscribed_topics():
    ctx = C(topics={"foo": 1, "bar": 1})
    a = ok(ctx.hb(subscribed_topic_names=["foo"]))
    c = ctx.coord
    c.commit_offsets(group_id=G, offsets={("foo", 0): (1, ""), ("bar", 0): (2, "")}, generation_id=1,
                     member_id=a.member_id).result(0)
    r = c.delete_offsets(group_id=G, partitions=[("foo", 0), ("bar", 0)]).result(0)
    assert r.error is Errors.NONE
    assert r.errors == {("foo", 0): Errors.GROUP_SUBSCRIBED_TO_TOPIC, ("bar", 0): Errors.NONE}
    assert sorted(c.fetch_offsets(group_id=G).result(0).offsets) == [("foo", 0)]
    ctx.check_replay()


def test_previous_epoch_without_owned_partitions_is_fenced_and_epoch_0_rejoins():
    ctx = C(topics={"foo": 2})
    a = ok(ctx.hb(subscribed_topic_names=["foo"]))
    b = ok(ctx.hb(subscribed_topic_names=["foo"]))
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": [0]}))
    assert (r.member_epoch, ok(ctx.hb(member_id=b.member_id, member_epoch=2, topic_partitions={})).member_epoch) \
        == (2, 2)
    # Kafka's isSubset: at the previous epoch, owned partitions not sent do not count as a subset.
    assert ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions=None).error is Errors.FENCED_MEMBER_EPOCH
    # A member fenced on its side rejoins with epoch 0 and its member id (KAFKA-19233): it gets its current
    # assignment and epoch back.
    rejoin = ok(ctx.hb(member_id=a.member_id, subscribed_topic_names=["foo"]))
    assert rejoin.member_epoch == 2 and rejoin.assignment == {"foo": [0]}


def test_a_second_revocation_moves_the_epoch_on_as_kafka_does():
    """CurrentAssignmentBuilder: a member revoking at epoch e keeps e with previous e; once it acknowledges
    it moves on at most one epoch (min(e + 1, target)), revoking again if the target moved meanwhile."""
    ctx = C(topics={"foo": 6})
    a = ok(ctx.hb(subscribed_topic_names=["foo"]))
    ok(ctx.hb(subscribed_topic_names=["foo"]))          # epoch 2: a must give up 3
    r = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions={"foo": list(range(6))}))
    cur = ctx.coord.durable_state_for_testing(0).consumer_groups[G].current[a.member_id]
    assert (cur.member_epoch, cur.previous_member_epoch, cur.state) == (1, 1, "unrevoked_partitions")
    ok(ctx.hb(subscribed_topic_names=["foo"]))          # epoch 3 while a still revokes: a must give up more
    ack = ok(ctx.hb(member_id=a.member_id, member_epoch=1, topic_partitions=r.assignment))
    cur = ctx.coord.durable_state_for_testing(0).consumer_groups[G].current[a.member_id]
    assert (ack.member_epoch, cur.member_epoch, cur.previous_member_epoch, cur.state) == (
        2, 2, 1, "unrevoked_partitions")
    assert len(ack.assignment["foo"]) == 2
    done = ok(ctx.hb(member_id=a.member_id, member_epoch=2, topic_partitions=ack.assignment))
    assert done.member_epoch == 3
    ctx.check_replay()


def test_a_conversion_whose_append_fails_leaves_the_classic_group_as_it_was():
    ctx = C(topics={"foo": 1})
    first = ctx.join(group_id="cls").result(0)
    joined = ctx.join(member_id=first.member_id, group_id="cls")
    ctx.clock.advance(1)  # the initial delay (0) ends
    assert joined.result(0).error is Errors.NONE
    ctx.leave([(first.member_id, None)], group_id="cls")
    assert ctx.coord.describe_groups(["cls"]).result(0)[0].group_state == "Empty"
    ctx.coord.fail_next_append_for_testing(0, Errors.NOT_ENOUGH_REPLICAS)
    assert ctx.hb(group_id="cls", subscribed_topic_names=["foo"]).error is Errors.COORDINATOR_NOT_AVAILABLE
    assert ctx.coord.describe_groups(["cls"]).result(0)[0].group_state == "Empty"
    assert ctx.describe("cls").error is Errors.GROUP_ID_NOT_FOUND
    ok(ctx.hb(group_id="cls", subscribed_topic_names=["foo"]))  # and the next one converts it
    assert ctx.coord.describe_groups(["cls"]).result(0)[0].group_state == "Dead"
    ctx.check_replay()


def test_a_classic_join_with_a_member_id_to_an_empty_consumer_group_is_unknown_member():
    ctx = C()
    a = ok(ctx.hb())
    ok(ctx.hb(member_id=a.member_id, member_epoch=-1))
    r = ctx.join(member_id="m-1", group_id=G).result(0)
    assert r.error is Errors.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("pattern", ["a\\++", "x\\\\1", "[+]+", "a+?", "orders-[0-9]{2}"])
def test_patterns_re2_reads_alike_are_accepted(pattern):
    ctx = C(topics={"a+": 1})
    assert ctx.hb(subscribed_topic_names=None, subscribed_topic_regex=pattern).error is Errors.NONE
