"""Mixed workloads against running their jobs one after the other (paper Fig. 8, Table 2).

A mixed cell's jobs are unlike (a click of DLRM is not an image of ResNet152), so its samples are
never added up: its headline is its total time (first epoch start to last epoch end, warm-up
included) against the *sequential* time, the sum of each job's time alone on the GPU. A sweep runs
the solo cell of every job of a mix (same mode, workload, batch size, epochs, epoch length or time
budget, trainer settings), so that reference is measured, not assumed.

A job's time alone is its solo's time per sample times the samples the job trained in the mix:
the solo's own total when both trained as many samples (fixed ``epoch_samples``), and a fair
equivalent when a time budget (``epoch_time_s``) let the two train different amounts. A solo whose
measured epochs ran a floor (on a GPU; a mix's jobs run none) counts them at the length of the job's
own epochs, at its measured rate, its time and its energy alike
(:func:`raycolloc.results.ratios.as_its_epochs`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.intervals import at_floor, bounds_of, cell_statistic, group_intervals
from analysis.run_spread import crosses, spread_columns
from analysis.tables import CELL_KEY, epoch_span, jobs_with_cells, records
from raycolloc.mode_kinds import mode_rank
from raycolloc.results.ratios import SOLO_MATCH, as_change, as_its_epochs, over_sequential, whole_warmup
from raycolloc.results.stats import Interval, scaled

__all__ = ["mixed_table", "table2"]

_MATCH = ["mode", "gpu_name", "settings", *SOLO_MATCH]  # the trainer's settings: one column here


def _job_peak(frame: pd.DataFrame) -> pd.Series:
    """A job's peak memory: PyTorch's (CUDA) where known, else what the device attributed to it."""
    return frame["peak_mem_allocated_mib"].fillna(frame["peak_device_mem_mib"])


def _solo_refs(cells: pd.DataFrame, joined: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """Per solo configuration (:data:`_MATCH`): medians over its ok runs of time and energy per
    sample (every epoch, warm-up included, as the mix's job trains them: :func:`as_its_epochs`), SM
    activity and memory. A repeat that warmed up less than a whole epoch (``measure.warmup=learned``) is
    left out: its time per sample lacks the warm-up's tail."""
    is_warm = epochs["warmup"].astype(bool)
    job_key = [*CELL_KEY, "job_index"]
    warm = epochs[is_warm].groupby(job_key)["samples"].sum(min_count=1).rename("warmup_samples")
    measured = epochs[~is_warm].groupby(job_key)["samples"].sum(min_count=1).rename("measured_samples")
    joined = joined.merge(pd.concat([warm, measured], axis=1).reset_index(), on=job_key, how="left")
    columns = zip(
        joined["warmup_samples"], joined["epoch_samples"], joined["epoch_time_s"], joined["batch_size"], strict=True
    )
    whole = pd.Series([whole_warmup(*c) for c in columns], index=joined.index, dtype=bool)
    solo = joined[
        joined["mix"].isna()
        & (joined["degree"] == 1)
        & (joined["cell_status"] == "ok")
        & (joined["status"] == "ok")
        & joined["total_s"].notna()
        & (joined["samples"] > 0)
        & whole
    ]
    solo = solo.merge(
        cells[[*CELL_KEY, "energy_j", "total_energy_j", "sm_active_mean", "mem_used_max_mib"]], on=CELL_KEY, how="left"
    )
    solo = solo.assign(
        s_per_sample=_per_sample(solo, "total_s", "measured_s"),
        j_per_sample=_per_sample(solo, "total_energy_j", "energy_j"),  # a solo cell's energy is its one job's
        solo_peak_mib=_job_peak(solo),
    )
    spread = group_intervals(solo, _MATCH, ["s_per_sample", "j_per_sample"]).reset_index()
    spread = spread.drop(columns=["s_per_sample", "j_per_sample"]).rename(columns=lambda c: f"solo_{c}")
    return (
        solo.groupby(_MATCH, dropna=False)
        .agg(
            solo_s_per_sample=("s_per_sample", "median"),
            solo_j_per_sample=("j_per_sample", "median"),
            solo_sm_active_mean=("sm_active_mean", "median"),
            solo_mem_used_max_mib=("mem_used_max_mib", "median"),
            solo_peak_mib=("solo_peak_mib", "median"),
            solo_runs=("s_per_sample", "size"),
        )
        .reset_index()
        .merge(spread.rename(columns={f"solo_{k}": k for k in _MATCH}), on=_MATCH, how="left")
    )


def _per_sample(solo: pd.DataFrame, total: str, measured: str) -> pd.Series:
    """Each solo job's ``total`` per sample over every epoch as a mix's job trains them (its ``measured``
    part over ``measured_samples``: :func:`as_its_epochs`); NaN where unknown."""
    columns = ["samples", "min_epoch_s", "epoch_time_s", "epochs", "epoch_samples", "batch_size"]
    values = []
    for row in records(solo, [*columns, total, measured, "measured_samples"]):
        found = as_its_epochs(row, row[total], row[measured], row["measured_samples"])
        values.append(found[0] / found[1] if found is not None else math.nan)
    return pd.Series(values, index=solo.index, dtype=float)


def mixed_table(cells: pd.DataFrame, jobs: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """Every job of every mixed cell (run) against its solo (paper Fig. 8, Table 2).

    Columns: ``sweep, cell_id, repeat, repeat_group, mix, workload, mode, gpu_name, status`` (the
    cell); ``job_index, job_name, job_workload, job_status, job_samples, job_total_s`` (every epoch,
    warm-up included), ``job_peak_mem_mib``; ``solo_total_s`` (the job's samples at its solo's time
    per sample: median over the solo's ok runs; empty if no solo ran, see ``solo_missing``),
    ``solo_runs`` and ``job_slowdown`` = job_total_s / solo_total_s; ``cell_total_s`` (first epoch
    start to last epoch end of the cell); ``serial_s`` = the sum of the jobs' ``solo_total_s``;
    ``change_vs_sequential_pct`` = 100 x (cell_total_s / serial_s - 1), negative when collocation is
    faster; the cell's ``sm_active_mean`` and ``mem_used_max_mib`` and ``total_energy_j``; the
    solo's ``solo_sm_active_mean``, ``solo_mem_used_max_mib`` and ``serial_energy_j`` (the jobs'
    samples at their solos' energy per sample, summed) and ``energy_vs_sequential`` (below 1:
    collocation spends less energy than one job after the other). One run's bounds
    ``change_vs_sequential_pct_low``/``_high`` and ``energy_vs_sequential_low``/``_high``: the solos'
    spread over their runs (t-interval of time and energy per sample), summed over the jobs in
    quadrature; ``statistic`` (the cell's ``measure.statistic``).
    """
    cols = [
        "sweep",
        "cell_id",
        "repeat",
        "repeat_group",
        "mix",
        "workload",
        "mode",
        "gpu_name",
        "status",
        "job_index",
        "job_name",
        "job_workload",
        "job_status",
        "job_samples",
        "job_total_s",
        "job_peak_mem_mib",
        "solo_total_s",
        "solo_runs",
        "job_slowdown",
        "cell_total_s",
        "serial_s",
        "change_vs_sequential_pct",
        "sm_active_mean",
        "mem_used_max_mib",
        "total_energy_j",
        "solo_sm_active_mean",
        "solo_mem_used_max_mib",
        "serial_energy_j",
        "energy_vs_sequential",
        "solo_missing",
        "change_vs_sequential_pct_low",
        "change_vs_sequential_pct_high",
        "energy_vs_sequential_low",
        "energy_vs_sequential_high",
        "statistic",
    ]
    mixed = cells[cells["mix"].notna()]
    if mixed.empty:
        return pd.DataFrame(columns=cols)
    joined = jobs_with_cells(cells, jobs)
    out = joined[joined["mix"].notna()].merge(_solo_refs(cells, joined, epochs), on=_MATCH, how="left")
    out = out.rename(
        columns={
            "workload": "job_workload",
            "cell_workload": "workload",
            "status": "job_status",
            "cell_status": "status",
            "total_s": "job_total_s",
            "samples": "job_samples",
        }
    )
    out["job_peak_mem_mib"] = _job_peak(out)
    out["solo_total_s"] = out["job_samples"] * out["solo_s_per_sample"]
    out["job_serial_energy_j"] = out["job_samples"] * out["solo_j_per_sample"]
    out["job_slowdown"] = out["job_total_s"] / out["solo_total_s"]
    spans = epoch_span(epochs)[[*CELL_KEY, "span_s"]]
    per_cell = mixed[
        [*CELL_KEY, "repeat_group", "total_s", "sm_active_mean", "mem_used_max_mib", "total_energy_j"]
    ].merge(spans, on=CELL_KEY, how="left")
    per_cell["cell_total_s"] = per_cell["span_s"].fillna(per_cell["total_s"])
    out = out.merge(per_cell.drop(columns=["span_s", "total_s"]), on=CELL_KEY, how="left")
    grouped = out.groupby(CELL_KEY)

    def whole(column: str) -> pd.Series:  # a sum over the cell's jobs only if every job has its part
        return grouped[column].agg(lambda s: s.sum() if s.notna().all() else np.nan)

    missing = (
        out["job_name"]
        .astype(str)
        .where(out["solo_total_s"].isna())
        .groupby([out[k] for k in CELL_KEY])
        .agg(lambda s: ", ".join(s.dropna()))
        .rename("solo_missing")
    )
    sums = pd.concat(
        [whole("solo_total_s").rename("serial_s"), whole("job_serial_energy_j").rename("serial_energy_j"), missing],
        axis=1,
    ).reset_index()
    out = out.merge(sums, on=CELL_KEY, how="left")
    _against_sequential(out)
    out = at_floor(at_floor(out, ["energy_vs_sequential"]), ["change_vs_sequential_pct"], floor=-100.0)
    out = out.merge(cells[CELL_KEY].assign(statistic=cells["config_json"].map(cell_statistic)), on=CELL_KEY)
    return out[cols].sort_values(
        ["mix", "gpu_name", "mode", "sweep", "repeat", "cell_id", "job_index"], ignore_index=True
    )


def _against_sequential(out: pd.DataFrame) -> None:
    """Each ok mixed run against its jobs one after the other, in place: ``change_vs_sequential_pct``
    and ``energy_vs_sequential`` with one run's bounds, by :mod:`raycolloc.results.ratios` (the sweep's
    summary applies the same): its total is one measured value; its sequential one is the jobs'
    solos, each with its runs' interval, summed in quadrature."""
    for per, total, name, change in (
        ("s_per_sample", "cell_total_s", "change_vs_sequential_pct", True),
        ("j_per_sample", "total_energy_j", "energy_vs_sequential", False),
    ):
        found: dict[str, pd.Series] = {}
        for _, rows in out.groupby(CELL_KEY, sort=False):
            ratio = _over_sequential(rows, per, total)
            if ratio is not None and change:
                ratio = as_change(ratio)
            values = (math.nan,) * 3 if ratio is None else (ratio.value, ratio.low, ratio.high)
            if ratio is not None and not ratio.known:
                values = (ratio.value, math.nan, math.nan)
            for suffix, value in zip(("", "_low", "_high"), values, strict=True):
                found.setdefault(suffix, pd.Series(math.nan, index=out.index))[rows.index] = value
        for suffix, series in found.items():
            out[f"{name}{suffix}"] = series.where(out["status"] == "ok")


def _over_sequential(rows: pd.DataFrame, per: str, total: str) -> Interval | None:
    """One mixed run's ``total`` over its jobs' solos (``solo_<per>`` x the job's samples)."""
    whole = bounds_of(rows[total].iloc[0])
    alone = [
        scaled(solo, float(samples) * solo.value)
        for samples, v, lo, hi in zip(
            rows["job_samples"], rows[f"solo_{per}"], rows[f"solo_{per}_low"], rows[f"solo_{per}_high"], strict=True
        )
        if (solo := bounds_of(v, lo, hi)) is not None
    ]
    if whole is None or len(alone) != len(rows):
        return None
    return over_sequential(whole, alone)


def _sequential(rows: pd.DataFrame) -> pd.Series:
    """The sequential run of one mix configuration's jobs: SM activity weighted by each job's time
    alone, memory the largest solo's (one job at a time)."""
    first = rows.drop_duplicates("job_index")
    weight = first["solo_total_s"]
    weighed = weight.notna().all() and weight.sum()
    sm = (first["solo_sm_active_mean"] * weight).sum() / weight.sum() if weighed else np.nan
    return pd.Series(
        {"sequential_sm_active_mean": sm, "sequential_mem_used_max_mib": first["solo_mem_used_max_mib"].max()}
    )


_TABLE2_FIXED = [
    "mix",
    "gpu_name",
    "mode",
    "repeat_group",
    "status",
    "n_runs",
    "total_s",
    "total_s_min",
    "total_s_max",
    "sequential_s",
    "change_vs_sequential_pct",
    "change_vs_sequential_pct_min",
    "change_vs_sequential_pct_max",
    "change_uncertain",
    "sm_active_mean",
    "sequential_sm_active_mean",
    "mem_used_max_gib",
    "sequential_mem_used_max_gib",
    "energy_vs_sequential",
    "energy_vs_sequential_min",
    "energy_vs_sequential_max",
    "total_s_low",
    "total_s_high",
    "change_vs_sequential_pct_low",
    "change_vs_sequential_pct_high",
    "energy_vs_sequential_low",
    "energy_vs_sequential_high",
]


def table2(mixed: pd.DataFrame) -> pd.DataFrame:
    """The study's Table 2: one row per mix, GPU model and mode, its runs summarised.

    Columns: ``mix, gpu_name, mode, repeat_group, status, n_runs``; per job ``<job_name>_s`` (its
    total time collocated: median, ``_min``, ``_max``) and ``<job_name>_alone_s`` (its time alone);
    ``total_s`` (the cell's total time, with spread), ``sequential_s``, ``change_vs_sequential_pct``
    (with spread) and ``change_uncertain`` (the runs' change reaches across 0); ``sm_active_mean``,
    ``mem_used_max_gib`` (collocated, medians) and ``sequential_sm_active_mean``,
    ``sequential_mem_used_max_gib``; ``energy_vs_sequential`` (with spread). Job columns are those of
    the row's mix (other mixes' are empty). ``total_s``, ``change_vs_sequential_pct`` and
    ``energy_vs_sequential`` have ``_low``/``_high`` (95%: the runs' t-interval, or one run's solos'
    spread; see :func:`mixed_table`) and are the runs' ``measure.statistic`` (median before it).
    """
    if mixed.empty:
        return pd.DataFrame(columns=_TABLE2_FIXED)
    key = ["mix", "gpu_name", "mode", "repeat_group"]
    cells = mixed.drop_duplicates(CELL_KEY)
    grouped = cells.groupby(key, dropna=False, sort=False)
    out = pd.concat(
        [
            grouped["status"].agg(lambda s: "ok" if (s == "ok").all() else "/".join(sorted(set(s)))),
            grouped.size().rename("n_runs"),
            spread_columns(grouped, ["cell_total_s", "change_vs_sequential_pct", "energy_vs_sequential"]),
            grouped[["serial_s", "sm_active_mean", "mem_used_max_mib"]].median(),
        ],
        axis=1,
    )
    out = out.join(mixed.groupby(key, dropna=False, sort=False).apply(_sequential, include_groups=False))
    summed = ["cell_total_s", "change_vs_sequential_pct", "energy_vs_sequential"]
    intervals = group_intervals(cells, key, summed, lower_is_better=summed)
    # What each can be: a time and an energy ratio are never below 0, a change never below -100%.
    out = at_floor(out.drop(columns=summed).join(intervals), ["cell_total_s", "energy_vs_sequential"])
    out = at_floor(out, ["change_vs_sequential_pct"], floor=-100.0)
    for (name, _index), rows in mixed.groupby(["job_name", "job_index"], sort=True):
        per = rows.groupby(key, dropna=False, sort=False)
        times = spread_columns(per, ["job_total_s"]).rename(columns=lambda c, n=str(name): c.replace("job_total", n))
        out = out.join(times).join(per["solo_total_s"].median().rename(f"{name}_alone_s"))
    out = out.reset_index().rename(
        columns={
            "cell_total_s": "total_s",
            "cell_total_s_min": "total_s_min",
            "cell_total_s_max": "total_s_max",
            "cell_total_s_low": "total_s_low",
            "cell_total_s_high": "total_s_high",
            "serial_s": "sequential_s",
        }
    )
    n_ok = cells.assign(ok=cells["status"] == "ok").groupby(key, dropna=False)["ok"].sum().rename("n_ok")
    out = out.merge(n_ok.reset_index(), on=key, how="left")
    out["change_uncertain"] = crosses(
        out["change_vs_sequential_pct_min"], out["change_vs_sequential_pct_max"], out["n_ok"], at=0.0
    )
    for column in ("mem_used_max_mib", "sequential_mem_used_max_mib"):
        out[column.replace("_mib", "_gib")] = out.pop(column) / 1024.0
    return (
        out.drop(columns="n_ok")
        .assign(_o=out["mode"].map(mode_rank))
        .sort_values(["mix", "gpu_name", "_o"])
        .drop(columns="_o")
        .reset_index(drop=True)
    )
