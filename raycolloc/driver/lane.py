"""A lane: one whole GPU held for a while, and what every job's life on it needs; opened and closed here.

A sweep opens one lane per GPU it may use (or takes over the one a sweep before kept:
:mod:`raycolloc.driver.kept_lanes`) and runs its cells there one after the other
(:mod:`raycolloc.driver.engine`); a queue opens one per GPU of the cluster for its whole run and lives its
jobs there side by side (:mod:`raycolloc.queue.raylanes`). Either way the lane is: the GPU's lease (a
placement group, :func:`~raycolloc.driver.lease.acquire_gpu`), the trainer actors lent to the lives on it
(:class:`~raycolloc.driver.trainers.TrainerPool`; its first actor tells which node and GPU the lease
holds), the node's steward, the GPU as the steward resolves it, and the node's warm parent of training
processes. Each life on the lane (:func:`raycolloc.driver.cell_run.run_cell`) joins the lane's residents
as it binds to the GPU and leaves them once it released it; the steward is told the residents it joins
(any other resident there is a dead life's: stale). Lives bind one at a time, so a life's residents are
all those bound before it.

Closing gives everything back, each step whatever the one before did: idle trainers killed, what the
steward kept between lives (the MPS daemon, residents of a dead life) stopped, the lease removed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray

from raycolloc.config import ClusterConfig
from raycolloc.driver.lease import GpuLease, LeaseError, acquire_gpu
from raycolloc.driver.progress import Board
from raycolloc.driver.side_by_side import MeasureWindows
from raycolloc.driver.trainers import TrainerPool
from raycolloc.node.gpu.backend import GpuInfo
from raycolloc.node.steward_handles import get_steward

__all__ = ["Lane", "LaneError", "LaneShape", "close_lane", "open_lane"]

log = logging.getLogger(__name__)


class LaneError(LeaseError):
    """The leased GPU's node cannot serve (its steward or GPU unreachable); the lease was given back: no
    usable GPU was had, as with any :class:`~raycolloc.driver.lease.LeaseError`."""


@dataclass
class Lane:
    """One leased GPU and what a job's life needs to use it (see the module docstring)."""

    lease: GpuLease
    node_id: str
    steward: Any
    gpu: GpuInfo
    board: Board
    cancel: threading.Event
    forkserver: str | None  # the node's warm parent of training processes, if it serves
    trainers: TrainerPool
    windows: MeasureWindows  # the measured windows, per node (driver/side_by_side.py)
    residents: set[str] = field(default_factory=set)  # the cells living on the GPU now
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # over residents
    binding: threading.Lock = field(default_factory=threading.Lock, repr=False)  # one life binds at a time

    def report(self, cell_id: str, state: str) -> None:
        """Set the cell's state on the progress board (fire and forget)."""
        self.board.cell(cell_id, state)

    def join(self, cell_id: str) -> frozenset[str]:
        """A life binds to the GPU (under :attr:`binding`): the residents it joins."""
        with self.lock:
            beside = frozenset(self.residents - {cell_id})
            self.residents.add(cell_id)
        return beside

    def leave(self, cell_id: str) -> None:
        """A life ended and released the GPU."""
        with self.lock:
            self.residents.discard(cell_id)


@dataclass(frozen=True)
class LaneShape:
    """What a lane is opened with.

    Attributes:
        name: the lease's name (unique in the cluster while it lives).
        index: the lane's number (its trainer actors' names).
        cpus: CPUs the lease holds beside its GPU.
        pool_size: the most jobs living on the GPU at once (each trainer holds ``1/pool_size`` of it).
        trainer_cpus: CPUs each trainer actor holds.
        forks: the lives on it fork their training processes (the lane waits for the node's warm parent).
        fill: the pool's actors are all created as the lane opens (:meth:`TrainerPool.fill`), not as
            lives borrow them: a sweep's lane, whose cells borrow from the pool.
    """

    name: str
    index: int
    cpus: float
    pool_size: int
    trainer_cpus: float
    forks: bool
    fill: bool = False


def open_lane(
    shape: LaneShape,
    cluster: ClusterConfig,
    pipe_root: str,
    board: Board,
    cancel: threading.Event,
    windows: MeasureWindows,
    on_wait: Callable[[float], None] | None = None,
) -> tuple[Lane, float]:
    """Lease a GPU and get the lane ready on it; returns the lane and its set-up time (s, after the lease).

    Raises:
        LeaseError: no GPU was granted within ``cluster.lease_timeout_s``.
        LaneError: the granted GPU's node cannot serve; nothing is held.
        Exception: whatever ``on_wait`` raises while the lease waits (nothing is held).
    """
    lease = acquire_gpu(shape.name, shape.cpus, cluster.lease_timeout_s, on_wait=on_wait)
    t0 = time.monotonic()
    trainers = TrainerPool(lease, shape.index, shape.pool_size, shape.trainer_cpus)
    node_id = "?"
    try:
        node_id, ray_gpu_id = trainers.locate()
        steward = get_steward(node_id, cluster, pipe_root)
        gpu: GpuInfo = ray.get(steward.resolve_gpu.remote(ray_gpu_id), timeout=60)
        # Waiting for the node's warm parent is worth it only to lives that fork from it; the pool fills
        # meanwhile (a fresh node's fork server imports torch for 10-20 s; 16 new trainers took 6.3 s).
        warm = steward.forkserver.remote() if shape.forks else None
        if shape.fill:  # the largest cell's actors now, all at once (not as each cell grows the pool)
            trainers.fill(steward)
        forkserver = ray.get(warm, timeout=180) if warm is not None else None
    except Exception as exc:
        trainers.close()
        lease.release()
        raise LaneError(f"GPU node {node_id[:12]} unusable: {type(exc).__name__}: {exc}") from exc
    except BaseException:
        trainers.close()
        lease.release()
        raise
    lane = Lane(lease, node_id, steward, gpu, board, cancel, forkserver, trainers, windows)
    return lane, time.monotonic() - t0


def close_lane(lane: Lane) -> None:
    """Give the GPU back (see the module docstring); each step whatever the one before did."""
    try:
        lane.trainers.close()
    finally:
        try:
            ray.get(lane.steward.release_gpu.remote(lane.gpu.uuid), timeout=120)
        except Exception as exc:  # noqa: BLE001 - a dead steward: the lease goes either way
            log.warning("gpu=%s release_gpu failed: %s", lane.gpu.uuid, (str(exc).splitlines() or [""])[0][:300])
        finally:
            lane.lease.release()
