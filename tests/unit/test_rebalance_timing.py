"""Join completion, the initial rebalance delay (KIP-134), DelayedSync (KAFKA-12890) and liveness, as
Kafka's GroupMetadataManager (completeClassicGroupJoin, tryCompleteInitialRebalanceElseSchedule,
expirePendingSync, expireClassicGroupMemberHeartbeat) and ClassicGroup (selectProtocol,
maybeElectNewJoinedLeader) do them, after Kafka's GroupMetadataManagerTest / GroupCoordinatorTest. Every
timer is driven by the ManualClock: ``advance(ms)`` fires timers whose deadline is ``<= now``."""

from __future__ import annotations

import pytest
from raygroups.coordinator.records import GroupMetadataKey, GroupMetadataValue

from raygroups import Errors
from tests.unit.helpers import GROUP, Ctx, complete_initial_join, group_values, replay_matches_after_test


@pytest.fixture(autouse=True)
def _replay_matches_after_each_test(monkeypatch):
    """After every scenario, replaying the log gives the live durable state."""
    yield from replay_matches_after_test(monkeypatch)


T0 = ("foo", 0)
LONG = dict(session_timeout_ms=60_000, rebalance_timeout_ms=10_000)


def members_of(ctx, group_id=GROUP):
    group = ctx.coord.group_for_testing(group_id)
    return [] if group is None else list(group.members)


# ----------------------------------------------------------------------------------------------
# Join completion (Kafka's GroupMetadataManager.completeClassicGroupJoin)
# ----------------------------------------------------------------------------------------------
def test_join_completes_as_soon_as_all_known_members_rejoined():
    """testGenerationIdIncrementsOnRebalance: no timer needed once every member rejoined."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2)
    f1 = ctx.join(member_id=m1)
    assert not f1.done()
    f2 = ctx.join(member_id=m2)
    assert f1.done() and f2.done()
    assert f1.result(timeout=0).generation_id == f2.result(timeout=0).generation_id == gen + 1
    assert ctx.state() == "CompletingRebalance"


def test_join_completes_at_the_largest_rebalance_timeout_and_removes_dynamic_laggards():
    """testCompleteJoinRemoveNotYetRejoinedDynamicMembers / testSecondMemberPartiallyJoinAndTimeout: the
    DelayedJoin lasts max(rebalance timeout) over the members (20 s here, not the rejoiner's 10 s)."""
    ctx = Ctx()
    f1 = ctx.join_new_dynamic(session_timeout_ms=60_000, rebalance_timeout_ms=10_000)
    f2 = ctx.join_new_dynamic(session_timeout_ms=60_000, rebalance_timeout_ms=20_000)
    r1, r2 = complete_initial_join(ctx, [f1, f2])
    m1, m2 = r1.member_id, r2.member_id
    ctx.sync(m2, 1)
    ctx.sync(m1, 1).result(timeout=0)
    assert ctx.state() == "Stable"
    rejoin = ctx.join(member_id=m1, session_timeout_ms=60_000, rebalance_timeout_ms=10_000)
    ctx.clock.advance(19_999)
    assert not rejoin.done()
    assert members_of(ctx) == [m1, m2]
    ctx.clock.advance(1)
    r = rejoin.result(timeout=0)
    assert (r.error, r.generation_id, r.leader, r.members) == (Errors.NONE, 2, m1, [(m1, None, b"meta")])
    assert members_of(ctx) == [m1]
    assert ctx.heartbeat(m2, 1).error is Errors.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_includes_the_rejoining_members_new_timeout():
    """ClassicGroup.rebalanceTimeoutMs: the group rebalance timeout is the max over members *after* the
    rejoin updated it."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2, **LONG)
    rejoin = ctx.join(member_id=m1, session_timeout_ms=60_000, rebalance_timeout_ms=30_000)
    ctx.clock.advance(29_999)
    assert not rejoin.done()
    ctx.clock.advance(1)
    assert rejoin.result(timeout=0).generation_id == gen + 1
    assert members_of(ctx) == [m1]


def test_leader_is_re_elected_when_it_did_not_rejoin():
    """ClassicGroup.maybeElectNewJoinedLeader: the follower that rejoined becomes the leader and alone gets
    the member list."""
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2, **LONG)
    assert leader == m1
    f2 = ctx.join(member_id=m2, protocols=(("range", b"v2"),), **LONG)
    ctx.clock.advance(10_000)
    r = f2.result(timeout=0)
    assert (r.error, r.generation_id, r.leader, r.members) == (Errors.NONE, gen + 1, m2, [(m2, None, b"v2")])
    assert ctx.coord.group_for_testing(GROUP).leader_id == m2


def test_protocol_vote_picks_the_most_voted_common_protocol():
    """ClassicGroup.selectProtocol: each member votes for its first protocol supported by all; non-common
    protocols are not candidates. The leader's member list carries each member's metadata for the winner."""
    ctx = Ctx()
    f1 = ctx.join_new_dynamic(protocols=(("range", b"r1"), ("roundrobin", b"rr1")))
    f2 = ctx.join_new_dynamic(protocols=(("roundrobin", b"rr2"), ("range", b"r2")))
    f3 = ctx.join_new_dynamic(protocols=(("sticky", b"s3"), ("roundrobin", b"rr3"), ("range", b"r3")))
    r1, r2, r3 = complete_initial_join(ctx, [f1, f2, f3])
    assert {r.protocol_name for r in (r1, r2, r3)} == {"roundrobin"}
    assert r1.members == [(r1.member_id, None, b"rr1"), (r2.member_id, None, b"rr2"), (r3.member_id, None, b"rr3")]
    assert r2.members == [] and r3.members == []


def test_protocol_vote_ignores_a_preference_not_shared_by_everyone():
    """ClassicGroup.selectProtocol: a protocol not supported by every member is not a candidate."""
    ctx = Ctx()
    f1 = ctx.join_new_dynamic(protocols=(("sticky", b""), ("range", b"")))
    f2 = ctx.join_new_dynamic(protocols=(("sticky", b""), ("range", b"")))
    f3 = ctx.join_new_dynamic(protocols=(("range", b""),))
    responses = complete_initial_join(ctx, [f1, f2, f3])
    assert {r.protocol_name for r in responses} == {"range"}


def test_only_the_leader_gets_the_member_list():
    """completeClassicGroupJoin: only the leader's JoinGroup response carries the members (with instance
    ids)."""
    ctx = Ctx()
    fs = [ctx.join_new_dynamic(), ctx.join(group_instance_id="static-b")]
    r1, r2 = complete_initial_join(ctx, fs)
    assert r1.leader == r2.leader == r1.member_id
    assert r1.members == [(r1.member_id, None, b"meta"), (r2.member_id, "static-b", b"meta")]
    assert r2.members == []
    assert (r1.skip_assignment, r2.skip_assignment) == (False, False)


def test_last_member_leaving_empties_the_group_and_persists_it():
    """testCompleteJoinPhaseInEmptyStateSkipsRebalance / PreparingRebalance → Empty: join completion
    with zero members bumps the generation and writes a GroupMetadata without members or protocol."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.clock.advance(500)
    assert ctx.leave([(m1, None)]).members == [(m1, None, Errors.NONE)]
    assert ctx.state() == "Empty"
    assert ctx.coord.group_for_testing(GROUP).generation_id == gen + 1
    assert ctx.records()[-1] == (GroupMetadataKey(GROUP), GroupMetadataValue("consumer", gen + 1, None, None, 501, ()))
    ctx.assert_replay_matches()


def test_last_member_expiring_empties_the_group_and_persists_it():
    """expireClassicGroupMemberHeartbeat + completeClassicGroupJoin: the last member's session expiry
    completes a join with no member (Empty, persisted)."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.clock.advance(10_000)
    assert ctx.state() == "Empty"
    value = group_values(ctx)[-1]
    assert (value.generation, value.protocol, value.leader, value.members) == (gen + 1, None, None, ())
    ctx.assert_replay_matches()


# ----------------------------------------------------------------------------------------------
# DelayedSync (Kafka's GroupMetadataManager.schedulePendingSync / expirePendingSync, KAFKA-12890)
# ----------------------------------------------------------------------------------------------
def _completing_group(ctx, n=3, **kw):
    futures = [ctx.join_new_dynamic(**kw) for _ in range(n)]
    responses = complete_initial_join(ctx, futures)
    assert ctx.state() == "CompletingRebalance"
    return responses[0].generation_id, [r.member_id for r in responses]


def test_rebalance_times_out_when_the_leader_never_syncs():
    """testRebalanceTimesOutWhenSyncRequestIsNotReceivedFromLeaders: at the rebalance timeout after the
    join phase the leader is removed, the followers' parked syncs get REBALANCE_IN_PROGRESS."""
    ctx = Ctx()
    gen, (m1, m2, m3) = _completing_group(ctx, **LONG)
    s2, s3 = ctx.sync(m2, gen), ctx.sync(m3, gen)
    ctx.clock.advance(9_999)
    assert not s2.done() and not s3.done()
    ctx.clock.advance(1)
    assert s2.result(timeout=0).error is Errors.REBALANCE_IN_PROGRESS
    assert s3.result(timeout=0).error is Errors.REBALANCE_IN_PROGRESS
    assert ctx.state() == "PreparingRebalance"
    assert members_of(ctx) == [m2, m3]
    f2, f3 = ctx.join(member_id=m2, **LONG), ctx.join(member_id=m3, **LONG)
    r2, r3 = f2.result(timeout=0), f3.result(timeout=0)
    assert (r2.generation_id, r2.leader) == (gen + 1, m2)
    assert r3.generation_id == gen + 1


def test_rebalance_times_out_when_a_follower_never_syncs():
    """testRebalanceTimesOutWhenSyncRequestIsNotReceivedFromFollowers: the group is already Stable when
    the DelayedSync fires; the silent follower is removed and a rebalance starts."""
    ctx = Ctx()
    gen, (m1, m2, m3) = _completing_group(ctx, **LONG)
    s2 = ctx.sync(m2, gen)
    assert ctx.sync(m1, gen, {m1: b"1", m2: b"2", m3: b"3"}).result(timeout=0).error is Errors.NONE
    assert s2.result(timeout=0).assignment == b"2"
    assert ctx.state() == "Stable"
    ctx.clock.advance(10_000)
    assert ctx.state() == "PreparingRebalance"
    assert members_of(ctx) == [m1, m2]
    assert ctx.heartbeat(m3, gen).error is Errors.UNKNOWN_MEMBER_ID
    assert ctx.heartbeat(m1, gen).error is Errors.REBALANCE_IN_PROGRESS


def test_rebalance_times_out_when_nobody_syncs():
    """testRebalanceTimesOutWhenSyncRequestIsNotReceived: all members removed, the rebalance completes
    with no member, the group is Empty and persisted so."""
    ctx = Ctx()
    gen, members = _completing_group(ctx, n=2, **LONG)
    ctx.clock.advance(10_000)
    assert ctx.state() == "Empty"
    assert members_of(ctx) == []
    assert group_values(ctx)[-1].generation == gen + 1
    ctx.assert_replay_matches()


def test_rebalance_does_not_time_out_when_all_syncs_are_received():
    """testRebalanceDoesNotTimeOutWhenAllSyncAreReceived."""
    ctx = Ctx()
    gen, (m1, m2, m3) = _completing_group(ctx, **LONG)
    ctx.sync(m2, gen)
    ctx.sync(m3, gen)
    ctx.sync(m1, gen).result(timeout=0)
    ctx.clock.advance(10_000)
    assert ctx.state() == "Stable"
    assert members_of(ctx) == [m1, m2, m3]


# ----------------------------------------------------------------------------------------------
# group.initial.rebalance.delay.ms (KIP-134; tryCompleteInitialRebalanceElseSchedule), D = 3000
# ----------------------------------------------------------------------------------------------
def _delay_ctx():
    return Ctx(config={"group.initial.rebalance.delay.ms": 3_000})


def test_initial_delay_row1_single_member_waits_the_full_delay():
    """testDelayInitialRebalanceByGroupInitialRebalanceDelayOnEmptyGroup: R=500 < D; the
    delayed join never completes early although everybody has joined; it completes at D (remaining 0)."""
    ctx = _delay_ctx()
    f = ctx.join_new_dynamic(rebalance_timeout_ms=500)
    ctx.clock.advance(2_999)
    assert not f.done()
    assert ctx.state() == "PreparingRebalance"
    ctx.clock.advance(1)
    assert f.result(timeout=0).generation_id == 1


def test_initial_delay_row2_new_member_extends_by_another_delay():
    """testResetRebalanceDelayWhenNewMemberJoinsGroupDuringInitialRebalance: R=9000, m2 at
    2999 → at 3000 the delay is re-armed (3000, remaining 3000) → completes at 6000."""
    ctx = _delay_ctx()
    f1 = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)
    ctx.clock.advance(2_999)
    f2 = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)
    ctx.clock.advance(1)
    assert not f1.done() and not f2.done()
    ctx.clock.advance(2_999)
    assert not f1.done()
    ctx.clock.advance(1)
    assert ctx.clock.now_ms() == 6_000
    assert f1.result(timeout=0).generation_id == f2.result(timeout=0).generation_id == 1


def test_initial_delay_row3_no_remaining_budget_ignores_a_late_member():
    """No remaining budget: R=6000, m1 and m2 at 0, m3 at 3001: the re-armed delay has remaining 0, so the
    join completes at 6000 even though m3 was added after the re-arm (m3 is part of the generation)."""
    ctx = _delay_ctx()
    f1 = ctx.join_new_dynamic(rebalance_timeout_ms=6_000)
    f2 = ctx.join_new_dynamic(rebalance_timeout_ms=6_000)
    ctx.clock.advance(3_000)
    assert not f1.done()
    ctx.clock.advance(1)
    f3 = ctx.join_new_dynamic(rebalance_timeout_ms=6_000)
    ctx.clock.advance(2_998)
    assert not f1.done()
    ctx.clock.advance(1)
    assert ctx.clock.now_ms() == 6_000
    results = [f.result(timeout=0) for f in (f1, f2, f3)]
    assert all(r.error is Errors.NONE and r.generation_id == 1 for r in results)
    assert len(results[0].members) == 3


def test_initial_delay_rearm_counts_from_when_the_timer_fired():
    """Mock-clock variant (testDelayRebalanceUptoRebalanceTimeout style): the clock jumps to 3001,
    the timer fires there and re-arms from 3001, so completion is observed at 6001, not 6000."""
    ctx = _delay_ctx()
    f1 = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)
    f2 = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)
    ctx.clock.advance(3_001)
    assert not f1.done()
    ctx.clock.advance(2_999)
    assert ctx.clock.now_ms() == 6_000
    assert not f1.done()
    ctx.clock.advance(1)
    assert f1.result(timeout=0).generation_id == f2.result(timeout=0).generation_id == 1


def test_initial_delay_never_exceeds_the_rebalance_timeout():
    """testDelayRebalanceUptoRebalanceTimeout: members keep arriving, the total wait is bounded by
    max(R, D) = 9000."""
    ctx = _delay_ctx()
    f1 = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)
    ctx.clock.advance(1_000)
    f2 = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)
    ctx.clock.advance(2_000)  # fires at 3000: re-armed for 3000 (remaining 3000)
    ctx.clock.advance(1_000)
    f3 = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)
    ctx.clock.advance(2_000)  # fires at 6000: re-armed for 3000 (remaining 0)
    ctx.clock.advance(1_000)
    f4 = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)  # too late to extend anything
    ctx.clock.advance(1_999)
    assert not f1.done()
    ctx.clock.advance(1)
    assert ctx.clock.now_ms() == 9_000
    assert all(f.result(timeout=0).generation_id == 1 for f in (f1, f2, f3, f4))


def test_initial_delay_applies_to_any_rebalance_starting_from_empty():
    """Kafka's new coordinator (addMemberThenRebalanceOrCompleteJoin): newMemberAdded extends every
    rebalance that started from Empty, not only generation 0's as in the Scala coordinator, so a group that
    emptied at generation 2 gets the same delay and extension."""
    ctx = Ctx(config={"group.initial.rebalance.delay.ms": 3_000})
    f = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)
    ctx.clock.advance(3_000)
    m1 = f.result(timeout=0).member_id
    ctx.leave([(m1, None)])
    assert (ctx.state(), ctx.coord.group_for_testing(GROUP).generation_id) == ("Empty", 2)
    t0 = ctx.clock.now_ms()
    fa = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)
    ctx.clock.advance(2_999)
    fb = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)
    ctx.clock.advance(1)
    assert not fa.done()  # the old coordinator (generation != 0) would have completed here
    ctx.clock.advance(3_000)
    assert ctx.clock.now_ms() == t0 + 6_000
    assert fa.result(timeout=0).generation_id == fb.result(timeout=0).generation_id == 3


# ----------------------------------------------------------------------------------------------
# Liveness (Kafka's rescheduleClassicGroupMemberHeartbeat / expireClassicGroupMemberHeartbeat)
# ----------------------------------------------------------------------------------------------
def test_session_expiry_removes_the_member_and_rebalances():
    """testHeartbeatExpirationShouldRemoveMember / testSessionTimeoutExpiration."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2)  # session timers armed at t=1 (10 s)
    ctx.clock.advance(5_000)
    assert ctx.heartbeat(m1, gen).error is Errors.NONE
    ctx.clock.advance(4_999)
    assert members_of(ctx) == [m1, m2]
    ctx.clock.advance(1)
    assert members_of(ctx) == [m1]
    assert ctx.state() == "PreparingRebalance"
    assert ctx.heartbeat(m1, gen).error is Errors.REBALANCE_IN_PROGRESS
    assert ctx.heartbeat(m2, gen).error is Errors.UNKNOWN_MEMBER_ID
    r = ctx.join(member_id=m1).result(timeout=0)
    assert (r.generation_id, r.members) == (gen + 1, [(m1, None, b"meta")])


def test_heartbeats_keep_a_member_alive():
    """testClassicGroupMemberHeartbeatMaintainsSession."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    for _ in range(5):
        ctx.clock.advance(9_000)
        assert ctx.heartbeat(m1, gen).error is Errors.NONE
    assert ctx.state() == "Stable"
    assert members_of(ctx) == [m1]
    ctx.clock.advance(10_000)
    assert members_of(ctx) == []


def test_new_member_parked_in_join_expires_after_the_new_member_join_timeout():
    """testNewMemberJoinExpiration (KAFKA-7610): a new member parked in JoinGroup cannot heartbeat; it is
    dropped after 300 s (not its 10 s session timeout) with UNKNOWN_MEMBER_ID and member id ""."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1, session_timeout_ms=1_000_000, rebalance_timeout_ms=600_000)
    newcomer = ctx.join_new_dynamic(session_timeout_ms=10_000, rebalance_timeout_ms=600_000)
    assert ctx.state() == "PreparingRebalance"
    ctx.clock.advance(299_999)
    assert not newcomer.done()
    ctx.clock.advance(1)
    r = newcomer.result(timeout=0)
    assert (r.error, r.member_id) == (Errors.UNKNOWN_MEMBER_ID, "")
    assert members_of(ctx) == [m1]
    assert ctx.state() == "PreparingRebalance"
    rejoin = ctx.join(member_id=m1, session_timeout_ms=1_000_000, rebalance_timeout_ms=600_000)
    assert rejoin.result(timeout=0).generation_id == gen + 1


def test_old_member_parked_in_join_cannot_expire():
    """testClassicGroupMemberSessionTimeoutDuringRebalance (hasSatisfiedHeartbeat): 30 s parked in
    JoinGroup with a 10 s session timeout."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=10_000, rebalance_timeout_ms=60_000)
    gen, (m1, m2), _ = ctx.stable_group(2, **kw)
    f1 = ctx.join(member_id=m1, **kw)
    for _ in range(6):
        ctx.clock.advance(5_000)
        assert ctx.heartbeat(m2, gen).error is Errors.REBALANCE_IN_PROGRESS
    assert members_of(ctx) == [m1, m2]
    assert not f1.done()
    f2 = ctx.join(member_id=m2, **kw)
    assert f1.result(timeout=0).generation_id == f2.result(timeout=0).generation_id == gen + 1


def test_old_member_parked_in_sync_cannot_expire_and_gets_a_fresh_session_after():
    """ClassicGroupMember.hasSatisfiedHeartbeat + propagateAssignment: a follower parked in SyncGroup
    survives its session timeout; once the assignment is propagated its session timer is re-armed from
    then."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=10_000, rebalance_timeout_ms=60_000)
    gen, (m1, m2) = _completing_group(ctx, n=2, **kw)
    s2 = ctx.sync(m2, gen)
    for _ in range(6):
        ctx.clock.advance(5_000)
        assert ctx.heartbeat(m1, gen).error is Errors.NONE  # CompletingRebalance: NONE
    assert members_of(ctx) == [m1, m2]
    assert ctx.sync(m1, gen, {m2: b"two"}).result(timeout=0).error is Errors.NONE
    assert s2.result(timeout=0).assignment == b"two"
    ctx.clock.advance(9_999)
    assert ctx.heartbeat(m1, gen).error is Errors.NONE
    assert members_of(ctx) == [m1, m2]
    ctx.clock.advance(1)
    assert members_of(ctx) == [m1]


def test_commit_in_stable_resets_the_session_timer():
    """OffsetMetadataManager.commitOffset: an OffsetCommit from a member of a Stable group counts as a
    heartbeat."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.clock.advance(9_000)
    assert ctx.commit({T0: (1, "")}, generation_id=gen, member_id=m1).errors == {T0: Errors.NONE}
    ctx.clock.advance(9_000)
    assert members_of(ctx) == [m1]
    ctx.clock.advance(1_000)
    assert members_of(ctx) == []
    ctx.assert_replay_matches()


def test_commit_in_preparing_rebalance_resets_the_session_timer():
    """OffsetMetadataManager.commitOffset: commits for the previous generation are accepted while
    PreparingRebalance and reset the session timer of a member that has not rejoined yet."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=10_000, rebalance_timeout_ms=60_000)
    gen, (m1, m2), _ = ctx.stable_group(2, **kw)
    f2 = ctx.join(member_id=m2, protocols=(("range", b"v2"),), **kw)
    assert ctx.state() == "PreparingRebalance"
    ctx.clock.advance(9_000)
    assert ctx.commit({T0: (7, "")}, generation_id=gen, member_id=m1).errors == {T0: Errors.NONE}
    ctx.clock.advance(9_000)
    assert members_of(ctx) == [m1, m2]
    f1 = ctx.join(member_id=m1, **kw)
    assert f1.result(timeout=0).generation_id == f2.result(timeout=0).generation_id == gen + 1
    ctx.assert_replay_matches()


def test_commit_in_completing_rebalance_does_not_reset_the_session_timer():
    """Counter-check: CompletingRebalance answers REBALANCE_IN_PROGRESS and does not touch the timer."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=10_000, rebalance_timeout_ms=60_000)
    gen, (m1, m2) = _completing_group(ctx, n=2, **kw)
    ctx.sync(m2, gen)  # the follower is parked in sync (cannot expire); the leader m1 is not
    ctx.clock.advance(9_000)
    assert ctx.commit({T0: (7, "")}, generation_id=gen, member_id=m1).errors == {T0: Errors.REBALANCE_IN_PROGRESS}
    ctx.clock.advance(1_000)
    assert members_of(ctx) == [m2]


def test_leave_during_the_initial_rebalance_does_not_complete_it_early():
    """Kafka's new coordinator at the snapshot: LeaveGroup in PreparingRebalance calls maybeCompleteJoinPhase,
    which never completes an initial (delayed) rebalance; only its timer does (here R = D = 3000, so the
    first expiry completes it although m2's join had set newMemberAdded)."""
    ctx = _delay_ctx()
    f1 = ctx.join_new_dynamic(rebalance_timeout_ms=3_000)
    f2 = ctx.join_new_dynamic(rebalance_timeout_ms=3_000)
    ctx.clock.advance(1_000)
    m2 = list(ctx.coord.group_for_testing(GROUP).members)[1]
    assert ctx.leave([(m2, None)]).members == [(m2, None, Errors.NONE)]
    assert f2.result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID
    ctx.clock.advance(1_999)
    assert not f1.done()
    ctx.clock.advance(1)
    r = f1.result(timeout=0)
    assert (r.error, r.generation_id, len(r.members)) == (Errors.NONE, 1, 1)


def test_pending_member_expiry_completes_an_initial_rebalance_early():
    """removePendingMemberAndUpdateClassicGroup has no initial-rebalance guard: once the only other
    (pending) member expires and everybody else has joined, the join completes before the delay."""
    ctx = _delay_ctx()
    f1 = ctx.join_new_dynamic(rebalance_timeout_ms=9_000)
    pending = ctx.join(session_timeout_ms=100).result(timeout=0)
    assert pending.error is Errors.MEMBER_ID_REQUIRED
    ctx.clock.advance(99)
    assert not f1.done()
    ctx.clock.advance(1)
    r = f1.result(timeout=0)
    assert (r.error, r.generation_id) == (Errors.NONE, 1)
    assert ctx.clock.now_ms() == 100


def test_replacing_a_static_member_that_never_synced_still_rebalances_at_the_sync_timeout():
    """Kafka's new coordinator: replaceStaticMember re-keys the member but leaves the old id in the
    pending-sync set, so the DelayedSync still finds a member that "never synced" and starts a rebalance
    (removing the old id is a no-op; the new id and the others stay)."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=60_000, rebalance_timeout_ms=10_000)
    fa, fb = ctx.join(group_instance_id="a", **kw), ctx.join(group_instance_id="b", **kw)
    ra, rb = complete_initial_join(ctx, [fa, fb])
    assert ctx.sync(ra.member_id, 1, group_instance_id="a").result(timeout=0).error is Errors.NONE
    assert ctx.state() == "Stable"
    new_b = ctx.join(group_instance_id="b", **kw).result(timeout=0)
    assert (new_b.error, new_b.generation_id) == (Errors.NONE, 1)
    assert ctx.sync(new_b.member_id, 1, group_instance_id="b").result(timeout=0).error is Errors.NONE
    ctx.clock.advance(9_999)
    assert ctx.state() == "Stable"
    ctx.clock.advance(1)  # 10 s after the join phase completed (at t=1)
    assert ctx.state() == "PreparingRebalance"
    assert members_of(ctx) == [ra.member_id, new_b.member_id]


def test_rebalance_completes_before_a_static_member_rejoins():
    """testRebalanceCompletesBeforeMemberJoins, step by step with the same numbers: a static member that
    does not rejoin stays in the group (its heartbeats then get ILLEGAL_GENERATION) until its session
    times out, which starts the next rebalance."""
    ctx = Ctx()
    lead = ctx.join(group_instance_id="leader-instance-id", rebalance_timeout_ms=10_000, session_timeout_ms=5_000)
    first = complete_initial_join(ctx, [lead])[0]
    first_id = first.member_id
    assert (first.generation_id, ctx.state()) == (1, "CompletingRebalance")
    assert ctx.sync(first_id, 1).result(timeout=0).error is Errors.NONE
    assert ctx.state() == "Stable"
    second = ctx.join(require_known_member_id=False, rebalance_timeout_ms=10_000, session_timeout_ms=2_500)
    assert not second.done()
    assert ctx.state() == "PreparingRebalance"
    for _ in range(2):
        ctx.clock.advance(2_500)
        assert ctx.heartbeat(first_id, 1).error is Errors.REBALANCE_IN_PROGRESS
    ctx.clock.advance(8_000)
    r = second.result(timeout=0)
    assert (r.error, r.generation_id, r.leader) == (Errors.NONE, 2, r.member_id)
    assert members_of(ctx) == [first_id, r.member_id]
    assert ctx.state() == "CompletingRebalance"
    other_id = r.member_id
    assert ctx.sync(other_id, 2).result(timeout=0).error is Errors.NONE
    assert ctx.state() == "Stable"
    assert ctx.heartbeat(first_id, 1).error is Errors.ILLEGAL_GENERATION
    for expected in (Errors.NONE, Errors.NONE, Errors.REBALANCE_IN_PROGRESS):
        ctx.clock.advance(2_000)
        assert ctx.heartbeat(other_id, 2).error is expected
    assert members_of(ctx) == [other_id]
    assert ctx.state() == "PreparingRebalance"
    rejoin = ctx.join(member_id=other_id, rebalance_timeout_ms=10_000, session_timeout_ms=2_500).result(timeout=0)
    assert (rejoin.error, rejoin.generation_id) == (Errors.NONE, 3)
    assert ctx.state() == "CompletingRebalance"


def test_new_member_gets_the_session_timeout_once_its_join_completed():
    """testNewMemberFailureAfterJoinGroupCompletion: after the join phase the new member's 300 s join
    timeout is replaced by its 5 s session timeout."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=5_000, rebalance_timeout_ms=10_000)
    gen, (m1,), _ = ctx.stable_group(1, **kw)
    other = ctx.join(require_known_member_id=False, **kw)
    again = ctx.join(member_id=m1, **kw)
    assert other.result(timeout=0).error is Errors.NONE
    assert again.result(timeout=0).generation_id == gen + 1
    ctx.clock.advance(4_999)
    assert len(members_of(ctx)) == 2
    ctx.clock.advance(1)
    assert members_of(ctx) == []
    assert ctx.state() == "Empty"
    ctx.assert_replay_matches()


def test_pending_member_expiring_in_stable_changes_nothing():
    """testSecondMemberPartiallyJoinAndTimeout: a member that never completed the KIP-394 handshake
    expires from the pending set; the Stable group keeps its generation and member."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=5_000, rebalance_timeout_ms=10_000)
    lead = ctx.join(group_instance_id="leader-instance-id", **kw)
    first_id = complete_initial_join(ctx, [lead])[0].member_id
    ctx.sync(first_id, 1).result(timeout=0)
    records = ctx.records()
    pending = ctx.join(**kw).result(timeout=0)
    assert pending.error is Errors.MEMBER_ID_REQUIRED
    group = ctx.coord.group_for_testing(GROUP)
    assert (group.pending_members, ctx.state()) == ({pending.member_id}, "Stable")
    for _ in range(2):
        ctx.clock.advance(2_500)
        assert ctx.heartbeat(first_id, 1).error is Errors.NONE
    assert group.pending_members == set()
    assert (members_of(ctx), group.generation_id, ctx.state()) == ([first_id], 1, "Stable")
    assert ctx.records() == records


def test_new_member_expiring_during_a_long_initial_rebalance_empties_the_group():
    """testHeartbeatExpirationShouldRemoveMember: with a 10 min initial delay, the only (new) member times
    out after the 300 s new-member join timeout; the join completes with no member: Empty, generation 1,
    persisted."""
    ctx = Ctx(config={"group.initial.rebalance.delay.ms": 600_000})
    f = ctx.join(require_known_member_id=False)
    assert not f.done()
    ctx.clock.advance(299_999)
    assert not f.done()
    ctx.clock.advance(1)
    r = f.result(timeout=0)
    assert (r.error, r.member_id) == (Errors.UNKNOWN_MEMBER_ID, "")
    assert ctx.state() == "Empty"
    assert ctx.records()[-1] == (GroupMetadataKey(GROUP), GroupMetadataValue("consumer", 1, None, None, 300_000, ()))
    ctx.assert_replay_matches()
