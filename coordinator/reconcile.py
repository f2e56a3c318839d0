"""One member's reconciliation towards its target assignment (Kafka's ``CurrentAssignmentBuilder``, KIP-848).

A member first revokes what its target no longer holds, and only once it reports (through the partitions
it says it owns) that they are gone does it move on; a partition of its target still owned by another
member (assigned to it, or pending its revocation) is withheld until that member releases it. So a
partition has at most one owner at any time, and each member moves at its own pace: no group-wide barrier.
"""

from __future__ import annotations

from collections.abc import Callable

from raygroups.coordinator.consumer_group import MemberState
from raygroups.coordinator.consumer_records import Assignment, ConsumerGroupCurrentMemberAssignmentValue
from raygroups.coordinator.errors import CoordinatorError, Errors


def _owns_any(owned: Assignment | None, partitions: dict[str, set[int]]) -> bool:
    """Whether the member still reports owning one of ``partitions`` (not reported: assume it does)."""
    if owned is None:
        return True
    for topic, ps in owned:
        revoked = partitions.get(topic)
        if revoked and not revoked.isdisjoint(ps):
            return True
    return False


def next_assignment(member_id: str, current: ConsumerGroupCurrentMemberAssignmentValue, target_epoch: int,
                    target: Assignment, partition_owner: Callable[[str, int], str | None],
                    owned: Assignment | None) -> ConsumerGroupCurrentMemberAssignmentValue:
    """The member's current assignment after this heartbeat (``current`` itself when nothing changes).
    ``partition_owner(topic, p)``: the member owning ``p`` (assigned or pending its revocation; None if
    none); ``owned``: what the member reported owning (None: not sent)."""
    state = current.state
    if state == MemberState.STABLE.value:
        if current.member_epoch == target_epoch:
            return current
        return _compute(member_id, current, current.member_epoch, target_epoch, target, partition_owner, owned)
    if state == MemberState.UNREVOKED_PARTITIONS.value:
        if _owns_any(owned, {t: set(ps) for t, ps in current.pending_revocation}):
            return current  # still revoking: nothing moves until it reports them gone
        # Revoked: it moves on to the next epoch (at most the target's).
        return _compute(member_id, current, min(current.member_epoch + 1, target_epoch), target_epoch, target,
                        partition_owner, owned)
    if state == MemberState.UNRELEASED_PARTITIONS.value:
        return _compute(member_id, current, current.member_epoch, target_epoch, target, partition_owner, owned)
    raise CoordinatorError(Errors.FENCED_MEMBER_EPOCH, "The consumer group member is in a unknown state. The "
                           "member must abandon all its partitions and rejoin.")


def _compute(member_id, current, member_epoch, target_epoch, target, partition_owner, owned):
    """Kafka's ``computeNextAssignment``: epochs move as its ``updateMemberEpoch`` moves them (the previous
    epoch is the one the member had)."""
    assigned = {t: set(ps) for t, ps in current.assigned}
    wanted = {t: set(ps) for t, ps in target}
    kept: dict[str, set[int]] = {}
    revoke: dict[str, set[int]] = {}
    add: dict[str, set[int]] = {}
    unreleased = False
    for topic in sorted(assigned.keys() | wanted.keys()):
        have, want = assigned.get(topic, set()), wanted.get(topic, set())
        if have & want:
            kept[topic] = have & want
        if have - want:
            revoke[topic] = have - want
        free = set()
        for p in want - have:
            if partition_owner(topic, p) in (None, member_id):  # its own pending revocation is no one else's
                free.add(p)
            else:
                unreleased = True  # another member still owns it: it waits
        if free:
            add[topic] = free
    if revoke and _owns_any(owned, revoke):
        # Revoke first, at the member's current epoch; the rest waits for its acknowledgement.
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch, current.member_epoch, MemberState.UNREVOKED_PARTITIONS.value,
            _canonical(kept), _canonical(revoke))
    for topic, ps in add.items():
        kept.setdefault(topic, set()).update(ps)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return ConsumerGroupCurrentMemberAssignmentValue(target_epoch, current.member_epoch, state.value, _canonical(kept), ())


def _canonical(partitions: dict[str, set[int]]) -> Assignment:
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(partitions.items()) if ps)
