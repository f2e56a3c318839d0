"""The request registry (coordinator.requests, after Kafka's ApiKeys): every request type is known there, a
new API is one registry entry plus its handler, and no dispatcher keeps a per-type switch of its own."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect

import pytest
from raygroups.coordinator import consumer_messages, messages
from raygroups.coordinator.api import dispatch
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.requests import REQUESTS, ApiSpec, LaneKind, Registry, Routing
from raygroups.coordinator.result import Result

from tests.unit.helpers import GROUP, Ctx

# The modules that dispatch requests: they read the registry and name no request type in a test. (The
# consumer is not one: it reacts to each answer as Kafka's member does, in ``membership``.)
DISPATCHERS = ("raygroups.coordinator.api", "raygroups.actors.shard_actor", "raygroups.actors.metrics",
               "raygroups.client.ray_client", "raygroups.client.api", "raygroups.client.calls", "raygroups.testing")


def _request_classes() -> set[type]:
    return {c for module in (messages, consumer_messages) for name, c in vars(module).items()
            if name.endswith("Request") and inspect.isclass(c) and dataclasses.is_dataclass(c)}


def test_every_request_class_is_registered_once_under_its_kafka_name():
    assert {spec.request for spec in REQUESTS} == _request_classes()
    names = [spec.name for spec in REQUESTS]
    assert len(set(names)) == len(names) == 12
    assert all(spec.request.__name__ == spec.name + "Request" for spec in REQUESTS)


def test_the_registry_holds_the_rules_the_dispatchers_used_to_switch_on():
    by_name = {spec.name: spec for spec in REQUESTS}
    assert {n for n, s in by_name.items() if s.allow_empty_group_id} == {"OffsetCommit", "OffsetFetch"}
    assert {n: s.while_loading for n, s in by_name.items() if s.while_loading is not None} == {
        "SyncGroup": Errors.REBALANCE_IN_PROGRESS, "Heartbeat": Errors.NONE}
    assert {n: s.routing for n, s in by_name.items() if s.routing is not Routing.GROUP} == {
        "ListGroups": Routing.ALL, "DescribeGroups": Routing.PER_GROUP, "DeleteGroups": Routing.PER_GROUP,
        "ConsumerGroupDescribe": Routing.PER_GROUP}
    join = messages.JoinGroupRequest("g", "", "consumer", (), 10_000, 60_000)
    assert by_name["JoinGroup"].client_timeout_ms(join, 30_000) == 65_000
    assert by_name["Heartbeat"].client_timeout_ms(messages.HeartbeatRequest("g", 1, "m"), 30_000) == 30_000
    assert {n for n, s in by_name.items() if s.lane is None} == {
        "LeaveGroup", "OffsetDelete", "ListGroups", "DescribeGroups", "DeleteGroups", "ConsumerGroupDescribe"}
    # Only the requests the shard may hold back until others arrive: the client's moved-shard check backs off
    # for them, and asks at a steady pace for the rest.
    assert {n for n, s in by_name.items() if s.may_park} == {"JoinGroup", "SyncGroup"}


# --- a toy API: one entry and its handler ------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class GroupStateRequest:
    group_id: str | None


@dataclasses.dataclass(frozen=True)
class GroupStateResponse:
    error: Errors
    state: str = ""


def _validate_group_state(request, message_max_bytes):
    messages.check_group_id(request.group_id)
    return request


def _group_state(shard, request, respond):
    group = shard.groups.get(request.group_id)
    return Result(response=GroupStateResponse(Errors.NONE, "Dead" if group is None else group.state.value))


def _toy_registry() -> Registry:
    registry = Registry(tuple(REQUESTS))
    registry.register(ApiSpec(
        "GroupState", GroupStateRequest, _validate_group_state, lambda request, error: GroupStateResponse(error),
        handle=_group_state, while_loading=Errors.NOT_COORDINATOR,
        lane=LaneKind("state", one_in_flight=True, key=lambda r: r.group_id),
    ))
    return registry


def _answer(ctx, request, registry):
    answers = []
    dispatch(ctx.coord._runtime, request, answers.append, registry=registry)
    (answer,) = answers
    return answer


def test_a_new_api_is_one_registry_entry_plus_its_handler():
    registry = _toy_registry()
    ctx = Ctx()
    assert _answer(ctx, GroupStateRequest(GROUP), registry) == GroupStateResponse(Errors.NONE, "Dead")
    ctx.stable_group(1)
    assert _answer(ctx, GroupStateRequest(GROUP), registry) == GroupStateResponse(Errors.NONE, "Stable")
    # The common pre-checks, the loading answer and the validation come with the entry.
    assert _answer(ctx, GroupStateRequest(""), registry) == GroupStateResponse(Errors.INVALID_GROUP_ID)
    assert _answer(ctx, GroupStateRequest(7), registry) == GroupStateResponse(Errors.INVALID_REQUEST)
    ctx.coord.set_loading_for_testing(0, True)
    assert _answer(ctx, GroupStateRequest(GROUP), registry) == GroupStateResponse(Errors.NOT_COORDINATOR)
    spec = registry.spec(GroupStateRequest(GROUP))
    assert spec.lane_of(GroupStateRequest(GROUP), 4) == (4, "state", GROUP, True)
    # The default registry does not know it: nothing else was edited.
    with pytest.raises(TypeError, match="not a coordinator request: GroupStateRequest"):
        dispatch(ctx.coord._runtime, GroupStateRequest(GROUP), lambda _: None)


def test_a_request_type_is_registered_once_and_a_spec_is_complete_for_its_routing():
    registry = _toy_registry()
    spec = registry.spec(GroupStateRequest(GROUP))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(spec)
    with pytest.raises(ValueError, match="handle"):
        ApiSpec("Broken", GroupStateRequest, _validate_group_state, lambda r, e: None)
    with pytest.raises(ValueError, match="serve and merge"):
        ApiSpec("Broken", GroupStateRequest, _validate_group_state, lambda r, e: None, routing=Routing.ALL,
                handle=_group_state)


def _switches_on(tree: ast.AST, names: set[str]) -> list[str]:
    """Per-type switches: ``case X()``, ``type(r) is X``, ``kind in (X, Y)``, ``isinstance(r, X)``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.MatchClass) and isinstance(node.cls, ast.Name) and node.cls.id in names:
            found.append(f"line {node.lineno}: case {node.cls.id}()")
        elif isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                for n in ast.walk(operand):
                    if isinstance(n, ast.Name) and n.id in names:
                        found.append(f"line {node.lineno}: compares with {n.id}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
              and len(node.args) == 2):
            for n in ast.walk(node.args[1]):
                if isinstance(n, ast.Name) and n.id in names:
                    found.append(f"line {node.lineno}: isinstance of {n.id}")
    return found


@pytest.mark.parametrize("module", DISPATCHERS)
def test_no_dispatcher_switches_on_request_types(module):
    source = inspect.getsource(importlib.import_module(module))
    names = {c.__name__ for c in _request_classes()}
    assert _switches_on(ast.parse(source), names) == []


def test_the_switch_finder_finds_a_switch():
    names = {"JoinGroupRequest", "HeartbeatRequest"}
    source = ("match r:\n    case JoinGroupRequest():\n        pass\n"
              "if type(r) is HeartbeatRequest or isinstance(r, (JoinGroupRequest,)):\n    pass\n")
    assert len(_switches_on(ast.parse(source), names)) == 3


def test_a_request_from_the_client_api_is_validated_once_in_process(monkeypatch):
    spec = REQUESTS.spec(messages.OffsetCommitRequest(GROUP, {}))
    checked = []

    def counting(request, message_max_bytes):
        checked.append(request)
        return spec.validate(request, message_max_bytes)

    monkeypatch.setitem(REQUESTS._by_type, messages.OffsetCommitRequest, dataclasses.replace(spec, validate=counting))
    ctx = Ctx()
    assert ctx.commit({("t", 0): (7, "")}).errors == {("t", 0): Errors.NONE}
    assert len(checked) == 1
    # A raw call (no client API in front of it) is checked where it arrives, once.
    raw = messages.OffsetCommitRequest(GROUP, {("t", 0): (8, "", -1)})
    assert ctx.coord._submit(raw).result(timeout=0).errors == {("t", 0): Errors.NONE}
    assert len(checked) == 2
