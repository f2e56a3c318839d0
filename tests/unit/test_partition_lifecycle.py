"""The partition lifecycle table (``coordinator.lifecycle``, after Kafka's
``CoordinatorRuntime.CoordinatorState.canTransitionFrom``): every allowed transition, every refused one,
and the runtime moving a partition only through it."""

from __future__ import annotations

import pytest
from raygroups.coordinator.clock import ManualClock
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.lifecycle import (
    TRANSITIONS,
    IllegalTransitionError,
    PartitionEvent,
    PartitionState,
    next_state,
    transition,
)
from raygroups.coordinator.runtime import CoordinatorRuntime

S, E = PartitionState, PartitionEvent

EXPECTED = {
    (S.INITIAL, E.LOAD): S.LOADING,
    (S.CLOSED, E.LOAD): S.LOADING,
    (S.FAILED, E.LOAD): S.LOADING,
    (S.LOADING, E.LOADED): S.ACTIVE,
    (S.LOADING, E.LOAD_FAILED): S.FAILED,
    (S.INITIAL, E.UNLOAD): S.CLOSED,
    (S.LOADING, E.UNLOAD): S.CLOSED,
    (S.ACTIVE, E.UNLOAD): S.CLOSED,
    (S.CLOSED, E.UNLOAD): S.CLOSED,
    (S.FAILED, E.UNLOAD): S.CLOSED,
    (S.LOADING, E.STEP_DOWN): S.FAILED,
    (S.ACTIVE, E.STEP_DOWN): S.FAILED,
    (S.CLOSED, E.STEP_DOWN): S.FAILED,
}


class Ctx:
    def __init__(self, state: PartitionState) -> None:
        self.partition = 3
        self.state = state


def test_the_table_is_exactly_the_expected_transitions():
    assert TRANSITIONS == EXPECTED


@pytest.mark.parametrize(("state", "event"), sorted(EXPECTED))
def test_every_allowed_transition_moves_the_partition(state, event):
    ctx = Ctx(state)
    assert transition(ctx, event) is EXPECTED[(state, event)]
    assert ctx.state is EXPECTED[(state, event)]


REFUSED = sorted((s, e) for s in S for e in E if (s, e) not in EXPECTED)


@pytest.mark.parametrize(("state", "event"), REFUSED)
def test_every_other_transition_is_refused_and_changes_nothing(state, event):
    ctx = Ctx(state)
    with pytest.raises(IllegalTransitionError) as refused:
        transition(ctx, event)
    assert ctx.state is state
    assert f"partition 3: partition event {event.value!r} is not allowed in state {state.value}" in str(refused.value)


def test_a_refusal_names_the_states_the_event_is_allowed_from():
    with pytest.raises(IllegalTransitionError, match=r"'loaded' is not allowed in state ACTIVE \(allowed from: LOADING\)"):
        next_state(S.ACTIVE, E.LOADED)
    assert REFUSED  # the table refuses something: e.g. an ACTIVE partition is not loaded again


def runtime() -> CoordinatorRuntime:
    clock = ManualClock(0)
    return CoordinatorRuntime(2, CoordinatorConfig(), clock, clock.timers, lambda p: f"{p}-id", append=None)


def test_the_runtime_moves_a_partition_through_its_lifecycle():
    rt = runtime()
    ctx = rt.begin_load(0, 1)
    assert ctx.state is S.LOADING and ctx.shard is not None
    assert rt.begin_load(0, 2) is None and ctx.state is S.LOADING and ctx.epoch == 2  # epoch recorded only
    rt.complete_load(ctx)
    assert ctx.state is S.ACTIVE
    assert rt.step_down(0) is ctx and ctx.state is S.FAILED and ctx.shard is None
    with pytest.raises(IllegalTransitionError):
        rt.step_down(0)  # the shard actor steps down once; a second one is a bug
    assert rt.unload(0, None) is ctx and ctx.state is S.CLOSED
    ctx = rt.begin_load(0, 3)
    rt.fail_load(ctx)
    assert ctx.state is S.FAILED and ctx.shard is None
    with pytest.raises(IllegalTransitionError):
        rt.complete_load(rt.contexts[1])  # never loaded
    assert rt.contexts[1].state is S.INITIAL
