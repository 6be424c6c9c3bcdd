"""What a node's GPU backend tells the other processes: its GPUs, what it allows, and a job's device.

The backend (real NVML or the simulated GPUs of local mode, :mod:`raycolloc.node.gpu`) is chosen once
per node, by its steward. Everything above it learns what differs from the types here, never from
the backend's name:

* :class:`GpuInfo`: one GPU as the backend sees it (the steward's answers, the cell's record);
* :class:`BackendTraits`: what a backend allows and how it behaves (host memory per job, jobs per
  core, whether Ray is told its GPUs, whether MIG layouts are raycolloc's to change, ...); the
  steward reports them in its :class:`~raycolloc.spec.NodeInfo`, and the driver looks them up by the
  configured backend before any node answers (:func:`raycolloc.node.gpu.kinds.backend_traits`);
* :class:`JobDevice`: what a job's process calls on its device beyond torch, carried in the job's
  :class:`~raycolloc.spec.Binding`: a real GPU's CUDA driver needs no help (:class:`CudaDevice`); a
  simulated one accounts the job's memory and PCIe traffic in the node's device state.

A contract module: it imports nothing of raycolloc, so the job package, the driver and the node
all read it without reaching into one another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["BackendTraits", "CudaDevice", "GpuInfo", "JobDevice"]


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as the backend sees it."""

    index: int
    uuid: str
    name: str
    memory_mib: int
    sm_count: int | None
    mig_supported: bool
    mig_enabled: bool
    pci_bus_id: str
    backend: str
    driver: str


@dataclass(frozen=True)
class BackendTraits:
    """What a GPU backend allows and how it behaves; one per backend (``raycolloc.node.gpu.kinds``).

    Attributes:
        name: the backend's name (``cluster.backend``, the cells table's ``backend`` column).
        host_mib_per_job: host memory one job takes (its trainer actor and its training process).
        jobs_per_core: training processes one core of the node holds.
        trains_on_cpu: jobs' models run on the node's CPU cores (tiny stand-ins: large workloads are
            slow, there is no CUDA context to measure, and the cores are this machine's).
        declared_gpus: a local Ray instance is told how many GPUs there are (``cluster.num_gpus``);
            otherwise Ray finds them.
        reconfigure_mig_default: what ``mig.allow_reconfigure`` unset means: may raycolloc create the
            MIG layout a cell needs.
        simulated_admin: MIG mode is switched for each cell by a simulated administrator when
            ``cluster.sim_mig_mode=auto``.
        telemetry_prefix: put before every telemetry source name it produces (``sim-nvml``).
        dcgm: DCGM may sample its GPUs (where DCGM is installed).
        steward_keys: the ``cluster`` fields, besides the backend, that make a different set of
            GPUs on a node: each set has its own steward.
        state_dir_key: the ``cluster`` field naming the directory where the backend keeps its GPUs'
            state (the steward creates it; the driver checks it before Ray starts where the node is
            this machine), or None.
    """

    name: str
    host_mib_per_job: float
    jobs_per_core: int
    trains_on_cpu: bool
    declared_gpus: bool
    reconfigure_mig_default: bool
    simulated_admin: bool
    telemetry_prefix: str
    dcgm: bool
    steward_keys: tuple[str, ...] = ()
    state_dir_key: str | None = None


class JobDevice(Protocol):
    """What a job's process calls on its device beyond torch (from its binding; picklable).

    ``cuda``: the job's tensors live on CUDA device 0; False where the CPU stands in for the GPU.
    """

    @property
    def cuda(self) -> bool: ...

    def attach(self, pid: int, need_bytes: Callable[[], int], threads: int) -> float:
        """The device's driver takes the process on (``need_bytes()`` of memory for it, MPS joined if
        a daemon answers); returns the seconds that took.

        Raises:
            MemoryError: the device has less free memory than the job needs.
        """
        ...

    def report_h2d(self, pid: int, bytes_per_s: float) -> None:
        """The process's host-to-device copy rate (counted by a device that does not see it itself)."""
        ...


@dataclass(frozen=True)
class CudaDevice:
    """A real GPU: CUDA's own driver binds the process (through its environment) and counts its use."""

    @property
    def cuda(self) -> bool:
        return True

    def attach(self, pid: int, need_bytes: Callable[[], int], threads: int) -> float:
        return 0.0  # CUDA creates the context itself, timed where the process initialises it

    def report_h2d(self, pid: int, bytes_per_s: float) -> None:
        return None  # NVML counts PCIe traffic on a real GPU
