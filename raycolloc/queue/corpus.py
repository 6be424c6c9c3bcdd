"""The measured corpus as the queue's simulated GPUs read it: curves per workload and mode, solo
profiles, measured mixes, and every cell as the advisor's fit takes it.

The corpus (``corpus/`` of the repository: ``cells.parquet``, ``jobs.parquet``; how it was measured in
its README) holds real cells of one GPU model. A workload is named as a trace names it,
``model/dataset`` (from ``jobs.parquet``). Per workload and mode, a :class:`Curve` holds, at each
measured degree, the median over repeats of the cell's aggregate samples/s (its jobs' epoch-2 rates
summed), SM activity, GPU utilisation and power; ``unfit`` cells are left out (resnet152 x14, x16: no
rate was measured). A workload's memory is the largest per-process peak NVML saw of any of its jobs.

A workload's **profile alone** (what a policy knows of it) is the advisor's reading of its naive
degree-1 cells, medians over repeats: rate, SM activity, time busy (NVML utilisation: the corpus's
first cut keeps no GPM samples, so no SM occupancy or DRAM activity), power, PCIe and memory. This is
what the advisor would measure by profiling the workload alone, which a user's queue may do.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from raycolloc.advise.model import Candidate, Gpu, Slot
from raycolloc.advise.observe import Observation
from raycolloc.advise.profile import Profile, finite
from raycolloc.config_checks import ConfigError
from raycolloc.config_groups import QueueConfig
from raycolloc.mode_kinds import BASELINE_MODE, is_baseline
from raycolloc.node.mig.placement import gpu_model_of
from raycolloc.node.mig.profiles import UnknownGpuModel

if TYPE_CHECKING:  # pandas is imported where the corpus is read: the queue's commands import this module
    import pandas as pd

__all__ = ["CLASS_OF_DATASET", "Corpus", "CorpusError", "Curve", "MeasuredMix", "corpus_dir", "load_corpus"]

# A trace's size classes by the dataset's image size (tracegen's light, medium, heavy).
CLASS_OF_DATASET = {"cifar10": "light", "imagenet64": "medium", "imagenet": "heavy"}
SETTINGS = "measured corpus (naive degree-1 cells, medians over repeats)"


class CorpusError(ConfigError):
    """A corpus that cannot be read, or that lacks what a replay asks of it (the message says what)."""


def corpus_dir(queue: QueueConfig) -> Path:
    """The corpus ``queue.corpus`` names (null: the repository's ``corpus/``)."""
    return Path(queue.corpus) if queue.corpus else Path(__file__).resolve().parents[2] / "corpus"


@dataclass(frozen=True)
class Curve:
    """One workload in one mode at its measured degrees (ascending): each a median over the runs."""

    degrees: tuple[int, ...]
    agg_samples_per_s: tuple[float, ...]
    sm_active: tuple[float, ...]  # 0..1
    busy: tuple[float, ...]  # NVML utilisation, 0..1
    power_w: tuple[float, ...]
    runs: tuple[int, ...]


@dataclass(frozen=True)
class MeasuredMix:
    """A measured cell of different workloads: each job's workload and epoch-2 samples/s, and the cell's
    SM activity (0..1) and power."""

    cell_id: str
    mode: str
    workloads: tuple[str, ...]
    rates: tuple[float, ...]
    sm_active: float
    power_w: float


@dataclass(frozen=True)
class Corpus:
    """What :func:`load_corpus` read (module docstring)."""

    path: Path
    gpu_model: str  # the registered GPU model (``cluster.gpu_model``'s spelling)
    gpu: Gpu
    curves: dict[tuple[str, str], Curve]  # (workload, mode)
    job_mib: dict[str, float]
    solo: dict[str, Profile]
    mixes: tuple[MeasuredMix, ...]
    observations: tuple[Observation, ...]

    @property
    def workloads(self) -> tuple[str, ...]:
        """The workloads with a profile alone (naive degree-1 cells), sorted."""
        return tuple(sorted(self.solo))

    def curve(self, workload: str, mode: str) -> Curve:
        """The curve of ``workload`` under ``mode``.

        Raises:
            CorpusError: the corpus did not measure it (naming what it holds).
        """
        found = self.curves.get((workload, mode))
        if found is None:
            raise CorpusError(
                f"the corpus {self.path} holds no {mode} cells of {workload}; it holds: {', '.join(self.workloads)}"
            )
        return found

    def check(self, workload: str, what: str) -> None:
        """Refuse ``workload`` (``what`` names who asked) unless the corpus holds it."""
        if workload not in self.solo:
            raise CorpusError(
                f"{what}: workload {workload} is not in the measured corpus {self.path} "
                f"(queue.truth=corpus); it holds: {', '.join(self.workloads)}"
            )


def _median(values: pd.Series) -> float:
    known = [float(v) for v in values if finite(v) is not None]
    return statistics.median(known) if known else float("nan")


def _read(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    import pandas as pd

    try:
        cells = pd.read_parquet(path / "cells.parquet")
        jobs = pd.read_parquet(path / "jobs.parquet")
    except (OSError, ValueError) as exc:
        raise CorpusError(f"queue.corpus={str(path)!r}: no measured corpus there ({exc})") from None
    jobs = jobs.assign(key=jobs["model"] + "/" + jobs["dataset"])
    names = cells["gpu_name"].dropna().unique()
    if len(names) != 1:
        raise CorpusError(f"queue.corpus={str(path)!r}: one GPU model per corpus, found {list(names)}")
    return cells[cells["status"] == "ok"], jobs


def _curves(cells: pd.DataFrame, key: pd.Series) -> dict[tuple[str, str], Curve]:
    uniform = cells[cells["mix"].isna()].join(key, on="cell_id")
    out = {}
    for (workload, mode), group in uniform.groupby(["key", "mode"]):
        by = sorted(group.groupby("degree"), key=lambda g: int(g[0]))
        out[(str(workload), str(mode))] = Curve(
            degrees=tuple(int(d) for d, _ in by),
            agg_samples_per_s=tuple(_median(g["agg_samples_per_s"]) for _, g in by),
            sm_active=tuple(_median(g["sm_active_mean"]) / 100.0 for _, g in by),
            busy=tuple(_median(g["gpu_util_mean"]) / 100.0 for _, g in by),
            power_w=tuple(_median(g["power_mean_w"]) for _, g in by),
            runs=tuple(len(g) for _, g in by),
        )
    return out


def _profile(workload: str, solo: pd.DataFrame, mib: float, gpu: Gpu, batch: int) -> Profile:
    rate = _median(solo["agg_samples_per_s"])
    power = _median(solo["power_mean_w"])
    return Profile(
        workload=workload,
        settings=SETTINGS,
        gpu_name=gpu.name,
        gpu_memory_mib=gpu.memory_mib,
        backend="corpus",
        mode=BASELINE_MODE,
        cell_dirs=tuple(solo["cell_id"]),
        config_hash="",
        batch_size=batch,
        samples_per_s=rate,
        cpu_s_per_step=None,
        cpu_busy=0.0,
        sm_active=_median(solo["sm_active_mean"]) / 100.0,
        busy=_median(solo["gpu_util_mean"]) / 100.0,
        busy_source="NVML utilisation",
        sm_occupancy=None,
        dram_active=None,
        pcie_rx_bytes_s=finite(_median(solo["pcie_rx_mean_bytes_s"])),
        power_w=finite(power),
        energy_per_sample_j=finite(power / rate),
        peak_reserved_mib=None,
        peak_device_mib=mib,
        gpu_mem_used_mib=None,
        job_mem_mib=mib,
        mem_source="corpus (NVML per process, largest peak)",
        run_rates=tuple(float(r) for r in solo["agg_samples_per_s"]),
    )


def _observations(cells: pd.DataFrame, jobs: pd.DataFrame, solo: dict[str, Profile], gpu: Gpu) -> list[Observation]:
    """Every ok cell of profiled workloads as the advisor's fit takes it (repeats grouped by configuration)."""
    out = []
    for _, cell in cells.iterrows():
        rows = jobs[jobs["cell_id"] == cell["cell_id"]].sort_values("job_index")
        if rows.empty or not all(k in solo for k in rows["key"]):
            continue
        profiles = tuple(solo[k] for k in rows["key"])
        out.append(
            Observation(
                sweep=str(cell["entry"]),
                cell_id=str(cell["cell_id"]),
                label=str(cell["label"]),
                status="ok",
                candidate=Candidate(str(cell["mode"]), profiles, (Slot(),) * len(profiles)),
                gpu=gpu,
                job_samples_per_s=tuple(finite(r) for r in rows["epoch2_samples_per_s"]),
                agg_samples_per_s=finite(rows["epoch2_samples_per_s"].sum()),
                mem_used_mib=finite(cell["mem_used_max_mib"]),
                power_w=finite(cell["power_mean_w"]),
                sm_active=(finite(cell["sm_active_mean"]) or 0.0) / 100.0,
                energy_per_sample_j=finite(cell["energy_per_sample_j"]),
                profile_cell=int(cell["degree"]) == 1 and is_baseline(cell["mode"]),
                cell_dir=str(cell["cell_id"]),
                group=f"{cell['entry']}-{cell['mode']}-x{cell['degree']}",
            )
        )
    return out


@functools.lru_cache(maxsize=4)
def load_corpus(path: Path) -> Corpus:
    """Read the corpus at ``path`` (read once per process).

    Raises:
        CorpusError: no corpus there, or one of several GPU models or of an unknown one.
    """
    cells, jobs = _read(path)
    try:
        model = gpu_model_of(str(cells["gpu_name"].iloc[0]))
    except UnknownGpuModel as exc:
        raise CorpusError(f"queue.corpus={str(path)!r}: {exc}") from None
    gpu = Gpu(name=model.name, memory_mib=float(model.total_memory_mib), base_mib=0.0, cores=None)
    key = jobs.groupby("cell_id")["key"].first()
    curves = _curves(cells, key)
    job_mib = {str(k): float(g["peak_device_mem_mib"].max()) for k, g in jobs.groupby("key")}
    batch = {str(k): int(g["batch_size"].iloc[0]) for k, g in jobs.groupby("key")}
    alone = cells[cells["mode"].map(is_baseline) & (cells["degree"] == 1) & cells["mix"].isna()]
    solo = {
        str(workload): _profile(str(workload), runs, job_mib[str(workload)], gpu, batch[str(workload)])
        for workload, runs in alone.groupby(alone["cell_id"].map(key))
    }
    mixes = []
    for _, cell in cells[cells["mix"].notna()].iterrows():
        rows = jobs[jobs["cell_id"] == cell["cell_id"]].sort_values("job_index")
        mixes.append(
            MeasuredMix(
                str(cell["cell_id"]),
                str(cell["mode"]),
                tuple(str(k) for k in rows["key"]),
                tuple(float(r) for r in rows["epoch2_samples_per_s"]),
                float(cell["sm_active_mean"]) / 100.0,
                float(cell["power_mean_w"]),
            )
        )
    observations = tuple(_observations(cells, jobs, solo, gpu))
    return Corpus(path, model.name, gpu, curves, job_mib, solo, tuple(mixes), observations)
