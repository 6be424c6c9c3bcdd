"""The GPU backend interface the steward, the modes and telemetry are written against.

Two implementations: :mod:`raycolloc.node.gpu.nvml` calls the real NVML through ``pynvml``;
:mod:`raycolloc.node.gpu.sim` simulates GPUs (local mode) and enforces the same rules (memory
capacity, MIG profiles and placements). Everything above this layer is the same code for both: what
differs reaches it as each backend's :class:`~raycolloc.devices.BackendTraits` and the
:class:`~raycolloc.devices.JobDevice` it gives each job, never as the backend's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from raycolloc.devices import BackendTraits, GpuInfo, JobDevice

__all__ = [
    "ComputeInstanceRecord",
    "GpuBackend",
    "GpuInfo",
    "GpuInstanceRecord",
    "MigDevice",
    "MigUnavailable",
    "ProcessUsage",
]


class MigUnavailable(RuntimeError):
    """MIG cannot be used on this GPU as it is (disabled, unsupported or not permitted)."""


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a compute instance inside a GPU instance) that a job can be pinned to."""

    uuid: str
    gi_id: int
    ci_id: int
    gi_profile_id: int
    ci_profile_id: int
    gi_start: int
    ci_start: int
    memory_mib: int
    sm_count: int


@dataclass(frozen=True)
class ComputeInstanceRecord:
    """A compute instance as read off the device."""

    ci_id: int
    profile_id: int
    start: int


@dataclass(frozen=True)
class GpuInstanceRecord:
    """A GPU instance and its compute instances as read off the device."""

    gi_id: int
    profile_id: int
    start: int
    compute_instances: tuple[ComputeInstanceRecord, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class ProcessUsage:
    """A compute process on a GPU: the memory NVML attributes to it and the share of time its
    kernels kept the SMs busy since the last sample (None where NVML hides them: MPS clients, MIG)."""

    pid: int
    used_mib: float | None
    sm_util: float | None = None


class GpuBackend(Protocol):
    """What raycolloc needs from NVML. Methods take the GPU's UUID."""

    kind: str  # the backend's name (``traits.name``): the records' ``backend`` column
    traits: BackendTraits  # what it allows; reported by the steward (``NodeInfo.traits``)

    def gpus(self) -> list[GpuInfo]: ...
    def gpu(self, uuid: str) -> GpuInfo: ...
    def gpu_for_ray_id(self, ray_gpu_id: str) -> GpuInfo: ...
    def driver_version(self) -> str: ...
    def processes(self, uuid: str) -> list[ProcessUsage]: ...
    def cpu_affinity(self, uuid: str) -> list[int] | None: ...
    def basic_sample(self, uuid: str, pcie: bool = True) -> dict[str, float | None]: ...
    def energy_mj(self, uuid: str) -> float | None: ...
    def clock_events(self, uuid: str) -> str | None:
        """NVML's clock-event reasons now, comma-joined ("" none; None unknown)."""
        ...

    def gpm_supported(self, uuid: str) -> bool: ...
    def gpm_sample(self, uuid: str, gi_id: int | None = None) -> Any: ...
    def gpm_metrics(self, before: Any, after: Any) -> dict[str, float | None]: ...
    def gpm_free(self, sample: Any) -> None: ...
    def mig_mode(self, uuid: str) -> tuple[bool, bool]: ...
    def gpu_instances(self, uuid: str) -> list[GpuInstanceRecord]: ...
    def create_gpu_instance(self, uuid: str, profile_id: int, start: int) -> int: ...
    def create_compute_instance(self, uuid: str, gi_id: int, profile_id: int, start: int | None) -> int: ...
    def destroy_compute_instance(self, uuid: str, gi_id: int, ci_id: int) -> None: ...
    def destroy_gpu_instance(self, uuid: str, gi_id: int) -> None: ...
    def mig_devices(self, uuid: str) -> list[MigDevice]: ...
    def can_reconfigure_mig(self) -> bool: ...
    def job_device(self, uuid: str) -> JobDevice:
        """What a job's process calls on this GPU beyond torch (carried in its binding)."""
        ...

    def mps_control(self, pipe_root: str, default: str) -> str:
        """The ``nvidia-cuda-mps-control`` this node's MPS daemons run (``default`` on real GPUs)."""
        ...

    def job_env(self, uuid: str) -> dict[str, str]:
        """Environment a job needs to reach this GPU's driver (beyond ``CUDA_VISIBLE_DEVICES``)."""
        ...

    def expect_mig_mode(self, uuid: str, enabled: bool) -> None:
        """The next cell needs MIG mode ``enabled``. Real GPUs: nothing changes (raycolloc never
        changes MIG mode; the mode refuses what it cannot run). Simulated GPUs with
        ``sim_mig_mode=auto``: the simulated administrator switches it, as one would by hand."""
        ...
