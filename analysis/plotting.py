"""What the figures share: the file writer, the bar chart grouped by degree, and labels."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after matplotlib.use: the backend is chosen before pyplot loads
import numpy as np
import pandas as pd

from raycolloc.mode_kinds import MODE_NAMES, mode_rank

__all__ = ["DPI", "MODE_ORDER", "Writer", "bars", "mode_key", "series_labels", "short_settings", "slug"]

log = logging.getLogger("analysis.figures")

MODE_ORDER = MODE_NAMES  # in their order (raycolloc.mode_kinds)
DPI = 110


def slug(text: object) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", str(text)).strip("_") or "x"


def mode_key(mode: object) -> tuple[int, str]:
    return mode_rank(mode), str(mode)


def short_settings(settings: object) -> str:
    """``compile=default`` from ``compile=default amp=off channels_last=False`` (defaults dropped)."""
    parts = [p for p in str(settings).split() if not p.endswith(("=off", "=False"))]
    return " ".join(parts) or "defaults"


def series_labels(frame: pd.DataFrame) -> pd.Series:
    """The legend label of each row: its mode, plus the GPU model and trainer settings where they vary."""
    label = frame["mode"].astype(str)
    if frame["gpu_name"].nunique(dropna=True) > 1:
        label = label + " (" + frame["gpu_name"].fillna("?").astype(str) + ")"
    if "settings" in frame and frame["settings"].nunique(dropna=True) > 1:
        label = label + " [" + frame["settings"].map(short_settings) + "]"
    return label


class Writer:
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
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
        log.info("figure=%s path=%s", name, path)
        self.written.append(path)


def bars(
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
    frame = frame.assign(series=series_labels(frame))
    degrees = sorted(frame["degree"].dropna().unique())
    series = sorted(frame["series"].unique(), key=lambda s: mode_key(s.split(" ")[0]))
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
