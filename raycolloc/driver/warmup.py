"""A repeat's warm-up, learned from its configuration's first run (``measure.warmup=learned``).

Epoch 1 is warm-up: the study times epoch 2 only. A whole warm-up epoch is what a first run needs, as
nothing is known of its job yet; but that run's warm-up windows (:mod:`raycolloc.job.windows`) show
where its steps settled, and a repeat of the same configuration on the same GPU model settles there
too. So a repeat warms up through the window where its first run's warm-up rate had reached the
slowest of its measured windows (and stayed there), and one window more, never less than two windows
nor more than the epoch: on an H200 a degree-1 cell of the quick matrix spent ~3.4 s of its ~10 s
warming up (2026-12-04, ``jobs/check_cost.sh``), and its repeats are what ``repeats=auto`` adds.

The measured epochs are unchanged (same floor, same samples), so a repeat measures what its first
run measured; the warm-up row of its epochs table says how many steps it warmed up. Script jobs run
as written (no step of theirs is raycolloc's) and a first run without windows teaches nothing: they
warm up a whole epoch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from raycolloc.spec import CellSpec

__all__ = ["MIN_WINDOWS", "Learned", "learn", "learn_from", "with_warmup"]

MIN_WINDOWS = 2  # a learned warm-up covers at least two of its first run's windows (one after the first step's costs)
SLACK = 0.02  # a warm-up window within 2% of the slowest measured window has settled (rates move that much)
MOST = 0.8  # a learned warm-up of more than 80% of the epoch saves too little to differ from a whole one


@dataclasses.dataclass(frozen=True)
class Learned:
    """What a first run teaches its repeats: each job's warm-up steps, and the seconds a cell saves."""

    steps: Mapping[int, int]
    saved_s: float


def _seq(value: Any) -> list[Any]:
    """A list column's value as a list (a list from Arrow, an array from pandas; None: empty)."""
    return [] if value is None else list(value)


def _rates(steps: list[Any], seconds: list[Any]) -> list[float]:
    if not steps or len(steps) != len(seconds):
        return []
    return [int(n) / float(t) if float(t) > 0 else 0.0 for n, t in zip(steps, seconds, strict=True)]


def learn(epochs: Sequence[Mapping[str, Any]]) -> Learned:
    """Each job's warm-up steps from a first run's epochs table (rows as dicts); jobs it teaches
    nothing (no windows, never settled, or settled late) are left out: they warm up a whole epoch."""
    by_job: dict[int, dict[int, Mapping[str, Any]]] = {}
    for row in epochs:
        by_job.setdefault(int(row["job_index"]), {})[int(row["epoch"])] = row
    steps: dict[int, int] = {}
    spent: list[float] = []  # each learning job's warm-up seconds past its learned steps (its first run's)
    for job, rows in sorted(by_job.items()):
        warm, measured = rows.get(1), rows.get(2)
        if warm is None or measured is None:
            continue
        window_steps, window_s = [int(n) for n in _seq(warm.get("window_steps"))], _seq(warm.get("window_s"))
        warm_rates = _rates(window_steps, window_s)
        measured_rates = [
            r for r in _rates(_seq(measured.get("window_steps")), _seq(measured.get("window_s"))) if r > 0
        ]
        if len(warm_rates) <= MIN_WINDOWS or not measured_rates:
            continue
        floor = min(measured_rates) * (1 - SLACK)
        # The first window from which every warm-up window ran at least as fast as the slowest measured one.
        settled = len(warm_rates)
        while settled > 0 and warm_rates[settled - 1] >= floor:
            settled -= 1
        upto = max(MIN_WINDOWS, settled + 2)  # through the settled window, and one more
        learned = sum(window_steps[:upto])
        if settled == len(warm_rates) or learned > MOST * sum(window_steps):
            continue
        steps[job] = learned
        spent.append(sum(float(t) for t in window_s[upto:]))
    # The cell waits for its slowest job at the barrier after the warm-up: it saves what every job saves.
    return Learned(steps, min(spent) if spent and len(steps) == len(by_job) else 0.0)


def learn_from(cell_dir: Path) -> Learned:
    """:func:`learn` from a finished cell's directory (nothing learned where its table is unreadable)."""
    from raycolloc.results.store import read_table

    try:
        rows = read_table(cell_dir, "epochs").to_pylist()
    except Exception:  # noqa: BLE001 - a first run's unreadable table teaches nothing; its repeat warms up whole
        return Learned({}, 0.0)
    return learn(rows)


def with_warmup(spec: CellSpec, learned: Learned) -> CellSpec:
    """``spec`` with each job's learned warm-up (jobs that run as written, and those ``learned`` leaves
    out, warm up a whole epoch); its config hash is unchanged (the measured epochs are the same)."""
    jobs = tuple(
        dataclasses.replace(job, warmup_steps=learned.steps[job.index])
        if job.index in learned.steps and not job.workload.as_written and job.steps_per_epoch > learned.steps[job.index]
        else job
        for job in spec.jobs
    )
    return dataclasses.replace(spec, jobs=jobs)
