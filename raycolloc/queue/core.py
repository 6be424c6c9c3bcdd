"""The queue's loop, the same whatever runs the jobs: reports in, placements out, the state in between.

:class:`Queue` joins a :class:`~raycolloc.queue.state.Store` (every change a transaction), a policy
and a cluster (a :class:`Runners`: the simulated one of a replay, or real GPUs). It never holds a
job's state itself: on every pass it reads what is waiting from the store, asks the policy, and
records each placement before the runner starts it and each start after, so that a queue killed
between any two of these finds, on restart, a state it can resume from (:meth:`Queue.resume`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from raycolloc.advise.memory import MEM_HEADROOM_MIB, MEM_MARGIN, MPS_SERVER_MIB
from raycolloc.advise.model import Gpu
from raycolloc.advise.profile import Profile
from raycolloc.config_groups import QueueConfig
from raycolloc.queue.policy import GpuView, Policy, QueuedJob
from raycolloc.queue.state import JobRecord, Store
from raycolloc.queue.trace import TraceJob

__all__ = ["JobStart", "Queue", "Report", "Runners", "largest_estimate"]


@dataclass(frozen=True)
class Report:
    """What a runner reports: a job's attempt ``ended``, ran out of memory (``oom``) or was ``lost``
    with its node, at ``t``; a real runner adds what it measured (the attempt's memory peak, MiB,
    and its samples/s), None where nothing was measured (the simulated cluster)."""

    job_id: str
    attempt: int
    kind: Literal["ended", "oom", "lost"]
    t: float
    co_residents: tuple[str, ...]
    mem_peak_mib: float | None = None
    samples_per_s: float | None = None


@dataclass(frozen=True)
class JobStart:
    """An attempt of a job the queue placed, for its runner to start: on ``gpu_id`` under ``mode`` at
    ``now``, with its profile, memory estimate (MiB), slowdown bound and length in samples."""

    job_id: str
    attempt: int
    profile: Profile
    estimate_mib: float
    max_slowdown: float
    samples: float
    gpu_id: str
    mode: str
    now: float


class Runners(Protocol):
    """What runs the queue's jobs: GPUs to see, jobs to start, and which attempts still run."""

    def views(self, now: float) -> list[GpuView]: ...

    def start(self, job: JobStart) -> None: ...

    def running(self) -> frozenset[tuple[str, int]]: ...


def largest_estimate(gpu: Gpu) -> float:
    """The largest memory estimate a job alone can have and fit by the advisor's rule (an estimate
    grown by OOMs stops there: alone is where every job can run)."""
    return (gpu.memory_mib - gpu.base_mib - MEM_HEADROOM_MIB - MPS_SERVER_MIB) / (1 + MEM_MARGIN)


class Queue:
    """The queue: a store, a policy, runners, and how to find each job's profile and length."""

    def __init__(
        self,
        store: Store,
        policy: Policy,
        runners: Runners,
        queue: QueueConfig,
        gpu: Gpu,
        profile_of: Callable[[TraceJob], Profile],
    ) -> None:
        self.store = store
        self.policy = policy
        self.runners = runners
        self.queue = queue
        self.gpu = gpu
        self.profile_of = profile_of

    def resume(self, now: float) -> list[str]:
        """Re-queue the jobs the store has ``placed`` or ``started`` whose runner no longer runs them."""
        return self.store.recover(now, self.runners.running())

    def handle(self, reports: Sequence[Report]) -> None:
        """Record what the runners reported: an end (once per job), an OOM (re-queued, estimate grown),
        or a job lost with its node (re-queued as it was)."""
        for r in reports:
            if r.kind == "ended":
                self.store.end(r.job_id, r.attempt, r.t, r.co_residents, r.samples_per_s)
                continue
            if r.kind == "lost":
                self.store.requeue(r.job_id, r.attempt, r.t, "node lost")
                continue
            record = self.store.job(r.job_id)
            if record is None:
                continue
            grown = (record.mem_estimate_mib or self.profile_of(record.job).job_mem_mib) * self.queue.oom_backoff
            grown = max(grown, r.mem_peak_mib or 0.0)  # it held this much before it ran out: at least that
            self.store.oom(r.job_id, r.attempt, r.t, min(grown, largest_estimate(self.gpu)))

    def schedule(self, now: float) -> float | None:
        """One placement pass at ``now``; returns when the policy wants to be asked again (or None)."""
        records = self.store.waiting(now)
        if not records:
            return None
        waiting = [self._queued(r, now) for r in records]
        decision = self.policy.place(waiting, self.runners.views(now), now)
        by_id = {r.job.job_id: (r, w) for r, w in zip(records, waiting, strict=True)}
        for p in decision.placements:
            record, job = by_id[p.job_id]
            attempt = self.store.place(p.job_id, p.gpu_id, p.mode, now)
            samples = float(record.job.length_samples or 0)
            self.runners.start(
                JobStart(
                    p.job_id,
                    attempt,
                    job.profile,
                    job.mem_estimate_mib,
                    job.max_slowdown,
                    samples,
                    p.gpu_id,
                    p.mode,
                    now,
                )
            )
            self.store.start(p.job_id, attempt, now)
        return decision.retry_at

    def _queued(self, record: JobRecord, now: float) -> QueuedJob:
        job = record.job
        profile = self.profile_of(job)
        return QueuedJob(
            job_id=job.job_id,
            workload=job.workload,
            profile=profile,
            mem_estimate_mib=record.mem_estimate_mib or profile.job_mem_mib,
            max_slowdown=job.max_slowdown or self.queue.max_slowdown,
            waited_s=now - job.submit_s,
            ooms=record.ooms,
            length_s=job.length_samples / profile.samples_per_s
            if job.length_samples and profile.samples_per_s
            else None,
        )
