"""Wall-clock time, and keyed timers on an asyncio event loop for the shard actor.

Same contract as ``coordinator.clock.ManualTimers``: scheduling a key replaces it; callbacks run on the
actor's event loop, so they never race with request handlers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable


class WallClock:
    """The system clock of everything that runs for real: the shard's runtime, a batch's timestamp, a
    consumer without an injected clock (Kafka's ``Time.SYSTEM``: milliseconds of wall-clock time, and a
    real sleep). Tests use ``ManualClock`` instead."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class AsyncioTimers:
    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._handles: dict[Hashable, asyncio.TimerHandle] = {}

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def schedule(self, key: Hashable, delay_ms: int, callback: Callable[[], None]) -> None:
        self.cancel(key)

        def fire() -> None:
            self._handles.pop(key, None)
            callback()

        self._handles[key] = self._get_loop().call_later(max(0, delay_ms) / 1000.0, fire)

    def cancel(self, key: Hashable) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._handles

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
