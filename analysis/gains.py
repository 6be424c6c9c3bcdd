"""Throughput gain of collocation: every uniform cell (run) against its solo references, and per
configuration its runs summarised with a 95% interval (:mod:`analysis.intervals`).

A gain divides a cell's aggregate throughput by a degree-1 reference's: ``gain_vs_solo`` the solo
of the same workload, mode and settings, ``gain_vs_best_solo`` the workload's fastest solo
configuration on that GPU model. With several runs, each run is divided by the reference run of the
same repeat (interleaved, so closest in time) and the interval is the runs' t-interval; with one
run, the cell's within-run interval and its reference configuration's interval are propagated. The
rules are :mod:`raycolloc.results.ratios`, applied here row by row and by the sweep's summary alike.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.intervals import at_floor, bounds_of, cell_statistic, group_intervals, scaled_bounds
from analysis.run_spread import crosses, spread_columns
from analysis.tables import CELL_KEY, cell_settings, epoch2_table, is_uniform
from raycolloc.results.ratios import best, configuration, paired_value, run_ratio
from raycolloc.results.stats import CV_UNSTABLE, Interval, bounds, verdict

__all__ = ["GAIN_SPREADS", "INTERVALS", "gain_cells", "gain_table"]

GAIN_SPREADS = ("agg_samples_per_s", "gain_vs_solo", "gain_vs_best_solo", "energy_per_sample_j", "energy_vs_solo")
# Columns of the gain table that carry ``_low``/``_high``; the last three are better when lower.
INTERVALS = (*GAIN_SPREADS, "slowdown_mean")
_LOWER_IS_BETTER = ("energy_per_sample_j", "energy_vs_solo", "slowdown_mean")
_RATIO = ("ratio", "low", "high")


def _key(values: object) -> tuple[object, ...]:
    """A group's key as a tuple, NaN as None (NaN is not equal to itself: a dict would miss it)."""
    return tuple(
        None if isinstance(v, float) and math.isnan(v) else v
        for v in (values if isinstance(values, tuple) else (values,))
    )


def _configurations(ref: pd.DataFrame, keys: list[str], value: str) -> dict[tuple[object, ...], Interval]:
    """Per reference configuration (``keys``), its runs' ``value`` summarised (:func:`configuration`)."""
    out = {}
    for key, rows in ref.groupby(keys, dropna=False, sort=True):
        found = (bounds_of(v, lo, hi) for v, lo, hi in zip(*_bounds_columns(rows, value), strict=True))
        runs = [i for i in found if i is not None]
        whole = configuration(runs, str(rows["statistic"].iloc[0]), lower_is_better=value in _LOWER_IS_BETTER)
        if whole is not None:
            out[_key(key)] = whole
    return out


def _bounds_columns(frame: pd.DataFrame, value: str) -> tuple[pd.Series, pd.Series, pd.Series]:
    return frame[value], frame[f"{value}_low"], frame[f"{value}_high"]


def _against(out: pd.DataFrame, ref: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Per run (a row of ``out``), against its reference configuration (``keys``) in ``ref``: the
    reference value it is divided by (``paired``) and its ``ratio`` with bounds ``low``/``high``, by
    :mod:`raycolloc.results.ratios` (the sweep's summary applies the same). NaN where there is none."""
    wholes = _configurations(ref, keys, value)
    pairs: dict[tuple[object, ...], list[tuple[object, float]]] = {}
    for key, rows in ref.groupby(keys, dropna=False, sort=False):
        pairs[_key(key)] = [(r, float(v)) for r, v in zip(rows["repeat"], rows[value], strict=True) if pd.notna(v)]
    records = []
    for key, repeat, v, lo, hi in zip(
        out[keys].itertuples(index=False, name=None), out["repeat"], *_bounds_columns(out, value), strict=True
    ):
        whole, own = wholes.get(_key(key)), bounds_of(v, lo, hi)
        paired = paired_value(repeat, pairs[_key(key)], whole) if whole is not None else math.nan
        ratio = run_ratio(own, paired, whole) if own is not None and whole is not None else None
        nan = math.nan
        if ratio is None:
            records.append((paired, nan, nan, nan))
        else:
            records.append((paired, ratio.value, ratio.low if ratio.known else nan, ratio.high if ratio.known else nan))
    return pd.DataFrame(records, columns=["paired", "ratio", "low", "high"], index=out.index, dtype=float)


def _group_status(statuses: pd.Series) -> str:
    """``ok`` when every run is ok, else the other statuses (``oom``, ``ok 2/3, oom``)."""
    if (statuses == "ok").all():
        return "ok"
    bad = "/".join(sorted(set(statuses[statuses != "ok"].fillna("error"))))
    n_ok = int((statuses == "ok").sum())
    return f"ok {n_ok}/{len(statuses)}, {bad}" if n_ok else bad


def _own_bounds(out: pd.DataFrame) -> None:
    """A run's own intervals, in place: the aggregate's within-run interval (``agg_rate_low``/
    ``_high`` where the results have them); energy per sample has none (a point)."""
    nan = pd.Series(np.nan, index=out.index)
    out["agg_samples_per_s_low"] = out.get("agg_rate_low", nan)
    out["agg_samples_per_s_high"] = out.get("agg_rate_high", nan)
    out["energy_per_sample_j_low"], out["energy_per_sample_j_high"] = nan, nan
    out["statistic"] = out["config_json"].map(cell_statistic) if "config_json" in out else "median"


def gain_cells(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Every uniform cell (run) with its gains and energy ratio against its solo references.

    Columns: the cell's ``sweep, cell_id, repeat, repeat_group, workload, gpu_name, mode, degree,
    settings, status, n_ok, n_jobs, agg_samples_per_s, energy_per_sample_j, sm_active_mean,
    mem_used_max_mib``; ``solo_samples_per_s`` and ``gain_vs_solo`` (against the degree-1 cell of
    the same workload, mode and settings), ``best_solo_samples_per_s``, ``best_solo`` (its mode and
    settings) and ``gain_vs_best_solo`` (against the fastest degree-1 configuration of the workload on
    that GPU model, by its runs' ``measure.statistic``); ``energy_vs_solo`` = J/sample / the same-settings
    solo's J/sample (below 1: collocation spends less energy per sample). A reference with several runs
    is the run of the same repeat index, else the reference configuration's value (its runs'
    ``measure.statistic``): :mod:`raycolloc.results.ratios`, as the sweep's summary. Failed cells get no
    ratios. ``statistic`` (the cell config's
    ``measure.statistic``) and each run's one-run bounds ``<metric>_low``/``_high`` of
    :data:`GAIN_SPREADS` (see the module's doc).
    """
    cols = [
        "sweep",
        "cell_id",
        "repeat",
        "repeat_group",
        "workload",
        "gpu_name",
        "mode",
        "degree",
        "settings",
        "status",
        "n_ok",
        "n_jobs",
        "agg_samples_per_s",
        "energy_per_sample_j",
        "sm_active_mean",
        "mem_used_max_mib",
        "solo_samples_per_s",
        "gain_vs_solo",
        "best_solo_samples_per_s",
        "best_solo",
        "gain_vs_best_solo",
        "energy_vs_solo",
        "statistic",
        *(f"{c}{s}" for c in GAIN_SPREADS for s in ("_low", "_high")),
        *(c for c in ("rate_cv", "unstable") if c in cells),
    ]
    uniform = cells[is_uniform(cells)]
    if uniform.empty:
        return pd.DataFrame(columns=cols)
    out = uniform.merge(cell_settings(jobs), on=CELL_KEY, how="left")
    _own_bounds(out)
    ok = out["status"] == "ok"
    solo = out[(out["degree"] == 1) & ok & out["agg_samples_per_s"].notna()]
    keys = ["workload", "gpu_name", "mode", "settings"]
    rate, energy = _against(out, solo, keys, "agg_samples_per_s"), _against(out, solo, keys, "energy_per_sample_j")
    out["solo_samples_per_s"] = rate["paired"]
    out["gain_vs_solo"], out["gain_vs_solo_low"], out["gain_vs_solo_high"] = (rate[c].where(ok) for c in _RATIO)
    out["energy_vs_solo"], out["energy_vs_solo_low"], out["energy_vs_solo_high"] = (energy[c].where(ok) for c in _RATIO)
    # The best solo of each workload and GPU model: the configuration of the highest rate.
    per: dict[tuple[object, ...], dict[tuple[object, ...], Interval]] = {}
    for key, whole in _configurations(solo, keys, "agg_samples_per_s").items():
        per.setdefault(key[:2], {})[key] = whole
    named = {where: f"{top[2]} {top[3]}" for where, rates in per.items() if (top := best(rates)) is not None}
    out["best_solo"] = [named.get(_key(k)) for k in out[["workload", "gpu_name"]].itertuples(index=False, name=None)]
    best_runs = solo.assign(best_solo=solo["mode"] + " " + solo["settings"])
    top_rate = _against(out, best_runs, ["workload", "gpu_name", "best_solo"], "agg_samples_per_s")
    out["best_solo_samples_per_s"] = top_rate["paired"]
    out["gain_vs_best_solo"], out["gain_vs_best_solo_low"], out["gain_vs_best_solo_high"] = (
        top_rate[c].where(ok) for c in _RATIO
    )
    return out[cols]


def gain_table(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Throughput gain of collocation per configuration (uniform cells only), its runs summarised.

    One row per configuration (its repeats together). Columns: ``workload, gpu_name, mode, degree,
    settings``; ``sweep, cell_id`` (its first run), ``status`` (ok when every run is ok), ``n_runs``,
    ``n_ok`` (ok runs); for each of ``agg_samples_per_s`` (sum of the jobs' epoch-2 samples/s),
    ``gain_vs_solo``, ``gain_vs_best_solo``, ``energy_per_sample_j`` and ``energy_vs_solo`` (see
    :func:`gain_cells`) the median over runs and ``_min``/``_max``; ``solo_samples_per_s``,
    ``best_solo_samples_per_s``, ``best_solo``; ``gain_uncertain``: a collocated configuration whose
    runs' gain against its solo reaches across 1.0 (it may gain nothing); ``slowdown_mean`` (median
    over runs of the jobs' mean epoch-2 slowdown against their solo) and ``slowdown_max`` (worst job
    of any run); ``epoch2_s`` (median of the runs' median job epoch-2 time; ``_min``/``_max`` over
    every job of every run; ``_low``/``_high`` its 95% interval, :func:`_epoch2_bounds`); medians
    over runs of ``sm_active_mean``, ``sm_active_max``, ``mem_used_max_mib``, ``power_mean_w`` and
    ``energy_j``.

    Intervals: each of :data:`INTERVALS` has ``_low``/``_high`` (its value is then the runs'
    ``measure.statistic``: median for results written before that key); ``gain_verdict``: whether a
    collocated configuration's gain against its solo is above 1 beyond the noise (``yes``), below it
    (``no``) or ``inconclusive``; ``rate_cv`` (the runs' CV of the aggregate, or a single run's
    largest job window CV) and ``unstable`` (pyperf's rule: CV >= 10%, or a run flagged unstable).
    No ``_low`` is below 0 (:func:`analysis.intervals.at_floor`).
    """
    spreads = [f"{c}{s}" for c in GAIN_SPREADS for s in ("", "_min", "_max")]
    cols = [
        "workload",
        "gpu_name",
        "mode",
        "degree",
        "settings",
        "sweep",
        "cell_id",
        "status",
        "n_runs",
        "n_ok",
        *spreads,
        "solo_samples_per_s",
        "best_solo_samples_per_s",
        "best_solo",
        "gain_uncertain",
        "slowdown_mean",
        "slowdown_max",
        "epoch2_s",
        "epoch2_s_min",
        "epoch2_s_max",
        "epoch2_s_low",
        "epoch2_s_high",
        "sm_active_mean",
        "sm_active_max",
        "mem_used_max_mib",
        "power_mean_w",
        "energy_j",
        *(f"{c}{s}" for c in INTERVALS for s in ("_low", "_high")),
        "gain_verdict",
        "rate_cv",
        "unstable",
    ]
    runs = gain_cells(cells, jobs)
    if runs.empty:
        return pd.DataFrame(columns=cols)
    slow = _slowdowns(epoch2_table(cells, jobs))
    per_job = epoch2_table(cells, jobs)
    per_job = per_job.assign(_e2_rel=(per_job["epoch2_s_high"] - per_job["epoch2_s_low"]) / 2 / per_job["epoch2_s"])
    e2 = (
        per_job.groupby(CELL_KEY)
        .agg(epoch2_s=("epoch2_s", "median"), epoch2_s_lo=("epoch2_s", "min"), epoch2_s_hi=("epoch2_s", "max"))
        .join(per_job.groupby(CELL_KEY)["_e2_rel"].max())
        .reset_index()
    )
    extra = cells[[*CELL_KEY, "sm_active_max", "power_mean_w", "energy_j"]]
    runs = (
        runs.merge(slow, on=CELL_KEY, how="left")
        .merge(e2, on=CELL_KEY, how="left")
        .merge(extra, on=CELL_KEY, how="left")
        .sort_values(["repeat", "sweep"])
    )
    keys = ["repeat_group", "workload", "gpu_name", "mode", "degree", "settings"]
    grouped = runs.groupby(keys, dropna=False, sort=False)
    out = pd.concat(
        [
            grouped[["sweep", "cell_id", "best_solo"]].first(),
            grouped["status"].agg(_group_status),
            grouped.size().rename("n_runs"),
            grouped["status"].agg(lambda s: int((s == "ok").sum())).rename("n_ok"),
            spread_columns(grouped, GAIN_SPREADS),
            grouped[
                [
                    "solo_samples_per_s",
                    "best_solo_samples_per_s",
                    "slowdown_mean",
                    "sm_active_mean",
                    "sm_active_max",
                    "mem_used_max_mib",
                    "power_mean_w",
                    "energy_j",
                    "epoch2_s",
                ]
            ].median(),
            grouped["slowdown_max"].max(),
            grouped["epoch2_s_lo"].min().rename("epoch2_s_min"),
            grouped["epoch2_s_hi"].max().rename("epoch2_s_max"),
            _stability(grouped),
        ],
        axis=1,
    )
    intervals = group_intervals(runs, keys, INTERVALS, lower_is_better=_LOWER_IS_BETTER)
    out = out.drop(columns=list(INTERVALS)).join(intervals).reset_index()
    out["epoch2_s_low"], out["epoch2_s_high"] = _epoch2_bounds(out, runs, keys)
    out["gain_uncertain"] = (out["degree"] > 1) & crosses(out["gain_vs_solo_min"], out["gain_vs_solo_max"], out["n_ok"])
    out["gain_verdict"] = [
        verdict(bounds(g, lo, hi), 1.0) if d > 1 and pd.notna(g) else None
        for g, lo, hi, d in zip(
            out["gain_vs_solo"], out["gain_vs_solo_low"], out["gain_vs_solo_high"], out["degree"], strict=True
        )
    ]
    # Rates, gains, energies and slowdowns are never below 0 (the bounds the verdicts above were drawn from).
    out = at_floor(out, [*INTERVALS, "epoch2_s"])
    return out[cols].sort_values(["workload", "gpu_name", "mode", "degree", "settings", "sweep"], ignore_index=True)


def _epoch2_bounds(out: pd.DataFrame, runs: pd.DataFrame, keys: list[str]) -> tuple[pd.Series, pd.Series]:
    """Each configuration's epoch-2 time's 95% interval, around the median shown: the runs' t-interval,
    or one run's own (the widest relative interval of its jobs, each timed in windows)."""
    rel = runs["_e2_rel"]
    one = runs.assign(epoch2_s_low=runs["epoch2_s"] * (1 - rel), epoch2_s_high=runs["epoch2_s"] * (1 + rel))
    found = group_intervals(one, keys, ["epoch2_s"], lower_is_better=["epoch2_s"]).reset_index()
    at = out[keys].merge(found, on=keys, how="left").set_axis(out.index)
    return scaled_bounds(at["epoch2_s"], at["epoch2_s_low"], at["epoch2_s_high"], out["epoch2_s"])


def _slowdowns(epoch2: pd.DataFrame) -> pd.DataFrame:
    """Per cell: its jobs' mean slowdown with bounds (the jobs' half-widths in quadrature over their
    count: a mean of independent jobs) and the worst job's."""
    hw = (epoch2["slowdown_high"] - epoch2["slowdown_low"]) / 2
    frame = epoch2.assign(_hw2=hw**2)
    grouped = frame.groupby(CELL_KEY)
    out = grouped["slowdown"].agg(slowdown_mean="mean", slowdown_max="max")
    half = np.sqrt(grouped["_hw2"].sum(min_count=1)) / grouped["slowdown"].count()
    out["slowdown_mean_low"] = out["slowdown_mean"] - half
    out["slowdown_mean_high"] = out["slowdown_mean"] + half
    return out.reset_index()


def _stability(grouped: pd.core.groupby.DataFrameGroupBy) -> pd.DataFrame:
    """Per configuration: ``rate_cv`` (between runs where several ran, else the run's own, of its
    windows) and ``unstable`` (pyperf's rule on that same CV, so the flag and the CV shown beside it
    agree: a run's jittery windows do not flag runs that agree with each other)."""

    def one(rows: pd.DataFrame) -> pd.Series:
        rates = rows["agg_samples_per_s"].dropna()
        if len(rates) > 1 and rates.mean():
            value = float(rates.std() / rates.mean())
            return pd.Series({"rate_cv": value, "unstable": value >= CV_UNSTABLE})
        own = rows["rate_cv"].dropna() if "rate_cv" in rows else pd.Series(dtype=float)
        value = float(own.max()) if len(own) else np.nan
        flagged = bool(rows["unstable"].fillna(False).astype(bool).any()) if "unstable" in rows else False
        return pd.Series({"rate_cv": value, "unstable": flagged or bool(pd.notna(value) and value >= CV_UNSTABLE)})

    return grouped.apply(one, include_groups=False)
