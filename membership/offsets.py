"""Offsets for ``GroupMember``: OffsetCommit/OffsetFetch requests and what their errors do, as Kafka's
``ConsumerCoordinator`` does it (the tables are in ``reactions``: retry, rediscover, rejoin, or fail).

It relies on the member's ``state``, ``generation``, identity fields and the helpers ``raise_if_fatal``,
``mark_coordinator_unknown``, ``request_rejoin`` and the reactions (``_react_*``). Guarantees: a commit
is only requested for the current, stable generation; an answer for an older generation never resets the
current one.
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
    RebalanceInProgressError,
)
from raygroups.membership.events import MemberState, TopicPartition
from raygroups.membership.reactions import OFFSET_COMMIT, OFFSET_FETCH, OFFSET_FETCH_PARTITION, Reaction


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
            match reaction := OFFSET_COMMIT[error]:
                case Reaction.RETRY:
                    return False
                case Reaction.REDISCOVER:
                    self.mark_coordinator_unknown(now_ms)
                    return False
                case Reaction.FENCED:
                    if unchanged:
                        self._react_reset(reaction, error, "OffsetCommit")
                        self._react_fenced(error, "OffsetCommit")
                        raise self.fatal_error
                    if self.state is MemberState.PREPARING_REBALANCE:
                        raise RebalanceInProgressError(error, "the commit's generation is stale; poll() and retry")
                    raise CommitFailedError(error, "the commit's generation is stale")
                case Reaction.REJOIN:
                    self.request_rejoin("offset commit failed since group is already rebalancing")
                    raise RebalanceInProgressError(error, "the group is rebalancing; call poll() to complete the "
                                                          "rebalance, then commit again")
                case Reaction.RESET_MEMBER | Reaction.RESET_GENERATION:
                    if not unchanged and self.state is MemberState.PREPARING_REBALANCE:
                        raise RebalanceInProgressError(error, "the commit's generation is stale; poll() and retry")
                    if unchanged:
                        self._react_reset(reaction, error, "OffsetCommit")
                    raise CommitFailedError(error, "the group has already rebalanced and assigned the partitions "
                                                   "to another member")
                case _:
                    raise ConsumerError(error, "offset commit failed")
        return True

    def fetch_request(self, partitions: Sequence[TopicPartition]) -> OffsetFetchRequest:
        self.raise_if_fatal()
        return OffsetFetchRequest(self.group_id, tuple(partitions), True)

    def on_fetch_response(self, response: OffsetFetchResponse,
                          now_ms: int) -> dict[TopicPartition, int | None] | None:
        """Committed offsets (None: nothing committed), or None when the fetch should be retried."""
        error = response.error
        if error is not Errors.NONE:
            match OFFSET_FETCH[error]:
                case Reaction.REDISCOVER:
                    self.mark_coordinator_unknown(now_ms)
                    return None
                case Reaction.RETRY:
                    return None
                case _:
                    raise ConsumerError(error, "offset fetch failed")
        out: dict[TopicPartition, int | None] = {}
        for tp, po in response.offsets.items():
            if po.error is Errors.NONE:
                out[tp] = po.offset if po.offset >= 0 else None
                continue
            match OFFSET_FETCH_PARTITION[po.error]:
                case Reaction.RETRY:
                    return None
                case Reaction.NO_OFFSET:
                    out[tp] = None
                case _:
                    raise ConsumerError(po.error, f"offset fetch failed for {tp}")
        return out
