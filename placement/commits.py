"""What performing a :class:`~placement.model.Commit` decides, as pure functions: which disks it goes to,
which of them must take it, how its partition epoch is numbered, and what follows when some did not take
it (``placement.controller`` persists; these decide).

Guarantees: a state takes effect only once the leader and every alive in-sync replica hold it; a
follower that could not take it leaves the ISR of the state tried next (the leader catches it up and it
rejoins), so a leader is still only ever chosen from replicas that hold every state; a partition epoch
another state already holds on some disk is never reused. Not guaranteed: that a commit succeeds (a
leader that cannot take it refuses the commit; the controller decides again).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, replace

from raygroups.placement.model import Commit, bump
from raygroups.placement.plan import PartitionAssignment

COMMIT_ATTEMPTS = 3


def persist_targets(c: Commit, a: PartitionAssignment, alive: Set[str]) -> tuple[set[str], set[str]]:
    """The alive nodes ``a`` is sent to (its replicas, and the previous state's, which learn they are no
    longer replicas), and those of them that must take it: the leader and the in-sync replicas."""
    targets = (set(a.replicas) | set(c.previous.replicas if c.previous else ())) & set(alive)
    required = ({a.leader} | set(a.isr)) & set(alive) - {None}
    return targets, required


def numbered(a: PartitionAssignment, floor: int) -> PartitionAssignment:
    """``a`` under a partition epoch above ``floor`` (the highest sent or seen on a disk for it)."""
    return replace(a, partition_epoch=max(a.partition_epoch, floor + 1))


@dataclass(frozen=True)
class Persisted:
    """What follows one attempt: ``missing`` are the required nodes that did not take it (none: it takes
    effect); ``retry`` the state to try next, or None (refused: nothing takes effect); ``floor`` a partition
    epoch some disk already holds (the retry is numbered above it)."""

    missing: frozenset[str]
    retry: PartitionAssignment | None = None
    floor: int | None = None

    @property
    def done(self) -> bool:
        return not self.missing


def after_persist(a: PartitionAssignment, required: Set[str], persisted: Set[str],
                  stale: Mapping[str, int]) -> Persisted:
    """``a`` was sent; ``persisted`` took it and ``stale`` refused it holding a newer partition epoch (by
    node). Disks holding a newer epoch: the same state again, numbered above it. A leader that did not take
    it: refused. Followers that did not: the state without them in the ISR (a follower that cannot take a
    state now cannot be counted on to hold the next ones)."""
    missing = frozenset(set(required) - set(persisted))
    if not missing:
        return Persisted(missing)
    if stale:
        return Persisted(missing, a, max(stale.values()))
    if a.leader in missing:
        return Persisted(missing)
    return Persisted(missing, bump(a, isr=tuple(n for n in a.isr if n not in missing)))
