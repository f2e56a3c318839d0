"""The vocabulary of the member state machine: its states, the actions it asks of the shell and the
listener events it reports.

All are immutable values (frozen dataclasses, a ``NamedTuple``, a ``str`` enum): the state machine never
changes one after handing it out. Re-exported by ``membership.member``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from raygroups.coordinator.consumer_protocol import Assignment
from raygroups.coordinator.messages import NO_GENERATION, UNKNOWN_MEMBER_ID

EAGER = "EAGER"
COOPERATIVE = "COOPERATIVE"

TopicPartition = tuple[str, int]


class MemberState(StrEnum):
    UNJOINED = "UNJOINED"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"


@dataclass(frozen=True)
class Generation:
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    protocol_name: str | None = None

    @property
    def is_reset(self) -> bool:
        return self.generation_id == NO_GENERATION or self.member_id == UNKNOWN_MEMBER_ID


class ListenerEvent(NamedTuple):
    """A rebalance-listener call: ``method`` is ``on_partitions_revoked|assigned|lost``."""

    method: str
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True)
class PrepareJoin:
    """Before (re)joining: call ``events`` (after an auto-commit if ``can_commit``), then ``finish_join_prepare``."""

    events: tuple[ListenerEvent, ...]
    can_commit: bool
    dropped: frozenset[TopicPartition]


@dataclass(frozen=True)
class SendRequest:
    """Send ``request`` (JoinGroup or SyncGroup) and feed its response back."""

    request: Any


@dataclass(frozen=True)
class Wait:
    """Nothing to send now: a response is awaited (``until_ms`` None) or back off until ``until_ms``."""

    until_ms: int | None


@dataclass(frozen=True)
class JoinComplete:
    """SyncGroup succeeded: call ``revoked`` (cooperative, may be empty = no call), ``finish_join``, then
    ``on_partitions_assigned(added)``."""

    generation: Generation
    assignment: Assignment
    assigned: frozenset[TopicPartition]
    added: frozenset[TopicPartition]
    revoked: frozenset[TopicPartition] = field(default_factory=frozenset)
