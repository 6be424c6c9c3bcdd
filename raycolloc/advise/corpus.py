"""The measured corpus (``corpus/``) as the tables a sweep's validation reads.

A corpus folder holds ``cells.parquet`` and ``jobs.parquet`` (``jobs/corpus.py`` writes them: one row
per cell run and per job, repeats as rows of their own, each entry one sweep). The advisor validates on
it as on sweeps: each entry is a ``sweep``, each run its own cell, and the runs of one configuration
(entry, mode, degree) one ``repeat_group``, so the targets judge the median of its runs.

What the first corpus lacks (its README says so): the ``epochs`` and ``telemetry`` tables and
``config_json``. The profiles then read what the cells hold instead: SM activity and the share of
time a kernel ran (``sm_active_mean``, ``gpu_util_mean``: NVML's utilisation) as the measured
window's means, PCIe and power from the cell; no DRAM activity (MPS's DRAM term and its many-clients
loss are then off) and no CPU time per step (no CPU term). Where a newer corpus keeps them, they are
read as from a sweep.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from analysis.load import SweepData

__all__ = ["CORPUS_DIR", "CORPUS_TABLES", "corpus_passes", "is_corpus", "load_corpus", "load_measured"]

CORPUS_TABLES = ("cells.parquet", "jobs.parquet")
# The committed corpus: the advisor's prior (its default fit reads it beside ``out_dir``; the fit keeps
# only the cells of the GPU model advised on, so it weighs nothing on another GPU).
CORPUS_DIR = Path(__file__).resolve().parents[2] / "corpus"
_EPOCH_COLUMNS = ("sweep", "cell_id", "job_index", "epoch", "warmup", "steps", "thread_cpu_s")
_TELEMETRY_COLUMNS = ("sweep", "cell_id", "ts", "scope")


def is_corpus(path: str | Path) -> bool:
    """Whether ``path`` is a corpus folder (its two tables directly inside, not a sweep's tree)."""
    return all((Path(path) / name).is_file() for name in CORPUS_TABLES)


def _optional(path: Path, name: str, columns: tuple[str, ...]) -> pd.DataFrame:
    """A table the corpus may keep (a newer corpus does), else an empty one with the columns read."""
    file = path / f"{name}.parquet"
    frame = pd.read_parquet(file) if file.is_file() else pd.DataFrame({c: [] for c in columns})
    return _entry_as_sweep(frame)


def _entry_as_sweep(frame: pd.DataFrame) -> pd.DataFrame:
    """``sweep`` = the corpus entry. A row kept whole from its sweep (the newer corpus keeps every
    column) also carries the sweep's own ``sweep`` (``<entry>/naive-mps``) and ``repeat_group``
    (a hash): the entry replaces them, so one entry's old and new runs are one sweep."""
    if "entry" not in frame:
        return frame
    return frame.drop(columns=[c for c in ("sweep", "repeat_group") if c in frame]).rename(columns={"entry": "sweep"})


def corpus_passes(path: str | Path) -> list[Path]:
    """The later passes kept beside a corpus (``passes/<date>/``, each a corpus of its own), oldest first."""
    return sorted(p for p in (Path(path) / "passes").glob("*") if is_corpus(p))


def load_corpus(path: str | Path, passes: bool = False) -> SweepData:
    """The corpus at ``path`` as :class:`analysis.load.SweepData`: ``sweep`` = the entry, ``cell_dir``
    = the cell run's id, ``repeat_group`` = entry, mode and degree (its repeats). With ``passes``, the
    runs of its later passes (:func:`corpus_passes`) join it as further repeats of the same
    configurations: a configuration's interval is then over the runs of every day it was measured."""
    from analysis.load import SweepData  # here: analysis loads pyarrow

    root = Path(path)
    roots = [root, *(corpus_passes(root) if passes else [])]
    cells = pd.concat([_entry_as_sweep(pd.read_parquet(r / "cells.parquet")) for r in roots], ignore_index=True)
    jobs = pd.concat([_entry_as_sweep(pd.read_parquet(r / "jobs.parquet")) for r in roots], ignore_index=True)
    if cells["cell_id"].duplicated().any():
        raise ValueError(f"{root}: a cell id is held twice among the corpus and its passes")
    cells["cell_dir"] = cells["cell_id"]
    cells["repeat_group"] = cells["sweep"] + ":" + cells["mode"] + ":x" + cells["degree"].astype(str)
    # A corpus run refused before it leased the GPU (``unfit``) records no GPU memory: its GPU model's,
    # as the other cells of that model recorded it.
    known = cells.groupby("gpu_name")["gpu_memory_mib"].max()
    cells["gpu_memory_mib"] = cells["gpu_memory_mib"].fillna(cells["gpu_name"].map(known))
    return SweepData(
        cells=cells,
        jobs=jobs,
        epochs=pd.concat([_optional(r, "epochs", _EPOCH_COLUMNS) for r in roots], ignore_index=True),
        telemetry=pd.concat([_optional(r, "telemetry", _TELEMETRY_COLUMNS) for r in roots], ignore_index=True),
        sweeps=tuple(str(s) for s in dict.fromkeys(cells["sweep"])),
    )


def load_measured(dirs: list[Path]) -> SweepData:
    """The sweeps and corpus folders under ``dirs`` as one :class:`analysis.load.SweepData` (a corpus
    folder read by :func:`load_corpus`, the rest by ``analysis.load.load_sweeps``).

    Raises:
        SweepDirError: a folder that is not a corpus holds no readable sweep (as ``analysis.load`` says).
    """
    from analysis.load import SweepData, SweepDirError, load_sweeps

    corpora = [d for d in dirs if is_corpus(d)]
    parts = [load_corpus(d) for d in corpora]
    sweeps = [d for d in dirs if d not in corpora]
    try:
        parts += [load_sweeps(sweeps)] if sweeps else []
    except SweepDirError:
        if not parts:  # nothing measured anywhere: as load_sweeps says
            raise
    if len(parts) == 1:
        return parts[0]

    def joined(name: str) -> pd.DataFrame:
        frames = [getattr(p, name) for p in parts if len(getattr(p, name))]
        return pd.concat(frames, ignore_index=True) if frames else getattr(parts[0], name)

    return SweepData(
        cells=joined("cells"),
        jobs=joined("jobs"),
        epochs=joined("epochs"),
        telemetry=joined("telemetry"),
        sweeps=tuple(s for p in parts for s in p.sweeps),
    )
