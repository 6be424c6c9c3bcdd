"""The GPUs of a queue on a Ray cluster: every GPU leased once, as a sweep's lanes lease theirs.

A :class:`QueueLane` is one :class:`~raycolloc.driver.lane.Lane` (a whole GPU held through a placement
group for the queue's life, its trainer pool, the node's steward, the GPU as the steward resolves it),
opened and closed by the same code as a sweep's (:func:`~raycolloc.driver.lane.open_lane`,
:func:`~raycolloc.driver.lane.close_lane`), whose trainer actors each hold ``1/POOL_SIZE`` of the lease
(a job's fractional share; no CPUs of their own: the queue packs GPU jobs, and the lease's CPUs keep the
GPU's node). The queue's lanes share one progress board (its trainers report there, and the stall watch
reads it) and one cancel flag (set when the queue stops). A QueueLane also keeps what the queue knows of
the GPU: its mode (None while empty), when a job last landed, and its monitor samples (activities over a
rolling window, power integrated into energy).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import ray

from raycolloc.config import Config
from raycolloc.driver import lane as lanes
from raycolloc.driver.lease import LeaseError
from raycolloc.driver.progress import open_board
from raycolloc.driver.side_by_side import MeasureWindows
from raycolloc.node.gpu.backend import GpuInfo
from raycolloc.node.steward_handles import NAMESPACE
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
    lane: lanes.Lane
    mode: str | None = None
    last_placed_s: float | None = None
    sample: GpuNow | None = None
    sampled_at: float | None = None
    # (t, SM activity, SM occupancy, DRAM activity), 0..1; None where the GPU has no GPM to read them
    history: deque[tuple[float, float, float | None, float | None]] = field(default_factory=deque)

    @property
    def gpu(self) -> GpuInfo:
        return self.lane.gpu

    @property
    def steward(self) -> Any:
        return self.lane.steward

    @property
    def node_id(self) -> str:
        """The Ray node the GPU is on (a lost node's lanes leave: raycolloc.queue.raynodes)."""
        return self.lane.node_id


def open_lanes(config: Config) -> list[QueueLane]:
    """Lease every GPU of the connected cluster once (what is leased is released if one fails).

    Raises:
        LeaseError: the cluster has no GPU, or one was not granted within ``cluster.lease_timeout_s``.
        LaneError: a granted GPU's node cannot serve.
    """
    count = int(ray.cluster_resources().get("GPU", 0))
    if count < 1:
        raise LeaseError("the Ray cluster has no GPU: start Ray on GPU nodes, or cluster=local for simulated GPUs")
    board, cancel, windows = open_board(NAMESPACE), threading.Event(), MeasureWindows()
    forks = config.trainer.spawn == "fork"
    out: list[QueueLane] = []
    try:
        for _ in range(count):
            index = next(_NUMBERS)
            name = f"raycolloc:queue:{os.getpid()}:{index}"
            shape = lanes.LaneShape(name, index, config.trainer.num_cpus, POOL_SIZE, 0.0, forks)
            lane, _ = lanes.open_lane(shape, config.cluster, config.mode.pipe_root, board, cancel, windows)
            out.append(QueueLane(f"{lane.node_id[:8]}-g{lane.gpu.index}", lane))
    except BaseException:
        try:
            for queue_lane in out:
                close_lane(queue_lane)
        finally:
            board.close()
        raise
    log.info("queue leased %d GPU(s): %s", len(out), ", ".join(lane.gpu_id for lane in out))
    return out


def close_lane(lane: QueueLane) -> None:
    """Give the GPU back as a sweep's lane does (:func:`raycolloc.driver.lane.close_lane`)."""
    lanes.close_lane(lane.lane)
