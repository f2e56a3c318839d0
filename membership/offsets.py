"""Offsets for ``GroupMember``: OffsetCommit/OffsetFetch requests and the classification of their errors,
as Kafka's ``ConsumerCoordinator`` does it (retry, rediscover the coordinator, rejoin, or fail).

Split out of ``member.py`` by concern; it relies on the member's ``state``, ``generation``, identity fields
and the helpers ``raise_if_fatal``, ``mark_coordinator_unknown``, ``request_rejoin``, ``_reset`` and
``_fail``. Guarantees: a commit is only requested for the current, stable generation; an answer for an
older generation never resets the current one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from raygroups.membership.errors import (
    CommitFailedError,
    ConsumerError,
    FencedInstanceIdError,
    RebalanceInProgressError,
)
from raygroups.membership.events import MemberState, TopicPartition


class MemberOffsetsMixin:
    """The offsets half of ``GroupMember`` (see the module docstring); not usable on its own."""

    def commit_request(self, offsets: Mapping[TopicPartition, int]) -> OffsetCommitRequest:
        """An OffsetCommit for the current generation. Raises the fatal error, or ``RebalanceInProgressError``
        / ``CommitFailedError`` when the member is not stable (not part of an active generation)."""
        self.raise_if_fatal()
        if self.state is not MemberState.STABLE:
            if self.rebalance_in_progress:
                raise RebalanceInProgressError(Errors.REBALANCE_IN_PROGRESS, "the consumer is undergoing a "
                                               "rebalance; call poll() to complete it, then commit again")
            raise CommitFailedError(Errors.UNKNOWN_MEMBER_ID, "the consumer is not part of an active group "
                                    "(it was probably removed after a session or poll timeout)")
        return OffsetCommitRequest(
            self.group_id, {tp: (offset, "", -1) for tp, offset in offsets.items()}, self.generation_id,
            self.member_id, self.group_instance_id,
        )

    def on_commit_response(self, request: OffsetCommitRequest, response: OffsetCommitResponse,
                           now_ms: int) -> bool:
        """True when committed, False when the commit should be retried (after ``retry_backoff_ms``);
        raises ``CommitFailedError``/``RebalanceInProgressError``/``FencedInstanceIdError``/``ConsumerError``."""
        unchanged = (request.generation_id == self.generation_id and request.member_id == self.member_id)
        for error in response.errors.values():
            if error is Errors.NONE:
                continue
            if error in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.UNKNOWN_TOPIC_OR_PARTITION):
                return False
            if error in (Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR, Errors.REQUEST_TIMED_OUT):
                self.mark_coordinator_unknown(now_ms)
                return False
            if error is Errors.FENCED_INSTANCE_ID:
                if unchanged:
                    self._reset("encountered FENCED_INSTANCE_ID from OffsetCommit", True)
                    self._fail(FencedInstanceIdError(error, f"group instance id {self.group_instance_id!r} was "
                                                            "fenced by another consumer (OffsetCommit)"))
                    raise self.fatal_error
                if self.state is MemberState.PREPARING_REBALANCE:
                    raise RebalanceInProgressError(error, "the commit's generation is stale; poll() and retry")
                raise CommitFailedError(error, "the commit's generation is stale")
            if error is Errors.REBALANCE_IN_PROGRESS:
                self.request_rejoin("offset commit failed since group is already rebalancing")
                raise RebalanceInProgressError(error, "the group is rebalancing; call poll() to complete the "
                                                      "rebalance, then commit again")
            if error in (Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION):
                if not unchanged and self.state is MemberState.PREPARING_REBALANCE:
                    raise RebalanceInProgressError(error, "the commit's generation is stale; poll() and retry")
                if unchanged:
                    self._reset(f"encountered {error.name} from OffsetCommit", error is Errors.UNKNOWN_MEMBER_ID)
                raise CommitFailedError(error, "the group has already rebalanced and assigned the partitions to "
                                               "another member")
            raise ConsumerError(error, "offset commit failed")
        return True

    def fetch_request(self, partitions: Sequence[TopicPartition]) -> OffsetFetchRequest:
        self.raise_if_fatal()
        return OffsetFetchRequest(self.group_id, tuple(partitions), True)

    def on_fetch_response(self, response: OffsetFetchResponse,
                          now_ms: int) -> dict[TopicPartition, int | None] | None:
        """Committed offsets (None: nothing committed), or None when the fetch should be retried."""
        error = response.error
        if error in (Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR):
            self.mark_coordinator_unknown(now_ms)
            return None
        if error in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.UNSTABLE_OFFSET_COMMIT):
            return None
        if error is not Errors.NONE:
            raise ConsumerError(error, "offset fetch failed")
        out: dict[TopicPartition, int | None] = {}
        for tp, po in response.offsets.items():
            if po.error is Errors.UNSTABLE_OFFSET_COMMIT:
                return None
            if po.error not in (Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION):
                raise ConsumerError(po.error, f"offset fetch failed for {tp}")
            out[tp] = po.offset if po.error is Errors.NONE and po.offset >= 0 else None
        return out
