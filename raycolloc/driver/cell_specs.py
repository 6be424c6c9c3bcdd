"""From a composed config to a validated :class:`~raycolloc.spec.CellSpec`, once, in the driver.

The launcher calls :func:`validate_cell` for every Hydra job of a sweep before any cell starts (and
the single-run entry for its one cell); everything downstream receives the spec and never
validates again. :func:`sweep_cells` then adds what the sweep runs beyond the user's cells: the
solo cell of every job of a mix (the serial baseline of the study's Table 2) and ``repeats``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from raycolloc.config import Config, ConfigError, MixJob, config_hash, load_config, measured_floor
from raycolloc.driver.mix_solos import JobSettings, job_settings, mix_solos, solo_overrides
from raycolloc.driver.node_paths import check_node_paths
from raycolloc.job.workloads.resolve import resolve
from raycolloc.node.gpu.kinds import backend_traits
from raycolloc.node.mig.profiles import UnknownGpuModel, get_gpu_model, known_gpu_models
from raycolloc.spec import CellSpec, JobSpec
from raycolloc.workload_config import TimmKind, WorkloadConfig, workload_label
from raycolloc.workload_kinds import ModelWorkload, Workload

__all__ = [
    "JobSettings",
    "SweepOptions",
    "build_cell",
    "cell_dir_names",
    "check_config",
    "fixed_repeats",
    "job_settings",
    "mix_solos",
    "resolve_backend",
    "solo_overrides",
    "split_options",
    "sweep_cells",
    "validate_cell",
]

log = logging.getLogger("raycolloc")
_SLOW_WARNED: set[tuple[str, int]] = set()
OPTION_KEYS = ("rerun", "plan", "dry_run", "plan_datasets", "plan_epoch_regex", "plan_fanout")


@dataclass(frozen=True)
class SweepOptions:
    """Command-line switches outside any cell's config: ``+rerun=true``, ``+dry_run=true``,
    ``+plan=PATH.csv`` and, for plans, ``+plan_datasets={dir_name: dataset}``,
    ``+plan_epoch_regex=REGEX`` (epoch marks of the plan's script rows) and ``+plan_fanout=true``
    (the plan's groups at once on any free GPU, not one after another on their ``Devices``)."""

    rerun: bool = False
    plan: str | None = None
    dry_run: bool = False
    plan_datasets: dict[str, str] = field(default_factory=dict)
    plan_epoch_regex: str | None = None
    plan_fanout: bool = False


def split_options(dcfg: DictConfig) -> SweepOptions:
    """Take the sweep's switches out of a composed config (they do not belong to the cell).

    Raises:
        ConfigError: a switch with a value it does not take.
    """
    values: dict[str, Any] = {}
    with open_dict(dcfg):
        for key in OPTION_KEYS:
            if key in dcfg:
                value = dcfg.pop(key)
                values[key] = OmegaConf.to_container(value) if isinstance(value, DictConfig) else value
    for key in ("rerun", "dry_run", "plan_fanout"):
        if not isinstance(values.get(key, False), bool):
            raise ConfigError(f"+{key}={values[key]!r} is not allowed; use +{key}=true or +{key}=false")
    datasets = values.get("plan_datasets") or {}
    from raycolloc.datasets import DATASETS

    if not isinstance(datasets, dict) or any(v not in DATASETS for v in datasets.values()):
        raise ConfigError(
            f"+plan_datasets={datasets!r} is not allowed; map data directory names to datasets: "
            f"+plan_datasets={{my_dir: cifar10}} (datasets: {', '.join(DATASETS)})"
        )
    regex = values.get("plan_epoch_regex")
    if regex is not None:
        try:
            re.compile(str(regex))
        except re.error as exc:
            raise ConfigError(f"+plan_epoch_regex={regex!r} is not a regular expression: {exc}") from None
    return SweepOptions(
        rerun=values.get("rerun", False),
        plan=values.get("plan"),
        dry_run=values.get("dry_run", False),
        plan_datasets={str(k): str(v) for k, v in datasets.items()},
        plan_epoch_regex=None if regex is None else str(regex),
        plan_fanout=values.get("plan_fanout", False),
    )


def _per_job(value: Any, index: int) -> Any:
    return value[index] if isinstance(value, list | tuple) else value


def _estimate(wc: WorkloadConfig, workload: Workload, batch: int) -> float | None:
    """A composition's memory estimate, from a forward pass on the meta device: a model that cannot
    train on this input is refused here, before any GPU state changes. (Presets are known to run;
    their estimate is made where it is needed, in a simulated GPU's training process.)"""
    if not isinstance(wc.kind, TimmKind) or not isinstance(workload, ModelWorkload):
        return None
    from raycolloc.job.workloads.estimate import estimate_memory, warn_no_estimate

    try:
        return estimate_memory(workload, batch).total_mib
    except NotImplementedError as exc:
        # An operator without a meta kernel says nothing about the model itself: no estimate.
        warn_no_estimate(workload.name, f"the meta device cannot run it: {str(exc).splitlines()[0][:200]}")
        return None
    except Exception as exc:  # noqa: BLE001 - whatever the model raises on this input
        raise ConfigError(
            f"workload.model={wc.model} cannot train on {wc.dataset} at "
            f"{workload.sample_shape[-1]} px with batch {batch}: "
            f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        ) from None


def _script_settings(cfg: Config, entry: MixJob | None, i: int) -> None:
    """A script trains as written: raycolloc's own training settings would be silently ignored."""
    asked = [k for k in ("batch_size", "epoch_samples") if getattr(cfg, k) is not None and not cfg.mix.jobs]
    asked += [
        f"mix.jobs[{i}].{k}"
        for k in ("batch_size", "epoch_samples", "compile", "amp", "channels_last")
        if entry is not None and getattr(entry, k) is not None
    ]
    asked += [
        f"trainer.{k}"
        for k, off in (("compile", "off"), ("amp", "off"), ("channels_last", False))
        if getattr(cfg.trainer, k) != off
    ]
    if cfg.trainer.fault is not None and cfg.trainer.fault_job == i:
        asked.append("trainer.fault")
    if asked:
        raise ConfigError(
            f"{', '.join(asked)} do(es) not apply to job {i}: workload=script runs the script as "
            "written (give the script its own options in workload.command)"
        )


def build_cell(cfg: Config) -> CellSpec:
    """Resolve a validated config into the cell's jobs (workloads, batch sizes, epoch lengths, MPS limits).

    Raises:
        ConfigError: a job cannot run as configured (e.g. an epoch shorter than one batch).
    """
    digest = config_hash(cfg)
    cell_id = f"{cfg.cell_label}-{digest[:8]}"
    mixed = bool(cfg.mix.jobs)
    entries: list[MixJob | None] = list(cfg.mix.jobs) if mixed else [None] * cfg.degree
    resolved: dict[tuple[int, str | None], Workload] = {}  # a uniform cell resolves its workload once
    jobs = []
    for i, entry in enumerate(entries):
        wc = entry.composition if entry else cfg.workload
        path = (entry.data_path if entry else None) or cfg.data.path
        data = cfg.data if path == cfg.data.path else dataclasses.replace(cfg.data, path=path)
        key = (id(entry.workload) if entry else id(wc), path)
        if key not in resolved:
            resolved[key] = resolve(wc, workload_label(wc), cfg.data.source, path)
        workload = resolved[key]
        own = job_settings(cfg, entry)
        if workload.as_written:
            _script_settings(cfg, entry, i)
        batch, samples = workload.amount(own.batch_size, own.epoch_samples)
        estimate = _estimate(wc, workload, batch)
        if samples < batch:
            raise ConfigError(f"epoch_samples={samples} is smaller than batch_size={batch} (job {i}, {workload.name})")
        jobs.append(
            JobSpec(
                cell_id=cell_id,
                index=i,
                workload=workload,
                batch_size=batch,
                epochs=own.epochs,
                epoch_samples=samples,
                seed=cfg.seed + i,
                data=data,
                trainer=own.trainer,
                epoch_time_s=own.epoch_time_s,
                # None in a mix: its headline is the time its jobs' fixed work takes (analysis/mixed.py);
                # None for a script: it runs as written.
                min_epoch_s=None if workload.as_written else measured_floor(cfg),
                mig_profile=entry.mig_profile if entry else None,
                active_thread_percentage=(entry.active_thread_percentage if entry else None)
                or _per_job(cfg.mode.active_thread_percentage, i),
                pinned_mem_limit=_per_job(cfg.mode.pinned_mem_limit, i),
                mem_estimate_mib=estimate,
            )
        )
    return CellSpec(
        cell_id=cell_id,
        label=cfg.cell_label,
        config_hash=digest,
        config=cfg,
        jobs=tuple(jobs),
        mix_name=(cfg.mix.name or "custom") if mixed else None,
        mix_mig_layout=cfg.mix.mig_layout if mixed else None,
    )


def _check_data(cfg: Config, spec: CellSpec) -> None:
    """Real data is where the readers look (model jobs: python and script jobs read their own);
    a simulated GPU with a large epoch warns that it trains on the CPU."""
    if cfg.data.source == "real":
        from raycolloc.job.data.readable import check_readable
        from raycolloc.job.data.real import DatasetError, check_layout

        models = [(j, j.workload) for j in spec.jobs if isinstance(j.workload, ModelWorkload)]
        if any(not j.data.path for j, _ in models):
            raise ConfigError("data.source=real needs data.path=<dataset directory or file>")
        from raycolloc.datasets import DATASETS

        for _, w in models:
            native = DATASETS[w.dataset].resolution if w.reader in ("cifar10", "imagenet64") else None
            if native is not None and w.sample_shape[-1] != native:
                raise ConfigError(
                    f"workload.resolution={w.sample_shape[-1]} with data.source=real: {w.dataset} "
                    f"holds {native} px images, read as they are (no resizing); use "
                    f"data.source=synthetic, or the dataset's own resolution"
                )
        for reader, path in sorted({(w.reader, j.data.path) for j, w in models}, key=str):
            try:
                if reader is None:
                    raise DatasetError("synthetic data has no files: use data.source=synthetic")
                check_readable(reader, check_layout(reader, str(path)))
            except DatasetError as exc:
                raise ConfigError(f"data.path: {exc}") from None
    if backend_traits(cfg.cluster.backend).trains_on_cpu:
        slow = {
            j.workload.name: j
            for j in spec.jobs
            if isinstance(j.workload, ModelWorkload) and j.workload.size != "tiny" and j.epoch_samples > 20_000
        }
        for job in slow.values():
            if (job.workload.name, job.epoch_samples) in _SLOW_WARNED:  # once per process: a plan has hundreds of cells
                continue
            _SLOW_WARNED.add((job.workload.name, job.epoch_samples))
            log.warning(
                "simulated GPUs train on the CPU: %s with %d samples per epoch will be slow; "
                "try workload=tiny_cnn or a smaller epoch_samples",
                job.workload.name,
                job.epoch_samples,
            )


def _check_gpu_model(cfg: Config) -> None:
    """``cluster.gpu_model`` names a GPU of the node's MIG tables (read here: the config contract
    imports nothing from the node)."""
    try:
        get_gpu_model(cfg.cluster.gpu_model)
    except UnknownGpuModel:
        raise ConfigError(
            f"cluster.gpu_model={cfg.cluster.gpu_model!r} is not allowed; choose one of: "
            f"{', '.join(known_gpu_models())}"
        ) from None


def resolve_backend(cfg: Config) -> Config:
    """Replace ``cluster.backend=auto`` by ``nvml`` or ``sim``, once, before anything else: ``nvml``
    when NVML finds a GPU on this machine or an address is given, else ``sim`` (local mode with
    simulated GPUs)."""
    if cfg.cluster.backend != "auto":
        return cfg
    from raycolloc.node.gpu.nvml import nvml_gpu_count

    remote = cfg.cluster.address or os.environ.get("RAY_ADDRESS")
    backend = "nvml" if remote or nvml_gpu_count() > 0 else "sim"
    return dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, backend=backend))


def validate_cell(cfg: DictConfig | Config) -> CellSpec:
    """Validate one cell's composed config into its spec (``cluster.backend=auto`` resolved).

    Raises:
        ConfigError: naming the key and the allowed values.
    """
    config = resolve_backend(load_config(cfg))
    _check_gpu_model(config)
    spec = build_cell(config)
    _check_data(config, spec)
    check_node_paths(config, spec)  # where the node is this machine: pipe root, script files, data paths
    return spec


def fixed_repeats(cfg: Config) -> int:
    """The runs a sweep plans for a cell up front: ``repeats=N`` N, ``repeats=auto`` one (the engine
    adds more where the noise is: :mod:`raycolloc.driver.repeats`)."""
    return cfg.repeats if isinstance(cfg.repeats, int) else 1


def sweep_cells(specs: list[CellSpec]) -> list[CellSpec]:
    """Everything a sweep runs for the user's cells, each config once, repeats interleaved.

    Adds the solo cells of every mix (:func:`mix_solos`) unless the sweep already has that config,
    then ``repeats`` copies of every cell: all cells' repeat 0 first, then all repeat 1, ... (the
    engine keeps that order), so a slow drift of the machine spreads over every configuration
    instead of landing on the last one. With ``repeats=auto`` each cell once: the engine adds the
    repeats as results come in (:mod:`raycolloc.driver.repeats`).

    Raises:
        ConfigError: a solo cell cannot run as configured.
    """
    base: dict[str, CellSpec] = {}
    for spec in specs:
        base.setdefault(spec.config_hash, spec)
    for spec in specs:
        for solo in mix_solos(spec.config) if spec.mix_name is not None else []:
            solo_spec = validate_cell(solo)
            base.setdefault(solo_spec.config_hash, solo_spec)
    out = list(base.values())
    for k in range(1, max(fixed_repeats(s.config) for s in out)):
        out += [
            validate_cell(dataclasses.replace(s.config, repeat=s.config.repeat + k))
            for s in base.values()
            if k < fixed_repeats(s.config)
        ]
    return out


def cell_dir_names(specs: list[CellSpec]) -> list[str]:
    """A directory name per cell, unique in the sweep: the cell's label, or its id (label and config
    hash) where two cells of the sweep share a label (they differ in a key the label leaves out)."""
    counts: dict[str, int] = {}
    for spec in specs:
        counts[spec.label] = counts.get(spec.label, 0) + 1
    names = [spec.label if counts[spec.label] == 1 else spec.cell_id for spec in specs]
    seen: dict[str, int] = {}
    out = []
    for name in names:  # the same config twice in one sweep: numbered
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return out


def check_config(cells: list[CellSpec]) -> None:
    """Settings every cell of one sweep must share.

    Raises:
        ConfigError: naming the key.
    """
    if len({repr(dataclasses.replace(c.config.cluster, sim_inject=[])) for c in cells}) > 1:  # injections: per cell
        raise ConfigError("cluster.* must be the same for every cell of a sweep")
