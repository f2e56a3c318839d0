"""Durable state: exactly what replaying the offsets log yields.

``DurableState.replay`` is the only code that changes it, on the live write path (speculatively, with an
undo token so that a failed append can be rolled back) and when a partition is loaded. Soft state
(group state machines, timers, parked requests) lives in ``group.py`` and is rebuilt from this after a
load, as Kafka's ``onLoaded`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordKey,
    RecordValue,
)

_MISSING = object()
TopicPartition = tuple[str, int]


@dataclass
class DurableState:
    """Last write wins per key; an OffsetCommit value creates its group if missing (a "simple" group
    known only through its offsets, value ``None`` in ``groups``); a GroupMetadata tombstone removes
    the group; an OffsetCommit tombstone removes one offset.

    Guarantees: replaying the same records in the same order always gives an equal state, whatever
    was replayed (or undone) before on another instance."""

    offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] = field(default_factory=dict)
    groups: dict[str, GroupMetadataValue | None] = field(default_factory=dict)

    def replay(self, key: RecordKey, value: RecordValue) -> tuple:
        """Apply one record; return a token that ``undo`` uses to revert exactly this record."""
        if type(key) is OffsetCommitKey:
            group = key.group
            tp = (key.topic, key.partition)
            by_tp = self.offsets.get(group)
            prev = by_tp.get(tp, _MISSING) if by_tp is not None else _MISSING
            prev_group = self.groups.get(group, _MISSING)
            if value is None:
                if by_tp is not None and tp in by_tp:
                    del by_tp[tp]
                    if not by_tp:
                        del self.offsets[group]
            else:
                if type(value) is not OffsetCommitValue:
                    raise TypeError(f"OffsetCommitKey needs an OffsetCommitValue, got {type(value).__name__}")
                if by_tp is None:
                    by_tp = self.offsets[group] = {}
                by_tp[tp] = value
                if prev_group is _MISSING:
                    self.groups[group] = None
            return ("o", group, tp, prev, prev_group)
        if type(key) is GroupMetadataKey:
            group = key.group
            prev_group = self.groups.get(group, _MISSING)
            if value is None:
                self.groups.pop(group, None)
            else:
                if type(value) is not GroupMetadataValue:
                    raise TypeError(f"GroupMetadataKey needs a GroupMetadataValue, got {type(value).__name__}")
                self.groups[group] = value
            return ("g", group, None, None, prev_group)
        raise TypeError(f"unknown record key type {type(key).__name__}")

    def undo(self, token: tuple) -> None:
        kind, group, tp, prev, prev_group = token
        if kind == "o":
            if prev is _MISSING:
                by_tp = self.offsets.get(group)
                if by_tp is not None:
                    by_tp.pop(tp, None)
                    if not by_tp:
                        del self.offsets[group]
            else:
                self.offsets.setdefault(group, {})[tp] = prev
        if prev_group is _MISSING:
            self.groups.pop(group, None)
        else:
            self.groups[group] = prev_group

    def offset(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        by_tp = self.offsets.get(group)
        return None if by_tp is None else by_tp.get((topic, partition))

    def copy(self) -> DurableState:
        return DurableState({g: dict(tps) for g, tps in self.offsets.items()}, dict(self.groups))
