"""``repeats=auto``: spend runs where the noise is.

On real hosts a degree-1 cell moves by up to half between runs while a degree-7 cell moves ~1%
(issue 30), and every gain divides by the degree-1 rate. So, each time a cell's result is recorded,
the engine asks :class:`RepeatPolicy` which runs to add:

- **solo baselines** (degree-1 cells, a mix's solo cells too) run ``measure.min_solo_repeats`` times,
  spread over the sweep: the first in the first pass (solos go first), the next ones when a share of
  the first pass has finished (with 4: a third and two thirds of it, put at the queue's front) and the last after the
  first pass (the queue's end), so a host drifting over minutes moves numerator and denominator alike;
- **any configuration** whose 95% interval is wider than ``measure.target_ci`` is run again,
  interleaved (at the queue's end, never back to back), until it meets the target or has
  ``measure.max_repeats`` runs;
- a configuration's interval: with two runs or more, the t-interval of their ``agg_samples_per_s``
  (:func:`raycolloc.results.stats.mean_interval`); with one, the run's own within-run interval, where
  the row has one (:func:`observe`); unknown, only a solo baseline is run again;
- a failed, skipped or unfit run ends its configuration's repeats; runs found on disk (resume) count;
- **a budget**: the re-runs for intervals may take what the solo baselines' repeats leave of
  ``measure.budget`` times the first pass's GPU time (a run's GPU time: its cell's wall time; the first pass's
  is estimated from the first runs recorded so far). On a noisy host every interval is wider than the target
  and the re-runs would go to the cap (3.2x the first pass on 2 x H200, docs/measurements.md, sixteenth
  session); the budget (0.3 by default; issue 46: at 1.0 the quick matrix took 157 s of GPU time against 66 s)
  holds them to what the solos leave. **The solo baselines' runs are never refused**: every gain divides by
  them, and a solo left at two runs has a wider interval than its one run had (a t-interval of two runs spans
  12.7 standard errors: ±81% and ±199% on an H200 where the budget held each solo to two runs, 2026-12-04,
  ``jobs/check_cost.sh``). They spend the budget first; a re-run for an interval gets what they leave. Their
  repeats are made cheap instead: a repeat warms up only as long as its first run took to settle
  (``measure.warmup=learned``, :mod:`raycolloc.driver.warmup`), and its estimate here is its first run's GPU
  time less that saving. Cells that never held a GPU (``skipped``, ``unfit``) are no part of the first pass's
  GPU time: the quick matrix's four skipped MIG cells, recorded first at 0 s, once held its estimate to a
  third (one H200, 2026-12-02);
- **never two runs where three are due**: a configuration gets a second run for its interval only if
  the budget holds a third as well, and that third is kept for it (two runs' t-interval is wider
  than one run's own; :meth:`RepeatPolicy._grant`).

Pure bookkeeping: it reads specs and rows and returns :class:`Addition` records; the engine makes
them cells (:mod:`raycolloc.driver.regrow`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from raycolloc.config import Config, first_run_hash
from raycolloc.results.stats import Interval, mean_interval
from raycolloc.spec import NEVER_STARTED, CellSpec

__all__ = ["Addition", "Observation", "RepeatPolicy", "group_key", "interval", "is_solo", "needs_rerun", "observe"]

Reason = Literal["solo", "ci"]


@dataclass(frozen=True)
class Observation:
    """What the policy reads of one run: its status, its aggregate rate and its within-run interval."""

    status: str
    rate: float | None
    low: float | None = None
    high: float | None = None
    gpu_s: float | None = None  # the run's GPU time: its cell's wall time


def observe(row: Any) -> Observation:
    """One run's :class:`Observation`, from a ``CellRow`` (or a row read back from disk).

    The within-run bounds (``agg_rate_low``/``agg_rate_high``) are read here alone, with ``getattr``:
    rows written before they existed have none (unknown)."""
    return Observation(
        status=str(row.status),
        rate=getattr(row, "agg_samples_per_s", None),
        low=getattr(row, "agg_rate_low", None),
        high=getattr(row, "agg_rate_high", None),
        gpu_s=_gpu_s(row),
    )


def _gpu_s(row: Any) -> float | None:
    """A run's GPU time (its cell holds its GPU from start to finish, less the wait for its lease);
    None where the row lacks it."""
    start, end = getattr(row, "started_at", None), getattr(row, "finished_at", None)
    if start is None or end is None:
        return None
    return max(0.0, float(end) - float(start) - float(getattr(row, "lease_wait_s", None) or 0.0))


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
    """The configuration a run belongs to: the config hash of its first run (the rows' ``repeat_group``)."""
    return first_run_hash(cell.config) if cell.config.repeat else cell.config_hash


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
    third_owed: bool = False  # granted a second run for its interval: the budget keeps room for a third

    @property
    def ok(self) -> bool:
        return bool(self.runs) and all(r.status == "ok" for r in self.runs)


class RepeatPolicy:
    """The repeats of one sweep's ``repeats=auto`` configurations (others are left as they are).

    Args:
        cells: the sweep's first pass (each configuration's first run).
    """

    def __init__(
        self,
        cells: Sequence[CellSpec],
        on_disk: Callable[[CellSpec, int], bool] | None = None,
        saving: Callable[[CellSpec], float] | None = None,
    ) -> None:
        # on_disk(base, repeat): whether that run's result exists already (resume). Such a run is
        # granted whatever the budget says: it costs nothing now, and a resumed sweep must find the
        # same runs its first invocation added, though its estimates (all first runs at once) differ.
        self.on_disk = on_disk
        # saving(base): the GPU seconds a repeat of base's configuration takes less than its first run
        # (its learned warm-up, raycolloc.driver.warmup; a solo's shorter floor, raycolloc.driver.floor).
        self.saving = saving
        self.groups: dict[str, _Group] = {}
        for cell in cells:
            if cell.config.repeats != "auto":
                continue
            group = self.groups.setdefault(group_key(cell), _Group(cell, is_solo(cell)))
            group.next_repeat = max(group.next_repeat, cell.config.repeat + 1)
        self.first_pass = len(self.groups)
        self.added: dict[Reason, int] = {"solo": 0, "ci": 0}
        self.refused = 0  # runs the budget did not grant
        self._first_gpu_s: list[float] = []  # GPU time of each first run recorded that held a GPU
        self._never_ran = 0  # configurations whose first run never held a GPU (skipped, unfit)
        self._spent_gpu_s = 0.0  # GPU time of the added runs recorded, plus the estimate of those pending

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
        seen = observe(row) if row is not None else Observation("error", None)
        if cell.config.repeat == group.base.config.repeat and not group.first_done:
            group.first_done = True
            if seen.status in NEVER_STARTED:
                self._never_ran += 1
            elif seen.gpu_s is not None:
                self._first_gpu_s.append(seen.gpu_s)
        else:
            group.pending = max(0, group.pending - 1)
            # The estimate made when the run was granted gives way to what it took.
            self._spent_gpu_s += (seen.gpu_s or 0.0) - self._estimate(group)
        group.runs.append(seen)
        out = [*self._solo_due()]
        if group.pending == 0 and (not group.solo or len(group.runs) >= self._solo_runs(group)):
            if needs_rerun(group.runs, group.base.config, group.solo):
                out += self._grant(group, front=False, reason="ci")
            group.third_owed = group.third_owed and group.pending > 0 and len(group.runs) < 3
        return out

    def _estimate(self, group: _Group) -> float:
        """What one more run of ``group`` should take: its first run's GPU time, less what its first run
        taught it saves (a learned warm-up, a solo's shorter floor: ``saving``), never less than half of it
        (the saving is an estimate from the first run's windows; set-up and measured epochs remain).
        Before its first run is in: a solo's, the mean of the other solos' estimates (its kind of cell),
        else the mean first run's."""
        own = next((r.gpu_s for r in group.runs if r.gpu_s is not None), None)
        if own is not None:
            saved = self.saving(group.base) if self.saving is not None else 0.0
            return max(own - saved, 0.5 * own)
        if group.solo:
            like = [
                self._estimate(g) for g in self.groups.values() if g.solo and any(r.gpu_s is not None for r in g.runs)
            ]
            if like:
                return sum(like) / len(like)
        return sum(self._first_gpu_s) / len(self._first_gpu_s) if self._first_gpu_s else 0.0

    def _budget_left(self, group: _Group) -> float:
        """GPU seconds the added runs may still take: ``measure.budget`` x the first pass (estimated
        from the first runs recorded so far), less what they took and are expected to take."""
        if not self._first_gpu_s:
            return math.inf
        first_pass = sum(self._first_gpu_s) / len(self._first_gpu_s) * (self.first_pass - self._never_ran)
        return group.base.config.measure.budget * first_pass - self._spent_gpu_s

    def _owed(self, asking: _Group) -> float:
        """GPU seconds promised to other configurations: the solo baselines' runs still to come (due
        later in the sweep; every gain divides by a solo) and the third run of each configuration
        that was granted a second for its interval. A re-run for an interval leaves them room."""
        owed = 0.0
        for g in self.groups.values():
            # A solo whose first run is still to come is owed its repeats too (results arrive in any order).
            if g.solo and (g.ok or not g.first_done):
                missing = self._solo_runs(g) - max(1, len(g.runs)) - g.pending
                owed += max(0, missing) * self._estimate(g)
            if g.third_owed and g is not asking:
                owed += self._estimate(g)
        return owed

    def _grant(self, group: _Group, front: bool, reason: Reason) -> list[Addition]:
        """One more run of ``group``: a solo baseline's always, a re-run for an interval if the budget
        holds it (else none, counted in ``refused``).

        A re-run for an interval comes only from what the runs owed to others leave (:meth:`_owed`),
        and a configuration's second run only if a third fits too: two runs' t-interval is 4.9 times
        as wide as three's (Student's t with one degree of freedom is 12.7), so a configuration left
        at two runs would show a wider interval than its one run had (±124-350% on an H200, docs/
        measurements.md, twenty-second session). The third is then kept for it until it is recorded
        or the interval no longer asks for it, and granted whatever the budget says by then (its second
        run may have taken longer than estimated, or the first pass's estimate fallen)."""
        cost = self._estimate(group)
        second = reason == "ci" and len(group.runs) + group.pending == 1 and group.base.config.measure.max_repeats >= 3
        owed_third = reason == "ci" and group.third_owed and len(group.runs) + group.pending == 2
        need = cost * (2 if second else 1)
        if reason == "ci":
            found = owed_third or (self.on_disk is not None and self.on_disk(group.base, group.next_repeat))
            if not found and need > self._budget_left(group) - self._owed(group):
                self.refused += 1
                group.third_owed = False
                return []
        self._spent_gpu_s += cost
        group.third_owed = second
        return [self._add(group, front, reason)]

    def _solo_runs(self, group: _Group) -> int:
        return group.base.config.measure.min_solo_repeats

    def _checkpoints_passed(self, runs: int) -> int:
        """Of a solo's runs 2..``runs``, how many are due: run k+1 (k = 1..runs-1) once k/(runs-1) of
        the first pass has finished (4 runs: the 2nd at a third, the 3rd at two thirds, the 4th at its end)."""
        done = sum(g.first_done for g in self.groups.values())
        return sum(done >= math.ceil(k * self.first_pass / (runs - 1)) for k in range(1, runs))

    def _solo_due(self) -> list[Addition]:
        """The solo baselines' runs due now, in rounds (every solo's second run before any solo's third);
        the budget never refuses them (every gain divides by them)."""
        out: list[Addition] = []
        solos = [g for g in self.groups.values() if g.solo and g.ok and self._solo_runs(g) >= 2]
        for run in range(2, max((self._solo_runs(g) for g in solos), default=1) + 1):
            for group in solos:
                want = self._solo_runs(group)
                due = 1 + self._checkpoints_passed(want)
                if run > min(due, want) or len(group.runs) + group.pending >= run:
                    continue
                # The last of a solo's runs goes to the queue's end (after the first pass), the others
                # to its front: they run now, in the middle of the sweep.
                out += self._grant(group, front=run < want, reason="solo")
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
        if self.refused:
            budgets = sorted({g.base.config.measure.budget for g in self.groups.values()})
            parts.append(
                f"{self.refused} run(s) not added: the budget (measure.budget={'/'.join(map(str, budgets))}) was spent"
            )
        found = f" ({reused} of them found on disk)" if reused else ""
        return f"repeats auto: {', '.join(parts)}{found}"
