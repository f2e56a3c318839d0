"""Durable state: exactly what replaying the offsets log yields.

``DurableState.replay`` (which applies ``replay_rules``) is the only code that changes it, on the live
write path (speculatively, with an undo token so that a failed append can be rolled back) and when a
partition is loaded. Soft state
(group state machines, timers, parked requests) lives in ``group.py`` and is rebuilt from this after a
load, as Kafka's ``onLoaded`` does.
"""

from __future__ import annotations

from typing import Protocol

from raygroups.coordinator import replay_rules
from raygroups.coordinator.consumer_group import ConsumerGroupData
from raygroups.coordinator.records import GroupMetadataValue, OffsetCommitValue, RecordKey, RecordValue

TopicPartition = tuple[str, int]


class PendingOffsets(Protocol):
    """Offsets a loader replayed but has not turned into objects yet (``offsets_log.loader``): each
    ``(group, topic, partition)`` is either pending or in ``DurableState``'s dicts, never both."""

    def __len__(self) -> int: ...

    def take(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        """Remove and return the pending offset of that key (None: none is pending)."""

    def take_group(self, group: str) -> list[tuple[TopicPartition, OffsetCommitValue]]:
        """Remove and return every pending offset of ``group`` (a scan of what is pending)."""

    def drain_into(self, offsets: dict[str, dict[TopicPartition, OffsetCommitValue]], limit: int | None) -> None:
        """Move up to ``limit`` (None: all) pending offsets into ``offsets``, in no particular order; an
        offset ``offsets`` has already stays (it is newer)."""


class DurableState:
    """The offsets and groups a log's records leave (the rules are in ``replay_rules``); a "simple" group,
    known only through its offsets, is ``None`` in ``groups``.

    Guarantees: replaying the same records in the same order always gives an equal state, whatever
    was replayed (or undone) before on another instance.

    A loader may leave offsets *pending* (``attach_pending``): kept as the log's raw records and turned
    into objects by ``materialize`` (a shard does it in the background once it serves), or at once when
    one is needed -- ``offset`` and ``replay`` take just that key, ``group_offsets`` that group,
    ``offsets`` (every group's offsets) all. Every group a pending offset belongs to is in ``groups``
    already."""

    __hash__ = None  # mutable

    def __init__(self, offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] | None = None,
                 groups: dict[str, GroupMetadataValue | None] | None = None,
                 topics: dict[str, str] | None = None) -> None:
        self._offsets = {} if offsets is None else offsets
        self.groups = {} if groups is None else groups
        # One string per topic name, however many offsets of however many groups name it (a decoded record,
        # or a request, brings a new string each time).
        self.topics = {} if topics is None else topics
        self._pending: PendingOffsets | None = None
        # KIP-848 consumer groups; a group id is in at most one of ``groups`` and ``consumer_groups``.
        self.consumer_groups: dict[str, ConsumerGroupData] = {}

    @property
    def offsets(self) -> dict[str, dict[TopicPartition, OffsetCommitValue]]:
        """Every group's offsets, by (topic, partition); nothing is left pending once this is read."""
        if self._pending is not None:
            self.materialize()
        return self._offsets

    @offsets.setter
    def offsets(self, value: dict[str, dict[TopicPartition, OffsetCommitValue]]) -> None:
        self._offsets = value
        self._pending = None

    def attach_pending(self, pending: PendingOffsets) -> None:
        if self._pending is not None:
            raise ValueError("offsets are pending already")
        if len(pending):
            self._pending = pending

    @property
    def pending_offsets(self) -> int:
        return 0 if self._pending is None else len(self._pending)

    def materialize(self, limit: int | None = None) -> int:
        """Turn up to ``limit`` (None: all) pending offsets into objects; how many stay pending."""
        pending = self._pending
        if pending is None:
            return 0
        pending.drain_into(self._offsets, limit)
        return self._left_pending()

    def offsets_for_key(self, group: str, topic: str, partition: int) -> dict[str, dict[TopicPartition, OffsetCommitValue]]:
        """The offsets by group, with this one key no longer pending (what ``replay_rules.apply`` changes)."""
        pending = self._pending
        if pending is not None:
            value = pending.take(group, topic, partition)
            if value is not None:
                self._offsets.setdefault(group, {})[(self.topics.setdefault(topic, topic), partition)] = value
                self._left_pending()
        return self._offsets

    def group_offsets(self, group: str) -> dict[TopicPartition, OffsetCommitValue] | None:
        """One group's offsets (nothing of it left pending; the others stay as they are)."""
        pending = self._pending
        if pending is not None:
            taken = pending.take_group(group)
            if taken:
                by_tp = self._offsets.setdefault(group, {})
                for tp, value in taken:
                    by_tp.setdefault(tp, value)
                self._left_pending()
        return self._offsets.get(group)

    def _left_pending(self) -> int:
        """How many offsets stay pending; once none do, the pending store is let go."""
        left = len(self._pending)
        if not left:
            self._pending = None
        return left

    def offset_only_groups(self) -> list[str]:
        """The groups with offsets but no entry in ``groups`` (their metadata was deleted and the offsets
        stay, as in Kafka). Exact with offsets pending: every group a pending offset belongs to is in
        ``groups``."""
        groups, consumer_groups = self.groups, self.consumer_groups
        return [g for g in self._offsets if g not in groups and g not in consumer_groups]

    def replay(self, key: RecordKey, value: RecordValue) -> tuple:
        """Apply one record (``replay_rules.apply``); return a token that ``undo`` uses to revert exactly it."""
        return replay_rules.apply(self, key, value)

    def undo(self, token: tuple) -> None:
        replay_rules.undo(self, token)

    def offset(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        by_tp = self.offsets_for_key(group, topic, partition).get(group)
        return None if by_tp is None else by_tp.get((topic, partition))

    def copy(self) -> DurableState:
        copied = DurableState({g: dict(tps) for g, tps in self.offsets.items()}, dict(self.groups), self.topics)
        copied.consumer_groups = {g: _copy_group(c) for g, c in self.consumer_groups.items()}
        return copied

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DurableState):
            return NotImplemented
        return (self.offsets == other.offsets and self.groups == other.groups
                and self.consumer_groups == other.consumer_groups)

    def __repr__(self) -> str:
        return (f"DurableState(offsets={self.offsets!r}, groups={self.groups!r}, "
                f"consumer_groups={self.consumer_groups!r})")


def _copy_group(group: ConsumerGroupData) -> ConsumerGroupData:
    copied = ConsumerGroupData(group.group_id)
    for name in ConsumerGroupData.__slots__[1:]:
        if name == "assignor_inputs":
            continue  # soft: a copy starts without it
        value = getattr(group, name)
        setattr(copied, name, dict(value) if isinstance(value, dict) else value)
    return copied
