"""The offsets log: record codec, segment files, the local log, loader, reference compactor, segment store.

``open_log(directory)`` is the entry point; ``replay(log, state)`` loads a partition; the loader and the
compactor follow ``coordinator.replay_rules``; the segment store lives in ``offsets_log.store`` (it
imports pyarrow).
"""

from raygroups.offsets_log.batch import Batch
from raygroups.offsets_log.compactor import CompactionStats, compact_batches, compact_segments
from raygroups.offsets_log.epochs import EpochEndOffset
from raygroups.offsets_log.errors import (
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
from raygroups.offsets_log.loader import LoadSummary, replay
from raygroups.offsets_log.log import FileLog, RecoveryReport, open_log
from raygroups.offsets_log.memory import InMemoryLog

__all__ = [
    "Batch",
    "CompactionStats",
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
    "compact_batches",
    "compact_segments",
    "open_log",
    "replay",
]
