"""``repeats=auto``: spend runs where the noise is.

On real hosts a degree-1 cell moves by up to half between runs while a degree-7 cell moves ~1%
(issue 30), and every gain divides by the degree-1 rate. So, each time a cell's result is recorded,
the engine asks :class:`RepeatPolicy` which runs to add:

- **solo baselines** (degree-1 cells, a mix's solo cells too) run ``measure.min_solo_repeats`` times,
  spread over the sweep: the first in the first pass (solos go first), the next ones when a share of
  the first pass has finished (with 3: half of it, put at the queue's front) and the last after the
  first pass (the queue's end), so a host drifting over minutes moves numerator and denominator alike;
- **any configuration** whose 95% interval is wider than ``measure.target_ci`` is run again,
  interleaved (at the queue's end, never back to back), until it meets the target or has
  ``measure.max_repeats`` runs;
- a configuration's interval: with two runs or more, the t-interval of their ``agg_samples_per_s``
  (:func:`raycolloc.results.stats.mean_interval`); with one, the run's own within-run interval, where
  the row has one (:func:`observe`); unknown, only a solo baseline is run again;
- a failed, skipped or unfit run ends its configuration's repeats; runs found on disk (resume) count.

Pure bookkeeping: it reads specs and rows and returns :class:`Addition` records; the engine makes
them cells (:mod:`raycolloc.driver.regrow`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from raycolloc.config import Config, config_hash
from raycolloc.results.stats import Interval, mean_interval
from raycolloc.spec import CellSpec

__all__ = ["Addition", "Observation", "RepeatPolicy", "group_key", "interval", "is_solo", "needs_rerun", "observe"]

Reason = Literal["solo", "ci"]


@dataclass(frozen=True)
class Observation:
    """What the policy reads of one run: its status, its aggregate rate and its within-run interval."""

    status: str
    rate: float | None
    low: float | None = None
    high: float | None = None


def observe(row: Any) -> Observation:
    """One run's :class:`Observation`, from a ``CellRow`` (or a row read back from disk).

    The within-run bounds (``agg_rate_low``/``agg_rate_high``) are read here alone, with ``getattr``:
    rows written before they existed have none (unknown)."""
    return Observation(
        status=str(row.status),
        rate=getattr(row, "agg_samples_per_s", None),
        low=getattr(row, "agg_rate_low", None),
        high=getattr(row, "agg_rate_high", None),
    )


def interval(runs: Sequence[Observation]) -> Interval | None:
    """A configuration's 95% interval of its rate: the repeats' t-interval (two runs or more), the
    one run's within-run interval, or None (unknown)."""
    rates = [r.rate for r in runs if r.rate is not None]
    if len(rates) >= 2:
        return mean_interval(rates)
    if len(rates) == 1 and len(runs) == 1 and runs[0].low is not None and runs[0].high is not None:
        return Interval(rates[0], runs[0].low, runs[0].high, 1, "windows")
    return None


def needs_rerun(runs: Sequence[Observation], cfg: Config, solo: bool) -> bool:
    """Whether a configuration with these runs (all recorded, none pending) gets one more: every run
    ok, fewer than ``measure.max_repeats``, and its interval wider than ``measure.target_ci`` (unknown:
    only a solo baseline)."""
    if not runs or any(r.status != "ok" for r in runs) or len(runs) >= cfg.measure.max_repeats:
        return False
    iv = interval(runs)
    if iv is None:
        return solo
    return iv.rel_half_width > cfg.measure.target_ci


def is_solo(cell: CellSpec) -> bool:
    """A degree-1 cell: the baseline every gain of its workload divides by."""
    return cell.mix_name is None and cell.degree == 1


def group_key(cell: CellSpec) -> str:
    """The configuration a run belongs to: the config hash of its repeat 0 (the rows' ``repeat_group``)."""
    cfg = cell.config
    return config_hash(dataclasses.replace(cfg, repeat=0)) if cfg.repeat else cell.config_hash


@dataclass(frozen=True)
class Addition:
    """One more run of ``base``'s configuration: its repeat index, where it goes, and why."""

    base: CellSpec
    repeat: int
    front: bool
    reason: Reason


@dataclass
class _Group:
    base: CellSpec
    solo: bool
    runs: list[Observation] = field(default_factory=list)
    pending: int = 0
    next_repeat: int = 1
    first_done: bool = False

    @property
    def ok(self) -> bool:
        return bool(self.runs) and all(r.status == "ok" for r in self.runs)


class RepeatPolicy:
    """The repeats of one sweep's ``repeats=auto`` configurations (others are left as they are).

    Args:
        cells: the sweep's first pass (each configuration's first run).
    """

    def __init__(self, cells: Sequence[CellSpec]) -> None:
        self.groups: dict[str, _Group] = {}
        for cell in cells:
            if cell.config.repeats != "auto":
                continue
            group = self.groups.setdefault(group_key(cell), _Group(cell, is_solo(cell)))
            group.next_repeat = max(group.next_repeat, cell.config.repeat + 1)
        self.first_pass = len(self.groups)
        self.added: dict[Reason, int] = {"solo": 0, "ci": 0}

    @property
    def active(self) -> bool:
        """Whether any configuration of the sweep is adaptive."""
        return bool(self.groups)

    def recorded(self, cell: CellSpec, row: Any) -> list[Addition]:
        """A run of ``cell`` ended with ``row`` (a ``CellRow``, a row read back, or None: it wrote
        nothing): the runs to add, in order."""
        group = self.groups.get(group_key(cell))
        if group is None:
            return []
        if cell.config.repeat == group.base.config.repeat and not group.first_done:
            group.first_done = True
        else:
            group.pending = max(0, group.pending - 1)
        group.runs.append(observe(row) if row is not None else Observation("error", None))
        out = [*self._solo_due()]
        if group.pending == 0 and (not group.solo or len(group.runs) >= self._solo_runs(group)):
            if needs_rerun(group.runs, group.base.config, group.solo):
                out.append(self._add(group, front=False, reason="ci"))
        return out

    def _solo_runs(self, group: _Group) -> int:
        return group.base.config.measure.min_solo_repeats

    def _checkpoints_passed(self, runs: int) -> int:
        """Of a solo's runs 2..``runs``, how many are due: run k+1 (k = 1..runs-1) once k/(runs-1) of
        the first pass has finished (3 runs: the 2nd at half, the 3rd at its end)."""
        done = sum(g.first_done for g in self.groups.values())
        return sum(done >= math.ceil(k * self.first_pass / (runs - 1)) for k in range(1, runs))

    def _solo_due(self) -> list[Addition]:
        out = []
        for group in self.groups.values():
            want = self._solo_runs(group)
            if not group.solo or not group.ok or want < 2:
                continue
            due = 1 + self._checkpoints_passed(want)
            while len(group.runs) + group.pending < due:
                # The last of a solo's runs goes to the queue's end (after the first pass), the others
                # to its front: they run now, in the middle of the sweep.
                out.append(self._add(group, front=len(group.runs) + group.pending < want - 1, reason="solo"))
        return out

    def _add(self, group: _Group, front: bool, reason: Reason) -> Addition:
        group.pending += 1
        repeat = group.next_repeat
        group.next_repeat += 1
        self.added[reason] += 1
        return Addition(group.base, repeat, front, reason)

    def still_wide(self) -> tuple[int, int]:
        """Configurations whose interval is still wider than the target at the cap, and those with
        no interval (one run, no within-run interval)."""
        wide = unknown = 0
        for group in self.groups.values():
            if not group.ok:
                continue
            iv = interval(group.runs)
            unknown += iv is None
            wide += iv is not None and iv.rel_half_width > group.base.config.measure.target_ci
        return wide, unknown

    def summary(self, reused: int = 0) -> str:
        """One line: what ``repeats=auto`` added, and why."""
        targets = sorted({g.base.config.measure.target_ci for g in self.groups.values()})
        caps = sorted({g.base.config.measure.max_repeats for g in self.groups.values()})
        target = "/".join(f"{100 * t:g}%" for t in targets)
        wide, unknown = self.still_wide()
        parts = [f"{self.added['solo']} solo repeats", f"{self.added['ci']} re-runs for CI > {target}"]
        parts.append(f"{wide} configuration(s) still wider (cap {'/'.join(map(str, caps))})")
        if unknown:
            parts.append(f"{unknown} with one run and no within-run interval")
        found = f" ({reused} of them found on disk)" if reused else ""
        return f"repeats auto: {', '.join(parts)}{found}"
