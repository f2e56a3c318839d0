"""The assignor interface and what every assignor shares: protocol names, argument checks, results.

``Assignor`` is Kafka's ``ConsumerPartitionAssignor``; the helpers validate the arguments of ``assign``
(raising ``ValueError``/``TypeError`` that name the bad entry, before anything is computed), keep only
subscribed topics that exist and have partitions, and build sorted, deterministic ``Assignment`` objects.
Pure: standard library and ``coordinator`` only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping

from raygroups.coordinator.checks import is_int
from raygroups.coordinator.consumer_protocol import Assignment, Subscription

TopicPartition = tuple[str, int]

EAGER = "EAGER"
COOPERATIVE = "COOPERATIVE"
#: Kafka's ``AbstractStickyAssignor.DEFAULT_GENERATION``: "no generation known".
DEFAULT_GENERATION = -1


class Assignor(ABC):
    """A client-side partition assignor (Kafka's ``ConsumerPartitionAssignor``).

    ``assign`` returns an entry for every member in ``subscriptions`` (possibly empty) and never
    assigns a partition to a member not subscribed to its topic, nor a partition of a topic that is
    missing from ``partitions_per_topic`` or has no partitions. It does not validate that members'
    claims (owned partitions, generations) are truthful: stale or conflicting claims are resolved
    as Kafka does (the higher generation wins; a tie in the same generation invalidates the claim).
    """

    name: str = ""
    #: The rebalance protocol the assignor is designed for (Kafka's ``RebalanceProtocol``).
    protocol: str = EAGER
    #: Every protocol the assignor can run under, preferred first.
    supported_protocols: tuple[str, ...] = (EAGER,)

    def subscription_user_data(
        self,
        topics: Iterable[str],
        assignment: Assignment | Iterable[TopicPartition] | None = None,
        generation: int | None = None,
    ) -> bytes | None:
        """The ``user_data`` this member puts in its Subscription (``None``: nothing).

        Stateful assignors describe what ``on_assignment`` last told them, as Kafka's do;
        ``assignment`` and ``generation`` (what the caller holds now) stand in only until then.
        """
        return None

    @abstractmethod
    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        group_instance_ids: Mapping[str, str | None] | None = None,
    ) -> dict[str, Assignment]:
        """member id -> Assignment, for every member in ``subscriptions``.

        ``group_instance_ids``: member id -> ``group.instance.id`` (``None`` for dynamic members),
        from the JoinGroup response; the order-based assignors rank static members by it (KIP-345).
        """

    def on_assignment(self, assignment: Assignment | Iterable[TopicPartition], generation: int) -> None:
        """Called on every member when SyncGroup hands it ``assignment`` in ``generation``."""
        return None


# --------------------------------------------------------------------------------------------
# shared helpers


def _validate(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> None:
    for topic, n in partitions_per_topic.items():
        if not is_int(n) or n < 0:
            raise ValueError(f"partitions_per_topic[{topic!r}] must be an int >= 0, got {n!r}")
    for member_id, sub in subscriptions.items():
        if not isinstance(sub, Subscription):
            raise TypeError(f"subscriptions[{member_id!r}] must be a Subscription, got {type(sub).__name__}")


def _effective_topics(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, frozenset[str]]:
    """member id -> subscribed topics that exist and have at least one partition."""
    return {
        m: frozenset(t for t in sub.topics if partitions_per_topic.get(t, 0) > 0)
        for m, sub in subscriptions.items()
    }


def _to_assignments(plan: Mapping[str, Iterable[TopicPartition]]) -> dict[str, Assignment]:
    return {m: Assignment(partitions=tuple(sorted(tps))) for m, tps in sorted(plan.items())}


def _partitions_of(assignment: Assignment | Iterable[TopicPartition] | None) -> list[TopicPartition]:
    if assignment is None:
        return []
    tps = assignment.partitions if isinstance(assignment, Assignment) else assignment
    return [(str(t), int(p)) for t, p in tps]
