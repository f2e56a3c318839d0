"""The errors a consumer raises to its user, with Kafka's error code in ``.error``.

``FatalConsumerError`` and its subclasses mean the consumer cannot continue: ``GroupMember`` raises the same
instance from every later ``poll_rebalance``/``commit_request``. ``CommitFailedError`` and
``RebalanceInProgressError`` mean a commit lost a race with a rebalance; nothing was committed.
Re-exported by ``membership.member`` and ``raygroups.client.consumer``.
"""

from __future__ import annotations

from raygroups.coordinator.errors import Errors


class ConsumerError(Exception):
    """A consumer operation failed with a Kafka error code (``.error``)."""

    def __init__(self, error: Errors, message: str = "") -> None:
        super().__init__(f"{error.name}: {message}" if message else error.name)
        self.error = error


class FatalConsumerError(ConsumerError):
    """The consumer cannot continue; every later ``poll()``/``commit()`` raises this again."""


class FencedInstanceIdError(FatalConsumerError):
    """Another consumer with the same ``group_instance_id`` took over this member (KIP-345)."""


class GroupMaxSizeReachedError(FatalConsumerError):
    """The group already has ``group.max.size`` members."""


class CommitFailedError(ConsumerError):
    """The commit lost a race with a rebalance: this member no longer owns the generation it committed for.

    Call ``poll()`` to rejoin; the partitions may now belong to another member."""


class RebalanceInProgressError(CommitFailedError):
    """The commit could not complete because a rebalance is under way; ``poll()`` then retry."""
