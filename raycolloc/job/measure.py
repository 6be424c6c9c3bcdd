"""What a training process measures of itself: its training thread's CPU time and scheduling, and
the device memory NVML attributes to it. (No thread may start here: it is imported before the
process pins itself, as :mod:`raycolloc.job.process` is.)"""

from __future__ import annotations

import resource
import time

from raycolloc.spec import Binding

__all__ = ["as_int", "own_nvml_memory", "thread_usage"]


def as_int(value: float | None) -> int | None:
    """A counter as an int (None stays None)."""
    return None if value is None else int(value)


def thread_usage() -> dict[str, float]:
    """CPU time (user + system), system time, minor page faults and context switches (involuntary:
    pre-empted; voluntary: it waited, e.g. for the GIL or a lock) of the calling thread so far
    (``getrusage(RUSAGE_THREAD)``, Linux; CPU time alone elsewhere)."""
    if not hasattr(resource, "RUSAGE_THREAD"):
        return {"thread_cpu_s": time.thread_time()}
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return {
        "thread_cpu_s": r.ru_utime + r.ru_stime,
        "thread_sys_s": r.ru_stime,
        "minor_faults": r.ru_minflt,
        "involuntary_switches": r.ru_nivcsw,
        "voluntary_switches": r.ru_nvcsw,
    }


def own_nvml_memory(binding: Binding, pid: int) -> float | None:
    """Memory NVML attributes to this process (None where NVML hides it, e.g. MPS clients or MIG)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByUUID(binding.mig_uuid or binding.gpu_uuid)
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                if p.pid == pid and p.usedGpuMemory is not None:
                    return p.usedGpuMemory / (1 << 20)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - best effort, absent on many setups
        return None
    return None
