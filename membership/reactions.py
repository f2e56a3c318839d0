"""What a group member does with each error, one table per request type.

Kafka's consumer spreads this over the response handlers of ``AbstractCoordinator`` (JoinGroup, SyncGroup,
Heartbeat) and ``ConsumerCoordinator`` (OffsetCommit, OffsetFetch); aiokafka's ``coordinator.py`` has the
same if/else chains. Here each request type has one table, error -> ``Reaction``, and ``GroupMember`` turns
a reaction into state changes in one place per request type. An error not in a table gets the table's
default: a JoinGroup/SyncGroup error nobody expects is fatal (Kafka throws it from ``poll``), a heartbeat
error is retried (``Heartbeat.failHeartbeat``), an unexpected commit or fetch error fails that call only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from raygroups.coordinator.errors import Errors


class Reaction(StrEnum):
    RETRY = "retry"                        # back off, send again to the same coordinator
    REDISCOVER = "rediscover"              # the coordinator moved or is down: find it again, back off, resend
    REJOIN = "rejoin"                      # the group is rebalancing: rejoin, member id and generation kept
    RESET_GENERATION = "reset-generation"  # our generation is gone (the member id is still valid): rejoin
    RESET_MEMBER = "reset-member"          # our member id is gone: rejoin as a new member
    NEW_MEMBER_ID = "new-member-id"        # KIP-394: join again with the member id the coordinator handed out
    FENCED = "fenced"                      # KIP-345: another consumer took our group.instance.id; fatal
    GROUP_FULL = "group-full"              # KIP-389: the group has group.max.size members; fatal
    NO_OFFSET = "no-offset"                # nothing is committed for this partition
    FAIL = "fail"                          # this call fails; the member goes on
    FATAL = "fatal"                        # the consumer cannot go on


@dataclass(frozen=True)
class ReactionTable:
    request: str
    entries: Mapping[Errors, Reaction]
    default: Reaction

    def __post_init__(self) -> None:
        if Errors.NONE in self.entries:
            raise ValueError(f"{self.request}: NONE is success, not an error to react to")
        object.__setattr__(self, "entries", MappingProxyType(dict(self.entries)))

    def __getitem__(self, error: Errors) -> Reaction:
        return self.entries.get(error, self.default)


def _coordinator_errors() -> dict[Errors, Reaction]:
    """Every request type reacts alike to the coordinator errors (Kafka's FindCoordinator triggers): a load
    in progress is waited out against the same coordinator, the others make the member find it again."""
    return {e: Reaction.RETRY if e is Errors.COORDINATOR_LOAD_IN_PROGRESS else Reaction.REDISCOVER
            for e in Errors if e.is_coordinator_error}


def _membership_errors() -> dict[Errors, Reaction]:
    """The answers that say the member's place in the group changed, alike for SyncGroup, Heartbeat and
    OffsetCommit: the group rebalances, the generation or the member id is gone, the instance id was taken."""
    return {
        Errors.REBALANCE_IN_PROGRESS: Reaction.REJOIN,
        Errors.ILLEGAL_GENERATION: Reaction.RESET_GENERATION,
        Errors.UNKNOWN_MEMBER_ID: Reaction.RESET_MEMBER,
        Errors.FENCED_INSTANCE_ID: Reaction.FENCED,
    }


# AbstractCoordinator.JoinGroupResponseHandler
JOIN_GROUP = ReactionTable("JoinGroup", {
    **_coordinator_errors(),
    Errors.MEMBER_ID_REQUIRED: Reaction.NEW_MEMBER_ID,
    Errors.UNKNOWN_MEMBER_ID: Reaction.RESET_MEMBER,
    Errors.REBALANCE_IN_PROGRESS: Reaction.REJOIN,
    Errors.FENCED_INSTANCE_ID: Reaction.FENCED,
    Errors.GROUP_MAX_SIZE_REACHED: Reaction.GROUP_FULL,
}, default=Reaction.FATAL)

# AbstractCoordinator.SyncGroupResponseHandler: every retriable outcome rejoins (a new JoinGroup).
SYNC_GROUP = ReactionTable("SyncGroup", {**_coordinator_errors(), **_membership_errors()}, default=Reaction.FATAL)

# AbstractCoordinator.HeartbeatResponseHandler and the heartbeat thread's failure path.
HEARTBEAT = ReactionTable("Heartbeat", {**_coordinator_errors(), **_membership_errors()}, default=Reaction.RETRY)

# ConsumerCoordinator.OffsetCommitResponseHandler (per partition error).
OFFSET_COMMIT = ReactionTable("OffsetCommit", {
    **_coordinator_errors(),
    **_membership_errors(),
    Errors.REQUEST_TIMED_OUT: Reaction.REDISCOVER,
    Errors.UNKNOWN_TOPIC_OR_PARTITION: Reaction.RETRY,
}, default=Reaction.FAIL)

# ConsumerCoordinator.OffsetFetchResponseHandler: the group-level error ...
OFFSET_FETCH = ReactionTable("OffsetFetch", {
    **_coordinator_errors(),
    Errors.UNSTABLE_OFFSET_COMMIT: Reaction.RETRY,  # KIP-447: a transactional commit is pending
}, default=Reaction.FAIL)

# ... and each partition's.
OFFSET_FETCH_PARTITION = ReactionTable("OffsetFetch partition", {
    Errors.UNSTABLE_OFFSET_COMMIT: Reaction.RETRY,
    Errors.UNKNOWN_TOPIC_OR_PARTITION: Reaction.NO_OFFSET,
}, default=Reaction.FAIL)

TABLES = (JOIN_GROUP, SYNC_GROUP, HEARTBEAT, OFFSET_COMMIT, OFFSET_FETCH, OFFSET_FETCH_PARTITION)
