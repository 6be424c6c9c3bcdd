"""CPU cores for trainers: each job gets cores of its own, near its GPU, for the cell's life.

A small model's step rate is bound by one CPU thread launching kernels. Left to the scheduler,
that thread moves between cores. On the H100 machine raw PyTorch processes (resnet26 solo) ran at
15.6k and 16.1k img/s unpinned and 17.1k-18.6k pinned to a single core (six runs, one host);
for raycolloc's own degree-1 cells the difference was inside that machine's noise (docs/
measurements.md). Pinning also keeps cells side by side on one node off each other's cores. The
steward hands out cores per node, preferring the GPU's NVML CPU affinity (its NUMA-local cores). A
cell that cannot have a free core per job is not pinned at all (``jobs.cpus`` is empty) and the
scheduler shares.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

__all__ = ["CpuPool", "format_cpus", "move_threads_off"]

log = logging.getLogger(__name__)


def format_cpus(cpus: tuple[int, ...] | list[int] | None) -> str | None:
    """``(3, 4, 5, 9)`` -> ``"3-5,9"``; None stays None."""
    if not cpus:
        return None
    runs: list[str] = []
    ordered = sorted(set(cpus))
    start = prev = ordered[0]
    for c in [*ordered[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(runs)


class CpuPool:
    """The cores of one node and which cell holds which.

    Args:
        cpus: the cores jobs may use (the steward's own affinity: what Ray may schedule on).
    """

    def __init__(self, cpus: set[int] | None = None) -> None:
        self.cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
        self._held: dict[str, list[tuple[int, ...]]] = {}

    def allocate(self, cell_id: str, counts: list[float], near: list[int] | None = None) -> list[tuple[int, ...]] | None:
        """Cores for each job of a cell (``counts[i]`` = the job's ``trainer.num_cpus``, at least 1).

        Free cores near the GPU come first (core 0 last among them: interrupts and daemons like
        it), then the node's other free cores. Returns None, and holds nothing, when the node has
        too few free cores: jobs pinned two to a core would run at half speed beside one alone,
        while the scheduler shares an overbooked node fairly.
        """
        self.release(cell_id)
        used = {c for jobs in self._held.values() for cores in jobs for c in cores}
        local = set(near or self.cpus) & set(self.cpus) or set(self.cpus)
        free = [c for c in sorted(self.cpus, key=lambda c: (c not in local, c == 0, c)) if c not in used]
        wants = [max(1, math.ceil(count)) for count in counts]
        if sum(wants) > len(free):
            log.warning("cell=%s: its %d jobs need %d cores, %d of this node's %d are free: not pinned",
                        cell_id, len(counts), sum(wants), len(free), len(self.cpus))
            return None
        out = []
        for want in wants:
            out.append(tuple(sorted(free[:want])))
            free = free[want:]
        self._held[cell_id] = out
        return out

    def release(self, cell_id: str) -> None:
        self._held.pop(cell_id, None)

    def held(self) -> dict[str, list[tuple[int, ...]]]:
        return {k: list(v) for k, v in self._held.items()}


def move_threads_off(cpus: tuple[int, ...]) -> set[int]:
    """Move every thread of this process (a trainer actor: Ray's gRPC and event loops) off ``cpus``,
    the cores of the job's training process, onto the node's other cores; returns those cores.

    The training process is pinned to ``cpus`` as a whole before it starts a thread (``raycolloc.
    jobproc``), so each of its threads, CUDA's included, stays with the training thread.
    """
    others = (set(os.sched_getaffinity(0)) | _node_cpus()) - set(cpus)
    if not others:
        return set(os.sched_getaffinity(0))
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), others)
        except OSError as exc:  # a thread that just ended
            log.debug("thread %s: %s", task.name, exc)
    return others


def _node_cpus() -> set[int]:
    return set(range(os.cpu_count() or 1))
