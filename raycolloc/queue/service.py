"""A live queue: jobs submitted while it runs, in wall-clock time (the Python API; no Ray here).

:class:`QueueService` is the queue's loop driven by a clock instead of a trace: :meth:`tick` moves
its runners to now, records what ended or ran out of memory, and places what waits. Jobs come in by
:meth:`submit` (checked as a trace row is: a bad one is refused, naming the field, and nothing is
queued), go by :meth:`cancel`, and :meth:`drain` closes the queue to new jobs and lets it run empty.
Its runners are the simulated cluster so far, its time the simulated GPUs' (``queue.sim_speed``
virtual seconds per wall second). It keeps everything in its database: a service started again on
the same database resumes — the jobs it had running re-queued — so no job is lost or run twice; it
takes submissions again (a drain closes the queue for the service that was asked, not for good). One
process owns a database at a time (a second service elsewhere is refused: ``StoreBusy``), and one
made with other queue settings is refused, naming them.
:mod:`raycolloc.queue.live` serves it from a detached Ray actor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from raycolloc.advise.profile import Profile
from raycolloc.queue.catalog import NoProfile, catalog_profile, sim_params
from raycolloc.queue.core import Queue
from raycolloc.queue.policies import create_policy
from raycolloc.queue.policy import Predictor
from raycolloc.queue.replay import claim_run
from raycolloc.queue.report import Summary, job_rows, summarise
from raycolloc.queue.settings import QueueSettings
from raycolloc.queue.simcluster import SimCluster
from raycolloc.queue.state import Store
from raycolloc.queue.trace import FIELDS, TraceError, TraceJob, parse_row
from raycolloc.queue.truth import ModelTruth

__all__ = ["GpuStatus", "JobStatus", "QueueClosed", "QueueService", "QueueStatus", "submission"]


class QueueClosed(RuntimeError):
    """The queue is draining: it takes no new job."""


def submission(fields: Mapping[str, str], now: float = 0.0) -> TraceJob:
    """A submission's fields (a trace row's but ``submit_s``) as the job arriving at ``now``. The
    ``submit`` command checks them so before it looks for the live queue, and the queue again.

    Raises:
        TraceError: an unknown, missing or malformed field (named), as a trace row's.
    """
    unknown = sorted(set(fields) - set(FIELDS) | ({"submit_s"} & set(fields)))
    if unknown:
        raise TraceError("submission", unknown[0], f"not a field of a submission; give: {', '.join(FIELDS[2:])}")
    return parse_row({**fields, "submit_s": f"{now:.6f}"}, "submission")


@dataclass(frozen=True)
class JobStatus:
    """One job as ``status`` lists it."""

    job_id: str
    workload: str
    state: str
    gpu: str | None
    mode: str | None
    ooms: int
    requeues: int


@dataclass(frozen=True)
class GpuStatus:
    """One GPU as ``status`` lists it."""

    gpu_id: str
    mode: str | None
    jobs: tuple[str, ...]
    mem_used_mib: float
    sm_active: float


@dataclass(frozen=True)
class QueueStatus:
    """The queue now: its time, jobs per state, whether it drains, every job and GPU."""

    now: float
    policy: str
    counts: dict[str, int]
    draining: bool
    jobs: tuple[JobStatus, ...]
    gpus: tuple[GpuStatus, ...]

    @property
    def drained(self) -> bool:
        return self.draining and not any(self.counts[s] for s in ("queued", "placed", "started"))


class QueueService:
    """A live queue on the simulated cluster, its state in the database ``db``."""

    def __init__(self, settings: QueueSettings, db: Path, clock: Callable[[], float] = time.monotonic) -> None:
        """Open (or resume) the queue in ``db``.

        Raises:
            StoreBusy: another process owns ``db``.
            TraceMismatch: ``db`` is another queue's (a trace's, another policy, cluster or settings).
        """
        config, gpu = settings.config, settings.gpu
        self.settings = settings
        self.store = Store(db)
        try:
            claim_run(self.store, "live", f"{settings.nodes}x{settings.gpus_per_node} {gpu.name}", settings)
        except BaseException:
            self.store.close()  # its lock too: the caller gets the error, not a held database
            raise
        self.store.put("draining", "0")  # a new service takes jobs: the last one's drain was its own
        self._clock = clock
        self._started = clock()
        self._base = self.store.clock()
        self._ticked = self._base
        predictor = Predictor(gpu, sim_params(gpu))
        truth = ModelTruth(predictor, config.seed, config.queue.sim_mem_error)
        self.cluster = SimCluster(settings.nodes, settings.gpus_per_node, gpu, truth, config.queue, self._base)
        policy = create_policy(config.queue, gpu, predictor)
        self.queue = Queue(self.store, policy, self.cluster, config.queue, gpu, self._profile)
        self.queue.resume(self._base)  # what the last process had running died with it

    def now(self) -> float:
        """The queue's time: seconds since it first started (virtual, ``queue.sim_speed`` per wall second)."""
        return self._base + (self._clock() - self._started) * self.settings.config.queue.sim_speed

    def tick(self) -> None:
        """Catch up to now: record ends and OOMs, place what waits."""
        now = self.now()
        self.queue.handle(self.cluster.advance(now))
        self.queue.schedule(now)
        self._ticked = now

    def cluster_time(self) -> float:
        """The time the runners were last moved to (events are recorded at it)."""
        return self._ticked

    def submit(self, fields: Mapping[str, str]) -> str:
        """Queue one job (a trace row's fields but ``submit_s``: it arrives now); returns its id.

        Raises:
            TraceError: a missing, malformed or unknown field, a job without a profile on the simulated
                cluster, or an id the queue already has (nothing is queued).
            QueueClosed: the queue is draining.
        """
        if self.draining:
            raise QueueClosed("the queue is draining: it takes no new job")
        now = self.cluster_time()  # the runners' time: it arrives now, never behind what they did
        job = submission(fields, now)
        try:
            profile = catalog_profile(job.workload, self.settings.gpu)
        except NoProfile as exc:
            raise TraceError("submission", "model", str(exc)) from None
        if self.store.job(job.job_id) is not None:
            raise TraceError("submission", "job_id", f"{job.job_id!r} is already in the queue")
        self.store.add([job], [profile.job_mem_mib], now, self.settings.config.queue.max_slowdown)
        return job.job_id

    def cancel(self, job_id: str) -> str | None:
        """Cancel a job not yet over (stopping it where it runs); returns the state it was in."""
        self.tick()  # the runners at now first: a job that ended by now ended, it is not cancelled
        now = self.cluster_time()
        was = self.store.cancel(job_id, now)
        if was in ("placed", "started"):
            self.cluster.stop(job_id, now)
        return was

    def drain(self) -> None:
        """Take no new job; the queue runs until every job it has is over."""
        self.store.put("draining", "1")
        self.tick()

    @property
    def draining(self) -> bool:
        return self.store.meta("draining") == "1"

    def status(self) -> QueueStatus:
        """Every job and GPU now."""
        self.tick()
        now = self.cluster_time()
        jobs = tuple(
            JobStatus(r.job.job_id, r.job.workload, r.state, r.gpu, r.mode, r.ooms, r.requeues)
            for r in self.store.jobs()
        )
        gpus = tuple(
            GpuStatus(v.gpu_id, v.mode, tuple(r.job_id for r in v.residents), v.mem_used_mib, v.sm_active)
            for v in self.cluster.views(now)
        )
        policy = self.settings.config.queue.policy
        return QueueStatus(now, policy, self.store.counts(), self.draining, jobs, gpus)

    def summary(self) -> Summary:
        """The run so far, as a replay's summary; its wall time is this service's, since it opened the
        queue (a resumed queue's, as a resumed replay's, is the last session's)."""

        def alone(job: TraceJob) -> float | None:
            return (job.length_samples or 0) / self._profile(job).samples_per_s

        queue = self.settings.config.queue
        rows = job_rows(queue.policy, self.store.jobs(), alone, queue.max_slowdown)
        wall_s = self._clock() - self._started
        return summarise(queue.policy, rows, self.cluster.energy_j, wall_s, ends_lost=len(self.store.ends_lost()))

    def close(self) -> None:
        self.store.close()

    def _profile(self, job: TraceJob) -> Profile:
        return catalog_profile(job.workload, self.settings.gpu)
