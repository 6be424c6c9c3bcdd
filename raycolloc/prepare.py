"""From a composed config to a running cell: validate, connect, check the cluster, resume.

Shared by the single-run entry point and the multirun launcher, which validates *every* cell of
a sweep with :func:`prepare_job` before it starts any.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import ray
from omegaconf import DictConfig, open_dict

from raycolloc.cell import run_cell
from raycolloc.cellspec import CellSpec, plan_cell
from raycolloc.cluster import connect, resolve_backend
from raycolloc.config import Config, ConfigError, load_config
from raycolloc.results import find_completed
from raycolloc.workloads.registry import create_workload

__all__ = ["RESUME_ENV", "CellJob", "Options", "check_cluster", "prepare_job", "run_prepared"]

log = logging.getLogger("raycolloc")
OPTION_KEYS = ("rerun", "plan")
RESUME_ENV = "RAYCOLLOC_RESUME_FROM"


@dataclass(frozen=True)
class Options:
    """Command-line switches outside the cell's config: ``+rerun=true``, ``+plan=PATH.csv``."""

    rerun: bool = False
    plan: str | None = None


@dataclass(frozen=True)
class CellJob:
    """A validated cell, ready to run."""

    cfg: Config
    spec: CellSpec
    options: Options


def _pop_options(dcfg: DictConfig) -> Options:
    values: dict[str, Any] = {}
    with open_dict(dcfg):
        for key in OPTION_KEYS:
            if key in dcfg:
                values[key] = dcfg.pop(key)
    rerun = values.get("rerun", False)
    if not isinstance(rerun, bool):
        raise ConfigError(f"+rerun={rerun!r} is not allowed; use +rerun=true or +rerun=false")
    return Options(rerun=rerun, plan=values.get("plan"))


def prepare_job(dcfg: DictConfig) -> CellJob:
    """Validate a composed config into a :class:`CellJob`.

    Raises:
        ConfigError: naming the key and the allowed values.
    """
    options = _pop_options(dcfg)
    cfg = resolve_backend(load_config(dcfg))
    spec = plan_cell(cfg)
    if cfg.data.source == "real":
        from raycolloc.data.real import DatasetError, check_layout

        for dataset in sorted({create_workload(j.workload).dataset for j in spec.jobs}):
            try:
                check_layout(dataset, str(cfg.data.path))
            except DatasetError as exc:
                raise ConfigError(f"data.path: {exc}") from None
    if cfg.cluster.backend == "sim":
        for job in spec.jobs:
            if create_workload(job.workload).size != "tiny" and job.epoch_samples > 20_000:
                log.warning("simulated GPUs train on the CPU: %s with %d samples per epoch will be slow; "
                            "try workload=tiny_cnn or a smaller epoch_samples", job.workload, job.epoch_samples)
    return CellJob(cfg, spec, options)


def check_cluster(cfgs: list[Config]) -> None:
    """Pre-flight against the connected cluster: fail before any GPU state changes.

    Raises:
        ConfigError: e.g. mode=mig where no GPU has MIG enabled, or a MIG layout that does not fit.
    """
    from raycolloc.modes.mig import check_mig_possible
    from raycolloc.steward import get_steward

    gpu_nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU", 0) >= 1]
    if not gpu_nodes:
        raise ConfigError("the Ray cluster has no GPU; use cluster=local for simulated GPUs, or start Ray on GPU nodes")
    if not any(c.mode.name == "mig" or c.mix.mig_layout for c in cfgs):
        return
    infos = []
    for node in gpu_nodes:
        steward = get_steward(node["NodeID"], cfgs[0].cluster, cfgs[0].mode.pipe_root)
        infos.append(ray.get(steward.info.remote(), timeout=60))
    for cfg in cfgs:
        if cfg.mode.name == "mig":
            check_mig_possible(cfg, infos)


def _link_previous(previous: Path, job_dir: Path) -> None:
    """Resume: put the earlier results of this cell into this job's directory (one result per cell)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    for name in ("epochs", "jobs", "telemetry"):
        shutil.copy2(previous / f"{name}.parquet", job_dir / f"{name}.parquet")
    cells = pq.read_table(previous / "cells.parquet")
    if cells.column("resumed_from")[0].as_py() is None:
        idx = cells.schema.get_field_index("resumed_from")
        cells = cells.set_column(idx, "resumed_from", [[str(previous)] * cells.num_rows])
    tmp = job_dir / ".cells.parquet.tmp"
    pq.write_table(cells, tmp)
    tmp.replace(job_dir / "cells.parquet")


def run_prepared(job: CellJob, job_dir: Path, connect_ray: bool = True) -> dict[str, Any]:
    """Run one validated cell in ``job_dir`` (or reuse its earlier results).

    Returns:
        ``{"cell_id", "status", "summary", "row"}``: the summary is the short table to print.
    """
    cfg, spec = job.cfg, job.spec
    if not job.options.rerun:
        hint = os.environ.get(RESUME_ENV)  # the launcher found it already
        previous = Path(hint) if hint else find_completed(cfg.out_dir, spec.config_hash, exclude=job_dir)
        if previous is not None:
            _link_previous(previous, job_dir)
            status = pq.read_table(job_dir / "cells.parquet", columns=["status"]).column("status")[0].as_py()
            summary = (f"cell {spec.cell_id}: results exist in {previous} (config hash {spec.config_hash}, "
                       f"status={status}) - skipped; +rerun=true runs it again")
            return {"cell_id": spec.cell_id, "status": status, "summary": summary, "resumed_from": str(previous)}
    if connect_ray:
        connect(cfg.cluster, max_jobs_per_cell=spec.degree)
        check_cluster([cfg])
    outcome = run_cell(cfg, spec, job_dir)
    return {"cell_id": spec.cell_id, "status": outcome.status, "summary": outcome.summary, "row": outcome.cell}
