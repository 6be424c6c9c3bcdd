"""Hung jobs: a job that makes no progress for too long is ``status=hang``, and its cell goes on.

Each training process reports its epoch and step to the sweep's progress board about once a
second while it trains (``raycolloc.job.process``). The cell's waits (``driver/cell_run.py``) ask this
watch which of the jobs they still wait for have shown no new step for longer than their limit:

* ``trainer.stall_timeout_s`` (5 minutes by default), or 20 of the job's own warm-up steps if
  those are slower: a step of a large model at degree 7 under time-slicing may take many seconds;
* until a job's first report of a call that starts with the warm-up epoch, ``trainer.setup_timeout_s``
  if longer: ``torch.compile`` runs before the first step and reports nothing.

An epoch may take hours (a full ImageNet epoch); a job that reports nothing for minutes is hung.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from raycolloc.driver.progress import Board
from raycolloc.spec import CellSpec, JobProgress, JobState

__all__ = ["STEPS_OF_SILENCE", "StallWatch"]

log = logging.getLogger(__name__)
STEPS_OF_SILENCE = 20  # warm-up steps a job may stay silent for, where that is longer than the timeout
# How often the board is asked, as a share of the shortest limit (at most every 10 s, at least every
# 2 s): each ask is a call to the board while jobs measure, and a limit is minutes by default.
CHECK_SHARE, CHECK_MIN_S, CHECK_MAX_S = 0.1, 2.0, 10.0


@dataclass
class StallWatch:
    """Which of a cell's jobs stopped progressing during one call (one per ``_gather``).

    Args:
        board: the sweep's progress board.
        cell: the cell.
        states: the jobs' states before the call (their warm-up epochs give the step time).
        warmup: the call starts with the warm-up epoch (compile may run before the first report).
    """

    board: Board
    cell: CellSpec
    states: dict[int, JobState]
    warmup: bool
    # job -> (its epoch and step last seen, seen since)
    _seen: dict[int, tuple[tuple[int, int] | None, float]] = field(default_factory=dict)
    _moved: set[int] = field(default_factory=set)  # jobs that progressed during this call

    def __post_init__(self) -> None:
        self._created = time.monotonic()
        trainer = self.cell.config.trainer
        self._limits: dict[int, float] = {}
        for job in self.cell.jobs:
            warm = next((e for e in self.states.get(job.index, JobState()).epochs if e.warmup), None)
            step_s = warm.wall_s / max(1, warm.steps or 1) if warm else 0.0
            self._limits[job.index] = max(trainer.stall_timeout_s, STEPS_OF_SILENCE * step_s)
        self._first_limit = max(trainer.stall_timeout_s, trainer.setup_timeout_s) if self.warmup else 0.0
        shortest = min(self._limits.values(), default=trainer.stall_timeout_s)
        self._every = min(CHECK_MAX_S, max(CHECK_MIN_S, CHECK_SHARE * shortest))
        self._checked = -float("inf")

    def _progress(self) -> dict[int, JobProgress]:
        try:
            snap = self.board.snapshot()
        except Exception as exc:  # noqa: BLE001 - no verdict without the board; the next poll asks again
            log.debug("cell=%s progress board unavailable: %s", self.cell.cell_id, exc)
            return {}
        cell = snap.get(self.cell.cell_id)
        return cell.jobs if cell is not None else {}

    def hung(self, waiting: Collection[int]) -> dict[int, str]:
        """Jobs among ``waiting`` silent for longer than their limit -> why (for the job's row); asks the
        board at most every few seconds (a verdict is at most that late)."""
        now = time.monotonic()
        if now - self._checked < self._every:
            return {}
        self._checked = now
        jobs = self._progress()
        verdicts = {}
        for index in waiting:
            progress = jobs.get(index)
            mark = (progress.epoch, progress.step) if progress else None
            if index not in self._seen:  # where the job stood when the call began
                self._seen[index] = (mark, self._created)
            last, since = self._seen[index]
            if mark != last:
                self._seen[index] = (mark, now)
                self._moved.add(index)
                continue
            limit = self._limits[index] if index in self._moved else max(self._limits[index], self._first_limit)
            if now - since > limit:
                where = f"at epoch {mark[0]} step {mark[1]}" if mark else "before its first step"
                verdicts[index] = (
                    f"hang: no progress for {now - since:.0f}s {where} (limit {limit:.0f}s; "
                    f"trainer.stall_timeout_s={self.cell.config.trainer.stall_timeout_s:g})"
                )
        return verdicts
