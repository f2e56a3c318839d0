"""The member state machine (membership.member) on its own: feed responses, assert requests, events, state.

Each test reads as Kafka's AbstractCoordinatorTest/ConsumerCoordinatorTest do: a member, a scripted
coordinator answer, and the member's next move."""

from __future__ import annotations

import pytest
from raygroups.coordinator.consumer_protocol import (
    Assignment,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    OffsetCommitResponse,
    OffsetFetchResponse,
    PartitionOffset,
    SyncGroupRequest,
    SyncGroupResponse,
)
from raygroups.membership.member import (
    COOPERATIVE,
    EAGER,
    CommitFailedError,
    ConsumerError,
    FatalConsumerError,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    GroupMember,
    JoinComplete,
    ListenerEvent,
    MemberState,
    PrepareJoin,
    RebalanceInProgressError,
    SendRequest,
    Wait,
    rebalance_protocol_of,
)

from raygroups.assignors import range_assign

T = "t"
SESSION, HEARTBEAT, REBALANCE, BACKOFF = 10_000, 1_000, 5_000, 100


class RangeLike:
    """A tiny eager assignor over ``range_assign`` (the interface of raygroups.assignors)."""

    name = "range"
    protocol = EAGER

    def __init__(self):
        self.seen = None
        self.on_assignment_calls = []

    def assign(self, partitions_per_topic, subscriptions):
        self.seen = (dict(partitions_per_topic), dict(subscriptions))
        plan = range_assign({m: s.topics for m, s in subscriptions.items()}, partitions_per_topic)
        return {m: Assignment(tuple(tps)) for m, tps in plan.items()}

    def on_assignment(self, assignment, generation):
        self.on_assignment_calls.append((assignment.partitions, generation))


class CoopLike(RangeLike):
    name = "coop"
    protocol = COOPERATIVE


def new_member(assignor=None, **kw):
    kw.setdefault("session_timeout_ms", SESSION)
    kw.setdefault("heartbeat_interval_ms", HEARTBEAT)
    kw.setdefault("rebalance_timeout_ms", REBALANCE)
    return GroupMember("g", [T], [assignor or RangeLike()], client_id="c", **kw)


def send_join(m, now=0) -> JoinGroupRequest:
    """Run the prepare step if any (asserting nothing) and return the JoinGroup request."""
    action = m.poll_rebalance(now)
    if isinstance(action, PrepareJoin):
        m.finish_join_prepare(action)
        action = m.poll_rebalance(now)
    assert isinstance(action, SendRequest) and isinstance(action.request, JoinGroupRequest), action
    return action.request


def join_ok(m, req, generation=1, member_id="m1", leader="other", members=(), protocol="range", now=0,
            topics=None, skip=False):
    resp = JoinGroupResponse(Errors.NONE, generation, member_id, leader, "consumer", protocol, list(members), skip)
    m.on_join_response(req, resp, now, topics)


def send_sync(m, now=0) -> SyncGroupRequest:
    action = m.poll_rebalance(now)
    assert isinstance(action, SendRequest) and isinstance(action.request, SyncGroupRequest), action
    return action.request


def sync_ok(m, req, partitions, now=0) -> JoinComplete:
    resp = SyncGroupResponse(Errors.NONE, encode_assignment(Assignment(tuple(partitions))), "consumer", req.protocol_name)
    complete = m.on_sync_response(req, resp, now)
    assert isinstance(complete, JoinComplete)
    return complete


def make_stable(m, partitions, generation=1, member_id="m1", now=0) -> JoinComplete:
    req = send_join(m, now)
    join_ok(m, req, generation, member_id or req.member_id, protocol=m.assignors[0].name, now=now)
    complete = sync_ok(m, send_sync(m, now), partitions, now)
    m.finish_join(complete)
    assert m.state is MemberState.STABLE and m.poll_rebalance(now) is None
    return complete


def tps(*ps):
    return frozenset((T, p) for p in ps)


# ------------------------------------------------------------------------------------------------
# Joining
# ------------------------------------------------------------------------------------------------
def test_dynamic_member_joins_in_two_steps_with_its_subscription():
    m = new_member()
    first = send_join(m)
    assert first.member_id == "" and first.group_instance_id is None and first.require_known_member_id
    assert first.protocol_type == "consumer" and first.rebalance_timeout_ms == REBALANCE
    assert m.state is MemberState.PREPARING_REBALANCE
    assert m.poll_rebalance(0) == Wait(None)
    m.on_join_response(first, JoinGroupResponse(Errors.MEMBER_ID_REQUIRED, member_id="m-7"), 0)
    second = send_join(m)  # immediately, no backoff
    assert second.member_id == "m-7"
    (name, metadata), = second.protocols
    sub = decode_subscription(metadata)
    assert name == "range" and sub.topics == (T,) and sub.owned_partitions == () and sub.generation_id == -1


def test_static_member_joins_directly_with_its_instance_id():
    m = new_member(group_instance_id="inst-1")
    req = send_join(m)
    assert req.group_instance_id == "inst-1" and req.member_id == ""
    join_ok(m, req, member_id="inst-1-abc")
    assert m.state is MemberState.COMPLETING_REBALANCE and m.member_id == "inst-1-abc"


def test_one_protocol_per_assignor_in_preference_order():
    m = GroupMember("g", ["b", "a"], [CoopLike(), RangeLike()])
    req = send_join(m)
    assert [name for name, _ in req.protocols] == ["coop", "range"]
    assert decode_subscription(req.protocols[0][1]).topics == ("a", "b")


def test_leader_runs_the_chosen_assignor_over_decoded_subscriptions():
    range_a, coop = RangeLike(), CoopLike()
    m = GroupMember("g", [T], [coop, range_a])
    req = send_join(m)
    other = new_member()
    other_meta = send_join(other).protocols[0][1]
    members = [JoinGroupMember("m1", None, req.protocols[1][1]), JoinGroupMember("m2", None, other_meta)]
    join_ok(m, req, member_id="m1", leader="m1", members=members, protocol="range", topics={T: 4, "unrelated": 9})
    sync = send_sync(m)
    assert m.is_leader and coop.seen is None
    assert range_a.seen[0] == {T: 4}
    assert set(range_a.seen[1]) == {"m1", "m2"}
    assert {k: decode_assignment(v).partitions for k, v in sync.assignments.items()} == {
        "m1": ((T, 0), (T, 1)), "m2": ((T, 2), (T, 3))}
    assert sync.generation_id == 1 and sync.protocol_name == "range" and sync.protocol_type == "consumer"


def test_follower_and_skip_assignment_leader_sync_with_no_assignments():
    follower = new_member()
    join_ok(follower, send_join(follower), leader="m0")
    assert send_sync(follower).assignments == {}
    static_leader = new_member(group_instance_id="a")
    req = send_join(static_leader)
    join_ok(static_leader, req, member_id="a-2", leader="a-2", skip=True,
            members=[JoinGroupMember("a-2", "a", req.protocols[0][1])])
    assert static_leader.is_leader and send_sync(static_leader).assignments == {}


def test_sync_success_makes_the_member_stable_and_tells_the_assignor():
    assignor = RangeLike()
    m = new_member(assignor)
    complete = make_stable(m, [(T, 0), (T, 1)], generation=3)
    assert complete.added == tps(0, 1) and complete.revoked == frozenset()
    assert m.assignment == tps(0, 1) and m.generation_id == 3 and not m.rejoin_needed
    assert assignor.on_assignment_calls == [(((T, 0), (T, 1)), 3)]


def test_an_assignment_outside_the_subscription_triggers_a_rejoin():
    m = new_member()
    join_ok(m, send_join(m))
    resp = SyncGroupResponse(Errors.NONE, encode_assignment(Assignment((("other", 0),))))
    assert m.on_sync_response(send_sync(m), resp, 0) is None
    assert m.rejoin_needed and m.assignment == frozenset()


# ------------------------------------------------------------------------------------------------
# Eager and cooperative listener sequences
# ------------------------------------------------------------------------------------------------
def test_eager_revokes_everything_before_rejoining_and_assigns_the_full_new_set():
    m = new_member()
    make_stable(m, [(T, 0), (T, 1)])
    hb = m.poll_background(HEARTBEAT)
    m.on_heartbeat_response(hb, HeartbeatResponse(Errors.REBALANCE_IN_PROGRESS), HEARTBEAT)
    prepare = m.poll_rebalance(HEARTBEAT)
    assert prepare == PrepareJoin((ListenerEvent("on_partitions_revoked", tps(0, 1)),), True, tps(0, 1))
    assert m.assignment == tps(0, 1)  # still owned while the callback runs
    m.finish_join_prepare(prepare)
    req = send_join(m, HEARTBEAT)
    assert req.member_id == "m1"
    sub = decode_subscription(req.protocols[0][1])
    assert sub.owned_partitions == () and sub.generation_id == 1
    join_ok(m, req, generation=2)
    complete = sync_ok(m, send_sync(m), [(T, 1), (T, 2)])
    assert complete.added == tps(1, 2) and complete.revoked == frozenset()


def test_eager_revocation_is_called_even_with_nothing_owned():
    m = new_member()
    make_stable(m, [])
    m.request_rejoin("test")
    prepare = m.poll_rebalance(0)
    assert prepare.events == (ListenerEvent("on_partitions_revoked", frozenset()),)


def test_cooperative_keeps_partitions_through_the_join_and_revokes_only_moved_ones():
    m = new_member(CoopLike())
    assert m.protocol == COOPERATIVE
    make_stable(m, [(T, 0), (T, 1), (T, 2)])
    m.request_rejoin("new member")
    prepare = m.poll_rebalance(0)
    assert prepare.events == () and prepare.dropped == frozenset()
    m.finish_join_prepare(prepare)
    req = send_join(m)
    sub = decode_subscription(req.protocols[0][1])
    assert sub.owned_partitions == ((T, 0), (T, 1), (T, 2)) and sub.generation_id == 1
    assert m.assignment == tps(0, 1, 2)
    # round 1: partition 2 must move; it is revoked after SyncGroup and the member rejoins at once
    join_ok(m, req, generation=2, protocol="coop")
    complete = sync_ok(m, send_sync(m), [(T, 0), (T, 1)])
    assert complete.revoked == tps(2) and complete.added == frozenset()
    assert m.rejoin_needed
    m.finish_join(complete)
    assert m.assignment == tps(0, 1)
    # round 2: nothing revoked before joining, unaffected partitions stay owned throughout
    prepare = m.poll_rebalance(0)
    assert prepare.events == ()
    m.finish_join_prepare(prepare)
    req = send_join(m)
    assert decode_subscription(req.protocols[0][1]).owned_partitions == ((T, 0), (T, 1))
    join_ok(m, req, generation=3, protocol="coop")
    complete = sync_ok(m, send_sync(m), [(T, 0), (T, 1)])
    assert complete.revoked == frozenset() and complete.added == frozenset() and not m.rejoin_needed


def test_cooperative_assigned_gets_only_newly_added_partitions():
    m = new_member(CoopLike())
    make_stable(m, [(T, 0)])
    m.request_rejoin("x")
    req = send_join(m)
    join_ok(m, req, generation=2, protocol="coop")
    complete = sync_ok(m, send_sync(m), [(T, 0), (T, 3)])
    assert complete.added == tps(3) and complete.revoked == frozenset() and not m.rejoin_needed


def test_rebalance_protocol_is_the_common_one():
    class Both(RangeLike):
        supported_protocols = (COOPERATIVE, EAGER)

    assert rebalance_protocol_of([RangeLike()]) == EAGER
    assert rebalance_protocol_of([CoopLike()]) == COOPERATIVE
    assert rebalance_protocol_of([CoopLike(), RangeLike()]) == EAGER
    assert rebalance_protocol_of([Both(), CoopLike()]) == COOPERATIVE

    class OnlyCoop(RangeLike):
        supported_protocols = (COOPERATIVE,)

    with pytest.raises(ValueError, match="assignors"):
        rebalance_protocol_of([OnlyCoop(), RangeLike()])


def test_leader_refuses_a_cooperative_assignment_that_moves_an_owned_partition_in_one_round():
    class Greedy(CoopLike):
        def assign(self, partitions_per_topic, subscriptions):
            return {"m1": Assignment(((T, 0), (T, 1))), "m2": Assignment()}

    leader, other = new_member(Greedy()), new_member(CoopLike())
    make_stable(other, [(T, 1)])
    other.request_rejoin("x")
    req = send_join(leader)
    members = [JoinGroupMember("m1", None, req.protocols[0][1]),
               JoinGroupMember("m2", None, send_join(other).protocols[0][1])]
    join_ok(leader, req, member_id="m1", leader="m1", members=members, protocol="coop", topics={T: 2})
    with pytest.raises(FatalConsumerError, match="cooperative"):
        leader.poll_rebalance(0)


# ------------------------------------------------------------------------------------------------
# JoinGroup errors
# ------------------------------------------------------------------------------------------------
def _member_with_id(**kw):
    m = new_member(**kw)
    req = send_join(m)
    m.on_join_response(req, JoinGroupResponse(Errors.MEMBER_ID_REQUIRED, member_id="m1"), 0)
    return m


@pytest.mark.parametrize("error", [Errors.REBALANCE_IN_PROGRESS])
def test_join_rebalance_in_progress_rejoins_at_once_keeping_the_member_id(error):
    m = _member_with_id()
    req = send_join(m)
    m.on_join_response(req, JoinGroupResponse(error), 0)
    assert send_join(m).member_id == "m1"


def test_join_unknown_member_id_resets_and_rejoins_at_once():
    m = _member_with_id()
    req = send_join(m)
    m.on_join_response(req, JoinGroupResponse(Errors.UNKNOWN_MEMBER_ID), 0)
    assert m.member_id == "" and send_join(m).member_id == ""


@pytest.mark.parametrize("error", [Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE])
def test_join_coordinator_errors_rediscover_and_retry_after_backoff(error):
    m = _member_with_id()
    req = send_join(m, 50)
    m.on_join_response(req, JoinGroupResponse(error), 50)
    assert m.coordinator_unknown
    assert m.poll_rebalance(50 + BACKOFF - 1) == Wait(50 + BACKOFF)
    retry = send_join(m, 50 + BACKOFF)
    assert retry.member_id == "m1" and not m.coordinator_unknown


def test_join_load_in_progress_retries_after_backoff():
    m = _member_with_id()
    req = send_join(m, 0)
    m.on_join_response(req, JoinGroupResponse(Errors.COORDINATOR_LOAD_IN_PROGRESS), 0)
    assert not m.coordinator_unknown and m.poll_rebalance(1) == Wait(BACKOFF)
    assert send_join(m, BACKOFF).member_id == "m1"


def test_join_fenced_instance_id_is_fatal():
    m = new_member(group_instance_id="a")
    m.on_join_response(send_join(m), JoinGroupResponse(Errors.FENCED_INSTANCE_ID), 0)
    with pytest.raises(FencedInstanceIdError):
        m.poll_rebalance(0)
    with pytest.raises(FencedInstanceIdError):
        m.commit_request({(T, 0): 1})
    with pytest.raises(FencedInstanceIdError):  # raised again, every time
        m.poll_rebalance(1)


def test_join_group_max_size_reached_is_fatal_and_resets_a_dynamic_member():
    m = _member_with_id()
    m.on_join_response(send_join(m), JoinGroupResponse(Errors.GROUP_MAX_SIZE_REACHED), 0)
    assert m.member_id == ""
    with pytest.raises(GroupMaxSizeReachedError):
        m.poll_rebalance(0)


@pytest.mark.parametrize("error", [Errors.INCONSISTENT_GROUP_PROTOCOL, Errors.INVALID_SESSION_TIMEOUT,
                                   Errors.UNKNOWN_SERVER_ERROR])
def test_other_join_errors_are_fatal(error):
    m = new_member()
    m.on_join_response(send_join(m), JoinGroupResponse(error), 0)
    with pytest.raises(FatalConsumerError) as info:
        m.poll_rebalance(0)
    assert info.value.error is error


def test_coordinator_choosing_an_unknown_protocol_is_fatal():
    m = new_member()
    join_ok(m, send_join(m), protocol="roundrobin")
    with pytest.raises(FatalConsumerError, match="roundrobin"):
        m.poll_rebalance(0)


def test_join_answer_after_leaving_is_not_adopted():
    m = _member_with_id()
    req = send_join(m)
    m.maybe_leave_group("poll timeout")  # e.g. from the heartbeat thread
    join_ok(m, req, generation=5, member_id="m1")
    assert m.generation_id == -1 and m.state is MemberState.UNJOINED and m.rejoin_needed


def test_a_response_to_a_request_not_in_flight_is_ignored():
    m = _member_with_id()
    req = send_join(m)
    stale = JoinGroupRequest("g", "old", "consumer", (), 1, 1)
    m.on_join_response(stale, JoinGroupResponse(Errors.NONE, 9, "old", "old"), 0)
    assert m.generation_id == -1 and m.poll_rebalance(0) == Wait(None)
    join_ok(m, req)
    assert m.generation_id == 1


# ------------------------------------------------------------------------------------------------
# SyncGroup errors
# ------------------------------------------------------------------------------------------------
def _synced_member():
    m = _member_with_id()
    join_ok(m, send_join(m), generation=4)
    return m, send_sync(m)


def test_sync_rebalance_in_progress_rejoins_keeping_member_id_and_generation():
    m, sync = _synced_member()
    assert m.on_sync_response(sync, SyncGroupResponse(Errors.REBALANCE_IN_PROGRESS), 0) is None
    req = send_join(m)
    assert req.member_id == "m1" and decode_subscription(req.protocols[0][1]).generation_id == 4


def test_sync_unknown_member_id_resets_member_id():
    m, sync = _synced_member()
    m.on_sync_response(sync, SyncGroupResponse(Errors.UNKNOWN_MEMBER_ID), 0)
    assert (m.member_id, m.generation_id) == ("", -1) and send_join(m).member_id == ""


def test_sync_illegal_generation_resets_generation_but_keeps_member_id():
    m, sync = _synced_member()
    m.on_sync_response(sync, SyncGroupResponse(Errors.ILLEGAL_GENERATION), 0)
    assert (m.member_id, m.generation_id) == ("m1", -1) and send_join(m).member_id == "m1"


def test_sync_coordinator_error_rejoins_after_backoff():
    m, sync = _synced_member()
    m.on_sync_response(sync, SyncGroupResponse(Errors.NOT_COORDINATOR), 0)
    assert m.coordinator_unknown and isinstance(m.poll_rebalance(1), Wait)
    assert send_join(m, BACKOFF).member_id == "m1"


def test_sync_fenced_instance_id_is_fatal():
    m, sync = _synced_member()
    m.on_sync_response(sync, SyncGroupResponse(Errors.FENCED_INSTANCE_ID), 0)
    with pytest.raises(FencedInstanceIdError):
        m.poll_rebalance(0)


# ------------------------------------------------------------------------------------------------
# Heartbeats
# ------------------------------------------------------------------------------------------------
def test_heartbeats_every_interval_one_at_a_time_from_the_join_answer():
    m = new_member()
    assert m.poll_background(0) is None  # not in a generation yet
    make_stable(m, [(T, 0)], now=0)
    assert m.poll_background(HEARTBEAT - 1) is None
    hb = m.poll_background(HEARTBEAT)
    assert hb == HeartbeatRequest("g", 1, "m1", None)
    assert m.poll_background(3 * HEARTBEAT) is None  # one in flight
    m.on_heartbeat_response(hb, HeartbeatResponse(Errors.NONE), 3 * HEARTBEAT)
    hb = m.poll_background(3 * HEARTBEAT)
    assert hb is not None and m.next_background_ms() == REBALANCE  # in flight: only the poll deadline
    m.on_heartbeat_response(hb, HeartbeatResponse(Errors.NONE), 3 * HEARTBEAT)
    assert m.next_background_ms() == 4 * HEARTBEAT


def test_heartbeat_rebalance_in_progress_requests_rejoin_only_when_stable():
    m = _member_with_id()
    join_ok(m, send_join(m))
    hb = m.poll_background(HEARTBEAT)  # completing rebalance: heartbeats already run
    m.on_heartbeat_response(hb, HeartbeatResponse(Errors.REBALANCE_IN_PROGRESS), HEARTBEAT)
    assert m.state is MemberState.COMPLETING_REBALANCE and not isinstance(m.poll_rebalance(HEARTBEAT), PrepareJoin)


@pytest.mark.parametrize("error,keeps_member_id", [(Errors.UNKNOWN_MEMBER_ID, False),
                                                   (Errors.ILLEGAL_GENERATION, True)])
def test_heartbeat_fencing_errors_reset_and_partitions_are_lost(error, keeps_member_id):
    m = new_member()
    make_stable(m, [(T, 0), (T, 1)])
    hb = m.poll_background(HEARTBEAT)
    m.on_heartbeat_response(hb, HeartbeatResponse(error), HEARTBEAT)
    assert m.generation_id == -1 and (m.member_id == "m1") is keeps_member_id
    assert m.state is MemberState.UNJOINED and m.poll_background(10 * HEARTBEAT) is None
    prepare = m.poll_rebalance(HEARTBEAT)
    assert prepare.events == (ListenerEvent("on_partitions_lost", tps(0, 1)),) and not prepare.can_commit
    m.finish_join_prepare(prepare)
    assert m.assignment == frozenset() and send_join(m).member_id == ("m1" if keeps_member_id else "")


def test_heartbeat_error_for_an_older_generation_is_ignored():
    m = new_member()
    make_stable(m, [(T, 0)], generation=1)
    old = m.poll_background(HEARTBEAT)
    m.request_rejoin("x")
    join_ok(m, send_join(m), generation=2)
    m.finish_join(sync_ok(m, send_sync(m), [(T, 0)]))
    m.on_heartbeat_response(old, HeartbeatResponse(Errors.ILLEGAL_GENERATION), HEARTBEAT)
    assert m.generation_id == 2 and m.state is MemberState.STABLE


def test_heartbeat_fenced_instance_id_is_fatal():
    m = new_member(group_instance_id="a")
    make_stable(m, [(T, 0)])
    hb = m.poll_background(HEARTBEAT)
    m.on_heartbeat_response(hb, HeartbeatResponse(Errors.FENCED_INSTANCE_ID), HEARTBEAT)
    with pytest.raises(FencedInstanceIdError):
        m.poll_rebalance(HEARTBEAT)
    assert m.poll_background(5 * HEARTBEAT) is None


def test_heartbeat_coordinator_error_marks_it_unknown_and_retries_after_backoff():
    m = new_member()
    make_stable(m, [(T, 0)])
    hb = m.poll_background(HEARTBEAT)
    m.on_heartbeat_response(hb, HeartbeatResponse(Errors.NOT_COORDINATOR), HEARTBEAT)
    assert m.coordinator_unknown and m.poll_background(HEARTBEAT + BACKOFF - 1) is None
    assert m.poll_background(HEARTBEAT + BACKOFF) is not None and m.state is MemberState.STABLE


def test_no_heartbeat_answer_within_the_session_timeout_marks_the_coordinator_unknown():
    m = new_member(rebalance_timeout_ms=10 * SESSION)
    make_stable(m, [(T, 0)])
    m.poll_background(HEARTBEAT)  # never answered
    m.on_poll(SESSION)
    assert m.poll_background(SESSION) is None and m.coordinator_unknown
    assert m.state is MemberState.STABLE  # the generation is kept; only the coordinator is rediscovered
    assert m.poll_background(SESSION + BACKOFF) is not None  # the unanswered heartbeat does not block forever


# ------------------------------------------------------------------------------------------------
# max.poll.interval.ms
# ------------------------------------------------------------------------------------------------
def test_poll_timeout_makes_a_dynamic_member_leave_and_lose_its_partitions():
    m = new_member()
    make_stable(m, [(T, 0)])
    m.on_poll(100)
    assert not isinstance(m.poll_background(100 + REBALANCE - 1), LeaveGroupRequest)
    leave = m.poll_background(100 + REBALANCE)
    assert leave == LeaveGroupRequest("g", (("m1", None),), "consumer poll timeout has expired")
    assert (m.member_id, m.generation_id, m.state) == ("", -1, MemberState.UNJOINED)
    with pytest.raises(CommitFailedError) as info:
        m.commit_request({(T, 0): 5})
    assert not isinstance(info.value, RebalanceInProgressError)
    prepare = m.poll_rebalance(100 + REBALANCE)
    assert prepare.events == (ListenerEvent("on_partitions_lost", tps(0)),)


def test_poll_timeout_static_member_sends_no_leave_but_rejoins():
    m = new_member(group_instance_id="a")
    make_stable(m, [(T, 0)])
    assert m.poll_background(REBALANCE) is None
    assert m.generation_id == -1 and m.rejoin_needed


def test_late_poll_leaves_before_restarting_the_timer():
    m = new_member()
    make_stable(m, [(T, 0)])
    assert m.on_poll(REBALANCE - 1) is None
    assert isinstance(m.on_poll(2 * REBALANCE), LeaveGroupRequest)
    assert m.on_poll(2 * REBALANCE + 1) is None


# ------------------------------------------------------------------------------------------------
# Commits and fetches
# ------------------------------------------------------------------------------------------------
def _commit(m, error, offsets=None):
    req = m.commit_request(offsets or {(T, 0): 7})
    return req, m.on_commit_response(req, OffsetCommitResponse({tp: error for tp in req.offsets}), 0)


def test_commit_request_carries_the_generation():
    m = new_member(group_instance_id="a")
    make_stable(m, [(T, 0)], generation=6, member_id="a-1")
    req, done = _commit(m, Errors.NONE)
    assert done and (req.generation_id, req.member_id, req.group_instance_id) == (6, "a-1", "a")
    assert req.offsets == {(T, 0): (7, "", -1)}


def test_commit_during_a_rebalance_raises_rebalance_in_progress():
    m = _member_with_id()
    send_join(m)
    with pytest.raises(RebalanceInProgressError):
        m.commit_request({(T, 0): 1})


@pytest.mark.parametrize("error", [Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION])
def test_commit_losing_the_generation_raises_commit_failed_and_resets(error):
    m = new_member()
    make_stable(m, [(T, 0)])
    with pytest.raises(CommitFailedError) as info:
        _commit(m, error)
    assert not isinstance(info.value, RebalanceInProgressError)
    assert m.generation_id == -1 and m.rejoin_needed


def test_commit_rebalance_in_progress_raises_and_requests_rejoin():
    m = new_member()
    make_stable(m, [(T, 0)])
    with pytest.raises(RebalanceInProgressError):
        _commit(m, Errors.REBALANCE_IN_PROGRESS)
    assert m.rejoin_needed and m.generation_id == 1


@pytest.mark.parametrize("error,unknown", [(Errors.NOT_COORDINATOR, True), (Errors.COORDINATOR_NOT_AVAILABLE, True),
                                           (Errors.COORDINATOR_LOAD_IN_PROGRESS, False)])
def test_commit_coordinator_errors_are_retried(error, unknown):
    m = new_member()
    make_stable(m, [(T, 0)])
    _, done = _commit(m, error)
    assert done is False and m.coordinator_unknown is unknown and m.state is MemberState.STABLE


def test_commit_fenced_instance_id_is_fatal():
    m = new_member(group_instance_id="a")
    make_stable(m, [(T, 0)])
    with pytest.raises(FencedInstanceIdError):
        _commit(m, Errors.FENCED_INSTANCE_ID)
    with pytest.raises(FencedInstanceIdError):
        m.poll_rebalance(0)


def test_commit_other_errors_are_raised_with_their_code():
    m = new_member()
    make_stable(m, [(T, 0)])
    with pytest.raises(ConsumerError) as info:
        _commit(m, Errors.OFFSET_METADATA_TOO_LARGE)
    assert info.value.error is Errors.OFFSET_METADATA_TOO_LARGE and not isinstance(info.value, CommitFailedError)


def test_fetch_response_classification():
    m = new_member()
    ok = OffsetFetchResponse(Errors.NONE, {(T, 0): PartitionOffset(5, -1, "", Errors.NONE),
                                           (T, 1): PartitionOffset(-1, -1, "", Errors.NONE)})
    assert m.on_fetch_response(ok, 0) == {(T, 0): 5, (T, 1): None}
    assert m.on_fetch_response(OffsetFetchResponse(Errors.COORDINATOR_LOAD_IN_PROGRESS), 0) is None
    assert m.on_fetch_response(OffsetFetchResponse(Errors.NOT_COORDINATOR), 0) is None and m.coordinator_unknown
    with pytest.raises(ConsumerError):
        m.on_fetch_response(OffsetFetchResponse(Errors.GROUP_AUTHORIZATION_FAILED), 0)
    assert m.fetch_request([(T, 0)]).require_stable


# ------------------------------------------------------------------------------------------------
# Close
# ------------------------------------------------------------------------------------------------
def test_close_dynamic_member_revokes_and_leaves_once():
    m = new_member()
    make_stable(m, [(T, 0)])
    assert m.leave_prepare() == ListenerEvent("on_partitions_revoked", tps(0))
    assert m.close() == LeaveGroupRequest("g", (("m1", None),), "the consumer is being closed")
    assert m.close() is None and m.assignment == frozenset() and m.poll_rebalance(0) is None


def test_close_static_member_sends_no_leave():
    m = new_member(group_instance_id="a")
    make_stable(m, [(T, 0)])
    assert m.close() is None


def test_close_after_being_fenced_reports_lost_partitions():
    m = new_member()
    make_stable(m, [(T, 0)])
    hb = m.poll_background(HEARTBEAT)
    m.on_heartbeat_response(hb, HeartbeatResponse(Errors.UNKNOWN_MEMBER_ID), HEARTBEAT)
    assert m.leave_prepare() == ListenerEvent("on_partitions_lost", tps(0))
    assert m.close() is None  # not in the group any more: nothing to leave
