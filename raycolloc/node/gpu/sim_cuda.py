"""What a job's CUDA driver does on a simulated GPU (local mode), called from its training process.

At initialisation the real driver joins the MPS control daemon named by
``CUDA_MPS_PIPE_DIRECTORY`` if one answers, and creates a context on the device that
``CUDA_VISIBLE_DEVICES`` names (a GPU or a MIG device). Here the same environment selects the
simulated device, whose state file the steward's binding names (``RAYCOLLOC_SIM_GPU_STATE``), and the
job's memory is accounted there, so a job that does not fit fails as an out-of-memory would.

A job reaches it through :class:`SimJobDevice`, the :class:`~raycolloc.devices.JobDevice` that a
simulated node's steward puts in each binding: the job package never names this module.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from raycolloc.node.gpu.sim_mps import sim_mps_connect
from raycolloc.node.gpu.simdevice import STATE_ENV, SimDevices

__all__ = ["SimJobDevice", "init", "report_h2d"]


def _devices() -> SimDevices:
    path = os.environ.get(STATE_ENV)
    if not path:
        raise RuntimeError(f"{STATE_ENV} is not set: this process was not bound to a simulated GPU by a steward")
    return SimDevices(path)  # its steward created it


def init(pid: int, mem_bytes: int, threads: int) -> bool:
    """Initialise the simulated CUDA context of this job; returns True if it became an MPS client.

    Raises:
        SimOutOfMemory: the device has less free memory than the job needs.
    """
    client = sim_mps_connect(pid)
    _devices().attach(os.environ.get("CUDA_VISIBLE_DEVICES", ""), pid, mem_bytes, threads)
    return client


def report_h2d(pid: int, bytes_per_s: float) -> None:
    """The job's host-to-device copy rate, for the simulated PCIe counters."""
    _devices().report_h2d(pid, bytes_per_s)


@dataclass(frozen=True)
class SimJobDevice:
    """A simulated GPU as its job sees it: the CPU trains, this driver accounts memory and PCIe."""

    @property
    def cuda(self) -> bool:
        return False  # tiny models train on the CPU cores in the simulated GPU's place

    def attach(self, pid: int, need_bytes: Callable[[], int], threads: int) -> float:
        """Join the MPS daemon if one answers and allocate ``need_bytes()`` (refused, as an
        out-of-memory, when the device is full); returns the seconds it took."""
        need = need_bytes()  # the job's size is its business: not timed as the driver's
        t = time.perf_counter()
        init(pid, need, threads)
        return time.perf_counter() - t

    def report_h2d(self, pid: int, bytes_per_s: float) -> None:
        report_h2d(pid, bytes_per_s)
