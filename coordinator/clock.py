"""Time and timers for the pure core.

The core never reads a wall clock: it takes a ``Clock`` and a ``Timers`` service. ``ManualClock``
implements both for tests with the convention of Kafka's ``MockCoordinatorTimer``: ``advance(ms)``
first moves the clock, then fires every timer whose deadline is ``<= now`` in deadline order (ties in
scheduling order); callbacks see the advanced time and timers armed while firing count from it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from typing import Protocol

from raygroups.coordinator.checks import is_int


class Clock(Protocol):
    def now_ms(self) -> int: ...


class Timers(Protocol):
    """Keyed timers: scheduling a key that is already armed replaces it."""

    def schedule(self, key: Hashable, delay_ms: int, callback: Callable[[], None]) -> None: ...

    def cancel(self, key: Hashable) -> None: ...

    def is_scheduled(self, key: Hashable) -> bool: ...

    def cancel_all(self) -> None: ...


class _Entry:
    __slots__ = ("deadline_ms", "seq", "callback", "cancelled", "owner", "key")

    def __init__(self, deadline_ms, seq, callback, owner, key):
        self.deadline_ms = deadline_ms
        self.seq = seq
        self.callback = callback
        self.cancelled = False
        self.owner = owner
        self.key = key

    def __lt__(self, other: _Entry) -> bool:
        return (self.deadline_ms, self.seq) < (other.deadline_ms, other.seq)


class ManualClock:
    """A deterministic clock whose ``advance`` fires due timers of every ``ManualTimers`` made from it."""

    def __init__(self, now_ms: int = 0) -> None:
        if not is_int(now_ms):
            raise TypeError(f"now_ms must be an int, got {type(now_ms).__name__}")
        self._now_ms = now_ms
        self._heap: list[_Entry] = []
        self._seq = 0

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> None:
        if not is_int(ms):
            raise TypeError(f"ms must be an int, got {type(ms).__name__}")
        if ms < 0:
            raise ValueError(f"ms must be >= 0, got {ms}")
        self._now_ms += ms
        self.fire_due()

    def fire_due(self) -> None:
        heap = self._heap
        while heap and heap[0].deadline_ms <= self._now_ms:
            entry = heapq.heappop(heap)
            if entry.cancelled:
                continue
            entry.owner._entries.pop(entry.key, None)
            entry.callback()

    def timers(self) -> ManualTimers:
        return ManualTimers(self)

    def _push(self, entry_args) -> _Entry:
        self._seq += 1
        deadline_ms, callback, owner, key = entry_args
        entry = _Entry(deadline_ms, self._seq, callback, owner, key)
        heapq.heappush(self._heap, entry)
        return entry


class ManualTimers:
    """A namespace of keyed timers on a ``ManualClock``."""

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self._entries: dict[Hashable, _Entry] = {}

    def schedule(self, key: Hashable, delay_ms: int, callback: Callable[[], None]) -> None:
        self.cancel(key)
        deadline = self._clock.now_ms() + max(0, delay_ms)
        self._entries[key] = self._clock._push((deadline, callback, self, key))

    def cancel(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            entry.cancelled = True

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._entries

    def deadline_ms(self, key: Hashable) -> int | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.deadline_ms

    def cancel_all(self) -> None:
        for entry in self._entries.values():
            entry.cancelled = True
        self._entries.clear()
