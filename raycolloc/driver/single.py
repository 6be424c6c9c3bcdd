"""The sweep plan of a single run: ``python -m raycolloc.sweep ARGS`` without ``-m``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from raycolloc.driver.cell_specs import cell_dir_names, split_options, sweep_cells, validate_cell
from raycolloc.driver.dryrun import DryRunLine
from raycolloc.driver.hydra_errors import check_group_choices
from raycolloc.driver.plan import PlannedCell, Step, SweepPlan, repeat_cells
from raycolloc.driver.radt_runner import csv_plan

__all__ = ["single_run_plan"]


def single_run_plan(dcfg: DictConfig, run_dir: Path, choices: Any) -> SweepPlan:
    """The plan of ``python -m raycolloc.sweep ARGS`` without ``-m``: its one cell (a mix's solo cells
    and repeats beside it, each in its own directory), or the radT plan ``+plan=PATH.csv`` names.

    Raises:
        ConfigError: the cell (or the plan) is invalid.
    """
    options = split_options(dcfg)
    check_group_choices(choices)
    if options.plan:
        return csv_plan(dcfg, options, run_dir)
    specs = sweep_cells([validate_cell(dcfg)])
    dirs = [run_dir] if len(specs) == 1 else [run_dir / name for name in cell_dir_names(specs)]
    cells = tuple(PlannedCell(s, d) for s, d in zip(specs, dirs, strict=True))
    return SweepPlan(
        run_dir,
        specs[0].config.out_dir,
        (Step(cells, repeat=repeat_cells(cells)),),
        rerun=options.rerun,
        dry_run=options.dry_run,
        lines=tuple(DryRunLine(s.label, s) for s in specs),
        summary=len(specs) > 1,
    )
