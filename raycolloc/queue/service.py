"""A live queue: jobs submitted while it runs, in wall-clock time (the Python API; Ray only through
its ``ray`` runners).

:class:`QueueService` is the queue's loop driven by a clock instead of a trace: :meth:`tick` moves
its runners to now, records what ended or ran out of memory, and places what waits. Jobs come in by
:meth:`submit` (checked as a trace row is: a bad one is refused, naming the field, and nothing is
queued), go by :meth:`cancel`, and :meth:`drain` closes the queue to new jobs and lets it run empty.
Its runners are the simulated cluster (``queue.runner=sim``, its time the simulated GPUs':
``queue.sim_speed`` virtual seconds per wall second; catalogued timm models only), or the Ray cluster's
GPUs (``queue.runner=ray``: :mod:`raycolloc.queue.liveray`, wall-clock time; any workload a sweep runs,
each workload's profile learned from its first run alone, :mod:`raycolloc.queue.learned`). It keeps
everything in its database: a service started again on the same database resumes — the jobs it had
running re-queued — so no job is lost or run twice; it takes submissions again (a drain closes the
queue for the service that was asked, not for good). One process owns a database at a time (a second
service elsewhere is refused: ``StoreBusy``), and one made with other queue settings is refused, naming
them.
:mod:`raycolloc.queue.live` serves it from a detached Ray actor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from raycolloc.advise.profile import Profile
from raycolloc.queue.catalog import NoProfile, catalog_profile, sim_params
from raycolloc.queue.core import Queue, Report, Runners
from raycolloc.queue.learned import LearnedProfiles
from raycolloc.queue.policies import create_policy
from raycolloc.queue.policy import Predictor
from raycolloc.queue.replay import claim_run
from raycolloc.queue.report import Summary, job_rows, summarise, write_parquet, write_summary
from raycolloc.queue.settings import QueueSettings
from raycolloc.queue.simcluster import SimCluster
from raycolloc.queue.state import Store
from raycolloc.queue.trace import FIELDS, TraceError, TraceJob, parse_row, refuse_unprofiled_kind
from raycolloc.queue.truth import ModelTruth

if TYPE_CHECKING:
    from raycolloc.queue.liveray import RayLive

__all__ = ["GpuStatus", "JobStatus", "LiveRunners", "QueueClosed", "QueueService", "QueueStatus", "submission"]


class LiveRunners(Runners, Protocol):
    """What a live service runs its jobs on: the simulated cluster, or Ray's GPUs (``liveray.RayLive``)."""

    @property
    def energy_j(self) -> float: ...

    def advance(self, to: float) -> list[Report]: ...

    def stop(self, job_id: str, now: float) -> None: ...

    def close(self) -> None: ...


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
        self.on_ray = config.queue.runner == "ray"
        self._ray: RayLive | None = None  # the Ray cluster's GPUs (queue.runner=ray), once leased
        self.store = Store(db)
        self.profiles = LearnedProfiles(self.store, gpu, config.queue.profiles == "catalog")
        sim = f"{settings.nodes}x{settings.gpus_per_node}"
        shape = f"ray {config.cluster.backend}" if self.on_ray else sim
        try:
            claim_run(self.store, "live", f"{shape} {gpu.name}", settings)
            self.store.put("draining", "0")  # a new service takes jobs: the last one's drain was its own
            self._clock = clock
            self._started = clock()
            self._base = self.store.clock()
            self._ticked = self._base
            self._speed = 1.0 if self.on_ray else config.queue.sim_speed  # Ray's GPUs run in wall-clock time
            predictor = Predictor(gpu, sim_params(gpu))
            self.cluster = self._runners(db, predictor)
        except BaseException:
            self.store.close()  # its lock too: the caller gets the error, not a held database
            raise
        policy = create_policy(config.queue, gpu, predictor)
        profile_of = self.profiles.of if self.on_ray else self._profile
        self.queue = Queue(self.store, policy, self.cluster, config.queue, gpu, profile_of)
        self.queue.resume(self._base)  # what the last process had running died with it

    def _runners(self, db: Path, predictor: Predictor) -> LiveRunners:
        """The simulated cluster, or (``queue.runner=ray``) the Ray cluster's GPUs, leased now."""
        config = self.settings.config
        if self.on_ray:
            from raycolloc.queue.liveray import RayLive

            self._ray = RayLive(self.settings, self.store, self.profiles, db)
            return self._ray
        truth = ModelTruth(predictor, config.seed, config.queue.sim_mem_error)
        s = self.settings
        return SimCluster(s.nodes, s.gpus_per_node, s.gpu, truth, config.queue, self._base)

    def now(self) -> float:
        """The queue's time: seconds since it first started (on the simulated cluster virtual ones,
        ``queue.sim_speed`` per wall second)."""
        return self._base + (self._clock() - self._started) * self._speed

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
        if self.store.job(job.job_id) is not None:
            raise TraceError("submission", "job_id", f"{job.job_id!r} is already in the queue")
        if self._ray is None:
            refuse_unprofiled_kind(job, "submission")
            try:
                estimate: float | None = catalog_profile(job.workload, self.settings.gpu).job_mem_mib
            except NoProfile as exc:
                raise TraceError("submission", "model", str(exc)) from None
        else:
            self._ray.admit(job)
            # None where the workload is not profiled yet: each pass then takes its profile as it is by then
            # (the probe's until a first run taught it, the learned one after).
            estimate = known.job_mem_mib if (known := self.profiles.known(job)) is not None else None
        self.store.add([job], [estimate], now, self.settings.config.queue.max_slowdown)
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
            profile = self.profiles.known(job) if self.on_ray else self._profile(job)
            return (job.length_samples or 0) / profile.samples_per_s if profile is not None else None

        queue = self.settings.config.queue
        rows = job_rows(queue.policy, self.store.jobs(), alone, queue.max_slowdown)
        wall_s = self._clock() - self._started
        lost = len(self.store.ends_lost())
        if not self.on_ray:
            return summarise(queue.policy, rows, self.cluster.energy_j, wall_s, ends_lost=lost)
        return summarise(queue.policy, rows, self.cluster.energy_j, wall_s, "learned", ends_lost=lost, truth="gpus")

    def close(self) -> None:
        """Stop what runs and give the GPUs back (Ray's: ``gpus.parquet``, ``attempts.parquet``,
        ``jobs.parquet`` and ``summary.json`` written beside the database); close the database."""
        try:
            if self.on_ray:
                self._write_results()
        finally:
            try:
                self.cluster.close()
            finally:
                self.store.close()

    def _write_results(self) -> None:
        summary = self.summary()
        queue = self.settings.config.queue

        def alone(job: TraceJob) -> float | None:
            profile = self.profiles.known(job)
            return (job.length_samples or 0) / profile.samples_per_s if profile is not None else None

        directory = self.store.path.parent
        write_parquet(directory / "jobs.parquet", job_rows(queue.policy, self.store.jobs(), alone, queue.max_slowdown))
        write_summary(directory / "summary.json", summary)

    def _profile(self, job: TraceJob) -> Profile:
        return catalog_profile(job.workload, self.settings.gpu)
