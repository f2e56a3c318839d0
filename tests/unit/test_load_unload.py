"""Load / unload of a partition with leader epochs (Kafka's CoordinatorRuntime.scheduleLoadOperation /
scheduleUnloadOperation and GroupMetadataManager.onLoaded / onUnloaded; Kafka's
GroupMetadataManagerTest#testOnLoaded*, #testClassicGroupOnUnloaded* and the Scala GroupMetadataManagerTest
load/unload-with-epoch tests are the models)."""

from __future__ import annotations

import pytest
from raygroups.coordinator.messages import JoinGroupResponse, SyncGroupResponse

from raygroups import Errors
from tests.unit.helpers import GROUP, Ctx, consumer_protocols

T0, T1 = ("foo", 0), ("foo", 1)


def describe(ctx, group_id=GROUP):
    [d] = ctx.coord.describe_groups([group_id]).result(timeout=0)
    return d


def reload(ctx, old_epoch, new_epoch, partition=0):
    ctx.coord.unload(partition, old_epoch)
    return ctx.coord.load(partition, new_epoch)


def populated_ctx():
    """A Stable group with two consumer members and offsets, a simple group, and an Empty group that
    had members once."""
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2, protocols=consumer_protocols("foo"))
    ctx.commit({T0: (10, "a", 3), T1: (11, "b")}, generation_id=gen, member_id=m2)
    ctx.commit({T0: (1, "")}, group_id="simple", retention_time_ms=600_000)
    _, (m3,), _ = ctx.stable_group(1, group_id="left", protocol_type="connect")
    ctx.leave([(m3, None)], group_id="left")
    assert (ctx.state(), ctx.state("simple"), ctx.state("left")) == ("Stable", "Empty", "Empty")
    return ctx, gen, (m1, m2), leader


# ----------------------------------------------------------------------------------------------
# Reload rebuilds the same durable state and groups
# ----------------------------------------------------------------------------------------------
def test_reload_rebuilds_identical_durable_state_and_groups():
    ctx, gen, (m1, m2), leader = populated_ctx()
    durable = ctx.coord.durable_state_for_testing(0).copy()
    described = {g: describe(ctx, g) for g in (GROUP, "simple", "left")}
    records = ctx.records()

    ctx.coord.unload(0, 0)
    assert ctx.coord.partition_state_for_testing(0) == "CLOSED"
    assert (ctx.state(), ctx.state("simple"), ctx.state("left")) == (None, None, None)
    assert ctx.heartbeat(m1, gen).error is Errors.NOT_COORDINATOR
    assert ctx.commit({T0: (1, "")}, group_id="simple").errors == {T0: Errors.NOT_COORDINATOR}

    summary = ctx.coord.load(0, 1)
    assert summary is not None and summary.records == len(records)
    assert ctx.coord.partition_state_for_testing(0) == "ACTIVE"
    assert ctx.coord.durable_state_for_testing(0) == durable
    assert {g: describe(ctx, g) for g in (GROUP, "simple", "left")} == described
    assert ctx.records() == records  # nothing is written by a load
    group = ctx.coord.group_for_testing(GROUP)
    assert (group.generation_id, group.leader_id, group.protocol_name) == (gen, leader, "range")
    assert group.subscribed_topics == frozenset({"foo"})
    # Members keep working at the persisted generation.
    assert ctx.heartbeat(m1, gen).error is Errors.NONE
    assert ctx.heartbeat(m2, gen).error is Errors.NONE
    sync = ctx.sync(m2, gen).result(timeout=0)
    assert (sync.error, sync.assignment, sync.protocol_type, sync.protocol_name) == (
        Errors.NONE, m2.encode(), "consumer", "range",
    )
    assert ctx.fetch([T0, T1]).offsets == {T0: (10, 3, "a", Errors.NONE), T1: (11, -1, "b", Errors.NONE)}
    assert ctx.commit({T0: (12, "")}, generation_id=gen, member_id=m1).errors == {T0: Errors.NONE}
    ctx.assert_replay_matches()


def test_reload_restores_static_members():
    ctx = Ctx()
    f = ctx.join(group_instance_id="inst")
    ctx.clock.advance(1)
    r = f.result(timeout=0)
    ctx.sync(r.member_id, r.generation_id, {r.member_id: b"x"}, group_instance_id="inst")
    reload(ctx, 0, 1)
    gen = r.generation_id
    fenced = ctx.commit({T0: (1, "")}, generation_id=gen, member_id="other", group_instance_id="inst")
    assert fenced.errors == {T0: Errors.FENCED_INSTANCE_ID}
    assert ctx.heartbeat(r.member_id, gen, group_instance_id="inst").error is Errors.NONE
    # A restart of the static member after the reload replaces it without a rebalance.
    again = ctx.join(group_instance_id="inst").result(timeout=0)
    assert (again.error, again.generation_id) == (Errors.NONE, gen)
    assert ctx.state() == "Stable"
    ctx.assert_replay_matches()


def test_unload_of_one_partition_leaves_the_other_alone():
    ctx = Ctx(num_partitions=2)
    ctx.commit({T0: (1, "")}, group_id="groupId")     # partition 0
    ctx.commit({T0: (2, "")}, group_id="otherGroup")  # partition 1
    ctx.coord.unload(1, 0)
    assert ctx.state("otherGroup") is None
    assert ctx.state("groupId") == "Empty"
    assert ctx.fetch([T0], group_id="groupId").offsets[T0].offset == 1
    ctx.coord.load(1, 1)
    assert ctx.fetch([T0], group_id="otherGroup").offsets[T0].offset == 2
    ctx.assert_replay_matches(0)
    ctx.assert_replay_matches(1)


# ----------------------------------------------------------------------------------------------
# Timers after a load
# ----------------------------------------------------------------------------------------------
def test_loaded_members_get_fresh_session_timers():
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2, session_timeout_ms=10_000)  # synced at t=1
    ctx.clock.advance(4_999)
    reload(ctx, 0, 1)  # at t=5000: sessions now end at 15000
    ctx.clock.advance(5_000)  # t=10000, past the pre-unload deadline of 10001 soon
    assert ctx.heartbeat(m1, gen).error is Errors.NONE
    ctx.clock.advance(4_999)  # t=14999
    assert [m.member_id for m in describe(ctx).members] == [m1, m2]
    assert ctx.state() == "Stable"
    ctx.clock.advance(1)  # t=15000: m2 never heartbeated since the load
    assert ctx.state() == "PreparingRebalance"
    assert [m.member_id for m in describe(ctx).members] == [m1]
    assert ctx.heartbeat(m1, gen).error is Errors.REBALANCE_IN_PROGRESS
    assert ctx.heartbeat(m2, gen).error is Errors.UNKNOWN_MEMBER_ID
    ctx.assert_replay_matches()


def test_loaded_member_without_heartbeat_is_removed_one_session_timeout_after_load():
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1, session_timeout_ms=10_000)
    ctx.clock.advance(7_000)
    reload(ctx, 0, 1)  # t=7001
    ctx.clock.advance(9_999)
    assert ctx.state() == "Stable"
    ctx.clock.advance(1)
    # The only member expired: the rebalance completes at once with nobody, the group becomes Empty.
    assert ctx.state() == "Empty"
    group = ctx.coord.group_for_testing(GROUP)
    assert group.generation_id == gen + 1
    key, value = ctx.records()[-1]
    assert (key.group, value.generation, value.members, value.current_state_timestamp_ms) == (
        GROUP, gen + 1, (), 17_001,
    )
    ctx.assert_replay_matches()


def test_expiration_task_is_rearmed_from_the_load_and_cancelled_by_the_unload():
    ctx = Ctx(config={"offsets.retention.check.interval.ms": 10_000})
    ctx.commit({T0: (1, "")}, retention_time_ms=1)
    ctx.clock.advance(5_000)
    ctx.coord.unload(0, 0)
    ctx.clock.advance(10_000)  # t=15000: no coordinator, nothing runs, nothing is written
    assert len(ctx.records()) == 1
    ctx.coord.load(0, 1)  # t=15000: next run at 25000
    ctx.clock.advance(9_999)
    assert ctx.fetch([T0]).offsets[T0].offset == 1
    ctx.clock.advance(1)
    assert ctx.fetch([T0]).offsets[T0].offset == -1
    assert ctx.state() is None
    ctx.assert_replay_matches()


# ----------------------------------------------------------------------------------------------
# Leader epochs
# ----------------------------------------------------------------------------------------------
def test_stale_unload_after_a_newer_load_is_ignored():
    ctx = Ctx()
    ctx.commit({T0: (1, "")})
    assert reload(ctx, 0, 1) is not None
    ctx.coord.unload(0, 0)  # epoch 0 < 1: a stale resignation
    assert ctx.coord.partition_state_for_testing(0) == "ACTIVE"
    assert ctx.state() == "Empty"
    assert ctx.commit({T0: (2, "")}).errors == {T0: Errors.NONE}
    ctx.assert_replay_matches()


def test_stale_or_repeated_load_after_an_unload_does_nothing():
    ctx = Ctx()
    ctx.commit({T0: (1, "")})
    ctx.coord.unload(0, 1)
    assert ctx.coord.load(0, 0) is None  # older than the resignation
    assert ctx.coord.load(0, 1) is None  # not newer either
    assert ctx.coord.partition_state_for_testing(0) == "CLOSED"
    assert ctx.state() is None
    assert ctx.commit({T0: (2, "")}).errors == {T0: Errors.NOT_COORDINATOR}
    summary = ctx.coord.load(0, 2)
    assert summary is not None and summary.records == 1
    assert ctx.fetch([T0]).offsets[T0].offset == 1
    ctx.assert_replay_matches()


def test_load_while_active_only_bumps_the_epoch():
    ctx = Ctx()
    ctx.commit({T0: (1, "")})
    assert ctx.coord.load(0, 0) is None
    assert ctx.coord.load(0, 3) is None  # already ACTIVE: no reload, but the epoch moves to 3
    assert ctx.state() == "Empty"
    ctx.coord.unload(0, 2)  # stale now
    assert ctx.coord.partition_state_for_testing(0) == "ACTIVE"
    ctx.coord.unload(0, 3)
    assert ctx.coord.partition_state_for_testing(0) == "CLOSED"


def test_unload_without_epoch_always_applies():
    ctx = Ctx()
    ctx.coord.load(0, 5)  # ignored (ACTIVE), epoch 5
    ctx.coord.unload(0, None)
    assert ctx.coord.partition_state_for_testing(0) == "CLOSED"
    assert ctx.coord.load(0, 6) is not None
    ctx.assert_replay_matches()


# ----------------------------------------------------------------------------------------------
# Unload answers parked requests
# ----------------------------------------------------------------------------------------------
def test_unload_answers_parked_joins_with_not_coordinator():
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2, rebalance_timeout_ms=60_000)
    rejoin = ctx.join(member_id=leader, rebalance_timeout_ms=60_000)
    first = ctx.join_new_dynamic(group_id="fresh")  # parked in the initial rebalance
    assert not rejoin.done() and not first.done()
    records = ctx.records()
    groups = [ctx.coord.group_for_testing(g) for g in (GROUP, "fresh")]
    ctx.coord.unload(0, 0)
    assert [g.state.value for g in groups] == ["Dead", "Dead"]
    assert rejoin.result(timeout=0) == JoinGroupResponse(Errors.NOT_COORDINATOR, member_id=leader)
    assert first.result(timeout=0).error is Errors.NOT_COORDINATOR
    assert first.result(timeout=0).member_id == "client-3"
    assert (ctx.state(), ctx.state("fresh")) == (None, None)
    ctx.clock.advance(100_000)  # every timer of the unloaded shard is gone
    assert ctx.records() == records
    assert ctx.join(member_id=leader).result(timeout=0).error is Errors.NOT_COORDINATOR
    # After a reload the group is the persisted Stable generation; "fresh" was only ever Empty.
    ctx.coord.load(0, 1)
    assert (ctx.state(), ctx.state("fresh")) == ("Stable", "Empty")
    assert ctx.coord.group_for_testing(GROUP).generation_id == gen
    assert ctx.coord.group_for_testing("fresh").generation_id == 0
    ctx.assert_replay_matches()


def test_unload_answers_parked_syncs_with_not_coordinator():
    ctx = Ctx()
    f1 = ctx.join_new_dynamic()
    f2 = ctx.join_new_dynamic()
    ctx.clock.advance(1)
    r1, r2 = f1.result(timeout=0), f2.result(timeout=0)
    assert ctx.state() == "CompletingRebalance"
    follower = r2.member_id if r1.leader == r1.member_id else r1.member_id
    parked = ctx.sync(follower, r1.generation_id)
    assert not parked.done()
    group = ctx.coord.group_for_testing(GROUP)
    ctx.coord.unload(0, 0)
    assert parked.result(timeout=0) == SyncGroupResponse(Errors.NOT_COORDINATOR)
    assert group.state.value == "Dead"
    assert ctx.state() is None


# ----------------------------------------------------------------------------------------------
# A rebalance in flight is lost
# ----------------------------------------------------------------------------------------------
def test_members_of_a_lost_rebalance_must_rejoin_after_reload():
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2, rebalance_timeout_ms=60_000)
    j1 = ctx.join(member_id=m1, rebalance_timeout_ms=60_000)
    j2 = ctx.join(member_id=m2, rebalance_timeout_ms=60_000)
    assert j1.result(timeout=0).generation_id == gen + 1  # CompletingRebalance, nothing persisted yet
    follower_sync = ctx.sync(m2, gen + 1)
    assert not follower_sync.done() and j2.done()
    ctx.coord.unload(0, 0)
    assert follower_sync.result(timeout=0).error is Errors.NOT_COORDINATOR

    # While the new coordinator loads, SyncGroup answers REBALANCE_IN_PROGRESS (old clients do not expect
    # COORDINATOR_LOAD_IN_PROGRESS there), Heartbeat answers NONE blindly, the rest LOAD_IN_PROGRESS.
    ctx.coord.set_loading_for_testing(0, True)
    assert ctx.sync(m1, gen + 1, {m1: b"x"}).result(timeout=0).error is Errors.REBALANCE_IN_PROGRESS
    assert ctx.heartbeat(m2, gen + 1).error is Errors.NONE
    assert ctx.join(member_id=m1).result(timeout=0).error is Errors.COORDINATOR_LOAD_IN_PROGRESS
    assert ctx.commit({T0: (1, "")}, generation_id=gen + 1, member_id=m1).errors == {
        T0: Errors.COORDINATOR_LOAD_IN_PROGRESS
    }
    ctx.coord.set_loading_for_testing(0, False)
    ctx.coord.unload(0, 0)

    ctx.coord.load(0, 1)
    # The group is back at the last persisted generation: the lost generation is unknown.
    assert ctx.state() == "Stable"
    assert ctx.coord.group_for_testing(GROUP).generation_id == gen
    assert ctx.sync(m1, gen + 1, {m1: b"x"}).result(timeout=0).error is Errors.ILLEGAL_GENERATION
    assert ctx.heartbeat(m2, gen + 1).error is Errors.ILLEGAL_GENERATION
    # Rejoining starts a new rebalance that produces generation gen + 1 again.
    j1 = ctx.join(member_id=m1, rebalance_timeout_ms=60_000)
    j2 = ctx.join(member_id=m2, rebalance_timeout_ms=60_000)
    r1, r2 = j1.result(timeout=0), j2.result(timeout=0)
    assert (r1.error, r1.generation_id, r2.generation_id) == (Errors.NONE, gen + 1, gen + 1)
    ctx.assert_replay_matches()


def test_after_reload_a_rejoin_puts_the_others_into_rebalance_in_progress():
    # The leader's parked JoinGroup was answered NOT_COORDINATOR; it finds the new coordinator and
    # rejoins. The follower, still at the persisted generation, gets REBALANCE_IN_PROGRESS on SyncGroup
    # and Heartbeat and rejoins too; the rebalance then completes normally.
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2, rebalance_timeout_ms=60_000)
    parked = ctx.join(member_id=leader, rebalance_timeout_ms=60_000)
    reload(ctx, 0, 1)
    assert parked.result(timeout=0).error is Errors.NOT_COORDINATOR
    assert ctx.state() == "Stable"
    rejoin = ctx.join(member_id=leader, rebalance_timeout_ms=60_000)
    assert not rejoin.done()
    assert ctx.state() == "PreparingRebalance"
    assert ctx.sync(m2, gen).result(timeout=0).error is Errors.REBALANCE_IN_PROGRESS
    assert ctx.heartbeat(m2, gen).error is Errors.REBALANCE_IN_PROGRESS
    assert ctx.commit({T0: (3, "")}, generation_id=gen, member_id=m2).errors == {T0: Errors.NONE}
    follower = ctx.join(member_id=m2, rebalance_timeout_ms=60_000).result(timeout=0)
    assert (follower.error, follower.generation_id) == (Errors.NONE, gen + 1)
    assert rejoin.result(timeout=0).generation_id == gen + 1
    ctx.assert_replay_matches()


def test_first_rebalance_lost_leaves_an_empty_group():
    ctx = Ctx()
    f = ctx.join_new_dynamic()
    ctx.clock.advance(1)
    r = f.result(timeout=0)
    assert (ctx.state(), r.generation_id) == ("CompletingRebalance", 1)
    reload(ctx, 0, 1)
    # Only the empty GroupMetadata (generation 0) written when JoinGroup created the group is durable.
    assert ctx.state() == "Empty"
    assert ctx.coord.group_for_testing(GROUP).generation_id == 0
    assert ctx.sync(r.member_id, 1, {r.member_id: b""}).result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID
    assert ctx.heartbeat(r.member_id, 1).error is Errors.UNKNOWN_MEMBER_ID
    assert ctx.join(member_id=r.member_id).result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID
    again = ctx.join_new_dynamic()
    ctx.clock.advance(1)
    assert again.result(timeout=0).generation_id == 1
    ctx.assert_replay_matches()


# ----------------------------------------------------------------------------------------------
# Over-capacity group after a config change (needs the durable file log)
# ----------------------------------------------------------------------------------------------
def test_group_over_max_size_rebalances_after_load(tmp_path):
    try:
        from raygroups.offsets_log import open_log  # noqa: F401
    except ImportError as e:  # pragma: no cover - the file log is developed in parallel
        pytest.skip(f"file log not available: {e}")
    first = Ctx(config={"group.max.size": 3}, log_dir=tmp_path)
    gen, (m1, m2, m3), leader = first.stable_group(3, session_timeout_ms=30_000, rebalance_timeout_ms=10_000)
    first.commit({T0: (5, "")}, generation_id=gen, member_id=m3)
    first.coord.close()

    ctx = Ctx(config={"group.max.size": 2}, log_dir=tmp_path, now_ms=first.clock.now_ms())
    # Loaded Stable with 3 members > 2: the coordinator rebalances at once so that members commit and rejoin.
    assert ctx.state() == "PreparingRebalance"
    assert len(describe(ctx).members) == 3
    assert ctx.fetch([T0]).offsets[T0].offset == 5
    j1 = ctx.join(member_id=m1, session_timeout_ms=30_000, rebalance_timeout_ms=10_000)
    j2 = ctx.join(member_id=m2, session_timeout_ms=30_000, rebalance_timeout_ms=10_000)
    j3 = ctx.join(member_id=m3, session_timeout_ms=30_000, rebalance_timeout_ms=10_000)
    # The last member to rejoin is over capacity.
    assert j3.result(timeout=0) == JoinGroupResponse(Errors.GROUP_MAX_SIZE_REACHED, member_id="")
    ctx.clock.advance(10_000)  # the rebalance timeout completes the join with the two others
    r1, r2 = j1.result(timeout=0), j2.result(timeout=0)
    assert (r1.error, r1.generation_id, r2.generation_id) == (Errors.NONE, gen + 1, gen + 1)
    assert sorted(m.member_id for m in r1.members + r2.members) == sorted([m1, m2])
    assert ctx.state() == "CompletingRebalance"
    ctx.assert_replay_matches()
    ctx.coord.close()


def test_group_within_max_size_is_stable_after_load(tmp_path):
    first = Ctx(config={"group.max.size": 3}, log_dir=tmp_path)
    first.stable_group(2)
    first.coord.close()
    ctx = Ctx(config={"group.max.size": 2}, log_dir=tmp_path, now_ms=first.clock.now_ms())
    assert ctx.state() == "Stable"
    ctx.assert_replay_matches()
    ctx.coord.close()


def test_every_offset_field_survives_a_restart_on_the_file_log(tmp_path):
    first = Ctx(log_dir=tmp_path, now_ms=1_000)
    first.commit({T0: (10, None, 7), T1: (11, "grüße \U0001F600")}, retention_time_ms=5_000)
    first.clock.advance(1)
    first.commit({T1: (12, "")}, group_id="other")
    f = first.join(group_id="members", group_instance_id="inst")
    first.clock.advance(1)
    r = f.result(timeout=0)
    gen, m1 = r.generation_id, r.member_id
    assert first.sync(m1, gen, {m1: b"a"}, group_id="members", group_instance_id="inst").result(
        timeout=0).error is Errors.NONE
    durable = first.coord.durable_state_for_testing(0).copy()
    records = first.records()
    first.coord.close()
    ctx = Ctx(log_dir=tmp_path, now_ms=first.clock.now_ms())
    assert ctx.records() == records
    assert ctx.coord.durable_state_for_testing(0) == durable
    assert ctx.fetch([T0, T1]).offsets == {T0: (10, 7, "", Errors.NONE), T1: (11, -1, "grüße \U0001F600", Errors.NONE)}
    assert ctx.coord.durable_state_for_testing(0).offset(GROUP, "foo", 0).expire_timestamp_ms == 6_000
    assert ctx.state("members") == "Stable"
    assert ctx.heartbeat(m1, gen, group_id="members", group_instance_id="inst").error is Errors.NONE
    ctx.assert_replay_matches()
    ctx.coord.close()


def test_partition_not_owned_at_start_can_be_loaded_later():
    from raygroups.testing import InProcessCoordinator, ManualClock

    coord = InProcessCoordinator(num_partitions=2, owned_partitions={0}, clock=ManualClock(0))
    assert coord.describe_groups(["otherGroup"]).result(timeout=0)[0].error is Errors.NOT_COORDINATOR
    assert coord.commit_offsets(group_id="otherGroup", offsets={T0: (1, "")}).result(timeout=0).errors == {
        T0: Errors.NOT_COORDINATOR
    }
    assert coord.load(1, 0) is not None
    assert coord.commit_offsets(group_id="otherGroup", offsets={T0: (1, "")}).result(timeout=0).errors == {
        T0: Errors.NONE
    }
    assert coord.group_state_for_testing("otherGroup") == "Empty"


def test_closed_coordinator_answers_coordinator_not_available():
    ctx = Ctx()
    ctx.commit({T0: (1, "")})
    ctx.coord.close()
    assert ctx.coord.partition_state_for_testing(0) == "CLOSED"
    assert ctx.commit({T0: (2, "")}).errors == {T0: Errors.COORDINATOR_NOT_AVAILABLE}
    assert ctx.fetch([T0]).error is Errors.COORDINATOR_NOT_AVAILABLE
    assert ctx.coord.list_groups().result(timeout=0).error is Errors.COORDINATOR_NOT_AVAILABLE
    assert describe(ctx).error is Errors.COORDINATOR_NOT_AVAILABLE
    assert ctx.coord.delete_groups([GROUP]).result(timeout=0) == {GROUP: Errors.COORDINATOR_NOT_AVAILABLE}
