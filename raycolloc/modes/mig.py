"""MIG (placeholder until the planner lands)."""

from __future__ import annotations

from typing import Any

from raycolloc.gpu.backend import GpuBackend, GpuInfo, MigUnavailable

__all__ = ["MigManager"]


class MigManager:
    def __init__(self, backend: GpuBackend, gpu: GpuInfo) -> None:
        self.backend, self.gpu = backend, gpu

    def prepare(self, mig: Any, jobs: Any, mix_layout: Any) -> Any:
        raise MigUnavailable("not yet")

    def restore(self) -> None:
        return None


def check_mig_possible(cfg: Any, infos: Any) -> None:
    return None
