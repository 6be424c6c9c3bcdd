"""A repeat's warm-up, learned from its configuration's first run (``measure.warmup=learned``).

Epoch 1 is warm-up: the study times epoch 2 only. A whole warm-up epoch is what a first run needs, as nothing
is known of its job yet; but that run's warm-up windows (:mod:`raycolloc.job.windows`) show where its steps
settled, and a repeat of the same configuration on the same GPU model settles there too. So a repeat warms up
through the window from which its first run's warm-up ran as its measured epoch did (no later window 3% slower
than the slowest measured one, their mean within 3% of the measured windows' median), and one window more,
never less than two windows nor more than 80% of the epoch: on an H200 a degree-1 cell of the quick matrix
spent ~3.4 s of its ~10 s warming up (2026-12-04, ``jobs/check_cost.sh``), and its repeats are what
``repeats=auto`` adds.

The measured epochs are unchanged (same floor, same samples), so a repeat measures what its first
run measured; the warm-up row of its epochs table says how many steps it warmed up (its ``samples``
fewer than the job's ``epoch_samples``). Whole warm-ups remain where the warm-up's length is part of
what is reported or set: script jobs (they run as written), time-budgeted epochs (``epoch_time_s``: the
budget is the user's) and every run of a sweep with a mix (a mix's headline is its total time, warm-up
included, compared with its solos' time per sample, every epoch). A first run without windows, or one
whose warm-up never settled early, teaches nothing.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from raycolloc.spec import CellSpec

__all__ = ["MIN_WINDOWS", "Learned", "learn", "listed", "with_warmup"]

MIN_WINDOWS = 2  # a learned warm-up covers at least two of its first run's windows (one after the first step's costs)
SLACK = 0.03  # a settled warm-up tail's mean rate is within 3% of the measured windows' median
MOST = 0.8  # a learned warm-up of more than 80% of the epoch saves too little to differ from a whole one


@dataclasses.dataclass(frozen=True)
class Learned:
    """What a first run teaches its repeats: each job's warm-up steps, and the seconds a cell saves."""

    steps: Mapping[int, int]
    saved_s: float


def listed(value: Any) -> list[Any]:
    """A list column's value as a list (a list from Arrow, an array from pandas; None: empty)."""
    return [] if value is None else list(value)


def _rates(steps: list[Any], seconds: list[Any]) -> list[float]:
    if not steps or len(steps) != len(seconds):
        return []
    return [int(n) / float(t) if float(t) > 0 else 0.0 for n, t in zip(steps, seconds, strict=True)]


def _settled(warm: list[float], measured: list[float]) -> int:
    """The first warm-up window from which the warm-up ran as its measured epoch did: no window after it
    more than ``SLACK`` slower than the slowest measured window, and their mean within ``SLACK`` of the
    measured windows' median (a tail still climbing towards the rate fails the second); ``len(warm)``: never."""
    slowest, typical = min(measured), statistics.median(measured)
    for i in range(len(warm)):
        tail = warm[i:]
        if min(tail) >= (1 - SLACK) * slowest and statistics.fmean(tail) >= (1 - SLACK) * typical:
            return i
    return len(warm)


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
        window_steps, window_s = [int(n) for n in listed(warm.get("window_steps"))], listed(warm.get("window_s"))
        warm_rates = _rates(window_steps, window_s)
        measured_rates = [
            r for r in _rates(listed(measured.get("window_steps")), listed(measured.get("window_s"))) if r > 0
        ]
        if len(warm_rates) <= MIN_WINDOWS or not measured_rates:
            continue
        settled = _settled(warm_rates, measured_rates)
        upto = max(MIN_WINDOWS, settled + 2)  # through the settled window, and one more
        learned = sum(window_steps[:upto])
        if settled == len(warm_rates) or learned > MOST * sum(window_steps):
            continue
        steps[job] = learned
        spent.append(sum(float(t) for t in window_s[upto:]))
    # The cell waits for its slowest job at the barrier after the warm-up: it saves what every job saves.
    return Learned(steps, min(spent) if spent and len(steps) == len(by_job) else 0.0)


def with_warmup(spec: CellSpec, learned: Learned) -> CellSpec:
    """``spec`` with each job's learned warm-up (jobs that run as written, and those ``learned`` leaves
    out, warm up a whole epoch); its config hash is unchanged (the measured epochs are the same)."""
    jobs = tuple(
        dataclasses.replace(job, warmup_steps=learned.steps[job.index])
        if job.index in learned.steps
        and not job.workload.as_written
        and not job.epoch_time_s
        and job.steps_per_epoch > learned.steps[job.index]
        else job
        for job in spec.jobs
    )
    return dataclasses.replace(spec, jobs=jobs)
