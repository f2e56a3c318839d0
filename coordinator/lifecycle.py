"""The lifecycle of one ``__consumer_offsets`` partition in a coordinator (Kafka's
``CoordinatorRuntime.CoordinatorState`` and its ``canTransitionFrom`` rules), as one table.

``transition`` is the only way a partition's state changes: ``CoordinatorRuntime`` calls it for the event
that happened, and it refuses an event the table does not allow from the current state with
``IllegalTransitionError``, changing nothing. Guarantees: no state is reached except through a row of
``TRANSITIONS``. Not covered here: the leader epoch (the runtime compares and stores it) and what each
transition does to the shard (the runtime loads or unloads it).
"""

from __future__ import annotations

import enum


class PartitionState(enum.StrEnum):
    INITIAL = "INITIAL"  # never loaded by this coordinator
    LOADING = "LOADING"  # replaying the log; requests get Kafka's answers for a loading coordinator
    ACTIVE = "ACTIVE"  # serving
    CLOSED = "CLOSED"  # unloaded (resigned, or the coordinator closed); may be loaded again
    FAILED = "FAILED"  # the load failed, or the leader stepped down; NOT_COORDINATOR until loaded again


class PartitionEvent(enum.StrEnum):
    LOAD = "load"  # this coordinator became the partition's leader: replay its log
    LOADED = "loaded"  # the log is replayed
    LOAD_FAILED = "load_failed"  # the log could not be read or replayed
    UNLOAD = "unload"  # resign (a newer leader elsewhere, or close)
    STEP_DOWN = "step_down"  # this leader can no longer vouch for its log (deposed, a failed replicated append)


S = PartitionState
E = PartitionEvent

# (state, event) -> the state it leads to. A pair not listed is an illegal transition.
TRANSITIONS: dict[tuple[PartitionState, PartitionEvent], PartitionState] = {
    # A partition already LOADING or ACTIVE is not loaded again: the runtime only records the newer epoch.
    **{(s, E.LOAD): S.LOADING for s in (S.INITIAL, S.CLOSED, S.FAILED)},
    (S.LOADING, E.LOADED): S.ACTIVE,
    (S.LOADING, E.LOAD_FAILED): S.FAILED,
    **{(s, E.UNLOAD): S.CLOSED for s in S},
    # A step-down can race a close (an append in flight when the partition is unloaded): still FAILED.
    **{(s, E.STEP_DOWN): S.FAILED for s in (S.LOADING, S.ACTIVE, S.CLOSED)},
}


class IllegalTransitionError(RuntimeError):
    """An event the lifecycle does not allow in the partition's current state (a bug in the caller)."""


def next_state(state: PartitionState, event: PartitionEvent) -> PartitionState:
    """The state ``event`` leads to from ``state``; ``IllegalTransitionError`` if the table has no such row."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        allowed = sorted(s.value for (s, e) in TRANSITIONS if e is event)
        raise IllegalTransitionError(
            f"partition event {event.value!r} is not allowed in state {state.value} "
            f"(allowed from: {', '.join(allowed)})") from None


def transition(ctx, event: PartitionEvent) -> PartitionState:
    """Apply ``event`` to ``ctx`` (anything with a ``partition`` and a ``state``): its new state, or
    ``IllegalTransitionError`` naming the partition, with ``ctx`` unchanged."""
    try:
        ctx.state = next_state(ctx.state, event)
    except IllegalTransitionError as e:
        raise IllegalTransitionError(f"partition {ctx.partition}: {e}") from None
    return ctx.state
