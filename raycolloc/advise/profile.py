"""A workload alone on a GPU, as the advisor sees it: read from a measured degree-1 cell.

A :class:`Profile` is everything the advisor's model predicts from: the job's epoch-2 samples/s, the
CPU time its launching thread spends per step, the GPU's SM activity, occupancy, time busy, DRAM
and PCIe activity over the measured window, its power, and the device memory one such job needs.
It is read from the four tables of one ok degree-1 uniform cell (a naive one where there is one:
under MPS, NVML does not attribute memory to the client's process).

Memory per job is NVML's view of the job's process where there is one (context included), else
PyTorch's reserved peak plus the GPU model's per-process context overhead (:class:`GpuCosts`,
measured once per GPU model from a naive solo cell and cached under ``out_dir``).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycolloc.mode_kinds import is_baseline, modes_where
from raycolloc.results.stats import Interval, bounds, mean_interval

if TYPE_CHECKING:  # pandas at run time only where tables are read: the queue's commands import this module
    import pandas as pd

__all__ = [
    "GpuCosts",
    "Profile",
    "combine",
    "finite",
    "gpu_costs_in",
    "load_costs",
    "profile_of",
    "profile_key",
    "profiles_in",
    "save_costs",
    "solo_cells",
]

_SETTING_COLUMNS = ("batch_size", "compile", "amp", "channels_last", "data_source", "data_placement")


@dataclass(frozen=True)
class GpuCosts:
    """What a GPU model costs beyond each job's own memory (MiB), measured once and cached.

    ``context_mib``: a process's device memory beyond PyTorch's reserved pool (its CUDA context,
    cuBLAS/cuDNN handles and workspaces): NVML's per-process memory minus ``peak_mem_reserved_mib``
    of a naive solo job. ``base_mib``: memory the GPU reports used that no job holds (the driver's
    own reservations): the cell's ``mem_used_max_mib`` minus the job's NVML memory.
    """

    gpu_name: str
    context_mib: float | None
    base_mib: float
    source: str


@dataclass(frozen=True)
class Profile:
    """One workload trained alone on one GPU: the advisor's input for every prediction.

    Read from one solo cell, or combined from several (``cell_dirs``: naive and MPS solos, repeats).

    Fractions (``sm_active``, ``busy``, ``dram_active``, ``sm_occupancy``, ``cpu_busy``) are 0..1.
    ``busy`` is the share of time any kernel ran (GPM's graphics-engine activity, else NVML's
    utilisation; SM activity where neither was sampled: ``busy_source`` says which). ``job_mem_mib``
    is the device memory one such job holds, its context included (``mem_source`` says how it was
    known).
    """

    workload: str
    settings: str
    gpu_name: str
    gpu_memory_mib: float
    backend: str
    mode: str
    cell_dirs: tuple[str, ...]
    config_hash: str
    batch_size: int
    samples_per_s: float
    cpu_s_per_step: float | None
    cpu_busy: float
    sm_active: float
    busy: float
    busy_source: str
    sm_occupancy: float | None
    dram_active: float | None
    pcie_rx_bytes_s: float | None
    power_w: float | None
    energy_per_sample_j: float | None
    peak_reserved_mib: float | None
    peak_device_mib: float | None
    gpu_mem_used_mib: float | None
    job_mem_mib: float
    mem_source: str
    # The solo rate's 95% relative half-width (0.05 = +-5%): the cell's within-run interval
    # (agg_rate_low/high), or the t-interval over the runs combined; None: one run with no spread known.
    rate_rel_hw: float | None = None
    # The rates of the runs combined into this one (empty: one run, ``samples_per_s``).
    run_rates: tuple[float, ...] = ()
    # Each run's SM activity per sample (empty: one run), and the 95% relative half-width of their
    # mean (None: fewer than two runs). A slow run shows proportionally less activity: per sample the
    # runs agree far better than their rates (corpus: CV 0.2-6% against 0.4-23%), and a prediction
    # where a resource saturates rests on it, not on the rate (model.baseline_share).
    run_activity: tuple[float, ...] = ()
    activity_rel_hw: float | None = None
    # Under MPS past saturation, the workload's own course, measured by one probe cell at a high degree
    # (``model.calibrate_mps``): each client's rate times (offered SM activity / capacity) ** this.
    # None: no probe (the fitted model alone, its thrash term included).
    mps_past: float | None = None
    mps_probe: tuple[int, float] | None = None  # the probe: its degree and measured aggregate samples/s

    @property
    def runs(self) -> tuple[float, ...]:
        return self.run_rates or (self.samples_per_s,)

    @property
    def activities(self) -> tuple[float, ...]:
        """SM activity per sample of each run combined (one run: its own)."""
        return self.run_activity or ((self.sm_active / self.samples_per_s,) if self.samples_per_s > 0 else ())


def finite(value: Any) -> float | None:
    """A finite float, or None for missing values (NaN, None, pandas NA): any value is tried."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def settings_of(job: pd.Series) -> str:
    """The trainer settings a profile is only valid for, as one comparable string."""
    return " ".join(f"{c}={job.get(c)}" for c in _SETTING_COLUMNS)


def profile_key(gpu_name: str, workload: str, settings: str) -> tuple[str, str, str]:
    """Profiles are looked up by GPU model, workload and trainer settings."""
    return gpu_name, workload, settings


def solo_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """Ok degree-1 uniform cells in naive or MPS mode (the cells a profile can be read from)."""
    return cells[
        (cells["status"] == "ok")
        & cells["mix"].isna()
        & (cells["degree"] == 1)
        & cells["mode"].isin(modes_where(lambda k: k.shares_memory))
        & cells["agg_samples_per_s"].notna()
    ]


def _window_means(cell: pd.Series, telemetry: pd.DataFrame) -> dict[str, float | None]:
    """Means of the GPU-scope samples inside the cell's measured window (the epochs that count); a
    window shorter than the sampler's period, with no sample inside, takes the nearest sample on each
    side of it (a loaded machine once sampled no 256-sample window of a simulated cell)."""
    start, end = finite(cell.get("measured_start_ts")), finite(cell.get("measured_end_ts"))
    if telemetry.empty or start is None or end is None:
        return {}
    scoped = telemetry[telemetry["scope"] == "gpu"]
    gpu = scoped[(scoped["ts"] >= start) & (scoped["ts"] <= end)]
    if gpu.empty:
        before, after = scoped[scoped["ts"] < start], scoped[scoped["ts"] > end]
        import pandas as pd

        gpu = pd.concat([before.nlargest(1, "ts"), after.nsmallest(1, "ts")])
    return {
        c: finite(gpu[c].mean())
        for c in ("sm_active", "sm_occupancy", "dram_active", "gr_engine_active", "gpu_util", "pcie_rx_bytes_s")
        if c in gpu
    }


def profile_of(
    cell: pd.Series, jobs: pd.DataFrame, epochs: pd.DataFrame, telemetry: pd.DataFrame, costs: GpuCosts | None
) -> Profile:
    """The profile of one ok degree-1 cell (its rows of the four tables).

    Raises:
        ValueError: the cell is not an ok solo cell with a throughput and SM activity.
    """
    if len(jobs) != 1 or cell.get("status") != "ok" or finite(cell.get("agg_samples_per_s")) is None:
        raise ValueError(f"cell {cell.get('cell_id')} is not an ok solo cell with a measured throughput")
    job = jobs.iloc[0]
    measured = epochs[~epochs["warmup"].astype(bool)]
    steps = measured["steps"].sum() if "steps" in measured else 0
    cpu = finite(measured["thread_cpu_s"].sum()) if steps and measured["thread_cpu_s"].notna().all() else None
    rate = float(cell["agg_samples_per_s"])
    batch = int(job["batch_size"])
    cpu_step = cpu / steps if cpu is not None and steps else None
    window = _window_means(cell, telemetry)
    if window.get("gpu_util") is None and window.get("gr_engine_active") is None:
        # No telemetry kept (the first corpus): the cell's own mean of NVML's utilisation over its window.
        window["gpu_util"] = finite(cell.get("gpu_util_mean"))
    sm = finite(cell.get("sm_active_mean"))
    if sm is None:
        sm = window.get("sm_active")
    busy, source = next(
        ((v, k) for k in ("gr_engine_active", "gpu_util") if (v := window.get(k)) is not None), (sm, "sm_active")
    )
    if busy is None:
        raise ValueError(f"cell {cell.get('cell_id')} has no SM activity nor utilisation (telemetry off?): no profile")
    if sm is None:
        # Basic NVML (no GPM, no DCGM: an A100 without DCGM) samples no SM activity: the share of time a
        # kernel ran stands in for it, an upper bound (MPS gains are then predicted low, never high).
        sm, source = busy, f"{source}, also for SM activity (none sampled)"
    reserved, device = finite(job.get("peak_mem_reserved_mib")), finite(job.get("peak_device_mem_mib"))
    used = finite(cell.get("mem_used_max_mib"))
    job_mem, mem_source = _job_memory(reserved, device, used, costs, cell.get("mode"))
    return Profile(
        workload=str(cell["workload"]),
        settings=settings_of(job),
        gpu_name=str(cell["gpu_name"]),
        gpu_memory_mib=float(cell["gpu_memory_mib"]),
        backend=str(cell.get("backend")),
        mode=str(cell["mode"]),
        cell_dirs=(str(cell.get("cell_dir", "")),),
        config_hash=str(cell.get("config_hash")),
        batch_size=batch,
        samples_per_s=rate,
        cpu_s_per_step=cpu_step,
        # The launching thread's share of one core: CPU time per step over the step's wall time.
        cpu_busy=min(1.0, cpu_step * rate / batch) if cpu_step is not None and batch > 0 else 0.0,
        sm_active=sm / 100.0,
        busy=max(busy, sm) / 100.0,
        busy_source=source,
        sm_occupancy=_frac(window.get("sm_occupancy")),
        dram_active=_frac(window.get("dram_active")),
        pcie_rx_bytes_s=window.get("pcie_rx_bytes_s") or finite(cell.get("pcie_rx_mean_bytes_s")),
        power_w=finite(cell.get("power_mean_w")),
        energy_per_sample_j=finite(cell.get("energy_per_sample_j")),
        peak_reserved_mib=reserved,
        peak_device_mib=device,
        gpu_mem_used_mib=used,
        job_mem_mib=job_mem,
        mem_source=mem_source,
        rate_rel_hw=_rel_hw(bounds(rate, finite(cell.get("agg_rate_low")), finite(cell.get("agg_rate_high")))),
    )


def _rel_hw(interval: Interval) -> float | None:
    return interval.rel_half_width if interval.known else None


def _frac(percent: float | None) -> float | None:
    return None if percent is None else percent / 100.0


def _job_memory(
    reserved: float | None, device: float | None, used: float | None, costs: GpuCosts | None, mode: object
) -> tuple[float, str]:
    """One job's device memory, context included, from the best view the cell has."""
    if device is not None:
        return device, "NVML per-process memory"
    if reserved is not None and costs is not None and costs.context_mib is not None:
        return reserved + costs.context_mib, f"PyTorch reserved peak + context overhead of {costs.gpu_name}"
    if used is not None:
        base = costs.base_mib if costs is not None else 0.0
        # Alone on the GPU, everything used but the driver's base is this job's (and, under MPS, its server's).
        return used - base, f"GPU memory used by the solo {mode} cell"
    raise ValueError(
        "the cell has no memory measurement (no NVML per-process memory, reserved peak or GPU memory used)"
    )


def gpu_costs_in(cells: pd.DataFrame, jobs: pd.DataFrame) -> dict[str, GpuCosts]:
    """Per GPU model, its costs from the naive solo cells that show both PyTorch's and NVML's view
    of the job's memory (median over such cells)."""
    solo = solo_cells(cells)
    solo = solo[solo["mode"].map(is_baseline)]
    merged = solo.merge(jobs, on=["sweep", "cell_id"], suffixes=("", "_job"))
    out: dict[str, GpuCosts] = {}
    for gpu, group in merged.groupby("gpu_name"):
        ctx = (group["peak_device_mem_mib"] - group["peak_mem_reserved_mib"]).dropna()
        base = (group["mem_used_max_mib"] - group["peak_device_mem_mib"]).dropna()
        if base.empty:
            continue
        out[str(gpu)] = GpuCosts(
            str(gpu),
            finite(ctx.median()) if not ctx.empty else None,
            max(0.0, float(base.median())),
            f"{len(group)} naive solo cell(s)",
        )
    return out


def _cost_file(out_dir: str | Path, gpu_name: str) -> Path:
    return Path(out_dir) / "advise" / "gpu" / (re.sub(r"[^A-Za-z0-9_.-]+", "_", gpu_name) + ".json")


def load_costs(out_dir: str | Path, gpu_name: str) -> GpuCosts | None:
    """The cached costs of a GPU model under ``out_dir`` (None: not measured yet)."""
    path = _cost_file(out_dir, gpu_name)
    if not path.is_file():
        return None
    return GpuCosts(**json.loads(path.read_text()))


def save_costs(out_dir: str | Path, costs: GpuCosts) -> Path:
    """Cache a GPU model's costs under ``out_dir`` (written atomically); returns the file."""
    path = _cost_file(out_dir, costs.gpu_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(asdict(costs), indent=1))
    tmp.replace(path)
    return path


def combine(profiles: list[Profile]) -> Profile:
    """One profile from several solo runs of the same workload and settings (naive and MPS solos,
    repeats): the median rate, and the activities per sample averaged over the runs and scaled to it
    (a run slowed from outside, e.g. by its CPU, shows proportionally less activity: per sample, the
    runs agree). Memory: the largest (the safe side), from NVML's per-process view where one has it.

    A single run of a degree-1 cell spreads by about +-15% on the study's GPU machines
    (docs/measurements.md, fifth session); every prediction scales with the profile's rate.
    """
    if len(profiles) == 1:
        return profiles[0]
    # Every run once, however the inputs were combined before (a new solo with a combined history).
    rates = sorted(r for p in profiles for r in p.runs)
    rate = statistics.median(rates)

    def per_sample(name: str) -> float | None:
        # Weighted by the runs each input holds: a combined history counts as its runs, not as one.
        values = [(len(p.runs), v / p.samples_per_s) for p in profiles if (v := getattr(p, name)) is not None]
        return rate * sum(n * v for n, v in values) / sum(n for n, _ in values) if values else None

    # Each input as many times as the runs it holds (a history of five against one new solo).
    cpu = sorted(v for p in profiles if (v := p.cpu_s_per_step) is not None for _ in p.runs)
    cpu_step = cpu[len(cpu) // 2] if cpu else None
    powers = [v for p in profiles if (v := p.power_w) is not None for _ in p.runs]
    memory = max(profiles, key=lambda p: (p.peak_device_mib is not None, p.job_mem_mib))
    activity = tuple(a for p in profiles for a in p.activities)
    first = profiles[0]
    return Profile(
        workload=first.workload,
        settings=first.settings,
        gpu_name=first.gpu_name,
        gpu_memory_mib=first.gpu_memory_mib,
        backend=first.backend,
        mode="+".join(dict.fromkeys(p.mode for p in profiles)),
        cell_dirs=tuple(d for p in profiles for d in p.cell_dirs),
        config_hash=first.config_hash,
        batch_size=first.batch_size,
        samples_per_s=rate,
        cpu_s_per_step=cpu_step,
        cpu_busy=min(1.0, cpu_step * rate / first.batch_size) if cpu_step is not None and first.batch_size else 0.0,
        sm_active=per_sample("sm_active") or 0.0,
        busy=per_sample("busy") or 0.0,
        busy_source=first.busy_source,
        sm_occupancy=per_sample("sm_occupancy"),
        dram_active=per_sample("dram_active"),
        pcie_rx_bytes_s=per_sample("pcie_rx_bytes_s"),
        power_w=sum(powers) / len(powers) if powers else None,
        energy_per_sample_j=sum(powers) / len(powers) / rate if powers else None,
        peak_reserved_mib=memory.peak_reserved_mib,
        peak_device_mib=memory.peak_device_mib,
        gpu_mem_used_mib=memory.gpu_mem_used_mib,
        job_mem_mib=memory.job_mem_mib,
        mem_source=memory.mem_source,
        # Across runs the spread of their rates (it contains each run's own noise).
        rate_rel_hw=_rel_hw(mean_interval(rates)),
        run_rates=tuple(rates),
        run_activity=activity,
        activity_rel_hw=_rel_hw(mean_interval(activity)) if len(activity) > 1 else None,
    )


def profiles_in(
    cells: pd.DataFrame, jobs: pd.DataFrame, epochs: pd.DataFrame, telemetry: pd.DataFrame, costs: dict[str, GpuCosts]
) -> dict[tuple[str, str, str], Profile]:
    """One profile per (GPU model, workload, settings): every ok solo cell of it (naive and MPS,
    every repeat and sweep) combined (:func:`combine`)."""
    found: dict[tuple[str, str, str], list[Profile]] = {}
    for _, cell in solo_cells(cells).iterrows():

        def rows(frame: pd.DataFrame, cell: pd.Series = cell) -> pd.DataFrame:
            return frame[(frame["sweep"] == cell["sweep"]) & (frame["cell_id"] == cell["cell_id"])]

        job_rows = rows(jobs)
        if len(job_rows) != 1:
            continue
        try:
            profile = profile_of(cell, job_rows, rows(epochs), rows(telemetry), costs.get(str(cell["gpu_name"])))
        except ValueError:
            continue
        found.setdefault(profile_key(profile.gpu_name, profile.workload, profile.settings), []).append(profile)
    return {key: combine(sorted(runs, key=lambda p: not is_baseline(p.mode))) for key, runs in found.items()}
