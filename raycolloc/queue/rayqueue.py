"""What a queue on a Ray cluster's GPUs does the same whether it replays a trace or serves live jobs.

A ``queue.runner=ray`` replay (:mod:`raycolloc.queue.rayreplay`) and a live queue on Ray
(:mod:`raycolloc.queue.liveray`) both lease every GPU of the cluster once and run what their policy
places through :class:`~raycolloc.queue.rayrunners.RayRunners` (:func:`open_runners`); both give up on
a job whose attempts failed ``MAX_FAILURES`` times other than out of memory (:func:`give_up_failed`),
and both write, beside their database, each GPU's samples (``gpus.parquet``) and each attempt
(``attempts.parquet``: outcome, GPU, mode, memory estimate against its measured peak, samples/s)
(:func:`write_gpu_files`).
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

from raycolloc.config import Config
from raycolloc.queue.policy import Predictor
from raycolloc.queue.rayjobs import CellMaker
from raycolloc.queue.raylanes import open_lanes
from raycolloc.queue.rayrunners import RayRunners
from raycolloc.queue.report import write_parquet
from raycolloc.queue.settings import QueueSettings, model_name
from raycolloc.queue.state import Store
from raycolloc.queue.trace import TraceJob

__all__ = ["MAX_FAILURES", "give_up_failed", "open_runners", "write_gpu_files"]

log = logging.getLogger(__name__)

MAX_FAILURES = 3  # a job whose attempts failed (not out of memory) this often is cancelled, not tried again


def open_runners(
    config: Config, maker: CellMaker, jobs: dict[str, TraceJob], predictor: Predictor, settings: QueueSettings
) -> RayRunners:
    """Every GPU of the connected cluster leased once, as runners of ``jobs`` (a live queue adds to the
    dict as jobs come); warns where the leased GPUs are not the model the run is filed under (a cluster
    at an address, whose GPUs were not seen before Ray was asked).

    Raises:
        LeaseError: the cluster has no GPU, or one was not granted in time.
    """
    runners = RayRunners(open_lanes(config), maker, jobs, predictor)
    seen = sorted({lane.gpu.name for lane in runners.lanes.values()})
    if any(model_name(name) != settings.gpu.name for name in seen):
        log.warning("queue: the leased GPUs are %s; this run is filed as %s", ", ".join(seen), settings.gpu_label)
    return runners


def give_up_failed(store: Store, failures: Counter[str], now: float) -> list[str]:
    """Cancel each job whose attempts failed ``MAX_FAILURES`` times (not out of memory); returns them."""
    out = []
    for job_id, failed in failures.items():
        if failed >= MAX_FAILURES and store.cancel(job_id, now, f"failed {failed} times") is not None:
            log.error("job=%s failed %d times (not out of memory): cancelled", job_id, failed)
            out.append(job_id)
    return out


def write_gpu_files(directory: Path, runners: RayRunners) -> None:
    """``gpus.parquet`` (each GPU's samples) and, where an attempt finished in this process,
    ``attempts.parquet`` (a resumed run's earlier attempts went with their process)."""
    write_parquet(directory / "gpus.parquet", runners.telemetry)
    if runners.attempts:
        write_parquet(directory / "attempts.parquet", runners.attempts)
