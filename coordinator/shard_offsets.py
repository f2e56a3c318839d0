"""Offsets, administration, expiration and load/unload for ``GroupCoordinatorShard``
(Kafka's ``OffsetMetadataManager`` and the admin paths of ``GroupMetadataManager``).

It relies on the shard's ``state``, ``groups``, ``timers`` and
liveness helpers. Handlers that write return a ``Result`` (records + response); reads return the response.
"""

from __future__ import annotations

from raygroups.coordinator.consumer_group import consumer_group_tombstones
from raygroups.coordinator.errors import CoordinatorError, Errors
from raygroups.coordinator.group import ClassicGroup, GroupState
from raygroups.coordinator.messages import (
    DescribedGroup,
    DescribedMember,
    JoinGroupResponse,
    ListedGroup,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionOffset,
    SyncGroupResponse,
)
from raygroups.coordinator.records import (
    OffsetCommitValue,
    new_group_metadata_tombstone_record,
    new_offset_commit_record,
    new_offset_commit_tombstone_record,
)
from raygroups.coordinator.result import Result

EXPIRATION_KEY = ("expire-group-metadata",)
CONSUMER_GROUP_TYPE = "consumer"
CLASSIC_GROUP_TYPE = "classic"
_NO_OFFSET = PartitionOffset(-1, -1, "", Errors.NONE)


def consumer_subscribed_topics(group) -> set[str]:
    """The topics a consumer group's members subscribe to, by name or regex (Kafka's
    ``ConsumerGroup.isSubscribedToTopic``): the subscription metadata's existing topics and every name."""
    return {topic for topic, _ in group.subscription_metadata} | set(group.topic_subscribers)


def consumer_member_error(group, member_id: str | None, member_epoch: int, commit: bool) -> Errors | None:
    """Kafka's ``ConsumerGroup.validateOffsetCommit`` / ``validateOffsetFetch``: without a member (epoch < 0;
    for a commit, only while the group is empty; for a fetch, with no member id) anyone may; a member must
    exist and give its current epoch."""
    if member_epoch < 0 and (not group.members if commit else member_id is None):
        return None
    if member_id is None or member_id not in group.members:
        return Errors.UNKNOWN_MEMBER_ID
    if member_epoch != group.member_assignment(member_id).member_epoch:
        return Errors.STALE_MEMBER_EPOCH
    return None


def java_length(s: str) -> int:
    """``String.length()`` in Java: UTF-16 code units (Kafka checks metadata size this way)."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


class OffsetsMixin:
    # ------------------------------------------------------------------------------------------
    # OffsetCommit v8 (Kafka's OffsetMetadataManager.commitOffset, ClassicGroup.validateOffsetCommit)
    # ------------------------------------------------------------------------------------------
    def commit_offsets(self, req: OffsetCommitRequest) -> Result[OffsetCommitResponse]:
        consumer_group = self.state.consumer_groups.get(req.group_id)
        if consumer_group is not None:
            error = consumer_member_error(consumer_group, req.member_id or None, req.generation_id, commit=True)
            if error is not None:
                return Result(response=OffsetCommitResponse({tp: error for tp in req.offsets}))
            return self._offset_commit_records(req, created=False)
        group = self.groups.get(req.group_id)
        created = False
        if group is None:
            if req.generation_id >= 0:
                # v8 and older: an unknown group with a generation is ILLEGAL_GENERATION.
                return Result(response=OffsetCommitResponse({tp: Errors.ILLEGAL_GENERATION for tp in req.offsets}))
            # A "simple" group: manual assignment or admin commits (generation -1) create it Empty.
            if self.at_group_limit():
                return Result(response=OffsetCommitResponse({tp: Errors.GROUP_MAX_SIZE_REACHED for tp in req.offsets}))
            group, created = self._get_or_create_group(req.group_id)
        try:
            group.validate_offset_commit(req.member_id, req.group_instance_id, req.generation_id)
        except CoordinatorError as e:
            return Result(response=OffsetCommitResponse({tp: e.error for tp in req.offsets}))
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # A commit keeps the classic member's session alive.
            self._reschedule_heartbeat(group, group.members[req.member_id])
        return self._offset_commit_records(req, created)

    def _offset_commit_records(self, req: OffsetCommitRequest, created: bool) -> Result[OffsetCommitResponse]:
        now = self.now_ms()
        expire = None if req.retention_time_ms == -1 else now + req.retention_time_ms
        errors: dict[tuple[str, int], Errors] = {}
        records = []
        max_metadata = self.config.offset_metadata_max_bytes
        for (topic, partition), (offset, metadata, leader_epoch) in req.offsets.items():
            metadata = metadata or ""
            if java_length(metadata) > max_metadata:
                errors[(topic, partition)] = Errors.OFFSET_METADATA_TOO_LARGE
                continue
            errors[(topic, partition)] = Errors.NONE
            records.append(
                new_offset_commit_record(req.group_id, topic, partition, offset, leader_epoch, metadata, now, expire)
            )
        if not records and created:
            self._drop_group(req.group_id)  # nothing was written, so the group was never created
        return Result(records, OffsetCommitResponse(errors))

    # ------------------------------------------------------------------------------------------
    # OffsetFetch (v8: -1 for unknown group or partition)
    # ------------------------------------------------------------------------------------------
    def fetch_offsets(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        consumer_group = self.state.consumer_groups.get(req.group_id)
        if consumer_group is not None:
            error = consumer_member_error(consumer_group, req.member_id, req.member_epoch, commit=False)
            if error is not None:
                return OffsetFetchResponse(error)
            dead = False
        else:
            group = self.groups.get(req.group_id)
            dead = group is None or group.is_in(GroupState.DEAD)
        if req.partitions is None:
            by_tp = {} if dead else self.state.group_offsets(req.group_id) or {}
            return OffsetFetchResponse(Errors.NONE, {tp: _partition_offset(v) for tp, v in sorted(by_tp.items())})
        out = {}
        for tp in req.partitions:
            value = None if dead else self.state.offset(req.group_id, *tp)
            out[tp] = _NO_OFFSET if value is None else _partition_offset(value)
        return OffsetFetchResponse(Errors.NONE, out)

    # ------------------------------------------------------------------------------------------
    # OffsetDelete
    # ------------------------------------------------------------------------------------------
    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> Result[OffsetDeleteResponse]:
        consumer_group = self.state.consumer_groups.get(group_id)
        if consumer_group is not None:
            # Kafka's ConsumerGroup: any state may delete offsets (validateOffsetDelete checks nothing), but
            # not those of a topic a member subscribes to.
            subscribed = consumer_subscribed_topics(consumer_group)
            is_subscribed = subscribed.__contains__
        else:
            group = self.groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                return Result(response=OffsetDeleteResponse(Errors.GROUP_ID_NOT_FOUND))
            if not group.is_in(GroupState.EMPTY) and not group.uses_consumer_protocol():
                return Result(response=OffsetDeleteResponse(Errors.NON_EMPTY_GROUP))
            is_subscribed = group.is_subscribed_to_topic
        errors: dict[tuple[str, int], Errors] = {}
        records = []
        for topic, partition in dict.fromkeys(partitions):  # one tombstone for a partition named twice
            if is_subscribed(topic):
                errors[(topic, partition)] = Errors.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            errors[(topic, partition)] = Errors.NONE
            if self.state.offset(group_id, topic, partition) is not None:
                records.append(new_offset_commit_tombstone_record(group_id, topic, partition))
        return Result(records, OffsetDeleteResponse(Errors.NONE, errors))

    # ------------------------------------------------------------------------------------------
    # DeleteGroups
    # ------------------------------------------------------------------------------------------
    def delete_groups(self, group_ids: list[str]) -> Result[dict[str, Errors]]:
        errors: dict[str, Errors] = {}
        result = Result(response=errors)
        self._groups_removed_by_operation().clear()
        # KafkaApis#handleDeleteGroupsRequest de-duplicates the ids: a repeated id is deleted once and
        # answered once (not NONE and then GROUP_ID_NOT_FOUND for the same group).
        for group_id in dict.fromkeys(group_ids):
            consumer_group = self.state.consumer_groups.get(group_id)
            if consumer_group is not None:
                # Kafka's ConsumerGroup.validateDeleteGroup: only an Empty group goes, with its offsets.
                if consumer_group.members:
                    errors[group_id] = Errors.NON_EMPTY_GROUP
                    continue
                result.write([new_offset_commit_tombstone_record(group_id, topic, partition)
                              for topic, partition in self.state.group_offsets(group_id) or {}])
                result.write(consumer_group_tombstones(consumer_group))
                errors[group_id] = Errors.NONE
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                errors[group_id] = Errors.GROUP_ID_NOT_FOUND
                continue
            if not group.is_in(GroupState.EMPTY):
                errors[group_id] = Errors.NON_EMPTY_GROUP
                continue
            records = [
                new_offset_commit_tombstone_record(group_id, topic, partition)
                for topic, partition in self.state.group_offsets(group_id) or {}
            ]
            records.append(new_group_metadata_tombstone_record(group_id))
            result.write(records)
            self._remove_group(group)
            errors[group_id] = Errors.NONE
        return result

    def _remove_group(self, group: ClassicGroup) -> None:
        """Kafka's new coordinator deletes a group by replaying its tombstone into the timeline map
        (GroupMetadataManager#removeGroup): the group object, its soft state (KIP-394 pending members)
        and its timers are left untouched, so a failed append reverts to the very same group. The group
        is kept aside until the operation's outcome is known; ``_materialize_group`` (which the revert
        path calls) puts it back. Timers of a removed group find no group when they fire and do nothing."""
        self._groups_removed_by_operation()[group.group_id] = group
        self._release_group(group.group_id)

    def _groups_removed_by_operation(self) -> dict[str, ClassicGroup]:
        """Groups removed by the latest DeleteGroups / expiration run (cleared when the next one starts)."""
        removed = self.__dict__.get("_removed_groups")
        if removed is None:
            removed = self._removed_groups = {}
        return removed

    # ------------------------------------------------------------------------------------------
    # ListGroups / DescribeGroups
    # ------------------------------------------------------------------------------------------
    def list_groups(self, states_filter: list[str], types_filter: list[str]) -> list[ListedGroup]:
        # GroupMetadataManager#listGroups: state filters are lower-cased and trimmed; type filters are
        # only lower-cased (an unknown type matches nothing).
        states = {s.lower().strip() for s in states_filter}
        types = {t.lower() for t in types_filter}
        out = []
        for group in self.groups.values():
            if states and group.state.value.lower() not in states:
                continue
            if types and CLASSIC_GROUP_TYPE not in types:
                continue
            out.append(ListedGroup(group.group_id, group.protocol_type or "", group.state.value, CLASSIC_GROUP_TYPE))
        if types and CONSUMER_GROUP_TYPE not in types:
            return out
        for group_id, consumer_group in self.state.consumer_groups.items():
            state = consumer_group.state().value
            if states and state.lower() not in states:
                continue
            # A consumer group lists with the protocol type "consumer" (Kafka's ConsumerGroup.protocolType).
            out.append(ListedGroup(group_id, CONSUMER_GROUP_TYPE, state, CONSUMER_GROUP_TYPE))
        return out

    def describe_group(self, group_id: str) -> DescribedGroup:
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return DescribedGroup(Errors.NONE, group_id, GroupState.DEAD.value, "", "", [])
        # Kafka's new coordinator (ClassicGroupMember#describeNoMetadata): no protocol metadata while
        # rebalancing, but the member's current assignment is still reported (the Scala coordinator's
        # summaryNoMetadata left it empty; we follow the new coordinator).
        stable = group.is_in(GroupState.STABLE)
        members = [
            DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.metadata(group.protocol_name) if stable else b"", m.assignment)
            for m in group.members.values()
        ]
        protocol_data = (group.protocol_name or "") if stable else ""
        return DescribedGroup(Errors.NONE, group_id, group.state.value, group.protocol_type or "", protocol_data,
                              members)

    # ------------------------------------------------------------------------------------------
    # Offset expiration and group cleanup (Kafka's GroupCoordinatorShard.cleanupGroupMetadata, KIP-211)
    # ------------------------------------------------------------------------------------------
    def schedule_expiration(self) -> None:
        self._schedule(EXPIRATION_KEY, self.config.offsets_retention_check_interval_ms, self.cleanup_group_metadata)

    def cleanup_group_metadata(self) -> Result:
        now = self.now_ms()
        retention = self.config.offsets_retention_ms
        records = []
        removed = []
        self._groups_removed_by_operation().clear()
        for group_id, group in list(self.groups.items()):
            all_expired = True
            by_tp = self.state.group_offsets(group_id)
            if by_tp is not None:
                base = _expiration_base(group)
                if base is None:
                    continue  # never expire while rebalancing (KAFKA-13636) or with unknown subscriptions
                for (topic, partition), value in list(by_tp.items()):
                    if not group.is_subscribed_to_topic(topic) and _expired(value, base, now, retention):
                        records.append(new_offset_commit_tombstone_record(group_id, topic, partition))
                    else:
                        all_expired = False
            if all_expired and group.is_in(GroupState.EMPTY):
                records.append(new_group_metadata_tombstone_record(group_id))
                removed.append(group)
        for group in removed:
            self._remove_group(group)
        for consumer_group in list(self.state.consumer_groups.values()):
            records.extend(self._expire_consumer_group(consumer_group, now, retention))
        self.schedule_expiration()
        return Result(records)

    def _expire_consumer_group(self, group, now: int, retention: int) -> list:
        """Kafka's ``ConsumerGroup.offsetExpirationCondition`` (from the commit timestamp) and
        ``isSubscribedToTopic`` (the topics its members subscribe to, by name or regex): an offset of a topic
        no member subscribes to expires; an empty group with no offset left is deleted."""
        records = []
        all_expired = True
        subscribed = consumer_subscribed_topics(group)
        for (topic, partition), value in list((self.state.group_offsets(group.group_id) or {}).items()):
            if topic not in subscribed and _expired(value, lambda v: v.commit_timestamp_ms, now, retention):
                records.append(new_offset_commit_tombstone_record(group.group_id, topic, partition))
            else:
                all_expired = False
        if all_expired and not group.members:
            records.extend(consumer_group_tombstones(group))
        return records

    # ------------------------------------------------------------------------------------------
    # Load / unload (Kafka's GroupMetadataManager.onLoaded / onUnloaded)
    # ------------------------------------------------------------------------------------------
    def on_loaded(self) -> Result:
        """Materialize groups from the replayed durable state and arm their timers, as Kafka's
        ``onLoaded``: loaded groups are Stable (with members) or Empty; every member gets a fresh
        session timer; a group over ``group.max.size`` rebalances."""
        result = Result()
        for group_id in list(self.state.groups) + self.state.offset_only_groups():
            result.add(self._materialize_group(group_id))
        self.on_consumer_groups_loaded()
        self.schedule_expiration()
        return result

    def _materialize_group(self, group_id: str) -> Result:
        removed = self._groups_removed_by_operation().pop(group_id, None)
        if removed is not None:
            # The append of this operation's deletion failed: the very same group object comes back.
            self._adopt_group(removed)
            return Result()
        value = self.state.groups.get(group_id)
        if value is None:
            group = ClassicGroup(group_id, self.now_ms)
        else:
            group = ClassicGroup.from_metadata_value(group_id, value, self.now_ms)
        self._adopt_group(group)
        for member in group.members.values():
            self._reschedule_heartbeat(group, member)
        if group.num_members > self.config.group_max_size:
            return self._prepare_rebalance(group)
        return Result()

    def on_unloaded(self) -> None:
        """Every group becomes Dead; parked joins/syncs are answered ``NOT_COORDINATOR``."""
        for group in self.groups.values():
            group.transition_to(GroupState.DEAD)
            if group.previous_state is GroupState.PREPARING_REBALANCE:
                for member in list(group.members.values()):
                    group.complete_join(member, JoinGroupResponse(Errors.NOT_COORDINATOR, member_id=member.member_id))
            elif group.previous_state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
                for member in list(group.members.values()):
                    group.complete_sync(member, SyncGroupResponse(Errors.NOT_COORDINATOR))
        self.timers.cancel_all()


def _partition_offset(value: OffsetCommitValue) -> PartitionOffset:
    return PartitionOffset(value.offset, value.leader_epoch, value.metadata, Errors.NONE)


def _expiration_base(group: ClassicGroup):
    """Kafka's ``offsetExpirationCondition``: a function giving the base timestamp, or None."""
    if group.protocol_type:
        if group.is_in(GroupState.EMPTY):
            state_ts = group.state_timestamp_ms
            return lambda v: state_ts if state_ts is not None else v.commit_timestamp_ms
        if group.uses_consumer_protocol() and group.subscribed_topics is not None and group.is_in(GroupState.STABLE):
            return lambda v: v.commit_timestamp_ms
        return None
    return lambda v: v.commit_timestamp_ms


def _expired(value: OffsetCommitValue, base, now: int, retention_ms: int) -> bool:
    if value.expire_timestamp_ms is not None:
        return now >= value.expire_timestamp_ms
    return now - base(value) >= retention_ms
