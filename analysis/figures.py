"""The study's figures as PNG files (matplotlib, Agg backend).

Per workload of the uniform cells: throughput gain against the solo run (Fig. 1), epoch-2 time
per job (Fig. 2), SM activity (Fig. 3), memory footprint (Fig. 4), energy per measured epoch
(Fig. 6) and energy per sample (Fig. 10) as bars grouped by degree, one bar per mode (Figs. 1 and
10: a configuration's number with its 95% interval as the error bar; the others: the median of its
runs with min-max bars); PCIe rx (Fig. 5) and power (Fig. 7) over time, one
panel per degree, one line per mode, time relative to the cell's ``measured_start_ts``. Mixed
cells: total time per mode against running the jobs one after the other (Fig. 8), and SM activity
and memory over time (Fig. 9).

Every figure the data allows is drawn; one it does not (no mixed cells, a telemetry source
without SM activity, ...) is skipped with a logged reason. Failed cells are marked on the bars
with their status.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after matplotlib.use: the backend is chosen before pyplot loads
import numpy as np
import pandas as pd

from analysis.gains import gain_table
from analysis.load import SweepData
from analysis.mixed import mixed_table, table2
from analysis.page import CONTENT_PX
from analysis.plotting import DPI, MODE_ORDER, Writer, bars, mode_key, series_labels, slug
from analysis.tables import cell_metrics_table, cell_settings, epoch2_table
from raycolloc.results.rows import SCOPE_GPU, SCOPE_MIG

__all__ = ["MODE_ORDER", "make_figures"]

log = logging.getLogger(__name__)

# Timelines are drawn at the report's full width in pixels, so the page shows them at their own size
# (fonts as drawn) instead of shrinking a row of panels into a thumbnail.
_WIDE_IN = CONTENT_PX / DPI


def _bar_figures(w: Writer, data: SweepData) -> None:
    metrics = cell_metrics_table(data.cells, data.epochs)
    metrics = metrics[metrics["mix"].isna()]
    jobs = epoch2_table(data.cells, data.jobs)
    jobs = jobs[jobs["mix"].isna()]
    per_cell = (
        jobs.groupby(["sweep", "cell_id"])
        .agg(e2_mean=("epoch2_s", "mean"), e2_min=("epoch2_s", "min"), e2_max=("epoch2_s", "max"))
        .reset_index()
    )
    metrics = metrics.merge(per_cell, on=["sweep", "cell_id"], how="left").merge(
        cell_settings(data.jobs), on=["sweep", "cell_id"], how="left"
    )
    metrics["mem_used_max_gib"] = metrics["mem_used_max_mib"] / 1024.0
    specs = [
        (
            "fig2_epoch2_time",
            "e2_mean",
            "epoch-2 time per job (s)",
            "Epoch-2 time per job (mean, min-max)",
            {"low": "e2_min", "high": "e2_max"},
        ),
        (
            "fig3_sm_activity",
            "sm_active_mean",
            "SM activity (%)",
            "SM activity (mean; ▼ max)",
            {"marker": "sm_active_max"},
        ),
        ("fig4_memory", "mem_used_max_gib", "GPU memory used (GiB)", "Memory footprint (max)", {}),
        ("fig6_energy", "energy_per_job_epoch_j", "energy per job-epoch (J)", "Energy per measured epoch", {}),
    ]
    if metrics.empty:
        for name, *_ in specs:
            w.skip(name, "no uniform cells")
        return
    for workload, frame in metrics.groupby("workload", sort=True):
        for name, value, ylabel, title, extra in specs:
            if frame[value].notna().sum() == 0:
                w.skip(
                    f"{name}_{slug(workload)}",
                    f"no {value} in any cell of {workload} "
                    f"(telemetry sources: {', '.join(sorted(frame['telemetry_source'].dropna().unique())) or '-'})",
                )
                continue
            fig, ax = plt.subplots(figsize=(6.4, 4.0))
            bars(ax, frame, value, ylabel, **extra)
            ax.set_title(f"{title}: {workload}")
            w.save(fig, f"{name}_{slug(workload)}")


def _relative(data: SweepData, cells: pd.DataFrame, scope: str, column: str) -> pd.DataFrame:
    """Telemetry rows of ``scope`` with ``column`` set, with ``t`` = ts - the cell's measured start."""
    tel = data.telemetry
    tel = tel[(tel["scope"] == scope) & tel[column].notna()]
    starts = cells[["sweep", "cell_id", "measured_start_ts", "measured_end_ts"]]
    tel = tel.merge(starts, on=["sweep", "cell_id"], how="inner")
    return tel.assign(t=tel["ts"] - tel["measured_start_ts"].fillna(tel.groupby("cell_id")["ts"].transform("min")))


def _first_runs(cells: pd.DataFrame) -> pd.DataFrame:
    """One run per configuration (its lowest repeat): time series of every repeat would overlap."""
    return cells[cells["repeat"] == cells.groupby("repeat_group")["repeat"].transform("min")]


def _timeline_figures(w: Writer, data: SweepData) -> None:
    uniform = _first_runs(data.cells[data.cells["mix"].isna()])
    specs = [
        ("fig5_pcie_rx", "pcie_rx_bytes_s", 1e-6, "PCIe rx (MB/s)", "PCIe rx over time"),
        ("fig7_power", "power_w", 1.0, "power (W)", "Power over time"),
    ]
    for name, column, scale, ylabel, title in specs:
        tel = _relative(data, uniform, "gpu", column) if not uniform.empty else pd.DataFrame()
        if tel.empty:
            w.skip(name, f"no GPU-scope {column} telemetry in the uniform cells")
            continue
        tel = tel.merge(
            uniform[["sweep", "cell_id", "workload", "mode", "degree", "gpu_name"]],
            on=["sweep", "cell_id"],
            how="inner",
        ).merge(cell_settings(data.jobs), on=["sweep", "cell_id"], how="left")
        for workload, frame in tel.groupby("workload", sort=True):
            degrees = sorted(frame["degree"].unique())
            # At most three panels a row (two for the paper's four degrees): each panel keeps ~450 px or more.
            ncols = 2 if len(degrees) == 4 else min(len(degrees), 3)
            nrows = math.ceil(len(degrees) / ncols)
            fig, axes = plt.subplots(nrows, ncols, figsize=(_WIDE_IN, 0.8 + 3.4 * nrows), squeeze=False, sharey=True)
            for ax in axes.flat[len(degrees) :]:
                ax.set_visible(False)
            frame = frame.assign(series=series_labels(frame))
            colours = {
                s: f"C{i}"
                for i, s in enumerate(sorted(frame["series"].unique(), key=lambda s: mode_key(s.split(" ")[0])))
            }
            for ax, degree in zip(axes.flat, degrees, strict=False):
                sub = frame[frame["degree"] == degree]
                for (series, _cell), cell in sub.groupby(["series", "cell_id"]):
                    colour = colours[series]
                    ax.plot(cell["t"], cell[column] * scale, label=series, color=colour, linewidth=1.2)
                    end = cell["measured_end_ts"].iloc[0] - cell["measured_start_ts"].iloc[0]
                    if np.isfinite(end):
                        ax.axvline(end, color=colour, linestyle=":", linewidth=0.8)
                ax.axvline(0.0, color="grey", linestyle="--", linewidth=0.8)
                ax.set_title(f"degree {degree}")
                ax.set_xlabel("time from measured start (s)")
                ax.grid(alpha=0.3)
                ax.legend(fontsize=9)
            for row in axes:
                row[0].set_ylabel(ylabel)
            fig.suptitle(f"{title}: {workload} (dashed: measured start; dotted: end)", fontsize=12)
            w.save(fig, f"{name}_{slug(workload)}")


def _ratio_figures(w: Writer, data: SweepData) -> None:
    """Gain against the solo run (Fig. 1) and energy per sample (Fig. 10), one bar per configuration
    (mode and degree), its error bar the 95% interval (:mod:`analysis.intervals`)."""
    runs = gain_table(data.cells, data.jobs)
    specs = [
        (
            "fig1_gain",
            "gain_vs_solo",
            "gain vs solo (x), 95% interval",
            "Throughput gain vs the same settings alone",
            1.0,
        ),
        ("fig10_energy_per_sample", "energy_per_sample_j", "J per sample, 95% interval", "Energy per sample", None),
    ]
    for name, value, ylabel, title, line in specs:
        if runs.empty or runs[value].notna().sum() == 0:
            w.skip(
                name,
                f"no {value} in any uniform cell"
                + (" (no energy counter or power samples)" if value.startswith("energy") else ""),
            )
            continue
        for workload, frame in runs.groupby("workload", sort=True):
            if frame[value].notna().sum() == 0:
                w.skip(f"{name}_{slug(workload)}", f"no {value} in any cell of {workload}")
                continue
            fig, ax = plt.subplots(figsize=(6.4, 4.0))
            frame = frame.assign(_lo=frame[f"{value}_low"].fillna(frame[value]))
            bars(
                ax, frame.assign(_hi=frame[f"{value}_high"].fillna(frame[value])), value, ylabel, low="_lo", high="_hi"
            )
            if line is not None:
                ax.axhline(line, color="grey", linestyle="--", linewidth=0.8)
            ax.set_title(f"{title}: {workload}")
            w.save(fig, f"{name}_{slug(workload)}")


def _mixed_total_figure(w: Writer, data: SweepData) -> None:
    table = table2(mixed_table(data.cells, data.jobs, data.epochs))
    if table.empty:
        w.skip("fig8_mixed_total", "no mixed cells (cells.mix is null everywhere)")
        return
    mixes = sorted(table["mix"].unique())
    fig, axes = plt.subplots(
        1, len(mixes), figsize=(max(6.4, 1.6 * table["mode"].nunique() + 2) * len(mixes), 4.2), squeeze=False
    )
    for ax, mix in zip(axes[0], mixes, strict=True):
        sub = table[table["mix"] == mix].drop_duplicates("mode")
        x = np.arange(len(sub))
        # The 95% interval where known (several runs, or the solos' spread), else the runs' min-max.
        low, high = sub["total_s_low"].fillna(sub["total_s_min"]), sub["total_s_high"].fillna(sub["total_s_max"])
        err = np.vstack([(sub["total_s"] - low).clip(lower=0), (high - sub["total_s"]).clip(lower=0)])
        ax.bar(x - 0.2, sub["total_s"], 0.4, yerr=err, capsize=3, label="collocated", color="C0")
        ax.bar(x + 0.2, sub["sequential_s"], 0.4, label="sequential (solo runs)", color="C7", hatch="//")
        for xi, (_, row) in zip(x, sub.iterrows(), strict=True):
            if row["status"] != "ok":
                ax.text(xi - 0.2, 0, row["status"], rotation=90, ha="center", va="bottom", color="red", fontsize=8)
            if pd.isna(row["sequential_s"]):
                ax.text(xi + 0.2, 0, "no solo", rotation=90, ha="center", va="bottom", color="grey", fontsize=8)
            elif pd.notna(row["change_vs_sequential_pct"]):
                top = max(row["total_s_max"] if pd.notna(row["total_s_max"]) else 0, row["sequential_s"])
                ax.text(
                    xi, top * 1.02, f"{row['change_vs_sequential_pct']:+.0f}%", ha="center", va="bottom", fontsize=8
                )
        ax.set_xticks(x, list(sub["mode"]))
        ax.set_xlim(-0.6, len(sub) - 0.4)
        ax.set_title(f"{mix}")
        ax.set_ylabel("total time (s)")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle("Mixed workloads: total time collocated vs sequential\n(95% interval bars; change in %)", fontsize=10)
    w.save(fig, "fig8_mixed_total")


def _mixed_timeline_figures(w: Writer, data: SweepData) -> None:
    mixed = _first_runs(data.cells[data.cells["mix"].notna()])
    if mixed.empty:
        w.skip("fig9_mixed_timeline", "no mixed cells (cells.mix is null everywhere)")
        return
    for _, cell in mixed.sort_values(["mix", "mode", "sweep"]).iterrows():
        one = mixed[(mixed["sweep"] == cell["sweep"]) & (mixed["cell_id"] == cell["cell_id"])]
        name = f"fig9_mixed_timeline_{slug(cell['cell_id'])}"
        sm = pd.concat([_relative(data, one, scope, "sm_active") for scope in (SCOPE_GPU, SCOPE_MIG)])
        mem_gpu = _relative(data, one, "gpu", "mem_used_mib")
        mem_proc = _relative(data, one, "process", "proc_gpu_mem_mib")
        if sm.empty and mem_gpu.empty and mem_proc.empty:
            w.skip(name, "no SM-activity or memory telemetry in this cell")
            continue
        names = data.jobs[(data.jobs["sweep"] == cell["sweep"]) & (data.jobs["cell_id"] == cell["cell_id"])]
        names = dict(zip(names["job_index"], names["job_name"], strict=True))
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(_WIDE_IN, 5.5), sharex=True)
        for scope, rows in sm.groupby("scope"):
            for key, series in rows.groupby("mig_uuid" if scope == SCOPE_MIG else "scope", dropna=False):
                top.plot(
                    series["t"], series["sm_active"], label="GPU" if scope == SCOPE_GPU else f"MIG {str(key)[:12]}"
                )
        if sm.empty:
            top.text(0.5, 0.5, f"no SM activity from {cell['telemetry_source']}", transform=top.transAxes, ha="center")
        top.set_ylabel("SM activity (%)")
        if not mem_gpu.empty:
            bottom.plot(mem_gpu["t"], mem_gpu["mem_used_mib"] / 1024.0, color="black", label="GPU total")
        for job, rows in mem_proc.groupby("job_index"):
            bottom.plot(rows["t"], rows["proc_gpu_mem_mib"] / 1024.0, label=str(names.get(job, f"job {int(job)}")))
        bottom.set_ylabel("GPU memory (GiB)")
        bottom.set_xlabel("time from measured start (s)")
        for ax in (top, bottom):
            ax.axvline(0.0, color="grey", linestyle="--", linewidth=0.8)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        fig.suptitle(f"{cell['mix']} ({cell['mode']}, {cell['status']}): SM activity and memory over time")
        w.save(fig, name)


_FIGURES: tuple[Callable[[Writer, SweepData], None], ...] = (
    _ratio_figures,
    _bar_figures,
    _timeline_figures,
    _mixed_total_figure,
    _mixed_timeline_figures,
)


def make_figures(data: SweepData, out_dir: str | Path, skipped: list[str] | None = None) -> list[Path]:
    """Write every figure the data allows into ``out_dir``.

    Args:
        data: the loaded sweeps.
        out_dir: where the PNGs go (created).
        skipped: if given, one ``"figure: reason"`` line is appended per figure not drawn.

    Returns:
        The PNG paths written, in the order of the paper's figures.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    writer = Writer(out, skipped)
    for draw in _FIGURES:
        draw(writer, data)
    return sorted(writer.written, key=_figure_order)


def _figure_order(path: Path) -> tuple[int, str]:
    """``fig2_*`` before ``fig12_*``: by the figure's number, then by name."""
    match = re.match(r"fig(\d+)", path.stem)
    if match is None:
        raise ValueError(f"figure file {path.name} is not named figN_...")
    return int(match.group(1)), path.stem
