"""JoinGroup scenarios (Kafka's GroupMetadataManager.classicGroupJoin, including static members of KIP-345,
the member id round trip of KIP-394 and ``group.max.size`` of KIP-389), after Kafka's
GroupMetadataManagerTest classic-group tests (names in each docstring). Member ids are deterministic:
``<client or instance id>-<n>``."""

from __future__ import annotations

import pytest
from raygroups.coordinator.records import GroupMetadataKey, GroupMetadataValue, MemberMetadata

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


T0 = ("foo", 0)
EMPTY_GROUP_RECORD = (GroupMetadataKey(GROUP), GroupMetadataValue("", 0, None, None, 0, ()))


def member_ids(ctx, group_id=GROUP):
    return list(ctx.coord.group_for_testing(group_id).members)


def generation(ctx, group_id=GROUP):
    return ctx.coord.group_for_testing(group_id).generation_id


# ----------------------------------------------------------------------------------------------
# Session timeout bounds, unknown member on unknown group (the first checks of Kafka's
# GroupCoordinator.handleJoinGroup: session timeout, then getOrMaybeCreateGroup)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("session_timeout_ms", [5_999, 30_001])
def test_session_timeout_out_of_bounds_is_invalid(session_timeout_ms):
    """testJoinGroupSessionTimeoutTooSmall / TooLarge: both bounds, nothing created or written."""
    ctx = Ctx(config={"group.min.session.timeout.ms": 6_000, "group.max.session.timeout.ms": 30_000})
    resp = ctx.join(session_timeout_ms=session_timeout_ms).result(timeout=0)
    assert resp.error is Errors.INVALID_SESSION_TIMEOUT
    assert resp.member_id == ""
    assert ctx.state() is None
    assert ctx.records() == []
    # The session timeout is checked before the group's existence: a known-looking member id on an
    # unknown group still gets INVALID_SESSION_TIMEOUT, with its id echoed.
    resp = ctx.join(member_id="m", session_timeout_ms=session_timeout_ms).result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.INVALID_SESSION_TIMEOUT, "m")


@pytest.mark.parametrize("session_timeout_ms", [6_000, 30_000])
def test_session_timeout_bounds_are_inclusive(session_timeout_ms):
    """The session timeout check: the bounds themselves are valid."""
    ctx = Ctx(config={"group.min.session.timeout.ms": 6_000, "group.max.session.timeout.ms": 30_000})
    resp = ctx.join(session_timeout_ms=session_timeout_ms).result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.MEMBER_ID_REQUIRED, "client-1")


def test_invalid_session_timeout_of_existing_member_changes_nothing():
    """The session timeout check for a known member (testJoinGroupSessionTimeoutTooSmall with a member id)."""
    ctx = Ctx(config={"group.min.session.timeout.ms": 6_000})
    gen, (m1,), _ = ctx.stable_group(1)
    records = ctx.records()
    resp = ctx.join(member_id=m1, session_timeout_ms=5_000).result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.INVALID_SESSION_TIMEOUT, m1)
    assert ctx.state() == "Stable"
    assert ctx.records() == records


@pytest.mark.parametrize("instance_id", [None, "inst"])
def test_unknown_member_id_on_unknown_group(instance_id):
    """testJoinGroupUnknownMemberNewGroup: nothing is created, nothing written."""
    ctx = Ctx()
    resp = ctx.join(member_id="member-id", group_instance_id=instance_id).result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.UNKNOWN_MEMBER_ID, "member-id")
    assert ctx.state() is None
    assert ctx.records() == []


def test_unknown_member_id_on_existing_group():
    """testJoinGroupUnknownConsumerExistingGroup."""
    ctx = Ctx()
    gen, _, _ = ctx.stable_group(1)
    records = ctx.records()
    resp = ctx.join(member_id="other-member").result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.UNKNOWN_MEMBER_ID, "other-member")
    assert ctx.state() == "Stable"
    assert generation(ctx) == gen
    assert ctx.records() == records


# ----------------------------------------------------------------------------------------------
# Protocol type / protocol support (Kafka's ClassicGroup.supportsProtocols)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("instance_id", [None, "inst"])
def test_empty_protocol_type_on_empty_group(instance_id):
    """testJoinGroupWithEmptyProtocolType."""
    ctx = Ctx()
    resp = ctx.join(protocol_type="", group_instance_id=instance_id).result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.INCONSISTENT_GROUP_PROTOCOL, "")
    assert ctx.state() is None
    assert ctx.records() == []


@pytest.mark.parametrize("instance_id", [None, "inst"])
def test_empty_protocol_list_on_empty_group(instance_id):
    """testJoinGroupWithEmptyGroupProtocol."""
    ctx = Ctx()
    resp = ctx.join(protocols=(), group_instance_id=instance_id).result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.INCONSISTENT_GROUP_PROTOCOL, "")
    assert ctx.state() is None
    assert ctx.records() == []


def test_protocol_type_mismatch():
    """testClassicGroupJoinInconsistentProtocolType: a new member and an existing one."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    resp = ctx.join(protocol_type="connect").result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.INCONSISTENT_GROUP_PROTOCOL, "")
    resp = ctx.join(member_id=m1, protocol_type="connect").result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.INCONSISTENT_GROUP_PROTOCOL, m1)
    assert ctx.state() == "Stable"
    assert ctx.coord.group_for_testing(GROUP).pending_members == set()


def test_no_protocol_common_to_all_members():
    """testJoinGroupInconsistentGroupProtocol: the second joiner supports none of the first one's
    protocols; it is rejected before it is even given a member id."""
    ctx = Ctx()
    first = ctx.join_new_dynamic(protocols=(("range", b""),))
    assert ctx.state() == "PreparingRebalance"
    resp = ctx.join(protocols=(("roundrobin", b""),)).result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.INCONSISTENT_GROUP_PROTOCOL, "")
    assert ctx.coord.group_for_testing(GROUP).pending_members == set()
    ctx.clock.advance(1)
    r = first.result(timeout=0)
    assert (r.error, r.generation_id, r.protocol_name) == (Errors.NONE, 1, "range")


def test_existing_member_rejoining_with_unsupported_protocols():
    """testJoinGroupSecondJoinInconsistentProtocol: with two members, a rejoin offering only a protocol
    the other member lacks is rejected and changes nothing."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2, protocols=(("range", b""), ("roundrobin", b"")))
    # m2 narrows to roundrobin: still common to both; then m1 offering only "sticky" is not.
    resp = ctx.join(member_id=m1, protocols=(("sticky", b""),)).result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.INCONSISTENT_GROUP_PROTOCOL, m1)
    assert ctx.state() == "Stable"
    assert ctx.coord.group_for_testing(GROUP).members[m1].protocols == (("range", b""), ("roundrobin", b""))


def test_join_response_carries_protocol_type_and_name():
    """testJoinGroupReturnsTheProtocolType / testJoinGroupProtocolTypeIsNotProvidedWhenAnErrorOccurs."""
    ctx = Ctx()
    ok = complete_initial_join(ctx, [ctx.join_new_dynamic()])[0]
    assert (ok.protocol_type, ok.protocol_name) == ("consumer", "range")
    err = ctx.join(member_id="nobody").result(timeout=0)
    assert (err.protocol_type, err.protocol_name) == (None, None)


# ----------------------------------------------------------------------------------------------
# KIP-394 pending members
# ----------------------------------------------------------------------------------------------
def test_first_join_of_dynamic_member_returns_member_id_required():
    """testJoinGroupUnknownMemberNewGroup (v4+): MEMBER_ID_REQUIRED with the generated id; the group
    is created Empty and persisted at once as an empty GroupMetadata (Kafka's new coordinator,
    GroupMetadataManager.classicGroupJoin; the Scala coordinator wrote nothing before the first rebalance)."""
    ctx = Ctx()
    resp = ctx.join().result(timeout=0)
    assert (resp.error, resp.member_id, resp.generation_id) == (Errors.MEMBER_ID_REQUIRED, "client-1", -1)
    assert ctx.state() == "Empty"
    group = ctx.coord.group_for_testing(GROUP)
    assert group.pending_members == {"client-1"}
    assert group.members == {}
    assert ctx.records() == [EMPTY_GROUP_RECORD]
    ctx.assert_replay_matches()
    second = ctx.join(member_id="client-1")
    assert not second.done()
    assert ctx.state() == "PreparingRebalance"
    ctx.clock.advance(1)
    r = second.result(timeout=0)
    assert (r.error, r.generation_id, r.member_id, r.leader) == (Errors.NONE, 1, "client-1", "client-1")
    assert r.members == [("client-1", None, b"meta")]
    assert group.pending_members == set()


def test_join_without_required_known_member_id_adds_member_at_once():
    """JoinGroup < v4: no MEMBER_ID_REQUIRED round trip."""
    ctx = Ctx()
    f = ctx.join(require_known_member_id=False)
    assert not f.done()
    assert ctx.coord.group_for_testing(GROUP).pending_members == set()
    r = complete_initial_join(ctx, [f])[0]
    assert (r.error, r.member_id, r.generation_id) == (Errors.NONE, "client-1", 1)


def test_pending_member_expires_after_its_session_timeout():
    """testHeartbeatExpirationShouldRemovePendingMember: the id is forgotten after the session timeout
    sent in the first JoinGroup; joining with it afterwards is UNKNOWN_MEMBER_ID."""
    ctx = Ctx()
    pending = ctx.join(session_timeout_ms=5_000).result(timeout=0).member_id
    ctx.clock.advance(4_999)
    assert ctx.coord.group_for_testing(GROUP).pending_members == {pending}
    ctx.clock.advance(1)
    assert ctx.coord.group_for_testing(GROUP).pending_members == set()
    resp = ctx.join(member_id=pending).result(timeout=0)
    assert (resp.error, resp.member_id) == (Errors.UNKNOWN_MEMBER_ID, pending)
    assert ctx.state() == "Empty"


def test_pending_member_joining_before_expiry_is_accepted():
    """KIP-394: the pending id is usable until its session timeout."""
    ctx = Ctx()
    pending = ctx.join(session_timeout_ms=5_000).result(timeout=0).member_id
    ctx.clock.advance(4_999)
    f = ctx.join(member_id=pending)
    ctx.clock.advance(1)
    assert f.result(timeout=0).error is Errors.NONE
    assert member_ids(ctx) == [pending]


def test_pending_member_blocks_join_completion_until_it_joins():
    """testJoinGroupCompletionWhenPendingMemberJoins."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    pending = ctx.join().result(timeout=0)
    assert pending.error is Errors.MEMBER_ID_REQUIRED
    assert ctx.state() == "Stable"  # a pending member does not change the group
    leader_join = ctx.join(member_id=m1)  # the leader rejoins: rebalance
    assert ctx.state() == "PreparingRebalance"
    assert not leader_join.done()  # m1 has rejoined but a pending member exists
    new_join = ctx.join(member_id=pending.member_id)
    assert leader_join.done() and new_join.done()
    r1, r2 = leader_join.result(timeout=0), new_join.result(timeout=0)
    assert (r1.error, r1.generation_id, r1.leader) == (Errors.NONE, gen + 1, m1)
    assert [m.member_id for m in r1.members] == [m1, pending.member_id]
    assert (r2.error, r2.generation_id, r2.members) == (Errors.NONE, gen + 1, [])
    assert ctx.state() == "CompletingRebalance"


def test_pending_member_expiry_completes_the_join():
    """testJoinGroupCompletionWhenPendingMemberTimesOut: the pending member's expiry (its session
    timeout, 5 s) completes the join long before the rebalance timeout (60 s)."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1, rebalance_timeout_ms=60_000, session_timeout_ms=30_000)
    pending = ctx.join(session_timeout_ms=5_000).result(timeout=0).member_id
    leader_join = ctx.join(member_id=m1, rebalance_timeout_ms=60_000, session_timeout_ms=30_000)
    ctx.clock.advance(4_999)
    assert not leader_join.done()
    ctx.clock.advance(1)
    r = leader_join.result(timeout=0)
    assert (r.error, r.generation_id, [m.member_id for m in r.members]) == (Errors.NONE, gen + 1, [m1])
    assert pending not in ctx.coord.group_for_testing(GROUP).pending_members


def test_pending_member_joining_with_instance_id_is_an_illegal_state():
    """testJoinGroupExistingPendingMemberWithGroupInstanceIdThrowsException: Kafka throws
    IllegalStateException, which reaches the client as UNKNOWN_SERVER_ERROR; nothing changes."""
    ctx = Ctx()
    pending = ctx.join().result(timeout=0).member_id
    resp = ctx.join(member_id=pending, group_instance_id="inst").result(timeout=0)
    assert resp.error is Errors.UNKNOWN_SERVER_ERROR
    group = ctx.coord.group_for_testing(GROUP)
    assert group.pending_members == {pending}
    assert group.members == {}
    assert ctx.state() == "Empty"


# ----------------------------------------------------------------------------------------------
# Static membership (KIP-345)
# ----------------------------------------------------------------------------------------------
def test_new_static_member_gets_no_member_id_required():
    """testStaticMemberJoinAsFirstMember."""
    ctx = Ctx()
    f = ctx.join(group_instance_id="inst-a")
    assert not f.done()
    assert ctx.coord.group_for_testing(GROUP).pending_members == set()
    r = complete_initial_join(ctx, [f])[0]
    assert (r.error, r.member_id, r.leader, r.generation_id) == (Errors.NONE, "inst-a-1", "inst-a-1", 1)
    assert r.members == [("inst-a-1", "inst-a", b"meta")]


def test_static_follower_replaced_in_stable_without_rebalance():
    """testStaticMemberRejoinAsFollowerWithUnknownMemberId / testReplaceStaticMemberInStableStateSucceeds:
    same protocols, so the selected protocol cannot change: no rebalance, a GroupMetadata record with the
    new member id (which inherits the assignment), an immediate answer for the current generation."""
    ctx = Ctx()
    gen, ids, leader = stable_static_group(ctx, ["a", "b"])
    old_b = ids["b"]
    n_records = len(ctx.records())
    resp = ctx.join(group_instance_id="b").result(timeout=0)
    assert resp.error is Errors.NONE
    new_b = resp.member_id
    assert new_b == "b-3" and new_b != old_b
    assert (resp.generation_id, resp.leader, resp.members, resp.skip_assignment) == (gen, leader, [], False)
    assert (resp.protocol_type, resp.protocol_name) == ("consumer", "range")
    assert ctx.state() == "Stable"
    assert member_ids(ctx) == [ids["a"], new_b]
    new_records = ctx.records()[n_records:]
    assert len(new_records) == 1
    key, value = new_records[0]
    assert key == GroupMetadataKey(GROUP)
    assert (value.generation, value.protocol, value.leader) == (gen, "range", leader)
    assert [(m.member_id, m.group_instance_id, m.subscription, m.assignment) for m in value.members] == [
        (ids["a"], "a", b"meta", ids["a"].encode()),
        (new_b, "b", b"meta", old_b.encode()),
    ]
    ctx.assert_replay_matches()
    # The new id gets the old id's assignment and can heartbeat.
    s = ctx.sync(new_b, gen, group_instance_id="b").result(timeout=0)
    assert (s.error, s.assignment) == (Errors.NONE, old_b.encode())
    assert ctx.heartbeat(new_b, gen, group_instance_id="b").error is Errors.NONE


def test_replaced_static_member_is_fenced_everywhere():
    """testStaticMemberFenceDuplicateRejoinedFollower / testStaticMemberRejoinAsFollowerWithMismatchedInstanceId:
    the old member id with its instance id gets FENCED_INSTANCE_ID on join, sync, heartbeat and commit."""
    ctx = Ctx()
    gen, ids, _ = stable_static_group(ctx, ["a", "b"])
    old_b = ids["b"]
    assert ctx.join(group_instance_id="b").result(timeout=0).error is Errors.NONE
    records = ctx.records()
    join = ctx.join(member_id=old_b, group_instance_id="b").result(timeout=0)
    assert (join.error, join.member_id) == (Errors.FENCED_INSTANCE_ID, old_b)
    assert ctx.sync(old_b, gen, group_instance_id="b").result(timeout=0).error is Errors.FENCED_INSTANCE_ID
    assert ctx.heartbeat(old_b, gen, group_instance_id="b").error is Errors.FENCED_INSTANCE_ID
    commit = ctx.commit({T0: (1, "")}, generation_id=gen, member_id=old_b, group_instance_id="b")
    assert commit.errors == {T0: Errors.FENCED_INSTANCE_ID}
    leave = ctx.leave([(old_b, "b")])
    assert leave.members == [(old_b, "b", Errors.FENCED_INSTANCE_ID)]
    assert ctx.state() == "Stable"
    assert ctx.records() == records


def test_static_leader_restart_keeps_leadership_and_skips_assignment():
    """testStaticMemberRejoinWithLeaderIdAndUnknownMemberId (JoinGroup v9): the restarted leader keeps
    leadership under its new id, gets the member list and skip_assignment=True; no rebalance."""
    ctx = Ctx()
    gen, ids, leader = stable_static_group(ctx, ["a", "b"])
    assert leader == ids["a"]
    resp = ctx.join(group_instance_id="a").result(timeout=0)
    new_a = resp.member_id
    assert (resp.error, resp.generation_id, resp.leader, resp.skip_assignment) == (Errors.NONE, gen, new_a, True)
    assert resp.members == [(ids["b"], "b", b"meta"), (new_a, "a", b"meta")]
    assert ctx.state() == "Stable"
    assert ctx.coord.group_for_testing(GROUP).leader_id == new_a
    assert group_values(ctx)[-1].leader == new_a
    assert ctx.heartbeat(ids["a"], gen, group_instance_id="a").error is Errors.FENCED_INSTANCE_ID
    ctx.assert_replay_matches()


def test_static_replacement_with_new_metadata_but_same_selected_protocol():
    """testStaticMemberRejoinWithUnknownMemberIdAndChangeOfProtocolWhileSelectProtocolUnchanged: the
    new subscription is persisted with the new member id, still no rebalance."""
    ctx = Ctx()
    protocols = (("range", b"old"), ("roundrobin", b"old"))
    gen, ids, _ = stable_static_group(ctx, ["a", "b"], protocols=protocols)
    resp = ctx.join(group_instance_id="b", protocols=(("range", b"new"), ("roundrobin", b"new"))).result(timeout=0)
    assert (resp.error, resp.generation_id) == (Errors.NONE, gen)
    assert ctx.state() == "Stable"
    value = group_values(ctx)[-1]
    assert [(m.member_id, m.subscription) for m in value.members] == [(ids["a"], b"old"), (resp.member_id, b"new")]
    ctx.assert_replay_matches()


def test_static_replacement_changing_the_selected_protocol_rebalances():
    """testStaticMemberRejoinWithUnknownMemberIdAndChangeOfProtocolWithSelectedProtocolChanged."""
    ctx = Ctx()
    gen, ids, leader = stable_static_group(ctx, ["a", "b"], protocols=(("range", b""), ("roundrobin", b"")))
    n_records = len(ctx.records())
    b_join = ctx.join(group_instance_id="b", protocols=(("roundrobin", b""),))
    assert not b_join.done()
    assert ctx.state() == "PreparingRebalance"
    assert ctx.records()[n_records:] == []  # nothing persisted for a rebalancing replacement
    a_join = ctx.join(member_id=ids["a"], group_instance_id="a", protocols=(("range", b""), ("roundrobin", b"")))
    ra, rb = a_join.result(timeout=0), b_join.result(timeout=0)
    assert (ra.error, ra.generation_id, ra.protocol_name, ra.leader) == (Errors.NONE, gen + 1, "roundrobin", leader)
    assert (rb.error, rb.generation_id, rb.member_id) == (Errors.NONE, gen + 1, "b-3")
    assert ctx.state() == "CompletingRebalance"


def test_static_replacement_in_completing_rebalance_rebalances():
    """testReplaceStaticMemberInCompletingRebalanceStateTriggersRebalance /
    testStaticMemberFenceDuplicateSyncingFollowerAfterMemberIdChanged: the old id's parked SyncGroup is
    fenced, the group rebalances (the leader may already have assigned to the old id)."""
    ctx = Ctx()
    fa, fb = ctx.join(group_instance_id="a"), ctx.join(group_instance_id="b")
    ra, rb = complete_initial_join(ctx, [fa, fb])
    assert ctx.state() == "CompletingRebalance"
    old_sync = ctx.sync(rb.member_id, 1, group_instance_id="b")
    assert not old_sync.done()
    new_b = ctx.join(group_instance_id="b")
    assert old_sync.result(timeout=0).error is Errors.FENCED_INSTANCE_ID
    assert not new_b.done()
    assert ctx.state() == "PreparingRebalance"
    a_again = ctx.join(member_id=ra.member_id, group_instance_id="a")
    r_a, r_b = a_again.result(timeout=0), new_b.result(timeout=0)
    assert (r_a.error, r_a.generation_id, r_a.leader) == (Errors.NONE, 2, ra.member_id)
    assert [m.member_id for m in r_a.members] == [ra.member_id, r_b.member_id]
    assert (r_b.error, r_b.generation_id, r_b.member_id) == (Errors.NONE, 2, "b-3")


def test_static_replacement_in_preparing_rebalance_fences_the_parked_join_and_waits():
    """testStaticMemberFenceDuplicateRejoiningFollowerAfterMemberIdChanged: in PreparingRebalance the old
    id's parked JoinGroup is fenced and the new id simply waits with the others."""
    ctx = Ctx()
    gen, ids, leader = stable_static_group(ctx, ["a", "b", "c"])
    fa = ctx.join(member_id=ids["a"], group_instance_id="a")  # leader rejoins: rebalance
    fb_old = ctx.join(member_id=ids["b"], group_instance_id="b")
    fb_new = ctx.join(group_instance_id="b")
    r = fb_old.result(timeout=0)
    assert (r.error, r.member_id) == (Errors.FENCED_INSTANCE_ID, ids["b"])
    assert not fa.done() and not fb_new.done()
    fc = ctx.join(member_id=ids["c"], group_instance_id="c")
    results = [f.result(timeout=0) for f in (fa, fb_new, fc)]
    assert all(x.error is Errors.NONE and x.generation_id == gen + 1 for x in results)
    # The re-keyed member moves to the end of the (insertion-ordered) member map.
    assert [m.member_id for m in results[0].members] == [ids["a"], ids["c"], results[1].member_id]


def test_static_member_gets_a_different_member_id_on_each_rejoin():
    """testGetDifferentStaticMemberIdAfterEachRejoin."""
    ctx = Ctx()
    gen, ids, _ = stable_static_group(ctx, ["a"])
    seen = {ids["a"]}
    for _ in range(3):
        r = ctx.join(group_instance_id="a").result(timeout=0)
        assert r.error is Errors.NONE and r.member_id.startswith("a-")
        assert r.member_id not in seen
        seen.add(r.member_id)
    ctx.assert_replay_matches()


def test_unknown_instance_id_with_known_member_id_is_unknown_member():
    """testStaticMemberJoinWithUnknownInstanceIdAndKnownMemberId."""
    ctx = Ctx()
    gen, ids, _ = stable_static_group(ctx, ["a"])
    r = ctx.join(member_id=ids["a"], group_instance_id="zzz").result(timeout=0)
    assert (r.error, r.member_id) == (Errors.UNKNOWN_MEMBER_ID, ids["a"])


def test_static_members_are_not_removed_at_join_completion():
    """testStaticMemberFollowerFailToRejoinBeforeRebalanceTimeout / testCompleteJoinRemoveNotYetRejoinedDynamicMembers:
    at the rebalance timeout the dynamic member that did not rejoin is removed, the static one is kept."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=60_000, rebalance_timeout_ms=10_000)
    fa, fb = ctx.join(group_instance_id="a", **kw), ctx.join(group_instance_id="b", **kw)
    fc = ctx.join_new_dynamic(**kw)
    ra, rb, rc = complete_initial_join(ctx, [fa, fb, fc])
    gen = ra.generation_id
    ctx.sync(rb.member_id, gen, group_instance_id="b")
    ctx.sync(rc.member_id, gen)
    assert ctx.sync(ra.member_id, gen, group_instance_id="a").result(timeout=0).error is Errors.NONE
    leader_join = ctx.join(member_id=ra.member_id, group_instance_id="a", **kw)
    ctx.clock.advance(9_999)
    assert not leader_join.done()
    ctx.clock.advance(1)
    r = leader_join.result(timeout=0)
    assert (r.error, r.generation_id, r.leader) == (Errors.NONE, gen + 1, ra.member_id)
    assert [m.member_id for m in r.members] == [ra.member_id, rb.member_id]
    assert member_ids(ctx) == [ra.member_id, rb.member_id]
    # The kept static member must rejoin: its old generation is gone.
    assert ctx.heartbeat(rb.member_id, gen, group_instance_id="b").error is Errors.ILLEGAL_GENERATION
    assert ctx.heartbeat(rc.member_id, gen).error is Errors.UNKNOWN_MEMBER_ID


def test_static_leader_not_rejoining_loses_leadership_but_stays():
    """testStaticMemberLeaderFailToRejoinBeforeRebalanceTimeout."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=60_000, rebalance_timeout_ms=10_000)
    gen, ids, leader = stable_static_group(ctx, ["a", "b"], **kw)
    assert leader == ids["a"]
    fb = ctx.join(member_id=ids["b"], group_instance_id="b", protocols=(("range", b"changed"),), **kw)
    ctx.clock.advance(10_000)
    r = fb.result(timeout=0)
    assert (r.error, r.generation_id, r.leader) == (Errors.NONE, gen + 1, ids["b"])
    assert [m.member_id for m in r.members] == [ids["a"], ids["b"]]


def test_no_member_rejoined_extends_the_join_phase():
    """testCompleteJoinPhaseNoMembersRejoinedExtendsJoinPhase / testGroupStuckInRebalanceTimeoutDueToNonjoinedStaticMember:
    only a static member that did not rejoin is left at the rebalance timeout: the join phase is extended
    by another rebalance timeout instead of completing."""
    ctx = Ctx()
    kw = dict(session_timeout_ms=1_000_000, rebalance_timeout_ms=400_000)
    gen, ids, _ = stable_static_group(ctx, ["a"], **kw)
    newcomer = ctx.join(group_instance_id="b", **kw)  # rebalance; the newcomer times out after 300 s
    ctx.clock.advance(300_000)
    r = newcomer.result(timeout=0)
    assert (r.error, r.member_id) == (Errors.UNKNOWN_MEMBER_ID, "")
    ctx.clock.advance(100_000)  # the rebalance timeout: nobody rejoined, "a" is static
    assert ctx.state() == "PreparingRebalance"
    assert member_ids(ctx) == [ids["a"]]
    assert generation(ctx) == gen
    ctx.clock.advance(399_999)
    assert ctx.state() == "PreparingRebalance"
    fa = ctx.join(member_id=ids["a"], group_instance_id="a", **kw)
    r = fa.result(timeout=0)
    assert (r.error, r.generation_id) == (Errors.NONE, gen + 1)


# ----------------------------------------------------------------------------------------------
# JoinGroup of a known member in every state (Kafka's classicGroupJoinExistingMember)
# ----------------------------------------------------------------------------------------------
def test_join_in_preparing_rebalance_parks_until_all_rejoined():
    """testJoinGroupExistingMemberUpdatedMetadataTriggersRebalance."""
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2)
    f2 = ctx.join(member_id=m2, protocols=(("range", b"new"),))
    assert ctx.state() == "PreparingRebalance"
    assert not f2.done()
    f1 = ctx.join(member_id=m1)
    r1, r2 = f1.result(timeout=0), f2.result(timeout=0)
    assert (r1.generation_id, r2.generation_id) == (gen + 1, gen + 1)
    assert r1.members == [(m1, None, b"meta"), (m2, None, b"new")]


def test_join_in_completing_rebalance_with_same_metadata_answers_at_once():
    """classicGroupJoinExistingMember, unchanged metadata: a lost JoinGroup response; the leader gets the
    member list again, a follower does not."""
    ctx = Ctx()
    f1, f2 = ctx.join_new_dynamic(), ctx.join_new_dynamic()
    r1, r2 = complete_initial_join(ctx, [f1, f2])
    assert ctx.state() == "CompletingRebalance"
    again1 = ctx.join(member_id=r1.member_id).result(timeout=0)
    again2 = ctx.join(member_id=r2.member_id).result(timeout=0)
    assert again1 == r1
    assert again2 == r2
    assert again1.members == [(r1.member_id, None, b"meta"), (r2.member_id, None, b"meta")]
    assert again2.members == []
    assert ctx.state() == "CompletingRebalance"


def test_join_in_completing_rebalance_with_new_metadata_rebalances():
    """classicGroupJoinExistingMember in CompletingRebalance, changed metadata: rebalance; parked syncs get
    REBALANCE_IN_PROGRESS."""
    ctx = Ctx()
    f1, f2 = ctx.join_new_dynamic(), ctx.join_new_dynamic()
    r1, r2 = complete_initial_join(ctx, [f1, f2])
    parked = ctx.sync(r2.member_id, r2.generation_id)
    f2 = ctx.join(member_id=r2.member_id, protocols=(("range", b"new"),))
    assert parked.result(timeout=0).error is Errors.REBALANCE_IN_PROGRESS
    assert ctx.state() == "PreparingRebalance"
    f1 = ctx.join(member_id=r1.member_id)
    assert f1.result(timeout=0).generation_id == f2.result(timeout=0).generation_id == 2


def test_leader_rejoining_in_stable_forces_a_rebalance():
    """testJoinGroupFromUnchangedLeaderShouldRebalance / testJoinGroupAsExistingLeaderTriggersRebalanceInStableState."""
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2)
    assert leader == m1
    f1 = ctx.join(member_id=m1)  # unchanged metadata
    assert not f1.done()
    assert ctx.state() == "PreparingRebalance"
    assert ctx.heartbeat(m2, gen).error is Errors.REBALANCE_IN_PROGRESS
    f2 = ctx.join(member_id=m2)
    assert f1.result(timeout=0).generation_id == f2.result(timeout=0).generation_id == gen + 1


def test_unchanged_follower_in_stable_gets_current_generation_at_once():
    """testJoinGroupFromUnchangedFollowerDoesNotRebalance / testJoinGroupExistingMemberDoesNotTriggerRebalanceInStableState."""
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2)
    records = ctx.records()
    r = ctx.join(member_id=m2).result(timeout=0)
    assert (r.error, r.generation_id, r.member_id, r.leader, r.members) == (Errors.NONE, gen, m2, m1, [])
    assert (r.protocol_type, r.protocol_name, r.skip_assignment) == ("consumer", "range", False)
    assert ctx.state() == "Stable"
    assert ctx.records() == records


def test_follower_with_new_metadata_in_stable_rebalances():
    """testJoinGroupAsExistingMemberWithUpdatedMetadataTriggersRebalanceInStableState."""
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2)
    f2 = ctx.join(member_id=m2, protocols=(("range", b"new"),))
    assert not f2.done()
    assert ctx.state() == "PreparingRebalance"


def test_known_member_join_in_empty_group_is_unknown_member():
    """testJoinGroupExistingMemberInEmptyState: the group emptied (or was forced Empty with members)."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.coord.force_group_state_for_testing(GROUP, "Empty")
    r = ctx.join(member_id=m1).result(timeout=0)
    assert (r.error, r.member_id) == (Errors.UNKNOWN_MEMBER_ID, m1)
    ctx2 = Ctx()
    gen, (m1,), _ = ctx2.stable_group(1)
    ctx2.leave([(m1, None)])
    assert ctx2.state() == "Empty"
    assert ctx2.join(member_id=m1).result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID


def test_join_dead_group():
    """testJoinGroupUnknownConsumerNewDeadGroup / testExistingMemberJoinDeadGroup."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.coord.force_group_state_for_testing(GROUP, "Dead")
    r = ctx.join().result(timeout=0)
    assert (r.error, r.member_id) == (Errors.COORDINATOR_NOT_AVAILABLE, "")
    r = ctx.join(member_id=m1).result(timeout=0)
    assert (r.error, r.member_id) == (Errors.COORDINATOR_NOT_AVAILABLE, m1)
    r = ctx.join(group_instance_id="inst").result(timeout=0)
    assert r.error is Errors.COORDINATOR_NOT_AVAILABLE
    assert ctx.state() == "Dead"


# ----------------------------------------------------------------------------------------------
# group.max.size (KIP-389; Kafka's GroupMetadataManager.acceptJoiningMember)
# ----------------------------------------------------------------------------------------------
def test_max_size_dynamic_members_with_required_member_id():
    """testDynamicMembersJoinGroupWithMaxSizeAndRequiredKnownMember: Empty accepts everybody's first
    JoinGroup; in PreparingRebalance the awaiting count decides; the rejected id is forgotten."""
    ctx = Ctx(config={"group.max.size": 2})
    ids = [ctx.join().result(timeout=0) for _ in range(3)]
    assert all(r.error is Errors.MEMBER_ID_REQUIRED for r in ids)
    f1 = ctx.join(member_id=ids[0].member_id)
    f2 = ctx.join(member_id=ids[1].member_id)
    r3 = ctx.join(member_id=ids[2].member_id).result(timeout=0)
    assert (r3.error, r3.member_id) == (Errors.GROUP_MAX_SIZE_REACHED, "")
    group = ctx.coord.group_for_testing(GROUP)
    assert ids[2].member_id not in group.pending_members
    r1, r2 = complete_initial_join(ctx, [f1, f2])
    assert r1.error is r2.error is Errors.NONE
    assert member_ids(ctx) == [ids[0].member_id, ids[1].member_id]


def test_max_size_dynamic_members_without_required_member_id():
    """testDynamicMembersJoinGroupWithMaxSizeAndNotRequiredKnownMember."""
    ctx = Ctx(config={"group.max.size": 2})
    futures = [ctx.join(require_known_member_id=False) for _ in range(3)]
    r3 = futures[2].result(timeout=0)
    assert (r3.error, r3.member_id) == (Errors.GROUP_MAX_SIZE_REACHED, "")
    r1, r2 = complete_initial_join(ctx, futures[:2])
    assert r1.error is r2.error is Errors.NONE
    assert len(member_ids(ctx)) == 2


def test_max_size_static_members():
    """testStaticMembersJoinGroupWithMaxSize."""
    ctx = Ctx(config={"group.max.size": 2})
    futures = [ctx.join(group_instance_id=i) for i in ("a", "b", "c")]
    assert futures[2].result(timeout=0).error is Errors.GROUP_MAX_SIZE_REACHED
    assert ctx.coord.group_for_testing(GROUP).static_member_id("c") is None
    assert all(r.error is Errors.NONE for r in complete_initial_join(ctx, futures[:2]))


def test_max_size_stable_rejects_new_members_but_not_existing_ones():
    """acceptJoiningMember in Stable/CompletingRebalance: size decides; an existing member is always
    accepted."""
    ctx = Ctx(config={"group.max.size": 2})
    gen, (m1, m2), _ = ctx.stable_group(2)
    r = ctx.join().result(timeout=0)
    assert (r.error, r.member_id) == (Errors.GROUP_MAX_SIZE_REACHED, "")
    r = ctx.join(group_instance_id="x").result(timeout=0)
    assert r.error is Errors.GROUP_MAX_SIZE_REACHED
    assert ctx.join(member_id=m2).result(timeout=0).error is Errors.NONE  # unchanged follower
    assert ctx.state() == "Stable"
    # CompletingRebalance: same rule.
    f1, f2 = ctx.join(member_id=m1), ctx.join(member_id=m2)
    assert ctx.state() == "CompletingRebalance"
    assert ctx.join().result(timeout=0).error is Errors.GROUP_MAX_SIZE_REACHED
    assert ctx.join(member_id=m2).result(timeout=0).error is Errors.NONE
    assert f1.done() and f2.done()


def test_max_size_existing_awaiting_member_can_rejoin_while_rebalancing():
    """testDynamicMembersCanRejoinGroupWithMaxSizeWhileRebalancing."""
    ctx = Ctx(config={"group.max.size": 2})
    ids = [ctx.join().result(timeout=0).member_id for _ in range(2)]
    ctx.join(member_id=ids[0])
    ctx.join(member_id=ids[1])
    assert ctx.coord.group_for_testing(GROUP).num_awaiting_join == 2
    again = ctx.join(member_id=ids[0])  # already awaiting: accepted although the group is "full"
    assert not again.done()
    ctx.clock.advance(1)
    assert again.result(timeout=0).error is Errors.NONE


def test_max_size_last_rejoining_members_are_kicked_out():
    """testLastJoiningMembersAreKickedOutWhenRejoiningGroupWithMaxSize: in PreparingRebalance the count
    of members awaiting join decides, so a member rejoining after the group filled up is removed; the
    join then completes at the rebalance timeout."""
    ctx = Ctx(config={"group.max.size": 2})
    gen, (m1, m2), _ = ctx.stable_group(2)
    f1 = ctx.join(member_id=m1)  # leader rejoins: PreparingRebalance, 1 awaiting
    newcomer = ctx.join().result(timeout=0)
    assert newcomer.error is Errors.MEMBER_ID_REQUIRED
    f3 = ctx.join(member_id=newcomer.member_id)  # 2 awaiting
    r2 = ctx.join(member_id=m2).result(timeout=0)
    assert (r2.error, r2.member_id) == (Errors.GROUP_MAX_SIZE_REACHED, "")
    assert member_ids(ctx) == [m1, newcomer.member_id]
    assert not f1.done()
    ctx.clock.advance(10_000)
    r1, r3 = f1.result(timeout=0), f3.result(timeout=0)
    assert (r1.error, r1.generation_id) == (Errors.NONE, gen + 1)
    assert [m.member_id for m in r1.members] == [m1, newcomer.member_id]
    assert r3.error is Errors.NONE


def test_max_size_over_capacity_group_loaded_rebalances_and_kicks_out_last_rejoiner(tmp_path):
    """testOnLoadedExceedGroupMaxSizeTriggersRebalance + KAFKA-9885: a group persisted with 3 members is
    loaded by a coordinator whose max size is 2: it rebalances, the third member to rejoin is rejected."""
    ctx = Ctx(log_dir=tmp_path)
    gen, members, _ = ctx.stable_group(3)
    ctx.coord.close()
    ctx2 = Ctx(config={"group.max.size": 2}, log_dir=tmp_path)
    assert ctx2.state() == "PreparingRebalance"
    f1, f2 = ctx2.join(member_id=members[0]), ctx2.join(member_id=members[1])
    r3 = ctx2.join(member_id=members[2]).result(timeout=0)
    assert r3.error is Errors.GROUP_MAX_SIZE_REACHED
    ctx2.clock.advance(10_000)
    assert f1.result(timeout=0).generation_id == f2.result(timeout=0).generation_id == gen + 1
    assert member_ids(ctx2) == members[:2]
    ctx2.coord.close()


def test_group_metadata_record_members_follow_the_protocol():
    """The GroupMetadata written at SyncGroup carries each member's metadata for the selected protocol."""
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1, protocols=(("roundrobin", b"rr"), ("range", b"rg")))
    value = group_values(ctx)[-1]
    assert value.protocol == "roundrobin"
    assert value.members == (MemberMetadata(m1, None, "client", "/127.0.0.1", 10_000, 10_000, b"rr", m1.encode()),)


def test_static_member_replaced_during_the_initial_rebalance():
    """testJoinGroupReplaceStaticMember: the old id's parked JoinGroup is fenced; one member, one awaiting
    join; the new id completes with the initial delay."""
    ctx = Ctx(config={"group.initial.rebalance.delay.ms": 3_000})
    old = ctx.join(group_instance_id="group-instance-id", session_timeout_ms=5_000)
    group = ctx.coord.group_for_testing(GROUP)
    assert (group.num_awaiting_join, group.num_members) == (1, 1)
    new = ctx.join(group_instance_id="group-instance-id", session_timeout_ms=5_000)
    assert old.result(timeout=0).error is Errors.FENCED_INSTANCE_ID
    assert not new.done()
    assert (group.num_awaiting_join, group.num_members) == (1, 1)
    ctx.clock.advance(3_000)
    r = new.result(timeout=0)
    assert (r.error, r.member_id, r.generation_id) == (Errors.NONE, "group-instance-id-2", 1)
    assert (group.num_awaiting_join, group.num_members) == (0, 1)


def test_static_member_rejoin_with_known_id_in_unexpected_states():
    """testStaticMemberRejoinWithLeaderIdAndUnexpectedDeadGroup / ...UnexpectedEmptyGroup (states set
    through legal transitions, members kept)."""
    ctx = Ctx()
    gen, ids, leader = stable_static_group(ctx, ["leader-instance-id", "follower-instance-id"])
    ctx.coord.transition_group_for_testing(GROUP, "Dead")
    r = ctx.join(member_id=leader, group_instance_id="leader-instance-id").result(timeout=0)
    assert (r.error, r.member_id) == (Errors.COORDINATOR_NOT_AVAILABLE, leader)
    ctx = Ctx()
    gen, ids, leader = stable_static_group(ctx, ["leader-instance-id", "follower-instance-id"])
    ctx.coord.transition_group_for_testing(GROUP, "PreparingRebalance")
    ctx.coord.transition_group_for_testing(GROUP, "Empty")
    r = ctx.join(member_id=leader, group_instance_id="leader-instance-id").result(timeout=0)
    assert (r.error, r.member_id) == (Errors.UNKNOWN_MEMBER_ID, leader)


def test_static_member_rejoin_with_unknown_id_in_empty_group_is_an_illegal_state():
    """testStaticMemberReJoinWithIllegalStateAsUnknownMember: Kafka throws IllegalStateException (the
    client sees UNKNOWN_SERVER_ERROR); nothing is written."""
    ctx = Ctx()
    gen, ids, leader = stable_static_group(ctx, ["leader-instance-id", "follower-instance-id"])
    records = ctx.records()
    ctx.coord.transition_group_for_testing(GROUP, "PreparingRebalance")
    ctx.coord.transition_group_for_testing(GROUP, "Empty")
    r = ctx.join(group_instance_id="follower-instance-id").result(timeout=0)
    assert r.error is Errors.UNKNOWN_SERVER_ERROR
    assert ctx.records() == records
