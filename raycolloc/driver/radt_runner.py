"""Run a radT experiment plan: ``python -m raycolloc.sweep +plan=PATH.csv [overrides]``.

Groups (rows sharing Experiment and Workload) run one after the other; the cells of a group (one
per distinct ``Devices`` value) start together, each on its own GPU lease. Every cell is an
explicit list of jobs (as a mixed cell: each trains its epochs to completion, no barrier).
Overrides on the command line apply to every cell; ``batch_size`` given there wins over the plan's.
Rows whose File is the researcher's own script run as script jobs (``raycolloc.job.script``); with
``data.source=real`` each job reads its own row's data directory. After a group, its rows' Status is
written back into the CSV (FINISHED, or FAILED if any cell failed), as radT does, so a re-run skips
what finished. ``+dry_run=true`` prints the cells instead (``raycolloc.driver.dryrun``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from raycolloc.config import Config, ConfigError, MixConfig, MixJob, load_config
from raycolloc.driver.cells import SweepOptions, resolve_backend, validate_cell
from raycolloc.driver.dryrun import DryRunLine, print_dry_run
from raycolloc.driver.outlock import hold_output
from raycolloc.driver.radt import PlanCell, PlanError, PlanGroup, groups_to_run, read_plan
from raycolloc.job.workloads.registry import list_workloads
from raycolloc.spec import CellSpec

__all__ = ["cell_config", "run_plan"]

log = logging.getLogger("raycolloc")


def cell_config(base: Config, group: PlanGroup, cell: PlanCell) -> Config:
    """The raycolloc config of one plan cell: the base config with the cell's mode and jobs.

    Raises:
        ConfigError: a job the plan describes cannot run as given (naming the CSV line).
    """
    jobs = []
    for job in cell.jobs:
        if job.kind == "script":  # it trains as its Params say: raycolloc sets none of its settings
            jobs.append(MixJob(workload=job.workload, mig_profile=job.mig_profile))
            continue
        if job.epochs is not None and job.epochs < 2:
            raise ConfigError(f"plan line {job.line} (Run {job.run!r}): --epochs {job.epochs}; raycolloc needs at "
                              f"least 2 (epoch 1 is the warm-up)")
        try:
            jobs.append(MixJob(workload=job.workload, batch_size=base.batch_size or job.batch_size,
                               epochs=job.epochs, mig_profile=job.mig_profile,
                               data_path=job.data_dir if base.data.source == "real" else None))
        except ConfigError as exc:
            raise ConfigError(f"plan line {job.line} (Run {job.run!r}): {exc}") from None
    name = f"{group.experiment}-{group.workload}-dev{cell.devices}".replace("/", "_").replace(" ", "_")
    return dataclasses.replace(base, mode=dataclasses.replace(base.mode, name=cell.mode),
                               mix=MixConfig(name=name, jobs=jobs), degree=1)


def _write_status(path: Path, lines: dict[int, str]) -> None:
    """Set the Status field of the given CSV lines (1-based), keeping everything else."""
    text = path.read_text()
    rows = list(csv.reader(io.StringIO(text)))
    header = [h.strip().lower() for h in rows[0]]
    col = header.index("status")
    for line, status in lines.items():
        row = rows[line - 1]
        pad = row[col][: len(row[col]) - len(row[col].lstrip())]
        row[col] = f"{pad}{status}"
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(out.getvalue())
    os.replace(tmp, path)


def _validate(base: Config, groups: list[PlanGroup], dry_run: bool
              ) -> tuple[list[tuple[PlanGroup, list[tuple[PlanCell, CellSpec]]]], list[DryRunLine]]:
    """Every cell of every group validated before anything runs; a dry run lists the refused ones
    instead of stopping at the first."""
    planned, lines = [], []
    for group in groups:
        cells = []
        for cell in group.cells:
            name = f"{group.experiment}/{group.workload} Devices {cell.devices} (lines {cell.jobs[0].line}-{cell.jobs[-1].line})"
            try:
                spec = validate_cell(cell_config(base, group, cell))
            except ConfigError as exc:
                if not dry_run:
                    raise
                lines.append(DryRunLine(name, refused=str(exc)))
                continue
            cells.append((cell, spec))
            lines.append(DryRunLine(name, spec, where=f"plan Devices {cell.devices!r} (a GPU leased for this cell, "
                                    f"starting with the {len(group.cells)} cell(s) of its group)"))
        planned.append((group, cells))
    return planned, lines


def run_plan(dcfg: DictConfig, options: SweepOptions, run_dir: Path) -> dict[str, Any]:
    """Run every group of the plan that still has work; returns per-cell summaries and, under
    ``results``, how each cell ended (``CellResult``: the sweep's exit status comes from them).

    Raises:
        ConfigError: the plan cannot be read, or one of its cells is invalid (nothing has run).
        ResultWriteError: a result could not be written (see :func:`run_cells`).
    """
    path = Path(str(options.plan)).expanduser()
    base = resolve_backend(load_config(dcfg))
    try:
        everything = read_plan(path, known_workloads=list_workloads(), datasets=options.plan_datasets,
                               synthetic=base.data.source == "synthetic", epoch_regex=options.plan_epoch_regex)
    except (PlanError, OSError) as exc:
        raise ConfigError(f"+plan={path}: {exc}") from None
    groups = groups_to_run(everything, rerun=options.rerun)
    planned, lines = _validate(base, groups, options.dry_run)
    if options.dry_run:
        for group in everything:
            if group not in groups:
                print(f"  skip   plan group {group.experiment}/{group.workload}: {group.status.upper()}"
                      + (" (+rerun=true runs FAILED groups again)" if group.status == "failed" else ""))
        refused = print_dry_run(lines, base.out_dir, rerun=options.rerun, sweep_dir=run_dir)
        return {"cells": [], "dry_run": True, "refused": refused}
    if not planned:
        print(f"plan {path}: nothing to run (every group FINISHED, or FAILED without +rerun=true)", flush=True)
        return {"cells": [], "results": []}
    from raycolloc.driver.engine import run_cells  # Ray and pyarrow: once the plan is valid

    summaries, ended = [], []
    with hold_output(base.out_dir):  # the whole plan, not group by group
        for group, cells in planned:
            print(f"plan group {group.experiment}/{group.workload}: {len(cells)} cell(s) start together", flush=True)
            results = run_cells([(spec, run_dir / group.experiment / group.workload / f"dev{cell.devices}")
                                 for cell, spec in cells], rerun=options.rerun)
            ok = len(results) == len(cells) and all(r.status == "ok" for r in results)
            _write_status(path, {j.line: "FINISHED" if ok else "FAILED" for cell, _ in cells for j in cell.jobs})
            summaries.extend({"cell_id": r.cell.cell_id, "status": r.status, "summary": r.summary} for r in results)
            ended.extend(results)
    return {"cells": summaries, "results": ended}
