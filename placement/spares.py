"""Which spare shard processes each coordinator node keeps, and which of them adopts a partition, as pure
functions (``placement.spare_keeper`` performs them through the Ray seam, which lists, creates, kills and
asks spares to adopt, and decides nothing).

A spare is a shard process that serves no partition yet, so that a failover onto its node adopts rather
than starts a process. By default a node keeps one spare for every partition it may come to lead (with the
hot standbys of every partition it follows); with ``shard.standby.per.partition`` it keeps one spare per
partition it follows, standing by for that partition only, and no spare for all. Either way it keeps one
cold spare too (no standby): a second partition moving onto the node loads on it instead of waiting for a
new process.

Guarantees: a failover adopts the partition's own spare first, then the node's spare for all, then its
cold spare, else a new process is started; a spare recorded as adopting a partition is never stopped; a spare still starting is
never chosen (starting the shard costs no more than waiting for it). Not guaranteed: that a spare exists
(one is started behind every adoption, and the controller's background task sees to the spares per
partition, from the partitions it had performed when it launched it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from raygroups.placement.model import Metadata, Observations
from raygroups.placement.plan import PartitionAssignment, elect_leader


@dataclass(frozen=True)
class Spare:
    """One of a node's spare processes as the seam lists it."""

    name: str
    standby_for: int | None  # the partition it stands by for; None: every partition the node follows
    bound: int | None = None  # the partition it was recorded as adopting (before or while it adopts)
    serving: bool = False  # it is recorded as the actor of a partition: no longer a spare
    cold: bool = False  # it keeps no standby: a process ready to load any partition


def free_spares(spares: list[Spare]) -> list[Spare]:
    """The spares that serve no partition (starting ones included), by name."""
    return sorted((s for s in spares if not s.serving), key=lambda s: s.name)


def adoption_order(partition: int, free: list[Spare]) -> list[str]:
    """The spares that may adopt ``partition``, in the order to try them: the ones standing by for it,
    then the ones for every partition, then the cold ones (a spare standing by for another partition never
    does)."""
    own = [s.name for s in free if s.standby_for == partition]
    general = [s.name for s in free if s.standby_for is None and not s.cold]
    cold = [s.name for s in free if s.cold]
    return own + general + cold


def needs_spare_for_all(per_partition: bool, free: list[Spare], used: set[str] = frozenset()) -> bool:
    """Whether the node needs a new spare for every partition: only without spares per partition, and when
    none of its free ones is left once those in ``used`` (adopted, or given up on) are taken out."""
    return not per_partition and not any(s.standby_for is None and not s.cold and s.name not in used for s in free)


def cold_spares_missing(free: list[Spare], wanted: int, used: set[str] = frozenset()) -> int:
    """How many cold spares the node must start to have ``wanted`` (``shard.cold.spares``): processes with no
    standby (so no memory of their own beyond the interpreter), which failovers adopt once the node's spare
    with the standbys is taken -- a node lost with several leaders hands two or three to each survivor, and
    a new process takes two to four seconds to start on a loaded machine, where a cold spare loads the
    partition at once. Those in ``used`` (adopted, or given up on) do not count."""
    return max(0, wanted - sum(1 for s in free if s.cold and s.name not in used))


def inheritable(partitions: Mapping[int, PartitionAssignment], live: set[str] | frozenset[str]) -> dict[str, int]:
    """Per live node, the most partitions it would be elected leader of at once if one other live node were
    lost: of each partition led by a live node, the first live in-sync replica after its leader (the order
    ``elect_leader`` elects in, as Kafka's controller), counted per (heir, lost leader). One pass over the
    partitions."""
    live = frozenset(live)
    counts = Counter((heir, a.leader) for a in partitions.values()
                     if a.leader in live and (heir := elect_leader(a, live - {a.leader})) is not None)
    most = dict.fromkeys(live, 0)
    for (heir, _), n in counts.items():
        most[heir] = max(most[heir], n)
    return most


def cold_spares_wanted(configured: int, inherit: int, per_partition: bool, most: int) -> int:
    """How many cold spares a node keeps: ``shard.cold.spares``, or more while the node would inherit more
    partitions from one lost node (``inheritable``) than its spare with the standbys and those cover, up to
    ``most`` (``shard.cold.spares.max``) -- when leadership has gathered on few nodes (after a full restart,
    or a run of failovers, until leader balance spreads it again), a new process per partition beyond the
    spares costs 2-4 s on a loaded machine (the chaos benchmark's controller kills, seed 4242). With spares
    per partition each followed partition has a spare of its own, and the setting is kept."""
    return configured if per_partition else max(configured, min(most, inherit - 1))


def standby_spares_plan(followed: set[int] | frozenset[int], free: list[Spare]) -> tuple[list[int], list[str]]:
    """With ``shard.standby.per.partition``: the partitions whose spare to start (one per partition the
    node follows) and the spares to stop (for a partition it no longer follows, or a second for one). Spares
    for every partition and spares recorded as adopting are left alone."""
    have: dict[int, str] = {}
    stop = []
    for s in free:
        if s.standby_for is None or s.bound is not None:
            continue
        if s.standby_for in followed and s.standby_for not in have:
            have[s.standby_for] = s.name
        else:
            stop.append(s.name)
    return sorted(set(followed) - set(have)), stop


def followed_by(partitions: Mapping[int, PartitionAssignment], node: str) -> frozenset[int]:
    """The partitions ``node`` holds a replica of while another node leads them, or none does."""
    return frozenset(p for p, a in partitions.items() if node in a.replicas and a.leader != node)


@dataclass(frozen=True)
class SparesSeen:
    """What a node's spares per partition were last seen to: its incarnation, the partitions it followed,
    and when (``now_ms``)."""

    incarnation: str
    followed: frozenset[int]
    at_ms: int


def standby_spares_due(meta: Metadata, obs: Observations, seen: Mapping[str, SparesSeen], now_ms: int,
                       recheck_ms: int) -> dict[str, tuple[str, frozenset[int]]]:
    """The reported nodes whose spares per partition to see to now, with their incarnation and the
    partitions they follow in ``meta`` (what was performed): when those or the incarnation changed, or
    every ``recheck_ms``."""
    due = {}
    for name, o in sorted(obs.nodes.items()):
        if not o.alive or name in meta.refused or meta.reported.get(name) != o.node_id:
            continue
        followed = followed_by(meta.partitions, name)
        last = seen.get(name)
        if last is None or (last.incarnation, last.followed) != (o.node_id, followed) or \
                now_ms - last.at_ms > recheck_ms:
            due[name] = (o.node_id, followed)
    return due
