"""A ``workload=python`` job whose steps sleep instead of computing: for tests of where and when cells
run (fan-out across GPUs and nodes), so that four cells on a 2-core machine overlap without slowing each
other, as GPU-bound cells on a real node do."""

from __future__ import annotations

import time

import torch
from torch import nn

from raycolloc.job.workloads.user import JobContext, UserJob


def build(ctx: JobContext) -> UserJob:
    """A step of ``args.step_ms`` milliseconds (default 10), the first ``args.busy_ms`` (default 0) of
    them spent computing and the rest asleep, and a one-weight model. (The simulated GPU's SM activity
    follows its jobs' CPU time: a job that only sleeps keeps it at ~0.)"""
    seconds = float(ctx.args.get("step_ms", 10)) / 1000.0
    busy = float(ctx.args.get("busy_ms", 0)) / 1000.0
    model = nn.Linear(1, 1).to(ctx.device)

    def step() -> torch.Tensor:
        start = time.perf_counter()
        while time.perf_counter() - start < busy:
            pass
        time.sleep(max(0.0, seconds - (time.perf_counter() - start)))
        return torch.zeros(())

    return UserJob(model=model, step=step)
