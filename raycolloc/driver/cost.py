"""What a sweep plans to spend, said once before its first cell: its cells, its runs and their GPU time.

A run holds its GPU for its set-up (lease, actors, model, data; release after) and its epochs. Before
anything runs, only the protocol's own lengths are known: a time-budgeted epoch lasts about
``epoch_time_s``, a measured epoch at least its floor (``min_epoch_s``: 5 s on a real GPU), the set-up
about ``SETUP_S``. An epoch's own length (its samples at a rate not yet measured: the warm-up epoch,
any epoch without a floor or budget) is not counted, so the GPU time said is a floor of what the
sweep takes, and the line says so where such epochs exist. ``repeats=N`` runs are cells of the plan
already; ``repeats=auto`` adds each solo baseline's runs (``measure.min_solo_repeats``: never refused,
each counted over ``measure.repeat_floor`` of the floor, the least it may measure: :mod:`raycolloc.driver.floor`),
and re-runs for intervals up to ``measure.budget`` times the first pass in all (solos' runs included):
the line's upper bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from raycolloc.config import Config, measured_floor
from raycolloc.mode_kinds import mode_of
from raycolloc.spec import CellSpec

__all__ = ["SETUP_S", "PlanCost", "minutes", "plan_cost", "plan_gpus", "plan_mig", "run_seconds"]

# A run's set-up and release, an allowance: the quick matrix before the floor (resnet26_cifar10,
# epoch_samples=25600, degrees 1-7, naive and MPS) took 65.8 s of GPU time in 8 cells on 2 x H200,
# of which its epochs at their measured rates were about 38 s (docs/measurements.md, twenty-second
# session): about 3.5 s a cell besides its epochs.
SETUP_S = 3.5


def run_seconds(cfg: Config) -> tuple[float, bool]:
    """One run's GPU time as far as the protocol sets it, and whether every epoch's length is known:
    ``SETUP_S``, plus ``epochs x epoch_time_s`` where each epoch has a time budget, else
    ``(epochs - 1) x floor`` (the warm-up epoch's own length unknown)."""
    if cfg.epoch_time_s:
        return SETUP_S + cfg.epochs * cfg.epoch_time_s, True
    floor = measured_floor(cfg)
    return SETUP_S + (cfg.epochs - 1) * (floor or 0.0), False


@dataclass(frozen=True)
class PlanCost:
    """A sweep's plan in runs and GPU seconds (see the module docstring).

    Attributes:
        cells: the plan's cells (``repeats=N``: N per configuration).
        runs: the cells and the solo baselines' runs ``repeats=auto`` adds.
        gpu_s: those runs' GPU time, as far as the protocol sets it (a floor where ``timed`` is False).
        max_gpu_s: with every run the budget may add (``measure.budget``).
        gpus: GPUs the cells fan out over (None: the cluster's, not known before Ray is asked).
        timed: every epoch's length is known (each has a time budget).
        floors: the measured epochs' floors, seconds (empty: none).
        budgets: ``measure.budget`` of the ``repeats=auto`` cells (empty: none is auto).
        epoch_times: the epochs' time budgets, seconds (``epoch_time_s``; empty: none).
        repeat_floors: the share of the floor solo repeats are counted at (``measure.repeat_floor``;
            empty: none is shorter).
        skipped: MIG cells this machine's GPUs cannot run (MIG mode off on all of them): counted in
            ``cells``, not in the runs (the sweep records them ``skipped`` at once).
    """

    cells: int
    runs: int
    gpu_s: float
    max_gpu_s: float
    gpus: int | None
    timed: bool
    floors: tuple[float, ...] = ()
    budgets: tuple[float, ...] = ()
    epoch_times: tuple[float, ...] = ()
    repeat_floors: tuple[float, ...] = ()
    skipped: int = 0

    @property
    def wall_s(self) -> float | None:
        """The plan's wall time with its cells spread evenly over its GPUs (None: GPUs not known)."""
        return None if self.gpus is None else self.gpu_s / max(1, min(self.gpus, self.cells - self.skipped))

    def line(self) -> str:
        """``plan: 12 cells (18 runs) on 1 GPU, at least 2.9 min of GPU time (...), ...``: one line."""
        notes = [f"{self.skipped} MIG cells skipped: MIG mode is off on this machine's GPUs"] if self.skipped else []
        if self.runs != self.cells - self.skipped:
            notes.append(f"{self.runs} runs with the solo baselines' repeats")
        runs = f" ({'; '.join(notes)})" if notes else ""
        on = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}" if self.gpus else "the cluster's GPUs"
        how = [f"{self.runs} runs x ({SETUP_S:g} s set-up"]
        if self.epoch_times:
            how[0] += f" + epochs at their {'/'.join(f'{t:g}' for t in self.epoch_times)} s budget"
        if self.floors:
            how[0] += f" + measured epochs at their {'/'.join(f'{f:g}' for f in self.floors)} s floor"
        if self.repeat_floors:
            how[0] += f", solo repeats' at {'/'.join(f'{f:g}' for f in self.repeat_floors)} of it"
        how[0] += ")"
        if not self.timed:
            how.append("epochs' own time not counted")
        said = f"plan: {self.cells} cell{'s' if self.cells != 1 else ''}{runs} on {on}, "
        said += f"{'about' if self.timed else 'at least'} {minutes(self.gpu_s)} of GPU time ({'; '.join(how)})"
        if self.budgets and self.max_gpu_s > self.gpu_s:
            budget = "/".join(f"{b:g}" for b in self.budgets)
            said += f", up to {minutes(self.max_gpu_s)} with re-runs for intervals (measure.budget={budget})"
        if self.wall_s is not None:
            said += f", {'about' if self.timed else 'at least'} {minutes(self.wall_s)} wall"
        return said


def minutes(seconds: float) -> str:
    """``40 s`` or ``1.5 min``: a duration as the plan line and the progress lines say it."""
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def plan_cost(cells: Sequence[CellSpec], gpus: int | None, mig: bool | None = None) -> PlanCost:
    """The cost of running ``cells`` (a plan's, in order) on ``gpus`` GPUs; ``mig`` False: MIG mode is
    off on every GPU (:func:`plan_mig`), so MIG cells are skipped and cost nothing."""
    from raycolloc.driver.repeats import is_solo  # the results' statistics: with the engine

    everything = len(cells)
    mixed = any(c.mix_name is not None for c in cells)  # a sweep with a mix (MIG cells too): every floor whole
    if mig is False:
        cells = [c for c in cells if not mode_of(c.mode).partitioned]
    fixed = auto = 0.0
    timed = True
    floors: set[float] = set()
    budgets: set[float] = set()
    epoch_times: set[float] = set()
    shares: set[float] = set()  # measure.repeat_floor where a solo's repeats may measure less than its floor
    solos: list[tuple[int, float]] = []  # each solo baseline's runs to add, and one's seconds
    for cell in cells:
        cfg = cell.config
        seconds, known = run_seconds(cfg)
        timed = timed and known
        if cfg.epoch_time_s:
            epoch_times.add(cfg.epoch_time_s)
        elif floor := measured_floor(cfg):
            floors.add(floor)
        if cfg.repeats != "auto":
            fixed += seconds
            continue
        auto += seconds
        budgets.add(cfg.measure.budget)
        if is_solo(cell):
            repeat_s = seconds if mixed else _repeat_seconds(cell)
            solos.append((cfg.measure.min_solo_repeats - 1, repeat_s))
            if repeat_s < seconds and cfg.measure.min_solo_repeats > 1:
                shares.add(cfg.measure.repeat_floor)
    budget = max(budgets, default=0.0)
    added = sum(extra for extra, _ in solos)
    added_s = sum(extra * seconds for extra, seconds in solos)
    gpu_s = fixed + auto + added_s
    return PlanCost(
        cells=everything,
        runs=len(cells) + added,
        gpu_s=gpu_s,
        max_gpu_s=fixed + max(auto + added_s, auto * (1 + budget)),
        gpus=gpus,
        timed=timed,
        floors=tuple(sorted(floors)),
        budgets=tuple(sorted(budgets)),
        epoch_times=tuple(sorted(epoch_times)),
        repeat_floors=tuple(sorted(shares)),
        skipped=everything - len(cells),
    )


def _repeat_seconds(cell: CellSpec) -> float:
    """A solo's repeat's seconds at the least: over ``measure.repeat_floor`` of its floor (a script's
    whole: it runs as written)."""
    cfg = cell.config
    if cell.scripted or cfg.repeats != "auto" or cfg.measure.repeat_floor >= 1:
        return run_seconds(cfg)[0]
    return run_seconds(dataclasses.replace(cfg, repeat=1, floor_share=cfg.measure.repeat_floor))[0]


def plan_gpus(cells: Sequence[CellSpec]) -> int | None:
    """The GPUs a plan's cells fan out over, as this machine sees the cluster (its simulated GPUs, or
    NVML's), at most ``cluster.max_concurrent_cells``; None where the cluster is at an address."""
    from raycolloc.node.gpu.names import local_gpu_names

    cluster = cells[0].config.cluster
    if cluster.address:
        return None
    found = len(local_gpu_names(cluster))
    return min(found, cluster.max_concurrent_cells or found) or None


def plan_mig(cells: Sequence[CellSpec]) -> bool | None:
    """Whether this machine's GPUs can run the plan's MIG cells: False where MIG mode is off on all of
    them (NVML's word, read only), None where that is not known before Ray is asked (no MIG cell,
    simulated GPUs, a cluster at an address)."""
    from raycolloc.node.gpu.names import local_mig_enabled

    if not any(mode_of(c.mode).partitioned for c in cells):
        return None
    return local_mig_enabled(cells[0].config.cluster)
