"""The user's own training code in a raycolloc job (``workload=python workload.entry=module:function``).

The user writes one function that takes a :class:`JobContext` and returns a :class:`UserJob`::

    from raycolloc.job.workloads.user import JobContext, UserJob

    def build(ctx: JobContext) -> UserJob:
        model = MyNet(**ctx.args).to(ctx.device)
        return UserJob(model=model, loss=torch.nn.functional.mse_loss, batches=my_batches(ctx))

Either the parts of a step (``model``, ``loss``, ``batches``, optionally ``optimizer``; raycolloc
builds the step with ``trainer.compile``/``amp``/``channels_last``), or one whole ``step`` function
(raycolloc calls it; those options do not apply and are refused). Around it raycolloc keeps its
protocol: warm-up epoch, barrier, measured epochs of ``epoch_samples // batch_size`` steps (more
where ``min_epoch_s`` asks a measured epoch to run longer) timed after a device synchronise, peak
memory, and any exception as the job's ``error``/``oom`` row.
``jobs/examples/tiny_regression.py`` is a complete example.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from raycolloc.workload_kinds import PythonWorkload

if TYPE_CHECKING:
    from raycolloc.spec import JobSpec

__all__ = ["BatchesRanOut", "JobContext", "UserJob", "UserRun", "build_user_run"]


class BatchesRanOut(RuntimeError):
    """A workload's ``batches`` ended and could not start again (a spent generator): the job's error."""


Batch = tuple[Any, torch.Tensor]


@dataclass(frozen=True)
class JobContext:
    """What raycolloc tells the user's function about its job.

    Attributes:
        device: where to build the model and put batches (``cuda:0`` is the job's GPU or MIG
            device; ``cpu`` on simulated GPUs).
        batch_size: samples per step (``workload.batch_size`` or ``batch_size``).
        epoch_samples: samples per epoch; raycolloc runs ``epoch_samples // batch_size`` steps (more in a
            measured epoch shorter than ``min_epoch_s``: ``batches`` is cycled).
        seed: the job's seed (``seed`` + job index); torch is already seeded with it.
        job_index: the job's place in its cell.
        lr: ``workload.lr`` (None if unset).
        args: ``workload.args``, as given.
        data_path: ``data.path`` (None if unset).
    """

    device: torch.device
    batch_size: int
    epoch_samples: int
    seed: int
    job_index: int
    lr: float | None = None
    args: dict[str, Any] = field(default_factory=dict)
    data_path: str | None = None


@dataclass
class UserJob:
    """What the user's function returns: the parts of a training step, or the step itself.

    Attributes:
        model: the model, on ``ctx.device``.
        loss: ``loss(output, target) -> scalar`` (a module or a function).
        batches: the next ``(inputs, target)`` each step: an iterable (cycled when it ends) or a
            function; ``inputs`` is a tensor or a tuple of tensors (moved to the device if not there).
        optimizer: over the model's parameters; default SGD with momentum (lr ``ctx.lr`` or 0.1).
        step: instead of all of the above, one training step, batch included; returns the loss
            (a tensor or a number) or None.
    """

    model: nn.Module | None = None
    loss: nn.Module | Callable[[Any, torch.Tensor], torch.Tensor] | None = None
    batches: Iterable[Batch] | Callable[[], Batch] | None = None
    optimizer: torch.optim.Optimizer | None = None
    step: Callable[[], Any] | None = None


@dataclass
class UserRun:
    """One training step of a python job as the training process runs it."""

    step: Callable[[], Any]
    compiled: bool
    params: int | None


class _Batches:
    """The user's batches, cycled, on the device."""

    def __init__(self, batches: Iterable[Batch] | Callable[[], Batch], device: torch.device) -> None:
        self.device = device
        self._make: Callable[[], Batch] | None = None  # a function: called for every batch
        self._batches: Iterable[Batch] = ()  # an iterable: cycled
        self._it: Iterator[Batch] = iter(())
        if callable(batches):
            self._make = batches
        else:
            self._batches, self._it = batches, iter(batches)

    def next(self) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        if self._make is not None:
            batch = self._make()
        else:
            try:
                batch = next(self._it)
            except StopIteration:
                self._it = iter(self._batches)
                try:
                    batch = next(self._it)
                except StopIteration:
                    raise BatchesRanOut(
                        "the workload's batches ran out and cannot start again (a generator is spent once): "
                        "give a re-iterable (a list, a Dataset) or a function that makes a batch"
                    ) from None
        inputs, target = batch
        inputs = inputs if isinstance(inputs, tuple | list) else (inputs,)
        return tuple(self._to(t) for t in inputs), self._to(target)

    def _to(self, t: torch.Tensor) -> torch.Tensor:
        return t if t.device == self.device else t.to(self.device, non_blocking=True)


def _entry(workload: PythonWorkload) -> Callable[[JobContext], UserJob]:
    if workload.sys_path and workload.sys_path not in sys.path:
        sys.path.insert(0, workload.sys_path)
    module, function = workload.entry.split(":")
    return getattr(importlib.import_module(module), function)


def build_user_run(spec: JobSpec, device: torch.device) -> UserRun:
    """Call the user's function for the job and wrap what it returns into one step.

    Raises:
        TypeError: it returned something else than a :class:`UserJob`, or an incomplete one.
        ValueError: a step function with ``trainer.compile``/``amp``/``channels_last`` set.
    """
    from raycolloc.job.step import make_step, sgd

    workload, cfg = spec.workload, spec.trainer
    assert isinstance(workload, PythonWorkload)
    ctx = JobContext(
        device=device,
        batch_size=spec.batch_size,
        epoch_samples=spec.epoch_samples,
        seed=spec.seed,
        job_index=spec.index,
        lr=workload.lr,
        args=dict(workload.args),
        data_path=spec.data.path,
    )
    job = _entry(workload)(ctx)
    if not isinstance(job, UserJob):
        raise TypeError(
            f"{workload.entry} returned {type(job).__name__}; it must return a raycolloc.job.workloads.user.UserJob"
        )
    if job.step is not None:
        fast = [
            k for k, off in (("compile", "off"), ("amp", "off"), ("channels_last", False)) if getattr(cfg, k) != off
        ]
        if fast:
            raise ValueError(
                f"trainer.{', trainer.'.join(fast)} cannot apply to {workload.entry}: it returns a whole "
                "step function; return model, loss and batches instead to let raycolloc build the step"
            )
        params = sum(p.numel() for p in job.model.parameters()) if job.model is not None else None
        return UserRun(step=job.step, compiled=False, params=params)
    if job.model is None or job.loss is None or job.batches is None:
        missing = [k for k in ("model", "loss", "batches") if getattr(job, k) is None]
        raise TypeError(
            f"{workload.entry} returned a UserJob without {', '.join(missing)}: give model, loss and "
            "batches (optionally optimizer), or one step function"
        )
    model = job.model.to(ctx.device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = job.optimizer or sgd(list(model.parameters()), ctx.lr or 0.1, ctx.device)
    train = make_step(model, job.loss, optimizer, ctx.device, cfg, images=cfg.channels_last)
    batches = _Batches(job.batches, ctx.device)
    return UserRun(
        step=lambda: train(*batches.next()), compiled=train.compiled, params=sum(p.numel() for p in model.parameters())
    )
