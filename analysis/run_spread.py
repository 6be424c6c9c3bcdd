"""Repeats: a configuration's runs summarised as a median and a spread (min..max).

A sweep with ``repeats=N`` runs every cell N times, interleaved; each run is its own row in the
result tables (``cells.repeat`` 0..N-1, ``cells.repeat_group`` shared by the runs of one
configuration). Tables aggregate those runs here: the median is the number reported, min..max is
the spread shown beside it, and a ratio whose spread reaches across 1.0 (a gain that may be no gain)
is flagged. With one run there is no spread: it is shown as a single number and never flagged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["SPREAD_SUFFIXES", "crosses", "fmt_spread", "spread_columns"]

SPREAD_SUFFIXES = ("", "_min", "_max")


def spread_columns(grouped: pd.core.groupby.DataFrameGroupBy, columns: Iterable[str]) -> pd.DataFrame:
    """Per group: ``<col>`` (median of the non-null values), ``<col>_min``, ``<col>_max``."""
    parts = []
    for column in columns:
        series = grouped[column]
        parts += [
            series.median().rename(column),
            series.min().rename(f"{column}_min"),
            series.max().rename(f"{column}_max"),
        ]
    return pd.concat(parts, axis=1)


def crosses(low: pd.Series, high: pd.Series, n: pd.Series, at: float = 1.0) -> pd.Series:
    """True where several runs' min..max spread reaches across ``at`` (strictly on both sides or on it)."""
    return (n > 1) & (low <= at) & (high >= at)


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_spread(median: Any, low: Any, high: Any, fmt: Callable[[float], str]) -> str:
    """``1.23`` for one run (or no spread), ``1.23 (0.98–1.40)`` for several; ``-`` when missing."""
    if _is_missing(median):
        return "-"
    if _is_missing(low) or _is_missing(high) or np.isclose(float(low), float(high)):
        return fmt(float(median))
    return f"{fmt(float(median))} ({fmt(float(low))}–{fmt(float(high))})"
