"""A configuration's numbers with their 95% intervals, as DataFrame columns (issue 30).

Every interval comes from :mod:`raycolloc.results.stats`; this module only moves it in and out of
pandas. A number ``<metric>`` has its bounds in ``<metric>_low`` and ``<metric>_high`` (NaN where
no spread is known: one run without a within-run interval).

- **One run**: the within-run interval (the cell's ``agg_rate_low``/``agg_rate_high``: its jobs'
  epochs timed in windows); a ratio (a gain, energy against the solo) propagates its numerator's and
  its reference's intervals with :func:`~raycolloc.results.stats.ratio_interval`.
- **Several runs**: the runs summarised by the cell config's ``measure.statistic`` (mean, median or
  fastest; results written before that key are summarised by their median, as before) with the
  t-interval of the runs. A ratio's runs are each against the reference run of the same repeat
  (interleaved, so closest in time), so drift shared by both cancels.

No interval crosses what its quantity can be: a rate, a time, a gain or an energy is never below 0,
a change against sequential never below -100% (:func:`at_floor`, applied by each table to its own
columns). Where a bound was held at its floor the interval is no longer symmetric, and
:func:`pm_text` then shows its two sides (``+120%/-100%``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pandas as pd

from raycolloc.results.stats import Interval, bounds, ratio_interval, scaled, summarise

__all__ = [
    "LEGACY_STATISTIC",
    "at_floor",
    "bounds_of",
    "cell_statistic",
    "group_intervals",
    "pm_text",
    "ratio_bounds",
    "scaled_bounds",
]

# Results written before ``measure.statistic`` existed: the median of the runs, as the tables did then.
LEGACY_STATISTIC = "median"


def cell_statistic(config_json: object) -> str:
    """The cell config's ``measure.statistic`` (``LEGACY_STATISTIC`` where it has none)."""
    try:
        config = json.loads(str(config_json)) if isinstance(config_json, str) else {}
    except json.JSONDecodeError:
        return LEGACY_STATISTIC
    measure = config.get("measure") if isinstance(config, dict) else None
    found = measure.get("statistic") if isinstance(measure, dict) else None
    return str(found) if found else LEGACY_STATISTIC


def _num(value: object) -> float:
    """A float (NaN for None, NaN or anything else)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def bounds_of(value: object, low: object = None, high: object = None) -> Interval | None:
    """The interval of one table entry; None where the value itself is missing."""
    v = _num(value)
    if math.isnan(v):
        return None
    return bounds(v, _num(low), _num(high))


def _columns(frame: pd.DataFrame, name: str) -> tuple[pd.Series, pd.Series, pd.Series]:
    nan = pd.Series(math.nan, index=frame.index)
    return frame[name], frame.get(f"{name}_low", nan), frame.get(f"{name}_high", nan)


def ratio_bounds(frame: pd.DataFrame, num: str, den: str) -> tuple[pd.Series, pd.Series]:
    """Row by row, the bounds of ``num / den`` (each with its ``_low``/``_high``), scaled around
    the row's ratio; NaN where either value is missing or neither has a spread."""
    lows, highs = [], []
    for n, n_lo, n_hi, d, d_lo, d_hi in zip(*_columns(frame, num), *_columns(frame, den), strict=True):
        a, b = bounds_of(n, n_lo, n_hi), bounds_of(d, d_lo, d_hi)
        if a is None or b is None or b.value == 0 or not (a.known or b.known):
            lows.append(math.nan)
            highs.append(math.nan)
            continue
        r = ratio_interval(a, b)
        lows.append(r.low)
        highs.append(r.high)
    return pd.Series(lows, index=frame.index), pd.Series(highs, index=frame.index)


def _summary(rows: pd.DataFrame, column: str, lower_is_better: bool) -> Interval | None:
    """One configuration's runs of ``column`` (see the module's doc)."""
    values = [v for v in map(_num, rows[column]) if not math.isnan(v)]
    if not values:
        return None
    statistic = str(rows["statistic"].iloc[0]) if "statistic" in rows else LEGACY_STATISTIC
    within = None
    if len(values) == 1:
        one = rows[rows[column].notna()].iloc[0]
        within = bounds_of(one[column], one.get(f"{column}_low"), one.get(f"{column}_high"))
    return summarise(values, statistic, within, lower_is_better=lower_is_better)


def group_intervals(
    runs: pd.DataFrame, keys: Sequence[str], columns: Sequence[str], lower_is_better: Sequence[str] = ()
) -> pd.DataFrame:
    """Per group of ``keys``, each column's value (the runs' statistic) and ``_low``/``_high``.

    ``runs`` may carry a ``statistic`` column (the cells' ``measure.statistic``) and, per column,
    the one-run bounds ``<column>_low``/``<column>_high``. The frame is indexed by ``keys``.
    """
    records = []
    for key, rows in runs.groupby(list(keys), dropna=False, sort=False):
        record: dict[str, float] = {}
        for column in columns:
            found = _summary(rows, column, column in lower_is_better)
            record[column] = found.value if found else math.nan
            record[f"{column}_low"] = found.low if found and found.known else math.nan
            record[f"{column}_high"] = found.high if found and found.known else math.nan
        records.append((key, record))
    index = pd.MultiIndex.from_tuples([k for k, _ in records], names=list(keys))
    return pd.DataFrame([r for _, r in records], index=index)


def scaled_bounds(value: pd.Series, low: pd.Series, high: pd.Series, like: pd.Series) -> tuple[pd.Series, pd.Series]:
    """The relative half-width of ``value``'s bounds, around ``like`` (NaN where none is known)."""
    lows, highs = [], []
    for v, lo, hi, target in zip(value, low, high, like, strict=True):
        found, t = bounds_of(v, lo, hi), _num(target)
        if found is None or not found.known or math.isnan(t):
            lows.append(math.nan)
            highs.append(math.nan)
            continue
        moved = scaled(found, t)
        lows.append(moved.low)
        highs.append(moved.high)
    return pd.Series(lows, index=value.index), pd.Series(highs, index=value.index)


def at_floor(frame: pd.DataFrame, columns: Sequence[str], floor: float = 0.0) -> pd.DataFrame:
    """``frame`` with each column's ``<column>_low`` held at ``floor`` (what the quantity can be).

    Why hold the bound at the floor rather than compute the interval on a log scale (asymmetric and
    positive by construction): the intervals here are the delta method's and the runs' t-interval,
    symmetric, and every verdict (a gain above 1 beyond the noise) is drawn from them; on a log scale
    every bound would move, although for the narrow intervals a verdict is drawn from (a few percent)
    by less than their rounding. An interval that reaches below the floor is one so wide (two runs:
    t = 12.7) that it can only say "no telling it from nothing", and the bound at the floor says
    exactly that, without claiming a negative gain or rate.
    """
    out = frame.copy()
    for column in columns:
        name = f"{column}_low"
        if name in out:
            out[name] = out[name].where(out[name].isna() | (out[name] >= floor), floor)
    return out


def pm_text(value: object, low: object, high: object) -> str:
    """``±2.4%`` (the 95% interval's half-width relative to the value), or ``+120%/-100%`` where its
    sides differ (a bound held at the quantity's floor); empty where none is known."""
    found = bounds_of(value, low, high)
    if found is None or not found.known or not math.isfinite(found.rel_half_width):
        return ""
    up, down = (found.high - found.value) / abs(found.value), (found.value - found.low) / abs(found.value)
    if not math.isclose(up, down, rel_tol=1e-6, abs_tol=1e-9):
        return f"+{100 * up:.1f}%/-{100 * down:.1f}%"
    return f"±{100 * found.rel_half_width:.1f}%"
