"""The multirun launcher's work: compose and validate every cell of a sweep, then run them all.

:class:`SweepLauncher` is Hydra's launcher; ``hydra_plugins/raycolloc_launcher`` only registers it under
its name (Hydra takes plugins from that package alone), so a multirun's config goes from Hydra straight
to this module.
Every Hydra job of the sweep is composed and validated here, once, before any cell starts: one
bad cell stops the sweep with exit 2 before any GPU state changes. The sweep then adds the solo
cells of its mixes and its repeats (:func:`raycolloc.driver.cell_specs.sweep_cells`), and every cell
takes the one path every cell takes (:func:`raycolloc.driver.engine.run_cells`), in this process:
cells are driver threads, one per leased GPU, and their trainers run wherever their GPU lease is.
Each cell's directory is named by its label (``<sweep>/tiny_cnn-mps-x2``, ``<sweep>/tiny_cnn-mps-x2-r1``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from raycolloc.config import ConfigError, config_hash, first_run_hash
from raycolloc.driver.cell_specs import (
    SweepOptions,
    cell_dir_names,
    check_config,
    mix_solos,
    solo_overrides,
    split_options,
    sweep_cells,
    validate_cell,
)
from raycolloc.driver.dryrun import DryRunLine
from raycolloc.driver.hydra_errors import as_config_error, check_group_choices
from raycolloc.driver.outcome import SweepEnded
from raycolloc.driver.plan import Origin, PlannedCell, Step, SweepPlan, repeat_cells, run
from raycolloc.spec import CellSpec

# Ray, pyarrow and pandas come with the engine, imported once the cells are valid: a refused sweep
# answers in about a second.
if TYPE_CHECKING:
    from raycolloc.driver.engine import CellResult

__all__ = ["SweepLauncher", "launch", "multirun_plan"]


def _compose(
    ctx: HydraContext, config: DictConfig, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> tuple[list[tuple[DictConfig, CellSpec, SweepOptions]], list[str], list[DryRunLine], bool]:
    """Every job's config composed and validated: the valid ones, every bad one (an error and a dry-run
    line each), and whether any job asked for a dry run."""
    sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()  # resolve ${now:} once, here
    composed, errors, lines = [], [], []
    dry_run = False
    for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
        try:
            cfg = ctx.config_loader.load_sweep_config(config, list(overrides))
            check_group_choices(cfg.hydra.runtime.choices)
        except Exception as exc:  # Hydra's composition errors are config errors (the rest is raised again)
            error = as_config_error(exc)
            if error is None:
                raise
            errors.append(f"#{idx} ({' '.join(filter_overrides(overrides))}): {error}")
            lines.append(DryRunLine(f"#{idx} ({' '.join(filter_overrides(overrides))})", refused=str(error)))
            continue
        with open_dict(cfg):
            cfg.hydra.job.id = idx
            cfg.hydra.job.num = idx
            cfg.hydra.sweep.dir = str(sweep_dir)
            cfg.out_dir = str(Path(str(cfg.out_dir)).absolute())
        try:
            task_cfg = _task_config(cfg)
            options = split_options(task_cfg)
            dry_run = dry_run or options.dry_run
            if options.plan:
                raise ConfigError(
                    "+plan runs a radT plan as one sweep: give it without -m (python -m raycolloc.sweep +plan=PATH.csv)"
                )
            composed.append((cfg, spec := validate_cell(task_cfg), options))
            lines.append(DryRunLine(f"#{idx}", spec))
        except ConfigError as exc:
            errors.append(f"#{idx} ({' '.join(filter_overrides(overrides))}): {exc}")
            lines.append(DryRunLine(f"#{idx} ({' '.join(filter_overrides(overrides))})", refused=str(exc)))
    try:
        check_config([spec for _, spec, _ in composed])
    except ConfigError as exc:
        errors.append(str(exc))
    return composed, errors, lines, dry_run


def _task_config(cfg: DictConfig) -> DictConfig:
    """A job's config without Hydra's node: what ``.hydra/config.yaml`` records."""
    task_cfg = copy.deepcopy(cfg)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    return task_cfg


def _origin(
    composed: list[tuple[DictConfig, CellSpec, SweepOptions]], job_overrides: Sequence[Sequence[str]], spec: CellSpec
) -> Origin:
    """The task config and overrides that reproduce ``spec``: its Hydra job's, with ``repeat=<k>`` for a
    repeat (and ``floor_share=<s>`` for a solo's repeat over a share of its floor, driver/floor.py); a
    mix's solo cell (no Hydra job of its own) gets its resolved config and its mix's overrides with the
    solo's own settings (:func:`raycolloc.driver.cell_specs.solo_overrides`)."""
    cfg = spec.config
    first = first_run_hash(cfg)
    repeat = [f"repeat={cfg.repeat}"] if cfg.repeat else []
    repeat += [f"floor_share={cfg.floor_share!r}"] if cfg.floor_share < 1 else []  # as hashed: every digit
    for (dcfg, user, _), overrides in zip(composed, job_overrides, strict=True):
        if user.config_hash == first:
            task_cfg = _task_config(dcfg)
            with read_write(task_cfg), open_dict(task_cfg):
                task_cfg.repeat = cfg.repeat
                task_cfg.floor_share = cfg.floor_share
            return Origin(task_cfg, (*overrides, *repeat))
    for (_, user, _), overrides in zip(composed, job_overrides, strict=True):
        for solo in mix_solos(user.config) if user.mix_name is not None else []:
            if config_hash(solo) == first:
                return Origin(OmegaConf.structured(cfg), (*solo_overrides(overrides, solo), *repeat))
    raise AssertionError(f"cell {spec.cell_id} comes from no job of the sweep")


def _job_return(cfg: DictConfig, overrides: Sequence[str], result: CellResult) -> JobReturn:
    ret = JobReturn(overrides=list(overrides), cfg=cfg, working_dir=str(result.cell_dir), task_name="sweep")
    ret.status = JobStatus.COMPLETED
    ret.return_value = {"cell_id": result.cell.cell_id, "status": result.status, "summary": result.summary}
    return ret


def multirun_plan(
    ctx: HydraContext, config: DictConfig, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> tuple[SweepPlan, list[tuple[DictConfig, CellSpec, SweepOptions]]]:
    """The sweep plan of a Hydra multirun: every job composed and validated (a bad one refuses the
    sweep; a dry run lists it), a mix's solo cells and the repeats added, each cell in the directory
    named by its label with the ``.hydra`` record that composes it again; and the composed jobs.

    Raises:
        ConfigError: a mix's solo cell or a repeat cannot run as configured.
    """
    composed, errors, lines, dry_run = _compose(ctx, config, job_overrides, initial_job_idx)
    sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
    out_dir = str(composed[0][1].config.out_dir) if composed else str(Path(str(config.out_dir)).absolute())
    rerun = any(options.rerun for _, _, options in composed)
    plan = SweepPlan(
        sweep_dir, out_dir, rerun=rerun, dry_run=dry_run, lines=tuple(lines), errors=tuple(errors), summary=True
    )
    if plan.dry_run or errors:
        return plan, composed
    specs = sweep_cells([spec for _, spec, _ in composed])
    cells = tuple(
        PlannedCell(spec, sweep_dir / name, origin=_origin(composed, job_overrides, spec))
        for spec, name in zip(specs, cell_dir_names(specs), strict=True)
    )
    dirs = {c.spec.config_hash: c.cell_dir for c in cells}
    for cfg, spec, _ in composed:
        with open_dict(cfg):
            cfg.hydra.sweep.subdir = dirs[spec.config_hash].name
    repeat = repeat_cells(cells, lambda spec: _origin(composed, job_overrides, spec))
    return dataclasses.replace(plan, steps=(Step(cells, repeat=repeat),)), composed


def launch(
    ctx: HydraContext, config: DictConfig, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> list[JobReturn]:
    """Plan the sweep and run it (:func:`raycolloc.driver.plan.run`); one ``JobReturn`` per Hydra job.

    Raises:
        SweepEnded: the sweep's exit status is not 0 (:mod:`raycolloc.driver.outcome`), or it was a dry run.
        ConfigError: refused before any cell ran.
        ResultWriteError: a result could not be written.
    """
    plan, composed = multirun_plan(ctx, config, job_overrides, initial_job_idx)
    outcome = run(plan)
    if outcome.code or plan.dry_run:  # a dry run ran no job: Hydra gets none back
        raise SweepEnded(outcome)
    by_hash: dict[str, Any] = {r.cell.config_hash: r for r in outcome.results}
    return [
        _job_return(cfg, overrides, by_hash[spec.config_hash])
        for (cfg, spec, _), overrides in zip(composed, job_overrides, strict=True)
    ]


class SweepLauncher(Launcher):
    """Hydra's launcher for ``-m``: every cell of the sweep planned here and run on the GPUs of a Ray
    cluster (registered as ``hydra/launcher=raycolloc`` by ``hydra_plugins/raycolloc_launcher``)."""

    def __init__(self) -> None:
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        # The task function is not called: each cell's work is raycolloc's own (the entry point's
        # single-run path and this launcher share raycolloc.driver.plan.run).
        self.config, self.hydra_context = config, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return launch(self.hydra_context, self.config, job_overrides, initial_job_idx)
