"""The baseline policies: ``exclusive`` (one job per GPU) and ``carma`` (CARMA's published rules).

``carma`` is written from the description of CARMA (arXiv 2508.19073 and its public README), not
from its code: a FIFO queue (a job re-queued after an OOM goes first); a GPU qualifies for the job
at the head if its free memory (as monitored) is at least the job's estimate plus 2 GiB, and is
skipped while, over the monitor's rolling window, its SM activity is at least 0.80 and its SM
occupancy at least 0.45 or its DRAM activity at least 0.40; among the GPUs that qualify, the one
with the most free memory. Two things the description leaves open are settled here: a GPU that has
just taken a job is left alone until the monitor can see it (``SETTLE_S``), and an empty GPU takes
any job (a job must be able to run alone, whatever its estimate). The head blocks the queue;
the policy asks again every ``RETRY_S`` while the monitor may change its answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from raycolloc.advise.model import Gpu
from raycolloc.config_groups import QueueConfig
from raycolloc.queue.advised import AdvisedPolicy
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

__all__ = ["CARMA_MARGIN_MIB", "CarmaPolicy", "ExclusivePolicy", "create_policy"]

CARMA_MARGIN_MIB = 2048.0  # free memory beyond the estimate a GPU must have
SM_ACTIVE_MAX = 0.80  # a GPU at or above this SM activity ...
SM_OCCUPANCY_MAX = 0.45  # ... and this SM occupancy ...
DRAM_ACTIVE_MAX = 0.40  # ... or this DRAM activity is skipped
SETTLE_S = 10.0  # a GPU that just took a job: the monitor does not see that job yet
RETRY_S = 5.0  # the head is blocked by what the monitor sees: ask again after this


@register_policy("exclusive")
class ExclusivePolicy:
    """FIFO, one job per GPU: the head takes the first empty GPU."""

    name = "exclusive"

    def __init__(self, queue: QueueConfig, gpu: Gpu, predictor: Predictor) -> None:
        pass

    def place(self, waiting: Sequence[QueuedJob], gpus: Sequence[GpuView], now: float) -> Decision:
        free = [g.gpu_id for g in gpus if g.empty]
        return Decision(tuple(Placement(j.job_id, g, "naive") for j, g in zip(waiting, free, strict=False)))


@register_policy("carma")
class CarmaPolicy:
    """CARMA's rules (module docstring); collocated jobs share a GPU under ``queue.carma_mode``."""

    name = "carma"

    def __init__(self, queue: QueueConfig, gpu: Gpu, predictor: Predictor) -> None:
        self.mode = queue.carma_mode

    def place(self, waiting: Sequence[QueuedJob], gpus: Sequence[GpuView], now: float) -> Decision:
        views = list(gpus)
        out: list[Placement] = []
        for job in waiting:
            fit = [i for i, v in enumerate(views) if self.qualifies(v, job, now)]
            if not fit:
                # The head waits (FIFO); what the monitor sees changes with time, so look again soon.
                retry = now + RETRY_S if any(not v.empty for v in views) else None
                return Decision(tuple(out), retry)
            i = max(fit, key=lambda k: (views[k].memory_mib - views[k].mem_used_mib, -k))
            mode = views[i].mode or self.mode
            views[i] = views[i].with_job(job, mode, now)
            out.append(Placement(job.job_id, views[i].gpu_id, mode))
        return Decision(tuple(out))

    @staticmethod
    def qualifies(gpu: GpuView, job: QueuedJob, now: float) -> bool:
        """CARMA's preconditions for putting ``job`` on ``gpu``."""
        if gpu.empty:
            return True
        if gpu.memory_mib - gpu.mem_used_mib < job.mem_estimate_mib + CARMA_MARGIN_MIB:
            return False
        if gpu.last_placed_s is not None and now - gpu.last_placed_s < SETTLE_S:
            return False
        busy = gpu.sm_active >= SM_ACTIVE_MAX and (
            gpu.sm_occupancy >= SM_OCCUPANCY_MAX or gpu.dram_active >= DRAM_ACTIVE_MAX
        )
        return not busy


# The advisor's policy registers itself where it is defined; importing it above is what loads it.
_BUILT_IN = (ExclusivePolicy, CarmaPolicy, AdvisedPolicy)


def create_policy(queue: QueueConfig, gpu: Gpu, predictor: Predictor) -> Policy:
    """The policy ``queue.policy`` names (the config's check has refused any other name)."""
    return POLICIES[queue.policy](queue, gpu, predictor)
