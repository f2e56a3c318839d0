"""Bad input through the public API: clean errors (an Errors code, or TypeError/ValueError naming the
field), and nothing changes: no record is written and neither the durable nor the live state moves."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from raygroups.coordinator.config import CoordinatorConfig

from raygroups import Errors
from tests.unit.helpers import GROUP, Ctx

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.tuples(st.text(max_size=2), st.integers()),
)


def _snapshot(ctx: Ctx):
    return (ctx.records(), ctx.coord.durable_state_for_testing(0).copy(), ctx.state())


def _stable_ctx():
    ctx = Ctx()
    gen, members, leader = ctx.stable_group(2)
    ctx.commit({("t", 0): (1, "")}, generation_id=gen, member_id=leader)
    return ctx, gen, members, leader


CALLS = {
    "join_group": dict(group_id=GROUP, member_id="", protocol_type="consumer", protocols=[("range", b"m")],
                       session_timeout_ms=10_000, rebalance_timeout_ms=10_000),
    "sync_group": dict(group_id=GROUP, generation_id=1, member_id="x", assignments={}),
    "heartbeat": dict(group_id=GROUP, generation_id=1, member_id="x"),
    "leave_group": dict(group_id=GROUP, members=[("x", None)]),
    "commit_offsets": dict(group_id=GROUP, offsets={("t", 0): (5, "")}, generation_id=1, member_id="x"),
    "fetch_offsets": dict(group_id=GROUP, partitions=[("t", 0)]),
    "delete_offsets": dict(group_id=GROUP, partitions=[("t", 0)]),
}


@settings(max_examples=300, deadline=None)
@given(call=st.sampled_from(sorted(CALLS)), data=st.data())
def test_fuzzed_arguments_give_clean_errors_and_change_nothing(call, data):
    ctx = Ctx()
    gen, members, leader = ctx.stable_group(2)
    ctx.commit({("t", 0): (1, "")}, generation_id=gen, member_id=leader)
    kwargs = dict(CALLS[call])
    field = data.draw(st.sampled_from(sorted(kwargs)))
    kwargs[field] = data.draw(anything)
    before = _snapshot(ctx)
    try:
        future = getattr(ctx.coord, call)(**kwargs)
    except (TypeError, ValueError) as e:
        assert str(e), "errors must say what is wrong"
        assert _snapshot(ctx) == before
        return
    result = future.result(timeout=0)
    errors = [getattr(result, "error", None)] + list(getattr(result, "errors", {}).values())
    assert all(isinstance(e, Errors) for e in errors if e is not None)


@pytest.mark.parametrize(
    ("kwargs", "exc", "needle"),
    [
        (dict(session_timeout_ms="10"), TypeError, "session_timeout_ms"),
        (dict(session_timeout_ms=2**31), ValueError, "session_timeout_ms"),
        (dict(protocols="range"), TypeError, "protocols"),
        (dict(protocols=[("range", "not-bytes")]), TypeError, "metadata"),
        (dict(protocols=[("range", b"x" * 2_000_000)]), ValueError, "message.max.bytes"),
        (dict(group_instance_id=""), ValueError, "group_instance_id"),
        (dict(group_instance_id="bad id!"), ValueError, "group_instance_id"),
        (dict(member_id=None), TypeError, "member_id"),
        (dict(group_id=7), TypeError, "group_id"),
    ],
)
def test_join_group_rejects_unencodable_values(kwargs, exc, needle):
    ctx = Ctx()
    args = dict(CALLS["join_group"])
    args.update(kwargs)
    with pytest.raises(exc, match=needle):
        ctx.coord.join_group(**args)
    assert ctx.records() == [] and ctx.state() is None


def test_commit_rejects_negative_partition_and_changes_nothing():
    ctx, gen, members, leader = _stable_ctx()
    before = _snapshot(ctx)
    with pytest.raises(ValueError, match="partition"):
        ctx.commit({("t", -1): (5, "")}, generation_id=gen, member_id=leader)
    with pytest.raises(TypeError, match="offsets"):
        ctx.commit({"t": (5, "")}, generation_id=gen, member_id=leader)
    with pytest.raises(ValueError, match="offset"):
        ctx.commit({("t", 0): (2**63, "")}, generation_id=gen, member_id=leader)
    assert _snapshot(ctx) == before


def test_kafka_coded_bad_values_answer_codes_not_exceptions():
    ctx = Ctx(config={"group.min.session.timeout.ms": 100})
    r = ctx.join(session_timeout_ms=99).result(timeout=0)
    assert r.error is Errors.INVALID_SESSION_TIMEOUT
    assert ctx.coord.join_group(**{**CALLS["join_group"], "group_id": None}).result(0).error is Errors.INVALID_GROUP_ID
    assert ctx.coord.join_group(**{**CALLS["join_group"], "group_id": ""}).result(0).error is Errors.INVALID_GROUP_ID
    assert ctx.join(protocol_type="").result(timeout=0).error is Errors.INCONSISTENT_GROUP_PROTOCOL
    assert ctx.join(protocols=[]).result(timeout=0).error is Errors.INCONSISTENT_GROUP_PROTOCOL
    assert ctx.records() == []


@pytest.mark.parametrize(
    ("props", "exc", "needle"),
    [
        ({"group.max.size": 0}, ValueError, "group.max.size"),
        ({"group.max.size": "4"}, TypeError, "group.max.size"),
        ({"no.such.property": 1}, ValueError, "no.such.property"),
        ({"offsets.topic.segment.bytes": 1023}, ValueError, "1024"),
        ({"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": 5}, ValueError, "group.min.session"),
    ],
)
def test_config_validation_names_the_property_and_limit(props, exc, needle):
    with pytest.raises(exc, match=needle):
        CoordinatorConfig.from_properties(props)


def test_config_defaults_are_kafkas():
    c = CoordinatorConfig.from_properties({})
    assert c.offsets_topic_num_partitions == 50
    assert c.group_min_session_timeout_ms == 6_000
    assert c.group_max_session_timeout_ms == 1_800_000
    assert c.group_initial_rebalance_delay_ms == 3_000
    assert c.group_max_size == 2**31 - 1
    assert c.offsets_retention_ms == 7 * 24 * 3600 * 1000
    assert c.offset_metadata_max_bytes == 4096
    assert CoordinatorConfig.from_properties(c.to_properties()) == c
    assert c.unclean_leader_election_enable is False  # KIP-106


def test_shard_session_timeout_reaches_the_controller_and_is_bounded():
    from raygroups.deployment.start import _settings

    assert _settings(CoordinatorConfig()).shard_silence_ms == 3_000
    assert _settings(CoordinatorConfig.from_properties({"shard.session.timeout.ms": 1_200})).shard_silence_ms == 1_200
    for bad in (499, 300_001, 0):
        with pytest.raises(ValueError, match=r"shard.session.timeout.ms must be in \[500, 300000\]"):
            CoordinatorConfig.from_properties({"shard.session.timeout.ms": bad})


def test_unclean_leader_election_is_a_true_false_property_that_reaches_the_controller():
    from raygroups.deployment.start import _settings

    c = CoordinatorConfig.from_properties({"unclean.leader.election.enable": True})
    assert c.unclean_leader_election_enable and c.to_properties()["unclean.leader.election.enable"] is True
    assert _settings(c).unclean_election and not _settings(CoordinatorConfig()).unclean_election
    for bad in (1, "true", None):
        with pytest.raises(TypeError, match="unclean.leader.election.enable must be true or false"):
            CoordinatorConfig.from_properties({"unclean.leader.election.enable": bad})


# --- requests that bypass the client API (a raw call to a shard actor) ----------------------------------
def _raw_requests(gen, leader):
    from raygroups.coordinator.api import DeleteGroupsRequest, DescribeGroupsRequest, OffsetDeleteRequest
    from raygroups.coordinator.messages import (
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        OffsetCommitRequest,
        OffsetFetchRequest,
        SyncGroupRequest,
    )

    big = b"x" * (CoordinatorConfig().message_max_bytes + 1)
    return [
        (JoinGroupRequest(GROUP, "", "consumer", (("range", big),), 10_000, 10_000, None, "c", "/h", True, None),
         lambda r: r.error),
        (JoinGroupRequest(GROUP, 7, "consumer", (("range", b""),), 10_000, 10_000, None, "c", "/h", True, None),
         lambda r: r.error),
        (SyncGroupRequest(GROUP, gen, leader, {leader: big}, None, None, None), lambda r: r.error),
        (HeartbeatRequest(GROUP, "one", leader, None), lambda r: r.error),
        (LeaveGroupRequest(GROUP, (), None), lambda r: r.error),
        (OffsetCommitRequest(GROUP, {("t", 0): (-5, "")}, gen, leader, None, -1), lambda r: r.errors[("t", 0)]),
        (OffsetCommitRequest(GROUP, {("t", 0): (5, "m" * 2_000_000)}, gen, leader, None, -1),
         lambda r: r.errors[("t", 0)]),
        (OffsetFetchRequest(GROUP, (("t", "0"),), False), lambda r: r.error),
        (OffsetDeleteRequest(GROUP, (("t", -1),)), lambda r: r.error),
        (DescribeGroupsRequest((GROUP, 3)), lambda r: r[0].error),
        (DeleteGroupsRequest((GROUP, b"g")), lambda r: r[GROUP]),
    ]


def test_a_malformed_request_that_bypassed_the_client_is_invalid_request_and_changes_nothing():
    ctx, gen, _, leader = _stable_ctx()
    before = _snapshot(ctx)
    for request, error_of in _raw_requests(gen, leader):
        response = ctx.coord._submit(request).result(timeout=0)
        assert error_of(response) is Errors.INVALID_REQUEST, (request, response)
        assert _snapshot(ctx) == before
    ctx.assert_replay_matches()


LONG = "x" * 32_768  # one byte over Kafka's STRING limit
WIDE = "é" * 16_384  # 16 384 characters, but 32 768 bytes in UTF-8


@pytest.mark.parametrize("text", [LONG, WIDE], ids=["ascii", "two-byte"])
@pytest.mark.parametrize(("call", "field"), [
    ("join_group", "group_id"), ("join_group", "member_id"), ("join_group", "protocol_type"),
    ("join_group", "client_id"), ("join_group", "client_host"), ("join_group", "reason"),
    ("join_group", "protocol name"), ("sync_group", "member_id"), ("sync_group", "protocol_name"),
    ("heartbeat", "member_id"), ("leave_group", "reason"), ("commit_offsets", "offsets topic"),
    ("commit_offsets", "metadata"), ("fetch_offsets", "partitions topic"), ("delete_offsets", "partitions topic"),
])
def test_every_protocol_string_is_capped_at_kafkas_32767_bytes_in_the_caller(call, field, text):
    """Kafka's STRING has a 16-bit length: a longer one (counted in UTF-8 bytes, not characters) is refused
    before anything is sent, naming the field and the limit, and nothing changes."""
    ctx, gen, members, leader = _stable_ctx()
    before = _snapshot(ctx)
    kwargs = dict(CALLS[call])
    if field == "protocol name":
        kwargs["protocols"] = [(text, b"m")]
    elif field == "offsets topic":
        kwargs["offsets"] = {(text, 0): (5, "")}
    elif field == "metadata":
        kwargs["offsets"] = {("t", 0): (5, text)}
    elif field == "partitions topic":
        kwargs["partitions"] = [(text, 0)]
    else:
        kwargs[field] = text
    with pytest.raises(ValueError, match=r"is 32768 bytes in UTF-8, more than a Kafka protocol string's limit of 32767"):
        getattr(ctx.coord, call)(**kwargs)
    assert _snapshot(ctx) == before
    # At the limit, it is a string Kafka could send: no error about its length.
    kwargs = dict(CALLS["fetch_offsets"], group_id="g" * 32_767)
    assert ctx.coord.fetch_offsets(**kwargs).result(timeout=0).error is Errors.NONE


def test_a_raw_call_with_an_oversized_string_is_refused_at_the_shard():
    """What bypassed the client (a raw Ray call) meets the same cap at the shard: INVALID_REQUEST, nothing
    written."""
    from raygroups.coordinator.messages import HeartbeatRequest, JoinGroupRequest

    ctx, gen, _, leader = _stable_ctx()
    before = _snapshot(ctx)
    for request in (HeartbeatRequest(GROUP, gen, WIDE),
                    JoinGroupRequest(GROUP, "", "consumer", (("range", b"m"),), 10_000, 10_000, None, LONG)):
        assert ctx.coord._submit(request).result(timeout=0).error is Errors.INVALID_REQUEST
        assert _snapshot(ctx) == before
