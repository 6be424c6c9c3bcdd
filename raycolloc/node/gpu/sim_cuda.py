"""What a job's CUDA driver does on a simulated GPU (local mode), called from its training process.

At initialisation the real driver joins the MPS control daemon named by
``CUDA_MPS_PIPE_DIRECTORY`` if one answers, and creates a context on the device that
``CUDA_VISIBLE_DEVICES`` names (a GPU or a MIG device). Here the same environment selects the
simulated device, whose state file the steward's binding names (``RAYCOLLOC_SIM_GPU_STATE``), and the
job's memory is accounted there, so a job that does not fit fails as an out-of-memory would.
"""

from __future__ import annotations

import os
from raycolloc.node.gpu.sim import STATE_ENV
from raycolloc.node.gpu.sim_mps import sim_mps_connect
from raycolloc.node.gpu.simdevice import SimDevices

__all__ = ["init", "report_h2d"]


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
