"""ListGroups, DescribeGroups, DeleteGroups and OffsetDelete as Kafka's new coordinator handles them
(GroupCoordinatorService.listGroups / describeGroups / deleteGroups / deleteOffsets; Kafka's
GroupMetadataManagerTest / GroupCoordinatorShardTest / OffsetMetadataManagerTest are the models)."""

from __future__ import annotations

import pytest
from raygroups.coordinator.messages import DescribedMember

from raygroups import Errors
from tests.unit.helpers import (
    GROUP,
    Ctx,
    consumer_protocols,
    group_tombstone,
    offset_record,
    offset_tombstone,
)

T0, T1 = ("foo", 0), ("foo", 1)
NO_OFFSET = (-1, -1, "", Errors.NONE)


def listed(ctx, states=None, types=None):
    resp = ctx.coord.list_groups(states_filter=states, types_filter=types).result(timeout=0)
    assert resp.error is Errors.NONE
    return sorted((g.group_id, g.protocol_type, g.group_state, g.group_type) for g in resp.groups)


def describe(ctx, *group_ids):
    return ctx.coord.describe_groups(list(group_ids)).result(timeout=0)


def delete_groups(ctx, *group_ids):
    return ctx.coord.delete_groups(list(group_ids)).result(timeout=0)


def delete_offsets(ctx, partitions, group_id=GROUP):
    return ctx.coord.delete_offsets(group_id=group_id, partitions=partitions).result(timeout=0)


def three_groups():
    """'stable' (1 member), 'simple' (offsets only, Empty), 'preparing' (PreparingRebalance)."""
    ctx = Ctx()
    ctx.stable_group(1, group_id="stable")
    ctx.commit({T0: (1, "")}, group_id="simple")
    ctx.join_new_dynamic(group_id="preparing", protocol_type="connect", rebalance_timeout_ms=60_000)
    assert ctx.state("preparing") == "PreparingRebalance"
    return ctx


# ----------------------------------------------------------------------------------------------
# ListGroups
# ----------------------------------------------------------------------------------------------
def test_list_groups_without_filters():
    ctx = three_groups()
    everything = [
        ("preparing", "connect", "PreparingRebalance", "classic"),
        ("simple", "", "Empty", "classic"),
        ("stable", "consumer", "Stable", "classic"),
    ]
    assert listed(ctx) == everything
    assert listed(ctx, [], []) == everything
    assert listed(ctx, None, []) == everything
    ctx.assert_replay_matches()


def test_list_groups_state_filter_is_case_insensitive():
    ctx = three_groups()
    assert listed(ctx, ["stable"]) == [("stable", "consumer", "Stable", "classic")]
    assert listed(ctx, ["EMPTY", "PreparingREBALANCE"]) == [
        ("preparing", "connect", "PreparingRebalance", "classic"),
        ("simple", "", "Empty", "classic"),
    ]
    assert listed(ctx, ["CompletingRebalance"]) == []
    assert listed(ctx, ["Dead"]) == []
    assert listed(ctx, ["NoSuchState"]) == []
    ctx.assert_replay_matches()


def test_list_groups_type_filter():
    ctx = three_groups()
    assert len(listed(ctx, types=["classic"])) == 3
    assert len(listed(ctx, types=["CLASSIC"])) == 3
    assert listed(ctx, types=["consumer"]) == []
    assert listed(ctx, types=["unknown-type"]) == []
    assert listed(ctx, types=["share", "Classic"]) == listed(ctx)
    assert listed(ctx, ["stable"], ["classic"]) == [("stable", "consumer", "Stable", "classic")]
    assert listed(ctx, ["stable"], ["consumer"]) == []
    ctx.assert_replay_matches()


def test_list_groups_with_a_loading_partition_fails_with_no_groups():
    ctx = Ctx(num_partitions=2)
    ctx.commit({T0: (1, "")}, group_id="groupId")     # partition 0
    ctx.commit({T0: (1, "")}, group_id="otherGroup")  # partition 1
    assert [g[0] for g in listed(ctx)] == ["groupId", "otherGroup"]
    ctx.coord.set_loading_for_testing(1, True)
    resp = ctx.coord.list_groups().result(timeout=0)
    assert (resp.error, resp.groups) == (Errors.COORDINATOR_LOAD_IN_PROGRESS, [])
    ctx.coord.set_loading_for_testing(1, False)
    # A partition this coordinator does not own is skipped.
    ctx.coord.unload(1, None)
    assert [g[0] for g in listed(ctx)] == ["groupId"]
    ctx.assert_replay_matches(0)


# ----------------------------------------------------------------------------------------------
# DescribeGroups
# ----------------------------------------------------------------------------------------------
def test_describe_stable_group_has_protocol_and_member_metadata_and_assignment():
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2, protocols=(("range", b"r-meta"), ("roundrobin", b"rr-meta")))
    [d] = describe(ctx, GROUP)
    assert (d.error, d.group_id, d.group_state, d.protocol_type, d.protocol_data) == (
        Errors.NONE, GROUP, "Stable", "consumer", "range",
    )
    # stable_group's leader assigns each member its own id as bytes.
    assert d.members == [
        DescribedMember(m1, None, "client", "/127.0.0.1", b"r-meta", m1.encode()),
        DescribedMember(m2, None, "client", "/127.0.0.1", b"r-meta", m2.encode()),
    ]
    ctx.assert_replay_matches()


def test_describe_rebalancing_group_has_no_protocol_and_no_member_metadata():
    # GroupMetadataManagerTest#testDescribeGroupRebalancing: the new coordinator describes the members
    # without metadata but *with* their current assignment (ClassicGroupMember#describeNoMetadata); the
    # Scala coordinator's MemberMetadata#summaryNoMetadata left out the assignment as well.
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2, rebalance_timeout_ms=60_000)
    ctx.join(member_id=leader, rebalance_timeout_ms=60_000)
    [d] = describe(ctx, GROUP)
    assert (d.group_state, d.protocol_type, d.protocol_data) == ("PreparingRebalance", "consumer", "")
    assert d.members == [
        DescribedMember(m1, None, "client", "/127.0.0.1", b"", m1.encode()),
        DescribedMember(m2, None, "client", "/127.0.0.1", b"", m2.encode()),
    ]
    ctx.join(member_id=m2, rebalance_timeout_ms=60_000)
    [d] = describe(ctx, GROUP)
    assert (d.group_state, d.protocol_data) == ("CompletingRebalance", "")
    # The assignment of the previous generation until the leader's SyncGroup replaces it.
    assert [(m.metadata, m.assignment) for m in d.members] == [(b"", m1.encode()), (b"", m2.encode())]
    ctx.assert_replay_matches()


def test_describe_group_after_a_sync_error_shows_the_reset_assignment():
    # A failed assignment write resets every member's assignment (resetAndPropagateAssignmentWithError)
    # and the group rebalances: the describe shows the empty assignments.
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2, rebalance_timeout_ms=60_000)
    j1 = ctx.join(member_id=m1, rebalance_timeout_ms=60_000)
    ctx.join(member_id=m2, rebalance_timeout_ms=60_000)
    new_gen = j1.result(timeout=0).generation_id
    ctx.coord.fail_next_append_for_testing(0, Errors.NOT_ENOUGH_REPLICAS)
    lead = ctx.sync(m1, new_gen, {m1: b"x", m2: b"y"}).result(timeout=0)
    assert lead.error is Errors.COORDINATOR_NOT_AVAILABLE
    [d] = describe(ctx, GROUP)
    assert d.group_state == "PreparingRebalance"
    assert [(m.member_id, m.metadata, m.assignment) for m in d.members] == [(m1, b"", b""), (m2, b"", b"")]
    ctx.assert_replay_matches()


def test_describe_empty_unknown_and_blank_group_ids():
    ctx = Ctx()
    ctx.commit({T0: (1, "")}, group_id="simple")
    gen, (m1,), _ = ctx.stable_group(1, group_id="left")
    ctx.leave([(m1, None)], group_id="left")
    simple, left, unknown, blank = describe(ctx, "simple", "left", "unknown", "")
    assert (simple.error, simple.group_state, simple.protocol_type, simple.members) == (Errors.NONE, "Empty", "", [])
    assert (left.error, left.group_state, left.protocol_type, left.protocol_data, left.members) == (
        Errors.NONE, "Empty", "consumer", "", [],
    )
    for d, gid in ((unknown, "unknown"), (blank, "")):
        assert (d.error, d.group_id, d.group_state, d.protocol_type, d.protocol_data, d.members) == (
            Errors.NONE, gid, "Dead", "", "", [],
        )
    # Describing never creates a group.
    assert ctx.coord.group_state_for_testing("unknown") is None
    ctx.assert_replay_matches()


def test_describe_group_on_a_partition_not_owned_is_not_coordinator():
    ctx = Ctx(num_partitions=2)
    ctx.coord.unload(1, 0)
    ctx.coord.set_loading_for_testing(0, True)
    other, mine = describe(ctx, "otherGroup", "groupId")
    assert (other.group_id, other.error) == ("otherGroup", Errors.NOT_COORDINATOR)
    assert (mine.group_id, mine.error) == ("groupId", Errors.COORDINATOR_LOAD_IN_PROGRESS)
    ctx.assert_replay_matches(0)


# ----------------------------------------------------------------------------------------------
# DeleteGroups
# ----------------------------------------------------------------------------------------------
def test_delete_empty_group_writes_offset_tombstones_then_group_tombstone():
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1)
    ctx.commit({T0: (1, ""), T1: (2, "")}, generation_id=gen, member_id=m1)
    ctx.leave([(m1, None)])
    assert ctx.state() == "Empty"
    before = ctx.records()
    assert delete_groups(ctx, GROUP) == {GROUP: Errors.NONE}
    assert ctx.records()[len(before):] == [
        offset_tombstone(GROUP, "foo", 0),
        offset_tombstone(GROUP, "foo", 1),
        group_tombstone(GROUP),
    ]
    assert ctx.state() is None
    assert ctx.fetch([T0, T1]).offsets == {T0: NO_OFFSET, T1: NO_OFFSET}
    assert [d.group_state for d in describe(ctx, GROUP)] == ["Dead"]
    # Already deleted.
    assert delete_groups(ctx, GROUP) == {GROUP: Errors.GROUP_ID_NOT_FOUND}
    ctx.assert_replay_matches()
    # The deletion is durable: a reload does not bring the group back.
    ctx.coord.unload(0, 0)
    ctx.coord.load(0, 1)
    assert ctx.state() is None
    assert ctx.coord.durable_state_for_testing(0).groups == {}


def test_delete_simple_group_without_group_metadata():
    ctx = Ctx()
    ctx.commit({T0: (1, "")})
    assert delete_groups(ctx, GROUP) == {GROUP: Errors.NONE}
    assert ctx.records() == [offset_record(GROUP, "foo", 0, 1, 0), offset_tombstone(GROUP, "foo", 0), group_tombstone(GROUP)]
    assert ctx.state() is None
    ctx.assert_replay_matches()


def test_delete_groups_per_group_errors_in_one_request():
    ctx = Ctx()
    ctx.stable_group(1, group_id="busy")
    ctx.commit({T0: (1, "")}, group_id="idle")
    ctx.join_new_dynamic(group_id="joining", rebalance_timeout_ms=60_000)
    before = ctx.records()
    result = delete_groups(ctx, "busy", "idle", "unknown", "joining")
    assert result == {
        "busy": Errors.NON_EMPTY_GROUP,
        "idle": Errors.NONE,
        "unknown": Errors.GROUP_ID_NOT_FOUND,
        "joining": Errors.NON_EMPTY_GROUP,
    }
    assert ctx.records()[len(before):] == [offset_tombstone("idle", "foo", 0), group_tombstone("idle")]
    assert (ctx.state("busy"), ctx.state("idle"), ctx.state("joining")) == ("Stable", None, "PreparingRebalance")
    ctx.assert_replay_matches()


def test_delete_dead_group_is_group_id_not_found():
    ctx = Ctx()
    ctx.commit({T0: (1, "")})
    ctx.coord.force_group_state_for_testing(GROUP, "Dead")
    before = ctx.records()
    assert delete_groups(ctx, GROUP) == {GROUP: Errors.GROUP_ID_NOT_FOUND}
    assert ctx.records() == before
    ctx.assert_replay_matches()


def test_delete_groups_not_owned_and_loading():
    ctx = Ctx(num_partitions=2)
    ctx.commit({T0: (1, "")}, group_id="groupId")
    ctx.coord.unload(1, 0)
    ctx.coord.set_loading_for_testing(0, True)
    assert delete_groups(ctx, "groupId", "otherGroup") == {
        "groupId": Errors.COORDINATOR_LOAD_IN_PROGRESS,
        "otherGroup": Errors.NOT_COORDINATOR,
    }
    ctx.coord.set_loading_for_testing(0, False)
    assert ctx.state("groupId") == "Empty"
    ctx.assert_replay_matches(0)


# ----------------------------------------------------------------------------------------------
# OffsetDelete
# ----------------------------------------------------------------------------------------------
def test_offset_delete_on_empty_group():
    ctx = Ctx()
    ctx.commit({T0: (1, ""), T1: (2, "")})
    before = ctx.records()
    resp = delete_offsets(ctx, [T0, ("bar", 0)])
    assert (resp.error, resp.errors) == (Errors.NONE, {T0: Errors.NONE, ("bar", 0): Errors.NONE})
    # A tombstone only for a partition that has an offset.
    assert ctx.records()[len(before):] == [offset_tombstone(GROUP, "foo", 0)]
    assert ctx.fetch(None).offsets == {T1: (2, -1, "", Errors.NONE)}
    assert ctx.state() == "Empty"
    ctx.assert_replay_matches()


def test_offset_delete_on_non_empty_non_consumer_group():
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1, protocol_type="connect")
    ctx.commit({T0: (1, "")}, generation_id=gen, member_id=m1)
    before = ctx.records()
    resp = delete_offsets(ctx, [T0])
    assert (resp.error, resp.errors) == (Errors.NON_EMPTY_GROUP, {})
    assert ctx.records() == before
    ctx.assert_replay_matches()


def test_offset_delete_on_consumer_group_protects_subscribed_topics():
    ctx = Ctx()
    gen, (m1, m2), _ = ctx.stable_group(2, protocols=consumer_protocols("foo"))
    ctx.commit({T0: (1, ""), ("bar", 0): (2, ""), ("bar", 1): (3, "")}, generation_id=gen, member_id=m1)
    before = ctx.records()
    resp = delete_offsets(ctx, [T0, ("bar", 0), ("baz", 0)])
    assert resp.error is Errors.NONE
    assert resp.errors == {T0: Errors.GROUP_SUBSCRIBED_TO_TOPIC, ("bar", 0): Errors.NONE, ("baz", 0): Errors.NONE}
    assert ctx.records()[len(before):] == [offset_tombstone(GROUP, "bar", 0)]
    assert ctx.fetch(None).offsets == {T0: (1, -1, "", Errors.NONE), ("bar", 1): (3, -1, "", Errors.NONE)}
    ctx.assert_replay_matches()


def test_offset_delete_on_consumer_group_with_unparseable_subscription_protects_everything():
    ctx = Ctx()
    gen, (m1,), _ = ctx.stable_group(1, protocols=(("range", b"not a subscription"),))
    ctx.commit({("bar", 0): (2, "")}, generation_id=gen, member_id=m1)
    before = ctx.records()
    resp = delete_offsets(ctx, [("bar", 0)])
    assert (resp.error, resp.errors) == (Errors.NONE, {("bar", 0): Errors.GROUP_SUBSCRIBED_TO_TOPIC})
    assert ctx.records() == before
    ctx.assert_replay_matches()


def test_offset_delete_on_consumer_group_in_preparing_rebalance():
    ctx = Ctx()
    gen, (m1, m2), leader = ctx.stable_group(2, protocols=consumer_protocols("foo"), rebalance_timeout_ms=60_000)
    ctx.commit({("bar", 0): (2, "")}, generation_id=gen, member_id=m1)
    ctx.join(member_id=leader, protocols=consumer_protocols("foo"), rebalance_timeout_ms=60_000)
    assert ctx.state() == "PreparingRebalance"
    resp = delete_offsets(ctx, [T0, ("bar", 0)])
    assert resp.errors == {T0: Errors.GROUP_SUBSCRIBED_TO_TOPIC, ("bar", 0): Errors.NONE}
    assert ctx.records()[-1] == offset_tombstone(GROUP, "bar", 0)
    ctx.assert_replay_matches()


@pytest.mark.parametrize("setup", ["unknown", "dead"])
def test_offset_delete_on_unknown_or_dead_group(setup):
    ctx = Ctx()
    if setup == "dead":
        ctx.commit({T0: (1, "")})
        ctx.coord.force_group_state_for_testing(GROUP, "Dead")
    before = ctx.records()
    resp = delete_offsets(ctx, [T0])
    assert (resp.error, resp.errors) == (Errors.GROUP_ID_NOT_FOUND, {})
    assert ctx.records() == before
    ctx.assert_replay_matches()


def test_list_groups_state_filter_is_trimmed():
    # GroupMetadataManager#listGroups lower-cases *and trims* each state filter.
    ctx = three_groups()
    assert listed(ctx, [" Stable "]) == [("stable", "consumer", "Stable", "classic")]
    ctx.assert_replay_matches()


def test_blank_group_id_for_delete_groups_and_offset_delete():
    ctx = Ctx()
    assert delete_groups(ctx, "") == {"": Errors.GROUP_ID_NOT_FOUND}
    ctx.commit({T0: (1, "")}, group_id="")
    # OffsetDelete does not accept "" (Kafka's GroupCoordinator.isValidGroupId: only OffsetCommit/
    # OffsetFetch/DescribeGroups/DeleteGroups do).
    assert delete_offsets(ctx, [T0], group_id="").error is Errors.INVALID_GROUP_ID
    assert delete_groups(ctx, "") == {"": Errors.NONE}
    assert ctx.coord.group_state_for_testing("") is None
    ctx.assert_replay_matches()


def test_delete_groups_with_a_repeated_group_id_deletes_it_once():
    # KafkaApis#handleDeleteGroupsRequest de-duplicates the group ids before the coordinator sees them.
    ctx = Ctx()
    ctx.commit({T0: (1, "")})
    assert delete_groups(ctx, GROUP, GROUP) == {GROUP: Errors.NONE}
    assert ctx.records()[1:] == [offset_tombstone(GROUP, "foo", 0), group_tombstone(GROUP)]
    assert ctx.state() is None
    ctx.assert_replay_matches()
