"""CloudWatch's statistics over the raw values of one period.

    statistic("Sum", [1, 2, 3])     # 6.0
    statistic("p99", values)        # nearest rank: the smallest value with 99 % of values at or below it

A period with no value has no datapoint (None), whatever the statistic: that is CloudWatch's
"missing data", which alarms treat by their TreatMissingData.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

__all__ = ["StatisticError", "check_statistic", "statistic"]

_PERCENTILE = re.compile(r"^p(\d{1,2}(?:\.\d+)?|100)$")
SIMPLE = ("SampleCount", "Sum", "Average", "Minimum", "Maximum")


class StatisticError(ValueError):
    """A statistic CloudWatch would not accept (e.g. "Mean", "p101")."""


def check_statistic(name: str) -> str:
    """`name` if CloudWatch accepts it (a simple statistic or pNN / pNN.N), else StatisticError."""
    if name in SIMPLE or _PERCENTILE.match(name):
        return name
    raise _refused(name)


def statistic(name: str, values: Sequence[float]) -> float | None:
    """The statistic of `values` (one period's raw values); None when there are none."""
    if not values:
        return None
    if name == "Sum":
        return float(math.fsum(values))
    if name == "Average":
        return math.fsum(values) / len(values)
    if name == "Minimum":
        return float(min(values))
    if name == "Maximum":
        return float(max(values))
    if name == "SampleCount":
        return float(len(values))
    match = _PERCENTILE.match(name)
    if match is None:
        raise _refused(name)
    rank = max(1, math.ceil(float(match.group(1)) / 100 * len(values)))
    return float(sorted(values)[rank - 1])


def _refused(name: str) -> StatisticError:
    return StatisticError(f"statistic {name!r}: expected one of {', '.join(SIMPLE)} or pNN (e.g. p99, p99.9)")
