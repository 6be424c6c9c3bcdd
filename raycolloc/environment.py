"""The environment a cell ran in: GPU, driver and library versions (stored with every cell)."""

from __future__ import annotations

import platform
import socket
from importlib import metadata
from typing import Any

__all__ = ["environment"]

_PACKAGES = ("torch", "timm", "ray", "nvidia-ml-py", "pandas", "pyarrow", "hydra-core", "raycolloc")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment(gpu: Any = None) -> dict[str, Any]:
    """Versions of Python and the key packages, the host, and the GPU (a GpuInfo) if known."""
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                           "hostname": socket.gethostname()}
    env.update({name: _version(name) for name in _PACKAGES})
    if gpu is not None:
        env.update(gpu_name=gpu.name, gpu_uuid=gpu.uuid, gpu_memory_mib=gpu.memory_mib, gpu_sm_count=gpu.sm_count,
                   driver=gpu.driver, backend=gpu.backend, mig_enabled=gpu.mig_enabled)
    return env
