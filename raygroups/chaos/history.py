"""The chaos benchmark's history: ``history.jsonl``, one event per line in the order events happened
(Jepsen's history model). Each line is a JSON object with at least ``time`` (float seconds since the run
started), ``process`` (a client or consumer id, or ``"nemesis"`` for faults), ``type`` (``invoke``,
``ok``, ``fail`` or ``info``: outcome unknown), ``f`` (the operation) and ``value`` (an object). Every
client operation is an ``invoke`` line followed, later, by exactly one completion line of the same
process; faults are single ``info`` lines of the nemesis. An operation still open at the end of the
history is treated as ``info`` (its outcome is unknown).

``read_history`` validates every line and pairs invocations with completions into ``Operation``s; a line
that breaks the schema raises ``HistoryError`` naming the line and what is wrong.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from raygroups.coordinator.checks import is_number

TYPES = ("invoke", "ok", "fail", "info")
NEMESIS = "nemesis"


class HistoryError(ValueError):
    """The history does not follow the schema (the message names the line)."""


@dataclass
class Event:
    line: int
    time: float
    process: str
    type: str
    f: str
    value: dict


@dataclass
class Operation:
    """One client operation: its invocation and its completion (None while open)."""

    invoke: Event
    complete: Event | None = None

    @property
    def process(self) -> str:
        return self.invoke.process

    @property
    def f(self) -> str:
        return self.invoke.f

    @property
    def type(self) -> str:
        """How it ended: ``ok``, ``fail``, or ``info`` (unknown, or still open at the end)."""
        return self.complete.type if self.complete is not None else "info"

    def describe(self) -> str:
        end = self.complete
        ended = f"{end.type} at {end.time:.3f} s (line {end.line})" if end else "never completed"
        return f"{self.f} by {self.process} invoked at {self.invoke.time:.3f} s (line {self.invoke.line}), {ended}"

    def to_dict(self) -> dict:
        out = {"process": self.process, "f": self.f, "type": self.type, "invoke_time": self.invoke.time,
               "invoke_line": self.invoke.line, "value": dict(self.invoke.value)}
        if self.complete is not None:
            out.update(complete_time=self.complete.time, complete_line=self.complete.line,
                       value=dict(self.complete.value) or dict(self.invoke.value))
        return out


def parse_event(text: str, line: int) -> Event:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise HistoryError(f"line {line}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise HistoryError(f"line {line}: must be a JSON object, got {type(obj).__name__}")
    missing = [k for k in ("time", "process", "type", "f", "value") if k not in obj]
    if missing:
        raise HistoryError(f"line {line}: missing {', '.join(missing)}")
    t = obj["time"]
    if not is_number(t) or not math.isfinite(t) or t < 0:
        raise HistoryError(f"line {line}: time must be a number of seconds >= 0, got {t!r}")
    for key in ("process", "f"):
        if not isinstance(obj[key], str) or not obj[key]:
            raise HistoryError(f"line {line}: {key} must be a non-empty string, got {obj[key]!r}")
    if obj["type"] not in TYPES:
        raise HistoryError(f"line {line}: type must be one of {', '.join(TYPES)}, got {obj['type']!r}")
    if not isinstance(obj["value"], dict):
        raise HistoryError(f"line {line}: value must be a JSON object, got {type(obj['value']).__name__}")
    return Event(line, float(t), obj["process"], obj["type"], obj["f"], obj["value"])


def is_injection(ev: Event) -> bool:
    """A nemesis event that starts a fault: not a ``heal``, nor a later step of a fault already counted (a
    leader flap's second and third kills carry ``continues``)."""
    return ev.f != "heal" and not ev.value.get("continues")


@dataclass
class History:
    """What ``read_history`` returns: every event in order, the client operations, the faults."""

    events: list[Event] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)
    faults: list[Event] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {t: 0 for t in ("ok", "fail", "info")}
        for op in self.operations:
            out[op.type] += 1
        return out


def pair_events(events: Iterable[Event]) -> History:
    history = History()
    open_ops: dict[str, Operation] = {}
    for ev in events:
        history.events.append(ev)
        if ev.process == NEMESIS:
            if ev.type != "info":
                raise HistoryError(f"line {ev.line}: a nemesis event must be of type info, got {ev.type!r}")
            history.faults.append(ev)
            continue
        pending = open_ops.get(ev.process)
        if ev.type == "invoke":
            if pending is not None:
                raise HistoryError(f"line {ev.line}: process {ev.process!r} invokes {ev.f!r} while its "
                                   f"{pending.f!r} of line {pending.invoke.line} has not completed")
            op = Operation(ev)
            open_ops[ev.process] = op
            history.operations.append(op)
        else:
            if pending is None:
                raise HistoryError(f"line {ev.line}: process {ev.process!r} completes {ev.f!r} ({ev.type}) "
                                   f"without an invocation")
            if pending.f != ev.f:
                raise HistoryError(f"line {ev.line}: process {ev.process!r} completes {ev.f!r} but invoked "
                                   f"{pending.f!r} at line {pending.invoke.line}")
            if ev.time < pending.invoke.time:
                raise HistoryError(f"line {ev.line}: completes at {ev.time} s, before its invocation at "
                                   f"{pending.invoke.time} s (line {pending.invoke.line})")
            pending.complete = ev
            del open_ops[ev.process]
    return history


def read_history(path: str | os.PathLike) -> History:
    """Read and validate ``history.jsonl`` (blank lines are skipped)."""
    def events():
        with open(path, encoding="utf-8") as f:
            for n, text in enumerate(f, 1):
                if text.strip():
                    yield parse_event(text, n)

    return pair_events(events())
