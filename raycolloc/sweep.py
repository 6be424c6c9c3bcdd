"""Entry point: ``python -m raycolloc.sweep [-m] key=value ...``.

One Hydra job is one cell. This module only composes and validates the config, then hands the
cell to :func:`raycolloc.cell.run_cell`, which always writes a result row and releases the GPU.
With ``-m`` our Ray launcher (``hydra_plugins/raycolloc_launcher``) runs the cells concurrently.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from raycolloc.config import ConfigError, register_configs
from raycolloc.prepare import CellJob, prepare_job, run_prepared

__all__ = ["main", "task"]

log = logging.getLogger("raycolloc")
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")

register_configs()


def _discard_run_dir(job_dir: Path) -> None:
    """A config error writes nothing: remove the fresh directory Hydra made for this job."""
    leftovers = {p.name for p in job_dir.iterdir()} if job_dir.exists() else set()
    if leftovers <= {".hydra", "sweep.log", f"{HydraConfig.get().job.name}.log"}:
        shutil.rmtree(job_dir, ignore_errors=True)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def task(dcfg: DictConfig) -> Any:
    """One Hydra job: validate, then run (or resume) the cell in this job's directory."""
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        job: CellJob = prepare_job(dcfg)
        if job.options.plan:
            from raycolloc.plan_runner import run_plan

            return run_plan(job.cfg, job.options, job_dir)
        result = run_prepared(job, job_dir)
    except ConfigError as exc:
        _discard_run_dir(job_dir)
        log.error("config error: %s", exc)
        sys.exit(2)
    if HydraConfig.get().mode != RunMode.MULTIRUN:
        print(result["summary"], flush=True)
    return result


def main() -> None:
    """Console-script entry point (``raycolloc-sweep``)."""
    task()


if __name__ == "__main__":
    main()
