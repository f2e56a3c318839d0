"""Handlers return what they write (coordinator.result.Result, after Kafka's CoordinatorResult): the records
and the response, with the durable state untouched until the runtime applies them; reads write nothing;
requests reach handlers through coordinator.api._handle."""

from __future__ import annotations

import inspect

from raygroups.coordinator import shard as shard_module
from raygroups.coordinator.api import OffsetDeleteRequest, _handle
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import (
    Deferred,
    HeartbeatRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from raygroups.coordinator.records import OffsetCommitKey, new_offset_commit_tombstone_record
from raygroups.coordinator.result import Result

from tests.unit.helpers import GROUP, Ctx


def _shard(ctx):
    return ctx.coord._shard(0)


def test_a_commit_returns_its_records_and_changes_the_durable_state_only_when_applied():
    ctx = Ctx()
    shard = _shard(ctx)
    result = shard.commit_offsets(OffsetCommitRequest(GROUP, {("t", 0): (7, "m", -1)}, -1, "", None))
    assert isinstance(result, Result)
    assert result.response.errors == {("t", 0): Errors.NONE}
    (key, value), = result.records
    assert key == OffsetCommitKey(GROUP, "t", 0) and value.offset == 7 and value.metadata == "m"
    assert shard.state.offset(GROUP, "t", 0) is None  # returned, not applied
    undo: list[tuple] = []
    shard.apply(result.records, undo)
    assert shard.state.offset(GROUP, "t", 0).offset == 7
    shard.revert(undo)
    assert shard.state.offset(GROUP, "t", 0) is None


def test_through_the_runtime_the_same_commit_is_durable_and_replays_to_the_live_state():
    ctx = Ctx()
    assert ctx.commit({("t", 0): (7, "")}).errors == {("t", 0): Errors.NONE}
    assert _shard(ctx).state.offset(GROUP, "t", 0).offset == 7
    ctx.assert_replay_matches()


def test_reads_and_rejections_write_nothing():
    ctx = Ctx()
    generation, (member_id,), _ = ctx.stable_group(1)
    shard = _shard(ctx)
    assert _handle(shard, OffsetFetchRequest(GROUP, None, True), Deferred()).records == []
    assert _handle(shard, HeartbeatRequest(GROUP, generation, member_id, None), Deferred()).records == []
    stale = shard.commit_offsets(OffsetCommitRequest(GROUP, {("t", 0): (1, "", -1)}, generation + 1, member_id, None))
    assert stale.records == [] and stale.response.errors == {("t", 0): Errors.ILLEGAL_GENERATION}


def test_the_last_member_leaving_writes_the_empty_group_through_the_leave_result():
    ctx = Ctx()
    generation, (member_id,), _ = ctx.stable_group(1)
    result = _shard(ctx).leave_group(LeaveGroupRequest(GROUP, ((member_id, None),), "bye"))
    assert result.response.error is Errors.NONE
    (key, value), = result.records  # completing the join of an empty group: generation + 1, no members
    assert value.generation == generation + 1 and value.members == ()


def test_deleting_offsets_named_twice_writes_one_tombstone():
    ctx = Ctx()
    ctx.commit({("t", 0): (3, "")})
    result = _handle(_shard(ctx), OffsetDeleteRequest(GROUP, (("t", 0), ("t", 0))), Deferred())
    assert result.records == [new_offset_commit_tombstone_record(GROUP, "t", 0)]


def test_the_shard_has_no_operation_accumulator():
    """Nothing is written behind a handler's back: no shard-level record buffer to push into."""
    source = inspect.getsource(shard_module)
    assert "_op_records" not in source and "take_operation" not in source and "def _write" not in source


def test_a_handler_that_forgets_its_result_fails_loudly_instead_of_dropping_records(monkeypatch):
    ctx = Ctx()
    generation, (member_id,), _ = ctx.stable_group(1)
    monkeypatch.setattr(type(_shard(ctx)), "leave_group", lambda self, req: None)
    response = ctx.leave([(member_id, None)])
    assert response.error is Errors.UNKNOWN_SERVER_ERROR
    assert isinstance(ctx.coord._runtime.last_exception, TypeError)
    assert "LeaveGroupRequest handler returned NoneType, not a Result" in str(ctx.coord._runtime.last_exception)
