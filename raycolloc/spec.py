"""What crosses process boundaries: a validated cell, its jobs, their bindings and their state.

The driver validates a config once into a :class:`CellSpec` (``raycolloc.driver.cell_specs``); the
node's steward turns it into one :class:`Binding` per job; each trainer reports a :class:`JobState`.
The steward answers with a :class:`NodeInfo`, a :class:`Release`, :class:`Samples` and a
:class:`GpuNow`; jobs and lanes tell the progress board a :class:`JobProgress` and a :class:`CellProgress`.
All are plain dataclasses (never DictConfigs), so every process reads the same typed shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from raycolloc.config import Config, DataConfig, TrainerConfig
from raycolloc.devices import BackendTraits, CudaDevice, GpuInfo, JobDevice
from raycolloc.results.rows import EpochRow, TelemetryRow
from raycolloc.workload_kinds import Workload

__all__ = [
    "CELL_STATUSES",
    "JOB_STATUSES",
    "NEVER_STARTED",
    "Binding",
    "CellProgress",
    "CellSpec",
    "CellStatus",
    "GpuNow",
    "JobInfo",
    "JobProgress",
    "JobSpec",
    "JobState",
    "JobStatus",
    "NodeInfo",
    "Release",
    "Reservation",
    "Samples",
    "as_cell_status",
]

# ok; oom (out of device memory); error (crashed, or died); hang (no progress for
# trainer.stall_timeout_s); skipped (its cell was skipped: never started).
JobStatus = Literal["ok", "oom", "error", "hang", "skipped"]
JOB_STATUSES: tuple[JobStatus, ...] = ("ok", "oom", "error", "hang", "skipped")
# A cell's: a result (``results.rows.RESULT_STATUSES``: ok; partial, some of its jobs ok; oom; unfit, its
# jobs' memory estimate exceeds every GPU) or none, so a re-run tries it again (error, hang, skipped).
CellStatus = Literal["ok", "partial", "oom", "unfit", "error", "hang", "skipped"]
CELL_STATUSES: tuple[CellStatus, ...] = ("ok", "partial", "oom", "unfit", "error", "hang", "skipped")
NEVER_STARTED: tuple[CellStatus, ...] = ("skipped", "unfit")  # a cell's jobs never held its GPU


def as_cell_status(text: str) -> CellStatus:
    """A cell status read back from a row (its column is a plain string), checked.

    Raises:
        ValueError: ``text`` is no cell status.
    """
    if text not in CELL_STATUSES:
        raise ValueError(f"cell status {text!r} is not one of {', '.join(CELL_STATUSES)}")
    return text  # narrowed by the test above


@dataclass(frozen=True)
class JobSpec:
    """One training job of a cell: its workload (resolved in the driver) and how much it trains.

    An epoch is ``epoch_samples`` samples, or fewer when ``epoch_time_s`` is set: the epoch then
    ends after the first step that reaches that many seconds (a time budget per job). A measured epoch
    (every one after the first) of a job raycolloc steps runs at least ``min_epoch_s`` seconds, more
    steps than ``epoch_samples`` where that is short (``config.measured_floor``: ``auto`` is 5 s on a
    real GPU). A script job (``workload.as_written``) trains as it was written: ``batch_size`` and
    ``epoch_samples`` are 0 there (raycolloc sets neither), ``epochs`` is only what is expected.
    """

    cell_id: str
    index: int
    workload: Workload
    batch_size: int
    epochs: int
    epoch_samples: int
    seed: int
    data: DataConfig
    trainer: TrainerConfig
    mig_profile: str | None = None
    active_thread_percentage: int | None = None
    pinned_mem_limit: str | None = None
    epoch_time_s: float | None = None
    min_epoch_s: float | None = None  # a measured epoch's floor (s): config.measured_floor, resolved
    mem_estimate_mib: float | None = None  # from the model (driver, for compositions); None: not yet
    # The warm-up epoch's steps where a repeat learned them from its first run (driver/warmup.py);
    # None: a whole epoch of warm-up.
    warmup_steps: int | None = None
    # A file the job's training process (or script) writes its stdout and stderr to, appended (a queued
    # job's, kept beside the queue's database for ``logs``); None: the actor's log, as a sweep's cell.
    log_path: str | None = None

    @property
    def name(self) -> str:
        return f"{self.index}-{self.workload.name}"

    @property
    def kind(self) -> str:
        """The jobs table's ``kind``: ``model`` (raycolloc builds it), ``python`` (the user's function)
        or ``script`` (data for the results; code asks the workload itself)."""
        return self.workload.kind

    def epoch_floor_s(self, epoch: int) -> float:
        """The least seconds epoch ``epoch`` runs (0: its samples alone end it): the warm-up epoch and
        a time-budgeted one have none."""
        if epoch == 1 or self.epoch_time_s or self.min_epoch_s is None:
            return 0.0
        return self.min_epoch_s

    @property
    def steps_per_epoch(self) -> int:
        return max(1, self.epoch_samples // max(1, self.batch_size))

    def epoch_steps(self, epoch: int) -> int:
        """The steps epoch ``epoch`` takes (before its floor or time budget): the warm-up's learned
        steps where a repeat has them, else the epoch's samples in batches."""
        if epoch == 1 and self.warmup_steps:
            return min(self.warmup_steps, self.steps_per_epoch)
        return self.steps_per_epoch


@dataclass(frozen=True)
class CellSpec:
    """One validated cell: one GPU, one mode, a list of jobs, and the config they came from."""

    cell_id: str
    label: str
    config_hash: str
    config: Config
    jobs: tuple[JobSpec, ...]
    mix_name: str | None = None
    mix_mig_layout: Any = None

    @property
    def degree(self) -> int:
        return len(self.jobs)

    @property
    def mode(self) -> str:
        return self.config.mode.name

    @property
    def workloads(self) -> str:
        """The workload name (uniform cells) or ``+``-joined names (mixed cells)."""
        names = [j.workload.name for j in self.jobs]
        return names[0] if len(set(names)) == 1 else "+".join(names)

    @property
    def scripted(self) -> bool:
        """Every job is a script: each runs as written, without raycolloc's warm-up barrier."""
        return all(j.workload.as_written for j in self.jobs)


@dataclass(frozen=True)
class Binding:
    """How one job is bound to its GPU, as the node's mode prepared it.

    ``env`` is set in the training process before CUDA initialises: the GPU or MIG device
    (``CUDA_VISIBLE_DEVICES``), the MPS pipe, MPS limits. ``device`` is what the job's process calls
    on its GPU beyond torch, chosen by the node's backend (a simulated GPU's driver, or nothing).
    """

    job_index: int
    gpu_uuid: str
    env: dict[str, str]
    mig_uuid: str | None = None
    mig_profile: str | None = None
    mps_pipe_dir: str | None = None
    mps_control: str | None = None
    cpus: tuple[int, ...] | None = None  # cores the job is pinned to (trainer.cpu_affinity=auto)
    device: JobDevice = CudaDevice()
    # The node's reserved cores (its trainer actor's own threads go there) and, for a job not pinned,
    # every other core (so it does not inherit the reserved set); None: the node reserves nothing.
    reserved_cpus: tuple[int, ...] | None = None
    shared_cpus: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Reservation:
    """The cores of a node kept for its own processes (Ray, the driver, the steward), never a job's
    (``raycolloc.node.reserve``); ``cores`` empty: none reserved, and ``note`` says why."""

    cores: tuple[int, ...] = ()
    setting: str = "none"
    note: str = ""


@dataclass
class JobInfo:
    """What a job learnt about itself while it ran (the jobs table's descriptive columns)."""

    pid: int | None = None
    actor_pid: int | None = None  # the trainer actor's process (a lane lends it to cell after cell)
    hostname: str | None = None
    mig_uuid: str | None = None
    mig_profile: str | None = None
    cuda_visible_devices: str | None = None  # as the job's CUDA reads them, from its own environment
    mps_pipe_dir: str | None = None
    cpus: str | None = None
    niceness: int | None = None
    device_name: str | None = None
    params: int | None = None
    spawn: str | None = None  # how its training process started: "fork" (warm parent) or "exec"
    # Where a job's set-up went (seconds): its process started and ready (imports done, as the
    # actor saw it), then inside the process: CUDA's context, model (built and moved), data.
    spawn_s: float | None = None
    import_s: float | None = None
    cuda_init_s: float | None = None
    model_s: float | None = None
    data_s: float | None = None
    setup_s: float | None = None
    compile_s: float | None = None
    nvml_mem_mib: float | None = None
    h2d_bytes_per_step: int = 0
    mps_client: bool | None = None
    mps_server_pid: int | None = None
    mps_check_error: str | None = None
    traceback: str | None = None
    started_ts: float | None = None  # the job's process started (wall clock)
    ended_ts: float | None = None  # ... and ended (a script: exited; a training process: finished)
    exit_code: int | None = None  # a script's exit status


@dataclass
class JobState:
    """A job's status, its info and the epochs it finished; failures are states, never raised."""

    status: JobStatus = "ok"
    error: str | None = None
    info: JobInfo = field(default_factory=JobInfo)
    epochs: list[EpochRow] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def failed(self, status: JobStatus, error: str) -> JobState:
        """This state with a failure recorded (keeps the info and finished epochs)."""
        self.status, self.error = status, error
        return self


@dataclass(frozen=True)
class NodeInfo:
    """A node as its steward reports it (the sweep's pre-flight checks read it)."""

    node_id: str
    pid: int  # the steward's process
    gpus: tuple[GpuInfo, ...]
    driver: str
    cpus: int  # cores Ray may use on the node
    mem_total_mib: float
    mem_available_mib: float
    leftovers: tuple[str, ...]  # what dead stewards left, found (and put right) at its start
    traits: BackendTraits  # what its GPU backend allows: host memory and cores per job, MIG, ...
    reservation: Reservation = Reservation()  # its cores kept for Ray, the driver and the steward

    @property
    def backend(self) -> str:
        return self.traits.name


@dataclass(frozen=True)
class Release:
    """What releasing a cell's GPU did (for the log: the GPU is free for the next cell either way)."""

    released: bool = False  # False: the cell held nothing here (already released)
    errors: tuple[str, ...] = ()
    mps_stopped: bool = False  # its MPS daemon stopped (end of an MPS cell, or of the GPU's lease)
    mps_daemon_kept: bool = False  # ... or kept for the GPU's other residents or the next MPS cell (mode.keep_daemon)
    mig_restored: bool = False  # the MIG layout found before the cell put back

    def __str__(self) -> str:
        """``released=true mps_daemon_kept=true``: what it did, as a log's key=value pairs (the
        dataclass's repr stays for debugging)."""
        flags = ("released", "mps_stopped", "mps_daemon_kept", "mig_restored")
        pairs = [f"{name}=true" for name in flags if getattr(self, name)]
        if self.errors:
            pairs.append(f"errors={'; '.join(self.errors)!r}")
        return " ".join(pairs) or "released=false"


@dataclass(frozen=True)
class GpuNow:
    """One GPU as its node's backend reads it now (NVML or the simulated GPU): memory in use and in
    all (MiB), power (W, None where unread), utilisation (0..1: NVML's, a kernel ran in the window) and,
    where the GPU has GPM, SM activity, SM occupancy and DRAM activity (0..1) since the last reading."""

    uuid: str
    mem_used_mib: float
    mem_total_mib: float
    power_w: float | None
    util: float
    sm_active: float | None = None
    sm_occupancy: float | None = None
    dram_active: float | None = None


@dataclass(frozen=True)
class Samples:
    """The telemetry of a cell, sampled while it ran, and what went wrong sampling it."""

    rows: tuple[TelemetryRow, ...] = ()
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobProgress:
    """Where a job stands (its trainer tells the progress board about once a second)."""

    epoch: int  # 1-based; 0 before the first
    step: int  # steps done in this epoch
    steps: int  # steps per epoch (1 for a script: it reports whole epochs)
    epochs: int
    samples_per_s: float = 0.0


@dataclass(frozen=True)
class CellProgress:
    """A cell on the progress board: its state, its status once done, and its jobs' progress."""

    state: str = "queued"  # queued, leasing, preparing, setup, warm-up, measuring, training, done
    status: str | None = None
    updated: float = 0.0  # wall clock of the last change
    jobs: dict[int, JobProgress] = field(default_factory=dict)
