"""A cell's result rows, built from what its run recorded (typed job states, telemetry, timings)."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from raycolloc.config import first_run_hash
from raycolloc.driver.environment import environment
from raycolloc.driver.noise import cell_noise, job_noise
from raycolloc.node.gpu.backend import GpuInfo
from raycolloc.results.rows import CellRow, EpochRow, JobRow, TelemetryRow
from raycolloc.results.stats import CV_UNSTABLE, Interval, sum_interval
from raycolloc.spec import NEVER_STARTED, CellSpec, CellStatus, JobState, JobStatus

__all__ = ["CellRecord", "cell_row", "epoch_interval", "job_rows", "rate_spread", "window_energy", "window_stats"]


@dataclass
class CellRecord:
    """What one run of a cell recorded, in the driver: the inputs of its rows."""

    cell: CellSpec
    status: CellStatus = "ok"
    reason: str | None = None
    gpu: GpuInfo | None = None
    node_id: str | None = None
    backend: str | None = None
    telemetry_source: str = "off"
    started_at: float = field(default_factory=time.time)
    lease_wait_s: float | None = None
    lane_setup_s: float | None = None
    prepare_s: float | None = None
    setup_s: float | None = None
    sampler_start_s: float | None = None
    teardown_s: float | None = None
    reserved_cpus: str | None = None  # the node's cores kept for its own processes (node/reserve.py)
    overlapping_cells: int | None = None  # other cells of the node measuring meanwhile (driver/side_by_side.py)
    isolated: bool | None = None  # measured with cluster.isolate_measurement
    states: dict[int, JobState] = field(default_factory=dict)
    telemetry: list[TelemetryRow] = field(default_factory=list)


def _process_stats(rec: CellRecord) -> dict[int, tuple[float | None, float | None]]:
    """Per job: the peak GPU memory and mean SM activity of its process, from the steward's process
    samples (what is known of a script without its cooperation)."""
    out: dict[int, tuple[float | None, float | None]] = {}
    for job in rec.cell.jobs:
        rows = [r for r in rec.telemetry if r.scope == "process" and r.job_index == job.index]
        mem = [r.proc_gpu_mem_mib for r in rows if r.proc_gpu_mem_mib is not None]
        sm = [r.proc_sm_util for r in rows if r.proc_sm_util is not None]
        out[job.index] = (max(mem) if mem else None, sum(sm) / len(sm) if sm else None)
    return out


def job_rows(rec: CellRecord) -> tuple[list[JobRow], list[EpochRow]]:
    """One row per job (a job that never reported is an error row with the cell's reason) and
    its epochs."""
    jobs, epochs = [], []
    procs = _process_stats(rec)
    for job in rec.cell.jobs:
        never: JobStatus = "skipped" if rec.status in NEVER_STARTED else "error"
        state = rec.states.get(job.index) or JobState().failed(never, rec.reason or "not started")
        info, eps = state.info, state.epochs
        epochs.extend(eps)
        measured = [e for e in eps if not e.warmup]
        e1 = next((e for e in eps if e.epoch == 1), None)
        e2 = next((e for e in eps if e.epoch == 2), None)
        peaks = [e.peak_mem_allocated_mib for e in eps if e.peak_mem_allocated_mib is not None]
        reserved = [e.peak_mem_reserved_mib for e in eps if e.peak_mem_reserved_mib is not None]
        script = job.workload.as_written  # measured from outside: its life, not raycolloc's epochs
        lifetime = info.ended_ts - info.started_ts if info.started_ts and info.ended_ts else None
        # The most device memory the GPU's driver attributed to the process: sampled, or read at the end.
        device_mem = [m for m in (procs[job.index][0], info.nvml_mem_mib) if m is not None]
        jobs.append(
            JobRow(
                cell_id=rec.cell.cell_id,
                job_index=job.index,
                job_name=job.name,
                workload=job.workload.name,
                kind=job.kind,
                model=job.workload.model or None,
                dataset=job.workload.dataset or None,
                status=state.status,
                error=state.error,
                pid=info.pid,
                actor_pid=info.actor_pid,
                hostname=info.hostname,
                gpu_uuid=rec.gpu.uuid if rec.gpu else None,
                mig_uuid=info.mig_uuid,
                mig_profile=info.mig_profile,
                cuda_visible_devices=info.cuda_visible_devices,
                mps_pipe_dir=info.mps_pipe_dir,
                cpus=info.cpus,
                mps_client=info.mps_client,
                mps_server_pid=info.mps_server_pid,
                mps_check_error=info.mps_check_error,
                batch_size=None if script else job.batch_size,
                epochs=(len(eps) or None) if script else job.epochs,
                epoch_samples=None if script else job.epoch_samples,
                epoch_time_s=job.epoch_time_s,
                min_epoch_s=job.min_epoch_s,
                samples=sum(e.samples or 0 for e in eps) if eps else None,
                params=info.params,
                spawn=info.spawn,
                spawn_s=info.spawn_s,
                import_s=info.import_s,
                cuda_init_s=info.cuda_init_s,
                model_s=info.model_s,
                data_s=info.data_s,
                setup_s=info.setup_s,
                # Idle between its warm-up and its first measured epoch: the barrier (and the calls around it).
                barrier_wait_s=e2.start_ts - e1.end_ts if e1 and e2 and not script else None,
                compile_s=info.compile_s,
                # A script's total is its process's life, start to exit; a raycolloc job's, its epochs.
                total_s=lifetime if script else (sum(e.wall_s for e in eps) if eps else None),
                measured_s=sum(e.wall_s for e in measured) if measured else None,
                epoch2_s=e2.wall_s if e2 else None,
                epoch2_samples_per_s=e2.samples_per_s if e2 else None,
                epoch2_rate_low=e2.rate_low if e2 else None,
                epoch2_rate_high=e2.rate_high if e2 else None,
                epoch2_rate_cv=e2.rate_cv if e2 else None,
                peak_mem_allocated_mib=max(peaks) if peaks else None,
                peak_mem_reserved_mib=max(reserved) if reserved else None,
                nvml_mem_mib=info.nvml_mem_mib,
                peak_device_mem_mib=max(device_mem) if device_mem else None,
                started_ts=info.started_ts,
                ended_ts=info.ended_ts,
                exit_code=info.exit_code,
                proc_sm_util_mean=procs[job.index][1],
                **job_noise(rec.telemetry, job.index, e2),
                compile=job.trainer.compile,
                amp=job.trainer.amp,
                channels_last=job.trainer.channels_last,
                allocator=job.trainer.allocator,
                data_source=job.data.source,
                data_placement=job.data.placement,
            )
        )
    return jobs, epochs


def _counter_at(samples: Sequence[tuple[float, float]], ts: float) -> float | None:
    """A cumulative counter's value at ``ts``, interpolated between the samples around it."""
    before = [s for s in samples if s[0] <= ts]
    after = [s for s in samples if s[0] >= ts]
    if not before or not after:
        return None
    (t0, v0), (t1, v1) = before[-1], after[0]
    return v0 if t1 == t0 else v0 + (v1 - v0) * (ts - t0) / (t1 - t0)


def window_energy(
    rows: Sequence[TelemetryRow], start: float | None, end: float | None
) -> tuple[float | None, float | None]:
    """Energy (J) and mean power (W) of the GPU over ``start..end``; they always agree:
    energy = power x (end - start).

    Energy is the GPU's cumulative counter interpolated at the window's two ends (so a window shorter
    than the sampling interval still has one). Without a counter around both ends, the mean of the
    power samples inside the window gives the power, and the energy follows from it.
    """
    if start is None or end is None or end <= start:
        return None, None
    gpu = sorted((r for r in rows if r.scope == "gpu"), key=lambda r: r.ts)
    counter = [(r.ts, float(r.energy_mj)) for r in gpu if r.energy_mj is not None]
    e0, e1 = _counter_at(counter, start), _counter_at(counter, end)
    if e0 is not None and e1 is not None:
        energy = (e1 - e0) / 1000.0
        return energy, energy / (end - start)
    power = [float(r.power_w) for r in gpu if start <= r.ts <= end and r.power_w is not None]
    if not power:
        return None, None
    mean = sum(power) / len(power)
    return mean * (end - start), mean


def _overlap(spans: Sequence[tuple[float, float]]) -> float | None:
    """How long every span ran at once (0 if some never met)."""
    return max(0.0, min(b for _, b in spans) - max(a for a, _ in spans)) if spans else None


def _sum(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if values and len(known) == len(values) else None


def window_stats(rows: Sequence[TelemetryRow], start: float | None, end: float | None) -> dict[str, Any]:
    """Summaries of the GPU-level telemetry over the measured window ``start..end``.

    Energy and mean power come from :func:`window_energy` (they always agree); the other columns
    summarise the samples inside the window.
    """
    if start is None or end is None:
        return dict.fromkeys(
            (
                "sm_active_mean",
                "sm_active_max",
                "gpu_util_mean",
                "mem_used_max_mib",
                "energy_j",
                "power_mean_w",
                "pcie_rx_mean_bytes_s",
                "pcie_tx_mean_bytes_s",
            )
        )
    gpu = [r for r in rows if r.scope == "gpu" and start <= r.ts <= end]

    def vals(key: str) -> list[float]:
        return [float(v) for r in gpu if (v := getattr(r, key)) is not None]

    def mean(key: str) -> float | None:
        v = vals(key)
        return sum(v) / len(v) if v else None

    energy_j, power_w = window_energy(rows, start, end)
    sm, mem = vals("sm_active"), vals("mem_used_mib")
    return {
        "sm_active_mean": mean("sm_active"),
        "sm_active_max": max(sm) if sm else None,
        "gpu_util_mean": mean("gpu_util"),
        "mem_used_max_mib": max(mem) if mem else None,
        "energy_j": energy_j,
        "power_mean_w": power_w,
        "pcie_rx_mean_bytes_s": mean("pcie_rx_bytes_s"),
        "pcie_tx_mean_bytes_s": mean("pcie_tx_bytes_s"),
    }


def epoch_interval(e: EpochRow) -> Interval | None:
    """An epoch's rate with its within-run interval (from its windows); None without one."""
    if e.samples_per_s is None or e.rate_low is None or e.rate_high is None:
        return None
    return Interval(e.samples_per_s, e.rate_low, e.rate_high, e.windows or 0, "windows")


def rate_spread(e2: Sequence[EpochRow], mixed: bool) -> tuple[Interval | None, float | None]:
    """The cell's within-run spread from its jobs' epoch-2 windows: the interval of
    ``agg_samples_per_s`` (the jobs' intervals summed, as their rates are; None for a mix, or unless
    every job's epoch 2 has one) and the largest of their coefficients of variation."""
    parts = [epoch_interval(e) for e in e2]
    known = [p for p in parts if p is not None]
    agg = sum_interval(known) if known and len(known) == len(parts) and not mixed else None
    cvs = [e.rate_cv for e in e2 if e.rate_cv is not None]
    return agg, max(cvs) if cvs else None


def _cell_status(rec: CellRecord, jobs: Sequence[JobRow]) -> CellStatus:
    n_ok = sum(1 for j in jobs if j.status == "ok")
    if rec.status != "ok" or n_ok == len(jobs):
        return rec.status
    if n_ok:
        return "partial"
    failed = {j.status for j in jobs}
    return "oom" if failed == {"oom"} else "hang" if failed == {"hang"} else "error"


def cell_row(rec: CellRecord, jobs: Sequence[JobRow], epochs: Sequence[EpochRow]) -> CellRow:
    """The cell's one row: status, GPU, where its time went, the measured window's aggregates."""
    cell, gpu = rec.cell, rec.gpu
    measured = [e for e in epochs if not e.warmup]
    e2 = [e for e in measured if e.epoch == 2]
    start = min((e.start_ts for e in measured), default=None)
    end = max((e.end_ts for e in measured), default=None)
    spans: dict[int, tuple[float, float]] = {}  # job -> (first measured start, last measured end)
    for e in measured:
        a, b = spans.get(e.job_index, (e.start_ts, e.end_ts))
        spans[e.job_index] = (min(a, e.start_ts), max(b, e.end_ts))
    lives = [(begun, gone) for j in jobs if (begun := j.started_ts) is not None and (gone := j.ended_ts) is not None]
    lifetime_overlap = _overlap(lives) if len(lives) == len(jobs) else None
    makespan = (end - start) if start is not None and end is not None else None
    # The cell's whole training, warm-up included: from the first epoch's start to the last one's end.
    first = min((e.start_ts for e in epochs), default=None)
    last = max((e.end_ts for e in epochs), default=None)
    if start is None and cell.scripted and lives:
        # Scripts without epoch marks: the makespan is from the first start to the last exit; the
        # measured window (telemetry means) is where all of them ran at once, if they did.
        first, last = min(a for a, _ in lives), max(b for _, b in lives)
        makespan = last - first
        start, end = (max(a for a, _ in lives), min(b for _, b in lives)) if lifetime_overlap else (first, last)
    total = (last - first) if first is not None and last is not None else None
    reason = rec.reason or "; ".join(f"job {j.job_index}: {j.error}" for j in jobs if j.error) or None
    waits = [j.barrier_wait_s for j in jobs if j.barrier_wait_s is not None]
    finished_at = time.time()
    stats = window_stats(rec.telemetry, start, end)
    mixed = cell.mix_name is not None
    samples = _sum([e.samples for e in measured])  # whole samples: the sum of ints is one
    measured_samples = None if samples is None else int(samples)
    energy_j = stats["energy_j"]
    agg, rate_cv = rate_spread(e2, mixed)
    cfg = cell.config
    return CellRow(
        cell_id=cell.cell_id,
        label=cell.label,
        config_hash=cell.config_hash,
        repeat=cfg.repeat,
        repeat_group=first_run_hash(cfg) if cfg.repeat else cell.config_hash,
        status=_cell_status(rec, jobs),
        reason=reason,
        mode=cell.mode,
        degree=cell.degree,
        workload=cell.workloads,
        mix=cell.mix_name,
        gpu_uuid=gpu.uuid if gpu else None,
        gpu_name=gpu.name if gpu else None,
        gpu_index=gpu.index if gpu else None,
        gpu_memory_mib=gpu.memory_mib if gpu else None,
        gpu_sm_count=gpu.sm_count if gpu else None,
        node_id=rec.node_id,
        hostname=next((j.hostname for j in jobs if j.hostname), socket.gethostname()),
        backend=gpu.backend if gpu else rec.backend,
        driver=gpu.driver if gpu else None,
        telemetry_source=rec.telemetry_source,
        started_at=rec.started_at,
        finished_at=finished_at,
        # The lane's first cell also waited for the GPU's lease and the lane's set-up (its steward,
        # its GPU, the node's fork server); the lane's later cells find all of it ready.
        lease_wait_s=rec.lease_wait_s,
        lane_setup_s=rec.lane_setup_s,
        prepare_s=rec.prepare_s,
        # Trainer actors started and set up (CUDA, model, data); the sampler started; the barrier after
        # warm-up (the longest wait of any job); the cell's release (trainers killed, mode undone).
        setup_s=rec.setup_s,
        sampler_start_s=rec.sampler_start_s,
        barrier_s=max(waits) if waits else None,
        teardown_s=rec.teardown_s,
        # Everything but the epochs: what a cell costs beyond its training.
        fixed_s=finished_at - rec.started_at - (total or 0.0),
        measured_start_ts=start,
        measured_end_ts=end,
        makespan_s=makespan,
        overlap_s=_overlap(list(spans.values())),
        lifetime_overlap_s=lifetime_overlap,
        # Wall time from the first epoch's start (warm-up included) to the last epoch's end.
        total_s=total,
        # The study's metric: epoch-2 throughput of every job, summed (their epochs overlap). Not for a
        # mix: its jobs' samples are unlike (a click is not an image); its headline is total_s.
        agg_samples_per_s=None if mixed else _sum([e.samples_per_s for e in e2]),
        agg_rate_low=agg.low if agg else None,
        agg_rate_high=agg.high if agg else None,
        window_samples_per_s=measured_samples / (end - start)
        if not mixed and measured_samples and start is not None and end is not None and end > start
        else None,
        agg_rate_median=None if mixed else _sum([e.rate_median for e in e2]),
        # pyperf's rule on the least steady job: a flag, never a reason to hide the cell's numbers.
        rate_cv=rate_cv,
        unstable=None if rate_cv is None else rate_cv >= CV_UNSTABLE,
        n_jobs=len(jobs),
        n_ok=sum(1 for j in jobs if j.status == "ok"),
        **stats,
        measured_samples=measured_samples,
        energy_per_sample_j=energy_j / measured_samples
        if energy_j is not None and measured_samples and not mixed
        else None,
        total_energy_j=window_energy(rec.telemetry, first, last)[0],
        **cell_noise(rec.telemetry, jobs, start, end),
        resumed_from=None,
        reserved_cpus=rec.reserved_cpus,
        overlapping_cells=rec.overlapping_cells,
        isolated=rec.isolated,
        config_json=json.dumps(dataclasses.asdict(cfg), default=str),
        env_json=json.dumps(environment(gpu), default=str),
        tags_json=json.dumps(cfg.tags),
    )
