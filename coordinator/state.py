"""Durable state: exactly what replaying the offsets log yields.

``DurableState.replay`` (which applies ``replay_rules``) is the only code that changes it, on the live
write path (speculatively, with an undo token so that a failed append can be rolled back) and when a
partition is loaded. Soft state
(group state machines, timers, parked requests) lives in ``group.py`` and is rebuilt from this after a
load, as Kafka's ``onLoaded`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raygroups.coordinator import replay_rules
from raygroups.coordinator.records import GroupMetadataValue, OffsetCommitValue, RecordKey, RecordValue

TopicPartition = tuple[str, int]


@dataclass
class DurableState:
    """The offsets and groups a log's records leave (the rules are in ``replay_rules``); a "simple" group,
    known only through its offsets, is ``None`` in ``groups``.

    Guarantees: replaying the same records in the same order always gives an equal state, whatever
    was replayed (or undone) before on another instance."""

    offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] = field(default_factory=dict)
    groups: dict[str, GroupMetadataValue | None] = field(default_factory=dict)
    # One string per topic name, however many offsets of however many groups name it (a decoded record,
    # or a request, brings a new string each time).
    topics: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def replay(self, key: RecordKey, value: RecordValue) -> tuple:
        """Apply one record (``replay_rules.apply``); return a token that ``undo`` uses to revert exactly it."""
        return replay_rules.apply(self, key, value)

    def undo(self, token: tuple) -> None:
        replay_rules.undo(self, token)

    def offset(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        by_tp = self.offsets.get(group)
        return None if by_tp is None else by_tp.get((topic, partition))

    def copy(self) -> DurableState:
        return DurableState({g: dict(tps) for g, tps in self.offsets.items()}, dict(self.groups), self.topics)
