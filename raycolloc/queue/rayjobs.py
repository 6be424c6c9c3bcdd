"""A queue's job as the sweeps' code runs it: a cell of one job on a GPU another job may share.

Each attempt of a job is its own :class:`~raycolloc.spec.CellSpec` (``queue-<job>-<attempt>``) of
degree 1, built by the sweeps' :func:`~raycolloc.driver.cell_specs.build_cell` from the queue's
config: the job's workload (its ``model`` x ``dataset``, ``python`` entry or ``script``; or
``queue.stand_in`` for every job), the GPU's mode, its length in samples as two epochs of half, and
``trainer.fault=oom`` on the first attempt of a job named in ``queue.inject_oom``. The MPS daemon is
not kept past the GPU's last job (``mode.keep_daemon=false``): the mode stops it when the GPU empties
(while other jobs live there it serves them). A queued job measures beside the others on its node
(``cluster.isolate_measurement=false``): collocating them is the queue's point.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from raycolloc.config import Config, ConfigError, MixConfig
from raycolloc.driver.cell_specs import build_cell, resolve_backend
from raycolloc.mode_kinds import BASELINE_MODE
from raycolloc.queue.trace import TraceJob
from raycolloc.spec import CellSpec
from raycolloc.workload_config import WorkloadConfig

__all__ = ["CellMaker", "check_ray_config", "log_file"]


def _workload(job: TraceJob, stand_in: str | None) -> WorkloadConfig:
    if stand_in is not None:
        return WorkloadConfig(name=stand_in)
    if job.kind == "python":
        return WorkloadConfig(name="python", entry=job.entry)
    if job.kind == "script":
        return WorkloadConfig(name="script", command=shlex.split(job.entry or ""))
    return WorkloadConfig(name="timm", model=job.model, dataset=job.dataset)


class CellMaker:
    """Builds each attempt's cell from the queue's config; built cells are cached by workload, mode
    and fault, and given each job's length (building a timm model's cell runs it on the meta device,
    a second or more, and a trace has few distinct workloads but many lengths)."""

    def __init__(self, config: Config, log_dir: Path | None = None) -> None:
        self.config = config
        self.log_dir = log_dir  # a live queue's: each job's output appended to ``<log_dir>/<job_id>.log``
        self._cells: dict[tuple[str, str, str | None], CellSpec] = {}

    def cell(self, job: TraceJob, attempt: int, mode: str, samples: int) -> CellSpec:
        """The cell that runs attempt ``attempt`` of ``job`` under ``mode`` for ``samples`` samples.

        Raises:
            ConfigError: the job cannot run as configured (e.g. fewer samples than two batches).
        """
        queue = self.config.queue
        fault = "oom" if attempt == 1 and job.job_id in queue.inject_oom else None
        workload = _workload(job, queue.stand_in)
        half = max(1, (samples + 1) // 2)  # a config's least is two epochs (a sweep's warm-up and measured one)
        key = (repr(workload), mode, fault)
        cell = self._cells.get(key)
        if cell is None or cell.jobs[0].workload.as_written:  # a script's cell is built as it is written
            cell = self._cells[key] = self._build(workload, mode, fault, half)
        spec = cell.jobs[0]
        if spec.epoch_samples != half and not spec.workload.as_written:
            if half < spec.batch_size:
                raise ConfigError(
                    f"samples={samples} is fewer than two batches of {spec.batch_size} ({spec.workload.name})"
                )
            spec = dataclasses.replace(spec, epoch_samples=half)
        cell_id = f"queue-{job.job_id}-{attempt}"
        log_path = str(log_file(self.log_dir, job.job_id)) if self.log_dir is not None else None
        spec = dataclasses.replace(spec, cell_id=cell_id, log_path=log_path)
        return dataclasses.replace(cell, cell_id=cell_id, jobs=(spec,))

    def _build(self, workload: WorkloadConfig, mode: str, fault: str | None, half: int) -> CellSpec:
        cfg = dataclasses.replace(
            self.config,
            workload=workload,
            mode=dataclasses.replace(self.config.mode, name=mode, keep_daemon=False),
            cluster=dataclasses.replace(self.config.cluster, isolate_measurement=False),
            trainer=dataclasses.replace(self.config.trainer, fault=fault, fault_job=0, fault_epoch=1),
            mix=MixConfig(),
            degree=1,
            epochs=2,
            epoch_samples=None if workload.kind.as_written else half,  # a script trains as written
            epoch_time_s=None,
            min_epoch_s=None,  # a queued job trains its length: a floor would lengthen a short one
        )
        return build_cell(cfg)


def log_file(log_dir: Path, job_id: str) -> Path:
    """Where a live queue keeps ``job_id``'s output (every attempt's, appended)."""
    return log_dir / f"{job_id}.log"


def check_ray_config(config: Config, jobs: list[TraceJob]) -> CellMaker:
    """The cells of a ``ray`` replay (``cluster.backend=auto`` resolved), after checking that
    every job can be built and every ``queue.inject_oom`` id is a job of the trace; before any GPU
    state changes.

    Raises:
        ConfigError: naming the key (or the job) and what is allowed.
    """
    maker = CellMaker(resolve_backend(config))
    ids = {j.job_id for j in jobs}
    for job_id in config.queue.inject_oom:
        if job_id not in ids:
            raise ConfigError(f"queue.inject_oom: {job_id!r} is not a job of the trace")
    for job in jobs:
        try:
            maker.cell(job, 1, BASELINE_MODE, int(job.length_samples or 0))
        except (ConfigError, ValueError, KeyError) as exc:
            raise ConfigError(f"job {job.job_id}: {exc}") from None
    return maker
