"""SyncGroup (Kafka's GroupMetadataManager.classicGroupSync), Heartbeat errors per state
(classicGroupHeartbeat) and LeaveGroup (classicGroupLeave), after Kafka's GroupMetadataManagerTest
(testSyncGroup*, testHeartbeat*, testLeaveGroup*, testStaticMembers*Leave*)."""

from __future__ import annotations

import pytest
from raygroups.coordinator.records import GroupMetadataKey

from raygroups import Errors
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


def members_of(ctx, group_id=GROUP):
    group = ctx.coord.group_for_testing(group_id)
    return [] if group is None else list(group.members)


def completing_group(ctx, n=2, **kw):
    futures = [ctx.join_new_dynamic(**kw) for _ in range(n)]
    responses = complete_initial_join(ctx, futures)
    assert ctx.state() == "CompletingRebalance"
    return responses[0].generation_id, [r.member_id for r in responses]


# ----------------------------------------------------------------------------------------------
# SyncGroup validation and order (Kafka's GroupMetadataManager.validateSyncGroup)
# ----------------------------------------------------------------------------------------------
def test_sync_unknown_group():
    """testSyncGroupFromUnknownGroup."""
    ctx = Ctx()
    assert ctx.sync("m", 1).result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID
    assert ctx.state() is None
    assert ctx.records() == []


def test_sync_unknown_member():
    """testSyncGroupFromUnknownMember; the member check precedes the generation check."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    assert ctx.sync("unknown", gen).result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID
    assert ctx.sync("unknown", gen + 5).result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID


def test_sync_illegal_generation():
    """testSyncGroupFromIllegalGeneration; the generation check precedes the protocol checks."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    assert ctx.sync(m1, gen + 1).result(timeout=0).error is Errors.ILLEGAL_GENERATION
    r = ctx.sync(m1, gen - 1, protocol_type="connect", protocol_name="other").result(timeout=0)
    assert r.error is Errors.ILLEGAL_GENERATION


def test_sync_dead_group_comes_first():
    """validateSyncGroup order: Dead before the member check (COORDINATOR_NOT_AVAILABLE)."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.coord.force_group_state_for_testing(GROUP, "Dead")
    assert ctx.sync(m1, gen).result(timeout=0).error is Errors.COORDINATOR_NOT_AVAILABLE
    assert ctx.sync("unknown", gen + 1).result(timeout=0).error is Errors.COORDINATOR_NOT_AVAILABLE


def test_sync_fenced_static_member():
    """testStaticMemberSyncAsLeaderWithInvalidMemberId: instance id owned by another member id; an
    unknown instance id is UNKNOWN_MEMBER_ID; fencing precedes the generation check."""
    ctx = Ctx()
    gen, ids, _ = stable_static_group(ctx, ["a", "b"])
    assert ctx.sync(ids["b"], gen, group_instance_id="a").result(timeout=0).error is Errors.FENCED_INSTANCE_ID
    assert ctx.sync("other", gen + 3, group_instance_id="a").result(timeout=0).error is Errors.FENCED_INSTANCE_ID
    assert ctx.sync(ids["a"], gen, group_instance_id="zzz").result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize(
    "protocol_type,protocol_name,error",
    [
        ("connect", None, Errors.INCONSISTENT_GROUP_PROTOCOL),
        (None, "roundrobin", Errors.INCONSISTENT_GROUP_PROTOCOL),
        ("connect", "range", Errors.INCONSISTENT_GROUP_PROTOCOL),
        ("consumer", "roundrobin", Errors.INCONSISTENT_GROUP_PROTOCOL),
        (None, None, Errors.NONE),
        ("consumer", "range", Errors.NONE),
    ],
)
def test_sync_protocol_type_and_name_checks(protocol_type, protocol_name, error):
    """testSyncGroupReturnsAnErrorWhenProtocolTypeIsInconsistent / ...NameIsInconsistent /
    testSyncGroupSucceedWhenProtocolTypeAndNameAreNotProvided / ...AreConsistent (KIP-559)."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    r = ctx.sync(m1, gen, protocol_type=protocol_type, protocol_name=protocol_name).result(timeout=0)
    assert r.error is error
    if error is Errors.NONE:
        assert (r.assignment, r.protocol_type, r.protocol_name) == (m1.encode(), "consumer", "range")


def test_sync_empty_group_is_unknown_member():
    """Empty ⇒ UNKNOWN_MEMBER_ID (members kept by the forced state, so only the state decides).
    Kafka's new coordinator checks Empty first (classicGroupSync: ``group.isEmpty()``), before the
    generation and protocol checks."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.coord.force_group_state_for_testing(GROUP, "Empty")
    assert ctx.sync(m1, gen).result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID
    assert ctx.sync(m1, gen + 1).result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID
    assert ctx.sync(m1, gen, protocol_type="connect").result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID


def test_sync_in_preparing_rebalance():
    """testSyncGroupLeaderAfterFollower-style: PreparingRebalance ⇒ REBALANCE_IN_PROGRESS."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2)
    ctx.join(member_id=m1)
    assert ctx.state() == "PreparingRebalance"
    assert ctx.sync(m2, gen).result(timeout=0).error is Errors.REBALANCE_IN_PROGRESS
    assert ctx.sync(m1, gen, {m1: b"x"}).result(timeout=0).error is Errors.REBALANCE_IN_PROGRESS
    assert ctx.state() == "PreparingRebalance"


# ----------------------------------------------------------------------------------------------
# SyncGroup in CompletingRebalance and Stable (Kafka's classicGroupSyncToClassicGroup)
# ----------------------------------------------------------------------------------------------
def test_followers_parked_until_the_leader_syncs():
    """testSyncGroupLeaderAfterFollower: followers wait; the leader's assignment reaches everyone."""
    ctx = Ctx()
    gen, (m1, m2, m3) = completing_group(ctx, n=3)
    s2, s3 = ctx.sync(m2, gen), ctx.sync(m3, gen)
    assert not s2.done() and not s3.done()
    lead = ctx.sync(m1, gen, {m1: b"one", m2: b"two", m3: b"three"}).result(timeout=0)
    assert (lead.error, lead.assignment) == (Errors.NONE, b"one")
    assert (lead.protocol_type, lead.protocol_name) == ("consumer", "range")
    assert s2.result(timeout=0) == lead.__class__(Errors.NONE, b"two", "consumer", "range")
    assert s3.result(timeout=0).assignment == b"three"
    assert ctx.state() == "Stable"


def test_follower_syncing_after_the_leader_is_answered_at_once():
    """testSyncGroupFollowerAfterLeader."""
    ctx = Ctx()
    gen, (m1, m2) = completing_group(ctx)
    assert ctx.sync(m1, gen, {m1: b"one", m2: b"two"}).result(timeout=0).error is Errors.NONE
    r = ctx.sync(m2, gen).result(timeout=0)
    assert (r.error, r.assignment) == (Errors.NONE, b"two")


def test_group_metadata_is_in_the_log_before_anyone_is_answered():
    """classicGroupSyncToClassicGroup: the assignment is persisted (GroupMetadata record) before any parked
    sync is answered."""
    ctx = Ctx()
    gen, (m1, m2) = completing_group(ctx)
    seen = {}
    s2 = ctx.sync(m2, gen)
    s2.add_done_callback(lambda f: seen.setdefault("follower", group_values(ctx)))
    lead = ctx.sync(m1, gen, {m1: b"one", m2: b"two"})
    lead.add_done_callback(lambda f: seen.setdefault("leader", group_values(ctx)))
    for who in ("follower", "leader"):
        last = seen[who][-1]
        assert (last.generation, last.leader, last.protocol) == (gen, m1, "range")
        assert [(m.member_id, m.assignment) for m in last.members] == [(m1, b"one"), (m2, b"two")]
    ctx.assert_replay_matches()


def test_members_missing_from_the_leaders_assignment_get_empty_bytes():
    """testSyncGroupEmptyAssignment: missing members get b"" (record and response)."""
    ctx = Ctx()
    gen, (m1, m2) = completing_group(ctx)
    s2 = ctx.sync(m2, gen)
    ctx.sync(m1, gen, {m1: b"one"}).result(timeout=0)
    r = s2.result(timeout=0)
    assert (r.error, r.assignment) == (Errors.NONE, b"")
    assert [(m.member_id, m.assignment) for m in group_values(ctx)[-1].members] == [(m1, b"one"), (m2, b"")]
    ctx.assert_replay_matches()


def test_assignment_for_unknown_member_ids_is_ignored():
    """classicGroupSyncToClassicGroup: only current members are persisted; the leader's extra entries are
    dropped."""
    ctx = Ctx()
    gen, (m1, m2) = completing_group(ctx)
    ctx.sync(m1, gen, {m1: b"one", m2: b"two", "ghost": b"boo"}).result(timeout=0)
    assert [m.member_id for m in group_values(ctx)[-1].members] == [m1, m2]


def test_sync_in_stable_returns_the_stored_assignment():
    """classicGroupSyncToClassicGroup in Stable: the stored assignment, at once, nothing written."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2)
    records = ctx.records()
    for m in (m1, m2):
        r = ctx.sync(m, gen).result(timeout=0)
        assert (r.error, r.assignment, r.protocol_name) == (Errors.NONE, m.encode(), "range")
    # Only the leader's first SyncGroup writes; a repeated leader sync in Stable writes nothing.
    assert ctx.sync(m1, gen, {m1: b"new"}).result(timeout=0).assignment == m1.encode()
    assert ctx.records() == records


def test_sync_in_stable_does_not_reset_the_session_timer():
    """New coordinator (classicGroupSyncToClassicGroup, Stable branch): answering from the stored
    assignment leaves the session timer alone (the old coordinator re-armed it); only heartbeats,
    commits and the propagation of a parked sync do."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2)  # session timers armed at t=1
    ctx.clock.advance(9_000)
    assert ctx.sync(m2, gen).result(timeout=0).error is Errors.NONE
    assert ctx.heartbeat(m1, gen).error is Errors.NONE
    ctx.clock.advance(999)
    assert members_of(ctx) == [m1, m2]
    ctx.clock.advance(1)
    assert members_of(ctx) == [m1]


def test_rejoin_during_completing_rebalance_cancels_parked_syncs():
    """testLeaderFailureInSyncGroup-like: a new rebalance answers every parked sync REBALANCE_IN_PROGRESS
    with an empty assignment, and the leader's late sync is then rejected."""
    ctx = Ctx()
    gen, (m1, m2, m3) = completing_group(ctx, n=3)
    s2 = ctx.sync(m2, gen)
    ctx.join(member_id=m3, protocols=(("range", b"other"),))
    r = s2.result(timeout=0)
    assert (r.error, r.assignment) == (Errors.REBALANCE_IN_PROGRESS, b"")
    assert ctx.sync(m1, gen, {m1: b"x"}).result(timeout=0).error is Errors.REBALANCE_IN_PROGRESS
    assert not any(v.generation == gen for v in group_values(ctx))


# ----------------------------------------------------------------------------------------------
# Heartbeat errors per state (Kafka's GroupMetadataManager.classicGroupHeartbeat)
# ----------------------------------------------------------------------------------------------
def test_heartbeat_unknown_group():
    """testHeartbeatUnknownGroup."""
    ctx = Ctx()
    assert ctx.heartbeat("m", 1).error is Errors.UNKNOWN_MEMBER_ID
    assert ctx.state() is None


def test_heartbeat_unknown_member_of_existing_group():
    """testHeartbeatUnknownMemberExistingGroup."""
    ctx = Ctx()
    gen, _, _ = ctx.stable_group(1)
    assert ctx.heartbeat("other", gen).error is Errors.UNKNOWN_MEMBER_ID


def test_heartbeat_empty_group():
    """testHeartbeatEmptyGroup: members kept by the forced state, so only the state decides."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.coord.force_group_state_for_testing(GROUP, "Empty")
    assert ctx.heartbeat(m1, gen).error is Errors.UNKNOWN_MEMBER_ID


def test_heartbeat_dead_group():
    """testHeartbeatDeadGroup."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.coord.force_group_state_for_testing(GROUP, "Dead")
    assert ctx.heartbeat(m1, gen).error is Errors.COORDINATOR_NOT_AVAILABLE
    assert ctx.heartbeat("unknown", gen).error is Errors.COORDINATOR_NOT_AVAILABLE


def test_heartbeat_preparing_rebalance():
    """testHeartbeatDuringPreparingRebalance / testHeartbeatDuringRebalanceCausesRebalanceInProgress."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2)
    ctx.join(member_id=m1)
    assert ctx.heartbeat(m2, gen).error is Errors.REBALANCE_IN_PROGRESS


def test_heartbeat_completing_rebalance_and_stable():
    """testHeartbeatDuringCompletingRebalance / testValidHeartbeat."""
    ctx = Ctx()
    gen, (m1, m2) = completing_group(ctx)
    assert ctx.heartbeat(m2, gen).error is Errors.NONE
    ctx.sync(m1, gen).result(timeout=0)
    assert ctx.state() == "Stable"
    assert ctx.heartbeat(m2, gen).error is Errors.NONE


def test_heartbeat_illegal_generation():
    """testHeartbeatIllegalGeneration."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    assert ctx.heartbeat(m1, gen + 1).error is Errors.ILLEGAL_GENERATION
    assert ctx.heartbeat(m1, gen - 1).error is Errors.ILLEGAL_GENERATION


def test_heartbeat_fenced_static_member():
    """testStaticMemberHeartbeatLeaderWithInvalidMemberId."""
    ctx = Ctx()
    gen, ids, _ = stable_static_group(ctx, ["a", "b"])
    assert ctx.heartbeat(ids["b"], gen, group_instance_id="a").error is Errors.FENCED_INSTANCE_ID
    assert ctx.heartbeat(ids["a"], gen, group_instance_id="a").error is Errors.NONE
    assert ctx.heartbeat(ids["a"], gen, group_instance_id="zzz").error is Errors.UNKNOWN_MEMBER_ID


def test_heartbeat_with_wrong_generation_does_not_keep_a_member_alive():
    """classicGroupHeartbeat: a rejected heartbeat (ILLEGAL_GENERATION) does not reset the session timer."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.clock.advance(9_000)
    assert ctx.heartbeat(m1, gen + 1).error is Errors.ILLEGAL_GENERATION
    ctx.clock.advance(1_000)
    assert members_of(ctx) == []


# ----------------------------------------------------------------------------------------------
# LeaveGroup (Kafka's GroupMetadataManager.classicGroupLeave)
# ----------------------------------------------------------------------------------------------
def test_leave_unknown_group():
    """testLeaveGroupUnknownGroup / testStaticMembersLeaveUnknownGroup: top level NONE, every member
    UNKNOWN_MEMBER_ID; nothing is created."""
    ctx = Ctx()
    r = ctx.leave([("m1", None), ("", "inst"), ("m2", "inst2")])
    assert r.error is Errors.NONE
    assert r.members == [
        ("m1", None, Errors.UNKNOWN_MEMBER_ID),
        ("", "inst", Errors.UNKNOWN_MEMBER_ID),
        ("m2", "inst2", Errors.UNKNOWN_MEMBER_ID),
    ]
    assert ctx.state() is None
    assert ctx.records() == []


def test_leave_dead_group():
    """testLeaveDeadGroup."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.coord.force_group_state_for_testing(GROUP, "Dead")
    r = ctx.leave([(m1, None)])
    assert (r.error, r.members) == (Errors.COORDINATOR_NOT_AVAILABLE, [])
    assert members_of(ctx) == [m1]


def test_leave_unknown_member_of_existing_group():
    """testLeaveGroupUnknownMemberIdExistingGroup: nothing changes."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    records = ctx.records()
    r = ctx.leave([("other", None)])
    assert (r.error, r.members) == (Errors.NONE, [("other", None, Errors.UNKNOWN_MEMBER_ID)])
    assert ctx.state() == "Stable"
    assert ctx.records() == records


def test_valid_leave_triggers_a_rebalance():
    """testValidLeaveGroup."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2)
    r = ctx.leave([(m2, None)])
    assert r.members == [(m2, None, Errors.NONE)]
    assert ctx.state() == "PreparingRebalance"
    assert members_of(ctx) == [m1]
    assert ctx.join(member_id=m1).result(timeout=0).generation_id == gen + 1


def test_leave_answers_the_leavers_parked_join():
    """removeCurrentMemberFromClassicGroup: a member leaving while parked in JoinGroup gets
    UNKNOWN_MEMBER_ID there, and the remaining members' join completes."""
    ctx = Ctx()
    gen, (m1, m2, m3), _ = ctx.stable_group(3)
    f1, f2 = ctx.join(member_id=m1), ctx.join(member_id=m2)
    ctx.leave([(m2, None)])
    assert (f2.result(timeout=0).error, f2.result(timeout=0).member_id) == (Errors.UNKNOWN_MEMBER_ID, "")
    assert not f1.done()  # m3 has not rejoined
    ctx.leave([(m3, None)])
    r = f1.result(timeout=0)
    assert (r.error, r.generation_id, r.members) == (Errors.NONE, gen + 1, [(m1, None, b"meta")])


def test_batch_leave_of_static_members():
    """testStaticMembersValidBatchLeaveGroup: by member id + instance id and by instance id alone
    (admin removal, KIP-345)."""
    ctx = Ctx()
    gen, ids, _ = stable_static_group(ctx, ["a", "b", "c"])
    r = ctx.leave([(ids["a"], "a"), ("", "b")])
    assert (r.error, r.members) == (Errors.NONE, [(ids["a"], "a", Errors.NONE), ("", "b", Errors.NONE)])
    assert members_of(ctx) == [ids["c"]]
    group = ctx.coord.group_for_testing(GROUP)
    assert group.static_member_id("a") is None and group.static_member_id("b") is None
    assert group.leader_id == ids["c"]
    assert ctx.state() == "PreparingRebalance"


def test_leave_with_fenced_instance_id():
    """testLeaveGroupWithFencedInstanceId / testStaticMembersFencedInstanceBatchLeaveGroup: only the
    valid entries of a batch take effect."""
    ctx = Ctx()
    gen, ids, _ = stable_static_group(ctx, ["a", "b"])
    r = ctx.leave([("some-other-id", "a"), (ids["b"], "b")])
    assert r.members == [("some-other-id", "a", Errors.FENCED_INSTANCE_ID), (ids["b"], "b", Errors.NONE)]
    assert members_of(ctx) == [ids["a"]]


def test_leave_with_unknown_instance_id():
    """testLeaveGroupStaticMemberWithUnknownMemberId / testStaticMembersUnknownInstanceBatchLeaveGroup."""
    ctx = Ctx()
    gen, ids, _ = stable_static_group(ctx, ["a"])
    r = ctx.leave([("", "unknown-instance"), (ids["a"], "unknown-instance")])
    assert r.members == [
        ("", "unknown-instance", Errors.UNKNOWN_MEMBER_ID),
        (ids["a"], "unknown-instance", Errors.UNKNOWN_MEMBER_ID),
    ]
    assert ctx.state() == "Stable"


def test_pending_member_leaves():
    """testPendingMembersLeaveGroup / testPendingMemberBatchLeaveGroup: NONE, the id is forgotten."""
    ctx = Ctx()
    p1 = ctx.join().result(timeout=0).member_id
    p2 = ctx.join().result(timeout=0).member_id
    r = ctx.leave([(p1, None), (p2, None)])
    assert r.members == [(p1, None, Errors.NONE), (p2, None, Errors.NONE)]
    assert ctx.coord.group_for_testing(GROUP).pending_members == set()
    assert ctx.state() == "Empty"
    assert ctx.join(member_id=p1).result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID


def test_pending_member_leaving_unblocks_the_join():
    """testJoinedMemberPendingMemberBatchLeaveGroup: a pending member blocks join completion until it
    leaves; the batch may mix joined, pending and unknown members."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2)
    pending = ctx.join().result(timeout=0).member_id
    f1 = ctx.join(member_id=m1)
    f2 = ctx.join(member_id=m2)
    assert not f1.done()
    r = ctx.leave([(pending, None), ("unknown", None)])
    assert r.members == [(pending, None, Errors.NONE), ("unknown", None, Errors.UNKNOWN_MEMBER_ID)]
    assert f1.result(timeout=0).generation_id == f2.result(timeout=0).generation_id == gen + 1


def test_leave_of_everyone_writes_an_empty_group():
    """testValidLeaveGroup (batch) + PreparingRebalance → Empty: everybody leaves, the group is Empty and
    persisted so."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2)
    r = ctx.leave([(m1, None), (m2, None)])
    assert [e for _, _, e in r.members] == [Errors.NONE, Errors.NONE]
    assert ctx.state() == "Empty"
    key, value = ctx.records()[-1]
    assert key == GroupMetadataKey(GROUP)
    assert (value.generation, value.members, value.leader) == (gen + 1, (), None)
    ctx.assert_replay_matches()


def test_pending_member_leaving_a_stable_group_starts_a_rebalance():
    """classicGroupLeaveToClassicGroup counts a removed pending member as a valid leave, and any valid
    leave of a Stable group goes through maybePrepareRebalanceOrCompleteJoin."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    pending = ctx.join().result(timeout=0).member_id
    assert ctx.state() == "Stable"
    assert ctx.leave([(pending, None)]).members == [(pending, None, Errors.NONE)]
    assert ctx.state() == "PreparingRebalance"
    assert ctx.join(member_id=m1).result(timeout=0).generation_id == gen + 1


def test_leader_failure_in_sync_group():
    """testLeaderFailureInSyncGroup: the leader's session expires before it syncs; the parked followers
    get REBALANCE_IN_PROGRESS and the group rebalances without it."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=5_000, rebalance_timeout_ms=60_000)
    gen, (m1, m2, m3) = completing_group(ctx, n=3, **kw)
    s2, s3 = ctx.sync(m2, gen), ctx.sync(m3, gen)
    ctx.clock.advance(4_999)
    assert not s2.done()
    ctx.clock.advance(1)
    for s in (s2, s3):
        assert (s.result(timeout=0).error, s.result(timeout=0).assignment) == (Errors.REBALANCE_IN_PROGRESS, b"")
    assert ctx.state() == "PreparingRebalance"
    assert members_of(ctx) == [m2, m3]
    f2, f3 = ctx.join(member_id=m2, **kw), ctx.join(member_id=m3, **kw)
    r2 = f2.result(timeout=0)
    assert (r2.generation_id, r2.leader) == (gen + 1, m2)
    assert f3.result(timeout=0).generation_id == gen + 1
