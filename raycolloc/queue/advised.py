"""The ``raycolloc`` policy: placements the advisor's model predicts are safe and worth it.

A job may join a GPU only where the advisor predicts that its memory fits with the advisor's safety
margin (each job's estimate + 8%, the MPS server, headroom: :func:`raycolloc.advise.memory.memory_need`)
and that every job on it, the newcomer included, stays within its slowdown bound with
``queue.slowdown_margin`` to spare (the predicted slowdown times 1 + the margin: on H200s, two
saturating jobs time-sliced ran 12% slower than the model said). A busy GPU is taken only where the
newcomer adds at least ``queue.min_gain`` of a job's work per second: sharing the model calls a wash
(two saturating jobs, +2% predicted) lost 9% on the GPU, so the job waits instead. Among the GPUs that
allow it, the job goes where it adds the most work per second (the jobs' summed rate relative to
alone, after less before; an empty GPU adds a whole job). An empty GPU's mode is chosen for its first
job: the mode (of ``queue.modes``) in which two such jobs would do best together; the GPU keeps it
while jobs are on it (an MPS client cannot join a GPU's daemon mid-run, nor leave it).

Memory is counted as the monitor sees it per process where it can be: a job on a GPU by its own
measured memory, a newcomer by the larger of its estimate (grown after an OOM) and the most any job
of its workload was seen to use (the profile is reused from past runs, as the advisor reuses solo
cells): what was seen of others never shrinks what this job was found to need.

The first ``queue.backfill_depth`` jobs of the queue (re-queued after an OOM first, then by
arrival) are looked at in ``queue.order``: ``longest`` (the default) the longest alone first — a
schedule's makespan rests on its long jobs, and a long job placed late is what ends it last (on 12
simulated 60-job traces with an H200's measured profiles, 0.63x of exclusive's makespan on average
against 0.67x in arrival order; docs/queue.md) — or ``arrival``; a job re-queued after an OOM comes
first either way. A job may take a place one before it cannot use (backfilling). Aging: once the job
at the head of the queue has waited ``queue.aging_s``, the pass goes in the queue's order and stops
at the first job that does not fit, so no later job overtakes it and the GPUs drain until it fits —
a large job is never starved by a stream of small ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from raycolloc.advise.memory import memory_need
from raycolloc.advise.model import Candidate, Gpu, Slot
from raycolloc.advise.profile import Profile
from raycolloc.config_groups import QueueConfig
from raycolloc.queue.policy import Decision, GpuView, Placement, Predictor, QueuedJob, register_policy

__all__ = ["AdvisedPolicy"]


@register_policy("raycolloc")
class AdvisedPolicy:
    """The advisor-driven policy (module docstring)."""

    name = "raycolloc"

    def __init__(self, queue: QueueConfig, gpu: Gpu, predictor: Predictor) -> None:
        self.modes = tuple(queue.modes)
        self.aging_s = queue.aging_s
        self.depth = queue.backfill_depth
        self.margin = 1.0 + queue.slowdown_margin
        self.min_gain = queue.min_gain
        self.longest_first = queue.order == "longest"
        self.gpu = gpu
        self.predictor = predictor
        self._sized: dict[tuple[str, float], Profile] = {}
        self._alone_mode: dict[str, str] = {}
        self._seen_mib: dict[str, float] = {}  # workload -> the most memory a job of it was seen to use

    def place(self, waiting: Sequence[QueuedJob], gpus: Sequence[GpuView], now: float) -> Decision:
        views = list(gpus)
        for gpu in views:
            for r in gpu.residents:
                if r.mem_used_mib is not None:
                    seen = self._seen_mib.get(r.profile.workload, 0.0)
                    self._seen_mib[r.profile.workload] = max(seen, r.mem_used_mib)
        out: list[Placement] = []
        aged = bool(waiting) and waiting[0].waited_s >= self.aging_s
        for job in self.order(waiting, aged):
            best = self.best(job, views)
            if best is None:
                if aged:
                    break  # the aged head waits, and nothing behind it takes its place
                continue
            i, mode = best
            views[i] = views[i].with_job(job, mode, now)
            out.append(Placement(job.job_id, views[i].gpu_id, mode))
        return Decision(tuple(out))

    def order(self, waiting: Sequence[QueuedJob], aged: bool) -> list[QueuedJob]:
        """The jobs one pass looks at, in the order it looks at them: the queue's while its head has
        aged (the GPUs drain for it in turn), else ``queue.order``'s (module docstring)."""
        window = list(waiting[: self.depth])
        if self.longest_first and not aged:  # stable: equal lengths keep the queue's order
            window.sort(key=lambda j: (j.ooms == 0, -(j.length_s or 0.0)))
        return window

    def best(self, job: QueuedJob, gpus: Sequence[GpuView]) -> tuple[int, str] | None:
        """The GPU (index) and mode where ``job`` adds the most work per second safely; None: nowhere."""
        found: tuple[float, int, str] | None = None
        for i, gpu in enumerate(gpus):
            if gpu.empty:
                option = (1.0, i, self.alone_mode(job.profile))
            elif gpu.mode in self.modes:
                gain = self.added_gain(job, gpu)
                if gain is None:
                    continue
                option = (gain, i, str(gpu.mode))
            else:
                continue
            if found is None or option[0] > found[0] + 1e-9:
                found = option
        return None if found is None else (found[1], found[2])

    def added_gain(self, job: QueuedJob, gpu: GpuView) -> float | None:
        """What ``job`` adds to ``gpu``'s summed rate (relative to alone); None where its memory would
        not fit, a job would pass its slowdown bound (with the margin) or it adds less than ``min_gain``."""
        mode = str(gpu.mode)
        sized = [
            self._with_estimate(r.profile, r.mem_used_mib if r.mem_used_mib is not None else r.mem_estimate_mib)
            for r in gpu.residents
        ]
        sized.append(self._with_estimate(job.profile, self.newcomer_mib(job)))
        if not memory_need(Candidate(mode, tuple(sized), (Slot(),) * len(sized)), self.gpu)[0]:
            return None
        profiles = [r.profile for r in gpu.residents]
        after = self.predictor.outlook(mode, [*profiles, job.profile])
        bounds = [r.max_slowdown for r in gpu.residents] + [job.max_slowdown]
        if any(s * self.margin > b for s, b in zip(after.slowdowns, bounds, strict=True)):
            return None
        before = self.predictor.outlook(mode, profiles)
        gain = sum(1.0 / s for s in after.slowdowns) - sum(1.0 / s for s in before.slowdowns)
        return gain if gain >= self.min_gain else None

    def newcomer_mib(self, job: QueuedJob) -> float:
        """The memory ``job`` is counted at: the most a job of its workload was seen to use, but never
        below its own estimate (grown after its OOM: that job needed more than was seen of others)."""
        return max(self._seen_mib.get(job.profile.workload, 0.0), job.mem_estimate_mib)

    def alone_mode(self, profile: Profile) -> str:
        """The mode for an empty GPU's first job: where two such jobs would do best (first listed on a tie)."""
        if profile.workload not in self._alone_mode:
            gains = [sum(1.0 / s for s in self.predictor.outlook(m, [profile, profile]).slowdowns) for m in self.modes]
            self._alone_mode[profile.workload] = self.modes[max(range(len(gains)), key=lambda k: (gains[k], -k))]
        return self._alone_mode[profile.workload]

    def _with_estimate(self, profile: Profile, mem_mib: float) -> Profile:
        """The profile with the queue's memory estimate (larger after an OOM) in place of its own."""
        key = (profile.workload, mem_mib)
        if key not in self._sized:
            self._sized[key] = replace(profile, job_mem_mib=mem_mib)
        return self._sized[key]
