"""A lane one process keeps open between its sweeps: the advisor's solo, probes and confirmation.

The advisor runs several short sweeps one after the other in one process (its solo profile, then
probes, then the confirmation's cells), and each sweep opened a lane of its own: a new lease, a new
pool of trainer actors (on one H200, for regnetx_004: 6.3 s to open the confirmation's lane for 16
jobs, 3.9 s for 7, against 1-3 s of each cell's own set-up; docs/measurements.md). Inside
:func:`lanes_kept`, a sweep of one lane does not close it when it ends: the lane is kept, idle, and
the next sweep of one lane that it fits takes it over (its lease, its steward, its warm fork server
and its trainers). Only a lane whose cells all ended ok is kept, never one of a cancelled sweep.

A sweep of several lanes (or with ``cluster.reuse_lease=false``) closes the kept lane before it
starts, so that every GPU is free for its own lanes, and keeps none; so does a sweep the kept lane
does not fit. At most one lane is kept, so none holds a GPU that another lane waits for.

The kept lane is sized as it opens for the largest cell the process may run (``want``, of the node's
cores: the advisor's largest ranked degree), within the CPUs the node has per GPU, so the later
sweeps' cells borrow from the pool its first sweep filled while the fork server was still warming
up (:func:`raycolloc.driver.lane.open_lane`).

The time the kept lane waits for the next sweep is GPU time too: the first cell that takes it over
counts from when it was kept (its ``lane_setup_s`` is that wait), so the advice's GPU time (the sum
of its cells' wall times) holds it. A lane closed unused (the last one, or one the next sweep does
not fit) held the GPU from its last cell's end to its close without a cell to count it: the wait of
the advisor's own work, which it logs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import ray

from raycolloc.config import ClusterConfig
from raycolloc.driver.lane import Lane, LaneShape, close_lane
from raycolloc.driver.progress import Board
from raycolloc.driver.side_by_side import MeasureWindows

__all__ = ["KeptLanes", "kept_for_sweep", "kept_lanes", "lanes_kept"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Idle:
    lane: Lane
    shape: LaneShape
    cluster: ClusterConfig
    pipe_root: str
    since: float  # time.time() when it was kept


class KeptLanes:
    """The lane kept idle between sweeps (see the module docstring); ``want``: the most jobs a cell
    of the process may have on a lane, given the GPU node's cores."""

    def __init__(self, want: Callable[[int], int]) -> None:
        self.want = want
        self.cores = 0  # the GPU node's cores and CPUs per GPU, as the sweep found them (kept_for_sweep)
        self.cpus_per_gpu = 0.0
        self._idle: _Idle | None = None
        self._lock = threading.Lock()

    def pool_size(self, need: int, trainer_cpus: float) -> int:
        """The trainers a sweep's lane is opened with: ``need`` (its largest cell), or ``want`` of the
        node's cores where larger, as many as the node's CPUs per GPU hold at ``trainer_cpus`` each."""
        want = self.want(self.cores)
        room = int(self.cpus_per_gpu // trainer_cpus) if trainer_cpus > 0 else want
        return max(need, min(want, room))

    def take(
        self,
        shape: LaneShape,
        cluster: ClusterConfig,
        pipe_root: str,
        board: Board,
        windows: MeasureWindows,
        cancel: threading.Event,
    ) -> tuple[Lane, float, LaneShape] | None:
        """The kept lane, now the sweep's (its board, windows and cancel event), when it was kept and
        the shape it was opened with, if it serves ``shape``; else None, the kept lane closed (its GPU
        goes back for the sweep's own lane)."""
        with self._lock:
            idle, self._idle = self._idle, None
        if idle is None:
            return None
        if self._fits(idle, shape, cluster, pipe_root):
            idle.lane.board, idle.lane.windows, idle.lane.cancel = board, windows, cancel
            return idle.lane, idle.since, idle.shape
        _close(idle, "it does not fit the sweep")
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
        """The sweep that had ``lane`` ended with its cells ok: keep it for the next."""
        with self._lock:
            before, self._idle = self._idle, _Idle(lane, shape, cluster, pipe_root, time.time())
        if before is not None:  # never two: the one kept before holds a GPU nobody waits for
            _close(before, "another lane is kept")

    def close(self) -> None:
        """Close the kept lane (the process is done with it, or a sweep needs every GPU)."""
        with self._lock:
            idle, self._idle = self._idle, None
        if idle is not None:
            _close(idle, "no sweep takes it")


def _close(idle: _Idle, why: str) -> None:
    log.info("lane kept on gpu=%s closed after %.1f s idle: %s", idle.lane.gpu.uuid, time.time() - idle.since, why)
    try:
        close_lane(idle.lane)
    except Exception as exc:  # noqa: BLE001 - a lane that cannot be closed cleanly goes with the driver's Ray
        log.warning("lane kept on gpu=%s: closing it failed: %s", idle.lane.gpu.uuid, exc)


_kept: KeptLanes | None = None


def kept_lanes() -> KeptLanes | None:
    """The process's kept lane, inside :func:`lanes_kept`; None outside."""
    return _kept


def kept_for_sweep(lanes: int, reuse_lease: bool, cores: int) -> KeptLanes | None:
    """What a sweep of ``lanes`` lanes may keep (None outside :func:`lanes_kept`): a sweep of one lane
    that keeps its lease takes the kept lane or keeps its own; any other closes the kept lane first.
    ``cores``: the GPU node's (the pool's size is chosen by them, within its CPUs per GPU)."""
    kept = _kept
    if kept is None:
        return None
    if lanes != 1 or not reuse_lease:
        kept.close()
        return None
    shares = [
        n["Resources"]["CPU"] / n["Resources"]["GPU"]
        for n in ray.nodes()
        if n.get("Alive") and n["Resources"].get("GPU") and n["Resources"].get("CPU")
    ]
    kept.cores, kept.cpus_per_gpu = cores, min(shares, default=0.0)
    return kept


@contextmanager
def lanes_kept(want: Callable[[int], int]) -> Iterator[KeptLanes]:
    """Keep the lane of the sweeps run inside open for the next (see the module docstring); a lane
    still kept is closed on the way out, whatever ends the block. Not nested."""
    global _kept
    if _kept is not None:
        raise RuntimeError("lanes_kept: already inside one")
    _kept = KeptLanes(want)
    try:
        yield _kept
    finally:
        kept, _kept = _kept, None
        kept.close()
