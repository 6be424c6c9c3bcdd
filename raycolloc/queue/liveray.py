"""A live queue's runners on a Ray cluster's GPUs (``serve queue.runner=ray``): :class:`RayLive`.

The runners a ``queue.runner=ray`` replay uses (:mod:`raycolloc.queue.rayqueue`: every GPU leased once,
each attempt a cell of one job through the sweeps' lease, steward and trainers), driven by the live
service's clock instead of a trace's: :meth:`RayLive.advance` collects the attempts that finished,
keeps what a workload's first run alone measured as its profile (:mod:`raycolloc.queue.learned`) and
gives up on a job that keeps failing. Jobs come in as they are submitted (:meth:`RayLive.admit`: the
job's cell is built first, so a job that cannot run is refused, named, before it is queued); a cancel
stops the job's trainer where it runs (:meth:`RayLive.stop`). Each job's output (its training process's
stdout and stderr, a script's own lines) is appended to ``<log_dir>/<job_id>.log``, one header line
per attempt, where the ``logs`` command reads it, also after the job and the queue have ended.
:meth:`RayLive.close` stops every job, gives every GPU back (MPS daemons stopped, leases removed) and
writes ``gpus.parquet`` and ``attempts.parquet`` beside the database.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from raycolloc.config import ConfigError
from raycolloc.driver.cell_specs import resolve_backend
from raycolloc.mode_kinds import BASELINE_MODE
from raycolloc.queue.catalog import sim_params
from raycolloc.queue.core import JobStart, Report
from raycolloc.queue.learned import LearnedProfiles
from raycolloc.queue.policy import GpuView, Predictor
from raycolloc.queue.rayjobs import CellMaker, log_file
from raycolloc.queue.rayqueue import give_up_failed, open_runners, write_gpu_files
from raycolloc.queue.settings import QueueSettings
from raycolloc.queue.state import Store
from raycolloc.queue.trace import TraceError, TraceJob

__all__ = ["RayLive", "log_dir"]

log = logging.getLogger(__name__)


def log_dir(db: Path) -> Path:
    """Where a live queue keeps its jobs' output: ``logs/`` beside its database."""
    return db.parent / "logs"


class RayLive:
    """The live queue's runners on the connected Ray cluster's GPUs (see the module docstring)."""

    def __init__(self, settings: QueueSettings, store: Store, profiles: LearnedProfiles, db: Path) -> None:
        """Lease every GPU of the cluster (Ray is connected: this runs in the queue's actor).

        Raises:
            LeaseError: the cluster has no GPU, or one was not granted in time.
        """
        config = resolve_backend(settings.config)
        self.store, self.profiles, self.directory = store, profiles, db.parent
        self.logs = log_dir(db)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.maker = CellMaker(config, self.logs)
        self.jobs: dict[str, TraceJob] = {r.job.job_id: r.job for r in store.jobs()}
        predictor = Predictor(settings.gpu, sim_params(settings.gpu))
        self.runners = open_runners(config, self.maker, self.jobs, predictor, settings)

    @property
    def energy_j(self) -> float:
        return self.runners.energy_j

    def admit(self, job: TraceJob) -> None:
        """Take ``job`` for running: its cell is built (as each attempt's will be) before it is queued.

        Raises:
            TraceError: the job cannot run as configured (its workload, its length), named.
        """
        try:
            self.maker.cell(job, 1, BASELINE_MODE, int(job.length_samples or 0))
        except (ConfigError, ValueError, KeyError) as exc:
            raise TraceError("submission", "kind" if job.kind != "timm" else "model", str(exc)) from None
        self.jobs[job.job_id] = job

    # --- the Runners protocol, and what the live service asks of its runners -------------------
    def views(self, now: float) -> list[GpuView]:
        return self.runners.views(now)

    def start(self, job: JobStart) -> None:
        header = (
            f"--- raycolloc queue: job {job.job_id} attempt {job.attempt} on {job.gpu_id} under {job.mode} "
            f"at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n"
        )
        with log_file(self.logs, job.job_id).open("a") as out:
            out.write(header)
        self.runners.start(job)

    def running(self) -> frozenset[tuple[str, int]]:
        return self.runners.running()

    def advance(self, now: float) -> list[Report]:
        """The attempts that finished by ``now``; a workload's first run alone taught its profile; a
        job that failed too often cancelled."""
        reports = self.runners.poll(now)
        for report in reports:
            job = self.jobs.get(report.job_id)
            ran = (report.job_id, report.attempt)
            row = next((a for a in reversed(self.runners.attempts) if (a.job_id, a.attempt) == ran), None)
            if job is not None and row is not None:
                self.profiles.learn(job, report, row.start_s, self.runners.telemetry, row.gpu)
        give_up_failed(self.store, self.runners.failures, now)
        return reports

    def stop(self, job_id: str, now: float) -> None:
        """Stop ``job_id`` where it runs (a cancel): its trainer and training process killed."""
        if self.runners.stop(job_id):
            with log_file(self.logs, job_id).open("a") as out:
                out.write(f"--- raycolloc queue: job {job_id} cancelled at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n")

    def close(self) -> None:
        """Stop every job, give every GPU back, write the GPUs' samples and the attempts."""
        try:
            write_gpu_files(self.directory, self.runners)
        except Exception:  # the files are a record: still release every GPU
            log.exception("queue: gpus.parquet/attempts.parquet not written")
        finally:
            self.runners.close()
