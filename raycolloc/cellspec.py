"""A cell resolved from its config: the jobs it runs and how each is bound to the GPU.

These frozen dataclasses are what actors receive (never DictConfigs).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from raycolloc.config import Config, ConfigError, DataConfig, MigConfig, ModeConfig, TelemetryConfig, TrainerConfig, config_hash
from raycolloc.workloads.registry import create_workload

__all__ = ["Binding", "CellSpec", "JobSpec", "plan_cell"]


@dataclass(frozen=True)
class JobSpec:
    """One training run of a cell."""

    index: int
    workload: str
    batch_size: int
    epochs: int
    epoch_samples: int
    seed: int
    data: DataConfig
    trainer: TrainerConfig
    mig_profile: str | None = None
    active_thread_percentage: int | None = None
    pinned_mem_limit: str | None = None

    @property
    def name(self) -> str:
        return f"{self.index}-{self.workload}"

    @property
    def steps_per_epoch(self) -> int:
        return max(1, self.epoch_samples // self.batch_size)


@dataclass(frozen=True)
class CellSpec:
    """One cell: one GPU, one mode, a list of jobs."""

    cell_id: str
    label: str
    config_hash: str
    mode: ModeConfig
    mig: MigConfig
    telemetry: TelemetryConfig
    jobs: tuple[JobSpec, ...]
    mix_name: str | None = None
    mix_mig_layout: Any = None
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def degree(self) -> int:
        return len(self.jobs)

    @property
    def workloads(self) -> str:
        """The workload name (uniform cells) or ``+``-joined names (mixed cells)."""
        names = [j.workload for j in self.jobs]
        return names[0] if len(set(names)) == 1 else "+".join(names)


@dataclass(frozen=True)
class Binding:
    """How one job is bound to the GPU, as the steward prepared it."""

    job_index: int
    gpu_uuid: str
    env: dict[str, str]
    mig_uuid: str | None = None
    mig_profile: str | None = None
    mps_pipe_dir: str | None = None
    mps_control: str | None = None
    cpus: tuple[int, ...] | None = None  # cores the job is pinned to (trainer.cpu_affinity=auto)


def _per_job(value: Any, index: int) -> Any:
    return value[index] if isinstance(value, list | tuple) else value


def plan_cell(cfg: Config) -> CellSpec:
    """Resolve a validated config into the cell's jobs (batch sizes, epoch lengths, MPS limits)."""
    digest = config_hash(cfg)
    mixed = bool(cfg.mix.jobs)
    entries = cfg.mix.jobs if mixed else [None] * cfg.degree
    jobs = []
    for i, entry in enumerate(entries):
        name = entry.workload if entry else cfg.workload.name
        spec = create_workload(name)
        batch = (entry.batch_size if entry and entry.batch_size else None) or cfg.batch_size or spec.batch_size
        samples = (entry.epoch_samples if entry and entry.epoch_samples else None) or cfg.epoch_samples or spec.dataset_size
        if samples < batch:
            raise ConfigError(f"epoch_samples={samples} is smaller than batch_size={batch} (job {i}, {name})")
        trainer = cfg.trainer
        if entry:
            changes = {k: getattr(entry, k) for k in ("compile", "amp", "channels_last") if getattr(entry, k) is not None}
            trainer = dataclasses.replace(trainer, **changes)
        jobs.append(JobSpec(
            index=i, workload=name, batch_size=batch,
            epochs=(entry.epochs if entry and entry.epochs else None) or cfg.epochs,
            epoch_samples=samples, seed=cfg.seed + i, data=cfg.data, trainer=trainer,
            mig_profile=entry.mig_profile if entry else None,
            active_thread_percentage=(entry.active_thread_percentage if entry else None)
            or _per_job(cfg.mode.active_thread_percentage, i),
            pinned_mem_limit=_per_job(cfg.mode.pinned_mem_limit, i),
        ))
    return CellSpec(
        cell_id=f"{cfg.cell_label}-{digest[:8]}", label=cfg.cell_label, config_hash=digest,
        mode=cfg.mode, mig=cfg.mig, telemetry=cfg.telemetry, jobs=tuple(jobs),
        mix_name=(cfg.mix.name or "custom") if mixed else None, mix_mig_layout=cfg.mix.mig_layout if mixed else None,
        tags=dict(cfg.tags),
    )
