"""Client-side partition assignors: the group leader runs one over the members' subscriptions.

Four assignors with the semantics of Kafka's client assignors of the same names:

* ``range`` (``RangeAssignor``): per topic, the subscribed members in order (static members by
  group.instance.id, then dynamic ones by member id); each gets ``n // m`` consecutive partitions
  and the first ``n % m`` members one more.
* ``roundrobin`` (``RoundRobinAssignor``): every subscribed partition, sorted by (topic, partition),
  dealt round-robin over the members in the same order, skipping those not subscribed to its topic.
* ``sticky`` (``StickyAssignor``, EAGER): a balanced assignment that keeps as many partitions as
  possible with their previous owner, read from the member's user data (Kafka's own format).
* ``cooperative-sticky`` (``CooperativeStickyAssignor``, COOPERATIVE, KIP-429): the same target,
  computed from ``owned_partitions``, except that a partition moving between two members is handed
  to nobody in this round; its owner revokes it and rejoins, and the next rebalance assigns it.

The assignors work on decoded :class:`~coordinator.consumer_protocol.Subscription` objects and
return decoded :class:`~coordinator.consumer_protocol.Assignment` objects; they are pure and
deterministic (the same input gives the same output, whatever the order of the mappings).
Rack-aware placement is not implemented: partitions carry no replica racks here. The package is
part of the pure core: it needs only the standard library and ``coordinator``.

``range_assign(subscriptions, partitions_per_topic)`` is the plain-data form of ``range`` used by
the demo: member id -> topics in, member id -> [(topic, partition)] out.

Modules: ``base`` (the ``Assignor`` interface and shared helpers), ``simple`` (``range``,
``roundrobin``), ``userdata`` (``MemberData`` and Kafka's sticky user-data formats), ``sticky``
(``sticky``, ``cooperative-sticky`` and the balanced target they share). This package is the public API;
``raygroups.assignors`` re-exports it.
"""

from __future__ import annotations

from raygroups.membership.assignors.base import (
    COOPERATIVE,
    DEFAULT_GENERATION,
    EAGER,
    Assignor,
    TopicPartition,
)
from raygroups.membership.assignors.simple import RangeAssignor, RoundRobinAssignor, range_assign
from raygroups.membership.assignors.sticky import CooperativeStickyAssignor, StickyAssignor
from raygroups.membership.assignors.userdata import (
    MemberData,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    encode_cooperative_user_data,
    encode_sticky_user_data,
)

__all__ = [
    "ASSIGNORS",
    "COOPERATIVE",
    "DEFAULT_GENERATION",
    "EAGER",
    "Assignor",
    "CooperativeStickyAssignor",
    "MemberData",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "TopicPartition",
    "decode_cooperative_user_data",
    "decode_sticky_user_data",
    "encode_cooperative_user_data",
    "encode_sticky_user_data",
    "get_assignor",
    "range_assign",
]

ASSIGNORS: dict[str, type[Assignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    StickyAssignor.name: StickyAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
}


def get_assignor(name: str) -> Assignor:
    """A new assignor instance by its Kafka name (``partition.assignment.strategy``)."""
    factory = ASSIGNORS.get(name) if isinstance(name, str) else None
    if factory is None:
        known = ", ".join(sorted(ASSIGNORS))
        raise ValueError(f"unknown assignor {name!r}; known assignors: {known}")
    return factory()
