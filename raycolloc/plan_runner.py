"""Run a radT experiment plan: ``python -m raycolloc.sweep +plan=PATH.csv [overrides]``.

Groups (rows sharing Experiment and Workload) run one after the other; the cells of a group (one
per distinct ``Devices`` value) start together, each on its own GPU lease. Every cell is an
explicit list of jobs (as a mixed cell: each trains its epochs to completion, no barrier).
Overrides on the command line apply to every cell; ``batch_size`` given there wins over the plan's.
After a group, its rows' Status is written back into the CSV (FINISHED, or FAILED if any cell
failed), as radT does, so a re-run skips what finished.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import os
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raycolloc.cellspec import plan_cell
from raycolloc.cluster import connect
from raycolloc.config import Config, ConfigError, MixConfig, MixJob
from raycolloc.plan import PlanCell, PlanError, PlanGroup, groups_to_run, read_plan
from raycolloc.prepare import CellJob, Options, check_cluster, run_prepared
from raycolloc.workloads.registry import list_workloads

__all__ = ["cell_config", "run_plan"]

log = logging.getLogger("raycolloc")


def cell_config(base: Config, group: PlanGroup, cell: PlanCell) -> Config:
    """The raycolloc config of one plan cell: the base config with the cell's mode and jobs.

    Raises:
        ConfigError: a job the plan describes cannot run as given (naming the CSV line).
    """
    jobs = []
    for job in cell.jobs:
        if job.epochs is not None and job.epochs < 2:
            raise ConfigError(f"plan line {job.line} (Run {job.run!r}): --epochs {job.epochs}; raycolloc needs at "
                              f"least 2 (epoch 1 is the warm-up)")
        try:
            jobs.append(MixJob(workload=job.workload, batch_size=base.batch_size or job.batch_size,
                               epochs=job.epochs, mig_profile=job.mig_profile))
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


def run_plan(base: Config, options: Options, run_dir: Path) -> dict[str, Any]:
    """Run every group of the plan that still has work; returns per-cell summaries."""
    path = Path(str(options.plan)).expanduser()
    try:
        groups = groups_to_run(read_plan(path, known_workloads=list_workloads()), rerun=options.rerun)
    except (PlanError, OSError) as exc:
        raise ConfigError(f"+plan={path}: {exc}") from None
    planned = []
    for group in groups:  # validate every cell of every group before anything runs
        cells = []
        for cell in group.cells:
            cfg = cell_config(base, group, cell)
            cells.append((cell, CellJob(cfg, plan_cell(cfg), options)))
        planned.append((group, cells))
    if not planned:
        print(f"plan {path}: nothing to run (every group FINISHED, or FAILED without +rerun=true)", flush=True)
        return {"cells": []}
    connect(base.cluster, max_jobs_per_cell=max(len(c.jobs) for _, cs in planned for c, _ in cs))
    check_cluster([job.cfg for _, cs in planned for _, job in cs])
    node = ray.get_runtime_context().get_node_id()
    remote = ray.remote(num_cpus=0, max_retries=0)(run_prepared)
    summaries = []
    for group, cells in planned:
        print(f"plan group {group.experiment}/{group.workload}: {len(cells)} cell(s) start together", flush=True)
        refs = [remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
            job, run_dir / f"{group.experiment}" / f"{group.workload}" / f"dev{cell.devices}", False)
            for cell, job in cells]
        results = []
        for (cell, job), ref in zip(cells, refs, strict=True):
            try:
                results.append(ray.get(ref, timeout=job.cfg.cluster.lease_timeout_s + job.cfg.trainer.epoch_timeout_s))
            except Exception as exc:  # noqa: BLE001 - a lost cell is a failed cell, not a lost plan
                results.append({"cell_id": job.spec.cell_id, "status": "error", "summary": f"cell failed: {exc}"})
        for result in results:
            print(result["summary"], flush=True)
        ok = all(r["status"] == "ok" for r in results)
        _write_status(path, {j.line: "FINISHED" if ok else "FAILED" for cell, _ in cells for j in cell.jobs})
        summaries.extend(results)
    return {"cells": summaries}
