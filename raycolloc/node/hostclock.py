"""What the host tells of its own noise, read cheaply by the sampler: the clock of a job's cores, the
load average, and which processes on a GPU are not the cell's.

Each read is a few small files (``/sys/.../cpufreq/scaling_cur_freq``, ``/proc/loadavg``) or,
where cpufreq is absent (many VMs), one read of ``/proc/cpuinfo``; every one gives None when the
host does not show it, never an error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable

import psutil

__all__ = ["MPS_SERVER", "core_mhz", "foreign_count", "load_avg_1m", "run_delay_s"]

MPS_SERVER = "nvidia-cuda-mps-server"  # serves the cell's MPS clients: the cell's own, not foreign
_SYSFS = "/sys/devices/system/cpu/cpu{}/cpufreq/scaling_cur_freq"
_CPUINFO_MHZ = re.compile(r"^processor\s*:\s*(\d+)$|^cpu MHz\s*:\s*([\d.]+)$", re.MULTILINE)


def _sysfs_mhz(core: int) -> float | None:
    try:
        with open(_SYSFS.format(core)) as fh:
            return int(fh.read()) / 1000.0  # kHz
    except (OSError, ValueError):
        return None


def _cpuinfo_mhz() -> dict[int, float]:
    try:
        with open("/proc/cpuinfo") as fh:
            text = fh.read()
    except OSError:
        return {}
    out: dict[int, float] = {}
    core = None
    for m in _CPUINFO_MHZ.finditer(text):
        if m.group(1) is not None:
            core = int(m.group(1))
        elif core is not None:
            out[core] = float(m.group(2))
    return out


def core_mhz(cores: Iterable[int]) -> float | None:
    """The mean current clock (MHz) of ``cores``: cpufreq's per core, else /proc/cpuinfo's; None
    where the host shows neither (or ``cores`` is empty)."""
    cores = list(cores)
    if not cores:
        return None
    values = [v for c in cores if (v := _sysfs_mhz(c)) is not None]
    if len(values) < len(cores):
        table = _cpuinfo_mhz()
        values = [table[c] for c in cores if c in table]
    return sum(values) / len(values) if values else None


def run_delay_s(pid: int) -> float | None:
    """How long the main thread of ``pid`` (a job's training thread) has waited, runnable, for a core
    (``/proc/PID/schedstat``'s second field): the direct measure of CPU contention. None where the
    kernel keeps no schedstats or the process is gone."""
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            return int(fh.read().split()[1]) / 1e9  # ns
    except (OSError, ValueError, IndexError):
        return None


def load_avg_1m() -> float | None:
    """The host's 1-minute load average (runnable and uninterruptible tasks), None where unknown."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def foreign_count(on_gpu: Collection[int], ours: Collection[int]) -> int | None:
    """How many of the GPU's compute processes (``on_gpu``, NVML's pids) are neither the cell's
    (``ours``: its jobs and their children) nor an MPS server.

    None when NVML shows none of the cell's processes although it has some: it hides them (MIG, MPS
    clients, or a container whose PID namespace is not NVML's), so its other pids prove nothing.
    """
    if ours and not set(on_gpu) & set(ours):
        return None
    others = [pid for pid in on_gpu if pid not in ours]
    return sum(1 for pid in others if not _is_mps_server(pid))


def _is_mps_server(pid: int) -> bool:
    try:
        return psutil.Process(pid).name() == MPS_SERVER
    except psutil.Error:
        return False
