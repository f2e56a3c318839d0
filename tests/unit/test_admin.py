"""raygroups.admin, the rules behind ``raygroups groups|offsets``, on the in-process coordinator: what
Kafka's ConsumerGroupCommand shows and does (describe with lag, reset only while the group is inactive,
the reset scenarios and their clamping, OffsetDelete, DeleteGroups), and bad input changing nothing."""

from __future__ import annotations

import datetime as dt
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from raygroups.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)

from raygroups import Errors, SyntheticSource, admin
from raygroups.admin import AdminError, ResetStrategy, TopicSpec
from tests.unit.helpers import GROUP, Ctx

TOPIC = "orders"


def _protocols():
    return (("range", encode_subscription(Subscription(topics=(TOPIC,)))),)


def _stable_member(ctx, partitions=(0, 1, 2)):
    """One consumer member owning ``partitions`` of TOPIC; returns (generation, member id)."""
    joined = ctx.join_new_dynamic(protocols=_protocols(), client_id="app-1")
    ctx.clock.advance(ctx.coord.config.group_initial_rebalance_delay_ms + 1)
    r = joined.result(timeout=0)
    assignment = encode_assignment(Assignment(partitions=tuple((TOPIC, p) for p in partitions)))
    assert ctx.sync(r.member_id, r.generation_id, {r.member_id: assignment}).result(timeout=0).error is Errors.NONE
    return r.generation_id, r.member_id


def _committed(ctx, group=GROUP):
    return {tp: po.offset for tp, po in ctx.fetch(group_id=group).offsets.items()}


@pytest.fixture
def ctx():
    c = Ctx(num_partitions=2)
    c.coord.create_topic(TOPIC, 3)
    return c


@pytest.fixture
def source():
    return SyntheticSource({TOPIC: 3}, records_per_partition=100)


def test_describe_shows_members_their_partitions_and_lag_from_the_source(ctx, source):
    gen, member = _stable_member(ctx)
    ctx.commit({(TOPIC, 0): (40, ""), (TOPIC, 1): (100, "")}, generation_id=gen, member_id=member)

    d = admin.describe_group(ctx.coord, GROUP, source)

    assert d["state"] == "Stable" and d["protocol_type"] == "consumer" and d["assignment_strategy"] == "range"
    assert d["members"] == [{"member_id": member, "group_instance_id": None, "client_id": "app-1",
                             "host": d["members"][0]["host"], "partitions": [[TOPIC, 0], [TOPIC, 1], [TOPIC, 2]]}]
    rows = {o["partition"]: (o["current_offset"], o["log_end_offset"], o["lag"], o["member_id"]) for o in d["offsets"]}
    assert rows == {0: (40, 100, 60, member), 1: (100, 100, 0, member), 2: (None, 100, None, member)}


def test_describe_without_a_source_has_no_lag_and_an_unknown_group_is_an_error(ctx):
    ctx.commit({(TOPIC, 2): (7, "")})
    d = admin.describe_group(ctx.coord, GROUP)
    assert d["state"] == "Empty" and d["members"] == []
    assert d["offsets"] == [{"topic": TOPIC, "partition": 2, "current_offset": 7, "log_end_offset": None,
                             "lag": None, "member_id": None, "host": None, "client_id": None}]
    with pytest.raises(AdminError, match="consumer group 'nope' does not exist"):
        admin.describe_group(ctx.coord, "nope")


def test_list_groups_with_a_state_filter(ctx):
    _stable_member(ctx)
    ctx.commit({(TOPIC, 0): (1, "")}, group_id="offsets-only")
    assert admin.list_groups(ctx.coord) == [{"group": GROUP, "state": "Stable", "protocol_type": "consumer"},
                                            {"group": "offsets-only", "state": "Empty", "protocol_type": ""}]
    assert [g["group"] for g in admin.list_groups(ctx.coord, ["Empty"])] == ["offsets-only"]


def test_reset_is_refused_while_the_group_has_members_and_changes_nothing(ctx):
    gen, member = _stable_member(ctx)
    ctx.commit({(TOPIC, 0): (40, "")}, generation_id=gen, member_id=member)
    before = ctx.records(0) + ctx.records(1)
    with pytest.raises(AdminError, match="can only be reset if the group 'group-id' is inactive, but the "
                                         "current state is Stable"):
        admin.plan_reset(ctx.coord, GROUP, [TopicSpec(TOPIC, None)], ResetStrategy("offset", 0), ctx.coord.topics())
    assert ctx.records(0) + ctx.records(1) == before


def test_reset_scenarios_on_an_empty_group_then_execute(ctx, source):
    gen, member = _stable_member(ctx)
    ctx.commit({(TOPIC, 0): (40, ""), (TOPIC, 1): (90, "")}, generation_id=gen, member_id=member)
    assert ctx.leave([(member, None)]).error is Errors.NONE
    topics = ctx.coord.topics()

    def plan(strategy, specs=None, src=source):
        specs = specs or [TopicSpec(TOPIC, (0, 1))]
        return {r["partition"]: (r["current_offset"], r["new_offset"])
                for r in admin.plan_reset(ctx.coord, GROUP, specs, strategy, topics, src)}

    assert plan(ResetStrategy("earliest")) == {0: (40, 0), 1: (90, 0)}
    assert plan(ResetStrategy("latest")) == {0: (40, 100), 1: (90, 100)}
    assert plan(ResetStrategy("offset", 50)) == {0: (40, 50), 1: (90, 50)}
    # Kafka's checkOffsetsRange: outside the data, the nearest end.
    assert plan(ResetStrategy("offset", 500)) == {0: (40, 100), 1: (90, 100)}
    assert plan(ResetStrategy("shift", 20)) == {0: (40, 60), 1: (90, 100)}
    assert plan(ResetStrategy("shift", -45)) == {0: (40, 0), 1: (90, 45)}
    # Without a source the offset is taken as given (no log end to clamp to).
    assert plan(ResetStrategy("offset", 500), src=None) == {0: (40, 500), 1: (90, 500)}
    # Every partition of the topic when none is named.
    assert sorted(plan(ResetStrategy("offset", 5), specs=[TopicSpec(TOPIC, None)])) == [0, 1, 2]

    rows = admin.plan_reset(ctx.coord, GROUP, [TopicSpec(TOPIC, None)], ResetStrategy("offset", 10), topics, source)
    assert _committed(ctx) == {(TOPIC, 0): 40, (TOPIC, 1): 90}  # planning writes nothing
    assert admin.execute_reset(ctx.coord, GROUP, rows) == {(TOPIC, p): "NONE" for p in range(3)}
    assert _committed(ctx) == {(TOPIC, p): 10 for p in range(3)}
    ctx.assert_replay_matches(0)
    ctx.assert_replay_matches(1)


def test_reset_to_datetime_uses_the_sources_offsets_for_times(ctx):
    live = SyntheticSource({TOPIC: 3}, records_per_partition=None, records_per_second=10)
    live.created_at -= 100  # 1 000 records so far
    ctx.commit({(TOPIC, 0): (3, "")})
    at = live.created_at + 30
    ms = admin.parse_datetime_ms(dt.datetime.fromtimestamp(at, dt.UTC).isoformat().replace("+00:00", "Z"))
    rows = admin.plan_reset(ctx.coord, GROUP, [TopicSpec(TOPIC, (0,))], ResetStrategy("datetime", ms),
                            ctx.coord.topics(), live)
    assert rows == [{"topic": TOPIC, "partition": 0, "current_offset": 3, "new_offset": 300}]
    future_ms = int((live.created_at + 10_000) * 1000)
    rows = admin.plan_reset(ctx.coord, GROUP, [TopicSpec(TOPIC, (0,))], ResetStrategy("datetime", future_ms),
                            ctx.coord.topics(), live)
    assert rows[0]["new_offset"] >= 1000  # past the last record: the log end (Kafka's offsetsForTimes gives none)


def test_reset_to_current_all_topics_from_a_file_and_by_duration(ctx, source):
    gen, member = _stable_member(ctx)
    ctx.commit({(TOPIC, 0): (40, ""), (TOPIC, 1): (90, "")}, generation_id=gen, member_id=member)
    assert ctx.leave([(member, None)]).error is Errors.NONE
    topics = ctx.coord.topics()

    def plan(strategy, specs=None, src=source, all_topics=False):
        return {r["partition"]: (r["current_offset"], r["new_offset"])
                for r in admin.plan_reset(ctx.coord, GROUP, specs, strategy, topics, src, all_topics=all_topics)}

    # --all-topics: the partitions with a committed offset (Kafka's getPartitionsToReset).
    assert plan(ResetStrategy("current"), all_topics=True) == {0: (40, 40), 1: (90, 90)}
    assert plan(ResetStrategy("shift", 5), all_topics=True) == {0: (40, 45), 1: (90, 95)}
    # --to-current where there is no committed offset: the log end (Kafka's resetToCurrent), which needs a source.
    assert plan(ResetStrategy("current"), specs=[TopicSpec(TOPIC, None)]) == {0: (40, 40), 1: (90, 90),
                                                                              2: (None, 100)}
    with pytest.raises(AdminError, match="--to-current: the group has no committed offset on orders:2"):
        plan(ResetStrategy("current"), specs=[TopicSpec(TOPIC, (2,))], src=None)
    # --from-file: the file's partitions, moved into the data's range (Kafka's checkOffsetsRange).
    assert plan(ResetStrategy("file", offsets=((TOPIC, 0, 7), (TOPIC, 2, 500)))) == {0: (40, 7), 2: (None, 100)}
    assert plan(ResetStrategy("file", offsets=((TOPIC, 2, 500),)), src=None) == {2: (None, 500)}
    # --by-duration: the time it stands for, looked up as --to-datetime's.
    live = SyntheticSource({TOPIC: 3}, records_per_partition=None, records_per_second=10)
    live.created_at -= 100  # 1 000 records so far
    at_ms = int((live.created_at + 30) * 1000)
    assert plan(ResetStrategy("duration", at_ms), specs=[TopicSpec(TOPIC, (0,))], src=live) == {0: (40, 300)}
    assert _committed(ctx) == {(TOPIC, 0): 40, (TOPIC, 1): 90}  # planning writes nothing


@pytest.mark.parametrize("specs, strategy, all_topics, src, message", [
    ([TopicSpec(TOPIC, None)], ResetStrategy("current"), True, None, "--topic \\(at least one\\) or --all-topics"),
    ([TopicSpec(TOPIC, None)], ResetStrategy("file", offsets=((TOPIC, 0, 1),)), False, None,
     "--from-file takes its partitions from the file"),
    (None, ResetStrategy("file", offsets=(("nope", 0, 1),)), False, None, "topic 'nope' is not registered"),
    (None, ResetStrategy("file", offsets=((TOPIC, 3, 1),)), False, None, "partition 3 does not exist"),
    (None, ResetStrategy("duration", 0), True, None, "--by-duration needs the topics' data"),
    (None, ResetStrategy("sideways"), True, None, "unknown reset strategy 'sideways'"),
])
def test_bad_scopes_and_new_strategies_change_nothing(ctx, specs, strategy, all_topics, src, message):
    ctx.commit({(TOPIC, 0): (40, "")})
    before = ctx.records(0) + ctx.records(1)
    with pytest.raises(AdminError, match=message):
        admin.plan_reset(ctx.coord, GROUP, specs, strategy, ctx.coord.topics(), src, all_topics=all_topics)
    assert ctx.records(0) + ctx.records(1) == before


class _Silent:
    """A client whose requests are never answered."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: Future()


class _Unavailable:
    """A client whose coordinator stays unavailable through its retries."""

    def list_groups(self, **kwargs):
        return _done(SimpleNamespace(error=Errors.COORDINATOR_NOT_AVAILABLE, groups=[]))

    def describe_groups(self, groups):
        return _done([SimpleNamespace(error=Errors.NOT_COORDINATOR)])


def _done(value):
    future = Future()
    future.set_result(value)
    return future


def test_a_deployment_that_does_not_answer_in_time_is_unreachable():
    with pytest.raises(admin.Unreachable, match="the deployment did not answer within 10 ms"):
        admin.list_groups(_Silent(), timeout_s=0.01)
    with pytest.raises(admin.Unreachable, match="within 10 ms: whether the new offsets were committed is unknown"):
        admin.execute_reset(_Silent(), GROUP, [{"topic": TOPIC, "partition": 0, "new_offset": 1}], timeout_s=0.01)
    with pytest.raises(admin.Unreachable, match="whether the groups were deleted is unknown"):
        admin.delete_groups(_Silent(), [GROUP], timeout_s=0.01)
    with pytest.raises(admin.Unreachable, match="the coordinator is not available \\(COORDINATOR_NOT_AVAILABLE\\)"):
        admin.list_groups(_Unavailable())
    with pytest.raises(admin.Unreachable, match="describing group 'group-id' failed: the coordinator is not available"):
        admin.describe_group(_Unavailable(), GROUP)
    assert admin.delete_groups(_Silent(), []) == {}  # nothing to ask


@pytest.mark.parametrize("specs, strategy, src, message", [
    ([TopicSpec(TOPIC, (3,))], ResetStrategy("offset", 1), None, "has 3 partition\\(s\\) \\(0..2\\); partition 3"),
    ([TopicSpec("nope", None)], ResetStrategy("offset", 1), None, "topic 'nope' is not registered in this deployment"),
    ([TopicSpec(TOPIC, (1,))], ResetStrategy("shift", 1), None, "cannot shift the offset of orders:1"),
    ([TopicSpec(TOPIC, (0,))], ResetStrategy("latest"), None, "--to-latest needs the topics' data"),
    ([TopicSpec(TOPIC, (0,))], ResetStrategy("offset", -1), None, "--to-offset must be >= 0, got -1"),
    ([], ResetStrategy("offset", 1), None, r"--topic \(at least one\) or --all-topics, one of the two"),
])
def test_bad_reset_requests_name_the_problem_and_change_nothing(ctx, specs, strategy, src, message):
    ctx.commit({(TOPIC, 0): (40, "")})
    before = ctx.records(0) + ctx.records(1)
    with pytest.raises(AdminError, match=message):
        admin.plan_reset(ctx.coord, GROUP, specs, strategy, ctx.coord.topics(), src)
    with pytest.raises(AdminError, match="consumer group 'ghost' does not exist"):
        admin.plan_reset(ctx.coord, "ghost", [TopicSpec(TOPIC, None)], ResetStrategy("offset", 1), ctx.coord.topics())
    assert ctx.records(0) + ctx.records(1) == before


@pytest.mark.parametrize("text, message", [
    ("", "a topic name must be 1..249"), (":1", "a topic name must be 1..249"),
    ("orders:x", "partition 'x' is not a number"), ("orders:-1", "partition '-1' is not a number"),
    ("orders:", "partition '' is not a number"),
])
def test_malformed_topic_specs(text, message):
    with pytest.raises(AdminError, match=message):
        admin.parse_topic_spec(text)


def test_topic_specs_and_datetimes_parse():
    assert admin.parse_topic_spec("orders") == TopicSpec("orders", None)
    assert admin.parse_topic_spec("orders:2,0,2") == TopicSpec("orders", (0, 2))
    assert admin.parse_datetime_ms("1970-01-01T00:00:01.500Z") == 1500
    assert admin.parse_datetime_ms("1970-01-01T01:00:01+01:00") == 1000
    with pytest.raises(AdminError, match="is not an ISO date-time"):
        admin.parse_datetime_ms("yesterday")


def test_delete_offsets_of_a_consumed_topic_is_refused_then_allowed_once_empty(ctx):
    gen, member = _stable_member(ctx)
    ctx.commit({(TOPIC, 0): (4, ""), (TOPIC, 1): (5, "")}, generation_id=gen, member_id=member)
    refused = admin.delete_offsets(ctx.coord, GROUP, [TopicSpec(TOPIC, (0,))], ctx.coord.topics())
    assert refused == {"error": "NONE", "partitions": {(TOPIC, 0): "GROUP_SUBSCRIBED_TO_TOPIC"}}
    assert _committed(ctx) == {(TOPIC, 0): 4, (TOPIC, 1): 5}
    ctx.leave([(member, None)])
    done = admin.delete_offsets(ctx.coord, GROUP, [TopicSpec(TOPIC, (0,))], ctx.coord.topics())
    assert done == {"error": "NONE", "partitions": {(TOPIC, 0): "NONE"}}
    assert _committed(ctx) == {(TOPIC, 1): 5}
    with pytest.raises(AdminError, match="consumer group 'ghost' does not exist"):
        admin.delete_offsets(ctx.coord, "ghost", [TopicSpec(TOPIC, None)], ctx.coord.topics())


def test_delete_groups_reports_each_groups_error(ctx):
    _stable_member(ctx)
    ctx.commit({(TOPIC, 0): (1, "")}, group_id="idle")
    assert admin.delete_groups(ctx.coord, [GROUP, "idle", "ghost"]) == {
        GROUP: "NON_EMPTY_GROUP", "idle": "NONE", "ghost": "GROUP_ID_NOT_FOUND"}
    assert ctx.fetch(group_id="idle").offsets == {}


def test_load_source_takes_a_source_or_a_factory():
    assert isinstance(admin.load_source("tests.unit.test_admin:SOURCE"), SyntheticSource)
    assert isinstance(admin.load_source("tests.unit.test_admin:make_source"), SyntheticSource)
    for spec, message in [("nocolon", "must be MODULE:ATTR"), ("tests.unit.test_admin:missing", "missing"),
                          ("no_such_module_x:y", "No module named"), ("tests.unit.test_admin:TOPIC", "not a raygroups.Source")]:
        with pytest.raises(AdminError, match=message):
            admin.load_source(spec)


SOURCE = SyntheticSource({TOPIC: 3})


def make_source():
    return SyntheticSource({TOPIC: 3})


def test_synthetic_source_offsets_for_times():
    s = SyntheticSource({TOPIC: 1}, records_per_partition=50, records_per_second=2)
    s.created_at -= 100  # 200 appeared, capped at 50
    t0 = int(s.created_at * 1000)
    assert s.offset_for_time(TOPIC, 0, t0 - 5) == 0
    assert s.offset_for_time(TOPIC, 0, t0 + 10_250) == 21
    assert s.offset_for_time(TOPIC, 0, t0 + 90_000) is None
    assert s.start_offset(TOPIC, 0) == 0
    fixed = SyntheticSource({TOPIC: 1}, records_per_partition=5)
    assert fixed.offset_for_time(TOPIC, 0, int(fixed.created_at * 1000) + 1) is None
