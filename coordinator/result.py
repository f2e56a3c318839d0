"""What one coordinator operation did: the records it writes and its answer (Kafka's ``CoordinatorResult``).

A shard handler that may write returns a ``Result``: the records (not yet applied; the runtime replays
them into the shard's durable state and appends them), the response when it answers at once (None when
it answers later, through the ``Deferred`` it was given), and ``on_done`` callbacks that run as their own
operations once the records are durable, or failed, with the error. Handlers that only read return their
response as it is. Nested steps (completing a join, preparing a rebalance) return a ``Result`` too, which
the handler adds to its own with ``add``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from raygroups.coordinator.errors import Errors
from raygroups.coordinator.records import Record

R = TypeVar("R")

# Run once the operation's records are durable (Errors.NONE) or lost (the mapped append error).
OnDone = Callable[[Errors], "Result[Any] | None"]


@dataclass(eq=False, slots=True)
class Result(Generic[R]):
    records: list[Record] = field(default_factory=list)
    response: R | None = None
    on_done: list[OnDone] = field(default_factory=list)

    def write(self, records: Iterable[Record], on_done: OnDone | None = None) -> Result[R]:
        """Add records (and what to do once they are durable or lost) to this operation."""
        self.records.extend(records)
        if on_done is not None:
            self.on_done.append(on_done)
        return self

    def add(self, other: Result[Any] | None) -> Result[R]:
        """Add what a nested step wrote; its response, if any, is the step's own business."""
        if other is not None:
            self.records.extend(other.records)
            self.on_done.extend(other.on_done)
        return self


def written(records: Iterable[Record], on_done: OnDone | None = None) -> Result[Any]:
    """A result that writes ``records`` and answers nothing by itself."""
    return Result().write(records, on_done)
