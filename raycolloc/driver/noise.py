"""What explains a noisy cell, summarised from its telemetry and epochs into its rows (the columns
``raycolloc.results.rows`` lists under "What explains noise"; ``analysis.attribution`` names the
likely cause from them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raycolloc.node.gpu.clock_events import SLOWING
from raycolloc.results.rows import EpochRow, JobRow, TelemetryRow

__all__ = ["NOISE_CELL_COLUMNS", "cell_noise", "job_noise"]

NOISE_CELL_COLUMNS = (
    "sm_clock_mean_mhz",
    "sm_clock_min_mhz",
    "clock_events",
    "clock_event_share",
    "temperature_max_c",
    "power_limit_w",
    "load_avg_mean",
    "foreign_gpu_procs",
    "core_mhz_min",
    "invol_switches_per_s_max",
    "cpu_wait_share_max",
    "cpu_ms_per_step_max",
)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def job_noise(rows: Sequence[TelemetryRow], job_index: int, e2: EpochRow | None) -> dict[str, float | None]:
    """A job's epoch-2 core clock (the mean of the steward's samples of its cores inside the epoch),
    its training thread's involuntary context switches per second of the epoch, the share of the
    epoch it waited for a core (the run delay between the first and last samples inside it), and the
    training thread's CPU time per step (ms)."""
    if e2 is None:
        return dict.fromkeys(
            ("epoch2_core_mhz", "epoch2_invol_switches_per_s", "epoch2_cpu_wait_share", "epoch2_cpu_ms_per_step")
        )
    inside = [r for r in rows if r.scope == "process" and r.job_index == job_index and e2.start_ts <= r.ts <= e2.end_ts]
    mhz = [float(r.proc_core_mhz) for r in inside if r.proc_core_mhz is not None]
    delay = sorted((r.ts, float(r.proc_run_delay_s)) for r in inside if r.proc_run_delay_s is not None)
    switches = e2.involuntary_switches
    waited = (delay[-1][1] - delay[0][1]) / (delay[-1][0] - delay[0][0]) if len(delay) > 1 else None
    return {
        "epoch2_core_mhz": _mean(mhz),
        "epoch2_invol_switches_per_s": switches / e2.wall_s if switches is not None and e2.wall_s > 0 else None,
        "epoch2_cpu_wait_share": None if waited is None else min(1.0, max(0.0, waited)),
        "epoch2_cpu_ms_per_step": 1000.0 * e2.thread_cpu_s / e2.steps
        if e2.thread_cpu_s is not None and e2.steps
        else None,
    }


def _events(gpu: Sequence[TelemetryRow]) -> tuple[str | None, float | None]:
    """The clock-event reasons seen (sorted, comma-joined; None: never known) and the share of the
    samples in which a cap (:data:`SLOWING`) held the clocks."""
    known = [r.clock_events for r in gpu if r.clock_events is not None]
    if not known:
        return None, None
    seen = sorted({name for events in known for name in events.split(",") if name})
    slowed = sum(1 for events in known if SLOWING & set(events.split(",")))
    return ",".join(seen), slowed / len(known)


def cell_noise(
    rows: Sequence[TelemetryRow], jobs: Sequence[JobRow], start: float | None, end: float | None
) -> dict[str, Any]:
    """The cell's noise columns over its measured window ``start..end`` (all None without one)."""
    if start is None or end is None:
        return dict.fromkeys(NOISE_CELL_COLUMNS)
    gpu = [r for r in rows if r.scope == "gpu" and start <= r.ts <= end]

    def vals(key: str) -> list[float]:
        return [float(v) for r in gpu if (v := getattr(r, key)) is not None]

    events, share = _events(gpu)
    sm, temp, limit = vals("sm_clock_mhz"), vals("temperature_c"), vals("power_limit_w")
    foreign = [int(r.foreign_gpu_procs) for r in gpu if r.foreign_gpu_procs is not None]
    mhz = [j.epoch2_core_mhz for j in jobs if j.epoch2_core_mhz is not None]
    switches = [j.epoch2_invol_switches_per_s for j in jobs if j.epoch2_invol_switches_per_s is not None]
    waits = [j.epoch2_cpu_wait_share for j in jobs if j.epoch2_cpu_wait_share is not None]
    per_step = [j.epoch2_cpu_ms_per_step for j in jobs if j.epoch2_cpu_ms_per_step is not None]
    return {
        "sm_clock_mean_mhz": _mean(sm),
        "sm_clock_min_mhz": min(sm) if sm else None,
        "clock_events": events,
        "clock_event_share": share,
        "temperature_max_c": max(temp) if temp else None,
        "power_limit_w": min(limit) if limit else None,
        "load_avg_mean": _mean(vals("load_avg_1m")),
        "foreign_gpu_procs": max(foreign) if foreign else None,
        "core_mhz_min": min(mhz) if mhz else None,
        "invol_switches_per_s_max": max(switches) if switches else None,
        "cpu_wait_share_max": max(waits) if waits else None,
        "cpu_ms_per_step_max": max(per_step) if per_step else None,
    }
