"""The member half of Kafka's classic group protocol, as a pure state machine (no threads, no clock reads).

``GroupMember`` decides what a consumer sends and how it reacts to every answer, the way Kafka's
``AbstractCoordinator``/``ConsumerCoordinator`` do: two-step join (``MEMBER_ID_REQUIRED``), the leader runs
the group's chosen assignor over the members' subscriptions, SyncGroup, heartbeats, eager or cooperative
(KIP-429) revocation, ``max.poll.interval.ms`` enforcement, and commit error classification.

Inputs are responses and ``now_ms``; outputs are the requests to send (``coordinator.messages`` request
dataclasses whose fields are exactly the keyword arguments of the client API) and listener events. A thin
shell (``raygroups.Consumer``) does the I/O, the threads and the user callbacks.

Guarantees: a response is applied only to the request it answers (stale answers, e.g. a heartbeat sent for
an older generation, are ignored as Kafka ignores them); partitions are reported *lost* instead of revoked
whenever the member was no longer part of the group (generation or member id reset); after a fatal error
(``FENCED_INSTANCE_ID``, ``GROUP_MAX_SIZE_REACHED``, any unexpected join/sync error) every further
``poll_rebalance``/``commit_request`` raises it. Not guaranteed: thread safety (the shell serialises calls).
"""


from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from raygroups.coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    Assignment,
    SchemaError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import (
    DEFAULT_CLIENT_HOST,
    NO_GENERATION,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from raygroups.membership.assignors import Assignor
from raygroups.membership.errors import (
    CommitFailedError,
    ConsumerError,
    FatalConsumerError,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    RebalanceInProgressError,
)
from raygroups.membership.events import (
    COOPERATIVE,
    EAGER,
    Generation,
    JoinComplete,
    ListenerEvent,
    MemberState,
    PrepareJoin,
    SendRequest,
    TopicPartition,
    Wait,
)
from raygroups.membership.offsets import MemberOffsetsMixin
from raygroups.membership.reactions import HEARTBEAT, JOIN_GROUP, SYNC_GROUP, Reaction

__all__ = [
    "COOPERATIVE",
    "DEFAULT_RETRY_BACKOFF_MS",
    "EAGER",
    "CommitFailedError",
    "ConsumerError",
    "FatalConsumerError",
    "FencedInstanceIdError",
    "Generation",
    "GroupMaxSizeReachedError",
    "GroupMember",
    "JoinComplete",
    "ListenerEvent",
    "MemberState",
    "PrepareJoin",
    "RebalanceInProgressError",
    "SendRequest",
    "TopicPartition",
    "Wait",
    "rebalance_protocol_of",
]

DEFAULT_RETRY_BACKOFF_MS = 100  # Kafka's retry.backoff.ms


def rebalance_protocol_of(assignors: Sequence[Any]) -> str:
    """The protocol all assignors support (COOPERATIVE if every one can, else EAGER), as Kafka picks it.

    An assignor declares ``supported_protocols`` or a single ``protocol``; cooperative assignors also run
    eagerly (Kafka's ``CooperativeStickyAssignor`` supports both)."""
    common = {EAGER, COOPERATIVE}
    for a in assignors:
        supported = getattr(a, "supported_protocols", None)
        if supported is None:
            protocol = getattr(a, "protocol", EAGER)
            supported = (EAGER, COOPERATIVE) if protocol == COOPERATIVE else (EAGER,)
        common &= set(supported)
    if not common:
        raise ValueError("assignors: the configured assignors share no rebalance protocol")
    return COOPERATIVE if COOPERATIVE in common else EAGER


class GroupMember(MemberOffsetsMixin):
    """One consumer's membership of a classic group (see module docstring for the guarantees)."""

    def __init__(
        self,
        group_id: str,
        topics: Sequence[str],
        assignors: Sequence[Any],
        *,
        group_instance_id: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        rebalance_timeout_ms: int = 300_000,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        client_id: str = "",
        metadata_max_age_ms: int = 300_000,
        now_ms: int = 0,
    ) -> None:
        if not assignors:
            raise ValueError("assignors must name at least one assignor")
        self.group_id = group_id
        self.topics = tuple(sorted(set(topics)))
        self.assignors = tuple(assignors)
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.client_id = client_id
        self.metadata_max_age_ms = metadata_max_age_ms
        self.protocol = rebalance_protocol_of(self.assignors)

        self.state = MemberState.UNJOINED
        self.generation = Generation()
        self.assignment: frozenset[TopicPartition] = frozenset()
        self.is_leader = False
        self.fatal_error: FatalConsumerError | None = None
        self.rejoin_needed = True
        self.rejoin_reason = ""
        self.closed = False
        self._needs_join_prepare = True
        self._pending_prepare: PrepareJoin | None = None
        self._inflight_join: JoinGroupRequest | None = None
        self._inflight_sync: SyncGroupRequest | None = None
        self._pending_sync: SyncGroupRequest | None = None
        self._backoff_until_ms = 0
        self._coordinator_unknown = False
        self._coordinator_retry_ms = 0
        self.rediscoveries = 0  # how often the coordinator was looked up again after being marked unknown
        self._heartbeat_inflight: HeartbeatRequest | None = None
        self._next_heartbeat_ms = now_ms
        self._session_deadline_ms = now_ms + session_timeout_ms
        self._poll_deadline_ms = now_ms + rebalance_timeout_ms
        # The leader's last assignment: the partition counts of the group's subscribed topics it saw (None
        # for a topic that did not exist), and when to read them again (Kafka's metadata.max.age.ms).
        self._assigned_metadata: dict[str, int | None] | None = None
        self._next_metadata_ms = 0

    # ------------------------------------------------------------------------------------------
    # Views
    # ------------------------------------------------------------------------------------------
    @property
    def member_id(self) -> str:
        return self.generation.member_id

    @property
    def generation_id(self) -> int:
        return self.generation.generation_id

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def rebalance_in_progress(self) -> bool:
        return self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE)

    @property
    def heartbeat_enabled(self) -> bool:
        return (self.state in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE)
                and self.fatal_error is None and not self.closed)

    def assignor(self, name: str | None) -> Any | None:
        return next((a for a in self.assignors if a.name == name), None)

    # ------------------------------------------------------------------------------------------
    # Coordinator discovery and common resets
    # ------------------------------------------------------------------------------------------
    def mark_coordinator_unknown(self, now_ms: int) -> None:
        """Forget the coordinator: nothing is sent before ``retry_backoff_ms``, then it is rediscovered."""
        if not self._coordinator_unknown:
            self._coordinator_unknown = True
            self._coordinator_retry_ms = now_ms + self.retry_backoff_ms
        # like a dropped connection: a heartbeat still in flight no longer blocks the next one
        self._heartbeat_inflight = None

    def coordinator_ready(self, now_ms: int) -> bool:
        """True when requests may be sent; a rediscovery (after backoff) restarts the session timer."""
        if self._coordinator_unknown:
            if now_ms < self._coordinator_retry_ms:
                return False
            self._coordinator_unknown = False
            self.rediscoveries += 1
            self._session_deadline_ms = now_ms + self.session_timeout_ms
        return True

    @property
    def coordinator_unknown(self) -> bool:
        return self._coordinator_unknown

    def request_rejoin(self, reason: str) -> None:
        self.rejoin_needed = True
        self.rejoin_reason = reason

    def _reset(self, reason: str, reset_member_id: bool) -> None:
        self.state = MemberState.UNJOINED
        if reset_member_id:
            self.generation = Generation()
        else:
            self.generation = Generation(NO_GENERATION, self.generation.member_id, None)
        self._pending_sync = None
        self._needs_join_prepare = True
        self.request_rejoin(reason)

    def _fail(self, error: FatalConsumerError) -> None:
        if self.fatal_error is None:
            self.fatal_error = error

    def raise_if_fatal(self) -> None:
        """Raise the fatal error, if any."""
        if self.fatal_error is not None:
            raise self.fatal_error

    def _backoff(self, now_ms: int) -> None:
        self._backoff_until_ms = now_ms + self.retry_backoff_ms

    # --- the reactions of ``membership.reactions``, one method each, whichever answer brought them ----------
    def _react_reset(self, reaction: Reaction, error: Errors, api: str) -> None:
        """RESET_MEMBER, RESET_GENERATION, FENCED: out of the group; only RESET_GENERATION keeps the member id
        (ILLEGAL_GENERATION: the member itself is still valid, Kafka 3.x)."""
        self._reset(f"encountered {error.name} from {api}", reaction is not Reaction.RESET_GENERATION)

    def _react_fenced(self, error: Errors, api: str) -> None:
        self._fail(FencedInstanceIdError(error, f"group instance id {self.group_instance_id!r} was fenced by "
                                                f"another consumer ({api})"))

    def _react_rebalance_failed(self, error: Errors) -> None:
        self.request_rejoin(f"rebalance failed due to {error.name}")

    # ------------------------------------------------------------------------------------------
    # Join / sync driver
    # ------------------------------------------------------------------------------------------
    def poll_rebalance(self, now_ms: int) -> PrepareJoin | SendRequest | Wait | None:
        """What the foreground must do next to be a stable member; ``None`` once it is.

        Raises the fatal error if there is one. A returned ``SendRequest`` is recorded as in flight."""
        self.raise_if_fatal()
        if self._inflight_join is not None or self._inflight_sync is not None:
            return Wait(None)
        if self._pending_sync is not None:
            request, self._pending_sync = self._pending_sync, None
            self._inflight_sync = request
            return SendRequest(request)
        if not self.rejoin_needed or self.closed:
            return None
        if not self.coordinator_ready(now_ms):
            return Wait(self._coordinator_retry_ms)
        if now_ms < self._backoff_until_ms:
            return Wait(self._backoff_until_ms)
        if self._needs_join_prepare:
            if self._pending_prepare is None:
                self._pending_prepare = self._join_prepare()
            return self._pending_prepare
        request = self._join_request()
        self.state = MemberState.PREPARING_REBALANCE
        self._inflight_join = request
        return SendRequest(request)

    def _join_prepare(self) -> PrepareJoin:
        owned = self.assignment
        if self.generation.is_reset:
            events = (ListenerEvent("on_partitions_lost", owned),) if owned else ()
            return PrepareJoin(events, False, owned)
        can_commit = self.state is MemberState.STABLE
        if self.protocol == EAGER:
            return PrepareJoin((ListenerEvent("on_partitions_revoked", owned),), can_commit, owned)
        gone = frozenset(tp for tp in owned if tp[0] not in self.topics)
        events = (ListenerEvent("on_partitions_revoked", gone),) if gone else ()
        return PrepareJoin(events, can_commit, gone)

    def finish_join_prepare(self, prepare: PrepareJoin) -> None:
        """The listener calls of ``prepare`` are done: drop those partitions; the JoinGroup comes next."""
        self.assignment = self.assignment - prepare.dropped
        self._needs_join_prepare = False
        self._pending_prepare = None
        self.is_leader = False
        self._assigned_metadata = None

    def _join_request(self) -> JoinGroupRequest:
        owned = tuple(sorted(self.assignment))
        protocols = []
        for a in self.assignors:
            user_data_fn = getattr(a, "subscription_user_data", None)
            user_data = user_data_fn(self.topics, owned, self.generation_id) if user_data_fn else None
            sub = Subscription(self.topics, user_data, owned, self.generation_id)
            protocols.append((a.name, encode_subscription(sub)))
        return JoinGroupRequest(
            self.group_id, self.member_id, PROTOCOL_TYPE, tuple(protocols), self.session_timeout_ms,
            self.rebalance_timeout_ms, self.group_instance_id, self.client_id, DEFAULT_CLIENT_HOST, True,
            self.rejoin_reason or None,
        )

    def leader_needs_metadata(self, response: JoinGroupResponse) -> bool:
        """True when this successful JoinGroup response makes us run the assignor (needs topic metadata)."""
        return (response.error is Errors.NONE and response.leader == response.member_id
                and not response.skip_assignment)

    def on_join_response(self, request: JoinGroupRequest, response: JoinGroupResponse, now_ms: int,
                         partitions_per_topic: Mapping[str, int] | None = None) -> None:
        """Apply a JoinGroup answer. A leader needs ``partitions_per_topic`` (``leader_needs_metadata``)."""
        if request is not self._inflight_join:
            return
        self._inflight_join = None
        error = response.error
        if error is Errors.NONE:
            self._on_join_success(response, now_ms, partitions_per_topic)
            return
        if self.state is MemberState.PREPARING_REBALANCE:
            self.state = MemberState.UNJOINED
        match JOIN_GROUP[error]:
            case Reaction.NEW_MEMBER_ID:
                self.generation = Generation(NO_GENERATION, response.member_id, None)
                self.request_rejoin(f"need to re-join with the given member-id: {response.member_id}")
            case Reaction.RESET_MEMBER:
                if request.member_id == self.member_id:
                    self._react_reset(Reaction.RESET_MEMBER, error, "JoinGroup")
                self._react_rebalance_failed(error)
            case Reaction.REJOIN:
                self._react_rebalance_failed(error)
            case Reaction.RETRY:
                self._backoff(now_ms)
            case Reaction.REDISCOVER:
                self.mark_coordinator_unknown(now_ms)
                self._backoff(now_ms)
            case Reaction.FENCED:
                self._react_fenced(error, "JoinGroup")
            case Reaction.GROUP_FULL:
                if not self.is_static:
                    self._reset(error.name, True)
                self._fail(GroupMaxSizeReachedError(error, f"group {self.group_id!r} already has the "
                                                           "configured maximum number of members"))
            case _:
                self._fail(FatalConsumerError(error, "JoinGroup failed"))

    def _on_join_success(self, response: JoinGroupResponse, now_ms: int,
                         partitions_per_topic: Mapping[str, int] | None) -> None:
        if response.protocol_type is not None and response.protocol_type != PROTOCOL_TYPE:
            self._fail(FatalConsumerError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                                          f"group protocol type is {response.protocol_type!r}"))
            return
        if self.state is not MemberState.PREPARING_REBALANCE:
            # Left (e.g. poll timeout) while the JoinGroup was parked: this generation is not ours.
            self.request_rejoin("the member left the group while joining")
            self._backoff(now_ms)
            return
        assignor = self.assignor(response.protocol_name)
        if assignor is None:
            self._fail(FatalConsumerError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                                          f"coordinator selected unknown assignor {response.protocol_name!r}"))
            return
        self.state = MemberState.COMPLETING_REBALANCE
        self.generation = Generation(response.generation_id, response.member_id, response.protocol_name)
        self._enable_heartbeats(now_ms)
        assignments: dict[str, bytes] = {}
        if response.leader == response.member_id:
            self.is_leader = True
            if not response.skip_assignment:
                if partitions_per_topic is None:
                    raise ValueError("partitions_per_topic is required when this member leads the group")
                assignments = self._perform_assignment(assignor, response, partitions_per_topic)
                if assignments is None:
                    return
                self._next_metadata_ms = now_ms + self.metadata_max_age_ms
        self._pending_sync = SyncGroupRequest(
            self.group_id, self.generation_id, self.member_id, assignments, self.group_instance_id,
            PROTOCOL_TYPE, response.protocol_name,
        )

    def _perform_assignment(self, assignor: Any, response: JoinGroupResponse,
                            partitions_per_topic: Mapping[str, int]) -> dict[str, bytes] | None:
        subscriptions: dict[str, Subscription] = {}
        try:
            for m in response.members:
                subscriptions[m.member_id] = decode_subscription(m.metadata)
        except SchemaError as e:
            self._fail(FatalConsumerError(Errors.INCONSISTENT_GROUP_PROTOCOL, f"undecodable subscription: {e}"))
            return None
        subscribed = {t for s in subscriptions.values() for t in s.topics}
        metadata = {t: n for t, n in partitions_per_topic.items() if t in subscribed}
        self._assigned_metadata = {t: metadata.get(t) for t in subscribed}
        if isinstance(assignor, Assignor):
            # Static members keep their place (range/roundrobin order by group.instance.id, KIP-345).
            instance_ids = {m.member_id: m.group_instance_id for m in response.members}
            result = dict(assignor.assign(metadata, subscriptions, instance_ids))
        else:  # a user's own assignor object: the two-argument form
            result = dict(assignor.assign(metadata, subscriptions))
        if self.protocol == COOPERATIVE:
            # KIP-429's rule: a partition still owned by one member is never handed to another in the
            # same round (it is revoked first, and assigned in the next round).
            added: set[TopicPartition] = set()
            revoked: set[TopicPartition] = set()
            for m, sub in subscriptions.items():
                new = set(result.get(m, Assignment()).partitions)
                owned = set(sub.owned_partitions)
                added |= new - owned
                revoked |= owned - new
            moved = added & revoked
            if moved:
                self._fail(FatalConsumerError(Errors.UNKNOWN_SERVER_ERROR, f"assignor {assignor.name!r} violates "
                                              f"the cooperative protocol: {sorted(moved)} moved in one round"))
                return None
        return {m: encode_assignment(result.get(m, Assignment())) for m in subscriptions}

    # ------------------------------------------------------------------------------------------
    # The leader's metadata (Kafka's ConsumerCoordinator.rejoinNeededOrPending: a leader whose assignment
    # snapshot no longer matches the metadata it reads rejoins, so that partitions added to a subscribed
    # topic, or a subscribed topic created, get assigned)
    # ------------------------------------------------------------------------------------------
    def metadata_check_due(self, now_ms: int) -> bool:
        """True when this member led the last assignment, is stable, and metadata.max.age.ms has passed."""
        return (self.is_leader and self._assigned_metadata is not None and self.state is MemberState.STABLE
                and not self.rejoin_needed and now_ms >= self._next_metadata_ms)

    def on_metadata(self, partitions_per_topic: Mapping[str, int], now_ms: int) -> None:
        """Topic metadata read: rejoin when a subscribed topic's partition count differs from the one the
        last assignment used."""
        self._next_metadata_ms = now_ms + self.metadata_max_age_ms
        if self._assigned_metadata is None:
            return
        changed = sorted(t for t, n in self._assigned_metadata.items() if partitions_per_topic.get(t) != n)
        if changed:
            self.request_rejoin(f"cached metadata has changed: the partitions of {', '.join(changed)}")

    def on_sync_response(self, request: SyncGroupRequest, response: SyncGroupResponse,
                         now_ms: int) -> JoinComplete | None:
        """Apply a SyncGroup answer; a ``JoinComplete`` means the member is stable in a new generation."""
        if request is not self._inflight_sync:
            return None
        self._inflight_sync = None
        unchanged = (request.generation_id == self.generation_id and request.member_id == self.member_id)
        error = response.error
        if error is Errors.NONE:
            if self.state is not MemberState.COMPLETING_REBALANCE or not unchanged:
                self.request_rejoin("generation was reset before the SyncGroup answer")
                return None
            if response.protocol_name is not None and response.protocol_name != self.generation.protocol_name:
                self._fail(FatalConsumerError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                                              f"SyncGroup protocol {response.protocol_name!r}"))
                return None
            return self._on_sync_success(response)
        match reaction := SYNC_GROUP[error]:
            case Reaction.REJOIN:
                self.request_rejoin("SyncGroup: the group began another rebalance")
            case Reaction.RESET_MEMBER | Reaction.RESET_GENERATION:
                if unchanged:
                    self._react_reset(reaction, error, "SyncGroup")
                self._react_rebalance_failed(error)
            case Reaction.REDISCOVER | Reaction.RETRY:
                if reaction is Reaction.REDISCOVER:
                    self.mark_coordinator_unknown(now_ms)
                self._react_rebalance_failed(error)
                self._backoff(now_ms)
            case Reaction.FENCED:
                self._react_fenced(error, "SyncGroup")
            case _:
                self._fail(FatalConsumerError(error, "SyncGroup failed"))
        return None

    def _on_sync_success(self, response: SyncGroupResponse) -> JoinComplete | None:
        try:
            assignment = decode_assignment(response.assignment)
        except SchemaError as e:
            self._fail(FatalConsumerError(Errors.INCONSISTENT_GROUP_PROTOCOL, f"undecodable assignment: {e}"))
            return None
        self.state = MemberState.STABLE
        self.rejoin_needed = False
        self.rejoin_reason = ""
        assigned = frozenset(assignment.partitions)
        if any(t not in self.topics for t, _ in assigned):
            self.request_rejoin("received assignment does not match the current subscription")
            return None
        owned = self.assignment
        revoked: frozenset[TopicPartition] = frozenset()
        if self.protocol == COOPERATIVE:
            revoked = owned - assigned
            if revoked:
                self.request_rejoin("need to revoke partitions and re-join")
        return JoinComplete(self.generation, assignment, assigned, assigned - owned, revoked)

    def finish_join(self, complete: JoinComplete) -> None:
        """The revocation callback (if any) ran: adopt the new assignment and tell the assignor."""
        self.assignment = complete.assigned
        self._needs_join_prepare = True
        on_assignment = getattr(self.assignor(complete.generation.protocol_name), "on_assignment", None)
        if on_assignment is not None:
            on_assignment(complete.assignment, complete.generation.generation_id)

    # ------------------------------------------------------------------------------------------
    # Heartbeats and the poll timer (background work)
    # ------------------------------------------------------------------------------------------
    def _enable_heartbeats(self, now_ms: int) -> None:
        self._session_deadline_ms = now_ms + self.session_timeout_ms
        self._poll_deadline_ms = max(self._poll_deadline_ms, now_ms + self.rebalance_timeout_ms)
        self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms

    def on_poll(self, now_ms: int) -> LeaveGroupRequest | None:
        """The application called ``poll()``. If it did so too late, leave first (as Kafka's
        ``pollHeartbeat`` does); then restart the ``max.poll.interval.ms`` timer."""
        leave = None
        if self.heartbeat_enabled and now_ms >= self._poll_deadline_ms:
            leave = self.maybe_leave_group("consumer poll timeout has expired")
        self._poll_deadline_ms = now_ms + self.rebalance_timeout_ms
        return leave

    def poll_background(self, now_ms: int) -> HeartbeatRequest | LeaveGroupRequest | None:
        """One step of the heartbeat thread: a heartbeat when due, or LeaveGroup when the application has
        not polled within ``max.poll.interval.ms`` (dynamic members only; static ones just reset)."""
        if not self.heartbeat_enabled or not self.coordinator_ready(now_ms):
            return None
        if now_ms >= self._session_deadline_ms:
            self.mark_coordinator_unknown(now_ms)
            return None
        if now_ms >= self._poll_deadline_ms:
            return self.maybe_leave_group("consumer poll timeout has expired")
        if self._heartbeat_inflight is not None or now_ms < self._next_heartbeat_ms:
            return None
        request = HeartbeatRequest(self.group_id, self.generation_id, self.member_id, self.group_instance_id)
        self._heartbeat_inflight = request
        self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        return request

    def expedite_heartbeat(self, now_ms: int) -> None:
        """Make the next heartbeat due at ``now_ms`` (tests, and callers that want an early liveness check)."""
        self._next_heartbeat_ms = now_ms

    def next_background_ms(self) -> int | None:
        """The earliest time ``poll_background`` may have something to do (None: nothing scheduled)."""
        if not self.heartbeat_enabled:
            return None
        if self._coordinator_unknown:
            return self._coordinator_retry_ms
        deadlines = [self._session_deadline_ms, self._poll_deadline_ms]
        if self._heartbeat_inflight is None:
            deadlines.append(self._next_heartbeat_ms)
        return min(deadlines)

    def on_heartbeat_response(self, request: HeartbeatRequest, response: Any, now_ms: int) -> None:
        if request is self._heartbeat_inflight:
            self._heartbeat_inflight = None
        error = response.error
        unchanged = (request.generation_id == self.generation_id and request.member_id == self.member_id)
        if error is Errors.NONE:
            self._session_deadline_ms = now_ms + self.session_timeout_ms
            return
        match reaction := HEARTBEAT[error]:
            case Reaction.REDISCOVER:
                self.mark_coordinator_unknown(now_ms)
                self._next_heartbeat_ms = now_ms + self.retry_backoff_ms
            case Reaction.REJOIN:
                self._session_deadline_ms = now_ms + self.session_timeout_ms
                if self.state is MemberState.STABLE and unchanged:
                    self.request_rejoin("group is already rebalancing")
            case Reaction.RESET_GENERATION | Reaction.RESET_MEMBER | Reaction.FENCED:
                if not unchanged:
                    return  # an answer to an older generation: ignore, as Kafka does
                self._react_reset(reaction, error, "Heartbeat")
                if reaction is Reaction.FENCED:
                    self._react_fenced(error, "Heartbeat")
            case _:
                self._next_heartbeat_ms = now_ms + self.retry_backoff_ms

    def maybe_leave_group(self, reason: str) -> LeaveGroupRequest | None:
        """Leave: a LeaveGroup request for a joined dynamic member (static members never send one), and in
        every case reset the generation so that the next ``poll_rebalance`` rejoins (partitions lost)."""
        request = None
        if (not self.is_static and not self._coordinator_unknown and self.state is not MemberState.UNJOINED
                and self.member_id):
            request = LeaveGroupRequest(self.group_id, ((self.member_id, None),), reason)
        self._reset(f"leaving the group: {reason}", True)
        return request

    # ------------------------------------------------------------------------------------------
    # Close
    # ------------------------------------------------------------------------------------------
    def leave_prepare(self) -> ListenerEvent | None:
        """Before closing: owned partitions are revoked, or lost if the member is no longer (fully) in the
        group. The caller invokes the event, then ``close``."""
        owned = self.assignment
        if not owned:
            return None
        if self.generation.is_reset or self.rebalance_in_progress:
            return ListenerEvent("on_partitions_lost", owned)
        return ListenerEvent("on_partitions_revoked", owned)

    def close(self) -> LeaveGroupRequest | None:
        """Drop the assignment and leave (LeaveGroup for a dynamic member only); idempotent."""
        if self.closed:
            return None
        self.assignment = frozenset()
        request = self.maybe_leave_group("the consumer is being closed") if self.fatal_error is None else None
        self.closed = True
        self.rejoin_needed = False
        return request
