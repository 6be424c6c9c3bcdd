"""Run a radT experiment plan: ``python -m raycolloc.sweep +plan=PATH.csv [overrides]``.

Groups (rows sharing Experiment and Workload) run one after the other, as radT runs them; the cells
of a group (one per distinct ``Devices`` value) start together, each on the GPU its ``Devices`` names
(a lease pinned to that index). The study's ``Devices`` described its own DGX (GPU 0 for every naive
and MPS row): ``+plan_fanout=true`` runs every group at once on any free GPU instead (the engine's
lanes, as for a multirun; a group's cells may then start apart), and the summary says when a plan
run without it left GPUs idle. Every cell is an
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
import functools
import io
import logging
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from raycolloc.config import Config, ConfigError, MixConfig, MixJob, load_config
from raycolloc.driver.cell_specs import SweepOptions, resolve_backend, validate_cell
from raycolloc.driver.dryrun import DryRunLine
from raycolloc.driver.plan import PlannedCell, Step, SweepPlan
from raycolloc.driver.radt import PlanCell, PlanError, PlanGroup, groups_to_run, read_plan
from raycolloc.job.workloads.registry import list_workloads
from raycolloc.spec import CellSpec
from raycolloc.workload_config import WorkloadConfig

if TYPE_CHECKING:
    from raycolloc.driver.engine import CellResult

__all__ = ["cell_config", "csv_plan"]

log = logging.getLogger("raycolloc")


def cell_config(base: Config, group: PlanGroup, cell: PlanCell) -> Config:
    """The raycolloc config of one plan cell: the base config with the cell's mode and jobs.

    Raises:
        ConfigError: a job the plan describes cannot run as given (naming the CSV line).
    """
    jobs = []
    for job in cell.jobs:
        if isinstance(job.workload, WorkloadConfig) and job.workload.kind.as_written:
            # A script trains as its Params say: raycolloc sets none of its settings.
            jobs.append(MixJob(workload=job.workload, mig_profile=job.mig_profile))
            continue
        if job.epochs is not None and job.epochs < 2:
            raise ConfigError(
                f"plan line {job.line} (Run {job.run!r}): --epochs {job.epochs}; raycolloc needs at "
                f"least 2 (epoch 1 is the warm-up)"
            )
        try:
            jobs.append(
                MixJob(
                    workload=job.workload,
                    batch_size=base.batch_size or job.batch_size,
                    epochs=job.epochs,
                    mig_profile=job.mig_profile,
                    data_path=job.data_dir if base.data.source == "real" else None,
                )
            )
        except ConfigError as exc:
            raise ConfigError(f"plan line {job.line} (Run {job.run!r}): {exc}") from None
    name = f"{group.experiment}-{group.workload}-dev{cell.devices}".replace("/", "_").replace(" ", "_")
    return dataclasses.replace(
        base, mode=dataclasses.replace(base.mode, name=cell.mode), mix=MixConfig(name=name, jobs=jobs), degree=1
    )


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


def _where(group: PlanGroup, cell: PlanCell, fanout: bool) -> str:
    """Where a dry run says the cell would run."""
    if fanout:
        return "any free GPU of the cluster (+plan_fanout=true: the plan's groups run at once)"
    gpu = f"GPU {cell.devices}" if _pin(cell) is not None else f"a GPU (Devices {cell.devices!r}: one GPU per cell)"
    return (
        f"{gpu}, its Devices, with the {len(group.cells)} cell(s) of its group; groups one after another "
        f"(+plan_fanout=true runs them at once on any free GPU)"
    )


def _pin(cell: PlanCell) -> int | None:
    """The GPU index a cell's ``Devices`` names (None for several, ``0+1``: a cell has one GPU)."""
    return int(cell.devices) if cell.devices.isdigit() else None


def _validate(
    base: Config, groups: list[PlanGroup], dry_run: bool, fanout: bool = False
) -> tuple[list[tuple[PlanGroup, list[tuple[PlanCell, CellSpec]]]], list[DryRunLine]]:
    """Every cell of every group validated before anything runs; a dry run lists the refused ones
    instead of stopping at the first."""
    planned, lines = [], []
    for group in groups:
        cells = []
        for cell in group.cells:
            name = (
                f"{group.experiment}/{group.workload} Devices {cell.devices} "
                f"(lines {cell.jobs[0].line}-{cell.jobs[-1].line})"
            )
            try:
                spec = validate_cell(cell_config(base, group, cell))
            except ConfigError as exc:
                if not dry_run:
                    raise
                lines.append(DryRunLine(name, refused=str(exc)))
                continue
            cells.append((cell, spec))
            lines.append(DryRunLine(name, spec, where=_where(group, cell, fanout)))
        planned.append((group, cells))
    return planned, lines


def csv_plan(dcfg: DictConfig, options: SweepOptions, run_dir: Path) -> SweepPlan:
    """The sweep plan of every group of the radT plan that still has work: one step per group (its
    cells pinned to their ``Devices``), or one step of every group with ``+plan_fanout=true``; after
    each, its rows' Status is written back into the CSV.

    Raises:
        ConfigError: the plan cannot be read, or one of its cells is invalid (nothing has run).
    """
    path = Path(str(options.plan)).expanduser()
    base = resolve_backend(load_config(dcfg))
    try:
        everything = read_plan(
            path,
            known_workloads=list_workloads(),
            datasets=options.plan_datasets,
            synthetic=base.data.source == "synthetic",
            epoch_regex=options.plan_epoch_regex,
        )
    except (PlanError, OSError) as exc:
        raise ConfigError(f"+plan={path}: {exc}") from None
    groups = groups_to_run(everything, rerun=options.rerun)
    planned, lines = _validate(base, groups, options.dry_run, options.plan_fanout)
    plan = SweepPlan(run_dir, base.out_dir, rerun=options.rerun, dry_run=options.dry_run, lines=tuple(lines))
    if options.dry_run:
        skips = tuple(
            f"  skip   plan group {group.experiment}/{group.workload}: {group.status.upper()}"
            + (" (+rerun=true runs FAILED groups again)" if group.status == "failed" else "")
            for group in everything
            if group not in groups
        )
        return dataclasses.replace(plan, notes=skips)
    if not planned:
        return dataclasses.replace(
            plan, notes=(f"plan {path}: nothing to run (every group FINISHED, or FAILED without +rerun=true)",)
        )

    def cells(group: PlanGroup, members: list[tuple[PlanCell, CellSpec]], pinned: bool) -> tuple[PlannedCell, ...]:
        return tuple(
            PlannedCell(
                spec,
                run_dir / group.experiment / group.workload / f"dev{cell.devices}",
                pin=_pin(cell) if pinned else None,
            )
            for cell, spec in members
        )

    if options.plan_fanout:

        def write_all(ended: list[CellResult]) -> None:
            by_id = {r.cell.cell_id: r for r in ended}
            for _, members in planned:
                _write_back(path, members, [by_id[s.cell_id] for _, s in members if s.cell_id in by_id])

        step = Step(
            tuple(c for g, members in planned for c in cells(g, members, False)),
            f"plan: {len(planned)} group(s) at once on any free GPU (+plan_fanout=true)",
            write_all,
        )
        return dataclasses.replace(plan, steps=(step,))
    steps = tuple(
        Step(
            cells(group, members, True),
            f"plan group {group.experiment}/{group.workload}: {len(members)} cell(s) start together",
            functools.partial(_write_back, path, members),
        )
        for group, members in planned
    )
    return dataclasses.replace(plan, steps=steps, epilogue=functools.partial(_idle_line, planned))


def _write_back(path: Path, cells: list[tuple[PlanCell, CellSpec]], results: list[CellResult]) -> None:
    """The group's rows' Status, as radT writes it: FINISHED, or FAILED if any cell failed."""
    ok = len(results) == len(cells) and all(r.status == "ok" for r in results)
    _write_status(path, {j.line: "FINISHED" if ok else "FAILED" for cell, _ in cells for j in cell.jobs})


def _idle_line(planned: list[tuple[PlanGroup, list[tuple[PlanCell, CellSpec]]]]) -> str | None:
    """What pinning the groups to their ``Devices`` cost: GPUs of the cluster that idled meanwhile."""
    import ray

    gpus = int(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0
    widest = max((len(cells) for _, cells in planned), default=0)
    if len(planned) < 2 or gpus <= widest:
        return None
    by_gpu = Counter(c.devices for _, cells in planned for c, _ in cells)
    pinned = ", ".join(f"{n} to GPU {d}" for d, n in by_gpu.most_common())
    return (
        f"plan: its {len(planned)} groups ran one after another as their Devices say (cells: {pinned}) while "
        f"{gpus - widest} of the cluster's {gpus} GPUs idled; +plan_fanout=true runs them at once on any free GPU"
    )
