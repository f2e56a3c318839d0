"""The replay rules on their own: ``GroupPresence`` predicts, from positions alone, exactly the groups that
replaying a history record by record leaves present; the loader and the compactor lean on that."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from log_testlib import histories, narrow_histories, offsets_only_histories, record_lists
from raygroups.coordinator.records import (
    GROUP_METADATA_KEY_TYPE,
    OFFSET_COMMIT_KEY_TYPE,
    GroupMetadataKey,
    OffsetCommitKey,
)
from raygroups.coordinator.replay_rules import GroupPresence, presence_needs
from raygroups.coordinator.state import DurableState

any_history = st.one_of(record_lists, histories, narrow_histories, offsets_only_histories)


def _type_id(key) -> int:
    return OFFSET_COMMIT_KEY_TYPE if type(key) is OffsetCommitKey else GROUP_METADATA_KEY_TYPE


@given(history=any_history)
def test_presence_predicts_the_groups_replay_leaves(history):
    state = DurableState()
    presence = GroupPresence()
    last_metadata: dict[str, object] = {}
    for position, (key, value) in enumerate(r for batch in history for r in batch):
        state.replay(key, value)
        presence.observe(_type_id(key), key.group, value is None, position)
        if type(key) is GroupMetadataKey:
            last_metadata[key.group] = value
    predicted = {g: v for g, v in last_metadata.items() if v is not None}
    for g in presence.simple_groups():
        predicted.setdefault(g, None)
    assert predicted == state.groups


@given(history=any_history)
def test_the_loaders_shortcut_predicts_the_same(history):
    """The fast loader's protocol: batches without tombstones through ``observe_values`` (keys not
    decoded), the others record by record with ``value_deleted`` for deleted values, and
    ``values_survive`` at the end."""
    state = DurableState()
    presence = GroupPresence()
    last: dict = {}
    position = 0
    for batch in history:
        for key, value in batch:
            state.replay(key, value)
        if all(value is not None for _, value in batch):
            presence.observe_values({key.group for key, _ in batch}, position)
        else:
            for i, (key, value) in enumerate(batch):
                if value is None and type(key) is OffsetCommitKey and last.get(key) is not None:
                    presence.value_deleted(key.group)
                presence.observe(_type_id(key), key.group, value is None, position + i)
        for key, value in batch:
            last[key] = value
        position += len(batch)
    presence.values_survive({key.group for key, value in last.items() if type(key) is OffsetCommitKey and value})
    predicted = {key.group: value for key, value in last.items() if type(key) is GroupMetadataKey and value}
    for g in presence.simple_groups():
        predicted.setdefault(g, None)
    assert predicted == state.groups


def test_unknown_record_type_names_it():
    with pytest.raises(ValueError, match="unknown record type 9"):
        GroupPresence().observe(9, "g", False, 0)


@pytest.mark.parametrize(("records", "metadata_is_value", "surviving_value_at", "needs"), [
    # a commit created the group, its offset was deleted since: keep the commit and the deletion
    ([(OFFSET_COMMIT_KEY_TYPE, False), (OFFSET_COMMIT_KEY_TYPE, True)], False, -1, (True, False)),
    # ... unless another surviving commit of the group re-creates it anyway
    ([(OFFSET_COMMIT_KEY_TYPE, False), (OFFSET_COMMIT_KEY_TYPE, True), (OFFSET_COMMIT_KEY_TYPE, False)],
     False, 2, (False, False)),
    # surviving commits before the group's tombstone: the tombstone must stay, however old
    ([(OFFSET_COMMIT_KEY_TYPE, False), (GROUP_METADATA_KEY_TYPE, True)], False, 0, (False, True)),
    # nothing before the tombstone survives: it may go
    ([(OFFSET_COMMIT_KEY_TYPE, False), (OFFSET_COMMIT_KEY_TYPE, True), (GROUP_METADATA_KEY_TYPE, True)],
     False, -1, (False, False)),
    # the metadata value decides alone
    ([(OFFSET_COMMIT_KEY_TYPE, False), (GROUP_METADATA_KEY_TYPE, False)], True, 0, (False, False)),
])
def test_what_compaction_must_keep_for_presence(records, metadata_is_value, surviving_value_at, needs):
    presence = GroupPresence()
    for position, (type_id, tomb) in enumerate(records):
        presence.observe(type_id, "g", tomb, position)
    assert presence_needs(presence, "g", metadata_is_value, surviving_value_at) == needs
