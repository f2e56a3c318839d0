"""Waiting for conditions in integration tests: poll with a deadline, never sleep a fixed time."""

from __future__ import annotations

import time


def wait_for(condition, timeout_s=60.0, interval_s=0.05, what="condition"):
    """Poll ``condition`` until it returns a truthy value (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
