"""The public group API, defined once: keyword arguments named after Kafka's request fields, validated
in the caller's thread (``TypeError``/``ValueError`` naming the field, nothing sent), then submitted.

``InProcessCoordinator`` and the Ray client both inherit it and only implement ``_submit``, so the two
cannot drift apart. Every method returns a ``concurrent.futures.Future`` of the response.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from raygroups.coordinator.api import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetDeleteRequest,
)
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.messages import (
    DEFAULT_CLIENT_HOST,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    check_group_id,
    check_topic_partition,
    validate_filter,
    validate_group_ids,
    validate_heartbeat,
    validate_join_group,
    validate_leave_group,
    validate_offset_commit,
    validate_offset_fetch,
    validate_sync_group,
)


class GroupApi:
    config: CoordinatorConfig

    def _submit(self, request: Any) -> Future:
        raise NotImplementedError

    def join_group(self, *, group_id, member_id, protocol_type, protocols, session_timeout_ms,
                   rebalance_timeout_ms, group_instance_id=None, client_id="", client_host=None,
                   require_known_member_id=True, reason=None) -> Future:
        """JoinGroup v9 → ``JoinGroupResponse`` (``.error, .generation_id, .member_id, .leader,
        .protocol_type, .protocol_name, .members, .skip_assignment``)."""
        req = validate_join_group(
            JoinGroupRequest(group_id, member_id, protocol_type, protocols, session_timeout_ms, rebalance_timeout_ms,
                             group_instance_id, client_id,
                             DEFAULT_CLIENT_HOST if client_host is None else client_host,
                             require_known_member_id, reason),
            self.config.message_max_bytes,
        )
        return self._submit(req)

    def sync_group(self, *, group_id, generation_id, member_id, assignments=None, group_instance_id=None,
                   protocol_type=None, protocol_name=None) -> Future:
        """SyncGroup v5 → ``SyncGroupResponse`` (``.error, .assignment, .protocol_type, .protocol_name``)."""
        req = validate_sync_group(
            SyncGroupRequest(group_id, generation_id, member_id, assignments, group_instance_id, protocol_type,
                             protocol_name),
            self.config.message_max_bytes,
        )
        return self._submit(req)

    def heartbeat(self, *, group_id, generation_id, member_id, group_instance_id=None) -> Future:
        """Heartbeat v4 → ``HeartbeatResponse`` (``.error``)."""
        return self._submit(validate_heartbeat(HeartbeatRequest(group_id, generation_id, member_id, group_instance_id)))

    def leave_group(self, *, group_id, members, reason=None) -> Future:
        """LeaveGroup v5 (batch) → ``LeaveGroupResponse`` (``.error, .members``)."""
        return self._submit(validate_leave_group(LeaveGroupRequest(group_id, members, reason)))

    def commit_offsets(self, *, group_id, offsets, generation_id=-1, member_id="", group_instance_id=None,
                       retention_time_ms=-1) -> Future:
        """OffsetCommit v8; ``offsets``: {(topic, partition): (offset, metadata[, leader_epoch])} →
        ``OffsetCommitResponse`` (``.errors`` per partition)."""
        req = validate_offset_commit(
            OffsetCommitRequest(group_id, offsets, generation_id, member_id, group_instance_id, retention_time_ms),
            self.config.message_max_bytes,
        )
        return self._submit(req)

    def fetch_offsets(self, *, group_id, partitions=None, require_stable=False) -> Future:
        """OffsetFetch v8 (``partitions=None``: all) → ``OffsetFetchResponse`` (``.error, .offsets``)."""
        return self._submit(validate_offset_fetch(OffsetFetchRequest(group_id, partitions, require_stable)))

    def list_groups(self, *, states_filter=None, types_filter=None) -> Future:
        """ListGroups v5 → ``ListGroupsResponse`` (``.error, .groups``)."""
        states = tuple(validate_filter("states_filter", states_filter))
        types = tuple(validate_filter("types_filter", types_filter))
        return self._submit(ListGroupsRequest(states, types))

    def describe_groups(self, group_ids) -> Future:
        """DescribeGroups v5 → list of ``DescribedGroup``."""
        return self._submit(DescribeGroupsRequest(tuple(validate_group_ids("group_ids", group_ids))))

    def delete_groups(self, group_ids) -> Future:
        """DeleteGroups v2 → ``{group_id: Errors}``."""
        return self._submit(DeleteGroupsRequest(tuple(validate_group_ids("group_ids", group_ids))))

    def delete_offsets(self, *, group_id, partitions) -> Future:
        """OffsetDelete v0 → ``OffsetDeleteResponse`` (``.error, .errors``)."""
        check_group_id(group_id)
        if isinstance(partitions, (str, bytes)) or not isinstance(partitions, (list, tuple, set, frozenset)):
            raise TypeError(f"partitions must be a list of (topic, partition), got {type(partitions).__name__}")
        parts = tuple(check_topic_partition("partitions", tp) for tp in partitions)
        return self._submit(OffsetDeleteRequest(group_id, parts))
