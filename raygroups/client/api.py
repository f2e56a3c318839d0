"""The public group API, defined once: keyword arguments named after Kafka's request fields, validated
in the caller's thread by the request's registry entry (``coordinator.requests``; ``TypeError``/``ValueError``
naming the field, nothing sent), then submitted.

``InProcessCoordinator`` and the Ray client both inherit it and only implement ``_submit``, so the two
cannot drift apart. Every method returns a ``concurrent.futures.Future`` of the response.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.consumer_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
)
from raygroups.coordinator.messages import (
    DEFAULT_CLIENT_HOST,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from raygroups.coordinator.requests import REQUESTS


class GroupApi:
    config: CoordinatorConfig

    def _submit(self, request: Any, validated: bool = False) -> Future:
        """Send ``request``; ``validated``: it passed its registry entry's validation in this process."""
        raise NotImplementedError

    def send(self, request: Any) -> Future:
        """Validate a request object of ``raygroups.coordinator.messages`` (as ``GroupMember`` builds them)
        with its registry entry and submit it: what every method below does with the request it builds."""
        request = REQUESTS.spec(request).validate(request, self.config.message_max_bytes)
        return self._submit(request, validated=True)

    def join_group(self, *, group_id, member_id, protocol_type, protocols, session_timeout_ms,
                   rebalance_timeout_ms, group_instance_id=None, client_id="", client_host=None,
                   require_known_member_id=True, reason=None) -> Future:
        """JoinGroup v9 → ``JoinGroupResponse`` (``.error, .generation_id, .member_id, .leader,
        .protocol_type, .protocol_name, .members, .skip_assignment``)."""
        return self.send(JoinGroupRequest(
            group_id, member_id, protocol_type, protocols, session_timeout_ms, rebalance_timeout_ms, group_instance_id,
            client_id, DEFAULT_CLIENT_HOST if client_host is None else client_host, require_known_member_id, reason,
        ))

    def sync_group(self, *, group_id, generation_id, member_id, assignments=None, group_instance_id=None,
                   protocol_type=None, protocol_name=None) -> Future:
        """SyncGroup v5 → ``SyncGroupResponse`` (``.error, .assignment, .protocol_type, .protocol_name``)."""
        return self.send(SyncGroupRequest(group_id, generation_id, member_id, assignments, group_instance_id,
                                          protocol_type, protocol_name))

    def heartbeat(self, *, group_id, generation_id, member_id, group_instance_id=None) -> Future:
        """Heartbeat v4 → ``HeartbeatResponse`` (``.error``)."""
        return self.send(HeartbeatRequest(group_id, generation_id, member_id, group_instance_id))

    def leave_group(self, *, group_id, members, reason=None) -> Future:
        """LeaveGroup v5 (batch) → ``LeaveGroupResponse`` (``.error, .members``)."""
        return self.send(LeaveGroupRequest(group_id, members, reason))

    def commit_offsets(self, *, group_id, offsets, generation_id=-1, member_id="", group_instance_id=None,
                       retention_time_ms=-1) -> Future:
        """OffsetCommit v9; ``offsets``: {(topic, partition): (offset, metadata[, leader_epoch])} →
        ``OffsetCommitResponse`` (``.errors`` per partition). For a consumer group (KIP-848),
        ``generation_id`` is the member epoch."""
        return self.send(OffsetCommitRequest(group_id, offsets, generation_id, member_id, group_instance_id,
                                             retention_time_ms))

    def fetch_offsets(self, *, group_id, partitions=None, require_stable=False, member_id=None,
                      member_epoch=-1) -> Future:
        """OffsetFetch v9 (``partitions=None``: all; a consumer group member's ``member_id`` and
        ``member_epoch`` are checked when the id is given) → ``OffsetFetchResponse`` (``.error, .offsets``)."""
        return self.send(OffsetFetchRequest(group_id, partitions, require_stable, member_id, member_epoch))

    def list_groups(self, *, states_filter=None, types_filter=None) -> Future:
        """ListGroups v5 → ``ListGroupsResponse`` (``.error, .groups``)."""
        return self.send(ListGroupsRequest(states_filter, types_filter))

    def describe_groups(self, group_ids) -> Future:
        """DescribeGroups v5 → list of ``DescribedGroup``."""
        return self.send(DescribeGroupsRequest(group_ids))

    def delete_groups(self, group_ids) -> Future:
        """DeleteGroups v2 → ``{group_id: Errors}``."""
        return self.send(DeleteGroupsRequest(group_ids))

    def consumer_group_heartbeat(self, *, group_id, member_id="", member_epoch=0, instance_id=None, rack_id=None,
                                 rebalance_timeout_ms=-1, subscribed_topic_names=None, subscribed_topic_regex=None,
                                 server_assignor=None, topic_partitions=None) -> Future:
        """ConsumerGroupHeartbeat v1 (KIP-848; v0 when ``member_id`` is "" at epoch 0: the coordinator picks the
        id) → ``ConsumerGroupHeartbeatResponse`` (``.error, .error_message, .member_id, .member_epoch,
        .heartbeat_interval_ms, .assignment``). ``topic_partitions`` (what the member owns) and ``.assignment``
        are ``{topic: sorted partitions}``; ``None`` is Kafka's null (not sent / unchanged)."""
        return self.send(ConsumerGroupHeartbeatRequest(
            group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
            None if subscribed_topic_names is None else tuple(subscribed_topic_names) if not isinstance(
                subscribed_topic_names, str) else subscribed_topic_names,
            subscribed_topic_regex, server_assignor, topic_partitions, client_host=DEFAULT_CLIENT_HOST))

    def consumer_group_describe(self, group_ids) -> Future:
        """ConsumerGroupDescribe v0 → list of ``DescribedConsumerGroup`` in request order (``.group_id, .error,
        .group_state, .group_epoch, .assignment_epoch, .assignor_name, .members``)."""
        return self.send(ConsumerGroupDescribeRequest(group_ids))

    def delete_offsets(self, *, group_id, partitions) -> Future:
        """OffsetDelete v0 → ``OffsetDeleteResponse`` (``.error, .errors``)."""
        return self.send(OffsetDeleteRequest(group_id, partitions))
