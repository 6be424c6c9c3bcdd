"""Throughput gain of collocation: every uniform cell (run) against its solo references, and per
configuration its runs summarised with a 95% interval (:mod:`analysis.intervals`).

A gain divides a cell's aggregate throughput by a degree-1 reference's: ``gain_vs_solo`` the solo
of the same workload, mode and settings, ``gain_vs_best_solo`` the workload's fastest solo
configuration on that GPU model. With several runs, each run is divided by the reference run of the
same repeat (interleaved, so closest in time) and the interval is the runs' t-interval; with one
run, the cell's within-run interval and its reference configuration's interval are propagated.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.intervals import at_floor, cell_statistic, group_intervals, ratio_bounds, reference_bounds, scaled_bounds
from analysis.stats import crosses, spread_columns
from analysis.tables import CELL_KEY, cell_settings, epoch2_table, is_uniform
from raycolloc.results.stats import CV_UNSTABLE, bounds, verdict

__all__ = ["GAIN_SPREADS", "INTERVALS", "gain_cells", "gain_table"]

GAIN_SPREADS = ("agg_samples_per_s", "gain_vs_solo", "gain_vs_best_solo", "energy_per_sample_j", "energy_vs_solo")
# Columns of the gain table that carry ``_low``/``_high``; the last three are better when lower.
INTERVALS = (*GAIN_SPREADS, "slowdown_mean")
_LOWER_IS_BETTER = ("energy_per_sample_j", "energy_vs_solo", "slowdown_mean")


def _paired(cells: pd.DataFrame, ref: pd.DataFrame, keys: list[str], value: str) -> pd.Series:
    """Per cell, its reference's ``value``: the run of the same repeat index where the reference has
    one (repeats are interleaved, so runs of one index ran closest in time), else the median of the
    reference's runs."""
    per_repeat = ref.groupby([*keys, "repeat"], dropna=False)[value].median().rename("_by_repeat").reset_index()
    median = ref.groupby(keys, dropna=False)[value].median().rename("_median").reset_index()
    out = (
        cells[[*keys, "repeat"]].merge(per_repeat, on=[*keys, "repeat"], how="left").merge(median, on=keys, how="left")
    )
    return pd.Series(out["_by_repeat"].fillna(out["_median"]).to_numpy(), index=cells.index)


def _group_status(statuses: pd.Series) -> str:
    """``ok`` when every run is ok, else the other statuses (``oom``, ``ok 2/3, oom``)."""
    if (statuses == "ok").all():
        return "ok"
    bad = "/".join(sorted(set(statuses[statuses != "ok"].fillna("error"))))
    n_ok = int((statuses == "ok").sum())
    return f"ok {n_ok}/{len(statuses)}, {bad}" if n_ok else bad


def _ratio_to_reference(
    out: pd.DataFrame, ref: pd.DataFrame, keys: list[str], value: str, ratio: str
) -> tuple[pd.Series, pd.Series]:
    """One run's bounds of ``ratio`` (its ``value`` over its reference's): the run's own interval
    and the reference configuration's, propagated and scaled around the ratio shown."""
    frame = pd.concat([out[[value, f"{value}_low", f"{value}_high"]], reference_bounds(out, ref, keys, value)], axis=1)
    low, high = ratio_bounds(frame, value, "_ref")
    return scaled_bounds(frame[value] / frame["_ref"], low, high, out[ratio])


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
    that GPU model); ``energy_vs_solo`` = J/sample / the same-settings solo's J/sample (below 1:
    collocation spends less energy per sample). A reference with several runs is the run of the same
    repeat index, else their median. Failed cells get no ratios. ``statistic`` (the cell config's
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
    out["solo_samples_per_s"] = _paired(out, solo, keys, "agg_samples_per_s")
    out["gain_vs_solo"] = (out["agg_samples_per_s"] / out["solo_samples_per_s"]).where(ok)
    out["energy_vs_solo"] = (out["energy_per_sample_j"] / _paired(out, solo, keys, "energy_per_sample_j")).where(ok)
    out["gain_vs_solo_low"], out["gain_vs_solo_high"] = _ratio_to_reference(
        out, solo, keys, "agg_samples_per_s", "gain_vs_solo"
    )
    out["energy_vs_solo_low"], out["energy_vs_solo_high"] = _ratio_to_reference(
        out, solo, keys, "energy_per_sample_j", "energy_vs_solo"
    )
    if solo.empty:
        out["best_solo_samples_per_s"], out["best_solo"], out["gain_vs_best_solo"] = np.nan, None, np.nan
        out["gain_vs_best_solo_low"], out["gain_vs_best_solo_high"] = np.nan, np.nan
        return out[cols]
    per_config = solo.groupby(keys, dropna=False)["agg_samples_per_s"].median().reset_index()
    best = per_config.loc[per_config.groupby(["workload", "gpu_name"], dropna=False)["agg_samples_per_s"].idxmax()]
    best = best.assign(best_solo=best["mode"] + " " + best["settings"])[["workload", "gpu_name", "best_solo"]]
    out = out.merge(best, on=["workload", "gpu_name"], how="left")
    best_runs = solo.assign(best_solo=solo["mode"] + " " + solo["settings"])
    out["best_solo_samples_per_s"] = _paired(out, best_runs, ["workload", "gpu_name", "best_solo"], "agg_samples_per_s")
    out["gain_vs_best_solo"] = (out["agg_samples_per_s"] / out["best_solo_samples_per_s"]).where(out["status"] == "ok")
    out["gain_vs_best_solo_low"], out["gain_vs_best_solo_high"] = _ratio_to_reference(
        out, best_runs, ["workload", "gpu_name", "best_solo"], "agg_samples_per_s", "gain_vs_best_solo"
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
