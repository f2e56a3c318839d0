"""The offsets log: record codec, segment files, the local log, loader, reference compactor, segment store."""

from offsets_log.batch import Batch
from offsets_log.epochs import EpochEndOffset
from offsets_log.errors import (
    CorruptLogError,
    LogError,
    LogFailedError,
    LogFullError,
    LogLockedError,
    LogWriteError,
    NonMonotonicAppendError,
    OffsetOutOfRangeError,
    StaleEpochError,
)
from offsets_log.loader import LoadSummary, replay
from offsets_log.log import FileLog, RecoveryReport, open_log
from offsets_log.memory import InMemoryLog

__all__ = [
    "Batch",
    "CorruptLogError",
    "EpochEndOffset",
    "FileLog",
    "InMemoryLog",
    "LoadSummary",
    "LogError",
    "LogFailedError",
    "LogFullError",
    "LogLockedError",
    "LogWriteError",
    "NonMonotonicAppendError",
    "OffsetOutOfRangeError",
    "RecoveryReport",
    "StaleEpochError",
    "open_log",
    "replay",
]
