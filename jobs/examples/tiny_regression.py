"""A user's own training code as a raycolloc job (``workload=python``): a small MLP regression.

raycolloc imports this module, calls :func:`build` once per job with a
:class:`~raycolloc.job.workloads.user.JobContext`, and runs the protocol around what it returns:
a warm-up epoch, a barrier, then the measured epochs of ``epoch_samples // batch_size`` steps, each
timed after a device synchronise, with peak memory and any exception recorded as the job's row::

    python -m raycolloc.sweep -m workload=python workload.entry=jobs.examples.tiny_regression:build \\
        'workload.args={hidden: 64}' degree=1,2 mode=naive,mps cluster=local

Run it from the repository root (the driver finds ``jobs.examples`` on its ``sys.path`` and the
training processes import it from the same directory). Nothing here knows of Ray, GPUs or timing.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from raycolloc.job.workloads.user import JobContext, UserJob


def _batches(ctx: JobContext, features: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless batches of a fixed linear target with noise, on the job's device."""
    gen = torch.Generator().manual_seed(ctx.seed)
    weight = torch.randn(features, 1, generator=gen)
    while True:
        x = torch.randn(ctx.batch_size, features, generator=gen)
        y = x @ weight + 0.01 * torch.randn(ctx.batch_size, 1, generator=gen)
        yield x.to(ctx.device), y.to(ctx.device)


def build(ctx: JobContext) -> UserJob:
    """An MLP (``args.features`` inputs, ``args.hidden`` units), MSE loss and Adam; raycolloc builds
    the step around them (``trainer.compile``, ``trainer.amp`` apply)."""
    features, hidden = int(ctx.args.get("features", 32)), int(ctx.args.get("hidden", 128))
    model = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1)).to(ctx.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=ctx.lr or 1e-3)
    return UserJob(model=model, loss=nn.functional.mse_loss, batches=_batches(ctx, features), optimizer=optimizer)


def build_step(ctx: JobContext) -> UserJob:
    """The same training as one step function: raycolloc only calls and times it."""
    job = build(ctx)
    batches = job.batches
    assert job.model is not None and job.optimizer is not None and isinstance(batches, Iterator)

    def step() -> torch.Tensor:
        x, y = next(batches)
        loss = nn.functional.mse_loss(job.model(x), y)
        job.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        job.optimizer.step()
        return loss.detach()

    return UserJob(model=job.model, step=step)
