"""The engine's side of ``repeats=auto``: each recorded result goes to the sweep's
:class:`~raycolloc.driver.repeats.RepeatPolicy`, and each run it adds becomes a cell of the sweep
(validated, in its own directory) — or, where a valid result of that repeat exists (resume), a
reused one, which the policy reads at once as it reads a run. A configuration's first run teaches its
repeats: how long to warm up (:mod:`raycolloc.driver.warmup`) and, a solo's, how long a floor to measure
(:mod:`raycolloc.driver.floor`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from raycolloc.driver.cell_specs import validate_cell
from raycolloc.driver.floor import Floor, judge
from raycolloc.driver.repeats import RepeatPolicy, group_key
from raycolloc.driver.resume import CellResult, resume
from raycolloc.driver.warmup import Learned, learn, with_warmup
from raycolloc.results.index import ResultIndex
from raycolloc.spec import CellSpec

__all__ = ["Growth", "Regrow"]

log = logging.getLogger(__name__)

Todo = tuple[CellSpec, Path]


@dataclasses.dataclass(frozen=True)
class Growth:
    """Cells to add: ``front`` to run next, ``back`` after every queued cell, ``reused`` found on disk."""

    front: list[Todo]
    back: list[Todo]
    reused: list[CellResult]


def _row(result: CellResult) -> Any:
    """The cell row of a result: the one just written, or the one a reused result has on disk."""
    if result.row is not None:
        return result.row
    if result.reused_from is None:
        return None
    from raycolloc.results.store import read_table

    rows = read_table(result.reused_from, "cells").to_pylist()
    return SimpleNamespace(**rows[0]) if rows else None


class Regrow:
    """Adds a sweep's adaptive repeats as its results come in (thread-safe: lanes call it).

    Args:
        cells: the sweep's first pass.
        place: the directory of an added cell (it also writes the cell's ``.hydra`` record).
        rerun: ``+rerun=true``: no result is reused.
    """

    def __init__(self, cells: Sequence[CellSpec], place: Callable[[CellSpec], Path], rerun: bool) -> None:
        self.policy = RepeatPolicy(cells, on_disk=self._on_disk, saving=self._saving)
        self.place, self.rerun = place, rerun
        self.reused = 0
        self._lock = threading.Lock()
        # By configuration: what its first run taught its repeats (a warm-up, a floor).
        self._learned: dict[str, Learned] = {}
        self._floors: dict[str, Floor] = {}
        # A sweep with a mix warms every run up whole: a mix's headline is its total time, warm-up
        # included, set against its solos' time per sample over every epoch (driver/warmup.py).
        self._whole = any(c.mix_name is not None for c in cells)

    def _first_run(self, result: CellResult) -> None:
        """A configuration's first run recorded (ok): what it teaches its repeats."""
        cell = result.cell
        key = group_key(cell)
        group = self.policy.groups.get(key)
        if group is None or key in self._floors or cell.config.repeat != group.base.config.repeat:
            return
        self._floors[key] = Floor(1.0, 0.0, "not learned")
        if result.status != "ok" or self._whole:
            return
        from raycolloc.results.store import read_table

        where = result.reused_from or result.cell_dir
        try:
            epochs = read_table(where, "epochs").to_pylist()
            self._floors[key] = judge(cell, epochs, cell.config.measure.repeat_floor)
            learned = learn(epochs) if cell.config.measure.warmup == "learned" else None
        except Exception as exc:  # noqa: BLE001 - an unreadable or malformed first run teaches nothing
            log.warning("cell_dir=%s its repeats learn nothing from it: %s", where, exc)
            self._floors[key] = Floor(1.0, 0.0, "unreadable")
            return
        if learned is None:
            return
        if any(job.warmup_steps is None for job in with_warmup(cell, learned).jobs):
            # A job that warms up whole holds the cell at the barrier after the warm-up: nothing saved.
            learned = dataclasses.replace(learned, saved_s=0.0)
        self._learned[key] = learned

    def _saving(self, base: CellSpec) -> float:
        """GPU seconds a repeat of ``base``'s configuration saves by what its first run taught it."""
        key = group_key(base)
        learned, floor = self._learned.get(key), self._floors.get(key)
        return (learned.saved_s if learned else 0.0) + (floor.saved_s if floor else 0.0)

    def _repeat(self, base: CellSpec, repeat: int) -> CellSpec:
        """Run ``repeat`` of ``base``'s configuration, validated, with what its first run taught it."""
        key = group_key(base)
        floor = self._floors.get(key)
        spec = validate_cell(dataclasses.replace(base.config, repeat=repeat, floor_share=floor.share if floor else 1.0))
        learned = self._learned.get(key)
        return with_warmup(spec, learned) if learned is not None else spec

    def _on_disk(self, base: CellSpec, repeat: int) -> bool:
        """Whether run ``repeat`` of ``base``'s configuration has a valid result (``out_dir``'s index)."""
        if self.rerun:
            return False
        spec = self._repeat(base, repeat)
        return ResultIndex(spec.config.out_dir).find(spec.config_hash) is not None

    def expand(self, results: Sequence[CellResult]) -> Growth:
        """The cells ``results`` bring (repeats found on disk are read in turn, and may bring more)."""
        growth = Growth([], [], [])
        with self._lock:
            work = list(results)
            while work:
                result = work.pop(0)
                self._first_run(result)
                for add in self.policy.recorded(result.cell, _row(result)):
                    spec = self._repeat(add.base, add.repeat)
                    todo, found = resume([(spec, self.place(spec))], self.rerun)
                    self.reused += len(found)
                    growth.reused.extend(found)
                    work.extend(found)
                    (growth.front if add.front else growth.back).extend(todo)
        return growth

    def summary(self) -> str:
        """The sweep's line on what ``repeats=auto`` added."""
        return self.policy.summary(self.reused)
