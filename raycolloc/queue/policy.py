"""Placement policies as plugins: what a policy sees, what it decides, and the registry of them.

A policy is asked, whenever something changes (a job arrives or ends, an OOM, a wake-up it asked
for), where to put the jobs waiting: it sees them in queue order (re-queued after an OOM first, then
by arrival) and every GPU as a :class:`GpuView` (its mode, its residents, the memory in use and the
activity a monitor would report), and returns a :class:`Decision`. Adding a policy is one class with a
``place`` method and ``@register_policy("name")``, as timm registers models; ``queue.policy`` picks it
(:func:`raycolloc.queue.policies.create_policy`).
:class:`Predictor` is the advisor's model as every policy and the simulated cluster ask it: cached per
mode and set of workloads (the same few mixes come back thousands of times in a long trace).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from raycolloc.advise.model import Candidate, Gpu, Params, Slot, predict
from raycolloc.advise.profile import Profile
from raycolloc.config_groups import QueueConfig, register_queue_policy, unregister_queue_policy

__all__ = [
    "POLICIES",
    "Decision",
    "GpuView",
    "Outlook",
    "Placement",
    "Policy",
    "PolicyFactory",
    "Predictor",
    "QueuedJob",
    "Resident",
    "register_policy",
    "unregister_policy",
]


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting: its profile alone, memory estimate (MiB), slowdown bound, time waited, OOMs so
    far (a job re-queued after one has ``ooms`` > 0 where the caller passes it on) and its length
    alone in seconds (its samples at its profile's rate; None where the caller does not know it)."""

    job_id: str
    workload: str
    profile: Profile
    mem_estimate_mib: float
    max_slowdown: float
    waited_s: float
    ooms: int = 0
    length_s: float | None = None


@dataclass(frozen=True)
class Resident:
    """A job on a GPU, as a policy sees it: ``mem_used_mib`` is its own memory as the monitor sees
    it per process (None: not seen yet, e.g. placed in this very pass)."""

    job_id: str
    profile: Profile
    mem_estimate_mib: float
    max_slowdown: float
    mem_used_mib: float | None = None


@dataclass(frozen=True)
class GpuView:
    """One GPU now: ``mode`` None while it is empty; ``mem_used_mib`` and the activities (0..1, means
    over the monitor's rolling window) are what a monitor reports; ``last_placed_s``: when a job last
    landed on it. Where a runner can tell (the simulated cluster): ``shown_s``, when the process of the
    job last placed showed on the GPU (None: at placement, as far as the runner knows), ``pending``
    while it has not yet, and ``window``: the monitor's 1 s samples of (SM activity, SM occupancy, DRAM
    activity) over its rolling window, oldest first (empty: only the means are known)."""

    gpu_id: str
    memory_mib: float
    mode: str | None
    residents: tuple[Resident, ...]
    mem_used_mib: float
    sm_active: float
    sm_occupancy: float
    dram_active: float
    last_placed_s: float | None
    shown_s: float | None = None
    pending: bool = False
    window: tuple[tuple[float, float, float], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.residents

    def with_job(self, job: QueuedJob, mode: str, now: float) -> GpuView:
        """This GPU once ``job`` lands on it (its memory counted at the estimate until a monitor sees it)."""
        resident = Resident(job.job_id, job.profile, job.mem_estimate_mib, job.max_slowdown)
        return replace(
            self,
            mode=mode,
            residents=(*self.residents, resident),
            mem_used_mib=self.mem_used_mib + job.mem_estimate_mib,
            last_placed_s=now,
            shown_s=None,
            pending=True,
        )


@dataclass(frozen=True)
class Placement:
    """Put ``job_id`` on ``gpu_id`` under ``mode``."""

    job_id: str
    gpu_id: str
    mode: str


@dataclass(frozen=True)
class Decision:
    """A policy's answer: placements, in order, and when to ask again if nothing else happens first
    (None: only when something changes)."""

    placements: tuple[Placement, ...]
    retry_at: float | None = None


class Policy(Protocol):
    """A placement rule."""

    name: str

    def place(self, waiting: Sequence[QueuedJob], gpus: Sequence[GpuView], now: float) -> Decision: ...


PolicyFactory = Callable[[QueueConfig, Gpu, "Predictor"], Policy]
POLICIES: dict[str, PolicyFactory] = {}


def register_policy(name: str) -> Callable[[PolicyFactory], PolicyFactory]:
    """Register a policy's factory under ``name`` (what ``queue.policy`` says; the config's check
    accepts the name from then on)."""

    def add(factory: PolicyFactory) -> PolicyFactory:
        POLICIES[name] = factory
        register_queue_policy(name)
        return factory

    return add


def unregister_policy(name: str) -> None:
    """Remove the policy ``name`` (and the config's acceptance of it)."""
    POLICIES.pop(name, None)
    unregister_queue_policy(name)


@dataclass(frozen=True)
class Outlook:
    """The advisor's prediction for a GPU's jobs: each job's slowdown (in the order given), the power,
    and the GPU's SM activity, occupancy and DRAM activity (0..1)."""

    slowdowns: tuple[float, ...]
    power_w: float | None
    sm_active: float
    sm_occupancy: float
    dram_active: float


class Predictor:
    """The advisor's model on one GPU model, cached by mode and the multiset of workloads."""

    def __init__(self, gpu: Gpu, params: Params) -> None:
        self.gpu = gpu
        self.params = params
        self._cache: dict[tuple[str, tuple[str, ...]], tuple[dict[str, float], Outlook]] = {}

    def params_for(self, workload: str) -> Params:
        """The parameters that predict a job of ``workload`` (here one set for all; a subclass may fit them
        without that workload: :class:`raycolloc.queue.lowo.LeaveOutPredictor`)."""
        return self.params

    def outlook(self, mode: str, profiles: Sequence[Profile]) -> Outlook:
        """Each job's slowdown under ``mode`` beside the others (each job's as :meth:`params_for` its
        workload predicts it), and the GPU's activity and power (as its first workload's parameters do)."""
        ordered = sorted(profiles, key=lambda p: p.workload)
        key = (mode, tuple(p.workload for p in ordered))
        if key not in self._cache:
            candidate = Candidate(mode, tuple(ordered), (Slot(),) * len(ordered))
            params = {w: self.params_for(w) for w in key[1]}
            preds = {id(q): predict(candidate, self.gpu, q) for q in params.values()}
            # Jobs of one workload are alike to the model: one slowdown per workload.
            slowdown = {w: preds[id(params[w])].jobs[key[1].index(w)].slowdown for w in key[1]}
            pred = preds[id(params[key[1][0]])]
            rates = [1.0 / slowdown[p.workload] for p in ordered]
            occ = sum((p.sm_occupancy or 0.0) * r for p, r in zip(ordered, rates, strict=True))
            dram = sum((p.dram_active or 0.0) * r for p, r in zip(ordered, rates, strict=True))
            base = Outlook((), pred.power_w, pred.sm_active / 100.0, min(1.0, occ), min(1.0, dram))
            self._cache[key] = (slowdown, base)
        slowdown, base = self._cache[key]
        return replace(base, slowdowns=tuple(slowdown[p.workload] for p in profiles))
