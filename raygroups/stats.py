"""The one percentile of the chaos report and the benchmarks."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (``0 < q < 1``, in steps of 0.001), interpolated between the closest
    ranks as numpy's default does (the standard library's inclusive method); None for no values."""
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1), got {q}")
    if not values:
        return None
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 1000) - 1]
