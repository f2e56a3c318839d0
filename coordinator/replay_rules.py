"""The replay rules: what a record of the offsets log does to durable state, and which records a later
record makes obsolete. Everything that reads a log -- ``DurableState.replay`` (the live write path and
the plain loader), the fast loader (``offsets_log/loader.py``) and the compactor
(``offsets_log/compactor.py``) -- applies these rules and no others.

What a record does (Kafka's ``GroupMetadataManager`` / ``OffsetMetadataManager`` replay):

1. ``OffsetCommitKey -> value`` sets that offset, and creates the group as a "simple" group (known only
   through its offsets: ``None`` in ``groups``) if the group is missing *at that moment*;
2. ``OffsetCommitKey -> None`` (tombstone) deletes that offset, nothing else;
3. ``GroupMetadataKey -> value`` sets the group's metadata;
4. ``GroupMetadataKey -> None`` deletes the group, of either type (its offsets stay, as in Kafka, where
   offsets and group metadata are removed by separate tombstones; Kafka's ``removeGroup``);
5. the KIP-848 ``ConsumerGroup*`` records build consumer groups (``consumer_group.replay_consumer_record``):
   a value creates the group, replacing a simple one; a ``ConsumerGroupMetadataKey`` tombstone deletes it
   (or a simple group of that id), and rule 1 creates no simple group while a consumer group exists.

What survives, after a whole log (what a loader and a compactor must preserve):

* every offset, and every group's metadata, is decided by the last record of its key (last write wins);
* whether a group is present when its last ``GroupMetadataKey`` record is not a value is the one thing
  last-write-wins cannot see: it is present (as a simple group) exactly when an ``OffsetCommitKey`` value
  of the group comes after the group's last ``GroupMetadataKey`` tombstone, or, with no such tombstone,
  anywhere in the log -- even if that offset was deleted again since. ``GroupPresence`` tracks it.

So a record is obsolete once a later record of its key exists, except the records ``presence_needs`` names:
the group's last offset value (with the later tombstone of its key) when nothing else would re-create
the group, and the group's metadata tombstone when earlier offset values would otherwise re-create it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raygroups.coordinator.consumer_group import replay_consumer_record, undo_consumer_record
from raygroups.coordinator.consumer_records import (
    CONSUMER_GROUP_METADATA_KEY_TYPE,
    CONSUMER_GROUP_RECORD_TYPES,
)
from raygroups.coordinator.records import (
    GROUP_METADATA_KEY_TYPE,
    OFFSET_COMMIT_KEY_TYPE,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordKey,
    RecordValue,
)

if TYPE_CHECKING:
    from raygroups.coordinator.state import DurableState

_MISSING = object()
CONSUMER_GROUP_TYPE_IDS = frozenset(t for t, _ in CONSUMER_GROUP_RECORD_TYPES.values())


def apply(state: DurableState, key: RecordKey, value: RecordValue) -> tuple:
    """Apply one record (rules 1-4) to ``state``; return a token that ``undo`` uses to revert exactly it."""
    if type(key) is OffsetCommitKey:
        group = key.group
        tp = (state.topics.setdefault(key.topic, key.topic), key.partition)
        offsets = state.offsets_for_key(group, key.topic, key.partition)
        by_tp = offsets.get(group)
        prev = by_tp.get(tp, _MISSING) if by_tp is not None else _MISSING
        prev_group = state.groups.get(group, _MISSING)
        if value is None:
            if by_tp is not None and tp in by_tp:
                del by_tp[tp]
                if not by_tp:
                    del offsets[group]
        else:
            if type(value) is not OffsetCommitValue:
                raise TypeError(f"OffsetCommitKey needs an OffsetCommitValue, got {type(value).__name__}")
            if by_tp is None:
                by_tp = offsets[group] = {}
            by_tp[tp] = value
            if prev_group is _MISSING and group not in state.consumer_groups:
                state.groups[group] = None
        return ("o", group, tp, prev, prev_group)
    if type(key) is GroupMetadataKey:
        group = key.group
        prev_group = state.groups.get(group, _MISSING)
        if value is None:
            # Its offsets stay; any still pending are taken out first, since a group with pending offsets
            # must be in ``groups`` (``DurableState.offset_only_groups`` relies on it).
            state.group_offsets(group)
            state.groups.pop(group, None)
            removed = state.consumer_groups.pop(group, None)
            if removed is not None:
                return ("g", group, None, removed, prev_group)
        else:
            if type(value) is not GroupMetadataValue:
                raise TypeError(f"GroupMetadataKey needs a GroupMetadataValue, got {type(value).__name__}")
            state.groups[group] = value
        return ("g", group, None, None, prev_group)
    return replay_consumer_record(state.consumer_groups, state.groups, key, value)


def undo(state: DurableState, token: tuple) -> None:
    """Revert the record that returned ``token`` (the most recent one not yet undone)."""
    if token[0] in ("cg", "cg-"):
        undo_consumer_record(state.consumer_groups, state.groups, token)
        return
    kind, group, tp, prev, prev_group = token
    if kind == "g" and prev is not None:
        state.consumer_groups[group] = prev
    if kind == "o":
        offsets = state.offsets_for_key(group, *tp)  # apply took the key out of what is pending
        if prev is _MISSING:
            by_tp = offsets.get(group)
            if by_tp is not None:
                by_tp.pop(tp, None)
                if not by_tp:
                    del offsets[group]
        else:
            offsets.setdefault(group, {})[tp] = prev
    if prev_group is _MISSING:
        state.groups.pop(group, None)
    else:
        state.groups[group] = prev_group


class GroupPresence:
    """Follows, in log order, what decides a group's presence beyond last-write-wins (rule 1's "if missing
    at that moment" against rule 4). Positions are any numbers that grow in log order (offsets, or a
    record count).

    Per group with a metadata tombstone, the position of that tombstone and of the last offset value;
    for a group without one, only whether it had an offset value (``simple``): its position cannot matter,
    as no tombstone follows it yet, and a later tombstone forgets it.

    ``observe`` is exact for any record. A loader that skips decoding the keys of batches without
    tombstones calls ``observe_values`` for them instead, and then owes two things for the groups that
    have no metadata tombstone at that point: ``value_deleted`` when a later offset tombstone deletes an
    existing value, and ``values_survive`` at the end for the groups whose offsets survived."""

    __slots__ = ("commit_value_at", "metadata_tombstone_at", "simple")

    def __init__(self) -> None:
        self.commit_value_at: dict[str, int] = {}  # only for groups with a metadata tombstone
        self.metadata_tombstone_at: dict[str, int] = {}
        self.simple: set[str] = set()  # groups without a metadata tombstone that had an offset value

    def observe(self, type_id: int, group: str, is_tombstone: bool, position: int) -> None:
        if type_id == OFFSET_COMMIT_KEY_TYPE:
            if not is_tombstone:
                if group in self.metadata_tombstone_at:
                    self.commit_value_at[group] = position
                else:
                    self.simple.add(group)
        elif type_id == GROUP_METADATA_KEY_TYPE or type_id == CONSUMER_GROUP_METADATA_KEY_TYPE:
            # A consumer group's deletion removes a simple group as a classic group's does (rule 5).
            if is_tombstone:
                self.metadata_tombstone_at[group] = position
                self.simple.discard(group)
        elif type_id not in CONSUMER_GROUP_TYPE_IDS:
            raise ValueError(f"unknown record type {type_id}")

    def observe_values(self, groups, position: int) -> None:
        """A run of records without tombstones at ``position`` touching ``groups``. Counting each of them as
        an offset value is exact where a metadata tombstone came before (a metadata value decides presence
        by itself unless a later tombstone comes, whose later position overrides this one); the other
        groups are the caller's to report (see the class docstring)."""
        tombstone_at = self.metadata_tombstone_at
        if tombstone_at:
            commit_value_at = self.commit_value_at
            for g in groups:
                if g in tombstone_at:
                    commit_value_at[g] = position

    def value_deleted(self, group: str) -> None:
        """An offset tombstone deletes an offset value of ``group`` that a skipped batch may have written."""
        if group not in self.metadata_tombstone_at:
            self.simple.add(group)

    def values_survive(self, groups) -> None:
        """After the log: ``groups`` have offsets left (values a skipped batch may have written)."""
        tombstone_at = self.metadata_tombstone_at
        self.simple.update(g for g in groups if g not in tombstone_at)

    def created_by_commits(self, group: str) -> bool:
        """After the log: whether ``group`` is present as a simple group, should its last metadata record
        not be a value."""
        if group in self.simple:
            return True
        return self.commit_value_at.get(group, -1) > self.metadata_tombstone_at.get(group, -1)

    def simple_groups(self):
        """The groups present as simple groups unless their last metadata record is a value."""
        tombstone_at = self.metadata_tombstone_at
        return [*self.simple, *(g for g, at in self.commit_value_at.items() if at > tombstone_at.get(g, -1))]


def presence_needs(presence: GroupPresence, group: str, metadata_is_value: bool,
                   surviving_commit_value_at: int) -> tuple[bool, bool]:
    """What compaction must keep beyond each key's last record so that replaying the survivors leaves
    ``group`` present or absent as the whole log does: ``(keep the group's last offset value and the later
    tombstone of its key, keep the group's last metadata tombstone)``, whatever their age.

    ``metadata_is_value``: the group's last metadata record is a value; ``surviving_commit_value_at``: the
    position of the group's last offset value that is also its key's last record (-1 if none)."""
    if metadata_is_value:
        return False, False
    created = presence.created_by_commits(group)
    if created and surviving_commit_value_at <= presence.metadata_tombstone_at.get(group, -1):
        return True, False  # no surviving value re-creates it: keep the one that did
    if not created and surviving_commit_value_at >= 0:
        return False, True  # surviving values precede the tombstone: it must stay to delete the group again
    return False, False
