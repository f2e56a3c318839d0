"""FindCoordinator routing: Kafka's ``partitionFor`` (``Utils.abs(groupId.hashCode()) % n``) against Java
``String.hashCode`` values, including strings whose hash is Integer.MIN_VALUE (``Utils.abs`` maps it to 0)."""

import pytest
from raygroups.coordinator.partitioning import java_string_hash, partition_for


@pytest.mark.parametrize(
    ("group_id", "expected_hash", "expected_partition"),
    [
        ("", 0, 0),
        ("groupId", 293428218, 18),
        ("otherGroup", -204443313, 13),
        ("my-group", -1906497762, 12),
        ("test-group", 627841412, 12),
        ("foo", 101574, 24),
        ("console-consumer-12345", 158455506, 6),
        ("grüße", 98768023, 23),
        ("\U0001F600", 1772899, 49),
        ("polygenelubricants", -2147483648, 0),
        ("GydZG_", -2147483648, 0),
        ("DESIGNING WORKHOUSES", -2147483648, 0),
    ],
)
def test_reference_vectors_with_50_partitions(group_id, expected_hash, expected_partition):
    assert java_string_hash(group_id) == expected_hash
    assert partition_for(group_id, 50) == expected_partition


def test_two_partitions():
    assert partition_for("groupId", 2) == 0
    assert partition_for("otherGroup", 2) == 1


@pytest.mark.parametrize("bad", [0, -1])
def test_partition_count_must_be_positive(bad):
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for("g", bad)


def test_wrong_types_are_rejected():
    with pytest.raises(TypeError, match="group_id"):
        partition_for(None, 50)
    with pytest.raises(TypeError, match="num_partitions"):
        partition_for("g", 2.0)
