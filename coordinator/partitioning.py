"""FindCoordinator routing: Kafka's ``partitionFor`` (``GroupCoordinatorService.partitionFor``:
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``)."""

from __future__ import annotations

from raygroups.coordinator.checks import is_int

_INT_MIN = -(2**31)


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode``: polynomial 31 over UTF-16 code units, 32-bit two's complement."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def abs_kafka(n: int) -> int:
    """Kafka's ``Utils.abs``: ``abs(Integer.MIN_VALUE)`` is 0, not a negative number."""
    return 0 if n == _INT_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition that owns ``group_id``."""
    if not isinstance(group_id, str):
        raise TypeError(f"group_id must be a str, got {type(group_id).__name__}")
    if not is_int(num_partitions):
        raise TypeError(f"num_partitions must be an int, got {type(num_partitions).__name__}")
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return abs_kafka(java_string_hash(group_id)) % num_partitions
