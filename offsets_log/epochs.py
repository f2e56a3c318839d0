"""Leader-epoch cache (epoch -> first offset written in that epoch) and its checkpoint file.

Kafka's ``LeaderEpochFileCache``: a follower asks the leader for the end offset of its latest epoch and
truncates everything after it (leader-epoch truncation). The checkpoint file uses Kafka's text layout
(version line, count line, then ``epoch start_offset`` lines) and is replaced atomically (temporary
file, fsync, rename, fsync of the directory).

Guarantees: entries are strictly increasing in both epoch and start offset. The checkpoint may lag the
log by one epoch change or hold entries past the log end after a crash; the log reconciles both on
open (entries past the end are dropped; epochs found in the last segment are added).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from raygroups.offsets_log.errors import CorruptLogError
from raygroups.offsets_log.fsutil import atomic_write

CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class EpochEndOffset(NamedTuple):
    leader_epoch: int
    end_offset: int


class LeaderEpochCache:
    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self.entries: list[tuple[int, int]] = list(entries or [])

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` if it is newer than the latest; True if changed."""
        if epoch > self.latest_epoch:
            self.entries.append((epoch, start_offset))
            return True
        return False

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries that start at or after ``end_offset``; True if changed."""
        keep = [e for e in self.entries if e[1] < end_offset]
        changed = len(keep) != len(self.entries)
        self.entries = keep
        return changed

    def end_offset_for(self, epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Kafka's ``endOffsetFor``: the largest epoch <= ``epoch`` and the offset where it ended."""
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        if epoch == self.latest_epoch:
            return EpochEndOffset(epoch, log_end_offset)
        higher = next((e for e in self.entries if e[0] > epoch), None)
        if higher is None:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        floor = [e for e in self.entries if e[0] <= epoch]
        return EpochEndOffset(floor[-1][0] if floor else epoch, higher[1])


def read_checkpoint(path: str) -> list[tuple[int, int]] | None:
    """Entries of a checkpoint file, None if it does not exist; ``CorruptLogError`` if unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise CorruptLogError(path, None, f"unreadable leader-epoch checkpoint ({e})") from e
    try:
        if lines[0] != "0":
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        if len(lines) != count + 2:
            raise ValueError(f"declares {count} entries but has {len(lines) - 2}")
        entries = []
        for line in lines[2:]:
            epoch, start = line.split(" ")
            entries.append((int(epoch), int(start)))
    except (IndexError, ValueError) as e:
        raise CorruptLogError(path, None, f"malformed leader-epoch checkpoint ({e})") from e
    for a, b in zip(entries, entries[1:], strict=False):
        if not (a[0] < b[0] and a[1] <= b[1]):
            raise CorruptLogError(path, None, f"leader-epoch checkpoint entries not increasing: {a} then {b}")
    return entries


def write_checkpoint(path: str, entries: list[tuple[int, int]]) -> None:
    text = f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries)
    atomic_write(path, text.encode("ascii"))


def checkpoint_path(directory: str) -> str:
    return os.path.join(directory, CHECKPOINT_FILE)
