"""The trainer actors of one lane: created once for the lane's GPU, lent to each cell in turn.

Creating a trainer actor means Ray starting a worker process for it: about 2 s of every cell's
set-up on the H200 with the training processes forked (setup_s 2.5-2.8 s of which the jobs' own
0.6 s; docs/measurements.md, sixth session). A lane therefore keeps its actors: each holds
``1/size`` of the lane's GPU lease (``size`` = the largest cell of the sweep, or of the process for a
lane kept between sweeps: :mod:`raycolloc.driver.kept_lanes`), so any cell of the
lane can borrow as many as it has jobs, and they go back to the pool when it ends. A borrowed
actor carries nothing from the previous cell: it never imports torch or touches CUDA (its training
process does), never changes its own environment (the binding goes to the training process), and
closes the previous training process's connection before it starts the next one. An actor that
failed (died, hung, or was interrupted mid-epoch) is killed, never lent again. The lane's first actor
is created with the lane, before any cell: it tells which node and GPU the lease holds (:meth:`locate`).

``trainer.reuse_actors=false`` gives each cell fresh actors of ``1/degree`` of the GPU, named after
the cell's jobs, killed when it ends (what every cell did before lanes kept them); so does a cell
of script jobs (``raycolloc.job.script``), whose actors are of another kind. Such a cell first ends
the idle actors of the pool: they hold shares of the lease's one GPU that its own actors need.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import ray

from raycolloc.driver.lease import GpuLease
from raycolloc.job.script import ScriptTrainer
from raycolloc.job.trainer import Trainer
from raycolloc.node.steward import NAMESPACE
from raycolloc.spec import CellSpec

__all__ = ["RemoteScriptTrainer", "RemoteTrainer", "TrainerPool"]

log = logging.getLogger(__name__)
# One call at a time: no caller needs a second concurrent call (progress goes to the board; a hung or
# interrupted trainer is killed, not asked). The actor only relays; the job trains in a process of its own
# (raycolloc.job.process says why).
RemoteTrainer = ray.remote(Trainer)
RemoteScriptTrainer = ray.remote(ScriptTrainer)  # a script job: the user's process (raycolloc.job.script)


class TrainerPool:
    """The trainer actors of one lane (see the module docstring).

    Args:
        lease: the lane's GPU lease; every actor is placed inside it.
        index: the lane's number (in the actors' names).
        size: the most jobs any cell of the lane may have.
        num_cpus: CPUs each actor holds (``trainer.num_cpus``).
    """

    def __init__(self, lease: GpuLease, index: int, size: int, num_cpus: float) -> None:
        self.lease, self.index, self.size, self.num_cpus = lease, index, max(1, size), num_cpus
        self._idle: list[Any] = []
        self._created = 0
        # A queue's lives on one lane borrow and give back from their own threads at once.
        self._lock = threading.RLock()

    def locate(self, timeout: float = 120.0) -> tuple[str, str]:
        """The node and the GPU (Ray's id) of the lease, as the pool's first actor sees them; the
        actor stays, idle, for the lane's first cell."""
        with self._lock:
            if not self._idle:
                self._idle.append(self._new_pooled())
            first = self._idle[0]
        return ray.get(first.placement.remote(), timeout=timeout)

    def fill(self, steward: Any, timeout: float = 120.0) -> int:
        """Create every actor the pool may need now, all at once, in the node steward's spawning
        window (:meth:`~raycolloc.node.steward.Steward.spawning`: new workers start on every core,
        not one after another on the node's reserved one); returns how many it created. A lane does
        it as it opens, so no cell's set-up waits for its pool to grow."""
        with self._lock:
            missing = self.size - len(self._idle)
        if missing <= 0:
            return 0
        try:
            ray.get(steward.spawning.remote(True), timeout=60)
            try:
                with self._lock:
                    new = [self._new_pooled() for _ in range(missing)]
                    self._idle.extend(new)  # lent as they are: a cell's set-up waits for one still starting
                ray.get([actor.placement.remote() for actor in new], timeout=timeout)  # each worker is up
            finally:
                ray.get(steward.spawning.remote(False), timeout=60)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as exc:
            log.warning("lane=%d trainers not all up at the lane's start: %s", self.index, str(exc).splitlines()[0])
        return missing

    def _new_pooled(self) -> Any:
        """A new actor of the pool: ``1/size`` of the lane's GPU, numbered within the lane."""
        self._created += 1
        return self._create(
            RemoteTrainer, f"raycolloc:lane-{os.getpid()}-{self.index}/trainer-{self._created}", 1.0 / self.size
        )

    @staticmethod
    def pooled(cell: CellSpec) -> bool:
        """Whether the cell borrows the pool's actors (else it gets actors of its own)."""
        return cell.config.trainer.reuse_actors and not any(job.workload.as_written for job in cell.jobs)

    def borrow(self, cell: CellSpec) -> list[Any]:
        """Actors for the cell's jobs, in job order (idle ones first, new ones for the rest); a cell
        with script jobs, or ``trainer.reuse_actors=false``, gets actors of its own."""
        if not self.pooled(cell):
            self.close()
            return [
                self._create(
                    RemoteScriptTrainer if job.workload.as_written else RemoteTrainer,
                    f"raycolloc:{cell.cell_id}/{job.name}",
                    # The pool's share, not 1/degree: a queued script job (a cell of one) joins jobs that
                    # hold theirs; a whole GPU asked beside them is never placed (it waited for ever).
                    1.0 / max(self.size, cell.degree),
                )
                for job in cell.jobs
            ]
        if cell.degree > self.size:
            raise ValueError(f"cell {cell.cell_id} has {cell.degree} jobs; the lane's pool holds {self.size}")
        with self._lock:
            lent = [self._idle.pop() for _ in range(min(len(self._idle), cell.degree))]
            while len(lent) < cell.degree:
                lent.append(self._new_pooled())
        return lent

    def _create(self, actor_class: Any, name: str, gpu_share: float) -> Any:
        # No runtime_env: the binding's environment (GPU or MIG UUID, MPS pipe) is the training
        # process's, set by its actor; an actor without one may take a worker Ray already started.
        return actor_class.options(
            name=name,
            namespace=NAMESPACE,
            num_gpus=gpu_share,
            num_cpus=self.num_cpus,
            scheduling_strategy=self.lease.strategy(),
        ).remote()

    def give_back(self, cell: CellSpec, healthy: list[Any], failed: list[Any]) -> None:
        """The cell is over: healthy actors are lent again (unless they were the cell's own), failed
        ones are killed."""
        keep = self.pooled(cell)
        for actor in failed + ([] if keep else healthy):
            ray.kill(actor, no_restart=True)
        if keep:
            with self._lock:
                self._idle.extend(healthy)

    def close(self) -> None:
        """The lane ends: every idle actor goes."""
        with self._lock:
            idle, self._idle = self._idle, []
        for actor in idle:
            ray.kill(actor, no_restart=True)
