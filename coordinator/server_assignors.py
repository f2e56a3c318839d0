"""KIP-848 server-side assignors: the group coordinator computes a consumer group's target assignment.

``UNIFORM`` ("uniform") follows Kafka's ``UniformAssignor`` with its two builders,
``UniformHomogeneousAssignmentBuilder`` (every member subscribes to the same topics) and
``UniformHeterogeneousAssignmentBuilder`` (subscriptions differ). ``RANGE`` ("range") follows Kafka's
server-side ``RangeAssignor`` in its sticky form (Kafka 3.5 to 3.8); Kafka 3.9 rewrote it without
stickiness (KAFKA-16944), and both forms give the same ranges when no member holds anything yet.

Inputs are topic names, not topic ids: ``topics`` maps each existing topic to its partition count, and a
subscribed topic missing from it (or with no partitions) is ignored where Kafka raises
``PartitionAssignorException``. A member's ``assignment`` is its current target assignment; partitions
of topics it no longer subscribes to, and partitions at or past the topic's count, are dropped. Rack ids
are carried but not used: Kafka's server-side assignors of these versions are not rack aware.

Every result holds an entry for every member (``{}`` when it gets nothing) and no empty partition set.
Results never depend on the insertion order of the input mappings or on string hashing: members, topics
and partitions are always visited in sorted order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cmp_to_key
from itertools import chain, compress
from typing import ClassVar, Protocol

from raygroups.coordinator.checks import is_int

# A member's assignment while it is built: topic -> partitions (ascending where it matters).
_Lists = dict[str, list[int]]

# Turns a "claimed" flag array into a "free" mask for itertools.compress.
_FLIP = bytes.maketrans(b"\x00\x01", b"\x01\x00")


class PartitionAssignorError(Exception):
    """Kafka's ``PartitionAssignorException``: the input cannot be assigned (malformed members, topics
    or partitions). Nothing is assigned when it is raised."""


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What an assignor knows of one member: the topics it subscribes to (regular expressions already
    resolved by the caller), its rack and its current target assignment (for stickiness).

    ``subscribed_topics`` is stored as a ``frozenset`` whatever iterable of names is given. The
    assignment is neither copied nor hashed (a subscription hashes by its topics and rack)."""

    subscribed_topics: frozenset[str]
    rack_id: str | None = None
    assignment: Mapping[str, frozenset[int]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        topics = self.subscribed_topics
        if isinstance(topics, str) or not hasattr(topics, "__iter__"):
            raise PartitionAssignorError(
                f"subscribed_topics must be a set of topic names, got {type(topics).__name__}")
        if not isinstance(topics, frozenset):
            object.__setattr__(self, "subscribed_topics", frozenset(topics))
        if self.rack_id is not None and not isinstance(self.rack_id, str):
            raise PartitionAssignorError(f"rack_id must be a str or None, got {type(self.rack_id).__name__}")
        if not isinstance(self.assignment, Mapping):
            raise PartitionAssignorError(
                f"assignment must map topic names to partitions, got {type(self.assignment).__name__}")


class ServerAssignor(Protocol):
    name: str

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[str, int]
    ) -> dict[str, dict[str, frozenset[int]]]:
        """``members``: member_id -> subscription; ``topics``: topic -> partition count of the topics
        that exist. Returns member_id -> {topic: partitions} for every member."""
        ...


# ------------------------------------------------------------------------------------------------
# The group as the assignors see it


@dataclass(slots=True)
class _Group:
    """The validated input: members numbered 0..M-1 in sorted member-id order, each with the topics it
    subscribes to that exist and have partitions, and the partitions of those topics it currently holds.

    A partition two members both claim stays with the first in member-id order (a target assignment
    never has such a partition; this keeps the result valid if one comes in anyway)."""

    member_ids: list[str]
    subscriptions: list[frozenset[str]]
    counts: dict[str, int]  # every topic some member subscribes to -> its partition count (> 0)
    held: list[list[tuple[str, list[int]]]]  # per member: (topic, ascending partitions), topics sorted
    claimed: dict[str, bytearray]  # per topic: 1 where some member holds the partition
    homogeneous: bool

    @classmethod
    def of(cls, members: Mapping[str, MemberSubscription], topics: Mapping[str, int]) -> _Group:
        if not isinstance(members, Mapping):
            raise PartitionAssignorError(f"members must be a mapping, got {type(members).__name__}")
        if not isinstance(topics, Mapping):
            raise PartitionAssignorError(f"topics must be a mapping, got {type(topics).__name__}")
        live: set[str] = set()
        for topic, count in topics.items():
            if not isinstance(topic, str):
                raise PartitionAssignorError(f"topic names must be str, got {type(topic).__name__}")
            if not is_int(count) or count < 0:
                raise PartitionAssignorError(
                    f"partition count of topic {topic!r} must be an int >= 0, got {count!r}")
            if count > 0:
                live.add(topic)
        live_topics = frozenset(live)
        for member_id, subscription in members.items():
            if not isinstance(member_id, str):
                raise PartitionAssignorError(f"member ids must be str, got {type(member_id).__name__}")
            if not isinstance(subscription, MemberSubscription):
                raise PartitionAssignorError(
                    f"member {member_id!r}: expected a MemberSubscription, got {type(subscription).__name__}")

        member_ids = sorted(members)
        # Members usually share their subscription; intersect each distinct one once.
        effective: dict[frozenset[str], frozenset[str]] = {}
        subscriptions: list[frozenset[str]] = []
        for member_id in member_ids:
            subscribed = members[member_id].subscribed_topics
            mine = effective.get(subscribed)
            if mine is None:
                mine = effective[subscribed] = subscribed & live_topics
            subscriptions.append(mine)
        distinct = set(effective.values())
        homogeneous = len(distinct) <= 1
        counts = {topic: topics[topic] for topic in sorted(frozenset().union(*distinct))}
        claimed = {topic: bytearray(count) for topic, count in counts.items()}
        held = [
            _held_partitions(member_id, members[member_id].assignment, subscriptions[index], claimed)
            for index, member_id in enumerate(member_ids)
        ]
        return cls(member_ids, subscriptions, counts, held, claimed, homogeneous)

    def topic_subscribers(self) -> dict[str, list[int]]:
        """topic -> the members subscribed to it, ascending. Members sharing a subscription are
        gathered once, so the cost follows the distinct subscriptions, not members times topics."""
        sharing: dict[frozenset[str], list[int]] = {}
        for index, subscribed in enumerate(self.subscriptions):
            sharing.setdefault(subscribed, []).append(index)
        runs: dict[str, list[list[int]]] = {topic: [] for topic in self.counts}
        for subscribed, indices in sharing.items():
            for topic in subscribed:
                runs[topic].append(indices)
        # A topic's single run is shared with other topics: callers only read these lists.
        return {topic: lists[0] if len(lists) == 1 else sorted(chain.from_iterable(lists))
                for topic, lists in runs.items()}

    def result(self, assignments: list[_Lists]) -> dict[str, dict[str, frozenset[int]]]:
        return {
            member_id: {topic: frozenset(partitions) for topic, partitions in assignment.items() if partitions}
            for member_id, assignment in zip(self.member_ids, assignments, strict=True)
        }


def _held_partitions(
    member_id: str, current: Mapping[str, frozenset[int]], subscribed: frozenset[str], claimed: dict[str, bytearray]
) -> list[tuple[str, list[int]]]:
    """The partitions ``member_id`` may keep: of topics it still subscribes to, below the topic's count,
    not already claimed by a member earlier in member-id order. Marks them claimed."""
    held: list[tuple[str, list[int]]] = []
    if not current:
        return held
    for topic in sorted(topic for topic in current if topic in subscribed):
        flags = claimed[topic]
        count = len(flags)
        try:
            partitions = sorted(current[topic])
        except TypeError:
            raise PartitionAssignorError(
                f"member {member_id!r}: partitions of topic {topic!r} must be ints") from None
        kept: list[int] = []
        for partition in partitions:
            if type(partition) is not int or partition < 0:
                raise PartitionAssignorError(
                    f"member {member_id!r}: partition {partition!r} of topic {topic!r} must be an int >= 0")
            if partition >= count:
                break  # the topic has fewer partitions now (it was deleted and created again)
            if not flags[partition]:
                flags[partition] = 1
                kept.append(partition)
        if kept:
            held.append((topic, kept))
    return held


def _free_partitions(flags: bytearray) -> list[int]:
    return list(compress(range(len(flags)), flags.translate(_FLIP)))


# ------------------------------------------------------------------------------------------------
# Uniform


class UniformAssignor:
    """Kafka's ``UniformAssignor``: spreads the partitions of the subscribed topics over the members as
    evenly as the subscriptions allow, keeping members' current partitions where balance permits
    (balance first, then stickiness).

    Guarantees: every partition of a subscribed existing topic goes to exactly one member subscribed to
    it; when all members subscribe to the same topics, member partition counts differ by at most one
    and re-running on the result changes nothing. When subscriptions differ, the balance is Kafka's
    heterogeneous one: iterative and bounded, so not always the best possible."""

    name: ClassVar[str] = "uniform"
    __slots__ = ()

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[str, int]
    ) -> dict[str, dict[str, frozenset[int]]]:
        group = _Group.of(members, topics)
        if not group.member_ids:
            return {}
        if group.homogeneous:
            return group.result(_assign_homogeneous(group))
        return group.result(_HeterogeneousBuilder(group).build())


def _assign_homogeneous(group: _Group) -> list[_Lists]:
    """Kafka's ``UniformHomogeneousAssignmentBuilder``.

    Every member's quota is floor(P / M), and P % M members get one more. Kafka hands the extra ones to
    the first members in its (hash) iteration order; here they go first to the members that already
    hold more than the floor, in member-id order, so that no member gives up a partition another
    member is then handed only to fill its quota. A member keeps its current partitions up to its
    quota (topics in name order, partitions ascending); the partitions nobody holds, in topic and
    partition order, then the ones given up, fill the members below quota in member-id order."""
    members = len(group.member_ids)
    total = sum(group.counts.values())
    floor_quota, extras = divmod(total, members)
    held_counts = [sum(len(partitions) for _, partitions in held) for held in group.held]

    quotas = [floor_quota] * members
    for index in range(members):
        if not extras:
            break
        if held_counts[index] > floor_quota:
            quotas[index] += 1
            extras -= 1
    for index in range(members):
        if not extras:
            break
        if quotas[index] == floor_quota:
            quotas[index] += 1
            extras -= 1

    assignments: list[_Lists] = [{} for _ in range(members)]
    given_up: list[tuple[str, list[int]]] = []
    unfilled: list[tuple[int, int]] = []
    for index, held in enumerate(group.held):
        room = quotas[index]
        mine = assignments[index]
        for topic, partitions in held:
            if len(partitions) <= room:
                mine[topic] = partitions
                room -= len(partitions)
            else:
                if room:
                    mine[topic] = partitions[:room]
                given_up.append((topic, partitions[room:]))
                room = 0
        if room:
            unfilled.append((index, room))

    pool = [(topic, _free_partitions(flags)) for topic, flags in group.claimed.items()] + given_up
    pool = [(topic, partitions) for topic, partitions in pool if partitions]
    segment, offset = 0, 0
    for index, room in unfilled:
        mine = assignments[index]
        while room:
            if segment == len(pool):
                raise PartitionAssignorError("members were left below their quota")
            topic, partitions = pool[segment]
            taken = partitions[offset:offset + room]
            mine.setdefault(topic, []).extend(taken)
            room -= len(taken)
            offset += len(taken)
            if offset == len(partitions):
                segment, offset = segment + 1, 0
    if segment != len(pool):
        raise PartitionAssignorError("partitions were left unassigned")
    return assignments


class _LoadLadder:
    """Kafka's ``UniformHeterogeneousAssignmentBuilder.MemberAssignmentBalancer``: a topic's subscribers
    sorted by how many partitions they hold (ties by member index), with a least loaded range that
    grows rightwards and a most loaded range that grows leftwards. Handing out partitions from the
    least loaded range round-robin per level (and taking them from the most loaded one the same way)
    balances in one pass without re-sorting. It reads the builder's live ``sizes``."""

    __slots__ = ("sizes", "order", "low_end", "low_level", "low_next", "high_start", "high_end",
                 "high_level", "high_next")

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.order: list[int] = []

    def reset(self, members: list[int]) -> int:
        """Starts over for ``members`` (not empty, ascending); returns their spread (most minus least
        held). The sort is stable, so members holding as many stay in index order."""
        sizes = self.sizes
        order = self.order = sorted(members, key=sizes.__getitem__)
        least, most = sizes[order[0]], sizes[order[-1]]
        self.low_end, self.low_level, self.low_next = 0, least - 1, 0
        self.high_start = self.high_end = len(order)
        self.high_level, self.high_next = most + 1, len(order) - 1
        return most - least

    def take_least_loaded(self) -> int:
        """The member to receive the next partition (assumed given to it)."""
        if self.low_next >= self.low_end:
            # Everyone in the range got one: the range is a level higher and may take in the members
            # that were already at that level.
            self.low_level += 1
            order, sizes = self.order, self.sizes
            while self.low_end < len(order) and sizes[order[self.low_end]] == self.low_level:
                self.low_end += 1
            self.low_next = 0
        member = self.order[self.low_next]
        self.low_next += 1
        return member

    def take_most_loaded(self) -> int:
        """The member to give up the next partition (assumed taken from it), or -1 when none is left."""
        if self.high_next < self.high_start:
            order, sizes = self.order, self.sizes
            if self.high_end <= self.high_start and self.high_start > 0:
                # Emptied by drop_most_loaded: restart from the next member down so the range grows.
                self.high_level = sizes[order[self.high_start - 1]]
            else:
                self.high_level -= 1
            while self.high_start > 0 and sizes[order[self.high_start - 1]] == self.high_level:
                self.high_start -= 1
            self.high_next = self.high_end - 1
        if self.high_next < 0:
            return -1
        member = self.order[self.high_next]
        self.high_next -= 1
        return member

    def drop_most_loaded(self) -> None:
        """Takes the member last returned by take_most_loaded out of the range (it has nothing to give)."""
        order = self.order
        at, last = self.high_next + 1, self.high_end - 1
        order[at], order[last] = order[last], order[at]
        self.high_end -= 1

    def balanced(self) -> bool:
        return self.high_level - self.low_level <= 1


class _HeterogeneousBuilder:
    """Kafka's ``UniformHeterogeneousAssignmentBuilder`` (the KAFKA-17710 form): members keep every
    partition of the topics they still subscribe to; the partitions nobody holds go, topic by topic,
    to the topic's least loaded subscribers; then partitions move from the most to the least loaded
    subscribers of each topic, round after round over the topics, until a round moves nothing or
    after ``MAX_ITERATION_COUNT`` rounds."""

    # Kafka's bound: most subscription patterns balance in one round; overlapping ones roughly halve
    # their imbalance each round.
    MAX_ITERATION_COUNT: ClassVar[int] = 16

    def __init__(self, group: _Group) -> None:
        self.group = group
        self.counts = group.counts
        self.sizes = [0] * len(group.member_ids)
        self.subscribers = group.topic_subscribers()
        self.owners: dict[str, list[int]] = {topic: [-1] * count for topic, count in group.counts.items()}
        for index, held in enumerate(group.held):
            for topic, partitions in held:
                owners = self.owners[topic]
                for partition in partitions:
                    owners[partition] = index
                self.sizes[index] += len(partitions)
        self.ladder = _LoadLadder(self.sizes)

    def build(self) -> list[_Lists]:
        self._assign_unassigned()
        self._balance()
        assignments: list[_Lists] = [{} for _ in self.group.member_ids]
        for topic, owners in self.owners.items():
            if -1 in owners:
                raise PartitionAssignorError(f"partitions of topic {topic!r} were left unassigned")
            for partition, owner in enumerate(owners):
                assignments[owner].setdefault(topic, []).append(partition)
        return assignments

    def _sorted_topics(self, topics: list[str]) -> list[str]:
        """Kafka's topic order: most partitions per subscriber first, then fewest subscribers, then name."""
        counts, subscribers = self.counts, self.subscribers

        def compare(left: str, right: str) -> int:
            left_count, left_subscribers = counts[left], len(subscribers[left])
            right_count, right_subscribers = counts[right], len(subscribers[right])
            # Partitions per subscriber compared exactly (cross-multiplied), the larger first.
            return (right_count * left_subscribers - left_count * right_subscribers
                    or left_subscribers - right_subscribers
                    or (left > right) - (left < right))
        return sorted(topics, key=cmp_to_key(compare))

    def _move(self, topic: str, partition: int, member: int) -> None:
        owners = self.owners[topic]
        previous = owners[partition]
        if previous != -1:
            self.sizes[previous] -= 1
        owners[partition] = member
        self.sizes[member] += 1

    def _assign_unassigned(self) -> None:
        unassigned = {
            topic: _free_partitions(flags) for topic, flags in self.group.claimed.items() if 0 in flags
        }
        ladder = self.ladder
        for topic in self._sorted_topics(list(unassigned)):
            ladder.reset(self.subscribers[topic])
            for partition in unassigned[topic]:
                self._move(topic, partition, ladder.take_least_loaded())

    def _balance(self) -> None:
        # A topic with one subscriber has nowhere to move its partitions.
        topics = self._sorted_topics([topic for topic, members in self.subscribers.items() if len(members) >= 2])
        if not topics:
            return
        last_moved = -1  # the index of the last topic that moved something
        for _ in range(self.MAX_ITERATION_COUNT):
            for index, topic in enumerate(topics):
                if index == last_moved:
                    return  # a whole round since that topic moved nothing
                if self._balance_topic(topic) > 0 or last_moved == -1:
                    last_moved = index

    def _balance_topic(self, topic: str) -> int:
        """Moves partitions of ``topic`` from its most to its least loaded subscribers (by total
        partitions held) until their loads differ by one at most or the most loaded have none of it."""
        ladder = self.ladder
        if ladder.reset(self.subscribers[topic]) <= 1:
            return 0
        owners = self.owners[topic]
        # Partitions grouped by owner (ascending within an owner): an owner gives up its highest first.
        by_owner = sorted(range(len(owners)), key=owners.__getitem__)
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for position, partition in enumerate(by_owner):
            owner = owners[partition]
            start.setdefault(owner, position)
            end[owner] = position + 1
        moved = 0
        while not ladder.balanced():
            giver = ladder.take_most_loaded()
            while giver != -1 and end.get(giver, 0) - start.get(giver, 0) <= 0:
                ladder.drop_most_loaded()
                giver = ladder.take_most_loaded()
            if giver == -1:
                break
            end[giver] -= 1
            partition = by_owner[end[giver]]
            taker = ladder.take_least_loaded()
            if ladder.balanced():
                break
            self._move(topic, partition, taker)
            moved += 1
        return moved


# ------------------------------------------------------------------------------------------------
# Range


class RangeAssignor:
    """Kafka's server-side ``RangeAssignor`` in its sticky form (Kafka 3.5 to 3.8): topic by topic, the
    subscribers in member-id order share the partitions, floor(P / S) each and one more for P % S of
    them. A member keeps its lowest current partitions up to that quota (and one more while extras
    remain, in member-id order); the partitions nobody kept then go in ascending runs to the members
    below quota in member-id order. With no current assignment every member gets one contiguous range
    and co-partitioned topics line up, as in Kafka 3.9's rewrite (KAFKA-16944), which dropped
    stickiness and puts static members first (this assignor sees no instance ids).

    Guarantees: every partition of a subscribed existing topic goes to exactly one of its subscribers;
    per topic, subscriber counts differ by at most one; re-running on the result changes nothing. It
    does not balance totals across topics."""

    name: ClassVar[str] = "range"
    __slots__ = ()

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[str, int]
    ) -> dict[str, dict[str, frozenset[int]]]:
        group = _Group.of(members, topics)
        if not group.member_ids:
            return {}
        subscribers = group.topic_subscribers()
        holders: dict[str, list[tuple[int, list[int]]]] = {topic: [] for topic in group.counts}
        for index, held in enumerate(group.held):
            for topic, partitions in held:
                holders[topic].append((index, partitions))
        assignments: list[_Lists] = [{} for _ in group.member_ids]
        for topic, count in group.counts.items():
            _assign_range(topic, count, subscribers[topic], holders[topic], assignments)
        return group.result(assignments)


def _assign_range(
    topic: str, count: int, subscribers: list[int], holders: list[tuple[int, list[int]]], assignments: list[_Lists]
) -> None:
    """One topic of Kafka's sticky ``RangeAssignor.assign``; writes into ``assignments``."""
    quota, extras = divmod(count, len(subscribers))
    kept = bytearray(count)
    keeps_extra: set[int] = set()
    shortfall: dict[int, int] = {}  # holder -> partitions it needs to reach the floor quota (may be < 0)
    for member, partitions in holders:
        if len(partitions) > quota and extras:
            extras -= 1
            keeps_extra.add(member)
            keep = partitions[:quota + 1]
        else:
            shortfall[member] = quota - len(partitions)
            keep = partitions[:quota]
        if keep:
            assignments[member][topic] = keep
            for partition in keep:
                kept[partition] = 1
    free = _free_partitions(kept)
    next_free = 0
    for member in subscribers:
        if member in keeps_extra:
            continue
        if not extras and not quota:
            break  # nobody further on gets anything
        need = shortfall.get(member, quota)
        if extras:
            need += 1
            extras -= 1
        if need > 0:
            assignments[member].setdefault(topic, []).extend(free[next_free:next_free + need])
            next_free += need
    if next_free != len(free):
        raise PartitionAssignorError(f"partitions of topic {topic!r} were left unassigned")


UNIFORM = UniformAssignor()
RANGE = RangeAssignor()
ASSIGNORS: dict[str, ServerAssignor] = {UNIFORM.name: UNIFORM, RANGE.name: RANGE}
