"""CPU cores for trainers: each job gets cores of its own, near its GPU, for the cell's life.

A small model's step rate is bound by one CPU thread launching kernels. Left to the scheduler,
that thread moves between cores. On the H100 machine raw PyTorch processes (resnet26 solo) ran at
15.6k and 16.1k img/s unpinned and 17.1k-18.6k pinned to a single core (six runs, one host);
for raycolloc's own degree-1 cells the difference was inside that machine's noise (docs/
measurements.md). Pinning also keeps cells side by side on one node off each other's cores. The
steward hands out cores per node, preferring the GPU's NVML CPU affinity (its NUMA-local cores). A
cell that cannot have a free core per job is not pinned at all (``jobs.cpus`` is empty) and the
scheduler shares. The node's reserved cores (``raycolloc.node.reserve``: Ray, the driver, the
steward) are never handed to a job.
"""

from __future__ import annotations

import logging
import math
import os

__all__ = ["CpuPool"]

log = logging.getLogger(__name__)


class CpuPool:
    """The cores of one node and which cell holds which.

    Args:
        cpus: the cores jobs may use (the steward's own affinity: what Ray may schedule on).
    """

    def __init__(self, cpus: set[int] | None = None) -> None:
        self.cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
        self.reserved: frozenset[int] = frozenset()  # the node's own processes' cores: never a job's
        self._held: dict[str, list[tuple[int, ...]]] = {}

    def reserve(self, cores: tuple[int, ...]) -> None:
        """Keep ``cores`` from jobs from now on (cores already held stay with their cells)."""
        self.reserved = frozenset(cores)

    def shared(self) -> tuple[int, ...]:
        """The cores jobs may use: where a job that is not pinned runs."""
        return tuple(c for c in self.cpus if c not in self.reserved)

    def allocate(
        self, cell_id: str, counts: list[float], near: list[int] | None = None
    ) -> list[tuple[int, ...]] | None:
        """Cores for each job of a cell (``counts[i]`` = the job's ``trainer.num_cpus``, at least 1).

        Free cores near the GPU come first (core 0 last among them: interrupts and daemons like
        it), then the node's other free cores. Returns None, and holds nothing, when the node has
        too few free cores: jobs pinned two to a core would run at half speed beside one alone,
        while the scheduler shares an overbooked node fairly.
        """
        self.release(cell_id)
        used = {c for jobs in self._held.values() for cores in jobs for c in cores} | self.reserved
        shared = set(self.shared())
        local = set(near or shared) & shared or shared
        free = [c for c in sorted(shared, key=lambda c: (c not in local, c == 0, c)) if c not in used]
        wants = [max(1, math.ceil(count)) for count in counts]
        if sum(wants) > len(free):
            # DEBUG: the driver says it, once per sweep (driver/cell_run.py), not the node once per cell.
            log.debug(
                "cell=%s: its %d jobs need %d cores, %d of this node's %d are free: not pinned",
                cell_id,
                len(counts),
                sum(wants),
                len(free),
                len(shared),
            )
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
