"""The sticky assignors: ``sticky`` (``StickyAssignor``, EAGER) and ``cooperative-sticky``
(``CooperativeStickyAssignor``, COOPERATIVE, KIP-429), and the balanced, sticky target they share.

The target is computed by ``_sticky_plan``: claims are resolved as Kafka does (the higher generation wins,
a tie invalidates the claim), members that share no topic are solved independently, identical
subscriptions take an exact quota path, and mixed subscriptions an exact min-cost flow
(``_CountsFlow``) that minimises the sum of squared member counts first and maximises the partitions
kept second. Deterministic whatever the order of the input mappings. Pure: standard library and
``coordinator`` only.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise

from raygroups.coordinator.consumer_protocol import Subscription
from raygroups.membership.assignors.base import (
    COOPERATIVE,
    DEFAULT_GENERATION,
    EAGER,
    Assignor,
    TopicPartition,
    _effective_topics,
    _partitions_of,
    _to_assignments,
    _validate,
)
from raygroups.membership.assignors.userdata import (
    MemberData,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    encode_cooperative_user_data,
    encode_sticky_user_data,
)


@dataclass
class _StickyPlan:
    target: dict[str, list[TopicPartition]]
    #: member id -> previously owned partitions it validly still holds (claims after resolution)
    owned: dict[str, set[TopicPartition]]


def _resolve_claims(
    partitions_per_topic: Mapping[str, int],
    topics_of: Mapping[str, frozenset[str]],
    member_data: Mapping[str, MemberData],
) -> dict[str, set[TopicPartition]]:
    """member id -> the claimed partitions it may keep as "previously owned".

    A claim counts only for an existing partition of a topic the member still subscribes to. When
    several members claim a partition, the one with the highest generation keeps it; if the highest
    generation is shared, the claim is invalid for all of them (two owners in one generation cannot
    both be right, so neither is trusted), exactly as Kafka's ``AbstractStickyAssignor`` decides.
    """
    claimants: dict[TopicPartition, list[tuple[int, str]]] = {}
    for m in sorted(member_data):
        data = member_data[m]
        for topic, partition in set(data.partitions):
            if topic in topics_of[m] and 0 <= partition < partitions_per_topic[topic]:
                claimants.setdefault((topic, partition), []).append((data.generation, m))
    owned: dict[str, set[TopicPartition]] = {m: set() for m in member_data}
    for tp, claims in claimants.items():
        newest = max(g for g, _ in claims)
        winners = [m for g, m in claims if g == newest]
        if len(winners) == 1:
            owned[winners[0]].add(tp)
    return owned


def _sticky_plan(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    member_data: Mapping[str, MemberData],
) -> _StickyPlan:
    topics_of = _effective_topics(partitions_per_topic, subscriptions)
    owned = _resolve_claims(partitions_per_topic, topics_of, member_data)
    topics = sorted(set().union(*topics_of.values())) if topics_of else []
    all_partitions = [(t, p) for t in topics for p in range(partitions_per_topic[t])]
    target: dict[str, list[TopicPartition]] = {m: [] for m in topics_of}
    # Members that share no topic, directly or through others, are independent problems (balance
    # and stickiness both add up over them); members reading nothing take no part at all. A part
    # whose members all read the same topics takes the fast path.
    for readers in _independent_parts(topics_of):
        topics_here = set().union(*readers.values())
        partitions = [tp for tp in all_partitions if tp[0] in topics_here]
        if len(set(readers.values())) == 1:
            target.update(_assign_uniform(partitions, {m: owned[m] for m in readers}))
        else:
            target.update(_assign_general(partitions, readers, owned))
    return _StickyPlan(target, owned)


def _independent_parts(topics_of: Mapping[str, frozenset[str]]) -> list[dict[str, frozenset[str]]]:
    """The connected components of the members-topics graph, members reading nothing left out."""
    parent: dict[str, str] = {}

    def root(topic: str) -> str:
        while parent[topic] != topic:
            parent[topic] = parent[parent[topic]]
            topic = parent[topic]
        return topic

    for topics in topics_of.values():
        for t in topics:
            parent.setdefault(t, t)
        first, *rest = sorted(topics) or [None]
        for t in rest:
            parent[root(t)] = root(first)
    parts: dict[str, dict[str, frozenset[str]]] = {}
    for m in sorted(topics_of):
        if topics_of[m]:
            parts.setdefault(root(min(topics_of[m])), {})[m] = topics_of[m]
    return [parts[r] for r in sorted(parts)]


def _kept_first(tps: Iterable[TopicPartition]) -> list[TopicPartition]:
    # which owned partitions a member keeps when it must give some up: the lowest partition
    # numbers across its topics (Kafka orders by partition, then topic)
    return sorted(tps, key=lambda tp: (tp[1], tp[0]))


def _assign_uniform(
    all_partitions: list[TopicPartition], owned: Mapping[str, set[TopicPartition]]
) -> dict[str, list[TopicPartition]]:
    """Every member subscribes to the same topics: exact quotas, maximal stickiness.

    With ``P`` partitions and ``M`` members, ``P % M`` members get ``P // M + 1`` and the rest
    ``P // M``. Members first keep their owned partitions up to their quota (the extra slots go to
    the members that own the most), then the remaining partitions, sorted, are dealt round-robin to
    members below ``P // M`` and finally one each to members that may still take an extra one.
    """
    q, extra = divmod(len(all_partitions), len(owned))
    plan: dict[str, list[TopicPartition]] = {}
    below: list[str] = []
    at_quota: list[str] = []
    for m in sorted(owned, key=lambda m: (-len(owned[m]), m)):
        keep = _kept_first(owned[m])
        if len(keep) > q and extra > 0:
            extra -= 1
            plan[m] = keep[: q + 1]
        else:
            plan[m] = keep[:q]
            (below if len(plan[m]) < q else at_quota).append(m)
    taken = {tp for tps in plan.values() for tp in tps}
    below.sort()
    may_take_extra = deque(sorted(at_quota))
    i = 0
    for tp in (tp for tp in all_partitions if tp not in taken):
        if below:
            i %= len(below)
            m = below[i]
            plan[m].append(tp)
            if len(plan[m]) == q:
                may_take_extra.append(below.pop(i))
            else:
                i += 1
        else:
            # the counts work out exactly: only ``extra`` partitions are left at this point
            plan[may_take_extra.popleft()].append(tp)
    return plan


def _assign_general(
    all_partitions: list[TopicPartition],
    topics_of: Mapping[str, frozenset[str]],
    owned: Mapping[str, set[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    """Members subscribe to different topics: an optimal balance, then maximal stickiness.

    How many partitions of each topic each member gets comes from :func:`_topic_counts`: among
    all assignments to subscribed members, one with the smallest sum of squared member counts
    (so no member has two more partitions than a member that could take one of them), and among
    those, one keeping the most previously owned partitions. Each member then keeps its lowest
    owned partition numbers of a topic up to its count, and the rest of the topic is dealt
    round-robin, in partition order, to the members still short of their count.
    """
    members = sorted(topics_of)
    partitions_of: dict[str, list[int]] = {}
    for topic, partition in all_partitions:
        partitions_of.setdefault(topic, []).append(partition)
    owned_in = {(t, m): sorted(p for tt, p in owned[m] if tt == t) for m in members for t in topics_of[m]}
    counts = _topic_counts(partitions_of, members, topics_of, owned_in)
    plan: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic, partitions in sorted(partitions_of.items()):
        short: dict[str, int] = {}
        kept: set[int] = set()
        for m in members:
            n = counts.get((topic, m), 0)
            keep = owned_in.get((topic, m), [])[:n]
            plan[m].extend((topic, p) for p in keep)
            kept.update(keep)
            if n > len(keep):
                short[m] = n - len(keep)
        dealt = deque(sorted(short))
        for p in partitions:
            if p in kept:
                continue
            m = dealt.popleft()
            plan[m].append((topic, p))
            short[m] -= 1
            if short[m]:
                dealt.append(m)
    return {m: sorted(tps) for m, tps in plan.items()}


def _topic_counts(
    partitions_of: Mapping[str, list[int]],
    members: list[str],
    topics_of: Mapping[str, frozenset[str]],
    owned_in: Mapping[tuple[str, str], list[int]],
) -> dict[tuple[str, str], int]:
    """(topic, member) -> how many of the topic's partitions the member gets (see :class:`_CountsFlow`)."""
    return _CountsFlow(partitions_of, members, topics_of, owned_in).solve()


class _CountsFlow:
    """A min-cost flow from topics to members, solved exactly by the primal-dual method.

    The ``k``-th partition a member gets costs ``weight * (2k - 1)`` (what it adds to the sum of
    squared counts), minus one if it is one the member owned; ``weight`` exceeds the number of
    partitions, so balance always comes first and stickiness second. Each phase computes shortest
    distances (Bellman-Ford, as costs can be negative), then places partitions along as many paths
    of zero reduced cost as it finds; a path may pass a partition on from one member to another,
    which is how the optimum is reached without undoing a step. Node ids: topic ``i`` is ``i``,
    member ``j`` is ``n_topics + j``.
    """

    def __init__(self, partitions_of, members, topics_of, owned_in) -> None:
        self.topics = sorted(partitions_of)
        self.members = members
        self.n_topics = len(self.topics)
        topic_index = {t: i for i, t in enumerate(self.topics)}
        member_index = {m: j for j, m in enumerate(members)}
        self.eligible = [[j for j, m in enumerate(members) if t in topics_of[m]] for t in self.topics]
        self.of_member = [[topic_index[t] for t in sorted(topics_of[m])] for m in members]
        self.owned: list[dict[int, int]] = [{} for _ in self.topics]
        for (t, m), ps in owned_in.items():
            if ps:
                self.owned[topic_index[t]][member_index[m]] = len(ps)
        self.flow: list[dict[int, int]] = [{} for _ in self.topics]  # partitions placed
        self.sticky: list[dict[int, int]] = [{} for _ in self.topics]  # the owned part of it
        self.remaining = [len(partitions_of[t]) for t in self.topics]
        self.load = [0] * len(members)
        self.weight = sum(self.remaining) + 1

    def forward_cost(self, i: int, j: int) -> int:
        return -1 if self.sticky[i].get(j, 0) < self.owned[i].get(j, 0) else 0

    def backward_cost(self, i: int, j: int) -> int | None:
        # taking a partition of topic i back from member j: non-sticky ones first, they cost nothing
        placed = self.flow[i].get(j, 0)
        if not placed:
            return None
        return 0 if placed > self.sticky[i].get(j, 0) else 1

    def arcs(self, u: int) -> tuple[list[int], object]:
        """The possible targets of node ``u`` (as list indices) and the cost function over them."""
        if u < self.n_topics:
            return self.eligible[u], lambda j: (self.n_topics + j, self.forward_cost(u, j))
        j = u - self.n_topics
        return self.of_member[j], lambda i: (i, self.backward_cost(i, j))

    def solve(self) -> dict[tuple[str, str], int]:
        unplaced = sum(self.remaining)
        while unplaced:
            self.dist = self.shortest_distances()
            n = self.n_topics
            self.to_sink = min(
                self.dist[n + j] + self.weight * (2 * self.load[j] + 1)
                for j in range(len(self.members))
                if self.dist[n + j] is not None
            )
            self.dead = [False] * (n + len(self.members))
            self.next_arc = [0] * (n + len(self.members))
            while unplaced and (path := self.admissible_path()) is not None:
                self.place(path)
                unplaced -= 1
        return {
            (self.topics[i], self.members[j]): k
            for i in range(self.n_topics)
            for j, k in self.flow[i].items()
            if k
        }

    def shortest_distances(self) -> list[int | None]:
        """Bellman-Ford (queue-based) over the residual graph, from every topic with partitions left."""
        size = self.n_topics + len(self.members)
        dist: list[int | None] = [None] * size
        queued = [False] * size
        queue = deque(i for i in range(self.n_topics) if self.remaining[i])
        for i in queue:
            dist[i] = 0
            queued[i] = True
        # more relaxations than nodes x arcs would mean a negative cycle, which the method rules out
        budget = (size + 1) * (2 * sum(map(len, self.eligible)) + 1)
        while queue:
            u = queue.popleft()
            queued[u] = False
            targets, step = self.arcs(u)
            for x in targets:
                v, cost = step(x)
                if cost is None:
                    continue
                d = dist[u] + cost
                if dist[v] is None or d < dist[v]:
                    budget -= 1
                    if budget < 0:
                        raise AssertionError("sticky assignor: negative cycle in the residual graph")
                    dist[v] = d
                    if not queued[v]:
                        queued[v] = True
                        queue.append(v)
        return dist

    def admissible_path(self) -> list[int] | None:
        """A source-to-sink path over arcs of zero reduced cost (depth-first), or None.

        ``dead`` marks nodes an earlier search of this phase could not get through and ``next_arc``
        where each node's arcs were left; skipping what they rule out can only end the phase early
        (the next phase recomputes distances and starts afresh), it never loses optimality.
        """
        n, dist, visited = self.n_topics, self.dist, list(self.dead)

        def advance(u: int) -> int | None:
            targets, step = self.arcs(u)
            k = self.next_arc[u]
            while k < len(targets):
                v, cost = step(targets[k])
                if cost is None or dist[v] != dist[u] + cost or self.dead[v]:
                    if k == self.next_arc[u]:  # useless for the rest of the phase
                        self.next_arc[u] += 1
                elif not visited[v]:
                    return v
                k += 1
            return None

        for source in range(n):
            if not self.remaining[source] or dist[source] != 0 or visited[source]:
                continue
            stack = [source]
            visited[source] = True
            while stack:
                u = stack[-1]
                if u >= n and dist[u] + self.weight * (2 * self.load[u - n] + 1) == self.to_sink:
                    return stack
                v = advance(u)
                if v is None:
                    self.dead[u] = True
                    stack.pop()
                else:
                    visited[v] = True
                    stack.append(v)
        return None

    def place(self, path: list[int]) -> None:
        """Send one partition along ``path``: from its first topic to its last member."""
        n = self.n_topics
        for u, v in pairwise(path):
            if u < n:  # a partition of topic u goes to member v
                i, j = u, v - n
                if self.forward_cost(i, j) < 0:
                    self.sticky[i][j] = self.sticky[i].get(j, 0) + 1
                self.flow[i][j] = self.flow[i].get(j, 0) + 1
            else:  # member u hands a partition of topic v on
                i, j = v, u - n
                if self.backward_cost(i, j):
                    self.sticky[i][j] -= 1
                self.flow[i][j] -= 1
        self.remaining[path[0]] -= 1
        self.load[path[-1] - n] += 1


class _StickyBase(Assignor):
    def __init__(self) -> None:
        self._assignment: list[TopicPartition] | None = None
        self._generation = DEFAULT_GENERATION

    def on_assignment(self, assignment, generation):
        self._assignment = _partitions_of(assignment)
        self._generation = generation

    @abstractmethod
    def member_data(self, subscription: Subscription) -> MemberData:
        """The member's claim, as this assignor reads it from the Subscription."""

    def _plan(self, partitions_per_topic, subscriptions) -> _StickyPlan:
        _validate(partitions_per_topic, subscriptions)
        data = {m: self.member_data(s) for m, s in subscriptions.items()}
        return _sticky_plan(partitions_per_topic, subscriptions, data)


class StickyAssignor(_StickyBase):
    """Kafka's ``StickyAssignor`` (EAGER): balanced first, then as sticky as possible.

    Guarantees: every partition of a subscribed, existing topic goes to exactly one member subscribed
    to it. Balanced: the member counts have the smallest possible sum of squares, so no member has
    two more partitions than another member that could take one of them, and members with identical
    subscriptions differ by at most one. Sticky: among all such balanced assignments, one that
    leaves the most partitions with their valid previous owner (with identical subscriptions each
    member keeps ``min(owned, quota)`` and the larger quotas go to those that owned the most). So a
    previously owned partition moves only when balance requires it, and assigning again what it
    returned (same members, same subscriptions) gives the same assignment back.

    The previous assignment comes from the member's user data (Kafka's format, written by
    ``subscription_user_data`` after ``on_assignment``), else from ``owned_partitions`` and
    ``generation_id``. Conflicting claims: the higher generation wins, a tie invalidates the claim.
    Under EAGER, members have revoked everything before joining, so moves are safe in one round.
    Not guaranteed: the same choice among equally good assignments as Kafka's implementation makes
    (Kafka's depends on hash-map order), rack awareness. Cost: identical subscriptions (and each
    group of members sharing no topic with the rest) take a fast quota path; otherwise an exact
    min-cost flow runs, whose cost grows with partitions times members.
    """

    name = "sticky"

    def subscription_user_data(self, topics, assignment=None, generation=None):
        # The last assignment received, not what the member owns now: under EAGER it revoked
        # everything before joining, and what it had is exactly what stickiness needs.
        if self._assignment is not None:
            return encode_sticky_user_data(self._assignment, self._generation)
        if assignment is None:
            return None  # never assigned anything: nothing to say (as Kafka)
        return encode_sticky_user_data(
            _partitions_of(assignment), DEFAULT_GENERATION if generation is None else generation
        )

    def member_data(self, subscription):
        if subscription.user_data:
            return decode_sticky_user_data(subscription.user_data)
        return MemberData(tuple(subscription.owned_partitions), subscription.generation_id)

    def assign(self, partitions_per_topic, subscriptions, group_instance_ids=None):
        # static or not, a member's previous partitions come back with it through its claims
        return _to_assignments(self._plan(partitions_per_topic, subscriptions).target)


class CooperativeStickyAssignor(_StickyBase):
    """Kafka's ``CooperativeStickyAssignor`` (COOPERATIVE, KIP-429 incremental rebalancing).

    Computes the same balanced, sticky target as ``sticky`` from each member's ``owned_partitions``
    and generation (``generation_id``, else the generation in its user data). Then any partition the
    target gives to a member other than its valid previous owner, while some other member still
    claims it, is withheld: it is in nobody's assignment this round. Its owner sees it missing,
    revokes it (committing first) and rejoins; the follow-up rebalance assigns it. So no partition is
    ever handed to a new owner while another member may still be consuming it, and partitions that
    do not move stay assigned throughout and keep being consumed.

    Guarantees: round one assigns each partition to at most one member and never a partition claimed
    by another member (unless this member holds it with the higher generation); once members have
    dropped what they lost and rejoined (membership and subscriptions unchanged), the next round
    assigns every partition and revokes nothing: its target keeps everything they still own, because
    the previous target was already balanced and kept it. Balance holds only after that round.
    """

    name = "cooperative-sticky"
    protocol = COOPERATIVE
    supported_protocols = (COOPERATIVE, EAGER)

    def subscription_user_data(self, topics, assignment=None, generation=None):
        if self._assignment is None and generation is not None:
            return encode_cooperative_user_data(generation)
        return encode_cooperative_user_data(self._generation)

    def member_data(self, subscription):
        generation = subscription.generation_id
        if generation == DEFAULT_GENERATION:
            generation = decode_cooperative_user_data(subscription.user_data)
        return MemberData(tuple(subscription.owned_partitions), generation)

    def assign(self, partitions_per_topic, subscriptions, group_instance_ids=None):
        plan = self._plan(partitions_per_topic, subscriptions)
        claimed_by: dict[TopicPartition, set[str]] = {}
        for m, sub in subscriptions.items():
            for tp in sub.owned_partitions:
                claimed_by.setdefault(tuple(tp), set()).add(m)
        granted = {
            m: [tp for tp in tps if tp in plan.owned[m] or not claimed_by.get(tp, set()) - {m}]
            for m, tps in plan.target.items()
        }
        return _to_assignments(granted)
