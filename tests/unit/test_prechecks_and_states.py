"""Common pre-checks and their order (Kafka's GroupCoordinator.validateGroupStatus), the classic state
machine hooks (ClassicGroupState) and append failures on group writes (the leader's SyncGroup and a static
member's replacement, with Kafka's new coordinator mapping
``CoordinatorOperationExceptionHelper.handleOperationException``), after Kafka's
GroupCoordinatorServiceTest / ClassicGroupTest / GroupMetadataManagerTest
(testSyncGroupAsLeaderAppendFailureTransformsError, testReplaceStaticMemberInStableStateErrors,
testStaticMemberRejoinWithUnknownMemberIdAndChangeOfProtocolWhileSelectProtocolUnchangedPersistenceFailure)."""

from __future__ import annotations

import itertools

import pytest

from raygroups import Errors
from raygroups.testing import IllegalStateError, InProcessCoordinator, ManualClock
from tests.unit.helpers import (
    GROUP,
    Ctx,
    complete_initial_join,
    group_values,
    replay_matches_after_test,
    stable_static_group,
)


@pytest.fixture(autouse=True)
def _replay_matches_after_each_test(monkeypatch):
    """After every scenario, replaying the log gives the live durable state."""
    yield from replay_matches_after_test(monkeypatch)


T0 = ("foo", 0)
STATES = ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
# Kafka's ClassicGroupState: the valid previous states of each state.
VALID_PREVIOUS = {
    "Empty": {"PreparingRebalance"},
    "PreparingRebalance": {"Stable", "CompletingRebalance", "Empty"},
    "CompletingRebalance": {"PreparingRebalance"},
    "Stable": {"CompletingRebalance"},
    "Dead": set(STATES),
}
JOIN_KW = dict(member_id="", protocol_type="consumer", protocols=[("range", b"")], session_timeout_ms=10_000,
               rebalance_timeout_ms=10_000, client_id="c")


def coordinator(**kw):
    """Two partitions, as in Kafka's GroupCoordinatorTest: "groupId" → partition 0 (owned), "otherGroup" →
    partition 1 (not owned)."""
    counter = itertools.count(1)
    return InProcessCoordinator(
        num_partitions=2, owned_partitions={0}, clock=ManualClock(0),
        config={"group.min.session.timeout.ms": 10, "group.initial.rebalance.delay.ms": 0},
        member_id_generator=lambda p: f"{p}-{next(counter)}", **kw,
    )


def all_requests(coord, group_id):
    """One request of each group API for ``group_id``; returns {api: response}."""
    return {
        "join": coord.join_group(group_id=group_id, **JOIN_KW).result(timeout=0),
        "sync": coord.sync_group(group_id=group_id, generation_id=1, member_id="m").result(timeout=0),
        "heartbeat": coord.heartbeat(group_id=group_id, generation_id=1, member_id="m").result(timeout=0),
        "leave": coord.leave_group(group_id=group_id, members=[("m", None)]).result(timeout=0),
        "commit": coord.commit_offsets(group_id=group_id, offsets={T0: (1, "")}).result(timeout=0),
        "fetch": coord.fetch_offsets(group_id=group_id, partitions=[T0]).result(timeout=0),
    }


def errors_of(responses):
    out = {}
    for api, r in responses.items():
        out[api] = r.errors[T0] if api == "commit" else r.error
    return out


# ----------------------------------------------------------------------------------------------
# Pre-checks (Kafka's GroupCoordinator.validateGroupStatus)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("group_id", [None, ""])
def test_invalid_group_id(group_id):
    """GroupCoordinator.isValidGroupId: None for every API; "" for all but OffsetCommit/OffsetFetch
    (accepted for compatibility)."""
    coord = coordinator()
    errors = errors_of(all_requests(coord, group_id))
    expected = {api: Errors.INVALID_GROUP_ID for api in ("join", "sync", "heartbeat", "leave")}
    for api in ("commit", "fetch"):
        expected[api] = Errors.INVALID_GROUP_ID if group_id is None else Errors.NONE
    if group_id == "":
        # "" hashes to 0, so partitionFor gives partition 0, which is owned: commit/fetch are served.
        assert coord.log_records(0) != []
    assert errors == expected


def test_owned_partition_serves_and_not_owned_is_not_coordinator():
    """The ownership check (NOT_COORDINATOR) with two partitions: "groupId" → 0 (owned), "otherGroup" → 1
    (not owned)."""
    coord = coordinator()
    assert coord.join_group(group_id="groupId", **JOIN_KW).result(timeout=0).error is Errors.MEMBER_ID_REQUIRED
    errors = errors_of(all_requests(coord, "otherGroup"))
    assert errors == {api: Errors.NOT_COORDINATOR for api in errors}
    assert coord.log_records(1) == []


def test_loading_partition():
    """The loading check: COORDINATOR_LOAD_IN_PROGRESS, except Heartbeat (NONE, "respond blindly" in
    GroupCoordinator.handleHeartbeat) and SyncGroup (REBALANCE_IN_PROGRESS, handleSyncGroup)."""
    coord = coordinator()
    coord.set_loading_for_testing(0, True)
    errors = errors_of(all_requests(coord, "groupId"))
    assert errors == {
        "join": Errors.COORDINATOR_LOAD_IN_PROGRESS,
        "sync": Errors.REBALANCE_IN_PROGRESS,
        "heartbeat": Errors.NONE,
        "leave": Errors.COORDINATOR_LOAD_IN_PROGRESS,
        "commit": Errors.COORDINATOR_LOAD_IN_PROGRESS,
        "fetch": Errors.COORDINATOR_LOAD_IN_PROGRESS,
    }
    assert coord.log_records(0) == []
    coord.set_loading_for_testing(0, False)
    assert coord.join_group(group_id="groupId", **JOIN_KW).result(timeout=0).error is Errors.MEMBER_ID_REQUIRED


def test_invalid_group_id_precedes_loading():
    """validateGroupStatus order: the invalid group id before the loading check."""
    coord = coordinator()
    coord.set_loading_for_testing(0, True)
    assert coord.join_group(group_id="", **JOIN_KW).result(timeout=0).error is Errors.INVALID_GROUP_ID
    assert coord.heartbeat(group_id="", generation_id=1, member_id="m").result(timeout=0).error is Errors.INVALID_GROUP_ID


def test_closed_coordinator_is_not_available_and_precedes_ownership():
    """The active check: after close() every API answers COORDINATOR_NOT_AVAILABLE, even for a partition
    that was never owned; an invalid group id is still reported first."""
    coord = coordinator()
    coord.close()
    for group_id in ("groupId", "otherGroup"):
        errors = errors_of(all_requests(coord, group_id))
        assert errors == {api: Errors.COORDINATOR_NOT_AVAILABLE for api in errors}, group_id
    assert coord.join_group(group_id=None, **JOIN_KW).result(timeout=0).error is Errors.INVALID_GROUP_ID


def test_loading_precedes_not_owned():
    """A partition being loaded is not owned yet, but answers COORDINATOR_LOAD_IN_PROGRESS."""
    coord = coordinator()
    coord.set_loading_for_testing(1, True)
    assert coord.join_group(group_id="otherGroup", **JOIN_KW).result(timeout=0).error is Errors.COORDINATOR_LOAD_IN_PROGRESS


def test_session_timeout_check_follows_the_pre_checks():
    """GroupCoordinator.handleJoinGroup order: validateGroupStatus (ownership) before the session timeout."""
    coord = coordinator()
    kw = dict(JOIN_KW, session_timeout_ms=1)
    assert coord.join_group(group_id="otherGroup", **kw).result(timeout=0).error is Errors.NOT_COORDINATOR
    assert coord.join_group(group_id="groupId", **kw).result(timeout=0).error is Errors.INVALID_SESSION_TIMEOUT


# ----------------------------------------------------------------------------------------------
# State machine hooks (Kafka's ClassicGroup.transitionTo / ClassicGroupState)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source,target", list(itertools.product(STATES, STATES)))
def test_transitions(source, target):
    """ClassicGroupTest testStateTransitions / testEmptyToStableIllegalTransition / ...: the transitions
    ClassicGroupState lists as valid are allowed, every other one raises IllegalStateError and leaves the
    state alone."""
    ctx = Ctx()
    ctx.coord.force_group_state_for_testing(GROUP, source)
    if source in VALID_PREVIOUS[target]:
        ctx.coord.transition_group_for_testing(GROUP, target)
        assert ctx.state() == target
        assert ctx.coord.group_for_testing(GROUP).previous_state.value == source
    else:
        with pytest.raises(IllegalStateError):
            ctx.coord.transition_group_for_testing(GROUP, target)
        assert ctx.state() == source


def test_transition_of_unknown_group_raises():
    """The hooks refuse unknown groups (KeyError) instead of creating them."""
    ctx = Ctx()
    with pytest.raises(KeyError):
        ctx.coord.transition_group_for_testing("nope", "Dead")
    with pytest.raises(KeyError):
        ctx.coord.can_rebalance_for_testing("nope")


@pytest.mark.parametrize("state", STATES)
def test_can_rebalance(state):
    """ClassicGroupTest testCanRebalanceWhen*: only Stable, CompletingRebalance and Empty."""
    ctx = Ctx()
    ctx.coord.force_group_state_for_testing(GROUP, state)
    assert ctx.coord.can_rebalance_for_testing(GROUP) is (state in ("Stable", "CompletingRebalance", "Empty"))


def test_force_group_state_creates_an_empty_classic_group_and_keeps_members():
    """force_group_state_for_testing: creates an empty classic group if unknown, keeps members otherwise."""
    ctx = Ctx()
    ctx.coord.force_group_state_for_testing("new-group", "Stable")
    group = ctx.coord.group_for_testing("new-group")
    assert (ctx.state("new-group"), group.members, group.generation_id) == ("Stable", {}, 0)
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.coord.force_group_state_for_testing(GROUP, "PreparingRebalance")
    assert ctx.state() == "PreparingRebalance"
    assert list(ctx.coord.group_for_testing(GROUP).members) == [m1]
    assert ctx.heartbeat(m1, gen).error is Errors.REBALANCE_IN_PROGRESS
    # The transition timestamp is the clock's time.
    ctx.clock.advance(1_234)
    ctx.coord.force_group_state_for_testing(GROUP, "Stable")
    assert ctx.coord.group_for_testing(GROUP).state_timestamp_ms == ctx.clock.now_ms()


def test_real_transitions_follow_the_table():
    """The states a group goes through in a full life cycle, each transition legal."""
    ctx = Ctx()
    seen = []
    f = ctx.join_new_dynamic()
    seen.append(ctx.state())
    r = complete_initial_join(ctx, [f])[0]
    seen.append(ctx.state())
    ctx.sync(r.member_id, r.generation_id).result(timeout=0)
    seen.append(ctx.state())
    ctx.leave([(r.member_id, None)])
    seen.append(ctx.state())
    assert seen == ["PreparingRebalance", "CompletingRebalance", "Stable", "Empty"]


# ----------------------------------------------------------------------------------------------
# Append failures on group writes (CoordinatorOperationExceptionHelper.handleOperationException)
# ----------------------------------------------------------------------------------------------
GROUP_WRITE_MAPPING = [
    (Errors.NOT_ENOUGH_REPLICAS, Errors.COORDINATOR_NOT_AVAILABLE),
    (Errors.NOT_LEADER_OR_FOLLOWER, Errors.NOT_COORDINATOR),
    (Errors.REQUEST_TIMED_OUT, Errors.COORDINATOR_NOT_AVAILABLE),
    (Errors.MESSAGE_TOO_LARGE, Errors.UNKNOWN_SERVER_ERROR),
    (Errors.NETWORK_EXCEPTION, Errors.COORDINATOR_LOAD_IN_PROGRESS),
]
IDS = [a.name for a, _ in GROUP_WRITE_MAPPING]


@pytest.mark.parametrize("append_error,client_error", GROUP_WRITE_MAPPING, ids=IDS)
def test_leader_sync_append_failure(append_error, client_error):
    """testSyncGroupAsLeaderAppendFailureTransformsError: every parked sync gets the mapped error, the
    group goes back to PreparingRebalance, nothing is written; the group recovers with a new rebalance."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=60_000, rebalance_timeout_ms=10_000)
    fs = [ctx.join_new_dynamic(**kw) for _ in range(3)]
    r1, r2, r3 = complete_initial_join(ctx, fs)
    gen, m1, m2, m3 = r1.generation_id, r1.member_id, r2.member_id, r3.member_id
    records = ctx.records()
    s2, s3 = ctx.sync(m2, gen), ctx.sync(m3, gen)
    ctx.coord.fail_next_append_for_testing(0, append_error)
    lead = ctx.sync(m1, gen, {m1: b"1", m2: b"2", m3: b"3"}).result(timeout=0)
    for r in (lead, s2.result(timeout=0), s3.result(timeout=0)):
        assert (r.error, r.assignment) == (client_error, b"")
    assert ctx.state() == "PreparingRebalance"
    assert ctx.records() == records
    ctx.assert_replay_matches()
    assert all(m.assignment == b"" for m in ctx.coord.group_for_testing(GROUP).members.values())
    # Everybody rejoins: generation + 1, and the next leader sync is persisted.
    futures = [ctx.join(member_id=m, **kw) for m in (m1, m2, m3)]
    assert all(f.result(timeout=0).generation_id == gen + 1 for f in futures)
    assert ctx.sync(m1, gen + 1, {m1: b"1"}).result(timeout=0).error is Errors.NONE
    assert group_values(ctx)[-1].generation == gen + 1
    ctx.assert_replay_matches()


@pytest.mark.parametrize("append_error,client_error", GROUP_WRITE_MAPPING, ids=IDS)
def test_static_replacement_append_failure_is_reverted(append_error, client_error):
    """testReplaceStaticMemberInStableStateErrors / ...PersistenceFailure: the join is answered with the
    mapped error (UNKNOWN_SERVER_ERROR included), member id "" and the group's current generation, protocol
    and leader, never the generic generation -1; the old member id is valid again, the new one unknown."""
    ctx = Ctx()
    gen, ids, leader = stable_static_group(ctx, ["a", "b"])
    records = ctx.records()
    ctx.coord.fail_next_append_for_testing(0, append_error)
    r = ctx.join(group_instance_id="b", protocols=(("range", b"changed"),)).result(timeout=0)
    assert (r.error, r.member_id) == (client_error, "")
    assert (r.generation_id, r.protocol_name, r.leader) == (gen, "range", leader)
    assert ctx.records() == records
    ctx.assert_replay_matches()
    group = ctx.coord.group_for_testing(GROUP)
    assert list(group.members) == [ids["a"], ids["b"]]
    assert group.static_member_id("b") == ids["b"]
    assert group.members[ids["b"]].protocols == (("range", b"meta"),)
    assert group.num_awaiting_join == 0
    assert ctx.state() == "Stable"
    assert ctx.heartbeat("b-3", gen, group_instance_id="b").error is Errors.FENCED_INSTANCE_ID
    s = ctx.sync(ids["b"], gen, group_instance_id="b").result(timeout=0)
    assert (s.error, s.assignment) == (Errors.NONE, ids["b"].encode())
    # The old id's session timer is re-armed at the revert (t=1): without heartbeats it expires at 10 001
    # while "a", which heartbeats, stays.
    ctx.clock.advance(5_000)
    assert ctx.heartbeat(ids["a"], gen, group_instance_id="a").error is Errors.NONE
    ctx.clock.advance(4_999)
    assert ids["b"] in ctx.coord.group_for_testing(GROUP).members
    ctx.clock.advance(1)
    assert list(ctx.coord.group_for_testing(GROUP).members) == [ids["a"]]
    assert ctx.heartbeat(ids["b"], gen, group_instance_id="b").error is Errors.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("append_error,client_error", GROUP_WRITE_MAPPING, ids=IDS)
def test_static_leader_replacement_append_failure_keeps_the_old_leader(append_error, client_error):
    """testReplaceStaticMemberInStableStateErrors for the leader: leadership reverts with the member id."""
    ctx = Ctx()
    gen, ids, leader = stable_static_group(ctx, ["a", "b"])
    ctx.coord.fail_next_append_for_testing(0, append_error)
    r = ctx.join(group_instance_id="a").result(timeout=0)
    assert (r.error, r.member_id) == (client_error, "")
    assert ctx.coord.group_for_testing(GROUP).leader_id == leader == ids["a"]
    ctx.assert_replay_matches()


@pytest.mark.parametrize("append_error,client_error", GROUP_WRITE_MAPPING, ids=IDS)
def test_first_join_append_failure_leaves_no_group(append_error, client_error):
    """The new coordinator persists a new group at its first JoinGroup; if that write fails the group
    never existed (the timeline is reverted): no group, no pending id, nothing in the log."""
    ctx = Ctx()
    ctx.coord.fail_next_append_for_testing(0, append_error)
    r = ctx.join().result(timeout=0)
    assert r.error is client_error
    assert ctx.state() is None
    assert ctx.records() == []
    ctx.assert_replay_matches()
    assert ctx.coord.list_groups().result(timeout=0).groups == []
    # The id handed out in the failed response is not usable: the group is unknown.
    assert ctx.join(member_id="client-1").result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID
    # Not sticky: the next first join works.
    assert ctx.join().result(timeout=0).error is Errors.MEMBER_ID_REQUIRED
    assert ctx.state() == "Empty"


@pytest.mark.parametrize("append_error,client_error", GROUP_WRITE_MAPPING, ids=IDS)
def test_first_static_join_append_failure_leaves_no_group(append_error, client_error):
    """Same for a static member's first JoinGroup, which parks in the (initial) rebalance: the parked
    join gets the mapped error, the group and its timers are gone."""
    ctx = Ctx()
    ctx.coord.fail_next_append_for_testing(0, append_error)
    r = ctx.join(group_instance_id="inst").result(timeout=0)
    assert (r.error, r.member_id) == (client_error, "")
    assert ctx.state() is None
    assert ctx.records() == []
    ctx.clock.advance(400_000)  # no stale timer brings anything back
    assert ctx.state() is None
    assert ctx.records() == []
    f = ctx.join(group_instance_id="inst")
    r = complete_initial_join(ctx, [f])[0]
    assert (r.error, r.generation_id) == (Errors.NONE, 1)
    ctx.assert_replay_matches()


def test_failed_empty_group_write_after_join_completion_is_only_logged():
    """completeClassicGroupJoin with no members: a failed write of the empty GroupMetadata is only
    logged by Kafka; the request that caused it fails with the mapped error; the live group is Empty
    (ClassicGroup is not timeline-backed in Kafka) and the log still says the last generation."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.coord.fail_next_append_for_testing(0, Errors.NOT_ENOUGH_REPLICAS)
    r = ctx.leave([(m1, None)])
    assert (r.error, r.members) == (Errors.COORDINATOR_NOT_AVAILABLE, [])
    assert ctx.state() == "Empty"
    assert group_values(ctx)[-1].generation == gen
    ctx.assert_replay_matches()


def test_join_rejected_by_the_runtime_answers_an_empty_member_id():
    """GroupCoordinatorServiceTest testJoinGroupWithException: errors raised by the runtime (loading,
    not the owner) come back as ``JoinGroupResponseData().setErrorCode(e)``, i.e. member id ""; only the
    service's own checks (not active, invalid group id, session timeout) echo the request's member id."""
    coord = coordinator()
    kw = dict(JOIN_KW, member_id="some-member")
    r = coord.join_group(group_id="otherGroup", **kw).result(timeout=0)
    assert (r.error, r.member_id) == (Errors.NOT_COORDINATOR, "")
    coord.set_loading_for_testing(0, True)
    r = coord.join_group(group_id="groupId", **kw).result(timeout=0)
    assert (r.error, r.member_id) == (Errors.COORDINATOR_LOAD_IN_PROGRESS, "")


def test_join_rejected_by_the_services_own_checks_echoes_the_member_id():
    """GroupCoordinatorServiceTest testJoinGroupInvalidGroupId / testJoinGroupWhenNotStarted /
    testJoinGroupInvalidSessionTimeout: these answers carry the request's member id."""
    coord = coordinator()
    kw = dict(JOIN_KW, member_id="some-member")
    assert coord.join_group(group_id="", **kw).result(timeout=0).member_id == "some-member"
    r = coord.join_group(group_id="groupId", **dict(kw, session_timeout_ms=1)).result(timeout=0)
    assert (r.error, r.member_id) == (Errors.INVALID_SESSION_TIMEOUT, "some-member")
    coord.close()
    r = coord.join_group(group_id="groupId", **kw).result(timeout=0)
    assert (r.error, r.member_id) == (Errors.COORDINATOR_NOT_AVAILABLE, "some-member")
