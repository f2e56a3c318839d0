"""One ``__consumer_offsets`` partition's group coordinator: the classic protocol as a deterministic
state machine (Kafka's new Java coordinator for classic groups, ``GroupMetadataManager.classicGroup*``).

Handlers validate against current state, mutate soft state (members, timers, parked requests) and
return what they write: a ``Result`` with the records, the response (or None when a ``Deferred`` is
completed later, for parked JoinGroup/SyncGroup requests) and ``on_done`` callbacks; a handler that only
reads returns its response. The runtime that drives a shard replays each operation's records into
``DurableState`` (``apply``, with undo tokens), appends them, and releases the responses only once they
are durable; on an append failure it undoes the records and runs the ``on_done`` callbacks with the
mapped error (Kafka's ``CoordinatorResult`` and ``CoordinatorRuntime``).

Guarantees: given the same requests, clock and member-id generator, the same records and responses;
generations never decrease; in one generation each member id is answered by one join completion.
KIP-848 consumer groups are ``shard_consumer``'s. Not covered here: transactional offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from raygroups.coordinator.clock import Clock, Timers
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.consumer_group import consumer_group_tombstones
from raygroups.coordinator.errors import CoordinatorError, Errors, IllegalStateError
from raygroups.coordinator.group import ClassicGroup, GroupState, Member
from raygroups.coordinator.messages import (
    UNKNOWN_MEMBER_ID,
    Deferred,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMemberResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from raygroups.coordinator.records import GroupMetadataKey, Record, new_empty_group_metadata_record
from raygroups.coordinator.result import Result, written
from raygroups.coordinator.shard_consumer import ConsumerGroupMixin
from raygroups.coordinator.shard_offsets import OffsetsMixin
from raygroups.coordinator.shard_rebalance import RebalanceMixin, heartbeat_key, join_key, sync_key
from raygroups.coordinator.state import DurableState


class GroupCoordinatorShard(RebalanceMixin, OffsetsMixin, ConsumerGroupMixin):
    def __init__(
        self,
        partition: int,
        config: CoordinatorConfig,
        clock: Clock,
        timers: Timers,
        new_member_id: Callable[[str], str],
        run_timer: Callable[[Callable[[], Result]], None],
        topics: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self.partition = partition
        self.config = config
        self.clock = clock
        self.timers = timers
        self._new_member_id = new_member_id
        # The runtime runs every timer expiry as an operation: what it returns goes the way of a request's.
        self._run_timer = run_timer
        # The topics the deployment knows (name -> partitions): what consumer groups are assigned from
        # (Kafka's metadata image).
        self.topics = topics
        self.state = DurableState()
        self.groups: dict[str, ClassicGroup] = {}
        # KIP-394 pending member ids of the groups in ``self.groups`` (group.classic.max.pending.members).
        self.pending_member_count = 0
        # Soft: when each consumer group's target was last computed here (KIP-1263's assignment interval).
        self.consumer_assigned_at: dict[str, int] = {}

    # ------------------------------------------------------------------------------------------
    # Operation plumbing (used by the runtime)
    # ------------------------------------------------------------------------------------------
    def now_ms(self) -> int:
        return self.clock.now_ms()

    def apply(self, records: Iterable[Record], undo: list[tuple]) -> None:
        """Replay an operation's records into the durable state now (speculatively, before they are
        durable), adding to ``undo`` the tokens with which ``revert`` takes them back if their append fails."""
        for key, value in records:
            undo.append(self.state.replay(key, value))

    def revert(self, undo: list[tuple]) -> Result:
        """Undo the records of a failed append and bring the live groups they touched back in line; what
        that writes (a group back over ``group.max.size`` rebalances) is a new operation's."""
        touched = set()
        for token in reversed(undo):
            self.state.undo(token)
            touched.add(token[1])
        result = Result()
        for group_id in touched:
            result.add(self._resync_group_after_revert(group_id))
        return result

    def _resync_group_after_revert(self, group_id: str) -> Result:
        group = self.groups.get(group_id)
        if group_id not in self.state.groups:
            # The group only existed through the records that were undone (e.g. created by this
            # JoinGroup or by a simple commit): it never existed.
            if group is not None and not group.members and not group.pending_members:
                self._drop_group(group_id)
            return Result()
        if group is None or group.is_in(GroupState.DEAD):
            # A deletion (DeleteGroups, expiration) was undone: the group comes back as loaded.
            return self._materialize_group(group_id)
        return Result()

    def _schedule(self, key: tuple, delay_ms: int, fn: Callable[[], Result]) -> None:
        self.timers.schedule(key, delay_ms, lambda: self._run_timer(fn))

    def _group_or_none(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    def _get_or_create_group(self, group_id: str) -> tuple[ClassicGroup, bool]:
        group = self.groups.get(group_id)
        if group is not None:
            return group, False
        group = ClassicGroup(group_id, self.now_ms)
        self._adopt_group(group)
        return group, True

    def _adopt_group(self, group: ClassicGroup) -> None:
        """Put ``group`` in ``self.groups`` (in place of any other under its id) and count its pending ids."""
        if self.groups.get(group.group_id, group) is not group:
            self._release_group(group.group_id)
        self.groups[group.group_id] = group
        self.pending_member_count += len(group.pending_members)
        group.on_pending_change = self._count_pending

    def _release_group(self, group_id: str) -> ClassicGroup | None:
        """Take a group out of ``self.groups``; its pending ids stop counting (a group kept aside for a
        revert counts again when ``_adopt_group`` brings it back)."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.on_pending_change = None
            self.pending_member_count -= len(group.pending_members)
        return group

    def _count_pending(self, delta: int) -> None:
        self.pending_member_count += delta

    def at_group_limit(self) -> bool:
        """No room for one more group on this shard (group.classic.max.groups)."""
        return len(self.groups) >= self.config.group_classic_max_groups

    def _drop_group(self, group_id: str) -> None:
        group = self._release_group(group_id)
        if group is None:
            return
        self.timers.cancel(join_key(group_id))
        self.timers.cancel(sync_key(group_id))
        for member_id in list(group.members) + list(group.pending_members):
            self.timers.cancel(heartbeat_key(group_id, member_id))

    # ------------------------------------------------------------------------------------------
    # JoinGroup (Kafka's GroupMetadataManager.classicGroupJoin)
    # ------------------------------------------------------------------------------------------
    def join_group(self, req: JoinGroupRequest, respond: Deferred) -> Result:
        """Answers through ``respond`` (at once, or when the join completes); returns what it writes."""
        cfg = self.config
        if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            respond.complete(JoinGroupResponse(Errors.INVALID_SESSION_TIMEOUT, member_id=req.member_id))
            return Result()
        is_unknown_member = req.member_id == UNKNOWN_MEMBER_ID
        consumer_group = self.state.consumer_groups.get(req.group_id)
        replaced: list[Record] = []
        if consumer_group is not None:
            if consumer_group.members:
                # Kafka routes classic members into a consumer group with members (KIP-848's online
                # migration): not supported here, so the member is told its protocol does not fit the group.
                respond.complete(JoinGroupResponse(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id))
                return Result()
            if not is_unknown_member:
                # Kafka's classicGroupJoinToClassicGroup: a member id the new classic group cannot know.
                respond.complete(JoinGroupResponse(Errors.UNKNOWN_MEMBER_ID, member_id=req.member_id))
                return Result()
            # An empty consumer group gives way to a classic one (Kafka's maybeDeleteEmptyConsumerGroup).
            replaced = consumer_group_tombstones(consumer_group)
        group = self.groups.get(req.group_id)
        is_new_group = group is None
        if group is None:
            if not is_unknown_member:
                respond.complete(JoinGroupResponse(Errors.UNKNOWN_MEMBER_ID, member_id=req.member_id))
                return Result()
            if self.at_group_limit():
                respond.complete(JoinGroupResponse(Errors.GROUP_MAX_SIZE_REACHED, member_id=UNKNOWN_MEMBER_ID))
                return Result()
            group, _ = self._get_or_create_group(req.group_id)
        if not self._accept_joining_member(group, req.member_id):
            self._remove_member_and_timers(group, req.member_id)
            respond.complete(JoinGroupResponse(Errors.GROUP_MAX_SIZE_REACHED, member_id=UNKNOWN_MEMBER_ID))
            result = Result()
        elif (error := self._join_rejected(req, group)) is not None:
            respond.complete(JoinGroupResponse(error, member_id=req.member_id))
            result = Result()
        elif is_unknown_member:
            result = self._join_new_member(req, group, respond)
        else:
            result = self._join_existing_member(req, group, respond)
        rejected = respond.done and respond.value.error not in (Errors.NONE, Errors.MEMBER_ID_REQUIRED)
        if is_new_group and rejected:
            # Kafka would still persist the new empty group here; bad input must change nothing, so a
            # group created only by a rejected JoinGroup is dropped instead.
            self._drop_group(req.group_id)
        elif is_new_group and not result.records:
            # Kafka's new coordinator persists a freshly created group at once (generation 0, no
            # protocol type) so that the group exists in the log; if that write fails the group is
            # reverted and the join answered with the mapped error.
            group_id = req.group_id

            def on_done(error: Errors) -> None:
                if error is not Errors.NONE:
                    respond.complete(JoinGroupResponse(error))
                    # Kafka reverts its timeline to before this write, so the group never existed: no
                    # pending id (KIP-394), no parked static member, no timers
                    # (GroupMetadataManager.classicGroupJoin).
                    created = self.groups.get(group_id)
                    if created is not None and group_id not in self.state.groups:
                        for member in list(created.members.values()):
                            created.complete_join(member, JoinGroupResponse(error))
                        self._drop_group(group_id)

            result.write([new_empty_group_metadata_record(req.group_id, self.now_ms())], on_done)
        if replaced and not (is_new_group and rejected):
            result.records[:0] = replaced
        return result

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """``group.max.size`` acceptance (Kafka's GroupMetadataManager.acceptJoiningMember; KIP-389,
        KAFKA-9885)."""
        max_size = self.config.group_max_size
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or group.num_awaiting_join < max_size
        return member_id in group.members or group.num_members < max_size

    def _remove_member_and_timers(self, group: ClassicGroup, member_id: str) -> None:
        group.remove(member_id)
        if member_id:
            self.timers.cancel(heartbeat_key(group.group_id, member_id))

    @staticmethod
    def _join_rejected(req: JoinGroupRequest, group: ClassicGroup) -> Errors | None:
        """What a new or known member's JoinGroup is refused for before anything else: the group is Dead, or
        its protocols do not match (Kafka's classicGroupJoinNewMember and classicGroupJoinExistingMember)."""
        if group.is_in(GroupState.DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        if not group.supports_protocols(req.protocol_type, [p for p, _ in req.protocols]):
            return Errors.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _join_new_member(self, req: JoinGroupRequest, group: ClassicGroup, respond: Deferred) -> Result:
        new_member_id = self._new_member_id(req.group_instance_id or req.client_id)
        if req.group_instance_id is not None:
            existing = group.static_member_id(req.group_instance_id)
            if existing is not None:
                return self._update_static_member(req, group, existing, new_member_id, respond)
            return self._add_member_and_rebalance(req, group, new_member_id, respond)
        if req.require_known_member_id:
            # KIP-394: hand out an id, remember it as pending; the member joins with it next time.
            if self.pending_member_count >= self.config.group_classic_max_pending_members:
                # The shard holds as many pending ids as it may: retriable, since each expires after its
                # session timeout; the client rediscovers the coordinator and joins again after a backoff.
                respond.complete(JoinGroupResponse(Errors.COORDINATOR_NOT_AVAILABLE, member_id=UNKNOWN_MEMBER_ID))
                return Result()
            group.add_pending_member(new_member_id)
            self._schedule(
                heartbeat_key(group.group_id, new_member_id),
                req.session_timeout_ms,
                lambda gid=group.group_id, mid=new_member_id: self._expire_heartbeat(gid, mid),
            )
            respond.complete(JoinGroupResponse(Errors.MEMBER_ID_REQUIRED, member_id=new_member_id))
            return Result()
        return self._add_member_and_rebalance(req, group, new_member_id, respond)

    def _join_existing_member(self, req: JoinGroupRequest, group: ClassicGroup, respond: Deferred) -> Result:
        member_id = req.member_id
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:
                raise IllegalStateError(
                    f"JoinGroup with group_instance_id={req.group_instance_id} for pending member {member_id}"
                )
            return self._add_member_and_rebalance(req, group, member_id, respond)
        try:
            group.validate_member(member_id, req.group_instance_id)
        except CoordinatorError as e:
            respond.complete(JoinGroupResponse(e.error, member_id=member_id))
            return Result()
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return self._update_member_and_rebalance(req, group, member, respond)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            if not member.matches(req.protocols):
                return self._update_member_and_rebalance(req, group, member, respond)
            # Same metadata (e.g. a lost JoinGroup response): answer with the current generation.
            respond.complete(self._join_response(group, member_id, with_members=group.is_leader(member_id)))
        elif group.is_in(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                # A leader's JoinGroup forces a rebalance (e.g. topic metadata changed); so does new metadata.
                return self._update_member_and_rebalance(req, group, member, respond)
            respond.complete(self._join_response(group, member_id, with_members=False))
        else:
            respond.complete(JoinGroupResponse(Errors.UNKNOWN_MEMBER_ID, member_id=member_id))
        return Result()

    def _join_response(self, group: ClassicGroup, member_id: str, with_members: bool,
                       skip: bool = False) -> JoinGroupResponse:
        return JoinGroupResponse(
            Errors.NONE,
            generation_id=group.generation_id,
            member_id=member_id,
            leader=group.leader_id or "",
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            members=group.current_members_for_leader() if with_members else [],
            skip_assignment=skip,
        )

    def _add_member_and_rebalance(self, req: JoinGroupRequest, group: ClassicGroup, member_id: str,
                                  respond: Deferred) -> Result:
        member = Member(
            member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
            req.session_timeout_ms, req.protocol_type, req.protocols,
        )
        member.is_new = True
        # Extends the initial delay (new coordinator: any rebalance that started from Empty).
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True
        group.add(member, respond)
        # A new member cannot heartbeat while parked; time it out after the new-member join timeout.
        self._reschedule_heartbeat(group, member, self.config.group_new_member_join_timeout_ms)
        return self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_member_and_rebalance(self, req: JoinGroupRequest, group: ClassicGroup, member: Member,
                                     respond: Deferred) -> Result:
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, respond)
        return self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_static_member(self, req: JoinGroupRequest, group: ClassicGroup, old_member_id: str,
                              new_member_id: str, respond: Deferred) -> Result:
        """A static member restarted with an unknown member id (Kafka's
        GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin, KIP-345)."""
        current_leader = group.leader_id
        new_member = group.replace_static_member(req.group_instance_id, old_member_id, new_member_id)
        self.timers.cancel(heartbeat_key(group.group_id, old_member_id))
        self._reschedule_heartbeat(group, new_member)
        old_rebalance, old_session, old_protocols = (
            new_member.rebalance_timeout_ms, new_member.session_timeout_ms, new_member.protocols,
        )
        group.update_member(new_member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, respond)
        if group.is_in(GroupState.STABLE):
            if (group.protocol_name or "") == group.select_protocol():
                # Nothing changes for the others: persist the new member id, no rebalance.
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                instance_id = req.group_instance_id

                def on_done(error: Errors) -> None:
                    if error is not Errors.NONE:
                        # Revert: the old member id is valid again.
                        group.update_member(new_member, old_protocols, old_rebalance, old_session, None)
                        old_member = group.replace_static_member(instance_id, new_member_id, old_member_id)
                        self.timers.cancel(heartbeat_key(group.group_id, new_member_id))
                        self._reschedule_heartbeat(group, old_member)
                        respond.complete(JoinGroupResponse(
                            error, generation_id=group.generation_id, member_id=UNKNOWN_MEMBER_ID,
                            leader=current_leader or "", protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name,
                        ))
                    else:
                        # JoinGroup v9 (supportSkippingAssignment): the leader learns the members but skips
                        # the assignment; a follower sees the old leader id so that it does not assign.
                        is_leader = group.is_leader(new_member_id)
                        group.complete_join(new_member, self._join_response(
                            group, new_member_id, with_members=is_leader, skip=is_leader,
                        ))

                return written([(GroupMetadataKey(group.group_id), group.to_metadata_value(assignment))], on_done)
            return self._maybe_prepare_rebalance_or_complete_join(group)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may already have assigned to the old member id: rebalance.
            return self._prepare_rebalance(group)
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            raise IllegalStateError(
                f"group {group.group_id} in state {group.state.value} when static member "
                f"{req.group_instance_id} rejoined"
            )
        return self._maybe_complete_join_phase(group)

    # ------------------------------------------------------------------------------------------
    # SyncGroup (Kafka's GroupMetadataManager.classicGroupSync)
    # ------------------------------------------------------------------------------------------
    def sync_group(self, req: SyncGroupRequest, respond: Deferred) -> Result:
        """Answers through ``respond`` (at once, or when the leader's assignment is durable); returns what
        it writes (the leader's assignment)."""
        group = self.groups.get(req.group_id)
        if group is None or group.is_in(GroupState.EMPTY):
            # Kafka's new coordinator answers an Empty group before any other validation (classicGroupSync).
            respond.complete(SyncGroupResponse(Errors.UNKNOWN_MEMBER_ID))
            return Result()
        error = self._validate_sync(group, req)
        if error is not None:
            respond.complete(SyncGroupResponse(error))
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            respond.complete(SyncGroupResponse(Errors.REBALANCE_IN_PROGRESS))
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            member = group.members[req.member_id]
            member.await_sync = respond
            self._remove_pending_sync_member(group, req.member_id)
            if group.is_leader(req.member_id):
                assignment = dict(req.assignments)
                for member_id in group.members:
                    assignment.setdefault(member_id, b"")  # missing members get an empty assignment
                generation = req.generation_id

                def on_done(err: Errors) -> Result | None:
                    # Another member may have rejoined meanwhile: only act if nothing moved on.
                    if group.is_in(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation:
                        if err is not Errors.NONE:
                            self._reset_and_propagate_assignment_with_error(group, err)
                            return self._maybe_prepare_rebalance_or_complete_join(group)
                        self._set_and_propagate_assignment(group, assignment)
                        group.transition_to(GroupState.STABLE)
                    return None

                return written([(GroupMetadataKey(group.group_id), group.to_metadata_value(assignment))], on_done)
        elif group.is_in(GroupState.STABLE):
            # Kafka's new coordinator does not touch the session timer here (the old one did); the
            # timer is re-armed when a parked sync is answered (_propagate_assignment).
            self._remove_pending_sync_member(group, req.member_id)
            member = group.members[req.member_id]
            respond.complete(SyncGroupResponse(Errors.NONE, member.assignment, group.protocol_type, group.protocol_name))
        else:
            raise IllegalStateError(f"SyncGroup reached group {group.group_id} in state {group.state.value}")
        return Result()

    def _validate_sync(self, group: ClassicGroup, req: SyncGroupRequest) -> Errors | None:
        if group.is_in(GroupState.DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        try:
            group.validate_member(req.member_id, req.group_instance_id)
        except CoordinatorError as e:
            return e.error
        if req.generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        if _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(req.protocol_name, group.protocol_name):
            return Errors.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            if not group.pending_sync_members:
                self.timers.cancel(sync_key(group.group_id))
        else:
            self.timers.cancel(sync_key(group.group_id))

    # ------------------------------------------------------------------------------------------
    # Heartbeat
    # ------------------------------------------------------------------------------------------
    def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse:
        group = self.groups.get(req.group_id)
        if group is None:
            return HeartbeatResponse(Errors.UNKNOWN_MEMBER_ID)
        if group.is_in(GroupState.DEAD):
            return HeartbeatResponse(Errors.COORDINATOR_NOT_AVAILABLE)
        try:
            group.validate_member(req.member_id, req.group_instance_id)
        except CoordinatorError as e:
            return HeartbeatResponse(e.error)
        if req.generation_id != group.generation_id:
            return HeartbeatResponse(Errors.ILLEGAL_GENERATION)
        if group.is_in(GroupState.EMPTY):
            return HeartbeatResponse(Errors.UNKNOWN_MEMBER_ID)
        self._reschedule_heartbeat(group, group.members[req.member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return HeartbeatResponse(Errors.REBALANCE_IN_PROGRESS)
        return HeartbeatResponse(Errors.NONE)

    # ------------------------------------------------------------------------------------------
    # LeaveGroup (Kafka's GroupMetadataManager.classicGroupLeave)
    # ------------------------------------------------------------------------------------------
    def leave_group(self, req: LeaveGroupRequest) -> Result[LeaveGroupResponse]:
        group = self.groups.get(req.group_id)
        if group is None:
            return Result(response=LeaveGroupResponse(
                Errors.NONE, [LeaveMemberResponse(m, i, Errors.UNKNOWN_MEMBER_ID) for m, i in req.members]
            ))
        if group.is_in(GroupState.DEAD):
            return Result(response=LeaveGroupResponse(Errors.COORDINATOR_NOT_AVAILABLE))
        responses: list[LeaveMemberResponse] = []
        for member_id, instance_id in req.members:
            if member_id == UNKNOWN_MEMBER_ID:
                # Admin removal of a static member by instance id (KIP-345).
                existing = group.static_member_id(instance_id) if instance_id is not None else None
                if existing is not None:
                    self._remove_current_member(group, existing)
                    responses.append(LeaveMemberResponse(member_id, instance_id, Errors.NONE))
                else:
                    responses.append(LeaveMemberResponse(member_id, instance_id, Errors.UNKNOWN_MEMBER_ID))
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                self.timers.cancel(heartbeat_key(group.group_id, member_id))
                responses.append(LeaveMemberResponse(member_id, instance_id, Errors.NONE))
            else:
                try:
                    group.validate_member(member_id, instance_id)
                except CoordinatorError as e:
                    responses.append(LeaveMemberResponse(member_id, instance_id, e.error))
                    continue
                self._remove_current_member(group, member_id)
                responses.append(LeaveMemberResponse(member_id, instance_id, Errors.NONE))
        result = Result(response=LeaveGroupResponse(Errors.NONE, responses))
        if any(r.error is Errors.NONE for r in responses):
            if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                result.add(self._maybe_prepare_rebalance_or_complete_join(group))
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                # Kafka's new coordinator (snapshot code): maybeCompleteJoinPhase, so a leave during the
                # initial delayed rebalance does not complete it early.
                result.add(self._maybe_complete_join_phase(group))
        return result

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members[member_id]
        self.timers.cancel(heartbeat_key(group.group_id, member_id))
        group.complete_join(member, JoinGroupResponse(Errors.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID))
        group.remove(member_id)


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
