"""Typed log errors, each with a message a person can act on."""

from __future__ import annotations


class LogError(Exception):
    """Base class of every offsets-log failure."""


class StaleEpochError(LogError):
    """An append or truncation from a leader epoch older than one this log has already seen."""


class NonMonotonicAppendError(LogError):
    """A batch whose base offset is not the log end offset."""
