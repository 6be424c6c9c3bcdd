"""Typed configuration: one dataclass schema per Hydra group, validated before anything runs.

Each group dataclass is stored in Hydra's ConfigStore as ``base_<group>``; the YAML files under
``conf/`` start with ``defaults: [base_<group>]`` so a typo fails at composition. Combinations
that a schema cannot express are checked in ``__post_init__`` with a message naming the key and
what is allowed. :func:`load_config` turns a composed DictConfig into a :class:`Config` once;
actors receive dataclasses, never DictConfigs.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raycolloc import config_checks as limits  # the bounds of numbers: limits.MAX_*
from raycolloc.config_checks import MIN_EPOCH_AUTO_S, ConfigError, as_list, check_floor, check_floor_share
from raycolloc.config_checks import check_min_epoch, check_mode_only
from raycolloc.config_checks import check_percentage, check_port, check_reserved_cpus, check_seconds
from raycolloc.mode_kinds import MODE_NAMES, mode_of, modes_where
from raycolloc.config_checks import check_sim_inject, is_mem_limit
from raycolloc.config_checks import check_choice as _check_choice
from raycolloc.config_checks import check_int as _check_int
from raycolloc.config_groups import (
    DataConfig,
    MeasureConfig,
    QueueConfig,
    TelemetryConfig,
    TrainerConfig,
    check_repeats,
)
from raycolloc.workload_config import (
    MixJob,
    WorkloadConfig,
    mix_job_hash_view,
    workload_hash_view,
    workload_label,
)
from raycolloc.localdirs import default_pipe_root, default_sim_root

# Hydra and OmegaConf serve the driver's composition; trainers import this module for its dataclasses
# alone, and without them a trainer's Ray worker starts 0.2 CPU-seconds sooner.
if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = [
    "MODES",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "MeasureConfig",
    "MigConfig",
    "MixConfig",
    "MixJob",
    "ModeConfig",
    "QueueConfig",
    "TelemetryConfig",
    "first_run_hash",
    "measured_floor",
    "TrainerConfig",
    "WorkloadConfig",
    "config_hash",
    "load_config",
    "register_configs",
]

MODES = MODE_NAMES  # raycolloc.mode_kinds: the one list of modes
BACKENDS = ("auto", "sim", "nvml")
SIM_MIG_MODES = ("auto", "enabled", "disabled")


@dataclass
class ModeConfig:
    """``mode/``: how the jobs of a cell share the GPU.

    ``active_thread_percentage`` and ``pinned_mem_limit`` apply to MPS only; each is one value
    for every job or a list with one value per job (mixed cells). ``keep_daemon``: an MPS cell's
    daemon serves the next MPS cell on the same GPU (false: stopped after every cell).
    """

    name: str = "naive"
    active_thread_percentage: Any = None
    pinned_mem_limit: Any = None
    pipe_root: str = field(default_factory=default_pipe_root)  # /tmp/raycolloc-<uid>/mps (localdirs.py)
    keep_daemon: bool = True

    def __post_init__(self) -> None:
        _check_choice("mode", self.name, MODES)
        if not mode_of(self.name).needs_daemon:  # settings of an MPS daemon's clients
            for key in ("active_thread_percentage", "pinned_mem_limit"):
                if getattr(self, key) is not None:
                    served = "|".join(modes_where(lambda k: k.needs_daemon))
                    raise ConfigError(f"mode.{key} applies to mode={served} only (mode={self.name})")
        for pct in as_list(self.active_thread_percentage):
            check_percentage("mode.active_thread_percentage", pct)
        for limit in as_list(self.pinned_mem_limit):
            if limit is not None and not is_mem_limit(limit):
                raise ConfigError(f"mode.pinned_mem_limit={limit!r} is not allowed; write a size such as 8G or 512M")


@dataclass
class MigConfig:
    """``mig/``: the MIG layout of a mig cell (``auto`` = the study's layout for the degree).
    ``allow_reconfigure``: may the steward create it (and restore the one it found)? ``null``: yes
    on simulated GPUs, no on real ones (root, a shared machine); never hashed."""

    layout: Any = "auto"
    allow_reconfigure: bool | None = None


@dataclass
class ClusterConfig:
    """``cluster/``: which Ray cluster and which GPU backend.

    ``backend=auto`` picks ``nvml`` when NVML finds a GPU and ``sim`` otherwise. With ``sim`` and
    no ``address`` a local Ray instance starts with ``num_gpus`` fake GPUs of ``gpu_model``, whose
    state (MIG layouts, memory in use) lives under ``sim_root``. ``reuse_lease``: a sweep leases
    each GPU once and runs its cells on it one after the other (false: a lease per cell).
    ``reserved_cpus``: cores of each node kept for Ray, the driver and the steward, never a job's
    (``node/reserve.py``); ``isolate_measurement``: cells of one node measure one at a time.
    """

    backend: str = "auto"
    address: str | None = None
    num_gpus: int = 1
    num_cpus: int | None = None
    gpu_model: str = "H100-80GB"
    sim_mig_mode: str = "auto"
    sim_root: str = field(default_factory=default_sim_root)  # this user's and install's (localdirs.py)
    max_concurrent_cells: int | None = None
    reuse_lease: bool = True
    lease_timeout_s: float = 86400.0
    dashboard: bool = False
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 8265
    metrics_export_port: int | None = None
    reserved_cpus: str = "auto"
    isolate_measurement: bool = False
    sim_inject: Any = field(default_factory=list)  # noise in simulated cells (docs/results.md, "Why runs were noisy")

    def __post_init__(self) -> None:
        _check_choice("cluster.backend", self.backend, BACKENDS)
        check_reserved_cpus("cluster.reserved_cpus", self.reserved_cpus)
        self.sim_inject = check_sim_inject(self.sim_inject, self.backend)
        _check_choice("cluster.sim_mig_mode", self.sim_mig_mode, SIM_MIG_MODES)
        # gpu_model against the node's MIG tables: where the driver validates a cell (driver/cell_specs.py).
        _check_int("cluster.num_gpus", self.num_gpus, 1, maximum=limits.MAX_GPUS)
        _check_int("cluster.num_cpus", self.num_cpus, 1, optional=True, maximum=limits.MAX_CORES)
        _check_int("cluster.max_concurrent_cells", self.max_concurrent_cells, 1, optional=True)
        check_seconds("cluster.lease_timeout_s", self.lease_timeout_s, 1)
        check_port("cluster.dashboard_port", self.dashboard_port)
        check_port("cluster.metrics_export_port", self.metrics_export_port, optional=True)


@dataclass
class MixConfig:
    """``mix/``: an explicit list of jobs (a mixed cell). Empty = a uniform cell of ``degree`` jobs."""

    name: str | None = None
    jobs: list[MixJob] = field(default_factory=list)
    mig_layout: Any = None


@dataclass
class Config:
    """The whole configuration of one cell (one Hydra job)."""

    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    mode: ModeConfig = field(default_factory=ModeConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    mig: MigConfig = field(default_factory=MigConfig)
    mix: MixConfig = field(default_factory=MixConfig)
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    degree: int = 1
    epochs: int = 2
    epoch_samples: int | None = None
    epoch_time_s: float | None = None
    min_epoch_s: Any = "auto"  # a measured epoch's floor (s): a number, None, or auto (MIN_EPOCH_AUTO_S on a GPU)
    batch_size: int | None = None
    seed: int = 0
    repeats: Any = "auto"  # an integer >= 1 (exactly that many runs) or "auto" (driver/repeats.py)
    repeat: int = 0
    floor_share: float = 1.0  # the share of its floor a solo's repeat measures (set by repeats=auto: driver/floor.py)
    out_dir: str = "results"
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_int("degree", self.degree, 1, maximum=limits.MAX_DEGREE)
        check_mode_only("mig.layout", self.mig.layout, "auto", "mig", self.mode.name)
        _check_int("epochs", self.epochs, 2, maximum=limits.MAX_EPOCHS)
        _check_int("epoch_samples", self.epoch_samples, 1, optional=True, maximum=limits.MAX_SAMPLES)
        check_seconds("epoch_time_s", self.epoch_time_s, 0.001, optional=True)
        check_min_epoch(self.min_epoch_s)
        check_floor(self.min_epoch_s, self.epoch_time_s, self.epochs, self.trainer.epoch_timeout_s)
        check_floor_share(self.floor_share, self.repeat)
        check_repeats(self.repeats)
        _check_int("repeat", self.repeat, 0, maximum=limits.MAX_REPEATS - 1)
        _check_int("batch_size", self.batch_size, 1, optional=True, maximum=limits.MAX_SAMPLES)
        _check_int("seed", self.seed, 0, maximum=limits.MAX_SEED)
        n_jobs = len(self.mix.jobs)
        if n_jobs and self.degree not in (1, n_jobs):
            raise ConfigError(
                f"degree={self.degree} conflicts with mix={self.mix.name} of {n_jobs} jobs; "
                f"leave degree unset or set degree={n_jobs}"
            )
        if n_jobs:
            # A mix's list sets its jobs: degree=1 and degree=<n> are the same cell (one hash), so a
            # sweep such as ``-m mix=none,tiny_mixed degree=1,2`` runs each mix once.
            self.degree = 1
        mps_lists = [v for v in (self.mode.active_thread_percentage, self.mode.pinned_mem_limit) if isinstance(v, list)]
        for values in mps_lists:
            if len(values) != self.num_jobs:
                raise ConfigError(
                    f"mode.active_thread_percentage/pinned_mem_limit list has {len(values)} values; "
                    f"the cell has {self.num_jobs} jobs (give one value, or one per job)"
                )
        if self.trainer.fault is not None and self.trainer.fault_job >= self.num_jobs:
            raise ConfigError(
                f"trainer.fault_job={self.trainer.fault_job} is not allowed; the cell has jobs 0..{self.num_jobs - 1}"
            )
        if self.trainer.fault is not None and self.trainer.fault_epoch > self.epochs:
            raise ConfigError(f"trainer.fault_epoch={self.trainer.fault_epoch} is not allowed; epochs={self.epochs}")

    @property
    def num_jobs(self) -> int:
        """Jobs in the cell: the mix's length, else ``degree``."""
        return len(self.mix.jobs) or self.degree

    @property
    def cell_label(self) -> str:
        """A short human name: ``resnet26_cifar10-mps-x3``, ``mix-s_m_m-naive``; repeats after the
        first end in ``-r<k>`` (``resnet26_cifar10-mps-x3-r1``)."""
        base = (
            f"mix-{self.mix.name or 'custom'}-{self.mode.name}"
            if self.mix.jobs
            else f"{workload_label(self.workload)}-{self.mode.name}-x{self.degree}"
        )
        return f"{base}-r{self.repeat}" if self.repeat else base


# Keys that do not change what a cell measures: excluded from the config hash used for resume.
# ``repeats`` and ``measure`` say how many runs a sweep makes; each run's index (``repeat``) is hashed.
_NON_SEMANTIC = {
    ("out_dir",),
    ("tags",),
    ("repeats",),
    ("measure",),
    ("queue",),  # the job queue's settings: a cell measures the same whatever they are
    ("cluster", "address"),
    ("cluster", "sim_root"),
    ("cluster", "reuse_lease"),
    ("mode", "keep_daemon"),
    ("cluster", "max_concurrent_cells"),
    ("cluster", "lease_timeout_s"),
    *(("cluster", key) for key in ("dashboard", "dashboard_host", "dashboard_port", "metrics_export_port")),
    ("cluster", "reserved_cpus"),  # where the node's own processes run, as max_concurrent_cells: rows say
    ("cluster", "isolate_measurement"),
    *(("trainer", key) for key in ("setup_timeout_s", "stall_timeout_s", "epoch_timeout_s", "spawn")),
    *(("trainer", key) for key in ("reuse_actors", "compile_cache")),
}
# Keys that do not change a cell's work but were hashed before: hashed as their (old) default
# whatever their value, so results written with the default keep their hash.
_HASHED_AS_DEFAULT = {
    ("cluster", "num_gpus"): 1,
    ("cluster", "num_cpus"): None,
    ("cluster", "sim_mig_mode"): "auto",
    ("mig", "allow_reconfigure"): False,
    ("mode", "pipe_root"): "/tmp/raycolloc-mps",  # per user since issue 46: where pipes lie measures nothing
}


# Keys added after results existed: left out of the hash while at their default, so every config
# written before them keeps its hash (and its results are still found on resume).
_LATER_KEYS: dict[str, Any] = {"repeat": 0, "epoch_time_s": None, "min_epoch_s": None, "floor_share": 1.0}
_LATER_MIX_JOB_KEYS: dict[str, Any] = {"epoch_time_s": None}
_LATER_CLUSTER_KEYS: dict[str, Any] = {"sim_inject": []}


def measured_floor(cfg: Config) -> float | None:
    """The least seconds a measured epoch of ``cfg``'s jobs runs (``min_epoch_s`` resolved; None: no
    floor): ``auto`` is :data:`MIN_EPOCH_AUTO_S` on a real GPU (``cluster.backend=nvml``), none on
    simulated GPUs; a mix and a time-budgeted epoch have none. A solo's repeat measures ``floor_share`` of it
    (:mod:`raycolloc.driver.floor`)."""
    if cfg.mix.jobs or cfg.epoch_time_s or cfg.min_epoch_s is None:
        return None
    if cfg.min_epoch_s == "auto":
        return MIN_EPOCH_AUTO_S * cfg.floor_share if cfg.cluster.backend == "nvml" else None
    return float(cfg.min_epoch_s) * cfg.floor_share or None


def first_run_hash(cfg: Config) -> str:
    """The config hash of ``cfg``'s configuration: its first run's (the rows' ``repeat_group``); a
    repeat differs from it in its index and, a solo's, perhaps its floor (``floor_share``)."""
    return config_hash(dataclasses.replace(cfg, repeat=0, floor_share=1.0)) if cfg.repeat else config_hash(cfg)


def config_hash(cfg: Config) -> str:
    """Stable hash of everything that changes what a cell measures (resume key)."""
    data = dataclasses.asdict(cfg)
    for path in _NON_SEMANTIC:
        node = data
        for key in path[:-1]:
            node = node[key]
        node.pop(path[-1], None)
    for (group, key), default in _HASHED_AS_DEFAULT.items():
        data[group][key] = default
    # The floor as it will act: auto is 5 s on a real GPU (a cell measured before the floor existed is
    # not the same measurement) and none on simulated GPUs or in a mix (their hashes hold).
    data["min_epoch_s"] = measured_floor(cfg)
    data["workload"] = workload_hash_view(cfg.workload)
    data["mix"]["jobs"] = [mix_job_hash_view(job) for job in cfg.mix.jobs]
    # Keys added after the first results: left out while at their defaults, so old hashes hold.
    later = [(data, _LATER_KEYS), (data["cluster"], _LATER_CLUSTER_KEYS)]
    for entries, defaults in (*later, *((job, _LATER_MIX_JOB_KEYS) for job in data["mix"]["jobs"])):
        for key, default in defaults.items():
            if entries.get(key, default) == default:
                entries.pop(key, None)
    blob = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _check_keys(node: Any, schema: type, prefix: str = "") -> None:
    """Refuse keys a user added with ``+key=...`` that no schema knows (a typo would be ignored)."""
    from omegaconf import DictConfig

    if not isinstance(node, DictConfig) or not dataclasses.is_dataclass(schema):
        return
    fields = {f.name: f for f in dataclasses.fields(schema)}
    for key in node.keys():
        if key not in fields:
            raise ConfigError(f"unknown key {prefix}{key!s}; {schema.__name__} has: {', '.join(sorted(fields))}")
        default = fields[key].default_factory if fields[key].default_factory is not dataclasses.MISSING else None
        if default is not None and dataclasses.is_dataclass(default):
            _check_keys(node[key], default, f"{prefix}{key}.")


def load_config(cfg: DictConfig | Config) -> Config:
    """Convert a composed config to :class:`Config` once, validating every group.

    Raises:
        ConfigError: with the offending key and the allowed values.
    """
    if isinstance(cfg, Config):
        return cfg
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    _check_keys(cfg, Config)
    try:
        obj = OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except OmegaConfBaseException as exc:
        cause = exc.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        raise ConfigError(str(exc).splitlines()[0] + f" (key: {getattr(exc, 'full_key', '?')})") from None
    if not isinstance(obj, Config):
        raise ConfigError("the composed config is not a raycolloc Config (missing 'defaults: [base_config]'?)")
    return obj


@functools.cache  # the schemas never change: storing them again (~0.1 s of OmegaConf per call) changes nothing
def register_configs() -> None:
    """Store every schema in Hydra's ConfigStore (``base_<group>`` and ``base_config``), once per process."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    # conf/cluster: ``sim_root: ${oc.env:RAYCOLLOC_SIM_ROOT,${raycolloc.sim_root:}}``
    OmegaConf.register_new_resolver("raycolloc.sim_root", default_sim_root, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, node in (
        ("workload", WorkloadConfig),
        ("mode", ModeConfig),
        ("cluster", ClusterConfig),
        ("mig", MigConfig),
        ("mix", MixConfig),
        ("measure", MeasureConfig),
        ("queue", QueueConfig),
    ):
        cs.store(group=group, name=f"base_{group}", node=node)
