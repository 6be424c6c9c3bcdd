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

from analysis.stats import crosses, spread_columns

__all__ = [
    "CELL_KEY",
    "GAIN_SPREADS",
    "baseline_table",
    "cell_metrics_table",
    "cell_settings",
    "epoch2_table",
    "epoch_span",
    "gain_cells",
    "gain_table",
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


def _is_uniform(frame: pd.DataFrame) -> pd.Series:
    return frame["mix"].isna()


def _ok_solo_jobs(joined: pd.DataFrame) -> pd.DataFrame:
    """Jobs of ok degree-1 uniform cells that finished ok."""
    mask = _is_uniform(joined) & (joined["degree"] == 1) & (joined["cell_status"] == "ok") & (joined["status"] == "ok")
    return joined[mask]


def epoch2_table(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Epoch-2 time of every job and its slowdown against its solo run (paper Fig. 2).

    Columns: the cell's ``sweep, cell_id, workload, mix, mode, degree, gpu_name, cell_status``;
    the job's ``job_index, job_name, job_workload, status, settings, epoch2_s,
    epoch2_samples_per_s``; ``solo_epoch2_s`` (mean epoch-2 time of the same workload alone on
    the GPU in this mode with the same settings) and ``slowdown`` = epoch2_s / solo_epoch2_s.
    """
    joined = jobs_with_cells(cells, jobs)
    keys = ["workload", "mode", "gpu_name", "settings"]
    solo = (
        _ok_solo_jobs(joined)
        .dropna(subset=["epoch2_s"])
        .groupby(keys, dropna=False)["epoch2_s"]
        .mean()
        .rename("solo_epoch2_s")
        .reset_index()
    )
    out = joined.merge(solo, on=keys, how="left")
    # A job that failed after epoch 2 keeps its (valid) epoch-2 time; one that failed before has none.
    out["slowdown"] = out["epoch2_s"] / out["solo_epoch2_s"]
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
        "epoch2_samples_per_s",
        "solo_epoch2_s",
        "slowdown",
    ]
    return out[cols].sort_values(
        ["workload", "gpu_name", "mode", "degree", "sweep", "cell_id", "job_index"], ignore_index=True
    )


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


GAIN_SPREADS = ("agg_samples_per_s", "gain_vs_solo", "gain_vs_best_solo", "energy_per_sample_j", "energy_vs_solo")


def gain_cells(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Every uniform cell (run) with its gains and energy ratio against its solo references.

    Columns: the cell's ``sweep, cell_id, repeat, repeat_group, workload, gpu_name, mode, degree,
    settings, status, n_ok, n_jobs, agg_samples_per_s, energy_per_sample_j, sm_active_mean,
    mem_used_max_mib``; ``solo_samples_per_s`` and ``gain_vs_solo`` (against the degree-1 cell of
    the same workload, mode and settings), ``best_solo_samples_per_s``, ``best_solo`` (its mode and
    settings) and ``gain_vs_best_solo`` (against the fastest degree-1 configuration of the workload on
    that GPU model); ``energy_vs_solo`` = J/sample / the same-settings solo's J/sample (below 1:
    collocation spends less energy per sample). A reference with several runs is the run of the same
    repeat index, else their median. Failed cells get no ratios.
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
    ]
    uniform = cells[_is_uniform(cells)]
    if uniform.empty:
        return pd.DataFrame(columns=cols)
    out = uniform.merge(cell_settings(jobs), on=CELL_KEY, how="left")
    ok = out["status"] == "ok"
    solo = out[(out["degree"] == 1) & ok & out["agg_samples_per_s"].notna()]
    keys = ["workload", "gpu_name", "mode", "settings"]
    out["solo_samples_per_s"] = _paired(out, solo, keys, "agg_samples_per_s")
    out["gain_vs_solo"] = (out["agg_samples_per_s"] / out["solo_samples_per_s"]).where(ok)
    out["energy_vs_solo"] = (out["energy_per_sample_j"] / _paired(out, solo, keys, "energy_per_sample_j")).where(ok)
    if solo.empty:
        out["best_solo_samples_per_s"], out["best_solo"], out["gain_vs_best_solo"] = np.nan, None, np.nan
        return out[cols]
    per_config = solo.groupby(keys, dropna=False)["agg_samples_per_s"].median().reset_index()
    best = per_config.loc[per_config.groupby(["workload", "gpu_name"], dropna=False)["agg_samples_per_s"].idxmax()]
    best = best.assign(best_solo=best["mode"] + " " + best["settings"])[["workload", "gpu_name", "best_solo"]]
    out = out.merge(best, on=["workload", "gpu_name"], how="left")
    best_runs = solo.assign(best_solo=solo["mode"] + " " + solo["settings"])
    out["best_solo_samples_per_s"] = _paired(out, best_runs, ["workload", "gpu_name", "best_solo"], "agg_samples_per_s")
    out["gain_vs_best_solo"] = (out["agg_samples_per_s"] / out["best_solo_samples_per_s"]).where(out["status"] == "ok")
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
    every job of every run); medians over runs of ``sm_active_mean``, ``sm_active_max``,
    ``mem_used_max_mib``, ``power_mean_w`` and ``energy_j``.
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
        "sm_active_mean",
        "sm_active_max",
        "mem_used_max_mib",
        "power_mean_w",
        "energy_j",
    ]
    runs = gain_cells(cells, jobs)
    if runs.empty:
        return pd.DataFrame(columns=cols)
    slow = (
        epoch2_table(cells, jobs)
        .groupby(CELL_KEY)["slowdown"]
        .agg(slowdown_mean="mean", slowdown_max="max")
        .reset_index()
    )
    e2 = (
        epoch2_table(cells, jobs)
        .groupby(CELL_KEY)["epoch2_s"]
        .agg(epoch2_s="median", epoch2_s_lo="min", epoch2_s_hi="max")
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
        ],
        axis=1,
    ).reset_index()
    out["gain_uncertain"] = (out["degree"] > 1) & crosses(out["gain_vs_solo_min"], out["gain_vs_solo_max"], out["n_ok"])
    return out[cols].sort_values(["workload", "gpu_name", "mode", "degree", "settings", "sweep"], ignore_index=True)


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


def baseline_table(
    cells: pd.DataFrame, jobs: pd.DataFrame, base_cells: pd.DataFrame, base_jobs: pd.DataFrame
) -> pd.DataFrame:
    """Compare a sweep with a baseline sweep cell by cell, joined on (workload, mode, degree, mix).

    Columns: the key; ``present`` (both, current only, baseline only); per side (no suffix:
    current, ``_base``: baseline) ``status`` (ok if any cell of the key is ok), ``n_cells``,
    ``agg_samples_per_s``, ``epoch2_s`` (mean over ok jobs) and ``energy_j`` (means over ok
    cells); ratios current / baseline ``agg_ratio``, ``epoch2_ratio``, ``energy_ratio``.
    """
    cur, base = _side_summary(cells, jobs), _side_summary(base_cells, base_jobs)
    key = ["workload", "mode", "degree", "mix"]
    out = cur.merge(base, on=key, how="outer", suffixes=("", "_base"), indicator="present")
    out["present"] = (
        out["present"].astype(str).map({"both": "both", "left_only": "current only", "right_only": "baseline only"})
    )
    out["agg_ratio"] = out["agg_samples_per_s"] / out["agg_samples_per_s_base"]
    out["epoch2_ratio"] = out["epoch2_s"] / out["epoch2_s_base"]
    out["energy_ratio"] = out["energy_j"] / out["energy_j_base"]
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
        "energy_j",
        "energy_j_base",
        "energy_ratio",
    ]
    return out[cols].sort_values(key, ignore_index=True)
