"""Offset expiration and group cleanup (Kafka's GroupCoordinatorShard.cleanupGroupMetadata,
OffsetMetadataManager.cleanupExpiredOffsets, KIP-211; Kafka's OffsetMetadataManagerTest
#testCleanupExpiredOffsets*, ClassicGroupTest#testOffsetExpirationCondition, GroupCoordinatorShardTest
#testCleanupGroupMetadata are the models).

Every test uses a retention of 1 minute and a check interval of 10 s: the task runs at 10 s, 20 s, ...
after the partition was loaded (at t=0)."""

from __future__ import annotations

from raygroups import Errors
from tests.unit.helpers import (
    GROUP,
    Ctx,
    consumer_protocols,
    group_tombstone,
    offset_record,
    offset_tombstone,
)

RETENTION_MS = 60_000
CHECK_MS = 10_000
CONFIG = {"offsets.retention.minutes": 1, "offsets.retention.check.interval.ms": CHECK_MS}
LONG = {"session_timeout_ms": 600_000, "rebalance_timeout_ms": 600_000}
T0, T1 = ("foo", 0), ("foo", 1)
BAR = ("bar", 0)


def new_ctx(**kw):
    return Ctx(config=dict(CONFIG), **kw)


def advance_to(ctx, t_ms):
    """Move the clock to ``t_ms`` in steps of at most 1 s, aligned on whole seconds, so that the periodic
    task fires at its deadlines (ManualClock re-arms a timer from the time it fired at, so one big jump
    would shift the schedule)."""
    while ctx.clock.now_ms() < t_ms:
        now = ctx.clock.now_ms()
        ctx.clock.advance(min(t_ms, (now // 1_000 + 1) * 1_000) - now)


def committed(ctx, group_id=GROUP):
    return set(ctx.fetch(None, group_id=group_id).offsets)


def stable_consumer_group(ctx, *topics, n=1):
    gen, members, leader = ctx.stable_group(n, protocols=consumer_protocols(*topics), **LONG)
    assert ctx.state() == "Stable"
    return gen, members, leader


# ----------------------------------------------------------------------------------------------
# The periodic task
# ----------------------------------------------------------------------------------------------
def test_simple_group_offsets_expire_at_the_first_run_after_retention():
    ctx = new_ctx()
    advance_to(ctx, 5_000)
    ctx.commit({T0: (1, "")})
    advance_to(ctx, 69_999)  # runs at 10 s..60 s: at 60 s only 55 s have passed
    assert committed(ctx) == {T0}
    assert ctx.records() == [offset_record(GROUP, "foo", 0, 1, 5_000)]
    advance_to(ctx, 70_000)
    assert committed(ctx) == set()
    # The last offset of an Empty group is gone: the group is removed with a GroupMetadata tombstone
    # (new coordinator: always, even for a group that never wrote GroupMetadata).
    assert ctx.records() == [
        offset_record(GROUP, "foo", 0, 1, 5_000),
        offset_tombstone(GROUP, "foo", 0),
        group_tombstone(GROUP),
    ]
    assert ctx.state() is None
    ctx.assert_replay_matches()
    # The task keeps running and has nothing more to do.
    advance_to(ctx, 200_000)
    assert len(ctx.records()) == 3


def test_simple_group_uses_each_offsets_commit_timestamp():
    ctx = new_ctx()
    ctx.commit({T0: (1, "")})
    advance_to(ctx, 30_000)
    ctx.commit({T1: (2, "")})
    advance_to(ctx, 60_000)
    assert committed(ctx) == {T1}
    assert ctx.records()[2:] == [offset_tombstone(GROUP, "foo", 0)]
    assert ctx.state() == "Empty"
    advance_to(ctx, 89_999)
    assert committed(ctx) == {T1}
    advance_to(ctx, 90_000)
    assert ctx.records()[3:] == [offset_tombstone(GROUP, "foo", 1), group_tombstone(GROUP)]
    assert ctx.state() is None
    ctx.assert_replay_matches()


def test_a_new_commit_resets_the_retention_of_that_offset():
    ctx = new_ctx()
    ctx.commit({T0: (1, "")})
    advance_to(ctx, 50_000)
    ctx.commit({T0: (2, "")})
    advance_to(ctx, 100_000)
    assert ctx.fetch([T0]).offsets[T0].offset == 2
    advance_to(ctx, 110_000)
    assert committed(ctx) == set()
    ctx.assert_replay_matches()


# ----------------------------------------------------------------------------------------------
# Explicit expire timestamps (retention_time_ms)
# ----------------------------------------------------------------------------------------------
def test_explicit_expire_timestamp_overrides_the_retention_both_ways():
    ctx = new_ctx()
    ctx.commit({T0: (1, "")}, retention_time_ms=1_000)
    ctx.commit({T1: (2, "")}, retention_time_ms=100_000)
    advance_to(ctx, 10_000)
    assert committed(ctx) == {T1}
    assert ctx.records()[2:] == [offset_tombstone(GROUP, "foo", 0)]
    advance_to(ctx, 99_999)  # past the broker retention, but the explicit expiry is later
    assert committed(ctx) == {T1}
    advance_to(ctx, 100_000)
    assert committed(ctx) == set()
    assert ctx.records()[3:] == [offset_tombstone(GROUP, "foo", 1), group_tombstone(GROUP)]
    ctx.assert_replay_matches()


def test_explicit_expire_timestamp_does_not_expire_a_subscribed_topic():
    ctx = new_ctx()
    gen, (m1,), _ = stable_consumer_group(ctx, "foo")
    ctx.commit({T0: (1, ""), BAR: (2, "")}, generation_id=gen, member_id=m1, retention_time_ms=1_000)
    advance_to(ctx, 10_000)
    assert committed(ctx) == {T0}
    assert ctx.records()[-1] == offset_tombstone(GROUP, "bar", 0)
    assert ctx.state() == "Stable"
    ctx.assert_replay_matches()


# ----------------------------------------------------------------------------------------------
# The expiration condition and base timestamp per group (Kafka's ClassicGroup.offsetExpirationCondition,
# OffsetExpirationConditionImpl)
# ----------------------------------------------------------------------------------------------
def test_empty_group_with_protocol_type_counts_from_when_it_became_empty():
    ctx = new_ctx()
    gen, (m1,), _ = stable_consumer_group(ctx, "foo")
    ctx.commit({T0: (1, ""), BAR: (2, "")}, generation_id=gen, member_id=m1)  # at t=1
    advance_to(ctx, 30_000)
    ctx.leave([(m1, None)])
    assert ctx.state() == "Empty"
    before = len(ctx.records())
    advance_to(ctx, 89_999)  # the commit timestamp base would have expired them at 70 s
    assert committed(ctx) == {T0, BAR}
    assert len(ctx.records()) == before
    advance_to(ctx, 90_000)
    assert committed(ctx) == set()
    assert ctx.records()[before:] == [
        offset_tombstone(GROUP, "foo", 0),
        offset_tombstone(GROUP, "bar", 0),
        group_tombstone(GROUP),
    ]
    assert ctx.state() is None
    ctx.assert_replay_matches()


def test_empty_group_state_timestamp_survives_a_reload():
    ctx = new_ctx()
    gen, (m1,), _ = stable_consumer_group(ctx, "foo")
    ctx.commit({T0: (1, "")}, generation_id=gen, member_id=m1)
    advance_to(ctx, 30_000)
    ctx.leave([(m1, None)])
    advance_to(ctx, 45_000)
    ctx.coord.unload(0, 0)
    ctx.coord.load(0, 1)  # the task is re-armed: 55 s, 65 s, ...
    assert ctx.state() == "Empty"
    advance_to(ctx, 85_000)
    assert committed(ctx) == {T0}
    advance_to(ctx, 95_000)
    assert committed(ctx) == set()
    assert ctx.state() is None
    ctx.assert_replay_matches()


def test_stable_consumer_group_expires_only_unsubscribed_topics_from_commit_time():
    ctx = new_ctx()
    gen, (m1, m2), _ = stable_consumer_group(ctx, "foo", n=2)
    ctx.commit({T0: (1, ""), BAR: (2, ""), ("baz", 3): (3, "")}, generation_id=gen, member_id=m1)  # t=1
    before = len(ctx.records())
    advance_to(ctx, 60_000)
    assert len(ctx.records()) == before
    advance_to(ctx, 70_000)
    assert ctx.records()[before:] == [offset_tombstone(GROUP, "bar", 0), offset_tombstone(GROUP, "baz", 3)]
    assert committed(ctx) == {T0}
    assert ctx.state() == "Stable"
    advance_to(ctx, 300_000)  # the subscribed topic never expires while the group is Stable
    assert committed(ctx) == {T0}
    assert ctx.state() == "Stable"
    ctx.assert_replay_matches()


def test_stable_consumer_group_with_unparseable_subscription_never_expires():
    ctx = new_ctx()
    gen, (m1,), _ = ctx.stable_group(1, protocols=(("range", b"opaque"),), **LONG)
    ctx.commit({BAR: (2, "")}, generation_id=gen, member_id=m1)
    before = ctx.records()
    advance_to(ctx, 300_000)
    assert ctx.records() == before
    assert committed(ctx) == {BAR}
    ctx.assert_replay_matches()


def test_non_consumer_protocol_group_never_expires_while_not_empty():
    ctx = new_ctx()
    gen, (m1,), _ = ctx.stable_group(1, protocol_type="connect", **LONG)
    ctx.commit({BAR: (2, "")}, generation_id=gen, member_id=m1)
    before = ctx.records()
    advance_to(ctx, 300_000)
    assert ctx.records() == before
    assert committed(ctx) == {BAR}
    assert ctx.state() == "Stable"
    ctx.assert_replay_matches()


def test_never_expire_while_preparing_rebalance():
    ctx = new_ctx()
    gen, (m1, m2), leader = stable_consumer_group(ctx, "foo", n=2)
    ctx.commit({BAR: (2, "")}, generation_id=gen, member_id=m2)
    ctx.join(member_id=leader, protocols=consumer_protocols("foo"), **LONG)
    assert ctx.state() == "PreparingRebalance"
    before = ctx.records()
    advance_to(ctx, 300_000)
    assert ctx.state() == "PreparingRebalance"
    assert ctx.records() == before
    assert committed(ctx) == {BAR}
    ctx.assert_replay_matches()


def test_never_expire_while_completing_rebalance():
    ctx = new_ctx()
    ctx.commit({BAR: (2, "")}, retention_time_ms=1_000)  # even an explicit expiry waits
    ctx.join_new_dynamic(protocols=consumer_protocols("foo"), **LONG)
    ctx.clock.advance(1)
    assert ctx.state() == "CompletingRebalance"
    before = ctx.records()
    advance_to(ctx, 300_000)
    assert ctx.state() == "CompletingRebalance"
    assert ctx.records() == before
    assert committed(ctx) == {BAR}
    ctx.assert_replay_matches()


def test_offsets_expire_once_the_rebalance_is_over():
    ctx = new_ctx()
    ctx.commit({BAR: (2, "")})
    f = ctx.join_new_dynamic(protocols=consumer_protocols("foo"), **LONG)
    ctx.clock.advance(1)
    r = f.result(timeout=0)
    advance_to(ctx, 100_000)
    assert committed(ctx) == {BAR}
    assert ctx.sync(r.member_id, r.generation_id, {r.member_id: b""}).result(timeout=0).error is Errors.NONE
    assert ctx.state() == "Stable"
    advance_to(ctx, 110_000)
    assert committed(ctx) == set()
    assert ctx.records()[-1] == offset_tombstone(GROUP, "bar", 0)
    assert ctx.state() == "Stable"  # a Stable group is never removed
    ctx.assert_replay_matches()


# ----------------------------------------------------------------------------------------------
# Removal of Empty groups without offsets
# ----------------------------------------------------------------------------------------------
def test_empty_group_without_offsets_is_removed_at_the_next_run():
    ctx = new_ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.leave([(m1, None)])
    assert ctx.state() == "Empty"
    before = len(ctx.records())
    advance_to(ctx, 9_999)
    assert ctx.state() == "Empty"
    advance_to(ctx, 10_000)
    assert ctx.records()[before:] == [group_tombstone(GROUP)]
    assert ctx.state() is None
    assert ctx.coord.durable_state_for_testing(0).groups == {}
    ctx.assert_replay_matches()


def test_group_created_by_join_whose_pending_member_expired_is_removed():
    ctx = new_ctx()
    first = ctx.join(session_timeout_ms=1_000).result(timeout=0)
    assert first.error is Errors.MEMBER_ID_REQUIRED
    assert ctx.state() == "Empty"
    advance_to(ctx, 10_000)
    assert ctx.state() is None
    assert ctx.records()[-1] == group_tombstone(GROUP)
    ctx.assert_replay_matches()


def test_simple_group_emptied_by_offset_delete_is_removed():
    ctx = new_ctx()
    ctx.commit({T0: (1, "")})
    ctx.coord.delete_offsets(group_id=GROUP, partitions=[T0]).result(timeout=0)
    assert ctx.state() == "Empty"
    advance_to(ctx, 10_000)
    assert ctx.records() == [
        offset_record(GROUP, "foo", 0, 1, 0), offset_tombstone(GROUP, "foo", 0), group_tombstone(GROUP),
    ]
    assert ctx.state() is None
    ctx.assert_replay_matches()


def test_only_empty_groups_are_removed_and_groups_are_independent():
    ctx = new_ctx()
    ctx.commit({T0: (1, "")}, group_id="old")
    advance_to(ctx, 40_000)
    ctx.commit({T0: (1, "")}, group_id="young")
    ctx.stable_group(1, group_id="alive", **LONG)
    advance_to(ctx, 60_000)
    assert ctx.state("old") is None
    assert ctx.state("young") == "Empty"
    assert ctx.state("alive") == "Stable"
    assert ctx.records()[-2:] == [offset_tombstone("old", "foo", 0), group_tombstone("old")]
    ctx.assert_replay_matches()


def test_expired_group_can_be_recreated():
    ctx = new_ctx()
    ctx.commit({T0: (1, "")})
    advance_to(ctx, 60_000)
    assert ctx.state() is None
    assert ctx.commit({T0: (7, "")}).errors == {T0: Errors.NONE}
    assert ctx.state() == "Empty"
    assert ctx.fetch([T0]).offsets[T0].offset == 7
    ctx.assert_replay_matches()
    ctx.coord.unload(0, 0)
    ctx.coord.load(0, 1)
    assert ctx.fetch([T0]).offsets[T0].offset == 7


def test_loaded_stable_consumer_group_knows_its_subscriptions_for_expiration():
    ctx = new_ctx()
    gen, (m1,), _ = stable_consumer_group(ctx, "foo")
    ctx.commit({T0: (1, ""), BAR: (2, "")}, generation_id=gen, member_id=m1)  # t=1
    advance_to(ctx, 5_000)
    ctx.coord.unload(0, 0)
    ctx.coord.load(0, 1)  # runs at 15 s, 25 s, ...
    for t in range(10_000, 80_000, 10_000):  # keep the member alive across the fresh session timer
        advance_to(ctx, t)
        assert ctx.heartbeat(m1, gen).error is Errors.NONE
    assert committed(ctx) == {T0}
    assert ctx.records()[-1] == offset_tombstone(GROUP, "bar", 0)
    assert ctx.state() == "Stable"
    ctx.assert_replay_matches()
