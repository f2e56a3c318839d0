"""The controller's target placement: a pure function from (partitions, nodes, previous) to a ``Plan``
(no Ray, no I/O, no clock, no randomness); the controller reconciles towards it.

Guarantees of ``plan(partitions, nodes, previous, replication_factor, imbalance_threshold)``, with
``r = min(replication_factor, len(nodes))``:

* **Complete and distinct**: every partition gets ``r`` replicas on distinct nodes (offline ones aside).
* **Deterministic**: same inputs, same ``Plan``, in any process (sorted ids, no set iteration).
* **Sticky**: a partition keeps every previous replica on a node of ``nodes``; replicas on lost nodes are
  replaced on the least-loaded nodes ("re-replication"). When ``r`` went down it keeps the leader, then
  in-sync replicas, then the earlier ones.
* **Balanced with minimal moves**: while a node's replica count lies outside the band around the mean
  (``imbalance_threshold``: Cruise Control's replica-count threshold, never tighter than one replica), one
  replica at a time shifts from a most- to a least-loaded node along the cheapest chain of moves (moving a
  replica this plan added is free; it avoids the leader, the preferred leader and in-sync replicas). A
  balanced cluster never moves anything; tests compare with a brute-force optimum on small clusters.
* **Order**: a new partition is laid out as Kafka's rack-unaware ``assignReplicasToBrokers`` (start index
  0 over the sorted nodes); an existing one keeps its order, and replicas it gains are appended.
* **Leadership untouched**: ``leader``, ``leader_epoch``, ``isr`` and ``partition_epoch`` are carried over;
  the controller elects (:func:`elect_leader`) and bumps epochs itself, so elect first, then plan.
* **Offline partitions are not re-placed**: one with no in-sync replica on a node of ``nodes`` keeps its
  assignment until a leader is elected, so "offline until an in-sync replica returns" stays possible.
* ``moves`` counts replica placements added or removed relative to ``previous``.

Leader balance is Kafka's: :func:`needs_leader_rebalance` is ``leader.imbalance.per.broker.percentage``'s
trigger, and :func:`elect_leader` picks the first live in-sync replica in ``replicas`` order (the preferred
replica election).
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from raygroups.coordinator.checks import is_int, is_number

__all__ = [
    "PartitionAssignment",
    "Plan",
    "elect_leader",
    "leader_counts",
    "needs_leader_rebalance",
    "plan",
    "replica_counts",
]


def _node_tuple(value: object, name: str) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, tuple | list):
        raise TypeError(f"{name} must be a tuple of node ids, got {type(value).__name__}")
    for node in value:
        if not isinstance(node, str):
            raise TypeError(f"{name} must contain str node ids, got {type(node).__name__}")
        if not node:
            raise ValueError(f"{name} must not contain an empty node id")
    if len(set(value)) != len(value):
        dup = next(x for i, x in enumerate(value) if x in value[:i])
        raise ValueError(f"{name} has duplicate node id {dup!r}")
    return tuple(value)


@dataclass(frozen=True)
class PartitionAssignment:
    """One partition's placement. Lists are accepted for the node tuples and stored as tuples."""

    replicas: tuple[str, ...]  # node ids, preferred leader first
    leader: str | None  # current leader (None = offline)
    leader_epoch: int
    isr: tuple[str, ...]  # in-sync replicas (leader included when it has one)
    # Bumped by every change of this partition's state (Kafka's PartitionRegistration.partitionEpoch):
    # of two copies of a partition's state, the one with the higher partition_epoch is the newer.
    partition_epoch: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicas", _node_tuple(self.replicas, "replicas"))
        if not self.replicas:
            raise ValueError("replicas must name at least one node")
        if self.leader is not None and not isinstance(self.leader, str):
            raise TypeError(f"leader must be a str node id or None, got {type(self.leader).__name__}")
        if not is_int(self.leader_epoch):
            raise TypeError(f"leader_epoch must be an int, got {type(self.leader_epoch).__name__}")
        if self.leader_epoch < 0:
            raise ValueError(f"leader_epoch must be >= 0, got {self.leader_epoch}")
        if not is_int(self.partition_epoch):
            raise TypeError(f"partition_epoch must be an int, got {type(self.partition_epoch).__name__}")
        if self.partition_epoch < 0:
            raise ValueError(f"partition_epoch must be >= 0, got {self.partition_epoch}")
        object.__setattr__(self, "isr", _node_tuple(self.isr, "isr"))


@dataclass(frozen=True)
class Plan:
    partitions: dict[int, PartitionAssignment]  # partition -> target assignment
    moves: int  # replica placements that changed vs previous


# --------------------------------------------------------------------------- validation


def _check_int(value: object, name: str, minimum: int) -> int:
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_threshold(value: object, name: str) -> Fraction:
    if not is_number(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise ValueError(f"{name} must be between 0 and 1, got {value}")
    return Fraction(str(value))  # the decimal the caller wrote: 0.1 is exactly 1/10


def _check_nodes(value: object, name: str) -> list[str]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a sequence of node ids, got {type(value).__name__}")
    items = list(value)
    for node in items:
        if not isinstance(node, str):
            raise TypeError(f"{name} must contain str node ids, got {type(node).__name__}")
        if not node:
            raise ValueError(f"{name} must not contain an empty node id")
    ordered = sorted(items)
    for a, b in zip(ordered, ordered[1:], strict=False):
        if a == b:
            raise ValueError(f"{name} has duplicate node id {a!r}")
    return ordered


def _assignments(value: object, name: str) -> list[PartitionAssignment]:
    if isinstance(value, Mapping):
        items = [value[k] for k in sorted(value)]
    elif isinstance(value, Iterable) and not isinstance(value, str | bytes):
        items = list(value)
    else:
        raise TypeError(f"{name} must be a mapping or iterable of PartitionAssignment, got {type(value).__name__}")
    for a in items:
        if not isinstance(a, PartitionAssignment):
            raise TypeError(f"{name} must contain PartitionAssignment values, got {type(a).__name__}")
    return items


# --------------------------------------------------------------------------- the plan


def _kafka_layout(p: int, nodes: list[str], r: int) -> list[str]:
    """Kafka's ``assignReplicasToBrokersRackUnaware`` with fixed start index 0 (deterministic)."""
    n = len(nodes)
    first = p % n
    shift = p // n  # nextReplicaShift: +1 every time the partition id wraps around the nodes
    return [nodes[first]] + [nodes[(first + 1 + (shift + j) % (n - 1)) % n] for j in range(r - 1)]


def _trim(kept: list[str], r: int, prev: PartitionAssignment) -> list[str]:
    """Keep ``r`` of ``kept``: the current leader, then in-sync replicas, then earlier ones; order kept."""
    rank = sorted(range(len(kept)), key=lambda i: (kept[i] != prev.leader, kept[i] not in prev.isr, i))
    chosen = set(rank[:r])
    return [node for i, node in enumerate(kept) if i in chosen]


def _band(total: int, n: int, threshold: Fraction) -> tuple[int, int]:
    mean = Fraction(total, n)
    lower = min(math.floor(mean), math.ceil(mean * (1 - threshold)))
    upper = max(math.ceil(mean), math.floor(mean * (1 + threshold)))
    return lower, upper


def _move_cost(p: int, i: int, node: str, previous: Mapping[int, PartitionAssignment]) -> tuple[int, ...]:
    """What moving replica ``i`` of ``p`` (on ``node``) away costs, compared lexicographically."""
    prev = previous.get(p)
    old = prev is not None and node in prev.replicas  # else this plan added it: moving it is free
    return (
        int(old),
        int(prev is not None and node == prev.leader),
        int(i == 0),
        int(prev is not None and node in prev.isr),
        1,  # hops
    )


def _cheapest_path(
    replicas: dict[int, list[str]],
    movable: list[int],
    load: dict[str, int],
    nodes: list[str],
    previous: Mapping[int, PartitionAssignment],
) -> list[tuple[int, str, str]] | None:
    """The cheapest chain of replica moves taking one replica off a most-loaded node and onto a
    least-loaded one (intermediate nodes give one and get one). A chain lets re-replicated replicas
    shift along before an old replica has to move. None if no move is possible."""
    hi, lo = max(load.values()), min(load.values())
    edges: dict[str, dict[str, tuple[tuple[int, ...], int]]] = {x: {} for x in nodes}
    for p in movable:
        reps = replicas[p]
        for i, src in enumerate(reps):
            cost = (_move_cost(p, i, src, previous), p)
            out = edges[src]
            for dst in nodes:
                if dst not in reps and (dst not in out or cost < out[dst]):
                    out[dst] = cost
    zero = (0, 0, 0, 0, 0)
    dist = {x: zero for x in nodes if load[x] == hi}
    via: dict[str, tuple[str, int]] = {}
    heap = [(zero, x) for x in sorted(dist)]
    done: set[str] = set()
    while heap:
        d, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        if load[u] == lo:
            path = []
            while u in via:
                prev_node, p = via[u]
                path.append((p, prev_node, u))
                u = prev_node
            return path[::-1]
        for v in nodes:
            if v in edges[u] and v not in done:
                cost, p = edges[u][v]
                nd = tuple(a + b for a, b in zip(d, cost, strict=True))
                if v not in dist or nd < dist[v]:
                    dist[v] = nd
                    via[v] = (u, p)
                    heapq.heappush(heap, (nd, v))
    return None


def _balance(
    replicas: dict[int, list[str]],
    movable: list[int],
    load: dict[str, int],
    nodes: list[str],
    previous: Mapping[int, PartitionAssignment],
    threshold: Fraction,
) -> None:
    """Shift replicas from most- to least-loaded nodes until every load is inside the band (in place)."""
    lower, upper = _band(sum(load.values()), len(nodes), threshold)
    while True:
        hi, lo = max(load.values()), min(load.values())
        if (hi <= upper and lo >= lower) or hi - lo < 2:
            return
        path = _cheapest_path(replicas, movable, load, nodes, previous)
        if path is None:  # every candidate is pinned (offline partitions): as balanced as allowed
            return
        for p, src, dst in path:
            replicas[p] = [x for x in replicas[p] if x != src] + [dst]
        load[path[0][1]] -= 1
        load[path[-1][2]] += 1


def plan(
    partitions: int,
    nodes: Sequence[str],
    previous: Mapping[int, PartitionAssignment] | None,
    replication_factor: int,
    imbalance_threshold: float = 0.10,
) -> Plan:
    """The target placement (see the module docstring for what is guaranteed)."""
    _check_int(partitions, "partitions", 1)
    node_list = _check_nodes(nodes, "nodes")
    if not node_list:
        raise ValueError("nodes must name at least one node")
    _check_int(replication_factor, "replication_factor", 1)
    threshold = _check_threshold(imbalance_threshold, "imbalance_threshold")
    if previous is None:
        previous = {}
    elif not isinstance(previous, Mapping):
        raise TypeError(f"previous must be a mapping of partition -> PartitionAssignment or None, "
                        f"got {type(previous).__name__}")
    for p in sorted(previous, key=repr):
        if not is_int(p):
            raise TypeError(f"previous keys must be int partitions, got {type(p).__name__}")
        if not 0 <= p < partitions:
            raise ValueError(f"previous has partition {p}, outside 0..{partitions - 1}")
        if not isinstance(previous[p], PartitionAssignment):
            raise TypeError(f"previous[{p}] must be a PartitionAssignment, got {type(previous[p]).__name__}")

    live = set(node_list)
    r = min(replication_factor, len(node_list))
    replicas: dict[int, list[str]] = {}
    offline: set[int] = set()
    for p in range(partitions):
        prev = previous.get(p)
        if prev is None:
            replicas[p] = _kafka_layout(p, node_list, r)
        elif not any(x in live and x in prev.replicas for x in prev.isr):
            offline.add(p)
            replicas[p] = list(prev.replicas)
        else:
            kept = [x for x in prev.replicas if x in live]
            replicas[p] = _trim(kept, r, prev) if len(kept) > r else kept

    load = dict.fromkeys(node_list, 0)
    for reps in replicas.values():
        for x in reps:
            if x in live:
                load[x] += 1
    movable = [p for p in range(partitions) if p not in offline]
    for p in movable:  # re-replication: each missing replica on the least-loaded node without one
        reps = replicas[p]
        while len(reps) < r:
            node = min((x for x in node_list if x not in reps), key=lambda x: (load[x], x))
            reps.append(node)
            load[node] += 1
    _balance(replicas, movable, load, node_list, previous, threshold)

    out: dict[int, PartitionAssignment] = {}
    moves = 0
    for p in range(partitions):
        prev = previous.get(p)
        reps = tuple(replicas[p])
        if prev is None:
            out[p] = PartitionAssignment(replicas=reps, leader=reps[0], leader_epoch=0, isr=reps)
            moves += len(reps)
        else:
            out[p] = prev if reps == prev.replicas else replace(prev, replicas=reps)
            moves += len(set(reps).symmetric_difference(prev.replicas))
    return Plan(partitions=out, moves=moves)


# --------------------------------------------------------------------------- leaders


def replica_counts(assignments: Mapping[int, PartitionAssignment] | Iterable[PartitionAssignment]) -> dict[str, int]:
    """Replicas per node (nodes holding none are absent), sorted by node id."""
    counts: dict[str, int] = {}
    for a in _assignments(assignments, "assignments"):
        for x in a.replicas:
            counts[x] = counts.get(x, 0) + 1
    return dict(sorted(counts.items()))


def leader_counts(assignments: Mapping[int, PartitionAssignment] | Iterable[PartitionAssignment]) -> dict[str, int]:
    """Partitions currently led per node (offline partitions count for nobody), sorted by node id."""
    counts: dict[str, int] = {}
    for a in _assignments(assignments, "assignments"):
        if a.leader is not None:
            counts[a.leader] = counts.get(a.leader, 0) + 1
    return dict(sorted(counts.items()))


def needs_leader_rebalance(
    assignments: Mapping[int, PartitionAssignment] | Iterable[PartitionAssignment],
    nodes: Iterable[str],
    threshold: float = 0.10,
) -> bool:
    """Kafka's auto leader rebalance trigger (``leader.imbalance.per.broker.percentage``, 10 %).

    For each node of ``nodes`` that is the preferred leader (first replica) of some partitions: the
    share of those partitions it does not currently lead. True when that share is strictly greater than
    ``threshold`` for some node (exactly 10 % does not trigger). Nodes outside ``nodes`` (dead ones) are
    ignored: leadership cannot go back to them. As in Kafka the trigger counts every such partition; the
    election itself (:func:`elect_leader`) only moves leadership to a live, in-sync preferred replica.
    """
    items = _assignments(assignments, "assignments")
    node_list = _check_nodes(nodes, "nodes")
    limit = _check_threshold(threshold, "threshold")
    for node in node_list:
        preferred = [a for a in items if a.replicas[0] == node]
        if preferred:
            not_led = sum(1 for a in preferred if a.leader != node)
            if Fraction(not_led, len(preferred)) > limit:
                return True
    return False


def elect_leader(a: PartitionAssignment, live_nodes: Iterable[str], unclean: bool = False) -> str | None:
    """The leader Kafka's controller would elect for ``a`` given the live nodes.

    The first replica in ``replicas`` order that is live and in the ISR; None (offline) if there is none.
    With ``unclean=True`` (``unclean.leader.election.enable``) and no live in-sync replica, the first live
    replica instead -- which may lose acknowledged records.
    """
    if not isinstance(a, PartitionAssignment):
        raise TypeError(f"a must be a PartitionAssignment, got {type(a).__name__}")
    live = set(_check_nodes(live_nodes, "live_nodes"))
    if not isinstance(unclean, bool):
        raise TypeError(f"unclean must be a bool, got {type(unclean).__name__}")
    for x in a.replicas:
        if x in live and x in a.isr:
            return x
    if unclean:
        return next((x for x in a.replicas if x in live), None)
    return None
