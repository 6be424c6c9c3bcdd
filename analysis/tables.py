"""The study's tables, as pure functions from the loaded DataFrames to a DataFrame.

Conventions shared by every table:

* A cell is identified by ``(sweep, cell_id)``; uniform cells have ``mix`` null, mixed cells
  name their mix and their ``workload`` is ``a+b+...``.
* A *solo* reference is a degree-1 uniform cell with status ``ok`` of the same workload, mode
  and GPU model (``gpu_name``), and for job-level references also the same trainer settings
  (``settings``: compile, amp, channels_last). Several matching solo cells (several sweeps,
  reruns) are averaged.
* A number's 95% interval is in ``<metric>_low``/``<metric>_high`` (:mod:`analysis.intervals`).
* Failed cells (status oom, error, partial) keep their row with their ``status``; ratios that
  would compare a failed cell are left empty (NaN).
"""

from __future__ import annotations

import pandas as pd

from analysis.intervals import at_floor, group_intervals, ratio_bounds, scaled_bounds
from raycolloc.results.ratios import epoch_time, sample_time

__all__ = [
    "CELL_KEY",
    "baseline_table",
    "cell_metrics_table",
    "cell_settings",
    "epoch2_table",
    "epoch_span",
    "is_uniform",
    "job_settings",
    "jobs_with_cells",
]

CELL_KEY = ["sweep", "cell_id"]
_CELL_COLS = ["sweep", "cell_id", "repeat", "workload", "mix", "mode", "degree", "gpu_name", "status"]


def job_settings(jobs: pd.DataFrame) -> pd.Series:
    """The trainer settings that distinguish configurations of one workload, as one string per job."""
    if jobs.empty:
        return pd.Series([], index=jobs.index, dtype=object)
    return (
        "compile="
        + jobs["compile"].fillna("off").astype(str)
        + " amp="
        + jobs["amp"].fillna("off").astype(str)
        + " channels_last="
        + jobs["channels_last"].fillna(False).astype(bool).astype(str)
    )


def cell_settings(jobs: pd.DataFrame) -> pd.DataFrame:
    """Per cell: its jobs' distinct settings joined by `` | `` (one value for uniform cells)."""
    if jobs.empty:
        return pd.DataFrame(columns=[*CELL_KEY, "settings"])
    frame = jobs[CELL_KEY].assign(settings=job_settings(jobs))
    return frame.groupby(CELL_KEY, sort=False)["settings"].agg(lambda s: " | ".join(dict.fromkeys(s))).reset_index()


def jobs_with_cells(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Jobs joined to their cell's mode, degree, mix, GPU and status (``cell_status``)."""
    cell_part = cells[_CELL_COLS].rename(columns={"workload": "cell_workload", "status": "cell_status"})
    out = jobs.merge(cell_part, on=CELL_KEY, how="inner")
    out["settings"] = job_settings(out)
    return out


def is_uniform(frame: pd.DataFrame) -> pd.Series:
    """True for the rows of uniform cells (no mix)."""
    return frame["mix"].isna()


def _ok_solo_jobs(joined: pd.DataFrame) -> pd.DataFrame:
    """Jobs of ok degree-1 uniform cells that finished ok."""
    mask = is_uniform(joined) & (joined["degree"] == 1) & (joined["cell_status"] == "ok") & (joined["status"] == "ok")
    return joined[mask]


def records(frame: pd.DataFrame, columns: list[str]) -> list[dict[str, object]]:
    """``columns`` of ``frame`` (missing ones empty) as a dict a row, None where unknown: the rows
    :mod:`raycolloc.results.ratios` reads."""
    present = frame.reindex(columns=columns)
    return present.astype(object).where(present.notna(), None).to_dict("records")


def _timing_rows(jobs: pd.DataFrame) -> list[dict[str, object]]:
    """The jobs' columns a time is made of (:mod:`raycolloc.results.ratios`)."""
    return records(jobs, ["epoch_samples", "epoch2_samples_per_s", "epoch2_s", "batch_size"])


def epoch2_table(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Epoch-2 time of every job and its slowdown against its solo run (paper Fig. 2).

    Columns: the cell's ``sweep, cell_id, workload, mix, mode, degree, gpu_name, cell_status``;
    the job's ``job_index, job_name, job_workload, status, settings, epoch2_s`` (its epoch's samples at
    its measured rate, :func:`raycolloc.results.ratios.epoch_time`: a measured epoch at its floor or
    its time budget lasts that long for every job; with ``epoch2_s_low``/``_high``: its rate's within-run
    interval), ``epoch2_samples_per_s``;
    ``solo_epoch2_s`` (mean epoch-2 time of the same workload alone on the GPU in this mode with the
    same settings) and ``slowdown``: the job's seconds per sample over the solo's mean
    (:func:`raycolloc.results.ratios.sample_time`; epoch times of other ``epoch_samples`` do not compare), with
    ``slowdown_low``/``slowdown_high``: the job's within-run interval (``epoch2_rate_low``/``_high``,
    where the results have it) against the solo's (its jobs' t-interval where several ran).
    """
    joined = jobs_with_cells(cells, jobs)
    rows = _timing_rows(joined)
    joined["epoch2_s"] = pd.Series([epoch_time(r) for r in rows], index=joined.index, dtype=float)
    joined["_per_sample"] = pd.Series([sample_time(r) for r in rows], index=joined.index, dtype=float)
    # A time's relative interval is its rate's (time = samples / rate, to first order).
    rate = joined["epoch2_samples_per_s"]
    none = pd.Series(float("nan"), index=joined.index)
    low, high = joined.get("epoch2_rate_low", none), joined.get("epoch2_rate_high", none)
    joined["epoch2_s_low"], joined["epoch2_s_high"] = scaled_bounds(rate, low, high, joined["epoch2_s"])
    joined["_per_sample_low"], joined["_per_sample_high"] = scaled_bounds(rate, low, high, joined["_per_sample"])
    keys = ["workload", "mode", "gpu_name", "settings"]
    solo_jobs = _ok_solo_jobs(joined)
    solo = solo_jobs.groupby(keys, dropna=False)["epoch2_s"].mean().rename("solo_epoch2_s").reset_index()
    # The slowdown compares seconds per sample (ratios.sample_time): the solo's mean, its runs' interval.
    timed = solo_jobs.dropna(subset=["_per_sample"])
    ref = timed.groupby(keys, dropna=False)["_per_sample"].mean().rename("_solo_per_sample").reset_index()
    if not timed.empty:
        spread = group_intervals(timed, keys, ["_per_sample"]).reset_index()
        ref = ref.merge(spread, on=keys, how="left")
        ref["_solo_per_sample_low"], ref["_solo_per_sample_high"] = scaled_bounds(
            ref.pop("_per_sample"), ref.pop("_per_sample_low"), ref.pop("_per_sample_high"), ref["_solo_per_sample"]
        )
    out = joined.merge(solo, on=keys, how="left").merge(ref, on=keys, how="left")
    # A job that failed after epoch 2 keeps its (valid) epoch-2 rate; one that failed before has none.
    out["slowdown"] = out["_per_sample"] / out["_solo_per_sample"]
    low, high = ratio_bounds(out, "_per_sample", "_solo_per_sample")
    out["slowdown_low"], out["slowdown_high"] = scaled_bounds(out["slowdown"], low, high, out["slowdown"])
    out = at_floor(out, ["slowdown", "epoch2_s"])  # a ratio of times, a time: never below 0
    out = out.rename(columns={"workload": "job_workload", "cell_workload": "workload"})
    cols = [
        "sweep",
        "cell_id",
        "repeat",
        "workload",
        "mix",
        "mode",
        "degree",
        "gpu_name",
        "cell_status",
        "job_index",
        "job_name",
        "job_workload",
        "status",
        "settings",
        "epoch2_s",
        "epoch2_s_low",
        "epoch2_s_high",
        "epoch2_samples_per_s",
        "solo_epoch2_s",
        "slowdown",
        "slowdown_low",
        "slowdown_high",
    ]
    return out[cols].sort_values(
        ["workload", "gpu_name", "mode", "degree", "sweep", "cell_id", "job_index"], ignore_index=True
    )


def epoch_span(epochs: pd.DataFrame) -> pd.DataFrame:
    """Per cell: first epoch start to last epoch end (warm-up included), and measured job-epochs."""
    if epochs.empty:
        return pd.DataFrame(columns=[*CELL_KEY, "span_s", "measured_job_epochs"])
    grouped = epochs.groupby(CELL_KEY)
    span = (grouped["end_ts"].max() - grouped["start_ts"].min()).rename("span_s")
    measured = epochs[~epochs["warmup"].astype(bool)].groupby(CELL_KEY).size().rename("measured_job_epochs")
    return pd.concat([span, measured], axis=1).reset_index()


def cell_metrics_table(cells: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """GPU telemetry of each cell over its measured window (paper Figs. 3, 4, 6).

    Columns: the cell's identity (``repeat`` included) and ``status, telemetry_source``;
    ``sm_active_mean`` and ``sm_active_max`` (%, of the GPU); ``gpu_util_mean`` (%);
    ``mem_used_max_mib`` (GPU memory used, all jobs); ``energy_j`` and ``power_mean_w`` over the
    measured window ``makespan_s`` (energy_j = power_mean_w x makespan_s); ``measured_samples`` and
    ``energy_per_sample_j`` (uniform cells); ``total_energy_j`` (every epoch, warm-up included: a
    mixed cell's energy) over ``total_s``; ``pcie_rx_mean_bytes_s``/``pcie_tx_mean_bytes_s``;
    ``measured_job_epochs`` (non-warm-up epochs finished by all jobs in the window) and
    ``energy_per_job_epoch_j`` = energy_j / measured_job_epochs.
    """
    metrics = [
        "telemetry_source",
        "sm_active_mean",
        "sm_active_max",
        "gpu_util_mean",
        "mem_used_max_mib",
        "energy_j",
        "power_mean_w",
        "makespan_s",
        "measured_samples",
        "energy_per_sample_j",
        "total_energy_j",
        "total_s",
        "pcie_rx_mean_bytes_s",
        "pcie_tx_mean_bytes_s",
    ]
    out = cells[_CELL_COLS + metrics].merge(
        epoch_span(epochs)[[*CELL_KEY, "measured_job_epochs"]], on=CELL_KEY, how="left"
    )
    out["measured_job_epochs"] = out["measured_job_epochs"].fillna(0).astype(int)
    denom = out["measured_job_epochs"].where(out["measured_job_epochs"] > 0)
    out["energy_per_job_epoch_j"] = out["energy_j"] / denom
    return out.sort_values(["workload", "gpu_name", "mode", "degree", "sweep", "repeat"], ignore_index=True)


def _side_summary(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Per (workload, mode, degree, mix): mean agg throughput, epoch-2 time and energy per sample of ok cells."""
    key = ["workload", "mode", "degree", "mix"]
    frame = cells.assign(mix=cells["mix"].fillna(""))
    ok_jobs = jobs[jobs["status"] == "ok"]
    times = [epoch_time(r) for r in _timing_rows(ok_jobs)]
    ok_jobs = ok_jobs.assign(epoch2_s=pd.Series(times, index=ok_jobs.index, dtype=float))  # ratios.epoch_time
    e2 = ok_jobs.groupby(CELL_KEY)["epoch2_s"].mean().rename("epoch2_s").reset_index()
    frame = frame.merge(e2, on=CELL_KEY, how="left")
    ok = frame[frame["status"] == "ok"]
    means = ok.groupby(key)[["agg_samples_per_s", "epoch2_s", "energy_per_sample_j"]].mean()
    status = frame.groupby(key)["status"].agg(lambda s: "ok" if (s == "ok").any() else "/".join(sorted(set(s))))
    counts = frame.groupby(key).size().rename("n_cells")
    return pd.concat([status, counts, means], axis=1).reset_index()


def baseline_table(
    cells: pd.DataFrame, jobs: pd.DataFrame, base_cells: pd.DataFrame, base_jobs: pd.DataFrame
) -> pd.DataFrame:
    """Compare a sweep with a baseline sweep cell by cell, joined on (workload, mode, degree, mix).

    Columns: the key; ``present`` (both, current only, baseline only); per side (no suffix:
    current, ``_base``: baseline) ``status`` (ok if any cell of the key is ok), ``n_cells``,
    ``agg_samples_per_s``, ``epoch2_s`` (mean over ok jobs) and ``energy_per_sample_j`` (means over ok
    cells); ratios current / baseline ``agg_ratio``, ``epoch2_ratio``, ``energy_ratio``.

    Energy is compared per sample: a cell's ``energy_j`` is over its measured window, whose length
    is set by its floor (``measure.min_epoch_s``) as much as by its speed, so two sweeps of one
    configuration under the floor showed an energy ratio of 1.00 whatever their speeds. A mixed cell
    has no energy per sample (its jobs' samples are not alike): its ratio is empty.
    """
    cur, base = _side_summary(cells, jobs), _side_summary(base_cells, base_jobs)
    key = ["workload", "mode", "degree", "mix"]
    out = cur.merge(base, on=key, how="outer", suffixes=("", "_base"), indicator="present")
    out["present"] = (
        out["present"].astype(str).map({"both": "both", "left_only": "current only", "right_only": "baseline only"})
    )
    out["agg_ratio"] = out["agg_samples_per_s"] / out["agg_samples_per_s_base"]
    out["epoch2_ratio"] = out["epoch2_s"] / out["epoch2_s_base"]
    out["energy_ratio"] = out["energy_per_sample_j"] / out["energy_per_sample_j_base"]
    out["mix"] = out["mix"].replace("", None)
    cols = [
        *key,
        "present",
        "status",
        "status_base",
        "n_cells",
        "n_cells_base",
        "agg_samples_per_s",
        "agg_samples_per_s_base",
        "agg_ratio",
        "epoch2_s",
        "epoch2_s_base",
        "epoch2_ratio",
        "energy_per_sample_j",
        "energy_per_sample_j_base",
        "energy_ratio",
    ]
    return out[cols].sort_values(key, ignore_index=True)
