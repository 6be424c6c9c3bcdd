"""Lanes one process keeps open between its sweeps: the advisor's solo, probes and confirmation.

The advisor runs several short sweeps one after the other in one process (its solo profile, then
probes, then the confirmation's cells), and each sweep opened a lane of its own: a new lease, a new
pool of trainer actors (on one H200, for regnetx_004: 6.3 s to open the confirmation's lane for 16
jobs, 3.9 s for 7, against 1-3 s of each cell's own set-up; docs/measurements.md). Inside
:func:`lanes_kept` a sweep's lane is not closed when the sweep ends but kept, idle, and the next
sweep that fits it takes it over: its lease, its steward, its warm fork server and its trainers.

A kept lane is sized as it opens for the largest cell the process may run (``want``, of the node's
cores: the advisor's largest ranked degree; at most what the node's CPUs can lease), so every later sweep's
cells borrow from the pool its first lane filled, while the fork server was still warming up
(:func:`raycolloc.driver.lane.open_lane`). A sweep a kept lane does not fit (a larger cell, other
cluster settings) closes the kept lanes first, so their GPUs are free for its own.

The time a kept lane waits for the next sweep is GPU time too: the first cell that takes it over
counts from when it was kept (its ``lane_setup_s`` is that wait), so ``raycolloc.advise``'s GPU time
(the sum of its cells' wall times) holds it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from raycolloc.config import ClusterConfig
from raycolloc.driver.lane import Lane, LaneShape, close_lane
from raycolloc.driver.progress import Board
from raycolloc.driver.side_by_side import MeasureWindows

__all__ = ["KeptLanes", "kept_lanes", "lanes_kept"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Idle:
    lane: Lane
    shape: LaneShape
    cluster: ClusterConfig
    pipe_root: str
    since: float  # time.time() when it was kept


class KeptLanes:
    """The lanes kept idle between sweeps (see the module docstring); ``want``: the most jobs a cell
    of the process may have on a lane, given the GPU node's cores."""

    def __init__(self, want: Callable[[int], int]) -> None:
        self.want = want
        self._idle: list[_Idle] = []
        self._lock = threading.Lock()

    def pool_size(self, need: int, cores: int, lease_cpus: float, trainer_cpus: float) -> int:
        """The trainers a sweep's new lane is opened with: ``need`` (its largest cell), or ``want`` of
        the node's ``cores`` where larger, as many as ``lease_cpus`` (the GPU node's CPUs) hold at
        ``trainer_cpus`` each."""
        want = self.want(cores)
        return max(need, min(want, int(lease_cpus // trainer_cpus)) if trainer_cpus > 0 else want)

    def take(
        self,
        shape: LaneShape,
        cluster: ClusterConfig,
        pipe_root: str,
        board: Board,
        windows: MeasureWindows,
        cancel: threading.Event,
    ) -> tuple[Lane, float] | None:
        """A kept lane that serves ``shape``, now the sweep's (its board, windows and cancel event),
        and when it was kept; None if none does, after closing every kept lane (their GPUs go back
        for the sweep's own lanes)."""
        with self._lock:
            for i, idle in enumerate(self._idle):
                if self._fits(idle, shape, cluster, pipe_root):
                    del self._idle[i]
                    idle.lane.board, idle.lane.windows, idle.lane.cancel = board, windows, cancel
                    return idle.lane, idle.since
            stale, self._idle = self._idle, []
        for idle in stale:
            log.info("lane kept on gpu=%s does not fit the sweep: closing it", idle.lane.gpu.uuid)
            close_lane(idle.lane)
        return None

    @staticmethod
    def _fits(idle: _Idle, shape: LaneShape, cluster: ClusterConfig, pipe_root: str) -> bool:
        kept = idle.shape
        return (
            idle.cluster == cluster
            and idle.pipe_root == pipe_root
            and kept.pool_size >= shape.pool_size
            and kept.trainer_cpus == shape.trainer_cpus
            and kept.cpus >= shape.cpus
            and (kept.forks or not shape.forks)
            and not idle.lane.residents
        )

    def keep(self, lane: Lane, shape: LaneShape, cluster: ClusterConfig, pipe_root: str) -> None:
        """The sweep that had ``lane`` ended normally: keep it for the next."""
        with self._lock:
            self._idle.append(_Idle(lane, shape, cluster, pipe_root, time.time()))

    def close(self) -> None:
        """Close every kept lane (the process is done with them)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for entry in idle:
            close_lane(entry.lane)


_kept: KeptLanes | None = None


def kept_lanes() -> KeptLanes | None:
    """The process's kept lanes, inside :func:`lanes_kept`; None outside."""
    return _kept


@contextmanager
def lanes_kept(want: Callable[[int], int]) -> Iterator[KeptLanes]:
    """Keep the lanes of the sweeps run inside open for the next (see the module docstring); every
    lane still kept is closed on the way out, whatever ends the block."""
    global _kept
    if _kept is not None:  # nested: the outer block keeps them
        yield _kept
        return
    _kept = KeptLanes(want)
    try:
        yield _kept
    finally:
        kept, _kept = _kept, None
        kept.close()
