"""The study's tables, as pure functions from the loaded DataFrames to a DataFrame.

Conventions shared by every table:

* A cell is identified by ``(sweep, cell_id)``; uniform cells have ``mix`` null, mixed cells
  name their mix and their ``workload`` is ``a+b+...``.
* A *solo* reference is a degree-1 uniform cell with status ``ok`` of the same workload, mode
  and GPU model (``gpu_name``), and for job-level references also the same trainer settings
  (``settings``: compile, amp, channels_last). Several matching solo cells (several sweeps,
  reruns) are averaged.
* Failed cells (status oom, error, partial) keep their row with their ``status``; ratios that
  would compare a failed cell are left empty (NaN).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = [
    "baseline_table",
    "cell_metrics_table",
    "cell_settings",
    "epoch2_table",
    "gain_table",
    "job_settings",
    "mixed_table",
]

CELL_KEY = ["sweep", "cell_id"]
_CELL_COLS = ["sweep", "cell_id", "workload", "mix", "mode", "degree", "gpu_name", "status"]


def job_settings(jobs: pd.DataFrame) -> pd.Series:
    """The trainer settings that distinguish configurations of one workload, as one string per job."""
    if jobs.empty:
        return pd.Series([], index=jobs.index, dtype=object)
    return ("compile=" + jobs["compile"].fillna("off").astype(str) + " amp=" + jobs["amp"].fillna("off").astype(str)
            + " channels_last=" + jobs["channels_last"].fillna(False).astype(bool).astype(str))


def cell_settings(jobs: pd.DataFrame) -> pd.DataFrame:
    """Per cell: its jobs' distinct settings joined by `` | `` (one value for uniform cells)."""
    if jobs.empty:
        return pd.DataFrame(columns=[*CELL_KEY, "settings"])
    frame = jobs[CELL_KEY].assign(settings=job_settings(jobs))
    return (frame.groupby(CELL_KEY, sort=False)["settings"]
            .agg(lambda s: " | ".join(dict.fromkeys(s))).reset_index())


def _jobs_with_cells(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Jobs joined to their cell's mode, degree, mix, GPU and status (``cell_status``)."""
    cell_part = cells[_CELL_COLS].rename(columns={"workload": "cell_workload", "status": "cell_status"})
    out = jobs.merge(cell_part, on=CELL_KEY, how="inner")
    out["settings"] = job_settings(out)
    return out


def _is_uniform(frame: pd.DataFrame) -> pd.Series:
    return frame["mix"].isna()


def _ok_solo_jobs(joined: pd.DataFrame) -> pd.DataFrame:
    """Jobs of ok degree-1 uniform cells that finished ok."""
    mask = (_is_uniform(joined) & (joined["degree"] == 1) & (joined["cell_status"] == "ok")
            & (joined["status"] == "ok"))
    return joined[mask]


def epoch2_table(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Epoch-2 time of every job and its slowdown against its solo run (paper Fig. 2).

    Columns: the cell's ``sweep, cell_id, workload, mix, mode, degree, gpu_name, cell_status``;
    the job's ``job_index, job_name, job_workload, status, settings, epoch2_s,
    epoch2_samples_per_s``; ``solo_epoch2_s`` (mean epoch-2 time of the same workload alone on
    the GPU in this mode with the same settings) and ``slowdown`` = epoch2_s / solo_epoch2_s.
    """
    joined = _jobs_with_cells(cells, jobs)
    keys = ["workload", "mode", "gpu_name", "settings"]
    solo = (_ok_solo_jobs(joined).dropna(subset=["epoch2_s"]).groupby(keys, dropna=False)["epoch2_s"]
            .mean().rename("solo_epoch2_s").reset_index())
    out = joined.merge(solo, on=keys, how="left")
    # A job that failed after epoch 2 keeps its (valid) epoch-2 time; one that failed before has none.
    out["slowdown"] = out["epoch2_s"] / out["solo_epoch2_s"]
    out = out.rename(columns={"workload": "job_workload", "cell_workload": "workload"})
    cols = ["sweep", "cell_id", "workload", "mix", "mode", "degree", "gpu_name", "cell_status", "job_index",
            "job_name", "job_workload", "status", "settings", "epoch2_s", "epoch2_samples_per_s", "solo_epoch2_s",
            "slowdown"]
    return out[cols].sort_values(["workload", "gpu_name", "mode", "degree", "sweep", "cell_id", "job_index"],
                                 ignore_index=True)


def gain_table(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Throughput gain of collocation per workload, GPU, mode and degree (uniform cells only).

    Columns: ``workload, gpu_name, mode, degree, settings, sweep, cell_id, status, n_ok, n_jobs``;
    ``agg_samples_per_s`` (sum of the jobs' epoch-2 samples/s); ``solo_samples_per_s`` and
    ``gain_vs_solo`` (ratio to the degree-1 cell of the same workload, mode and settings);
    ``best_solo_samples_per_s``, ``best_solo`` (which mode and settings it was) and
    ``gain_vs_best_solo`` (ratio to the fastest degree-1 cell of the workload on that GPU model,
    across modes and settings); ``slowdown_mean`` and ``slowdown_max`` over the cell's jobs
    (see :func:`epoch2_table`).
    """
    cols = ["workload", "gpu_name", "mode", "degree", "settings", "sweep", "cell_id", "status", "n_ok", "n_jobs",
            "agg_samples_per_s", "solo_samples_per_s", "gain_vs_solo", "best_solo_samples_per_s", "best_solo",
            "gain_vs_best_solo", "slowdown_mean", "slowdown_max"]
    uniform = cells[_is_uniform(cells)]
    if uniform.empty:
        return pd.DataFrame(columns=cols)
    out = uniform.merge(cell_settings(jobs), on=CELL_KEY, how="left")
    solo_mask = (out["degree"] == 1) & (out["status"] == "ok") & out["agg_samples_per_s"].notna()
    solo = out[solo_mask]
    keys = ["workload", "gpu_name", "mode", "settings"]
    ref = solo.groupby(keys, dropna=False)["agg_samples_per_s"].mean().rename("solo_samples_per_s").reset_index()
    out = out.merge(ref, on=keys, how="left")
    if solo.empty:
        out["best_solo_samples_per_s"], out["best_solo"] = np.nan, None
    else:
        per_config = solo.groupby([*keys], dropna=False)["agg_samples_per_s"].mean().reset_index()
        best = per_config.loc[per_config.groupby(["workload", "gpu_name"], dropna=False)["agg_samples_per_s"].idxmax()]
        best = best.assign(best_solo=best["mode"] + " " + best["settings"]).rename(
            columns={"agg_samples_per_s": "best_solo_samples_per_s"})
        out = out.merge(best[["workload", "gpu_name", "best_solo_samples_per_s", "best_solo"]],
                        on=["workload", "gpu_name"], how="left")
    ok = out["status"] == "ok"
    out["gain_vs_solo"] = (out["agg_samples_per_s"] / out["solo_samples_per_s"]).where(ok)
    out["gain_vs_best_solo"] = (out["agg_samples_per_s"] / out["best_solo_samples_per_s"]).where(ok)
    slow = (epoch2_table(cells, jobs).groupby(CELL_KEY)["slowdown"].agg(slowdown_mean="mean", slowdown_max="max")
            .reset_index())
    out = out.merge(slow, on=CELL_KEY, how="left")
    return out[cols].sort_values(["workload", "gpu_name", "mode", "degree", "settings", "sweep"], ignore_index=True)


def _epoch_span(epochs: pd.DataFrame) -> pd.DataFrame:
    """Per cell: first epoch start to last epoch end (warm-up included), and measured job-epochs."""
    if epochs.empty:
        return pd.DataFrame(columns=[*CELL_KEY, "span_s", "measured_job_epochs"])
    grouped = epochs.groupby(CELL_KEY)
    span = (grouped["end_ts"].max() - grouped["start_ts"].min()).rename("span_s")
    measured = epochs[~epochs["warmup"].astype(bool)].groupby(CELL_KEY).size().rename("measured_job_epochs")
    return pd.concat([span, measured], axis=1).reset_index()


def cell_metrics_table(cells: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """GPU telemetry of each cell over its measured window (paper Figs. 3, 4, 6).

    Columns: the cell's identity and ``status, telemetry_source``; ``sm_active_mean`` and
    ``sm_active_max`` (%, of the GPU); ``gpu_util_mean`` (%); ``mem_used_max_mib`` (GPU memory
    used, all jobs); ``energy_j`` (energy counter over the measured window) and
    ``power_mean_w``; ``pcie_rx_mean_bytes_s``/``pcie_tx_mean_bytes_s``; ``makespan_s``
    (measured window); ``measured_job_epochs`` (non-warm-up epochs finished by all jobs in the
    window) and ``energy_per_job_epoch_j`` = energy_j / measured_job_epochs.
    """
    metrics = ["telemetry_source", "sm_active_mean", "sm_active_max", "gpu_util_mean", "mem_used_max_mib",
               "energy_j", "power_mean_w", "pcie_rx_mean_bytes_s", "pcie_tx_mean_bytes_s", "makespan_s"]
    out = cells[_CELL_COLS + metrics].merge(_epoch_span(epochs)[[*CELL_KEY, "measured_job_epochs"]],
                                             on=CELL_KEY, how="left")
    out["measured_job_epochs"] = out["measured_job_epochs"].fillna(0).astype(int)
    denom = out["measured_job_epochs"].where(out["measured_job_epochs"] > 0)
    out["energy_per_job_epoch_j"] = out["energy_j"] / denom
    return out.sort_values(["workload", "gpu_name", "mode", "degree", "sweep"], ignore_index=True)


def mixed_table(cells: pd.DataFrame, jobs: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """Mixed cells against running their jobs one after the other (paper Fig. 8, Table 2).

    One row per job of each mixed cell. Columns: ``sweep, cell_id, mix, workload, mode, gpu_name,
    status`` (the cell); ``job_index, job_name, job_workload, job_status, job_total_s`` (the job's
    epochs, warm-up included); ``solo_total_s`` (the same workload alone in the same mode with
    the same settings, batch size, epochs and epoch length; mean of matches) and
    ``job_slowdown`` = job_total_s / solo_total_s; ``cell_total_s`` (makespan: first epoch start
    to last epoch end of the cell); ``serial_s`` = the sum of the jobs' ``solo_total_s`` (empty if
    one is missing, see ``solo_missing``); ``change_vs_sequential_pct`` =
    100 * (cell_total_s / serial_s - 1), negative when collocation is faster.
    """
    cols = ["sweep", "cell_id", "mix", "workload", "mode", "gpu_name", "status", "job_index", "job_name",
            "job_workload", "job_status", "job_total_s", "solo_total_s", "job_slowdown", "cell_total_s", "serial_s",
            "change_vs_sequential_pct", "solo_missing"]
    mixed = cells[cells["mix"].notna()]
    if mixed.empty:
        return pd.DataFrame(columns=cols)
    joined = _jobs_with_cells(cells, jobs)
    match = ["workload", "mode", "gpu_name", "settings", "batch_size", "epochs", "epoch_samples"]
    solo = (_ok_solo_jobs(joined).dropna(subset=["total_s"]).groupby(match, dropna=False)["total_s"].mean()
            .rename("solo_total_s").reset_index())
    out = joined[joined["mix"].notna()].merge(solo, on=match, how="left")
    out = out.rename(columns={"workload": "job_workload", "cell_workload": "workload", "status": "job_status",
                              "cell_status": "status", "total_s": "job_total_s"})
    out["job_slowdown"] = out["job_total_s"] / out["solo_total_s"]
    spans = _epoch_span(epochs)[[*CELL_KEY, "span_s"]]
    totals = mixed[[*CELL_KEY, "total_s"]].merge(spans, on=CELL_KEY, how="left")
    totals["cell_total_s"] = totals["span_s"].fillna(totals["total_s"])
    out = out.merge(totals[[*CELL_KEY, "cell_total_s"]], on=CELL_KEY, how="left")
    grouped = out.groupby(CELL_KEY)
    serial = grouped["solo_total_s"].agg(lambda s: s.sum() if s.notna().all() else np.nan).rename("serial_s")
    missing = (out["job_name"].astype(str).where(out["solo_total_s"].isna()).groupby([out[k] for k in CELL_KEY])
               .agg(lambda s: ", ".join(s.dropna())).rename("solo_missing"))
    out = out.merge(pd.concat([serial, missing], axis=1).reset_index(), on=CELL_KEY, how="left")
    change = 100.0 * (out["cell_total_s"] / out["serial_s"] - 1.0)
    out["change_vs_sequential_pct"] = change.where(out["status"] == "ok")
    return out[cols].sort_values(["mix", "gpu_name", "mode", "sweep", "cell_id", "job_index"], ignore_index=True)


def _side_summary(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Per (workload, mode, degree, mix): mean agg throughput, epoch-2 time and energy of ok cells."""
    key = ["workload", "mode", "degree", "mix"]
    frame = cells.assign(mix=cells["mix"].fillna(""))
    e2 = jobs[jobs["status"] == "ok"].groupby(CELL_KEY)["epoch2_s"].mean().rename("epoch2_s").reset_index()
    frame = frame.merge(e2, on=CELL_KEY, how="left")
    ok = frame[frame["status"] == "ok"]
    means = ok.groupby(key)[["agg_samples_per_s", "epoch2_s", "energy_j"]].mean()
    status = frame.groupby(key)["status"].agg(lambda s: "ok" if (s == "ok").any() else "/".join(sorted(set(s))))
    counts = frame.groupby(key).size().rename("n_cells")
    return pd.concat([status, counts, means], axis=1).reset_index()


def baseline_table(cells: pd.DataFrame, jobs: pd.DataFrame, base_cells: pd.DataFrame,
                   base_jobs: pd.DataFrame) -> pd.DataFrame:
    """Compare a sweep with a baseline sweep cell by cell, joined on (workload, mode, degree, mix).

    Columns: the key; ``present`` (both, current only, baseline only); per side (no suffix:
    current, ``_base``: baseline) ``status`` (ok if any cell of the key is ok), ``n_cells``,
    ``agg_samples_per_s``, ``epoch2_s`` (mean over ok jobs) and ``energy_j`` (means over ok
    cells); ratios current / baseline ``agg_ratio``, ``epoch2_ratio``, ``energy_ratio``.
    """
    cur, base = _side_summary(cells, jobs), _side_summary(base_cells, base_jobs)
    key = ["workload", "mode", "degree", "mix"]
    out = cur.merge(base, on=key, how="outer", suffixes=("", "_base"), indicator="present")
    out["present"] = out["present"].astype(str).map(
        {"both": "both", "left_only": "current only", "right_only": "baseline only"})
    out["agg_ratio"] = out["agg_samples_per_s"] / out["agg_samples_per_s_base"]
    out["epoch2_ratio"] = out["epoch2_s"] / out["epoch2_s_base"]
    out["energy_ratio"] = out["energy_j"] / out["energy_j_base"]
    out["mix"] = out["mix"].replace("", None)
    cols = [*key, "present", "status", "status_base", "n_cells", "n_cells_base", "agg_samples_per_s",
            "agg_samples_per_s_base", "agg_ratio", "epoch2_s", "epoch2_s_base", "epoch2_ratio", "energy_j",
            "energy_j_base", "energy_ratio"]
    return out[cols].sort_values(key, ignore_index=True)
