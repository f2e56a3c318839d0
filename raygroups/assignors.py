"""Client-side partition assignors (``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``).

The implementation lives in the pure core, :mod:`coordinator.assignors` (see its docstring for what each
assignor guarantees); this module re-exports its public API unchanged, so ``from raygroups.assignors
import X`` and ``raygroups.assignors.get_assignor(name)`` name the very same objects.
"""

from __future__ import annotations

from coordinator.assignors import (
    ASSIGNORS,
    COOPERATIVE,
    DEFAULT_GENERATION,
    EAGER,
    Assignor,
    CooperativeStickyAssignor,
    MemberData,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    TopicPartition,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    get_assignor,
    range_assign,
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
