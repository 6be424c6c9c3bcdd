"""The names the GPUs of a cluster configuration report on this machine, before Ray is asked.

A real GPU's name is NVML's (``NVIDIA H200``); a simulated GPU's is the one its backend declares
(``Simulated H100-80GB``, ``cluster.gpu_model``). What labels a queue's runs comes from here, never
from a default of the config that the GPUs at hand need not have.
"""

from __future__ import annotations

from raycolloc.config import ClusterConfig
from raycolloc.node.gpu.kinds import backend_traits
from raycolloc.node.mig.placement import SIM_PREFIX
from raycolloc.node.mig.profiles import get_gpu_model

__all__ = ["local_gpu_names", "local_mig_enabled", "nvml_gpu_names", "nvml_mig_enabled"]


def local_gpu_names(cluster: ClusterConfig) -> list[str]:
    """The name of each GPU ``cluster`` (its backend resolved: ``nvml`` or ``sim``) has on this machine;
    [] where none is seen here (no NVML GPU).

    Raises:
        raycolloc.node.mig.profiles.UnknownGpuModel: a simulated ``cluster.gpu_model`` with no table.
    """
    if backend_traits(cluster.backend).declared_gpus:
        return [f"{SIM_PREFIX}{get_gpu_model(cluster.gpu_model).name}"] * cluster.num_gpus
    return nvml_gpu_names()


def nvml_gpu_names() -> list[str]:
    """The name NVML gives each GPU of this machine (``NVIDIA H200``), by index; [] when NVML or the
    driver is missing."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        return [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    finally:
        pynvml.nvmlShutdown()


def local_mig_enabled(cluster: ClusterConfig) -> bool | None:
    """Whether any GPU of this machine has MIG mode on, for a cluster of this machine's real GPUs
    (``nvml``, no address); None where that is not known here (simulated GPUs, whose administrator
    may switch it per cell; a cluster at an address; no NVML GPU)."""
    if backend_traits(cluster.backend).declared_gpus or cluster.address:
        return None
    modes = nvml_mig_enabled()
    return any(modes) if modes else None


def nvml_mig_enabled() -> list[bool]:
    """Whether NVML says each GPU of this machine runs in MIG mode now (a GPU without MIG: False);
    [] when NVML or the driver is missing. It only reads the mode; raycolloc never changes it."""
    import pynvml

    from raycolloc.node.gpu.nvml import mig_mode  # the steward's backend reads a GPU's mode the same way

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        return [mig_mode(pynvml.nvmlDeviceGetHandleByIndex(i))[1] for i in range(int(pynvml.nvmlDeviceGetCount()))]
    finally:
        pynvml.nvmlShutdown()
