"""A solo baseline's repeats over a share of the floor (``measure.repeat_floor``), and one run more.

A measured epoch runs at least its floor (``min_epoch_s``, 5 s on a real GPU): on an H200 a degree-1 epoch
of ~1.7 s moved by a third between two sweeps, and measured for 6 s by 5-6% (``MIN_EPOCH_AUTO_S``). Every
gain divides by a solo, so each is run ``measure.min_solo_repeats`` times (4) over the sweep: its first
run over the whole floor, its repeats over ``measure.repeat_floor`` of it (0.3: at least 1.5 s, and never
fewer steps than an epoch's). A shorter repeat is a noisier one, but a fourth run narrows a t-interval
more than that costs: read off the corpus's H200 runs measured whole (``jobs/floor_whatif.py``, every
choice of first run and repeats, the four configurations of the 2026-12-03 pass with 4-5 runs), four runs
with repeats at 0.3 of the epoch gave a mean 95% interval of ±20.5% against ±25.1% for three whole runs
(narrower in each), for 14.9 s of epochs a solo against 16.1 s (18.0 s against 18.4 s with set-up);
four whole runs gave ±16.3% for 21.1 s. In the quick matrix a repeat's 5 s floor is most of its time, so
there the saving is larger. The short repeats read the rate lower in three of those four configurations
(median -2.5% against their runs measured whole, -1.1% for whole repeats with a learned warm-up): the
start of an epoch is not its whole, and the headline, the median of four runs, follows by a part of it
(docs/measurements.md, 2026-12-05, "Four solo runs, three of them short").

Earlier a shorter floor was gated on the first run's measured windows holding steady (the later half's
rate within 2% of the earlier half's): on two H200s no solo's run ever held (0.7-31% within 5 s), so the
gate never acted. There is no gate now.

Script jobs (they run as written), time-budgeted epochs (no floor) and every run of a sweep with a mix
(as the learned warm-up, :mod:`raycolloc.driver.warmup`) keep the whole floor, as does a repeat whose
epoch's own steps outlast the shorter floor (nothing to save). Such a repeat's config says so
(``floor_share``): it is in the config hash, so a resume with another ``measure.repeat_floor`` runs it
again rather than reuse it; the jobs table's ``min_epoch_s`` says each job's floor; its configuration
(``repeat_group``) is its first run's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raycolloc.config import measured_floor
from raycolloc.driver.repeats import is_solo
from raycolloc.spec import CellSpec

__all__ = ["Floor", "judge"]


@dataclass(frozen=True)
class Floor:
    """What a solo's first run says of its repeats' floor: the share they measure (1: whole), the GPU
    seconds a repeat saves by it, and why."""

    share: float
    saved_s: float
    why: str


def judge(spec: CellSpec, epochs: Sequence[Mapping[str, Any]], share: float) -> Floor:
    """The floor of a solo's repeats from its first run (``spec``) and that run's epochs table (rows as
    dicts): ``share`` of it where that saves time, else the whole floor."""
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
    return Floor(share, least, f"{share:g} of the floor")
