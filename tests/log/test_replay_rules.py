"""The replay rules on their own: ``GroupPresence`` predicts, from positions alone, exactly the groups that
replaying a history record by record leaves present; the loader and the compactor lean on that."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from log_testlib import consumer_histories, histories, narrow_histories, offsets_only_histories, record_lists
from raygroups.coordinator.consumer_records import ConsumerGroupMetadataKey
from raygroups.coordinator.records import (
    GROUP_METADATA_KEY_TYPE,
    OFFSET_COMMIT_KEY_TYPE,
    GroupMetadataKey,
    OffsetCommitKey,
)
from raygroups.coordinator.replay_rules import GroupPresence, presence_needs
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log.codec import key_type_id as encode_key_type

any_history = st.one_of(record_lists, histories, narrow_histories, offsets_only_histories, consumer_histories())


def _type_id(key) -> int:
    return encode_key_type(key)


def _predicted(last_metadata: dict, last_consumer: dict, presence: GroupPresence, state: DurableState) -> dict:
    """What presence predicts for ``state.groups`` (asserting the consumer groups alive on the way): a
    consumer group is alive exactly when its metadata's last record is a value, and it is no simple group."""
    alive = {g for g, v in last_consumer.items() if v is not None}
    assert set(state.consumer_groups) == alive
    predicted = {g: v for g, v in last_metadata.items() if v is not None}
    for g in presence.simple_groups():
        if g not in alive:
            predicted.setdefault(g, None)
    return predicted


@given(history=any_history)
def test_presence_predicts_the_groups_replay_leaves(history):
    state = DurableState()
    presence = GroupPresence()
    last_metadata: dict[str, object] = {}
    last_consumer: dict[str, object] = {}
    for position, (key, value) in enumerate(r for batch in history for r in batch):
        state.replay(key, value)
        presence.observe(_type_id(key), key.group, value is None, position)
        if type(key) is GroupMetadataKey:
            last_metadata[key.group] = value
        elif type(key) is ConsumerGroupMetadataKey:
            last_consumer[key.group] = value
    assert _predicted(last_metadata, last_consumer, presence, state) == state.groups


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
    last_metadata = {key.group: value for key, value in last.items() if type(key) is GroupMetadataKey}
    last_consumer = {key.group: value for key, value in last.items() if type(key) is ConsumerGroupMetadataKey}
    assert _predicted(last_metadata, last_consumer, presence, state) == state.groups


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


def test_a_consumer_groups_deletion_removes_the_simple_group_it_replaced_and_offsets_it_saw_create_none():
    """Offsets make a simple group; a consumer group replaces it; offsets committed while it lives create
    nothing; its deletion leaves no group, and presence predicts as much (its metadata tombstone counts as
    a group's metadata tombstone)."""
    from raygroups.coordinator.consumer_records import ConsumerGroupMetadataValue
    from raygroups.coordinator.records import OffsetCommitValue

    value = OffsetCommitValue(7, -1, "", 1_000)
    history = [(OffsetCommitKey("g", "t", 0), value), (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(1)),
               (OffsetCommitKey("g", "t", 1), value), (ConsumerGroupMetadataKey("g"), None)]
    state, presence = DurableState(), GroupPresence()
    for position, (key, v) in enumerate(history):
        state.replay(key, v)
        presence.observe(_type_id(key), key.group, v is None, position)
        if position == 1:
            assert "g" in state.consumer_groups and "g" not in state.groups
    assert state.groups == {} and state.consumer_groups == {}
    assert not presence.created_by_commits("g") and presence.simple_groups() == []
    assert sorted(state.offsets["g"]) == [("t", 0), ("t", 1)]  # the offsets stay
