"""Client-side partition assignors (the group leader runs them over the members' subscriptions).

``range`` follows Kafka's ``RangeAssignor``: per topic, members sorted by member id, each gets
``n // m`` consecutive partitions and the first ``n % m`` members one more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def range_assign(
    subscriptions: Mapping[str, Sequence[str]], partitions_per_topic: Mapping[str, int]
) -> dict[str, list[tuple[str, int]]]:
    """``subscriptions``: member id -> subscribed topics. Returns member id -> [(topic, partition)]."""
    assignment: dict[str, list[tuple[str, int]]] = {m: [] for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        n = partitions_per_topic.get(topic, 0)
        consumers = sorted(m for m, ts in subscriptions.items() if topic in ts)
        if not consumers or n <= 0:
            continue
        per, extra = divmod(n, len(consumers))
        start = 0
        for i, member in enumerate(consumers):
            count = per + (1 if i < extra else 0)
            assignment[member].extend((topic, p) for p in range(start, start + count))
            start += count
    return assignment
