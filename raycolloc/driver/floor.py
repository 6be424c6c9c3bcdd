"""A solo baseline's repeats over a shorter floor, where its first run held steady (``measure.repeat_floor``).

A measured epoch runs at least its floor (``min_epoch_s``, 5 s on a real GPU): on an H200 a degree-1 epoch
of ~1.7 s moved by a third between two sweeps, and measured for 6 s by 5-6% (``MIN_EPOCH_AUTO_S``). Every
solo is run three times (``measure.min_solo_repeats``: every gain divides by it), each over that floor: on
an H200 the quick matrix's four solo repeats took ~26 s, most of what made its GPU time 1.41x its cells'
once (docs/measurements.md, 2026-12-05). With ``measure.repeat_floor`` below 1 (the default is 1: the whole
floor), where the solo's first run held steady, its repeats measure that share of the floor (0.5: at least
2.5 s, and never fewer steps than an epoch's): each
job's measured epoch had at least :data:`MIN_WINDOWS` windows, and the rate of their later half was within
:data:`DRIFT` of their earlier half's. A first run that drifted, had too few windows, or was not a solo's
keeps the whole floor for its repeats, as does one whose epoch's steps outlast the floor (nothing to save);
so do script jobs (they run as written), time-budgeted epochs (no floor) and every run of a sweep with a
mix (as the learned warm-up, :mod:`raycolloc.driver.warmup`).

Such a repeat's config says so (``floor_share``): it is in the config hash, so a resume with another
``measure.repeat_floor`` runs it again rather than reuse it; the jobs table's ``min_epoch_s`` says each
job's floor; its configuration (``repeat_group``) is its first run's.

Why the whole floor is the default: on two H200s the gate never let a repeat through (no solo's first run
held steady to 2% within 5 s), and on the corpus's H200 runs, where shorter repeats can be read off the
windows (``jobs/floor_whatif.py``), the one solo whose first run held steady had its interval widen from
±11.6% to ±13.4% with repeats cut to 2.5 s (weak evidence: 5 runs; docs/measurements.md, 2026-12-05).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raycolloc.config import measured_floor
from raycolloc.driver.repeats import is_solo
from raycolloc.driver.warmup import listed
from raycolloc.spec import CellSpec

__all__ = ["DRIFT", "MIN_WINDOWS", "Floor", "drift", "judge"]

DRIFT = 0.02  # a steady measured epoch: its later half's rate within 2% of its earlier half's
MIN_WINDOWS = 6  # halves of at least three windows each


@dataclass(frozen=True)
class Floor:
    """What a solo's first run says of its repeats' floor: the share they measure (1: whole), the GPU
    seconds a repeat saves by it, and why."""

    share: float
    saved_s: float
    why: str


def drift(window_steps: Sequence[Any], window_s: Sequence[Any]) -> float | None:
    """An epoch's later half's rate over its earlier half's, less 1 (halves by window, the middle one of
    an odd count left out); None with fewer than :data:`MIN_WINDOWS` windows or a window without time."""
    steps, secs = [int(n) for n in window_steps], [float(t) for t in window_s]
    if len(steps) < MIN_WINDOWS or len(steps) != len(secs) or any(t <= 0 for t in secs):
        return None
    half = len(steps) // 2
    early = sum(steps[:half]) / sum(secs[:half])
    late = sum(steps[-half:]) / sum(secs[-half:])
    return late / early - 1


def judge(spec: CellSpec, epochs: Sequence[Mapping[str, Any]], share: float) -> Floor:
    """The floor of a solo's repeats from its first run (``spec``) and that run's epochs table (rows as
    dicts): ``share`` of it where every job's measured epochs held steady, else the whole floor."""
    floor = measured_floor(spec.config)
    if share >= 1 or not floor or not is_solo(spec):
        return Floor(1.0, 0.0, "whole floor asked" if share >= 1 else "no floor, or not a solo")
    if spec.scripted:
        return Floor(1.0, 0.0, "a script runs as written")
    per_epoch = {job.index: job.steps_per_epoch for job in spec.jobs}
    saved: dict[int, float] = dict.fromkeys(per_epoch, 0.0)
    measured = [r for r in epochs if int(r["epoch"]) >= 2 and int(r["job_index"]) in per_epoch]
    if {int(r["job_index"]) for r in measured} != set(per_epoch):
        return Floor(1.0, 0.0, "a job has no measured epoch")
    for row in measured:
        moved = drift(listed(row.get("window_steps")), listed(row.get("window_s")))
        if moved is None:
            return Floor(1.0, 0.0, f"fewer than {MIN_WINDOWS} windows")
        if abs(moved) > DRIFT:
            return Floor(1.0, 0.0, f"its rate moved {100 * moved:+.1f}% within the epoch")
        wall, steps = float(row.get("wall_s") or 0), int(row.get("steps") or 0)
        if wall > 0 and steps > 0:
            # A repeat runs an epoch's steps or the shorter floor, whichever is longer.
            job = int(row["job_index"])
            saved[job] += max(0.0, wall - max(wall * per_epoch[job] / steps, share * floor))
    # The cell waits for its slowest job: it saves what every job saves. Nothing saved (its steps outlast
    # the floor): the whole floor, so the repeat keeps the hash a whole-floor repeat has.
    least = min(saved.values(), default=0.0)
    if least <= 0:
        return Floor(1.0, 0.0, "its steps outlast the floor: nothing to save")
    return Floor(share, least, f"steady within {100 * DRIFT:g}%")
