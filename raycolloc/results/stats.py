"""How sure a number is: 95% intervals for rates, sums and ratios, the pyperf stability rule, and
verdicts that respect their error bars (issue 30).

Pure Python (no numpy, no pandas): the training process, the driver's summary and the analysis all
use it. Every interval is a :class:`Interval`: a value with a low and a high bound, how many
observations formed it, and how (``method``), so a table can say where its error bar came from.

- **Within one run** a job's measured epoch is timed in windows of equal steps (batch means): the
  epoch's rate is its samples over its seconds, and the interval is the t-interval of the windows'
  rates (the windows are long enough, several seconds on a GPU, for their means to be near
  independent).
- **Across repeats** the interval is the t-interval of the repeats' rates; it contains the
  within-run noise, so with two or more repeats it replaces the within-run one.
- **A sum** (a cell's aggregate over its jobs) adds the half-widths in quadrature (independent jobs).
- **A ratio** (a gain, a slowdown, energy per sample) propagates relative half-widths in quadrature
  (the delta method; fine while each is under ~10%, which is the regime a verdict is drawn in).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CV_UNSTABLE",
    "STATISTICS",
    "Interval",
    "Verdict",
    "bounds",
    "cv",
    "fmt_pm",
    "is_unstable",
    "mean_interval",
    "overlap",
    "point",
    "ratio_interval",
    "scaled",
    "sum_interval",
    "summarise",
    "t_quantile",
    "verdict",
    "window_interval",
]

# pyperf's rule: a standard deviation of 10% of the mean or more makes a benchmark unstable.
CV_UNSTABLE = 0.10

Verdict = Literal["yes", "no", "inconclusive"]

# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom 1..30; the normal beyond.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (a 95% two-sided interval)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.960


@dataclass(frozen=True)
class Interval:
    """A value with its 95% interval; ``n`` observations formed it, by ``method``
    (``windows``, ``repeats``, ``sum``, ``ratio``, ``point``: one observation, no spread known)."""

    value: float
    low: float
    high: float
    n: int
    method: str

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def rel_half_width(self) -> float:
        """Half-width over the value (0.03 = ±3%); infinite for a value of 0."""
        return self.half_width / abs(self.value) if self.value else math.inf

    @property
    def known(self) -> bool:
        """False for a single observation: no spread to speak of."""
        return self.method != "point"

    def __str__(self) -> str:
        if not self.known:
            return f"{self.value:.4g}"
        return f"{self.value:.4g} ±{100 * self.rel_half_width:.1f}%"


def point(value: float) -> Interval:
    """One observation: no interval (``known`` is False)."""
    return Interval(value, value, value, 1, "point")


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation (sample standard deviation over the mean); 0 for fewer than two."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean else math.inf


def is_unstable(values: Sequence[float], threshold: float = CV_UNSTABLE) -> bool:
    """pyperf's rule: the spread is ``threshold`` (10%) of the mean or more."""
    return cv(values) >= threshold


def mean_interval(values: Sequence[float], method: str = "repeats") -> Interval:
    """The mean of ``values`` with its t-interval (a point for one value)."""
    if not values:
        raise ValueError("no values to form an interval from")
    mean = statistics.fmean(values)
    if len(values) == 1:
        return point(mean)
    hw = t_quantile(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - hw, mean + hw, len(values), method)


def window_interval(samples: Sequence[float], seconds: Sequence[float]) -> Interval:
    """A rate timed in windows (batch means): the value is all samples over all seconds (the
    epoch's own rate); the half-width is the t-interval's of the windows' rates."""
    if len(samples) != len(seconds) or not samples:
        raise ValueError("samples and seconds must be equally long and not empty")
    rate = sum(samples) / sum(seconds)
    if len(samples) == 1:
        return point(rate)
    rates = [s / t for s, t in zip(samples, seconds, strict=True)]
    hw = mean_interval(rates).half_width
    return Interval(rate, rate - hw, rate + hw, len(samples), "windows")


def sum_interval(parts: Sequence[Interval]) -> Interval:
    """The sum of independent values; half-widths add in quadrature. A point if no part is known."""
    value = sum(p.value for p in parts)
    known = [p for p in parts if p.known]
    if not known:
        return point(value)
    hw = math.sqrt(sum(p.half_width**2 for p in known))
    return Interval(value, value - hw, value + hw, min(p.n for p in known), "sum")


def ratio_interval(num: Interval, den: Interval) -> Interval:
    """``num / den`` with relative half-widths added in quadrature (the delta method)."""
    if den.value == 0:
        raise ZeroDivisionError("ratio with a zero denominator")
    value = num.value / den.value
    known = [i for i in (num, den) if i.known]
    if not known:
        return point(value)
    rel = math.sqrt(sum(i.rel_half_width**2 for i in known))
    hw = abs(value) * rel
    return Interval(value, value - hw, value + hw, min(i.n for i in known), "ratio")


def verdict(interval: Interval, threshold: float, *, above_is_yes: bool = True) -> Verdict:
    """Whether ``interval`` lies above ``threshold`` (``yes``), below it (``no``) or crosses it
    (``inconclusive``); flipped with ``above_is_yes=False``. A point compares its value alone."""
    if interval.low > threshold or (not interval.known and interval.value > threshold):
        above: bool | None = True
    elif interval.high < threshold or (not interval.known and interval.value < threshold):
        above = False
    else:
        above = None
    if above is None:
        return "inconclusive"
    return "yes" if above == above_is_yes else "no"


# How a configuration's runs become one number (``measure.statistic``): the mean (default), the
# median, or the fastest run (pyperf's and timeit's choice for CPU-bound code: noise only slows).
STATISTICS = ("mean", "median", "fastest")


def _statistic_value(values: Sequence[float], statistic: str, lower_is_better: bool) -> float:
    if statistic == "mean":
        return statistics.fmean(values)
    if statistic == "median":
        return statistics.median(values)
    if statistic == "fastest":
        return min(values) if lower_is_better else max(values)
    raise ValueError(f"measure.statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")


def summarise(
    values: Sequence[float],
    statistic: str = "mean",
    within: Interval | None = None,
    *,
    lower_is_better: bool = False,
) -> Interval:
    """A configuration's runs as one number with its 95% interval.

    Two or more runs: the ``statistic`` of the runs (``fastest`` is the largest value, or the
    smallest with ``lower_is_better``: a time, joules per sample) with the half-width of the runs'
    t-interval (the between-run spread, which contains the within-run noise). One run: ``within``
    (its within-run interval) where known, else a point.
    """
    if not values:
        raise ValueError("no values to summarise")
    if len(values) == 1:
        return within if within is not None and within.known else point(values[0])
    value = _statistic_value(values, statistic, lower_is_better)
    hw = mean_interval(values).half_width
    return Interval(value, value - hw, value + hw, len(values), "repeats")


def bounds(value: float, low: float | None, high: float | None, n: int = 1, method: str = "windows") -> Interval:
    """An :class:`Interval` from a value and optional bounds (a point where either is missing or NaN)."""
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return point(value)
    return Interval(value, low, high, n, method)


def scaled(interval: Interval, value: float) -> Interval:
    """``interval``'s relative half-width around another ``value`` (the same uncertainty, reported
    around the number a table shows)."""
    if not interval.known:
        return point(value)
    hw = abs(value) * interval.rel_half_width
    return Interval(value, value - hw, value + hw, interval.n, interval.method)


def overlap(a: Interval, b: Interval) -> bool:
    """Whether two intervals share a value (points compare their values as degenerate intervals)."""
    return a.low <= b.high and b.low <= a.high


def fmt_pm(interval: Interval, spec: str = ".4g", unit: str = "") -> str:
    """``5.31x ±2.4%`` (with ``unit="x"``); the bare value for a point."""
    text = f"{format(interval.value, spec)}{unit}"
    if not interval.known:
        return text
    return f"{text} ±{100 * interval.rel_half_width:.1f}%"
