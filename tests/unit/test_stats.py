"""raygroups.stats.percentile: the chaos report's and the benchmarks' one percentile."""

import pytest

from raygroups.stats import percentile


def test_percentile_interpolates_between_the_closest_ranks():
    assert percentile([5, 1, 4, 2, 3], 0.5) == 3
    assert percentile([1, 2], 0.5) == 1.5
    assert percentile(list(range(1, 101)), 0.99) == pytest.approx(99.01)
    assert percentile([7], 0.99) == 7


def test_percentile_of_nothing_is_none_and_q_is_checked():
    assert percentile([], 0.5) is None
    for q in (0, 1, 1.5, -0.1):
        with pytest.raises(ValueError, match="q must be in"):
            percentile([1, 2], q)
