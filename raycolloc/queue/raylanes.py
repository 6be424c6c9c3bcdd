"""The GPUs of a queue on a Ray cluster: every GPU leased once, as the sweeps lease theirs.

A :class:`QueueLane` is one whole GPU held through a placement group
(:func:`raycolloc.driver.lease.acquire_gpu`) for the queue's life, the node's steward, the GPU as the
steward resolves it, and a :class:`~raycolloc.driver.trainers.TrainerPool` whose actors each hold
``1/POOL_SIZE`` of the lease (a job's fractional share; no CPUs of their own: the queue packs GPU
jobs, and the lease's CPUs keep the GPU's node). It also keeps what the queue knows of the GPU: its
mode (None while empty), when a job last landed, and its monitor samples (activities over a rolling
window, power integrated into energy).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import ray

from raycolloc.config import Config
from raycolloc.driver.lease import GpuLease, LeaseError, acquire_gpu
from raycolloc.driver.trainers import TrainerPool
from raycolloc.node.gpu.backend import GpuInfo
from raycolloc.node.steward_handles import get_steward
from raycolloc.spec import GpuNow

__all__ = ["POOL_SIZE", "QueueLane", "close_lane", "open_lanes"]

log = logging.getLogger(__name__)
POOL_SIZE = 16  # the most jobs one GPU holds at once: each trainer actor holds 1/POOL_SIZE of its lease
# Lane numbers unique within the process: a second queue run in one process (a resume, a test) names its
# placement groups and trainer actors afresh, never after the last run's, which Ray may still be freeing.
_NUMBERS = itertools.count()


@dataclass
class QueueLane:
    """One leased GPU of the queue (see the module docstring)."""

    gpu_id: str
    lease: GpuLease
    pool: TrainerPool
    steward: Any
    gpu: GpuInfo
    forkserver: str | None
    mode: str | None = None
    last_placed_s: float | None = None
    sample: GpuNow | None = None
    sampled_at: float | None = None
    # (t, SM activity, SM occupancy, DRAM activity), 0..1; None where the GPU has no GPM to read them
    history: deque[tuple[float, float, float | None, float | None]] = field(default_factory=deque)
    node_id: str = ""  # the Ray node the GPU is on (a lost node's lanes leave: raycolloc.queue.raynodes)


def _open(config: Config, index: int) -> QueueLane:
    cluster = config.cluster
    lease = acquire_gpu(f"raycolloc:queue:{os.getpid()}:{index}", config.trainer.num_cpus, cluster.lease_timeout_s)
    pool = TrainerPool(lease, index, POOL_SIZE, 0.0)
    try:
        node_id, ray_gpu_id = pool.locate()
        steward = get_steward(node_id, cluster, config.mode.pipe_root)
        gpu: GpuInfo = ray.get(steward.resolve_gpu.remote(ray_gpu_id), timeout=60)
        forkserver = ray.get(steward.forkserver.remote(), timeout=180) if config.trainer.spawn == "fork" else None
    except BaseException:
        pool.close()
        lease.release()
        raise
    return QueueLane(f"{node_id[:8]}-g{gpu.index}", lease, pool, steward, gpu, forkserver, node_id=node_id)


def open_lanes(config: Config) -> list[QueueLane]:
    """Lease every GPU of the connected cluster once (what is leased is released if one fails).

    Raises:
        LeaseError: the cluster has no GPU, or one was not granted within ``cluster.lease_timeout_s``.
    """
    count = int(ray.cluster_resources().get("GPU", 0))
    if count < 1:
        raise LeaseError("the Ray cluster has no GPU: start Ray on GPU nodes, or cluster=local for simulated GPUs")
    lanes: list[QueueLane] = []
    try:
        for _ in range(count):
            lanes.append(_open(config, next(_NUMBERS)))
    except BaseException:
        for lane in lanes:
            close_lane(lane)
        raise
    log.info("queue leased %d GPU(s): %s", len(lanes), ", ".join(lane.gpu_id for lane in lanes))
    return lanes


def close_lane(lane: QueueLane) -> None:
    """Give the GPU back: idle trainers killed, what the steward kept (the MPS daemon) stopped, the
    lease removed; each step whatever the one before did."""
    try:
        lane.pool.close()
    finally:
        try:
            ray.get(lane.steward.release_gpu.remote(lane.gpu.uuid), timeout=120)
        except ray.exceptions.RayError as exc:  # a dead steward: the lease goes either way
            log.warning("gpu=%s release_gpu failed: %s", lane.gpu_id, (str(exc).splitlines() or [""])[0][:300])
        finally:
            lane.lease.release()
