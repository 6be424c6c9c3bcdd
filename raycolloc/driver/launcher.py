"""The multirun launcher's work: compose and validate every cell of a sweep, then run them all.

``hydra_plugins/raycolloc_launcher`` registers the launcher with Hydra and calls :func:`launch`.
Every Hydra job of the sweep is composed and validated here, once, before any cell starts: one
bad cell stops the sweep with exit 2 before any GPU state changes. The sweep then adds the solo
cells of its mixes and its repeats (:func:`raycolloc.driver.cells.sweep_cells`), and every cell
takes the one path every cell takes (:func:`raycolloc.driver.engine.run_cells`), in this process:
cells are driver threads, one per leased GPU, and their trainers run wherever their GPU lease is.
Each cell's directory is named by its label (``<sweep>/tiny_cnn-mps-x2``, ``<sweep>/tiny_cnn-mps-x2-r1``).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from raycolloc.config import ConfigError, config_hash
from raycolloc.config_checks import listed
from raycolloc.driver.cells import (
    SweepOptions,
    cell_dir_names,
    check_config,
    split_options,
    sweep_cells,
    validate_cell,
)
from raycolloc.driver.dryrun import DryRunLine, print_dry_run
from raycolloc.driver.hydra_errors import as_config_error, check_group_choices
from raycolloc.driver.outcome import EXIT_CONFIG, EXIT_WRITE, print_outcome
from raycolloc.driver.outlock import OutputLocked, hold_output
from raycolloc.driver.rundirs import discard, make
from raycolloc.results.errors import ResultWriteError
from raycolloc.spec import CellSpec

# Ray, pyarrow and pandas come with the engine, imported once the cells are valid: a refused sweep
# answers in about a second.
if TYPE_CHECKING:
    from raycolloc.driver.engine import CellResult

__all__ = ["launch", "print_sweep_summary"]

log = logging.getLogger("raycolloc")


def _compose(ctx: HydraContext, config: DictConfig, job_overrides: Sequence[Sequence[str]],
             initial_job_idx: int) -> list[tuple[DictConfig, CellSpec, SweepOptions]]:
    """Every job's config composed and validated; exits 2 listing every bad one. With
    ``+dry_run=true`` it prints every cell (to run, reuse or refuse) and exits instead."""
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
        task_cfg = copy.deepcopy(cfg)
        with read_write(task_cfg), open_dict(task_cfg):
            del task_cfg["hydra"]
        try:
            options = split_options(task_cfg)
            dry_run = dry_run or options.dry_run
            if options.plan:
                raise ConfigError("+plan runs a radT plan as one sweep: give it without -m "
                                  "(python -m raycolloc.sweep +plan=PATH.csv)")
            composed.append((cfg, spec := validate_cell(task_cfg), options))
            lines.append(DryRunLine(f"#{idx}", spec))
        except ConfigError as exc:
            errors.append(f"#{idx} ({' '.join(filter_overrides(overrides))}): {exc}")
            lines.append(DryRunLine(f"#{idx} ({' '.join(filter_overrides(overrides))})", refused=str(exc)))
    try:
        check_config([spec for _, spec, _ in composed])
    except ConfigError as exc:
        errors.append(str(exc))
    if dry_run:
        # Each refused cell is listed with its reason; the exit status says whether any was.
        out_dir = str(composed[0][1].config.out_dir) if composed else str(Path(str(config.out_dir)).absolute())
        refused = print_dry_run(lines, out_dir, rerun=any(o.rerun for _, _, o in composed), sweep_dir=sweep_dir)
        _discard_sweep_dir(sweep_dir)
        sys.exit(EXIT_CONFIG if refused or errors else 0)
    if errors:
        for line in listed(errors):
            log.error("config error: %s", line)
        _discard_sweep_dir(sweep_dir)
        sys.exit(EXIT_CONFIG)
    return composed


def _discard_sweep_dir(sweep_dir: Path, cell_dirs: Sequence[Path] = ()) -> None:
    """A sweep refused before it ran writes nothing: remove the cells' directories it made (their
    ``.hydra`` only), the directory Hydra made for it, and its parents that the sweep made
    (``multirun/<date>``, ``out_dir``) where they are empty."""
    for cell_dir in cell_dirs:
        discard(cell_dir, {".hydra"})
    discard(sweep_dir, {"multirun.yaml"})


def _save_hydra_files(task_cfg: DictConfig, overrides: Sequence[str], cell_dir: Path) -> None:
    """``.hydra/`` of the cell, as Hydra writes it for a job: the task config and its overrides."""
    hydra_dir = make(cell_dir) / ".hydra"
    hydra_dir.mkdir(exist_ok=True)
    OmegaConf.save(task_cfg, hydra_dir / "config.yaml", resolve=False)
    OmegaConf.save(OmegaConf.create(list(overrides)), hydra_dir / "overrides.yaml")


def _origins(composed: list[tuple[DictConfig, CellSpec, SweepOptions]], job_overrides: Sequence[Sequence[str]],
             spec: CellSpec) -> tuple[DictConfig, list[str]]:
    """The task config and overrides that reproduce ``spec``: its Hydra job's, with ``repeat=<k>`` for a
    repeat; a mix's solo cell (no Hydra job of its own) gets its resolved config and the overrides
    that name it."""
    cfg = spec.config
    first = dataclasses.replace(cfg, repeat=0) if cfg.repeat else cfg
    for (dcfg, user, _), overrides in zip(composed, job_overrides, strict=True):
        if user.config_hash == config_hash(first):
            task_cfg = copy.deepcopy(dcfg)
            with read_write(task_cfg), open_dict(task_cfg):
                del task_cfg["hydra"]
                task_cfg.repeat = cfg.repeat
            return task_cfg, [*overrides, *([f"repeat={cfg.repeat}"] if cfg.repeat else [])]
    job = spec.jobs[0]
    overrides = [f"workload={job.workload}", "degree=1", f"mode={spec.mode}", f"epochs={job.epochs}",
                 f"epoch_samples={job.epoch_samples}", f"batch_size={job.batch_size}"]
    overrides += [f"epoch_time_s={job.epoch_time_s}"] if job.epoch_time_s else []
    overrides += [f"repeat={cfg.repeat}"] if cfg.repeat else []
    return OmegaConf.structured(cfg), overrides


def _job_return(cfg: DictConfig, overrides: Sequence[str], result: CellResult) -> JobReturn:
    ret = JobReturn(overrides=list(overrides), cfg=cfg, working_dir=str(result.cell_dir), task_name="sweep")
    ret.status = JobStatus.COMPLETED
    ret.return_value = {"cell_id": result.cell.cell_id, "status": result.status, "summary": result.summary}
    return ret


def launch(ctx: HydraContext, config: DictConfig, job_overrides: Sequence[Sequence[str]],
           initial_job_idx: int) -> list[JobReturn]:
    """Validate every cell, run them (or reuse their results), print the sweep's summary and its
    closing lines; exits with the sweep's status (:mod:`raycolloc.driver.outcome`) unless 0."""
    composed = _compose(ctx, config, job_overrides, initial_job_idx)
    from raycolloc.driver.engine import run_cells

    sweep_dir = Path(str(composed[0][0].hydra.sweep.dir))
    cells: list[tuple[CellSpec, Path]] = []
    try:
        specs = sweep_cells([spec for _, spec, _ in composed])
        with hold_output(composed[0][1].config.out_dir):  # before anything is written there
            make(sweep_dir)
            for spec, name in zip(specs, cell_dir_names(specs), strict=True):
                _save_hydra_files(*_origins(composed, job_overrides, spec), sweep_dir / name)
                cells.append((spec, sweep_dir / name))
            dirs = {spec.config_hash: cell_dir for spec, cell_dir in cells}
            for cfg, spec, _ in composed:
                with open_dict(cfg):
                    cfg.hydra.sweep.subdir = dirs[spec.config_hash].name
            rerun = any(options.rerun for _, _, options in composed)
            results = run_cells(cells, rerun=rerun)
    except ConfigError as exc:
        log.error("config error: %s", exc)
        if not isinstance(exc, OutputLocked):  # else the directory may be the other sweep's
            _discard_sweep_dir(sweep_dir, [cell_dir for _, cell_dir in cells])
        sys.exit(EXIT_CONFIG)
    except ResultWriteError as exc:
        log.error("%s", exc)
        sys.exit(EXIT_WRITE)
    print_sweep_summary(sweep_dir)
    if code := print_outcome(results):
        sys.exit(code)
    by_hash: dict[str, Any] = {r.cell.config_hash: r for r in results}
    return [_job_return(cfg, overrides, by_hash[spec.config_hash])
            for (cfg, spec, _), overrides in zip(composed, job_overrides, strict=True)]


def print_sweep_summary(sweep_dir: Path) -> None:
    """The sweep's gain table (against degree 1 and against the best solo run; a configuration's
    repeats as median [min-max]) and its mixes against running their jobs one after the other."""
    try:
        from analysis.load import load_sweeps
        from analysis.mixed import mixed_table, table2
        from analysis.report import format_gain
        from analysis.tables import gain_table

        data = load_sweeps([sweep_dir])
        print(f"\nsweep {sweep_dir}: {len(data.cells)} cells, {int((data.cells['status'] == 'ok').sum())} ok")
        gain = gain_table(data.cells, data.jobs)
        if not gain.empty:
            print("throughput gain (gain_vs_solo: same settings at degree 1; gain_vs_best_solo: fastest degree-1 "
                  "run of the workload in the sweep; several runs: median [min-max])")
            print(format_gain(gain))
        mixes = table2(mixed_table(data.cells, data.jobs, data.epochs))
        if not mixes.empty:
            jobs = [c for c in mixes.columns if c.endswith("_s") and not c.startswith(("total", "sequential"))]
            cols = ["mix", "mode", "n_runs", "status", *jobs, "total_s", "sequential_s", "change_vs_sequential_pct"]
            print("mixed cells against their jobs run one after the other (<job>_s: collocated; <job>_alone_s: its "
                  "solo cell; medians of the runs)")
            print(mixes[cols].to_string(index=False, na_rep="-", float_format=lambda v: f"{v:,.2f}"))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the summary is a convenience; the results are on disk
        log.warning("sweep summary unavailable: %s", exc)
