"""The training step of one job, with the trainer's fast paths.

``compile`` wraps model + loss in ``torch.compile`` (AOTAutograd compiles the backward too;
``reduce-overhead`` replays both as CUDA graphs), ``amp`` runs the forward under autocast
(fp16 with a gradient scaler), ``channels_last`` stores activations NHWC. The optimiser is
SGD, fused on CUDA where PyTorch has the kernel. Compilation happens lazily on the first steps,
which the trainer runs in the warm-up epoch, never in a measured one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from raycolloc.config import TrainerConfig
from raycolloc.workload_kinds import ModelWorkload

__all__ = ["TrainStep", "build_step", "make_step"]


class _WithLoss(nn.Module):
    """Model and loss in one module, so ``torch.compile`` sees forward and loss as one graph."""

    def __init__(self, model: nn.Module, loss: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, inputs: tuple[torch.Tensor, ...], target: torch.Tensor) -> torch.Tensor:
        return self.loss(self.model(*inputs), target)


class _LossFn(nn.Module):
    """A plain loss function (the user's, ``workload=python``) as a module."""

    def __init__(self, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.fn(output, target)


@dataclass
class TrainStep:
    """A callable ``step(inputs, target) -> loss`` and what it was built with."""

    fn: Callable[[tuple[torch.Tensor, ...], torch.Tensor], torch.Tensor]
    module: nn.Module
    optimizer: torch.optim.Optimizer
    compiled: bool
    amp: str

    def __call__(self, inputs: tuple[torch.Tensor, ...], target: torch.Tensor) -> torch.Tensor:
        return self.fn(inputs, target)


def sgd(params: list[nn.Parameter], lr: float, device: torch.device, momentum: bool = True) -> torch.optim.Optimizer:
    """The study's optimiser: SGD with momentum (plain SGD takes DLRM's sparse gradients)."""
    if not momentum:
        return torch.optim.SGD(params, lr=lr)
    # Fused on CUDA: one kernel for the whole update instead of a few per tensor (None: torch's default).
    fused = True if device.type == "cuda" else None
    return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=5e-5, fused=fused)


def build_step(spec: ModelWorkload, model: nn.Module, device: torch.device, cfg: TrainerConfig) -> TrainStep:
    """Build the step function of one job of a workload raycolloc composes, on ``device``."""
    loss = nn.BCEWithLogitsLoss() if spec.family == "dlrm" else nn.CrossEntropyLoss()
    model = model.to(device)
    if cfg.channels_last and spec.family == "vision":
        model = model.to(memory_format=torch.channels_last)
    # Sparse embedding gradients: plain SGD without momentum is the optimiser that takes them.
    optimizer = sgd(list(model.parameters()), spec.lr, device, momentum=spec.family != "dlrm")
    return make_step(model, loss, optimizer, device, cfg, images=spec.family == "vision")


def make_step(
    model: nn.Module,
    loss: nn.Module | Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    cfg: TrainerConfig,
    images: bool,
) -> TrainStep:
    """The step function around a model, its loss and optimiser (already on ``device``), with the
    trainer's fast paths; ``images``: the first input is an image batch (``channels_last`` applies)."""
    memory_format = torch.channels_last if cfg.channels_last and images else None
    module = _WithLoss(model, loss if isinstance(loss, nn.Module) else _LossFn(loss)).to(device)
    forward: Callable[..., torch.Tensor] = module
    compiled = cfg.compile != "off"
    if compiled:
        mode = None if cfg.compile == "default" else cfg.compile
        if device.type != "cuda" and mode == "reduce-overhead":
            mode = None  # CUDA graphs need a GPU; on the CPU the same graph compiles without them
        forward = torch.compile(module, mode=mode)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.amp)
    scaler = torch.amp.GradScaler(device.type) if cfg.amp == "fp16" else None
    graphs = compiled and device.type == "cuda" and cfg.compile in ("reduce-overhead", "max-autotune")

    def step(inputs: tuple[torch.Tensor, ...], target: torch.Tensor) -> torch.Tensor:
        if memory_format is not None:
            inputs = (inputs[0].contiguous(memory_format=memory_format), *inputs[1:])
        if graphs:
            # Tell the CUDA-graph tree a new iteration starts, so last step's outputs may be reused.
            torch.compiler.cudagraph_mark_step_begin()
        autocast = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        with autocast:
            loss_value = forward(inputs, target)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss_value).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss_value.backward()
            optimizer.step()
        return loss_value.detach()

    return TrainStep(fn=step, module=module, optimizer=optimizer, compiled=compiled, amp=cfg.amp)
