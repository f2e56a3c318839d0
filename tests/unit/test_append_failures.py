"""Append failures on offset writes, deletions and expiration (Kafka's new coordinator mapping,
``CoordinatorOperationExceptionHelper.handleOperationException``): the client sees Kafka's mapped error,
nothing reaches the log, and the in-memory state is exactly what the log says."""

from __future__ import annotations

import pytest

from raygroups import Errors
from tests.unit.helpers import (
    GROUP,
    Ctx,
    consumer_protocols,
    group_tombstone,
    offset_record,
    offset_tombstone,
    stable_static_group,
)

T0, T1 = ("foo", 0), ("foo", 1)
NO_OFFSET = (-1, -1, "", Errors.NONE)

MAPPING = [
    (Errors.NOT_ENOUGH_REPLICAS, Errors.COORDINATOR_NOT_AVAILABLE),
    (Errors.REQUEST_TIMED_OUT, Errors.COORDINATOR_NOT_AVAILABLE),
    (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.COORDINATOR_NOT_AVAILABLE),
    (Errors.NOT_LEADER_OR_FOLLOWER, Errors.NOT_COORDINATOR),
    (Errors.KAFKA_STORAGE_ERROR, Errors.NOT_COORDINATOR),
    (Errors.MESSAGE_TOO_LARGE, Errors.UNKNOWN_SERVER_ERROR),
    (Errors.RECORD_LIST_TOO_LARGE, Errors.UNKNOWN_SERVER_ERROR),
    (Errors.INVALID_FETCH_SIZE, Errors.UNKNOWN_SERVER_ERROR),
    (Errors.NETWORK_EXCEPTION, Errors.COORDINATOR_LOAD_IN_PROGRESS),
    (Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND),  # passes through
]
IDS = [append.name for append, _ in MAPPING]


def fail_next_append(ctx, error, partition=0):
    ctx.coord.fail_next_append_for_testing(partition, error)


@pytest.mark.parametrize("append_error,client_error", MAPPING, ids=IDS)
def test_failed_commit_answers_mapped_error_for_every_partition(append_error, client_error):
    ctx = Ctx()
    ctx.commit({T0: (10, "before")})
    records = ctx.records()
    fail_next_append(ctx, append_error)
    resp = ctx.commit({T0: (20, "after"), T1: (21, "")})
    assert resp.errors == {T0: client_error, T1: client_error}
    assert ctx.records() == records
    assert ctx.fetch([T0, T1]).offsets == {T0: (10, -1, "before", Errors.NONE), T1: NO_OFFSET}
    ctx.assert_replay_matches()
    # Only the next append fails.
    assert ctx.commit({T0: (30, "")}).errors == {T0: Errors.NONE}
    assert ctx.fetch([T0]).offsets[T0].offset == 30
    ctx.assert_replay_matches()


def test_failed_commit_answers_the_mapped_error_even_for_a_too_large_partition():
    # The failed operation's response is replaced by the mapped error (Kafka fails the whole write).
    ctx = Ctx(config={"offset.metadata.max.bytes": 1})
    fail_next_append(ctx, Errors.NOT_ENOUGH_REPLICAS)
    resp = ctx.commit({T0: (1, "too long"), T1: (2, "")})
    assert resp.errors == {T0: Errors.COORDINATOR_NOT_AVAILABLE, T1: Errors.COORDINATOR_NOT_AVAILABLE}
    assert ctx.records() == []
    ctx.assert_replay_matches()


def test_failed_commit_does_not_create_the_simple_group():
    ctx = Ctx()
    fail_next_append(ctx, Errors.NOT_LEADER_OR_FOLLOWER)
    assert ctx.commit({T0: (1, "")}).errors == {T0: Errors.NOT_COORDINATOR}
    assert ctx.state() is None
    assert ctx.records() == []
    assert ctx.coord.list_groups().result(timeout=0).groups == []
    assert ctx.fetch(None).offsets == {}
    ctx.assert_replay_matches()
    # The append failure is not sticky.
    assert ctx.commit({T0: (1, "")}).errors == {T0: Errors.NONE}
    assert ctx.state() == "Empty"


def test_failed_commit_of_a_member_leaves_the_group_unchanged():
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2)
    ctx.commit({T0: (5, "")}, generation_id=gen, member_id=m1)
    records = ctx.records()
    fail_next_append(ctx, Errors.REQUEST_TIMED_OUT)
    assert ctx.commit({T0: (6, "")}, generation_id=gen, member_id=m1).errors == {T0: Errors.COORDINATOR_NOT_AVAILABLE}
    assert ctx.records() == records
    assert ctx.state() == "Stable"
    assert ctx.coord.group_for_testing(GROUP).generation_id == gen
    assert ctx.heartbeat(m1, gen).error is Errors.NONE
    assert ctx.fetch([T0]).offsets[T0].offset == 5
    ctx.assert_replay_matches()


def test_failed_delete_groups_keeps_the_group_and_its_offsets():
    ctx = Ctx()
    ctx.commit({T0: (1, "a"), T1: (2, "b")})
    records = ctx.records()
    fail_next_append(ctx, Errors.NOT_ENOUGH_REPLICAS)
    assert ctx.coord.delete_groups([GROUP]).result(timeout=0) == {GROUP: Errors.COORDINATOR_NOT_AVAILABLE}
    assert ctx.records() == records
    assert ctx.state() == "Empty"
    assert ctx.fetch(None).offsets == {T0: (1, -1, "a", Errors.NONE), T1: (2, -1, "b", Errors.NONE)}
    ctx.assert_replay_matches()
    # Retrying succeeds.
    assert ctx.coord.delete_groups([GROUP]).result(timeout=0) == {GROUP: Errors.NONE}
    assert ctx.state() is None
    ctx.assert_replay_matches()


def test_failed_delete_groups_of_a_group_with_metadata_restores_it_as_loaded():
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.commit({T0: (1, "")}, generation_id=gen, member_id=m1)
    ctx.leave([(m1, None)])
    fail_next_append(ctx, Errors.KAFKA_STORAGE_ERROR)
    assert ctx.coord.delete_groups([GROUP]).result(timeout=0) == {GROUP: Errors.NOT_COORDINATOR}
    assert ctx.state() == "Empty"
    group = ctx.coord.group_for_testing(GROUP)
    assert (group.generation_id, group.protocol_type) == (gen + 1, "consumer")
    assert ctx.fetch([T0]).offsets[T0].offset == 1
    ctx.assert_replay_matches()


def test_failed_offset_delete_keeps_the_offsets():
    ctx = Ctx()
    ctx.commit({T0: (1, ""), T1: (2, "")})
    records = ctx.records()
    fail_next_append(ctx, Errors.MESSAGE_TOO_LARGE)
    resp = ctx.coord.delete_offsets(group_id=GROUP, partitions=[T0]).result(timeout=0)
    assert resp.error is Errors.UNKNOWN_SERVER_ERROR
    assert ctx.records() == records
    assert set(ctx.fetch(None).offsets) == {T0, T1}
    ctx.assert_replay_matches()


def test_failed_expiration_keeps_the_offsets_and_the_next_run_retries():
    ctx = Ctx(config={"offsets.retention.minutes": 1, "offsets.retention.check.interval.ms": 10_000})
    ctx.commit({T0: (1, "")})
    ctx.clock.advance(50_000)  # fires the run at 10 s at t=50 s; the next one is at 60 s
    fail_next_append(ctx, Errors.NOT_ENOUGH_REPLICAS)
    ctx.clock.advance(10_000)  # t=60 s: everything expires, but the append fails
    assert ctx.records() == [offset_record(GROUP, "foo", 0, 1, 0)]
    assert ctx.state() == "Empty"
    assert ctx.fetch([T0]).offsets[T0].offset == 1
    ctx.assert_replay_matches()
    ctx.clock.advance(10_000)  # the task was re-armed despite the failure
    assert ctx.records() == [offset_record(GROUP, "foo", 0, 1, 0), offset_tombstone(GROUP, "foo", 0),
                             group_tombstone(GROUP)]
    assert ctx.state() is None
    ctx.assert_replay_matches()


def test_failed_expiration_of_a_stable_consumer_group_keeps_it_stable():
    ctx = Ctx(config={"offsets.retention.minutes": 1, "offsets.retention.check.interval.ms": 60_000})
    gen, (m1,), _ = ctx.stable_group(1, protocols=consumer_protocols("foo"), session_timeout_ms=600_000,
                                     rebalance_timeout_ms=600_000)
    ctx.commit({("bar", 0): (1, "")}, generation_id=gen, member_id=m1)  # t=1
    ctx.clock.advance(59_999)  # t=60000: retention not reached for the offset committed at t=1
    fail_next_append(ctx, Errors.NOT_LEADER_OR_FOLLOWER)
    ctx.clock.advance(60_000)  # t=120000: bar-0 expires, the append fails
    assert ctx.state() == "Stable"
    assert ctx.heartbeat(m1, gen).error is Errors.NONE
    assert ctx.fetch([("bar", 0)]).offsets[("bar", 0)].offset == 1
    assert ctx.records()[-1] == offset_record(GROUP, "bar", 0, 1, 1)
    ctx.assert_replay_matches()
    ctx.heartbeat(m1, gen)
    ctx.clock.advance(60_000)  # the next run succeeds
    assert ctx.records()[-1] == offset_tombstone(GROUP, "bar", 0)
    assert ctx.state() == "Stable"
    ctx.assert_replay_matches()


def test_failed_delete_groups_answers_every_group_of_the_partition_with_the_mapped_error():
    # Kafka fails the whole write of that coordinator partition: every group in it gets the error,
    # including one that would have been NON_EMPTY_GROUP; groups of other partitions are unaffected.
    ctx = Ctx(num_partitions=2)
    ctx.commit({T0: (1, "")}, group_id="groupId")           # partition 0
    ctx.stable_group(1, group_id="my-group")                # partition 0 as well (hash 12 % 2)
    ctx.commit({T0: (2, "")}, group_id="otherGroup")        # partition 1
    records0, records1 = ctx.records(0), ctx.records(1)
    fail_next_append(ctx, Errors.NOT_ENOUGH_REPLICAS, partition=0)
    result = ctx.coord.delete_groups(["groupId", "my-group", "otherGroup"]).result(timeout=0)
    assert result == {
        "groupId": Errors.COORDINATOR_NOT_AVAILABLE,
        "my-group": Errors.COORDINATOR_NOT_AVAILABLE,
        "otherGroup": Errors.NONE,
    }
    assert ctx.records(0) == records0
    assert ctx.records(1)[len(records1):] == [offset_tombstone("otherGroup", "foo", 0), group_tombstone("otherGroup")]
    assert (ctx.state("groupId"), ctx.state("my-group"), ctx.state("otherGroup")) == ("Empty", "Stable", None)
    ctx.assert_replay_matches(0)
    ctx.assert_replay_matches(1)


def test_failed_simple_commit_then_fetch_all_sees_nothing_and_list_is_empty_after_reload():
    ctx = Ctx()
    fail_next_append(ctx, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    assert ctx.commit({T0: (1, "")}).errors == {T0: Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
    ctx.coord.unload(0, 0)
    ctx.coord.load(0, 1)
    assert ctx.state() is None
    assert ctx.fetch(None).offsets == {}
    ctx.assert_replay_matches()


def test_failed_delete_groups_keeps_the_pending_member_of_the_group():
    # Kafka deletes a group by replaying its tombstone into the timeline map; a failed append reverts
    # the map to the very same group object, so a KIP-394 pending member can still complete its join.
    ctx = Ctx()
    first = ctx.join().result(timeout=0)
    assert first.error is Errors.MEMBER_ID_REQUIRED
    records = ctx.records()
    fail_next_append(ctx, Errors.NOT_ENOUGH_REPLICAS)
    assert ctx.coord.delete_groups([GROUP]).result(timeout=0) == {GROUP: Errors.COORDINATOR_NOT_AVAILABLE}
    assert ctx.records() == records
    second = ctx.join(member_id=first.member_id)
    ctx.clock.advance(1)
    r = second.result(timeout=0)
    assert (r.error, r.member_id, r.generation_id, r.leader) == (Errors.NONE, first.member_id, 1, first.member_id)
    assert ctx.state() == "CompletingRebalance"
    ctx.assert_replay_matches()


def test_failed_expiration_keeps_the_pending_member_of_the_group():
    ctx = Ctx(config={"offsets.retention.check.interval.ms": 10_000})
    first = ctx.join(session_timeout_ms=30_000).result(timeout=0)
    fail_next_append(ctx, Errors.NOT_LEADER_OR_FOLLOWER)
    ctx.clock.advance(10_000)  # the Empty group without offsets would be removed, but the append fails
    assert ctx.state() == "Empty"
    second = ctx.join(member_id=first.member_id, session_timeout_ms=30_000)
    ctx.clock.advance(1)
    assert second.result(timeout=0).error is Errors.NONE
    ctx.assert_replay_matches()


def test_successful_delete_forgets_the_pending_member():
    ctx = Ctx()
    first = ctx.join(session_timeout_ms=5_000).result(timeout=0)
    assert ctx.coord.delete_groups([GROUP]).result(timeout=0) == {GROUP: Errors.NONE}
    ctx.clock.advance(5_000)  # the pending member's old timer is harmless
    assert ctx.join(member_id=first.member_id).result(timeout=0).error is Errors.UNKNOWN_MEMBER_ID
    assert ctx.state() is None
    ctx.assert_replay_matches()


def test_a_batch_failing_after_the_shard_stepped_down_still_answers_a_static_rejoin():
    """A static member rejoining a Stable group is answered only by its write's callback; if the shard is
    unloaded (it stepped down: a newer leader exists) before its batch fails, the request still gets the
    error instead of waiting forever."""
    ctx = Ctx()
    stable_static_group(ctx, ["i1", "i2"])
    runtime = ctx.coord._runtime
    # Drive it as the actor does (no synchronous append): the batch stays open until sealed below.
    runtime._append, runtime._on_pending = None, lambda c: None
    partition = runtime.contexts[0]
    rejoin = ctx.join(member_id="", group_instance_id="i1")
    records, ops = runtime.seal_batch(partition)
    assert records and not rejoin.done()
    runtime.step_down(0)
    assert partition.state == "FAILED"
    runtime.batch_failed(partition, ops, Errors.NOT_COORDINATOR)
    assert rejoin.done() and rejoin.result(timeout=0).error is Errors.NOT_COORDINATOR
