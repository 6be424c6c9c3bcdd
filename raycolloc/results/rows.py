"""The four result tables, each defined once as a row dataclass (:mod:`raycolloc.results.schema`
derives the Arrow schemas from them).

``cells`` (one row per cell, with the resolved config and the environment), ``jobs`` (one row per
training job), ``epochs`` (one row per job and epoch) and ``telemetry`` (one row per sample:
``scope`` gpu, mig or process). Every table carries ``schema_version`` and ``cell_id``.

A builder constructs a row dataclass, and the identity and measurement fields have no defaults:
a column added here is a ``TypeError`` in every builder that does not fill it, never a silent
empty column. Column order is field order. (No pyarrow here: a training process imports these rows
before it pins its threads, and pyarrow starts threads when imported.)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "METRIC_COLUMNS",
    "READABLE_VERSIONS",
    "RESULT_STATUSES",
    "ROWS",
    "SCOPE_GPU",
    "SCOPE_MIG",
    "SCOPE_PROCESS",
    "SCHEMA_VERSION",
    "TABLES",
    "CellRow",
    "EpochRow",
    "JobRow",
    "TelemetryRow",
]

SCHEMA_VERSION = 2
# Version 1 (before the redesign) lacks the columns added since; they read back as nulls.
READABLE_VERSIONS = (1, 2)
TABLES = ("epochs", "jobs", "telemetry", "cells")  # write order: cells last
# The cell statuses that are a result (a measurement, or a verdict a re-run would repeat).
RESULT_STATUSES = ("ok", "partial", "oom", "unfit")
# What a telemetry row samples (``telemetry.scope``): the whole GPU, one MIG device, one job's process.
SCOPE_GPU, SCOPE_MIG, SCOPE_PROCESS = "gpu", "mig", "process"

METRIC_COLUMNS = (
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
    "gr_engine_active",
    "gpu_util",
    "mem_util",
    "mem_used_mib",
    "mem_total_mib",
    "power_w",
    "energy_mj",
    "pcie_tx_bytes_s",
    "pcie_rx_bytes_s",
    "sm_clock_mhz",
    "temperature_c",
    "proc_gpu_mem_mib",
    "proc_cpu_percent",
    "proc_rss_mib",
    "proc_sm_util",
    "mem_clock_mhz",
    "power_limit_w",
    "load_avg_1m",
    "foreign_gpu_procs",
    "proc_core_mhz",
    "proc_run_delay_s",
)


@dataclass
class EpochRow:
    """One epoch of one job, as its training process timed it."""

    cell_id: str
    job_index: int
    epoch: int
    warmup: bool
    start_ts: float
    end_ts: float
    wall_s: float
    samples: int | None  # None: a script's epoch (marked by workload.epoch_regex without a samples group)
    samples_per_s: float | None
    # The epoch timed in windows of equal steps (raycolloc.job.windows): how many, the 95% interval of
    # samples_per_s from the windows' rates, their coefficient of variation, the median of their rates
    # (what a host that slows some windows leaves alone; one window's is its own rate) and each
    # window's steps and seconds. The interval and CV are None for one window; all are None or empty
    # for a script's epochs (timed from outside).
    windows: int | None
    rate_low: float | None
    rate_high: float | None
    rate_cv: float | None
    rate_median: float | None
    window_steps: list[int] | None
    window_s: list[float] | None
    steps: int | None
    loss: float | None
    thread_cpu_s: float | None
    thread_sys_s: float | None
    minor_faults: int | None
    involuntary_switches: int | None
    voluntary_switches: int | None
    peak_mem_allocated_mib: float | None
    peak_mem_reserved_mib: float | None


@dataclass
class JobRow:
    """One training job of a cell: what it trained, where it ran, how it ended, its epoch-2 numbers.

    ``workload`` names the job's model and dataset (``resnet26_cifar10``, ``convnext_atto_cifar10``);
    ``kind`` is ``model`` (raycolloc built it), ``python`` (the user's function) or ``script`` (the
    user's process, measured from outside: lifetime, exit code, its GPU telemetry). ``samples`` is
    what the job trained in all its epochs. ``peak_device_mem_mib`` is the most device memory the
    GPU's driver attributed to the job's process (sampled, or read at its end: NVML or the simulated
    device; None where NVML hides it, e.g. MPS clients), beside PyTorch's own peaks.
    """

    cell_id: str
    job_index: int
    job_name: str
    workload: str
    kind: str
    model: str | None
    dataset: str | None
    status: str
    error: str | None
    pid: int | None
    actor_pid: int | None
    hostname: str | None
    gpu_uuid: str | None
    mig_uuid: str | None
    mig_profile: str | None
    cuda_visible_devices: str | None
    mps_pipe_dir: str | None
    cpus: str | None
    mps_client: bool | None
    mps_server_pid: int | None
    mps_check_error: str | None  # why a job was not seen as an MPS client: what was asked, how often
    batch_size: int | None
    epochs: int | None
    epoch_samples: int | None
    epoch_time_s: float | None
    min_epoch_s: float | None  # the measured epochs' floor it ran (s; None: none); a solo's repeat may run a share
    samples: int | None
    params: int | None
    spawn: str | None
    spawn_s: float | None
    import_s: float | None
    cuda_init_s: float | None
    model_s: float | None
    data_s: float | None
    setup_s: float | None
    barrier_wait_s: float | None
    compile_s: float | None
    total_s: float | None
    measured_s: float | None
    epoch2_s: float | None
    epoch2_samples_per_s: float | None
    epoch2_rate_low: float | None  # epoch 2's within-run interval (its windows) and their CV
    epoch2_rate_high: float | None
    epoch2_rate_cv: float | None
    peak_mem_allocated_mib: float | None
    peak_mem_reserved_mib: float | None
    nvml_mem_mib: float | None
    peak_device_mem_mib: float | None
    started_ts: float | None
    ended_ts: float | None
    exit_code: int | None
    proc_sm_util_mean: float | None
    # What explains noise (docs/results.md, "Why runs were noisy"): the mean clock of the job's cores over its
    # epoch 2 (the steward's samples of them; None where the host shows no core frequency), how
    # often its training thread was pre-empted per second of epoch 2 (EpochRow.involuntary_switches),
    # and the share of epoch 2 it waited, runnable, for a core (the steward's schedstat samples);
    # the training thread's CPU time per step of epoch 2 (ms): up with waits no longer, the core ran slow.
    epoch2_core_mhz: float | None
    epoch2_invol_switches_per_s: float | None
    epoch2_cpu_wait_share: float | None
    epoch2_cpu_ms_per_step: float | None
    compile: str
    amp: str
    channels_last: bool
    allocator: str
    data_source: str
    data_placement: str


@dataclass
class CellRow:
    """One cell: its status, GPU, where its time went, and its measured window's aggregates.

    ``repeat`` is the repeat's index (0 for the first); ``repeat_group`` is the config hash every
    repeat of the configuration shares (repeat 0's). ``energy_j`` and ``power_mean_w`` cover the
    measured window (``makespan_s``): energy_j = power_mean_w x makespan_s. ``measured_samples`` are
    the samples of every job's measured epochs and ``energy_per_sample_j`` = energy_j / measured_samples
    (uniform cells; a mix's samples are unlike). ``total_energy_j`` covers ``total_s`` (every epoch,
    warm-up included): a mixed cell's energy. Mixed cells have no ``agg_samples_per_s``: their
    headline is ``total_s``.

    ``agg_rate_low``/``agg_rate_high`` are the within-run 95% interval of ``agg_samples_per_s``: each
    job's epoch-2 interval from its windows, summed (half-widths in quadrature; None unless every job
    has one). ``rate_cv`` is the largest coefficient of variation of a job's epoch-2 windows;
    ``unstable`` is pyperf's rule on it (CV >= 10%). ``agg_rate_median`` sums the jobs' epoch-2
    ``rate_median`` (the median of each job's window rates; None unless every job has one). The
    headline stays ``agg_samples_per_s``: on two pairs of sweeps the windows' median did not make
    gains more reproducible (docs/measurements.md, twenty-second session); it is kept to compare by
    (``jobs/bench_reproducibility.py --rates``).
    """

    cell_id: str
    label: str
    config_hash: str
    repeat: int
    repeat_group: str
    status: str
    reason: str | None
    mode: str
    degree: int
    workload: str
    mix: str | None
    gpu_uuid: str | None
    gpu_name: str | None
    gpu_index: int | None
    gpu_memory_mib: int | None
    gpu_sm_count: int | None
    node_id: str | None
    hostname: str | None
    backend: str | None
    driver: str | None
    telemetry_source: str
    started_at: float
    finished_at: float
    lease_wait_s: float | None
    lane_setup_s: float | None
    prepare_s: float | None
    setup_s: float | None
    sampler_start_s: float | None
    barrier_s: float | None
    teardown_s: float | None
    fixed_s: float | None
    measured_start_ts: float | None
    measured_end_ts: float | None
    makespan_s: float | None
    overlap_s: float | None
    lifetime_overlap_s: float | None
    total_s: float | None
    agg_samples_per_s: float | None
    agg_rate_low: float | None
    agg_rate_high: float | None
    window_samples_per_s: float | None
    agg_rate_median: float | None
    rate_cv: float | None
    unstable: bool | None
    n_jobs: int
    n_ok: int
    sm_active_mean: float | None
    sm_active_max: float | None
    gpu_util_mean: float | None
    mem_used_max_mib: float | None
    energy_j: float | None
    power_mean_w: float | None
    measured_samples: int | None
    energy_per_sample_j: float | None
    total_energy_j: float | None
    pcie_rx_mean_bytes_s: float | None
    pcie_tx_mean_bytes_s: float | None
    # What explains noise, over the measured window (``raycolloc.driver.noise``): the GPU's SM clock
    # (mean and lowest), the clock-event reasons seen and the share of samples a cap slowed, the
    # hottest temperature, the lowest enforced power limit, the node's mean load average, the most
    # GPU processes that were not the cell's (None: NVML hid them), and over the jobs the lowest
    # core clock, the most pre-emptions per second, the largest share of time waiting for a core and
    # the most CPU time per step of a training thread (ms).
    sm_clock_mean_mhz: float | None
    sm_clock_min_mhz: float | None
    clock_events: str | None
    clock_event_share: float | None
    temperature_max_c: float | None
    power_limit_w: float | None
    load_avg_mean: float | None
    foreign_gpu_procs: int | None
    core_mhz_min: float | None
    invol_switches_per_s_max: float | None
    cpu_wait_share_max: float | None
    cpu_ms_per_step_max: float | None
    resumed_from: str | None
    # Quiet cores and side-by-side cells (issue 30): the node's cores kept for its own processes
    # ("0-1"; None: none reserved), how many other cells of the node measured while this one did
    # (None: it never measured), and whether cells of its node measured one at a time.
    reserved_cpus: str | None
    overlapping_cells: int | None
    isolated: bool | None
    config_json: str
    env_json: str
    tags_json: str


@dataclass
class TelemetryRow:
    """One sample: of the GPU, one MIG device, or one job's process (``scope``)."""

    cell_id: str
    gpu_uuid: str
    mig_uuid: str | None
    gi_id: int | None
    scope: str
    ts: float
    source: str
    pid: int | None = None
    job_index: int | None = None
    # Metrics: None where the source does not measure it.
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    gr_engine_active: float | None = None
    gpu_util: float | None = None
    mem_util: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_w: float | None = None
    energy_mj: float | None = None
    pcie_tx_bytes_s: float | None = None
    pcie_rx_bytes_s: float | None = None
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    proc_gpu_mem_mib: float | None = None
    proc_cpu_percent: float | None = None
    proc_rss_mib: float | None = None
    proc_sm_util: float | None = None
    # What explains noise. GPU rows: memory clock, enforced power limit, the node's 1-minute load
    # average, and (on the once-a-second process tick) how many compute processes on the GPU are
    # not the cell's (None where NVML hides the cell's own: MIG, MPS clients, another PID namespace).
    # Process rows: the mean clock of the job's cores (MHz), and how long its training thread has
    # waited, runnable, for a core (s, cumulative: /proc/PID/schedstat).
    mem_clock_mhz: float | None = None
    power_limit_w: float | None = None
    load_avg_1m: float | None = None
    foreign_gpu_procs: int | None = None
    proc_core_mhz: float | None = None
    proc_run_delay_s: float | None = None
    # NVML's clock-event reasons ("sw_power_cap,hw_thermal_slowdown"; "" none; None unknown).
    clock_events: str | None = None


ROWS: dict[str, type] = {"cells": CellRow, "jobs": JobRow, "epochs": EpochRow, "telemetry": TelemetryRow}
