"""The limits that protect a shard's memory beyond Kafka's own (``group.max.size``, metadata and
request sizes): ``group.classic.max.groups`` and ``group.classic.max.pending.members``, both per
coordinator shard. A request refused by a limit changes nothing."""

from __future__ import annotations

import pytest
from raygroups.coordinator.config import CoordinatorConfig

from raygroups import Errors
from tests.unit.helpers import Ctx, replay_matches_after_test


@pytest.fixture(autouse=True)
def _replay_matches_after_each_test(monkeypatch):
    yield from replay_matches_after_test(monkeypatch)


def pending(ctx):
    count, recount = ctx.coord.pending_member_count_for_testing(0)
    assert count == recount
    return count


def test_defaults_and_validation():
    cfg = CoordinatorConfig()
    assert (cfg.group_classic_max_groups, cfg.group_classic_max_pending_members) == (100_000, 100_000)
    with pytest.raises(ValueError, match=r"group.classic.max.groups must be in \[1, 2147483647\], got 0"):
        CoordinatorConfig.from_properties({"group.classic.max.groups": 0})
    with pytest.raises(TypeError, match="group.classic.max.pending.members must be an int"):
        CoordinatorConfig.from_properties({"group.classic.max.pending.members": "10"})


def test_join_creating_a_group_beyond_the_limit_is_refused_and_changes_nothing():
    ctx = Ctx(config={"group.classic.max.groups": 2})
    ctx.stable_group(1, group_id="a")
    ctx.commit({("t", 0): (5, "", -1)}, group_id="b")  # a simple group counts as well
    before = ctx.records()
    r = ctx.join(group_id="c").result(timeout=0)
    assert (r.error, r.member_id) == (Errors.GROUP_MAX_SIZE_REACHED, "")
    r = ctx.join(group_id="c", group_instance_id="i").result(timeout=0)
    assert r.error is Errors.GROUP_MAX_SIZE_REACHED
    assert ctx.coord.group_for_testing("c") is None
    assert ctx.records() == before
    # Existing groups keep working: a new member of "a", a commit to "b".
    assert ctx.join(group_id="a").result(timeout=0).error is Errors.MEMBER_ID_REQUIRED
    assert ctx.commit({("t", 0): (6, "", -1)}, group_id="b").errors == {("t", 0): Errors.NONE}


def test_simple_commit_creating_a_group_beyond_the_limit_is_refused():
    ctx = Ctx(config={"group.classic.max.groups": 1})
    ctx.commit({("t", 0): (5, "", -1)}, group_id="a")
    before = ctx.records()
    r = ctx.commit({("t", 0): (7, "", -1), ("t", 1): (8, "", -1)}, group_id="b")
    assert r.errors == {("t", 0): Errors.GROUP_MAX_SIZE_REACHED, ("t", 1): Errors.GROUP_MAX_SIZE_REACHED}
    assert ctx.records() == before
    assert ctx.fetch([("t", 0)], group_id="b").offsets[("t", 0)].offset == -1


def test_a_deleted_group_frees_its_place():
    ctx = Ctx(config={"group.classic.max.groups": 1})
    ctx.commit({("t", 0): (5, "", -1)}, group_id="a")
    assert ctx.commit({("t", 0): (1, "", -1)}, group_id="b").errors[("t", 0)] is Errors.GROUP_MAX_SIZE_REACHED
    assert ctx.coord.delete_groups(["a"]).result(timeout=0) == {"a": Errors.NONE}
    assert ctx.commit({("t", 0): (1, "", -1)}, group_id="b").errors[("t", 0)] is Errors.NONE


def test_pending_ids_beyond_the_limit_are_refused_with_a_retriable_error_until_one_expires():
    ctx = Ctx(config={"group.classic.max.pending.members": 2})
    first = [ctx.join(group_id=g).result(timeout=0) for g in ("a", "b")]
    assert [r.error for r in first] == [Errors.MEMBER_ID_REQUIRED] * 2
    assert pending(ctx) == 2
    before = ctx.records()
    r = ctx.join(group_id="a").result(timeout=0)
    assert (r.error, r.member_id) == (Errors.COORDINATOR_NOT_AVAILABLE, "")
    r = ctx.join(group_id="c").result(timeout=0)
    assert r.error is Errors.COORDINATOR_NOT_AVAILABLE
    assert ctx.coord.group_for_testing("c") is None  # the refused join created no group
    assert pending(ctx) == 2
    # Static members and known ids need no pending id: not limited.
    static = ctx.join(group_id="a", group_instance_id="s")
    assert pending(ctx) == 2
    # A pending id used for the second JoinGroup stops being pending: room for another.
    second = ctx.join(group_id="a", member_id=first[0].member_id)
    assert pending(ctx) == 1
    assert ctx.join(group_id="c").result(timeout=0).error is Errors.MEMBER_ID_REQUIRED
    assert pending(ctx) == 2
    ctx.clock.advance(1)  # the initial rebalance delay is 0: "a" completes its join
    assert static.result(timeout=0).error is Errors.NONE
    assert second.result(timeout=0).error is Errors.NONE
    assert len(ctx.records()) > len(before)
    # Unused pending ids expire after their session timeout (KIP-394), freeing the shard.
    ctx.clock.advance(10_000)
    assert pending(ctx) == 0
    assert ctx.join(group_id="a").result(timeout=0).error is Errors.MEMBER_ID_REQUIRED


def test_pending_count_follows_deleted_and_reverted_groups():
    ctx = Ctx()
    ctx.join(group_id="a")
    ctx.join(group_id="a")
    assert pending(ctx) == 2
    # Deleting the Empty group with pending ids, the append failing: the group comes back with them.
    ctx.coord.fail_next_append_for_testing(0, Errors.NOT_LEADER_OR_FOLLOWER)
    assert ctx.coord.delete_groups(["a"]).result(timeout=0)["a"] is not Errors.NONE
    assert pending(ctx) == 2
    assert ctx.coord.delete_groups(["a"]).result(timeout=0) == {"a": Errors.NONE}
    assert pending(ctx) == 0
    assert ctx.state("a") is None
