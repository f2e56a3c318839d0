"""The rebalance machinery and member liveness of ``GroupCoordinatorShard``, after Kafka's
``GroupMetadataManager`` (``prepareRebalance``, ``tryCompleteInitialRebalanceElseSchedule``,
``completeClassicGroupJoin``, ``expirePendingSync``, ``propagateAssignment``,
``expireClassicGroupMemberHeartbeat``): preparing a rebalance, the (initial, KIP-134) delayed join and its
completion, the pending-sync timeout, propagating assignments, session timers. It relies on the shard's ``groups``, ``timers``, ``config`` and ``_schedule``. A step that may
write returns a ``Result`` (its records), which the caller adds to its own; timers return theirs to the runtime.
"""

from __future__ import annotations

from raygroups.coordinator.errors import Errors, IllegalStateError
from raygroups.coordinator.group import ClassicGroup, GroupState, Member
from raygroups.coordinator.messages import UNKNOWN_MEMBER_ID, JoinGroupResponse, SyncGroupResponse
from raygroups.coordinator.records import GroupMetadataKey
from raygroups.coordinator.result import Result, written


def heartbeat_key(group_id: str, member_id: str) -> tuple:
    return ("heartbeat", group_id, member_id)


def join_key(group_id: str) -> tuple:
    return ("join", group_id)


def sync_key(group_id: str) -> tuple:
    return ("sync", group_id)


class RebalanceMixin:
    # ------------------------------------------------------------------------------------------
    # Rebalance machinery (Kafka's GroupMetadataManager.prepareRebalance / completeClassicGroupJoin)
    # ------------------------------------------------------------------------------------------
    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup) -> Result:
        if group.can_rebalance():
            return self._prepare_rebalance(group)
        return self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> Result:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_with_error(group, Errors.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        is_initial = group.is_in(GroupState.EMPTY)
        if is_initial:
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            gid = group.group_id
            self._schedule(join_key(gid), delay, lambda: self._try_complete_initial_rebalance(gid, delay, remaining))
        group.transition_to(GroupState.PREPARING_REBALANCE)
        if not is_initial:
            if group.has_all_members_joined():
                return self._complete_join(group)
            gid = group.group_id
            self._schedule(join_key(gid), group.rebalance_timeout_ms(), lambda: self._complete_join_by_id(gid))
        return Result()

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> Result:
        # The initial (delayed) rebalance never completes early; only its timer completes it.
        if (
            group.is_in(GroupState.PREPARING_REBALANCE)
            and group.previous_state is not GroupState.EMPTY
            and group.has_all_members_joined()
        ):
            return self._complete_join(group)
        return Result()

    def _try_complete_initial_rebalance(self, group_id: str, delay_ms: int, remaining_ms: int) -> Result:
        group = self.groups.get(group_id)
        if group is None:
            return Result()
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self.config.group_initial_rebalance_delay_ms, remaining_ms)
            # Kafka decrements the remaining budget by the *previous* delay
            # (GroupMetadataManager.tryCompleteInitialRebalanceElseSchedule).
            new_remaining = max(remaining_ms - delay_ms, 0)
            self._schedule(
                join_key(group_id), new_delay,
                lambda: self._try_complete_initial_rebalance(group_id, new_delay, new_remaining),
            )
            return Result()
        return self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> Result:
        group = self.groups.get(group_id)
        return Result() if group is None else self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> Result:
        gid = group.group_id
        self.timers.cancel(join_key(gid))
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                group.remove(member.member_id)
                self.timers.cancel(heartbeat_key(gid, member.member_id))
        if group.is_in(GroupState.DEAD):
            return Result()
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin remain: wait for their session timeouts.
            self._schedule(join_key(gid), group.rebalance_timeout_ms(), lambda: self._complete_join_by_id(gid))
            return Result()
        group.init_next_generation()
        if group.is_in(GroupState.EMPTY):
            return written([(GroupMetadataKey(gid), group.to_metadata_value({}))])
        for member in list(group.members.values()):
            response = self._join_response(group, member.member_id, with_members=group.is_leader(member.member_id))
            group.complete_join(member, response)
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation = group.generation_id
        self._schedule(sync_key(gid), group.rebalance_timeout_ms(), lambda: self._expire_pending_sync(gid, generation))
        return Result()

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> Result:
        group = self.groups.get(group_id)
        if group is None or generation_id != group.generation_id:
            return Result()
        if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.pending_sync_members:
            for member_id in list(group.pending_sync_members):
                group.remove(member_id)
                self.timers.cancel(heartbeat_key(group_id, member_id))
            return self._prepare_rebalance(group)
        return Result()

    def _reset_and_propagate_assignment_with_error(self, group: ClassicGroup, error: Errors) -> None:
        if not group.is_in(GroupState.COMPLETING_REBALANCE):
            raise IllegalStateError(f"group {group.group_id} must be CompletingRebalance, is {group.state.value}")
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        if not group.is_in(GroupState.COMPLETING_REBALANCE):
            raise IllegalStateError(f"group {group.group_id} must be CompletingRebalance, is {group.state.value}")
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, Errors.NONE)

    def _propagate_assignment(self, group: ClassicGroup, error: Errors) -> None:
        ok = error is Errors.NONE
        for member in list(group.members.values()):
            response = SyncGroupResponse(
                error, member.assignment,
                group.protocol_type if ok else None, group.protocol_name if ok else None,
            )
            if group.complete_sync(member, response):
                # A session that expired while parked was ignored: arm a fresh one now.
                self._reschedule_heartbeat(group, member)

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self.timers.cancel(sync_key(group.group_id))

    # ------------------------------------------------------------------------------------------
    # Liveness (Kafka's rescheduleClassicGroupMemberHeartbeat / expireClassicGroupMemberHeartbeat)
    # ------------------------------------------------------------------------------------------
    def _reschedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        gid, mid = group.group_id, member.member_id
        self._schedule(
            heartbeat_key(gid, mid),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_heartbeat(gid, mid),
        )

    def _expire_heartbeat(self, group_id: str, member_id: str) -> Result:
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return Result()
        if group.is_pending_member(member_id):
            group.remove(member_id)
            if group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
                return self._complete_join(group)
            return Result()
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            return self._remove_member_and_update_group(group, member)
        return Result()

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member) -> Result:
        group.complete_join(member, JoinGroupResponse(Errors.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return self._maybe_prepare_rebalance_or_complete_join(group)
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            return self._complete_join(group)
        return Result()

