"""OffsetCommit / OffsetFetch scenarios (Kafka's OffsetMetadataManager.commitOffset / fetchOffsets and
the OffsetCommit record; Kafka's OffsetMetadataManagerTest and ClassicGroupTest#validateOffsetCommit are
the models). OffsetCommit is v8: an unknown group with a
generation answers ILLEGAL_GENERATION."""

from __future__ import annotations

import pytest
from raygroups.coordinator.records import GroupMetadataKey

from raygroups import Errors
from tests.unit.helpers import GROUP, Ctx, offset_record

T0, T1 = ("foo", 0), ("foo", 1)
NO_OFFSET = (-1, -1, "", Errors.NONE)


def fetched(ctx, partitions=None, group_id=GROUP):
    resp = ctx.fetch(partitions, group_id=group_id)
    assert resp.error is Errors.NONE
    return {tp: tuple(v) for tp, v in resp.offsets.items()}


# ----------------------------------------------------------------------------------------------
# Unknown groups and simple (groupless) commits
# ----------------------------------------------------------------------------------------------
def test_simple_commit_creates_empty_group_and_writes_only_offset_records():
    ctx = Ctx(now_ms=1_000)
    resp = ctx.commit({T0: (100, "meta"), T1: (200, "", 5)})
    assert resp.errors == {T0: Errors.NONE, T1: Errors.NONE}
    assert ctx.state() == "Empty"
    # A simple group has no GroupMetadata record: only its offsets.
    assert ctx.records() == [
        offset_record(GROUP, "foo", 0, 100, 1_000, metadata="meta"),
        offset_record(GROUP, "foo", 1, 200, 1_000, leader_epoch=5),
    ]
    assert not any(isinstance(k, GroupMetadataKey) for k, _ in ctx.records())
    assert fetched(ctx, [T0, T1]) == {T0: (100, -1, "meta", Errors.NONE), T1: (200, 5, "", Errors.NONE)}
    listed = ctx.coord.list_groups().result(timeout=0)
    assert [(g.group_id, g.protocol_type, g.group_state) for g in listed.groups] == [(GROUP, "", "Empty")]
    ctx.assert_replay_matches()


@pytest.mark.parametrize("generation_id,member_id", [(0, ""), (1, "member"), (5, "")])
def test_commit_to_unknown_group_with_generation_is_illegal_generation(generation_id, member_id):
    ctx = Ctx()
    resp = ctx.commit({T0: (1, ""), T1: (2, "")}, generation_id=generation_id, member_id=member_id)
    assert resp.errors == {T0: Errors.ILLEGAL_GENERATION, T1: Errors.ILLEGAL_GENERATION}
    assert ctx.state() is None
    assert ctx.records() == []
    assert fetched(ctx, [T0]) == {T0: NO_OFFSET}
    ctx.assert_replay_matches()


def test_simple_commit_with_member_id_and_generation_minus_one_is_accepted():
    # ClassicGroup#validateOffsetCommit returns early for generation < 0 on an Empty group, whatever the
    # member id says: the freshly created simple group takes the commit.
    ctx = Ctx()
    resp = ctx.commit({T0: (1, "")}, member_id="someone")
    assert resp.errors == {T0: Errors.NONE}
    assert ctx.state() == "Empty"
    assert ctx.records() == [offset_record(GROUP, "foo", 0, 1, 0)]
    ctx.assert_replay_matches()


def test_empty_group_id_is_accepted_for_commit_and_fetch():
    ctx = Ctx()
    assert ctx.commit({T0: (7, "x")}, group_id="").errors == {T0: Errors.NONE}
    assert fetched(ctx, [T0], group_id="") == {T0: (7, -1, "x", Errors.NONE)}
    assert fetched(ctx, None, group_id="") == {T0: (7, -1, "x", Errors.NONE)}
    assert ctx.coord.group_state_for_testing("") == "Empty"
    ctx.assert_replay_matches()


def test_none_group_id_is_invalid():
    ctx = Ctx()
    resp = ctx.coord.commit_offsets(group_id=None, offsets={T0: (1, "")}).result(timeout=0)
    assert resp.errors == {T0: Errors.INVALID_GROUP_ID}
    assert ctx.coord.fetch_offsets(group_id=None).result(timeout=0).error is Errors.INVALID_GROUP_ID
    assert ctx.records() == []
    ctx.assert_replay_matches()


# ----------------------------------------------------------------------------------------------
# Values stored
# ----------------------------------------------------------------------------------------------
def test_metadata_none_is_stored_as_empty_string_and_leader_epoch_is_kept():
    ctx = Ctx(now_ms=50)
    ctx.commit({T0: (10, None), T1: (11, None, 42)})
    assert ctx.records() == [
        offset_record(GROUP, "foo", 0, 10, 50, metadata=""),
        offset_record(GROUP, "foo", 1, 11, 50, leader_epoch=42, metadata=""),
    ]
    assert fetched(ctx, [T0, T1]) == {T0: (10, -1, "", Errors.NONE), T1: (11, 42, "", Errors.NONE)}
    ctx.assert_replay_matches()


def test_retention_time_sets_expire_timestamp_and_default_leaves_it_unset():
    ctx = Ctx(now_ms=1_000)
    ctx.commit({T0: (1, "")}, retention_time_ms=5_000)
    ctx.clock.advance(500)
    ctx.commit({T1: (2, "")})
    assert ctx.records() == [
        offset_record(GROUP, "foo", 0, 1, 1_000, expire_ms=6_000),
        offset_record(GROUP, "foo", 1, 2, 1_500, expire_ms=None),
    ]
    ctx.assert_replay_matches()


def test_last_commit_wins_and_commit_timestamp_is_commit_time():
    ctx = Ctx()
    ctx.commit({T0: (1, "a")})
    ctx.clock.advance(100)
    ctx.commit({T0: (2, "b", 3)})
    assert fetched(ctx, [T0]) == {T0: (2, 3, "b", Errors.NONE)}
    assert ctx.coord.durable_state_for_testing(0).offset(GROUP, "foo", 0).commit_timestamp_ms == 100
    ctx.assert_replay_matches()


def test_offset_metadata_too_large_fails_only_the_offending_partition():
    ctx = Ctx(config={"offset.metadata.max.bytes": 10})
    resp = ctx.commit({T0: (1, "x" * 11), T1: (2, "x" * 10), ("bar", 0): (3, None)})
    assert resp.errors == {T0: Errors.OFFSET_METADATA_TOO_LARGE, T1: Errors.NONE, ("bar", 0): Errors.NONE}
    assert ctx.records() == [
        offset_record(GROUP, "foo", 1, 2, 0, metadata="x" * 10),
        offset_record(GROUP, "bar", 0, 3, 0),
    ]
    assert fetched(ctx, [T0]) == {T0: NO_OFFSET}
    ctx.assert_replay_matches()


def test_offset_metadata_size_is_counted_in_utf16_units():
    # Java's String.length(): a character outside the BMP counts twice.
    ctx = Ctx(config={"offset.metadata.max.bytes": 3})
    resp = ctx.commit({T0: (1, "\U0001F600\U0001F600"), T1: (2, "\U0001F600a"), ("bar", 0): (3, "ééé")})
    assert resp.errors == {T0: Errors.OFFSET_METADATA_TOO_LARGE, T1: Errors.NONE, ("bar", 0): Errors.NONE}
    assert [v.metadata for _, v in ctx.records()] == ["\U0001F600a", "ééé"]
    ctx.assert_replay_matches()


def test_commit_with_only_too_large_metadata_writes_nothing_and_creates_no_group():
    ctx = Ctx(config={"offset.metadata.max.bytes": 0})
    resp = ctx.commit({T0: (1, "m")})
    assert resp.errors == {T0: Errors.OFFSET_METADATA_TOO_LARGE}
    assert ctx.records() == []
    assert ctx.state() is None
    ctx.assert_replay_matches()


# ----------------------------------------------------------------------------------------------
# OffsetFetch
# ----------------------------------------------------------------------------------------------
def test_fetch_unknown_group_and_unknown_partition():
    ctx = Ctx()
    assert fetched(ctx, [T0, T1]) == {T0: NO_OFFSET, T1: NO_OFFSET}
    assert fetched(ctx, None) == {}
    ctx.commit({T0: (5, "m")})
    assert fetched(ctx, [T0, T1, ("bar", 3)]) == {
        T0: (5, -1, "m", Errors.NONE), T1: NO_OFFSET, ("bar", 3): NO_OFFSET,
    }
    # Fetching never creates a group.
    assert ctx.coord.group_state_for_testing("other") is None
    assert fetched(ctx, [T0], group_id="other") == {T0: NO_OFFSET}
    assert ctx.coord.group_state_for_testing("other") is None
    ctx.assert_replay_matches()


def test_fetch_all_returns_every_committed_partition():
    ctx = Ctx()
    ctx.commit({T0: (1, "a"), ("bar", 2): (3, "c", 9)})
    ctx.commit({T1: (2, "b")})
    assert fetched(ctx, None) == {
        T0: (1, -1, "a", Errors.NONE), T1: (2, -1, "b", Errors.NONE), ("bar", 2): (3, 9, "c", Errors.NONE),
    }
    ctx.assert_replay_matches()


def test_fetch_of_dead_group_returns_no_offsets():
    # ClassicGroup#validateOffsetFetch: a Dead group is "not found", so every partition is -1.
    ctx = Ctx()
    ctx.commit({T0: (1, "")})
    ctx.coord.force_group_state_for_testing(GROUP, "Dead")
    assert fetched(ctx, [T0]) == {T0: NO_OFFSET}
    assert fetched(ctx, None) == {}
    ctx.assert_replay_matches()


def test_fetch_while_loading_and_not_owned():
    ctx = Ctx(num_partitions=2)  # "groupId" -> partition 0, "otherGroup" -> partition 1 (partitionFor)
    ctx.coord.set_loading_for_testing(0, True)
    assert ctx.fetch([T0], group_id="groupId").error is Errors.COORDINATOR_LOAD_IN_PROGRESS
    assert ctx.commit({T0: (1, "")}, group_id="groupId").errors == {T0: Errors.COORDINATOR_LOAD_IN_PROGRESS}
    ctx.coord.unload(1, 0)
    assert ctx.fetch([T0], group_id="otherGroup").error is Errors.NOT_COORDINATOR
    assert ctx.commit({T0: (1, "")}, group_id="otherGroup").errors == {T0: Errors.NOT_COORDINATOR}
    ctx.assert_replay_matches(0)


# ----------------------------------------------------------------------------------------------
# Generation / member validation per group state
# ----------------------------------------------------------------------------------------------
def test_stable_group_accepts_current_generation_only():
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2)
    assert ctx.state() == "Stable"
    before = len(ctx.records())
    assert ctx.commit({T0: (1, "")}, generation_id=gen, member_id=m2).errors == {T0: Errors.NONE}
    assert ctx.commit({T0: (1, "")}, generation_id=gen + 1, member_id=m2).errors == {T0: Errors.ILLEGAL_GENERATION}
    assert ctx.commit({T0: (1, "")}, generation_id=gen - 1, member_id=m2).errors == {T0: Errors.ILLEGAL_GENERATION}
    assert ctx.commit({T0: (1, "")}, generation_id=gen, member_id="unknown").errors == {T0: Errors.UNKNOWN_MEMBER_ID}
    # Generation -1 without a member id on a non-empty group: only members may commit.
    assert ctx.commit({T0: (9, "")}).errors == {T0: Errors.UNKNOWN_MEMBER_ID}
    # Generation -1 with a member id: the member is known, the generation is not.
    assert ctx.commit({T0: (9, "")}, member_id=m1).errors == {T0: Errors.ILLEGAL_GENERATION}
    assert ctx.records()[before:] == [offset_record(GROUP, "foo", 0, 1, ctx.clock.now_ms())]
    assert fetched(ctx, [T0]) == {T0: (1, -1, "", Errors.NONE)}
    ctx.assert_replay_matches()


def test_stable_commit_resets_the_session_timer():
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1, session_timeout_ms=10_000)
    start = ctx.clock.now_ms()
    ctx.clock.advance(9_000)
    assert ctx.commit({T0: (1, "")}, generation_id=gen, member_id=m1).errors == {T0: Errors.NONE}
    ctx.clock.advance(9_000)  # 18 s after the last sync: alive only because the commit reset the timer
    assert ctx.state() == "Stable"
    ctx.clock.advance(999)
    assert ctx.state() == "Stable"
    ctx.clock.advance(1)  # 10 s after the commit
    assert ctx.state() == "Empty"
    assert ctx.clock.now_ms() == start + 19_000
    assert ctx.heartbeat(m1, gen).error is Errors.UNKNOWN_MEMBER_ID
    ctx.assert_replay_matches()


def test_preparing_rebalance_accepts_the_current_generation_and_resets_the_session_timer():
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2, session_timeout_ms=10_000, rebalance_timeout_ms=60_000)
    assert leader == m1
    # The leader rejoins: PreparingRebalance, waiting up to 60 s for m2.
    rejoin = ctx.join(member_id=m1, session_timeout_ms=10_000, rebalance_timeout_ms=60_000)
    assert not rejoin.done()
    assert ctx.state() == "PreparingRebalance"
    ctx.clock.advance(9_000)
    assert ctx.commit({T0: (1, "")}, generation_id=gen, member_id=m2).errors == {T0: Errors.NONE}
    assert ctx.commit({T0: (1, "")}, generation_id=gen + 1, member_id=m2).errors == {T0: Errors.ILLEGAL_GENERATION}
    ctx.clock.advance(9_000)
    # Without the commit m2's session would have expired at +10 s.
    assert ctx.heartbeat(m2, gen).error is Errors.REBALANCE_IN_PROGRESS
    ctx.clock.advance(10_000)  # 10 s after that heartbeat: m2 expires, the join completes with m1 alone
    assert rejoin.done()
    r = rejoin.result(timeout=0)
    assert (r.error, r.generation_id, r.leader) == (Errors.NONE, gen + 1, m1)
    assert [m.member_id for m in r.members] == [m1]
    assert ctx.state() == "CompletingRebalance"
    ctx.assert_replay_matches()


def test_completing_rebalance_rejects_commits_with_rebalance_in_progress():
    ctx = Ctx()
    first = ctx.join_new_dynamic()
    ctx.clock.advance(1)
    r = first.result(timeout=0)
    assert ctx.state() == "CompletingRebalance"
    before = ctx.records()
    assert ctx.commit({T0: (1, "")}, generation_id=r.generation_id, member_id=r.member_id).errors == {
        T0: Errors.REBALANCE_IN_PROGRESS
    }
    # The generation is checked before the state.
    assert ctx.commit({T0: (1, "")}, generation_id=r.generation_id + 1, member_id=r.member_id).errors == {
        T0: Errors.ILLEGAL_GENERATION
    }
    assert ctx.commit({T0: (1, "")}).errors == {T0: Errors.UNKNOWN_MEMBER_ID}
    assert ctx.records() == before
    ctx.assert_replay_matches()


def test_empty_group_accepts_only_generation_minus_one():
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    assert ctx.leave([(m1, None)]).members[0].error is Errors.NONE
    assert ctx.state() == "Empty"
    empty_gen = gen + 1
    assert ctx.commit({T0: (1, "")}, generation_id=empty_gen, member_id=m1).errors == {T0: Errors.UNKNOWN_MEMBER_ID}
    assert ctx.commit({T0: (1, "")}, generation_id=empty_gen).errors == {T0: Errors.UNKNOWN_MEMBER_ID}
    assert ctx.commit({T0: (1, "")}, generation_id=gen, member_id=m1).errors == {T0: Errors.UNKNOWN_MEMBER_ID}
    # Admin / simple commit with generation -1 is accepted, even with a stale member id (Kafka returns
    # early for generation < 0 on an Empty group).
    assert ctx.commit({T0: (5, "admin")}).errors == {T0: Errors.NONE}
    assert ctx.commit({T1: (6, "")}, member_id=m1).errors == {T1: Errors.NONE}
    assert fetched(ctx, None) == {T0: (5, -1, "admin", Errors.NONE), T1: (6, -1, "", Errors.NONE)}
    assert ctx.state() == "Empty"
    ctx.assert_replay_matches()


def test_dead_group_answers_coordinator_not_available():
    ctx = Ctx()
    ctx.commit({T0: (1, "")})
    ctx.coord.force_group_state_for_testing(GROUP, "Dead")
    before = ctx.records()
    assert ctx.commit({T0: (2, "")}).errors == {T0: Errors.COORDINATOR_NOT_AVAILABLE}
    assert ctx.commit({T0: (2, "")}, generation_id=3, member_id="m").errors == {T0: Errors.COORDINATOR_NOT_AVAILABLE}
    assert ctx.records() == before
    ctx.assert_replay_matches()


def test_static_member_commits_fenced_and_unknown_instance():
    ctx = Ctx()
    f = ctx.join(group_instance_id="instance-a")
    ctx.clock.advance(1)
    r = f.result(timeout=0)
    member = r.member_id
    assert member == "instance-a-1"
    assert ctx.sync(member, r.generation_id, {member: b"a"}, group_instance_id="instance-a").result(
        timeout=0).error is Errors.NONE
    gen = r.generation_id
    ok = ctx.commit({T0: (1, "")}, generation_id=gen, member_id=member, group_instance_id="instance-a")
    assert ok.errors == {T0: Errors.NONE}
    fenced = ctx.commit({T0: (2, "")}, generation_id=gen, member_id="old-id", group_instance_id="instance-a")
    assert fenced.errors == {T0: Errors.FENCED_INSTANCE_ID}
    unknown = ctx.commit({T0: (2, "")}, generation_id=gen, member_id=member, group_instance_id="instance-b")
    assert unknown.errors == {T0: Errors.UNKNOWN_MEMBER_ID}
    # The instance id alone (generation -1, no member id) on a non-empty group is validated too.
    alone = ctx.commit({T0: (2, "")}, group_instance_id="instance-a")
    assert alone.errors == {T0: Errors.FENCED_INSTANCE_ID}
    assert fetched(ctx, [T0]) == {T0: (1, -1, "", Errors.NONE)}
    ctx.assert_replay_matches()


def test_static_member_replaced_after_restart_is_fenced_on_commit():
    ctx = Ctx()
    f = ctx.join(group_instance_id="inst")
    ctx.clock.advance(1)
    r = f.result(timeout=0)
    old = r.member_id
    ctx.sync(old, r.generation_id, {old: b"x"}, group_instance_id="inst")
    # The static member restarts with an unknown member id: it gets a new id, no rebalance.
    again = ctx.join(group_instance_id="inst").result(timeout=0)
    assert again.error is Errors.NONE and again.member_id != old
    assert ctx.state() == "Stable"
    stale = ctx.commit({T0: (1, "")}, generation_id=r.generation_id, member_id=old, group_instance_id="inst")
    assert stale.errors == {T0: Errors.FENCED_INSTANCE_ID}
    fresh = ctx.commit({T0: (1, "")}, generation_id=r.generation_id, member_id=again.member_id,
                       group_instance_id="inst")
    assert fresh.errors == {T0: Errors.NONE}
    ctx.assert_replay_matches()


def test_commit_to_group_created_by_join_with_only_a_pending_member():
    # JoinGroup with MEMBER_ID_REQUIRED created the group (Empty, generation 0, GroupMetadata written);
    # an admin commit (generation -1) is accepted there, a commit with generation 0 is not.
    ctx = Ctx()
    first = ctx.join().result(timeout=0)
    assert first.error is Errors.MEMBER_ID_REQUIRED
    assert ctx.state() == "Empty"
    assert ctx.commit({T0: (1, "")}, generation_id=0, member_id=first.member_id).errors == {
        T0: Errors.UNKNOWN_MEMBER_ID
    }
    assert ctx.commit({T0: (1, "")}).errors == {T0: Errors.NONE}
    ctx.assert_replay_matches()


def test_default_offset_metadata_limit_is_4096_characters():
    ctx = Ctx()
    resp = ctx.commit({T0: (1, "m" * 4096), T1: (2, "m" * 4097)})
    assert resp.errors == {T0: Errors.NONE, T1: Errors.OFFSET_METADATA_TOO_LARGE}
    assert fetched(ctx, [T0, T1]) == {T0: (1, -1, "m" * 4096, Errors.NONE), T1: NO_OFFSET}
    ctx.assert_replay_matches()


def test_simple_commit_ignores_the_instance_id_on_an_empty_group():
    # OffsetMetadataManagerTest#testSimpleGroupOffsetCommitWithInstanceId: generation -1 on an Empty
    # group returns before the member / instance checks.
    ctx = Ctx()
    assert ctx.commit({T0: (100, "")}, group_instance_id="instance-id").errors == {T0: Errors.NONE}
    assert ctx.state() == "Empty"
    assert ctx.records() == [offset_record(GROUP, "foo", 0, 100, 0)]
    ctx.assert_replay_matches()
