"""Typed log errors, each with a message a person can act on."""

from __future__ import annotations


class LogError(Exception):
    """Base class of every offsets-log failure."""


class StaleEpochError(LogError):
    """An append or truncation from a leader epoch older than one this log has already seen."""


class NonMonotonicAppendError(LogError):
    """A batch whose base offset is not the log end offset."""


class CorruptLogError(LogError):
    """The log on disk is damaged somewhere other than a torn tail; it is refused, never repaired silently.

    ``path`` and ``position`` name the file and byte offset of the first damage found."""

    def __init__(self, path: str, position: int | None, reason: str) -> None:
        where = f"{path}" if position is None else f"{path} at byte {position}"
        super().__init__(
            f"corrupt offsets log: {where}: {reason}. The partition stays unavailable; inspect or restore "
            f"the file (nothing was modified)"
        )
        self.path = path
        self.position = position
        self.reason = reason


class LogLockedError(LogError):
    """Another writer holds this partition directory."""


class LogWriteError(LogError):
    """An append failed on I/O; the partial batch was removed and nothing was acknowledged."""


class LogFullError(LogWriteError):
    """An append failed because the disk is full (ENOSPC)."""


class LogFailedError(LogError):
    """The log could not undo a failed write; it refuses every operation until it is reopened."""


class OffsetOutOfRangeError(LogError):
    """A read or truncation at an offset outside ``[log_start_offset, log_end_offset]``."""
