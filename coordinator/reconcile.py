"""One member's reconciliation towards its target assignment (Kafka's ``CurrentAssignmentBuilder``, KIP-848).

A member first revokes what its target no longer holds, and only once it reports (through the partitions
it says it owns) that they are gone does it move on; a partition of its target still owned by another
member (assigned to it, or pending its revocation) is withheld until that member releases it. So a
partition has at most one owner at any time, and each member moves at its own pace: no group-wide barrier.
"""

from __future__ import annotations

from collections.abc import Callable

from raygroups.coordinator.consumer_group import NO_OWNER, MemberState
from raygroups.coordinator.consumer_records import Assignment, ConsumerGroupCurrentMemberAssignmentValue


def _owns_any(owned: Assignment | None, partitions: dict[str, set[int]]) -> bool:
    """Whether the member still reports owning one of ``partitions`` (not reported: assume it does)."""
    if owned is None:
        return True
    for topic, ps in owned:
        revoked = partitions.get(topic)
        if revoked and not revoked.isdisjoint(ps):
            return True
    return False


def next_assignment(current: ConsumerGroupCurrentMemberAssignmentValue, target_epoch: int, target: Assignment,
                    partition_epoch: Callable[[str, int], int],
                    owned: Assignment | None) -> ConsumerGroupCurrentMemberAssignmentValue:
    """The member's current assignment after this heartbeat (``current`` itself when nothing changes).
    ``partition_epoch(topic, p)``: the epoch of the member owning ``p`` (``NO_OWNER`` if none);
    ``owned``: what the member reported owning (None: not sent)."""
    state = current.state
    if state == MemberState.STABLE.value:
        if current.member_epoch == target_epoch:
            return current
    elif state == MemberState.UNREVOKED_PARTITIONS.value:
        if _owns_any(owned, {t: set(ps) for t, ps in current.pending_revocation}):
            return current  # still revoking: nothing moves until it reports them gone
    elif state != MemberState.UNRELEASED_PARTITIONS.value:
        raise ValueError(f"a member in state {state!r} cannot be reconciled")
    return _compute(current, target_epoch, target, partition_epoch, owned)


def _compute(current, target_epoch, target, partition_epoch, owned):
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
            if partition_epoch(topic, p) == NO_OWNER:
                free.add(p)
            else:
                unreleased = True  # another member still owns it: it waits
        if free:
            add[topic] = free
    if revoke and _owns_any(owned, revoke):
        # Revoke first, at the member's current epoch; the rest waits for its acknowledgement.
        return ConsumerGroupCurrentMemberAssignmentValue(
            current.member_epoch, current.previous_member_epoch, MemberState.UNREVOKED_PARTITIONS.value,
            _canonical(kept), _canonical(revoke))
    for topic, ps in add.items():
        kept.setdefault(topic, set()).update(ps)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return ConsumerGroupCurrentMemberAssignmentValue(target_epoch, current.member_epoch, state.value, _canonical(kept), ())


def _canonical(partitions: dict[str, set[int]]) -> Assignment:
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(partitions.items()) if ps)
