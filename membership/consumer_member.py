"""The member half of KIP-848's consumer protocol, as a pure state machine (Kafka's
``ConsumerMembershipManager`` and ``ConsumerHeartbeatRequestManager``): no threads, no clock reads.

One request does everything: the member heartbeats (``ConsumerGroupHeartbeat``) at the interval the
coordinator gives it, sending the partitions it owns; the coordinator answers its target assignment when
it changes. The member reconciles on its own: it revokes what the target no longer holds (after the
application's revocation callback, with a commit before it), takes what it was given, and acknowledges by
heartbeating at once with its new ownership. No group-wide barrier: members reconcile at their own pace.

Outputs, as ``GroupMember``'s (so that ``raygroups.Consumer`` drives either): ``poll_background`` gives
the heartbeat to send (or None); ``poll_rebalance`` gives what the application thread must do to
reconcile -- a ``PrepareJoin`` whose listener events revoke (or lose) partitions, then a
``JoinComplete`` whose ``added`` are assigned -- or None when the member owns its target.

Reactions (Kafka's ``ConsumerHeartbeatRequestManager.onErrorResponse``): FENCED_MEMBER_EPOCH and
UNKNOWN_MEMBER_ID lose every partition and, once the application thread has run ``on_partitions_lost``,
rejoin at epoch 0 with the same member id (KIP-1082);
coordinator errors rediscover; UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED,
INVALID_REQUEST, UNSUPPORTED_ASSIGNOR and any other error are fatal.

``raygroups.Consumer(..., group_protocol="consumer")`` drives it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from raygroups.coordinator.consumer_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import OffsetCommitRequest, OffsetFetchRequest
from raygroups.membership.errors import (
    CommitFailedError,
    ConsumerError,
    FatalConsumerError,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
)
from raygroups.membership.events import JoinComplete, ListenerEvent, MemberState, PrepareJoin, TopicPartition

JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2
_REDISCOVER = (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS,
               Errors.REQUEST_TIMED_OUT, Errors.NETWORK_EXCEPTION)
_REJOIN = (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID)


class ConsumerProtocolMember:
    """One consumer's membership of a KIP-848 consumer group (see the module docstring)."""

    def __init__(self, group_id: str, topics: Sequence[str], member_id: str, *, group_instance_id: str | None = None,
                 rebalance_timeout_ms: int = 300_000, server_assignor: str | None = None,
                 retry_backoff_ms: int = 100, now_ms: int = 0) -> None:
        if not member_id:
            raise ValueError("member_id must be given (KIP-1082: the client chooses it, once)")
        self.group_id = group_id
        self.topics = tuple(sorted(set(topics)))
        self.group_instance_id = group_instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor
        self.retry_backoff_ms = retry_backoff_ms
        self._member_id = member_id
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = 0  # the coordinator's, from its first answer
        self.assignment: frozenset[TopicPartition] = frozenset()
        self.target: frozenset[TopicPartition] | None = None  # the last assignment the coordinator answered
        self.fatal_error: FatalConsumerError | None = None
        self.closed = False
        self.rediscoveries = 0
        self._joined = False
        self._lost = False
        self._ack_needed = False
        self._inflight: ConsumerGroupHeartbeatRequest | None = None
        self._next_heartbeat_ms = now_ms
        self._poll_deadline_ms = now_ms + rebalance_timeout_ms
        self._sent_topics: tuple[str, ...] | None = None
        self._stay_out = False  # left for a poll timeout: out until the application polls again

    # --- views ---------------------------------------------------------------------------------------
    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def generation_id(self) -> int:
        return self.member_epoch

    @property
    def stable(self) -> bool:
        return self._joined and self.target is not None and self.assignment == self.target

    @property
    def state(self) -> MemberState:
        """The classic member's states, as the consumer reports them: UNJOINED until the coordinator
        answers, PREPARING_REBALANCE while reconciling, STABLE once it owns its target."""
        if not self._joined:
            return MemberState.UNJOINED
        return MemberState.STABLE if self.stable else MemberState.PREPARING_REBALANCE

    @property
    def rebalance_in_progress(self) -> bool:
        return self._joined and not self.stable

    is_leader = False  # no member leads: the coordinator assigns
    heartbeat_response_type = ConsumerGroupHeartbeatResponse

    def raise_if_fatal(self) -> None:
        if self.fatal_error is not None:
            raise self.fatal_error

    # --- the heartbeat ------------------------------------------------------------------------------
    def poll_background(self, now_ms: int) -> ConsumerGroupHeartbeatRequest | None:
        """The heartbeat to send now, if any (one in flight at a time)."""
        if self.closed or self.fatal_error is not None:
            return None
        if self._joined and now_ms >= self._poll_deadline_ms:
            # The application has not polled within max.poll.interval.ms: leave (it rejoins when it does).
            self._stay_out = True
            return self._leave(LEAVE_EPOCH)
        if self._stay_out:
            return None
        if self._lost and not self._joined:
            # Fenced or left: rejoin only once the application has given up what it lost (Kafka's
            # ConsumerMembershipManager goes from FENCED to JOINING after onPartitionsLost completes), so that
            # nothing it still believes it owns is committed at the epoch it rejoins with.
            return None
        if self._inflight is not None or not (self._ack_needed or now_ms >= self._next_heartbeat_ms):
            return None
        owned = {t: sorted(p for tt, p in self.assignment if tt == t) for t in sorted({t for t, _ in self.assignment})}
        if self.member_epoch == JOIN_EPOCH:
            request = ConsumerGroupHeartbeatRequest(
                self.group_id, self._member_id, JOIN_EPOCH, self.group_instance_id, None, self.rebalance_timeout_ms,
                self.topics, None, self.server_assignor, {})
            self._sent_topics = self.topics
        else:
            # Incremental (Kafka's heartbeat state): the subscription only when it changed; what it owns always.
            names = None if self._sent_topics == self.topics else self.topics
            request = ConsumerGroupHeartbeatRequest(
                self.group_id, self._member_id, self.member_epoch, self.group_instance_id, None, -1, names, None,
                None, owned)
            if names is not None:
                self._sent_topics = names
        self._inflight = request
        self._ack_needed = False
        self._next_heartbeat_ms = now_ms + max(self.heartbeat_interval_ms, self.retry_backoff_ms)
        return request

    def on_heartbeat_response(self, request: ConsumerGroupHeartbeatRequest,
                              response: ConsumerGroupHeartbeatResponse, now_ms: int) -> None:
        if request is not self._inflight:
            return
        self._inflight = None
        if request.member_epoch < 0:
            return  # the answer to a leave
        error = response.error
        if error is Errors.NONE:
            self._joined = True
            self.member_epoch = response.member_epoch
            self.heartbeat_interval_ms = response.heartbeat_interval_ms
            self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
            if response.assignment is not None:
                self.target = frozenset((t, p) for t, ps in response.assignment.items() for p in ps)
            return
        if error in _REDISCOVER:
            self.rediscoveries += 1
            self._next_heartbeat_ms = now_ms + self.retry_backoff_ms
            return
        if error in _REJOIN:
            # Fenced: every partition is lost; rejoin at epoch 0, the same member id (KIP-1082).
            self.member_epoch = JOIN_EPOCH
            self.target = None
            self._joined = False
            self._lost = bool(self.assignment)
            self._next_heartbeat_ms = now_ms
            return
        if error is Errors.FENCED_INSTANCE_ID:
            self.fatal_error = FencedInstanceIdError(error, response.error_message or "fenced by another member")
        elif error is Errors.GROUP_MAX_SIZE_REACHED:
            self.fatal_error = GroupMaxSizeReachedError(error, response.error_message or "the group is full")
        else:
            self.fatal_error = FatalConsumerError(error, response.error_message or "ConsumerGroupHeartbeat failed")

    def expedite_heartbeat(self, now_ms: int) -> None:
        self._next_heartbeat_ms = now_ms

    def next_background_ms(self) -> int | None:
        if self.closed or self.fatal_error is not None or self._inflight is not None:
            return None
        return min(self._next_heartbeat_ms, self._poll_deadline_ms)

    # --- reconciliation (the application thread) ---------------------------------------------------
    def poll_rebalance(self, now_ms: int) -> PrepareJoin | JoinComplete | None:
        """What the application thread must do to own the target: lose everything (fenced), revoke what
        the target dropped, then take what it added; None when there is nothing to do."""
        self.raise_if_fatal()
        if self._lost:
            return PrepareJoin((ListenerEvent("on_partitions_lost", self.assignment),), False, self.assignment)
        if self.target is None or self.target == self.assignment:
            return None
        revoked = self.assignment - self.target
        if revoked:
            return PrepareJoin((ListenerEvent("on_partitions_revoked", revoked),), True, revoked)
        added = self.target - self.assignment
        return JoinComplete(None, None, self.target, added)

    def finish_join_prepare(self, prepare: PrepareJoin) -> None:
        """The revocation (or loss) callbacks ran: drop those partitions and acknowledge at once."""
        self.assignment = self.assignment - prepare.dropped
        self._lost = False
        self._ack_needed = self._joined

    def finish_join(self, complete: JoinComplete) -> None:
        """The new partitions are taken (``on_partitions_assigned(added)`` comes next): acknowledge."""
        self.assignment = complete.assigned
        self._ack_needed = True

    # --- the poll timer, leaving, closing ------------------------------------------------------------
    def on_poll(self, now_ms: int) -> ConsumerGroupHeartbeatRequest | None:
        """The application polled; too late, and the member leaves first (Kafka's max.poll.interval.ms)."""
        leave = None
        if self._joined and now_ms >= self._poll_deadline_ms:
            leave = self._leave(LEAVE_EPOCH)
        self._stay_out = False
        self._poll_deadline_ms = now_ms + self.rebalance_timeout_ms
        return leave

    def _leave(self, epoch: int) -> ConsumerGroupHeartbeatRequest:
        request = ConsumerGroupHeartbeatRequest(self.group_id, self._member_id, epoch, self.group_instance_id)
        self._inflight = None  # the shell sends it; an answer to a heartbeat sent before it no longer applies
        self._next_heartbeat_ms = 0  # rejoining (when it may) is due at once
        self._lost = bool(self.assignment)
        self.member_epoch = JOIN_EPOCH
        self.target = None
        self._joined = False
        return request

    def leave_prepare(self) -> ListenerEvent | None:
        if not self.assignment:
            return None
        return ListenerEvent("on_partitions_lost" if self._lost or not self._joined else "on_partitions_revoked",
                             self.assignment)

    def close(self) -> ConsumerGroupHeartbeatRequest | None:
        """Leave for good (epoch -1), or for now if static (epoch -2: its assignment waits for it)."""
        if self.closed:
            return None
        request = None
        if self._joined and self.fatal_error is None:
            request = self._leave(STATIC_LEAVE_EPOCH if self.group_instance_id is not None else LEAVE_EPOCH)
        self.assignment = frozenset()
        self._lost = False
        self.closed = True
        return request

    # --- offsets -------------------------------------------------------------------------------------
    def commit_request(self, offsets: Mapping[TopicPartition, int]) -> OffsetCommitRequest:
        """An OffsetCommit at the member's epoch (KIP-848's OffsetCommit v9)."""
        self.raise_if_fatal()
        if not self._joined:
            raise CommitFailedError(Errors.UNKNOWN_MEMBER_ID, "the consumer is not part of the group")
        return OffsetCommitRequest(self.group_id, {tp: (o, "", -1) for tp, o in offsets.items()},
                                   self.member_epoch, self._member_id, self.group_instance_id)

    def on_commit_response(self, request: OffsetCommitRequest, response, now_ms: int) -> bool:
        """True when committed, False to retry (a stale epoch: the next heartbeat brings the new one)."""
        for error in response.errors.values():
            if error is Errors.NONE:
                continue
            if error is Errors.STALE_MEMBER_EPOCH or error in _REDISCOVER:
                return False
            if error is Errors.UNKNOWN_MEMBER_ID:
                raise CommitFailedError(error, "the member left the group; its partitions are another's now")
            raise ConsumerError(error, "offset commit failed")
        return True

    def fetch_request(self, partitions: Sequence[TopicPartition]) -> OffsetFetchRequest:
        self.raise_if_fatal()
        if self._joined:
            return OffsetFetchRequest(self.group_id, tuple(partitions), True, self._member_id, self.member_epoch)
        return OffsetFetchRequest(self.group_id, tuple(partitions), True)

    def on_fetch_response(self, response, now_ms: int) -> dict[TopicPartition, int | None] | None:
        """Committed offsets (None: nothing committed), or None to retry (coordinator errors; a stale epoch
        or an unknown member, which the next heartbeat settles)."""
        error = response.error
        if error is not Errors.NONE:
            if error in _REDISCOVER or error in (Errors.STALE_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID,
                                                 Errors.UNSTABLE_OFFSET_COMMIT):
                return None
            raise ConsumerError(error, "offset fetch failed")
        out: dict[TopicPartition, int | None] = {}
        for tp, po in response.offsets.items():
            if po.error is Errors.UNSTABLE_OFFSET_COMMIT:
                return None
            out[tp] = po.offset if po.error is Errors.NONE and po.offset >= 0 else None
        return out
