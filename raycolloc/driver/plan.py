"""One sweep plan from any entry, and the one path that runs it.

Every entry builds a :class:`SweepPlan`: a Hydra multirun (:func:`raycolloc.driver.launcher.multirun_plan`),
a single run (:func:`raycolloc.sweep.single_run_plan`), a radT plan
(:func:`raycolloc.driver.radt_runner.csv_plan`), the advisor's profiles
(:func:`raycolloc.advise.run.run_profiles`; the sweeps it emits are command lines of the first three).
:func:`run` then does what every entry did its own way before: the dry run, the output lock (held once,
around everything the sweep writes), the cells' ``.hydra`` records, the steps
(:func:`raycolloc.driver.engine.run_cells` under each), the sweep's summary and closing lines, and
the :class:`~raycolloc.driver.outcome.Outcome` with its exit status. A refusal is a
:class:`~raycolloc.config.ConfigError`; the command line's main turns it into exit 2, and takes back
the directories the run made (:func:`raycolloc.driver.rundirs.discard_run`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from raycolloc.config import ConfigError
from raycolloc.driver.dryrun import DryRunLine, print_dry_run
from raycolloc.driver.outcome import EXIT_CONFIG, EXIT_OK, Outcome, exit_code, print_outcome
from raycolloc.driver.outlock import hold_output
from raycolloc.driver.rundirs import discard_run, make
from raycolloc.spec import CellSpec

# Ray, pyarrow and pandas come with the engine, imported once the cells are valid: a refused sweep
# answers in about a second.
if TYPE_CHECKING:
    from raycolloc.driver.engine import CellResult

__all__ = ["CellsRefused", "Origin", "PlannedCell", "Step", "SweepPlan", "repeat_cells", "run"]


class CellsRefused(ConfigError):
    """Cells of a sweep refused before any ran: one message per cell (the main prints each)."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        super().__init__("; ".join(self.errors))


@dataclass(frozen=True)
class Origin:
    """The ``.hydra`` record of a cell Hydra made no directory for (a multirun's): the task config and
    the overrides that compose it again."""

    config: DictConfig
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class PlannedCell:
    """A validated cell, where its result goes, the GPU index it is pinned to (a radT ``Devices``)."""

    spec: CellSpec
    cell_dir: Path
    pin: int | None = None
    origin: Origin | None = None


@dataclass(frozen=True)
class Step:
    """Cells that start together (a multirun: all of them; a radT plan: one group), with the line
    printed before them, what is done with their results (a plan's status written back) and, for
    ``repeats=auto``, the planned cell of a run added while they run (its directory and record)."""

    cells: tuple[PlannedCell, ...]
    title: str | None = None
    done: Callable[[list[CellResult]], None] | None = None
    repeat: Callable[[CellSpec], PlannedCell] | None = None  # where a run repeats=auto adds goes (None: none)


@dataclass(frozen=True)
class SweepPlan:
    """Everything one sweep runs, from whichever entry.

    Attributes:
        run_dir: the sweep's directory (Hydra's run or sweep directory; the advisor's).
        out_dir: where results go and are looked up (the directory the lock holds).
        steps: run one after the other; empty in a dry run or a refused sweep.
        lines: what a dry run prints, refused cells included.
        errors: cells refused: nothing runs (a dry run lists them and exits 2).
        notes: printed first (a plan's groups left out).
        summary: print the sweep's summary table (several cells).
        closing: print the closing lines (the advisor prints its own).
        epilogue: a last line computed after the steps (a plan's idle GPUs), inside the lock.
    """

    run_dir: Path
    out_dir: str
    steps: tuple[Step, ...] = ()
    rerun: bool = False
    dry_run: bool = False
    lines: tuple[DryRunLine, ...] = ()
    errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    summary: bool = False
    closing: bool = True
    epilogue: Callable[[], str | None] | None = None

    @property
    def cells(self) -> list[PlannedCell]:
        """Every cell of every step."""
        return [c for step in self.steps for c in step.cells]


def repeat_cells(
    cells: Sequence[PlannedCell], origin: Callable[[CellSpec], Origin | None] = lambda _: None
) -> Callable[[CellSpec], PlannedCell]:
    """Where a run ``repeats=auto`` adds goes: beside its configuration's first run, named by its label
    (``tiny_cnn-naive-x1-r1``), or by its id where its first run's directory is named by id (labels
    shared) or the name is taken; inside the first run's directory where that is the run's own (a
    single run). ``origin``: its ``.hydra`` record."""
    from raycolloc.driver.repeats import group_key  # the results' statistics: with the engine

    first = {c.spec.config_hash: c for c in cells}
    taken = {c.cell_dir for c in cells}

    def planned(spec: CellSpec) -> PlannedCell:
        base = first[group_key(spec)]
        if base.cell_dir.name == base.spec.cell_id:
            cell_dir = base.cell_dir.parent / spec.cell_id
        else:
            parent = base.cell_dir.parent if base.cell_dir.name == base.spec.label else base.cell_dir
            cell_dir = parent / spec.label if parent / spec.label not in taken else parent / spec.cell_id
        taken.add(cell_dir)
        return PlannedCell(spec, cell_dir, origin=origin(spec))

    return planned


def _save_origin(origin: Origin, cell_dir: Path) -> None:
    """``.hydra/`` of the cell, as Hydra writes it for a job: the task config and its overrides."""
    hydra_dir = make(cell_dir) / ".hydra"
    hydra_dir.mkdir(exist_ok=True)
    OmegaConf.save(origin.config, hydra_dir / "config.yaml", resolve=False)
    OmegaConf.save(OmegaConf.create(list(origin.overrides)), hydra_dir / "overrides.yaml")


def _placer(repeat: Callable[[CellSpec], PlannedCell]) -> Callable[[CellSpec], Path]:
    """An added run's directory, its ``.hydra`` record written as a planned cell's is."""

    def place(spec: CellSpec) -> Path:
        cell = repeat(spec)
        if cell.origin is not None:
            _save_origin(cell.origin, cell.cell_dir)
        return cell.cell_dir

    return place


def run(plan: SweepPlan) -> Outcome:
    """Run the plan (or, for a dry run, print it and take back its directories).

    Raises:
        ConfigError: cells refused, another sweep holds the output directory, or a cell fits no node
            of the cluster (nothing has run).
        ResultWriteError: a result could not be written (see :func:`~raycolloc.driver.engine.run_cells`).
        KeyboardInterrupt: Ctrl-C or SIGTERM; the running cells released their GPUs and wrote nothing.
    """
    for note in plan.notes:
        print(note, flush=True)
    if plan.dry_run:
        refused = print_dry_run(plan.lines, plan.out_dir, rerun=plan.rerun, sweep_dir=plan.run_dir)
        discard_run()  # a dry run leaves nothing behind
        return Outcome((), EXIT_CONFIG if refused or plan.errors else EXIT_OK)
    if plan.errors:
        raise CellsRefused(plan.errors)
    results: list[CellResult] = []
    if plan.cells:
        from raycolloc.driver.cost import plan_cost, plan_gpus, plan_mig
        from raycolloc.driver.engine import run_cells

        specs = [c.spec for c in plan.cells]
        print(plan_cost(specs, plan_gpus(specs), plan_mig(specs)).line(), flush=True)

        with contextlib.ExitStack() as held:
            # Before anything is written there, until the last cell is: the plan's output directory,
            # and any other a cell of it writes to (``-m out_dir=a,b``).
            for out_dir in sorted({plan.out_dir, *(c.spec.config.out_dir for c in plan.cells)}):
                held.enter_context(hold_output(out_dir))
            for cell in plan.cells:
                if cell.origin is not None:
                    _save_origin(cell.origin, cell.cell_dir)
            for step in plan.steps:
                if step.title:
                    print(step.title, flush=True)
                pins = {c.spec.cell_id: c.pin for c in step.cells if c.pin is not None}
                place = _placer(step.repeat) if step.repeat is not None else None
                cells = [(c.spec, c.cell_dir) for c in step.cells]
                ended = run_cells(cells, rerun=plan.rerun, pins=pins, place=place)
                if step.done is not None:
                    step.done(ended)
                results.extend(ended)
            if plan.epilogue is not None and (line := plan.epilogue()) is not None:
                print(line, flush=True)
    if plan.summary:
        from raycolloc.driver.summary import print_sweep_summary

        print_sweep_summary(plan.run_dir, results)
    code = print_outcome(results) if plan.closing else exit_code(results)
    return Outcome(tuple(results), code)
