"""The replay rules on their own: ``GroupPresence`` predicts, from positions alone, exactly the groups that
replaying a history record by record leaves present; the loader and the compactor lean on that."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from log_testlib import histories, narrow_histories, offsets_only_histories, record_lists

from coordinator.records import (
    GROUP_METADATA_KEY_TYPE,
    OFFSET_COMMIT_KEY_TYPE,
    GroupMetadataKey,
    OffsetCommitKey,
)
from coordinator.replay_rules import GroupPresence, presence_needs
from coordinator.state import DurableState

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
def test_a_tombstone_free_run_counted_as_values_predicts_the_same(history):
    """``observe_values`` (the loader's shortcut for batches without tombstones) agrees with observing each
    record of those batches."""
    exact, shortcut = GroupPresence(), GroupPresence()
    position = 0
    for batch in history:
        if all(value is not None for _, value in batch):
            shortcut.observe_values([key.group for key, _ in batch], position)
        for i, (key, value) in enumerate(batch):
            exact.observe(_type_id(key), key.group, value is None, position + i)
            if any(v is None for _, v in batch):
                shortcut.observe(_type_id(key), key.group, value is None, position + i)
        position += len(batch)
    metadata_values = {key.group for batch in history for key, value in batch if type(key) is GroupMetadataKey}
    everything = {key.group for batch in history for key, _ in batch}
    for g in everything - metadata_values:  # groups whose presence the metadata cannot decide
        assert exact.created_by_commits(g) == shortcut.created_by_commits(g), g


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
