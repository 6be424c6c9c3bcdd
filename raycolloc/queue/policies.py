"""The baseline policies: ``exclusive`` (one job per GPU) and ``carma`` (CARMA's published rules).

``carma`` is written from CARMA's description (arXiv 2508.19073, its README) and checked against its
public scheduler's behaviour (itu-rad/CARMA, ``src/server.py``; nothing copied): a FIFO queue; a job
re-queued after an OOM goes first, with its estimate unchanged, and only onto an idle GPU (CARMA's
recovery queue: collocation waits while it holds a job); a GPU qualifies for the head if it is not
busy — over the monitor's rolling window, summarised as CARMA's monitor does (a blend that weighs the
95th percentile, :func:`raycolloc.queue.carma.monitor_summary`; the window's means where a runner gives
no samples), SM activity >= 0.80 and (SM occupancy >= 0.45 or DRAM activity >= 0.40), checked on every
GPU — and its free memory (as monitored) is at least the job's
estimate plus 2 GiB (an idle GPU takes the head whatever its estimate, as CARMA's idle-GPU branch
does); among those, the most free memory. The estimate is GPUMemNet's: a classifier into 8 GiB bins,
so the job's memory estimate rounded up to the next 8 GiB (:func:`gpumemnet_mib`), one bin off as
GPUMemNet's published outputs are (``queue.carma_estimator=gpumemnet``: drawn per workload,
:func:`raycolloc.queue.carma.gpumemnet_offset`). A GPU that has taken a job is left alone until the
job's process shows on it and ``SETTLE_S`` after (CARMA's grace; where the runner cannot tell when it
showed, from placement). The head blocks the queue; the policy asks again every ``RETRY_S``.
Where this departs from CARMA, and why: docs/queue.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from raycolloc.advise.model import Gpu
from raycolloc.config_groups import QueueConfig
from raycolloc.mode_kinds import BASELINE_MODE
from raycolloc.queue.advised import AdvisedPolicy
from raycolloc.queue.carma import gpumemnet_offset, monitor_summary
from raycolloc.queue.policy import (
    POLICIES,
    Decision,
    GpuView,
    Placement,
    Policy,
    Predictor,
    QueuedJob,
    register_policy,
)

__all__ = ["CARMA_MARGIN_MIB", "GPUMEMNET_BIN_MIB", "CarmaPolicy", "ExclusivePolicy", "create_policy", "gpumemnet_mib"]

CARMA_MARGIN_MIB = 2048.0  # free memory beyond the estimate a GPU must have
SM_ACTIVE_MAX = 0.80  # a GPU at or above this SM activity ...
SM_OCCUPANCY_MAX = 0.45  # ... and this SM occupancy ...
DRAM_ACTIVE_MAX = 0.40  # ... or this DRAM activity is skipped
GPUMEMNET_BIN_MIB = 8192.0  # GPUMemNet classifies a job's memory into 8 GiB bins
SETTLE_S = 30.0  # CARMA's grace after a job shows on a GPU before the GPU is considered again
RETRY_S = 5.0  # the head is blocked by what the monitor sees: ask again after this (CARMA polls each 1 s)


def gpumemnet_mib(mib: float, offset: int = 0) -> float:
    """``mib`` as GPUMemNet's classifier reports it: the upper edge of its 8 GiB bin, ``offset`` bins off
    (at least one bin)."""
    return max(1, math.ceil(mib / GPUMEMNET_BIN_MIB) + offset) * GPUMEMNET_BIN_MIB


def recovered(job: QueuedJob) -> bool:
    """Re-queued after an OOM. The queue's loop grows the estimate only after an OOM, so an estimate
    above the profile's also tells it where ``ooms`` is not passed on."""
    return job.ooms > 0 or job.mem_estimate_mib > (job.profile.job_mem_mib or math.inf)


@register_policy("exclusive")
class ExclusivePolicy:
    """FIFO, one job per GPU: the head takes the first empty GPU."""

    name = "exclusive"

    def __init__(self, queue: QueueConfig, gpu: Gpu, predictor: Predictor) -> None:
        pass

    def place(self, waiting: Sequence[QueuedJob], gpus: Sequence[GpuView], now: float) -> Decision:
        free = [g.gpu_id for g in gpus if g.empty]
        return Decision(tuple(Placement(j.job_id, g, BASELINE_MODE) for j, g in zip(waiting, free, strict=False)))


@register_policy("carma")
class CarmaPolicy:
    """CARMA's rules (module docstring); collocated jobs share a GPU under ``queue.carma_mode``."""

    name = "carma"

    def __init__(self, queue: QueueConfig, gpu: Gpu, predictor: Predictor) -> None:
        self.mode = queue.carma_mode
        self.errs = queue.carma_estimator == "gpumemnet"
        self.seed = queue.carma_seed

    def place(self, waiting: Sequence[QueuedJob], gpus: Sequence[GpuView], now: float) -> Decision:
        views = list(gpus)
        out: list[Placement] = []
        for queued in waiting:
            job = self.estimated(queued)
            only_idle = recovered(queued)  # CARMA's recovery queue: an idle GPU only
            fit = [i for i, v in enumerate(views) if self.qualifies(v, job, now) and (v.empty or not only_idle)]
            if not fit:
                # The head waits (FIFO); what the monitor sees changes with time, so look again soon.
                return Decision(tuple(out), now + RETRY_S if views else None)
            i = max(fit, key=lambda k: (views[k].memory_mib - views[k].mem_used_mib, -k))
            mode = views[i].mode or self.mode
            views[i] = views[i].with_job(job, mode, now)
            out.append(Placement(job.job_id, views[i].gpu_id, mode))
        return Decision(tuple(out))

    def estimated(self, job: QueuedJob) -> QueuedJob:
        """``job`` with GPUMemNet's estimate: its first estimate (its profile's; never grown by an OOM,
        as CARMA re-queues a job as it was) in an 8 GiB bin, the bin GPUMemNet errs into where it errs."""
        first = job.profile.job_mem_mib or job.mem_estimate_mib
        offset = gpumemnet_offset(job.workload, self.seed) if self.errs else 0
        return replace(job, mem_estimate_mib=gpumemnet_mib(first, offset))

    @staticmethod
    def qualifies(gpu: GpuView, job: QueuedJob, now: float) -> bool:
        """CARMA's preconditions for putting ``job`` (at the estimate it carries) on ``gpu``."""
        sm, occ, dram = monitored(gpu)
        if sm >= SM_ACTIVE_MAX and (occ >= SM_OCCUPANCY_MAX or dram >= DRAM_ACTIVE_MAX):
            return False  # busy
        if gpu.empty:
            return True  # CARMA sends the head to an idle GPU whatever its estimate
        if gpu.pending:
            return False  # the last job's process has not shown yet: what the monitor sees is not it yet
        settle_from = gpu.shown_s if gpu.shown_s is not None else gpu.last_placed_s
        if settle_from is not None and now - settle_from < SETTLE_S:
            return False
        return gpu.memory_mib - gpu.mem_used_mib >= job.mem_estimate_mib + CARMA_MARGIN_MIB


def monitored(gpu: GpuView) -> tuple[float, float, float]:
    """SM activity, SM occupancy and DRAM activity as CARMA's monitor summarises its window (the window's
    means where the runner gives no samples)."""
    if not gpu.window:
        return gpu.sm_active, gpu.sm_occupancy, gpu.dram_active
    sm, occ, dram = (monitor_summary(series) for series in zip(*gpu.window, strict=True))
    return sm, occ, dram


# The advisor's policy registers itself where it is defined; importing it above is what loads it.
_BUILT_IN = (ExclusivePolicy, CarmaPolicy, AdvisedPolicy)


def create_policy(queue: QueueConfig, gpu: Gpu, predictor: Predictor) -> Policy:
    """The policy ``queue.policy`` names (the config's check has refused any other name)."""
    return POLICIES[queue.policy](queue, gpu, predictor)
