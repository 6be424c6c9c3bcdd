"""The environment a cell ran in: GPU, driver and library versions (stored with every cell)."""

from __future__ import annotations

import functools
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import raycolloc

__all__ = ["environment", "raycolloc_commit"]

_PACKAGES = ("torch", "timm", "ray", "nvidia-ml-py", "pandas", "pyarrow", "hydra-core")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def raycolloc_commit() -> str:
    """The git commit of the raycolloc source that runs (``+dirty`` with uncommitted changes), or
    ``unknown`` where the source is not a git checkout (an installed wheel) or git is missing."""
    root = Path(raycolloc.__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}+dirty" if dirty else head or "unknown"


def environment(gpu: Any = None) -> dict[str, Any]:
    """Versions of Python and the key packages (raycolloc's own with its git commit), the host, and
    the GPU (a GpuInfo) if known."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
    }
    env.update({name: _version(name) for name in _PACKAGES})
    env["raycolloc"] = raycolloc.__version__  # also where it runs from a checkout, not installed
    env["raycolloc_commit"] = raycolloc_commit()
    if gpu is not None:
        env.update(
            gpu_name=gpu.name,
            gpu_uuid=gpu.uuid,
            gpu_memory_mib=gpu.memory_mib,
            gpu_sm_count=gpu.sm_count,
            driver=gpu.driver,
            backend=gpu.backend,
            mig_enabled=gpu.mig_enabled,
        )
    return env
