"""Naive collocation: every job is its own CUDA process and the GPU time-slices between them.

Nothing is set up on the GPU. A naive job must not become an MPS client: if an MPS control
daemon that raycolloc did not start serves the GPU, the cell is refused, and each job gets a
private, empty MPS pipe directory, so CUDA finds no daemon there even if one starts later on the
default ``/tmp/nvidia-mps``.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from raycolloc.mode_kinds import ModeKind, mode_of
from raycolloc.mpsctl import CONTROL
from raycolloc.node.modes.base import GpuSlot, ModeError
from raycolloc.node.modes.mps import daemons_serving
from raycolloc.spec import Binding, CellSpec, Release

__all__ = ["NaiveMode"]

log = logging.getLogger(__name__)


class NaiveMode:
    """See the module docstring."""

    kind: ClassVar[ModeKind] = mode_of("naive")
    name: ClassVar[str] = kind.name

    def __init__(self, slot: GpuSlot, cell: CellSpec) -> None:
        self.slot, self.cell = slot, cell

    def prepare(self) -> list[Binding]:
        gpu = self.slot.gpu
        if gpu.mig_enabled:
            raise ModeError(f"mode=naive: MIG mode is enabled on {gpu.uuid}; run mode=mig there or use another GPU")
        if self.slot.stop_daemon():
            log.info("gpu=%s stopped the MPS daemon kept from an earlier cell before a naive cell", gpu.uuid)
        serving = daemons_serving(gpu.uuid, gpu.index)
        if serving:
            raise ModeError(
                f"mode=naive refused: an MPS control daemon already serves GPU {gpu.index} ({gpu.uuid}) "
                f"(pid {serving[0]['pid']}, pipe {serving[0]['pipe_dir']}); its clients would share one MPS "
                f"server. Stop it (echo quit | CUDA_MPS_PIPE_DIRECTORY={serving[0]['pipe_dir']} {CONTROL})"
            )
        private = self.slot.dir(self.cell) / "no-mps"
        private.mkdir(parents=True, exist_ok=True)
        env = {"CUDA_VISIBLE_DEVICES": gpu.uuid, "CUDA_MPS_PIPE_DIRECTORY": str(private)}
        return [
            Binding(job.index, gpu.uuid, dict(env), mps_pipe_dir=str(private), mps_control=self.slot.control)
            for job in self.cell.jobs
        ]

    def release(self) -> Release:
        return Release()
