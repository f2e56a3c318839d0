"""The error-reaction tables (membership.reactions) against Kafka's error catalogue, and the tables'
defaults carried out by GroupMember (every listed error has its scenario in test_member.py)."""

from __future__ import annotations

import pytest
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import HeartbeatRequest, HeartbeatResponse, OffsetCommitResponse
from raygroups.membership.errors import ConsumerError
from raygroups.membership.events import MemberState
from raygroups.membership.reactions import (
    HEARTBEAT,
    JOIN_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    OFFSET_FETCH_PARTITION,
    SYNC_GROUP,
    TABLES,
    Reaction,
    ReactionTable,
)

from tests.unit.test_member import BACKOFF, T, make_stable, new_member
from tests.unit.test_member import HEARTBEAT as HEARTBEAT_MS


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.request)
def test_only_retriable_errors_are_retried(table):
    """Kafka's clients retry exactly the errors whose exception is a ``RetriableException``."""
    retried = {e for e, r in table.entries.items() if r in (Reaction.RETRY, Reaction.REDISCOVER)}
    assert all(e.retriable for e in retried), sorted(e.name for e in retried if not e.retriable)


@pytest.mark.parametrize("table", TABLES[:-1], ids=lambda t: t.request)
def test_every_request_finds_the_coordinator_again_on_a_coordinator_error(table):
    assert table[Errors.COORDINATOR_LOAD_IN_PROGRESS] is Reaction.RETRY
    assert table[Errors.NOT_COORDINATOR] is Reaction.REDISCOVER
    assert table[Errors.COORDINATOR_NOT_AVAILABLE] is Reaction.REDISCOVER


def test_the_defaults_follow_kafka():
    assert JOIN_GROUP[Errors.INVALID_SESSION_TIMEOUT] is Reaction.FATAL
    assert SYNC_GROUP[Errors.GROUP_AUTHORIZATION_FAILED] is Reaction.FATAL
    assert HEARTBEAT[Errors.UNKNOWN_SERVER_ERROR] is Reaction.RETRY
    assert OFFSET_COMMIT[Errors.OFFSET_METADATA_TOO_LARGE] is Reaction.FAIL
    assert OFFSET_FETCH[Errors.GROUP_AUTHORIZATION_FAILED] is Reaction.FAIL
    assert OFFSET_FETCH_PARTITION[Errors.UNKNOWN_TOPIC_OR_PARTITION] is Reaction.NO_OFFSET


def test_fencing_is_fatal_everywhere_it_can_be_answered():
    for table in (JOIN_GROUP, SYNC_GROUP, HEARTBEAT, OFFSET_COMMIT):
        assert table[Errors.FENCED_INSTANCE_ID] is Reaction.FENCED


def test_a_table_refuses_none_and_cannot_be_changed():
    with pytest.raises(ValueError, match="NONE is success"):
        ReactionTable("X", {Errors.NONE: Reaction.RETRY}, Reaction.FAIL)
    with pytest.raises(TypeError):
        HEARTBEAT.entries[Errors.NONE] = Reaction.RETRY


def test_an_unexpected_heartbeat_error_is_retried_after_the_backoff():
    """HEARTBEAT's default: the heartbeat thread's ``failHeartbeat``: the member stays as it is."""
    m = new_member()
    make_stable(m, [(T, 0)])
    hb = m.poll_background(HEARTBEAT_MS)
    m.on_heartbeat_response(hb, HeartbeatResponse(Errors.UNKNOWN_SERVER_ERROR), HEARTBEAT_MS)
    assert m.state is MemberState.STABLE and m.fatal_error is None and not m.coordinator_unknown
    assert m.poll_background(HEARTBEAT_MS + BACKOFF - 1) is None
    assert m.poll_background(HEARTBEAT_MS + BACKOFF) == HeartbeatRequest("g", 1, "m1", None)


def test_an_unexpected_commit_error_fails_that_commit_only():
    """OFFSET_COMMIT's default, FAIL: the caller sees the code, the member goes on."""
    m = new_member()
    make_stable(m, [(T, 0)])
    request = m.commit_request({(T, 0): 5})
    with pytest.raises(ConsumerError) as failed:
        m.on_commit_response(request, OffsetCommitResponse({(T, 0): Errors.OFFSET_METADATA_TOO_LARGE}), 0)
    assert type(failed.value) is ConsumerError and failed.value.error is Errors.OFFSET_METADATA_TOO_LARGE
    assert m.fatal_error is None and m.state is MemberState.STABLE
    assert m.on_commit_response(m.commit_request({(T, 0): 5}), OffsetCommitResponse({(T, 0): Errors.NONE}), 0)
