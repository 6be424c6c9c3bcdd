"""A ``workload=python`` job whose steps sleep instead of computing: for tests of where and when cells
run (fan-out across GPUs and nodes), so that four cells on a 2-core machine overlap without slowing each
other, as GPU-bound cells on a real node do."""

from __future__ import annotations

import time

import torch
from torch import nn

from raycolloc.job.workloads.user import JobContext, UserJob


def build(ctx: JobContext) -> UserJob:
    """A step of ``args.step_ms`` milliseconds (default 10) of sleep, and a one-weight model."""
    seconds = float(ctx.args.get("step_ms", 10)) / 1000.0
    model = nn.Linear(1, 1).to(ctx.device)

    def step() -> torch.Tensor:
        time.sleep(seconds)
        return torch.zeros(())

    return UserJob(model=model, step=step)
