"""The classic group: members, state machine, protocol selection (Kafka's ``ClassicGroup`` with the
transitions of ``ClassicGroupState``, ``selectProtocol`` and ``maybeElectNewJoinedLeader``).

A ``ClassicGroup`` is soft state: the live view the handlers work on. Its durable projection is the
GroupMetadata record written at SyncGroup / join completion; after a load it is rebuilt from that
record (Stable with members, Empty without), exactly as Kafka's loader does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import StrEnum

from raygroups.coordinator.consumer_protocol import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE
from raygroups.coordinator.consumer_protocol import SchemaError, decode_subscription
from raygroups.coordinator.errors import CoordinatorError, Errors, IllegalStateError
from raygroups.coordinator.messages import Deferred, JoinGroupMember
from raygroups.coordinator.records import GroupMetadataValue, MemberMetadata


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        }
    ),
}


class Member:
    """A classic group member; ``await_join`` / ``await_sync`` hold its parked request, if any."""

    __slots__ = (
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "protocol_type",
        "protocols",
        "assignment",
        "await_join",
        "await_sync",
        "is_new",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = tuple(protocols)
        self.assignment = assignment
        self.await_join: Deferred | None = None
        self.await_sync: Deferred | None = None
        self.is_new = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.await_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.await_sync is not None

    def has_satisfied_heartbeat(self) -> bool:
        # Kafka's new coordinator: an expiry means no heartbeat arrived in time; a new member can expire
        # while parked in JoinGroup (the 300 s join timeout), an old one parked in join/sync cannot.
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def matches(self, protocols: Iterable[tuple[str, bytes]]) -> bool:
        return tuple(protocols) == self.protocols

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise IllegalStateError(f"member {self.member_id} does not support protocol {protocol}")

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise IllegalStateError(f"member {self.member_id} supports none of the candidate protocols")


class ClassicGroup:
    """Kafka's ``ClassicGroup``. Guarantees: transitions are only those Kafka allows (others raise
    ``IllegalStateError``); members iterate in insertion order, so leader re-election is
    deterministic; at most one member id per static instance id."""

    def __init__(self, group_id: str, now_ms: Callable[[], int], state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self._now_ms = now_ms
        self.state = state
        self.previous_state = state
        self.state_timestamp_ms: int | None = None
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: set[str] = set()
        # Told +1/-1 as pending ids come and go (the shard's count behind group.classic.max.pending.members).
        self.on_pending_change: Callable[[int], None] | None = None
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self.new_member_added = False
        self.subscribed_topics: frozenset[str] | None = None
        self._supported: dict[str, int] = {}

    # --- state machine -----------------------------------------------------------------------
    def is_in(self, state: GroupState) -> bool:
        return self.state is state

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def transition_to(self, state: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateError(
                f"group {self.group_id} should be in one of {sorted(s.value for s in _VALID_PREVIOUS[state])} "
                f"before moving to {state.value}, but is {self.state.value}"
            )
        self.previous_state = self.state
        self.state = state
        self.state_timestamp_ms = self._now_ms()

    # --- membership ----------------------------------------------------------------------------
    @property
    def num_members(self) -> int:
        return len(self.members)

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self.members:
            raise IllegalStateError(f"pending member {member_id} is already a member of {self.group_id}")
        if member_id not in self.pending_members:
            self.pending_members.add(member_id)
            self._pending_changed(+1)

    def _discard_pending(self, member_id: str) -> None:
        if member_id in self.pending_members:
            self.pending_members.discard(member_id)
            self._pending_changed(-1)

    def _pending_changed(self, delta: int) -> None:
        if self.on_pending_change is not None:
            self.on_pending_change(delta)

    def static_member_id(self, instance_id: str) -> str | None:
        return self.static_members.get(instance_id)

    def add(self, member: Member, await_join: Deferred | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise IllegalStateError(f"static member {member.group_instance_id} is already in {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise IllegalStateError("the group and member's protocol type must be the same")
        if not self.supports_protocols(member.protocol_type, [p for p, _ in member.protocols]):
            raise IllegalStateError("none of the member's protocols can be supported")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count(member, +1)
        member.await_join = await_join
        if await_join is not None:
            self.num_awaiting_join += 1
        self._discard_pending(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count(member, -1)
            if member.is_awaiting_join:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self._discard_pending(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self,
        member: Member,
        protocols: tuple[tuple[str, bytes], ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        await_join: Deferred | None,
    ) -> None:
        self._count(member, -1)
        member.protocols = tuple(protocols)
        self._count(member, +1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if await_join is not None and not member.is_awaiting_join:
            self.num_awaiting_join += 1
        elif await_join is None and member.is_awaiting_join:
            self.num_awaiting_join -= 1
        member.await_join = await_join

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        old = self.members.pop(old_member_id, None)
        if old is None:
            raise IllegalStateError(f"cannot replace non-existing member id {old_member_id}")
        # The old instance is fenced: its parked requests are answered FENCED_INSTANCE_ID (as Kafka's
        # ClassicGroup.replaceStaticMember does, KIP-345).
        from raygroups.coordinator.messages import JoinGroupResponse, SyncGroupResponse

        self.complete_join(old, JoinGroupResponse(Errors.FENCED_INSTANCE_ID, member_id=old_member_id))
        self.complete_sync(old, SyncGroupResponse(Errors.FENCED_INSTANCE_ID))
        new = Member(
            new_member_id, old.group_instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
            old.session_timeout_ms, old.protocol_type, old.protocols, old.assignment,
        )
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        # Kafka's new coordinator leaves the old id in the pending-sync set: if the old member never synced,
        # the pending-sync timeout (GroupMetadataManager.expirePendingSync) still starts a rebalance.
        return new

    def complete_join(self, member: Member, response) -> bool:
        if member.await_join is None:
            return False
        deferred, member.await_join = member.await_join, None
        self.num_awaiting_join -= 1
        deferred.complete(response)
        return True

    def complete_sync(self, member: Member, response) -> bool:
        if member.await_sync is None:
            return False
        deferred, member.await_sync = member.await_sync, None
        deferred.complete(response)
        return True

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- protocols -----------------------------------------------------------------------------
    def _count(self, member: Member, delta: int) -> None:
        for name, _ in member.protocols:
            self._supported[name] = self._supported.get(name, 0) + delta

    def supports_protocols(self, protocol_type: str, protocol_names: Iterable[str]) -> bool:
        names = list(protocol_names)
        if self.is_in(GroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(self._supported.get(p, 0) == n for p in names)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self._supported.items() if count == n}

    def select_protocol(self) -> str:
        if not self.members:
            raise IllegalStateError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # Kafka breaks ties by hash-map order; we break them by first vote, which is deterministic.
        return max(votes, key=lambda name: votes[name])

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics.update(decode_subscription(member.metadata(self.protocol_name)).topics)
        except (SchemaError, IllegalStateError):
            return None
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.uses_consumer_protocol()
        return topic in self.subscribed_topics

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members.clear()

    def current_members_for_leader(self) -> list[JoinGroupMember]:
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE):
            raise IllegalStateError(f"cannot list members of group {self.group_id} in state {self.state.value}")
        return [
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        ]

    # --- validation ----------------------------------------------------------------------------
    def validate_member(self, member_id: str, instance_id: str | None) -> None:
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"unknown group instance id {instance_id}")
            if existing != member_id:
                raise CoordinatorError(
                    Errors.FENCED_INSTANCE_ID, f"instance {instance_id} is owned by member {existing}"
                )
        if member_id not in self.members:
            raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"unknown member {member_id}")

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation_id: int) -> None:
        if self.is_in(GroupState.DEAD):
            raise CoordinatorError(Errors.COORDINATOR_NOT_AVAILABLE)
        if generation_id < 0 and self.is_in(GroupState.EMPTY):
            return  # simple / admin commit
        if generation_id >= 0 or member_id or instance_id is not None:
            self.validate_member(member_id, instance_id)
            if generation_id != self.generation_id:
                raise CoordinatorError(Errors.ILLEGAL_GENERATION)
        elif not self.is_in(GroupState.EMPTY):
            raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, "generation -1 commit to a non-empty group")
        if self.is_in(GroupState.COMPLETING_REBALANCE):
            raise CoordinatorError(Errors.REBALANCE_IN_PROGRESS)

    # --- durable projection --------------------------------------------------------------------
    def to_metadata_value(self, assignment: dict[str, bytes] | None = None) -> GroupMetadataValue:
        """The GroupMetadata value Kafka writes for this group (``newGroupMetadataRecord``)."""
        members = []
        if self.members:
            for m in self.members.values():
                members.append(
                    MemberMetadata(
                        m.member_id,
                        m.group_instance_id,
                        m.client_id,
                        m.client_host,
                        m.rebalance_timeout_ms,
                        m.session_timeout_ms,
                        m.metadata(self.protocol_name) if self.protocol_name is not None else b"",
                        assignment.get(m.member_id, b"") if assignment is not None else m.assignment,
                    )
                )
        return GroupMetadataValue(
            self.protocol_type or "",
            self.generation_id,
            self.protocol_name,
            self.leader_id,
            self.state_timestamp_ms if self.state_timestamp_ms is not None else -1,
            tuple(members),
        )

    @classmethod
    def from_metadata_value(cls, group_id: str, value: GroupMetadataValue, now_ms: Callable[[], int]) -> ClassicGroup:
        """Kafka's loader: Stable with members, Empty without; one protocol = the persisted one."""
        group = cls(group_id, now_ms, GroupState.STABLE if value.members else GroupState.EMPTY)
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        group.state_timestamp_ms = None if value.current_state_timestamp_ms == -1 else value.current_state_timestamp_ms
        for mm in value.members:
            member = Member(
                mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                mm.rebalance_timeout_ms if mm.rebalance_timeout_ms != -1 else mm.session_timeout_ms,
                mm.session_timeout_ms, value.protocol_type, ((value.protocol or "", mm.subscription),),
                mm.assignment,
            )
            group.members[mm.member_id] = member
            group._count(member, +1)
            if mm.group_instance_id is not None:
                group.static_members[mm.group_instance_id] = mm.member_id
        if group.leader_id is None and group.members:
            group.leader_id = next(iter(group.members))
        group.subscribed_topics = group.compute_subscribed_topics()
        return group
