"""The advisor's memory rule: what a cell's jobs need of the GPU's memory (on the safe side), and the
largest uniform degree that fits. Every job's measured memory (context included) plus a margin, the
GPU's base reservation, the MPS server, and headroom must fit the GPU (MIG: each GPU instance)."""

from __future__ import annotations

from raycolloc.advise.profile import Profile
from raycolloc.advise.shapes import Candidate, Gpu
from raycolloc.mode_kinds import mode_of

__all__ = ["MEM_HEADROOM_MIB", "MEM_MARGIN", "MPS_MAX_CLIENTS", "MPS_SERVER_MIB", "max_degree", "memory_need"]

MEM_MARGIN = 0.08  # per job, over its measured peak: cuDNN may pick other algorithms (workspaces) when collocated
MEM_HEADROOM_MIB = 256.0  # per GPU (or GPU instance): allocator fragmentation and NVML's rounding
# The MPS control daemon's server: 66 MiB more GPU memory used at degree 1 under MPS than naive (H200,
# resnet26_cifar10, two sweeps); counted twice over to stay on the safe side.
MPS_SERVER_MIB = 128.0
MPS_MAX_CLIENTS: int = mode_of("mps").max_clients or 0  # the registry's (raycolloc.mode_kinds): NVIDIA's documented 48


def memory_need(c: Candidate, gpu: Gpu) -> tuple[bool, str | None, float, float, float]:
    """``(fits, why not, need on the safe side, expected GPU memory in use, capacity)`` in MiB. The need
    and the capacity are the GPU's, or under MIG the fullest GPU instance's; the expected use is the
    whole GPU's (what ``cells.mem_used_max_mib`` measures)."""
    safe = [p.job_mem_mib * (1 + MEM_MARGIN) for p in c.jobs]
    kind = mode_of(c.mode)
    server = MPS_SERVER_MIB if kind.needs_daemon else 0.0
    expected = gpu.base_mib + sum(p.job_mem_mib for p in c.jobs) + server / 2
    if kind.partitioned:
        worst: tuple[float, float, str] | None = None
        for group in sorted({s.group for s in c.slots}):
            idx = [i for i, s in enumerate(c.slots) if s.group == group]
            cap = float(c.slots[idx[0]].memory_mib or gpu.memory_mib)
            need = sum(safe[i] for i in idx) + MEM_HEADROOM_MIB
            if worst is None or need / cap > worst[0] / worst[1]:
                worst = (need, cap, c.slots[idx[0]].name)
        assert worst is not None
        need, cap, name = worst
        why = (
            None
            if need <= cap
            else (f"MIG instance {name} holds {cap / 1024:.1f} GiB; its job(s) need {need / 1024:.1f} GiB")
        )
        return need <= cap, why, need, expected, cap
    need = gpu.base_mib + sum(safe) + server + MEM_HEADROOM_MIB
    why = (
        None
        if need <= gpu.memory_mib
        else (
            f"{c.degree} job(s) need {need / 1024:.1f} GiB (with margins); "
            f"{gpu.name} has {gpu.memory_mib / 1024:.1f} GiB"
        )
    )
    if kind.max_clients is not None and c.degree > kind.max_clients:
        why = f"{c.mode} serves at most {kind.max_clients} clients"
    return why is None, why, need, expected, gpu.memory_mib


def max_degree(profile: Profile, gpu: Gpu, mode: str) -> int:
    """The largest uniform degree of ``profile`` that fits (naive, mps): its memory, MPS's clients,
    and a core per job (raycolloc pins each job's training process to a core of its own); 0 if none."""
    kind = mode_of(mode)
    free = gpu.memory_mib - gpu.base_mib - MEM_HEADROOM_MIB - (MPS_SERVER_MIB if kind.needs_daemon else 0.0)
    fit = int(free // (profile.job_mem_mib * (1 + MEM_MARGIN)))
    limits = [fit, *([kind.max_clients] if kind.max_clients else []), *([gpu.cores] if gpu.cores else [])]
    return max(0, min(limits))
