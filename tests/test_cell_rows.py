"""A cell's rows from its record: energy and power over one window, energy per sample, a mix's
headline, peak device memory per job, the repeat columns; MIG SM activity from GPU instances."""

from __future__ import annotations

import dataclasses
import math

import pytest

from raycolloc.driver.tabulate import CellRecord, cell_row, job_rows, window_energy
from raycolloc.node.gpu.backend import GpuInfo, MigDevice
from raycolloc.node.telemetry import Sampler, gi_sm_shares
from raycolloc.results.rows import EpochRow, TelemetryRow
from raycolloc.spec import JobInfo, JobState

from .conftest import load

T0 = 1000.0
GPU = GpuInfo(0, "GPU-x", "Simulated H100-80GB", 81559, 132, True, False, "0", "sim", "sim")


def gpu_sample(ts: float, watts: float = 300.0, energy: bool = True, sm: float | None = 40.0) -> TelemetryRow:
    # A counter at constant power: energy_mj = watts * (ts - T0) * 1000.
    return TelemetryRow(
        cell_id="c",
        gpu_uuid="GPU-x",
        mig_uuid=None,
        gi_id=None,
        scope="gpu",
        ts=ts,
        source="sim-gpm",
        power_w=watts,
        energy_mj=watts * (ts - T0) * 1000.0 if energy else None,
        sm_active=sm,
        mem_used_mib=1000.0,
    )


def epoch(job: int, n: int, start: float, wall: float, samples: int) -> EpochRow:
    return EpochRow(
        cell_id="c",
        job_index=job,
        epoch=n,
        warmup=n == 1,
        start_ts=start,
        end_ts=start + wall,
        wall_s=wall,
        samples=samples,
        samples_per_s=samples / wall,
        windows=None,
        rate_low=None,
        rate_high=None,
        rate_cv=None,
        rate_median=None,
        window_steps=[],
        window_s=[],
        steps=samples // 32,
        loss=None,
        thread_cpu_s=None,
        thread_sys_s=None,
        minor_faults=None,
        involuntary_switches=None,
        voluntary_switches=None,
        peak_mem_allocated_mib=None,
        peak_mem_reserved_mib=None,
    )


def test_energy_and_power_cover_the_same_window() -> None:
    # Samples every 0.1 s; a window of 0.485 s between samples: the counter is read at its edges.
    rows = [gpu_sample(T0 + 0.1 * i) for i in range(20)]
    energy, power = window_energy(rows, T0 + 0.205, T0 + 0.69)
    assert energy == pytest.approx(300.0 * 0.485) and power == pytest.approx(300.0)
    # A window shorter than the sampling interval still gets a value.
    energy, power = window_energy(rows, T0 + 0.31, T0 + 0.33)
    assert energy == pytest.approx(300.0 * 0.02) and energy == pytest.approx(power * 0.02)


def test_without_an_energy_counter_power_gives_the_energy() -> None:
    rows = [gpu_sample(T0 + 0.1 * i, watts=200.0 + 10 * i, energy=False) for i in range(10)]
    energy, power = window_energy(rows, T0 + 0.15, T0 + 0.35)
    # The power samples inside the window: at 0.2 and 0.3 s.
    assert power == pytest.approx((220.0 + 230.0) / 2) and energy == pytest.approx(power * 0.2)
    assert window_energy(rows, None, None) == (None, None)


def _record(overrides: list[str], states: dict[int, JobState], telemetry: list[TelemetryRow]) -> CellRecord:
    return CellRecord(
        load(overrides), gpu=GPU, backend="sim", telemetry_source="sim-gpm", states=states, telemetry=telemetry
    )


def test_uniform_cell_energy_per_sample_and_repeat_columns() -> None:
    states = {
        i: JobState(info=JobInfo(pid=100 + i), epochs=[epoch(i, 1, T0, 1.0, 320), epoch(i, 2, T0 + 1.0, 2.0, 640)])
        for i in range(2)
    }
    procs = [
        TelemetryRow(
            cell_id="c",
            gpu_uuid="GPU-x",
            mig_uuid=None,
            gi_id=None,
            scope="process",
            ts=T0 + t,
            source="sim-gpm",
            pid=100 + i,
            job_index=i,
            proc_gpu_mem_mib=500.0 + 50 * i + t,
        )
        for i in range(2)
        for t in (0.5, 1.5)
    ]
    rec = _record(["degree=2", "repeat=2"], states, [gpu_sample(T0 + 0.1 * i) for i in range(40)] + procs)
    jobs, epochs = job_rows(rec)
    row = cell_row(rec, jobs, epochs)
    assert (row.repeat, row.label) == (2, "tiny_cnn-naive-x2-r2")
    assert row.repeat_group == load(["degree=2"]).config_hash != row.config_hash
    assert row.measured_samples == 1280 and row.makespan_s == pytest.approx(2.0)
    assert row.energy_j == pytest.approx(600.0) and row.power_mean_w == pytest.approx(300.0)
    assert row.energy_j == pytest.approx(row.power_mean_w * row.makespan_s)
    assert row.energy_per_sample_j == pytest.approx(600.0 / 1280)
    assert row.total_energy_j == pytest.approx(900.0)  # warm-up included: 3 s at 300 W
    assert row.agg_samples_per_s == pytest.approx(640.0)
    assert [j.peak_device_mem_mib for j in jobs] == [501.5, 551.5] and [j.samples for j in jobs] == [960, 960]


def test_a_mixed_cell_adds_no_unlike_samples() -> None:
    states = {
        0: JobState(epochs=[epoch(0, 1, T0, 0.1, 64), epoch(0, 2, T0 + 0.1, 0.4, 4096)]),
        1: JobState(epochs=[epoch(1, 1, T0, 1.0, 32), epoch(1, 2, T0 + 1.0, 2.0, 64)]),
    }
    rec = _record(["mix=tiny_mixed"], states, [gpu_sample(T0 + 0.1 * i) for i in range(40)])
    jobs, epochs = job_rows(rec)
    row = cell_row(rec, jobs, epochs)
    assert row.agg_samples_per_s is None and row.window_samples_per_s is None and row.energy_per_sample_j is None
    assert row.total_s == pytest.approx(3.0) and row.total_energy_j == pytest.approx(900.0)


def test_mig_gpu_sm_activity_is_the_instances_weighted_by_their_sms() -> None:
    devices = [MigDevice("MIG-a", 1, 0, 9, 2, 4, 0, 40000, 60), MigDevice("MIG-b", 2, 0, 5, 3, 0, 0, 40000, 64)]
    shares = gi_sm_shares("Simulated H100-80GB", devices)  # 3g (60 SMs) and 4g (64 SMs) of 132
    assert shares == pytest.approx({1: 60 / 132, 2: 64 / 132})
    sampler = Sampler(
        backend=None,
        cell_id="c",
        gpu_uuid="GPU-x",
        source="gpm",
        interval_ms=100,
        pids={},
        mig_devices=devices,
        gi_sm_share=shares,
    )
    assert sampler._gpu_sm_active({1: {"sm_active": 50.0}, 2: {"sm_active": 100.0}}) == pytest.approx(
        (50.0 * 60 + 100.0 * 64) / 132
    )
    assert sampler._gpu_sm_active({1: {"sm_active": 50.0}, 2: {}}) is None  # an instance without its first GPM pair
    assert gi_sm_shares("Unknown GPU", devices) == {}


def test_time_budget_reaches_the_job_spec() -> None:
    spec = load(["epoch_time_s=0.5", "degree=2"])
    assert {j.epoch_time_s for j in spec.jobs} == {0.5}


def _windowed(e: EpochRow, rel: float, rate_cv: float) -> EpochRow:
    """``e`` as if timed in ten windows: its rate ±``rel``, its windows' CV ``rate_cv``."""
    assert e.samples_per_s is not None
    rate = e.samples_per_s
    return dataclasses.replace(e, windows=10, rate_low=rate * (1 - rel), rate_high=rate * (1 + rel), rate_cv=rate_cv)


def test_within_run_intervals_sum_over_jobs_and_the_least_steady_job_flags_the_cell() -> None:
    # Job 0: 320 samples/s ±5% (CV 12%: unstable); job 1: 320 ±2% (CV 3%).
    states = {
        i: JobState(
            info=JobInfo(pid=100 + i),
            epochs=[epoch(i, 1, T0, 1.0, 320), _windowed(epoch(i, 2, T0 + 1.0, 2.0, 640), rel, cv_)],
        )
        for i, (rel, cv_) in enumerate(((0.05, 0.12), (0.02, 0.03)))
    }
    rec = _record(["degree=2"], states, [gpu_sample(T0 + 0.1 * i) for i in range(40)])
    jobs, epochs = job_rows(rec)
    row = cell_row(rec, jobs, epochs)
    assert [(j.epoch2_rate_low, j.epoch2_rate_high, j.epoch2_rate_cv) for j in jobs] == [
        pytest.approx((304.0, 336.0, 0.12)),
        pytest.approx((313.6, 326.4, 0.03)),
    ]
    # The aggregate's half-width: the jobs' in quadrature, around the aggregate itself.
    hw = math.hypot(16.0, 6.4)
    assert row.agg_samples_per_s == pytest.approx(640.0)
    assert (row.agg_rate_low, row.agg_rate_high) == pytest.approx((640.0 - hw, 640.0 + hw))
    assert row.rate_cv == pytest.approx(0.12) and row.unstable is True
    # Both steady: not unstable; one job without windows: no aggregate interval, its CV still counts.
    states[0].epochs[1] = _windowed(states[0].epochs[1], 0.05, 0.099)
    jobs, epochs = job_rows(rec)
    row = cell_row(rec, jobs, epochs)
    assert row.unstable is False and row.rate_cv == pytest.approx(0.099)
    states[1].epochs[1] = epoch(1, 2, T0 + 1.0, 2.0, 640)
    jobs, epochs = job_rows(rec)
    row = cell_row(rec, jobs, epochs)
    assert row.agg_rate_low is None and row.agg_rate_high is None and row.agg_samples_per_s == pytest.approx(640.0)
    assert row.rate_cv == pytest.approx(0.099) and jobs[1].epoch2_rate_low is None


def test_a_cell_without_windows_has_no_interval_and_no_stability_verdict() -> None:
    states = {0: JobState(info=JobInfo(pid=100), epochs=[epoch(0, 1, T0, 1.0, 320), epoch(0, 2, T0 + 1.0, 2.0, 640)])}
    rec = _record([], states, [gpu_sample(T0 + 0.1 * i) for i in range(40)])
    jobs, epochs = job_rows(rec)
    row = cell_row(rec, jobs, epochs)
    assert (row.agg_rate_low, row.agg_rate_high, row.rate_cv, row.unstable) == (None, None, None, None)
