"""The study's figures as PNG files (matplotlib, Agg backend).

Per workload of the uniform cells: throughput gain against the solo run (Fig. 1), epoch-2 time
per job (Fig. 2), SM activity (Fig. 3), memory footprint (Fig. 4), energy per measured epoch
(Fig. 6) and energy per sample (Fig. 10) as bars grouped by degree, one bar per mode (the median
of a configuration's runs, with min-max bars); PCIe rx (Fig. 5) and power (Fig. 7) over time, one
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

from analysis.gains import gain_cells
from analysis.load import SweepData
from analysis.mixed import mixed_table, table2
from analysis.page import CONTENT_PX
from analysis.tables import cell_metrics_table, cell_settings, epoch2_table

__all__ = ["MODE_ORDER", "make_figures"]

log = logging.getLogger(__name__)

MODE_ORDER = ("naive", "mps", "mig")
_DPI = 110
# Timelines are drawn at the report's full width in pixels, so the page shows them at their own size
# (fonts as drawn) instead of shrinking a row of panels into a thumbnail.
_WIDE_IN = CONTENT_PX / _DPI


def _slug(text: object) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", str(text)).strip("_") or "x"


def _mode_key(mode: object) -> tuple[int, str]:
    return (MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER), str(mode))


def _short_settings(settings: object) -> str:
    """``compile=default`` from ``compile=default amp=off channels_last=False`` (defaults dropped)."""
    parts = [p for p in str(settings).split() if not p.endswith(("=off", "=False"))]
    return " ".join(parts) or "defaults"


def _series(frame: pd.DataFrame) -> pd.Series:
    """The legend label of each row: its mode, plus the GPU model and trainer settings where they vary."""
    label = frame["mode"].astype(str)
    if frame["gpu_name"].nunique(dropna=True) > 1:
        label = label + " (" + frame["gpu_name"].fillna("?").astype(str) + ")"
    if "settings" in frame and frame["settings"].nunique(dropna=True) > 1:
        label = label + " [" + frame["settings"].map(_short_settings) + "]"
    return label


class _Writer:
    """Saves figures into one directory and records what was written and what was skipped."""

    def __init__(self, out_dir: Path, skipped: list[str] | None) -> None:
        self.out_dir, self.skipped = out_dir, skipped if skipped is not None else []
        self.written: list[Path] = []

    def skip(self, figure: str, reason: str) -> None:
        log.info("figure=%s skipped=true reason=%r", figure, reason)
        self.skipped.append(f"{figure}: {reason}")

    def save(self, fig: plt.Figure, name: str) -> None:
        path = self.out_dir / f"{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=_DPI)
        plt.close(fig)
        log.info("figure=%s path=%s", name, path)
        self.written.append(path)


def _bars(
    ax: plt.Axes,
    frame: pd.DataFrame,
    value: str,
    ylabel: str,
    *,
    low: str | None = None,
    high: str | None = None,
    marker: str | None = None,
) -> None:
    """Bars of ``value`` grouped by degree, one per series; failed cells are labelled with their status."""
    frame = frame.assign(series=_series(frame))
    degrees = sorted(frame["degree"].dropna().unique())
    series = sorted(frame["series"].unique(), key=lambda s: _mode_key(s.split(" ")[0]))
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(degrees))
    top = np.nanmax(frame[[c for c in (value, high, marker) if c]].to_numpy(dtype=float), initial=0.0)
    for i, name in enumerate(series):
        rows = (
            frame[frame["series"] == name]
            .groupby("degree")
            .agg(
                value=(value, "median"),
                low=(low or value, "min"),
                high=(high or value, "max"),
                marker=(marker or value, "median"),
                status=("status", lambda s: "ok" if (s == "ok").any() else s.iloc[0]),
            )
        )
        rows = rows.reindex(degrees)
        pos = x - 0.4 + width * (i + 0.5)
        yerr = None
        if low or high or frame.groupby(["series", "degree"]).size().max() > 1:  # repeats: their min-max
            yerr = np.vstack(
                [(rows["value"] - rows["low"]).clip(lower=0), (rows["high"] - rows["value"]).clip(lower=0)]
            )
        ax.bar(pos, rows["value"], width, yerr=yerr, capsize=3, label=name, color=f"C{i}")
        if marker:
            ax.plot(pos, rows["marker"], "v", color="black", markersize=5, label="max" if i == 0 else None)
        for p, (_, row) in zip(pos, rows.iterrows(), strict=True):
            if pd.isna(row["value"]) and isinstance(row["status"], str):
                text = row["status"] if row["status"] != "ok" else "n/a"
                ax.text(p, top * 0.02, text, rotation=90, ha="center", va="bottom", fontsize=8, color="red")
    ax.set_xticks(x, [str(int(d)) for d in degrees])
    ax.set_xlim(-0.5, len(degrees) - 0.5)
    ax.set_xlabel("jobs per GPU (degree)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def _bar_figures(w: _Writer, data: SweepData) -> None:
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
                    f"{name}_{_slug(workload)}",
                    f"no {value} in any cell of {workload} "
                    f"(telemetry sources: {', '.join(sorted(frame['telemetry_source'].dropna().unique())) or '-'})",
                )
                continue
            fig, ax = plt.subplots(figsize=(6.4, 4.0))
            _bars(ax, frame, value, ylabel, **extra)
            ax.set_title(f"{title}: {workload}")
            w.save(fig, f"{name}_{_slug(workload)}")


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


def _timeline_figures(w: _Writer, data: SweepData) -> None:
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
            frame = frame.assign(series=_series(frame))
            colours = {
                s: f"C{i}"
                for i, s in enumerate(sorted(frame["series"].unique(), key=lambda s: _mode_key(s.split(" ")[0])))
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
            w.save(fig, f"{name}_{_slug(workload)}")


def _ratio_figures(w: _Writer, data: SweepData) -> None:
    """Gain against the solo run (Fig. 1) and energy per sample (Fig. 10), one bar per mode and degree."""
    runs = gain_cells(data.cells, data.jobs)
    specs = [
        ("fig1_gain", "gain_vs_solo", "gain vs solo (x)", "Throughput gain vs the same settings alone", 1.0),
        (
            "fig10_energy_per_sample",
            "energy_per_sample_j",
            "energy per sample (J)",
            "Energy per sample (measured window)",
            None,
        ),
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
                w.skip(f"{name}_{_slug(workload)}", f"no {value} in any cell of {workload}")
                continue
            fig, ax = plt.subplots(figsize=(6.4, 4.0))
            _bars(ax, frame, value, ylabel)
            if line is not None:
                ax.axhline(line, color="grey", linestyle="--", linewidth=0.8)
            ax.set_title(f"{title}: {workload}")
            w.save(fig, f"{name}_{_slug(workload)}")


def _mixed_total_figure(w: _Writer, data: SweepData) -> None:
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
        err = np.vstack(
            [(sub["total_s"] - sub["total_s_min"]).clip(lower=0), (sub["total_s_max"] - sub["total_s"]).clip(lower=0)]
        )
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
    fig.suptitle(
        "Mixed workloads: total time collocated vs sequential\n(median, min-max bars; change in %)", fontsize=10
    )
    w.save(fig, "fig8_mixed_total")


def _mixed_timeline_figures(w: _Writer, data: SweepData) -> None:
    mixed = _first_runs(data.cells[data.cells["mix"].notna()])
    if mixed.empty:
        w.skip("fig9_mixed_timeline", "no mixed cells (cells.mix is null everywhere)")
        return
    for _, cell in mixed.sort_values(["mix", "mode", "sweep"]).iterrows():
        one = mixed[(mixed["sweep"] == cell["sweep"]) & (mixed["cell_id"] == cell["cell_id"])]
        name = f"fig9_mixed_timeline_{_slug(cell['cell_id'])}"
        sm = pd.concat([_relative(data, one, scope, "sm_active") for scope in ("gpu", "mig")])
        mem_gpu = _relative(data, one, "gpu", "mem_used_mib")
        mem_proc = _relative(data, one, "process", "proc_gpu_mem_mib")
        if sm.empty and mem_gpu.empty and mem_proc.empty:
            w.skip(name, "no SM-activity or memory telemetry in this cell")
            continue
        names = data.jobs[(data.jobs["sweep"] == cell["sweep"]) & (data.jobs["cell_id"] == cell["cell_id"])]
        names = dict(zip(names["job_index"], names["job_name"], strict=True))
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(_WIDE_IN, 5.5), sharex=True)
        for scope, rows in sm.groupby("scope"):
            for key, series in rows.groupby("mig_uuid" if scope == "mig" else "scope", dropna=False):
                top.plot(series["t"], series["sm_active"], label="GPU" if scope == "gpu" else f"MIG {str(key)[:12]}")
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


_FIGURES: tuple[Callable[[_Writer, SweepData], None], ...] = (
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
    writer = _Writer(out, skipped)
    for draw in _FIGURES:
        draw(writer, data)
    return sorted(writer.written, key=_figure_order)


def _figure_order(path: Path) -> tuple[int, str]:
    """``fig2_*`` before ``fig12_*``: by the figure's number, then by name."""
    match = re.match(r"fig(\d+)", path.stem)
    if match is None:
        raise ValueError(f"figure file {path.name} is not named figN_...")
    return int(match.group(1)), path.stem
