"""The order-based assignors: ``range`` and ``roundrobin`` (Kafka's ``RangeAssignor`` and
``RoundRobinAssignor``), and ``range_assign``, the plain-data form of ``range``.

Both rank members as Kafka does (static members by group.instance.id, then dynamic ones by member id),
are deterministic and ignore previous ownership (they are not sticky). Pure: standard library and
``coordinator`` only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from raygroups.membership.assignors.base import (
    Assignor,
    TopicPartition,
    _effective_topics,
    _to_assignments,
    _validate,
)


def range_assign(
    subscriptions: Mapping[str, Sequence[str]],
    partitions_per_topic: Mapping[str, int],
    group_instance_ids: Mapping[str, str | None] | None = None,
) -> dict[str, list[tuple[str, int]]]:
    """``subscriptions``: member id -> subscribed topics. Returns member id -> [(topic, partition)].

    ``group_instance_ids`` (member id -> ``group.instance.id``) orders static members first, by
    instance id, as Kafka does, so a static member keeps its ranges when its member id changes.
    """
    assignment: dict[str, list[tuple[str, int]]] = {m: [] for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    rank = _member_order(group_instance_ids)
    for topic in topics:
        n = partitions_per_topic.get(topic, 0)
        consumers = sorted((m for m, ts in subscriptions.items() if topic in ts), key=rank)
        if not consumers or n <= 0:
            continue
        per, extra = divmod(n, len(consumers))
        start = 0
        for i, member in enumerate(consumers):
            count = per + (1 if i < extra else 0)
            assignment[member].extend((topic, p) for p in range(start, start + count))
            start += count
    return assignment


def _member_order(group_instance_ids: Mapping[str, str | None] | None):
    """Sort key over member ids: Kafka's ``MemberInfo`` order, static members (by group.instance.id)
    before dynamic ones (by member id)."""
    ids = group_instance_ids or {}

    def key(member_id: str) -> tuple[int, str]:
        instance_id = ids.get(member_id)
        return (0, instance_id) if instance_id is not None else (1, member_id)

    return key


class RangeAssignor(Assignor):
    """Kafka's ``RangeAssignor``: per topic, consecutive ranges over the members sorted by id.

    Guarantees: for each topic, every partition goes to exactly one subscribed member; the counts of
    one topic differ by at most one, the first members getting the extra partitions (static members
    first, by group.instance.id, then dynamic ones by member id). It does not balance across topics
    (with many topics the first members get more) and is not sticky.
    """

    name = "range"

    def assign(self, partitions_per_topic, subscriptions, group_instance_ids=None):
        _validate(partitions_per_topic, subscriptions)
        topics = {m: tuple(s.topics) for m, s in subscriptions.items()}
        return _to_assignments(range_assign(topics, partitions_per_topic, group_instance_ids))


class RoundRobinAssignor(Assignor):
    """Kafka's ``RoundRobinAssignor``: all partitions, sorted by (topic, partition), dealt in turn.

    Guarantees: every subscribed partition goes to exactly one subscribed member; when all members
    have identical subscriptions their counts differ by at most one. Members are taken static first
    (by group.instance.id), then dynamic (by member id). With different subscriptions it can be
    unbalanced (the cursor skips members not subscribed to a topic) and it is not sticky.
    """

    name = "roundrobin"

    def assign(self, partitions_per_topic, subscriptions, group_instance_ids=None):
        _validate(partitions_per_topic, subscriptions)
        topics_of = _effective_topics(partitions_per_topic, subscriptions)
        members = sorted(subscriptions, key=_member_order(group_instance_ids))
        plan: dict[str, list[TopicPartition]] = {m: [] for m in members}
        cursor = 0
        for topic in sorted(set().union(*topics_of.values()) if members else ()):
            for partition in range(partitions_per_topic[topic]):
                # someone subscribes to ``topic``, so this stops within one lap
                while topic not in topics_of[members[cursor % len(members)]]:
                    cursor += 1
                plan[members[cursor % len(members)]].append((topic, partition))
                cursor += 1
        return _to_assignments(plan)
