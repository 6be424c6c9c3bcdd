"""Gains and mixes with their intervals, once: the rules the report (:mod:`analysis.gains`,
:mod:`analysis.mixed`) and the sweep's summary (:mod:`raycolloc.results.summary_tables`) both apply.

Pure Python on :class:`~raycolloc.results.stats.Interval` (no pandas, no pyarrow): the driver's summary
runs it without loading either, the report row by row from its frames (issue 45: the two were written
twice and no test compared them).

- **A configuration** is its runs summarised by its ``measure.statistic`` with the runs' t-interval;
  one run keeps its within-run interval (:func:`configuration`).
- **A run's reference value** is the reference's run of the same repeat index (repeats are
  interleaved, so those ran closest in time; several of them: their median), else the reference
  configuration's value (:func:`paired_value`).
- **A run's ratio** (a gain, energy against the solo) is its value over that reference value; its
  interval propagates the run's own and the reference configuration's (the delta method), scaled
  around the ratio shown (:func:`run_ratio`).
- **A job's epoch-2 time** is its epoch's samples at its measured rate (:func:`epoch_time`): a measured
  epoch that ran past its samples (its floor, ``min_epoch_s``) or was cut by a time budget took another
  length. **A job's slowdown** is its seconds per sample against its solo's (:func:`sample_time`, the
  solo's runs' mean).
- **The best reference** of several configurations is the one of the highest value (:func:`best`).
- **A mixed run** against its jobs one after the other: its total time (or energy) over the sum of each
  job's alone (each with its solo's interval, summed in quadrature) (:func:`over_sequential`); a time's
  as a change in percent (:func:`as_change`). A job alone is its samples at its solo's time per sample
  over every epoch, as the job trains them: a solo's epochs measured over a floor count at the length of
  the job's own (:func:`as_its_epochs`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from raycolloc.results.stats import Interval, point, ratio_interval, scaled, sum_interval, summarise

__all__ = [
    "SOLO_MATCH",
    "as_change",
    "as_its_epochs",
    "best",
    "configuration",
    "epoch_time",
    "over_sequential",
    "paired_value",
    "run_ratio",
    "sample_time",
    "solo_time_per_sample",
    "whole_warmup",
]

K = TypeVar("K", bound=Hashable)

SOLO_MATCH: tuple[str, ...] = ("workload", "batch_size", "epochs", "epoch_samples", "epoch_time_s")
"""The jobs-table columns a mixed run's job and the solo it is compared with share (besides the mode, the
GPU and the trainer's settings). Not the floor (``min_epoch_s``): a mix's jobs run none, and its solos
run the floor of a uniform cell of their settings (:func:`raycolloc.driver.mix_solos.mix_solos`)."""


def configuration(runs: Sequence[Interval], statistic: str, *, lower_is_better: bool = False) -> Interval | None:
    """A configuration's runs as one value with its 95% interval (None without a run): several runs,
    their ``statistic`` and t-interval; one run, its own interval (a point where it has none)."""
    if not runs:
        return None
    within = runs[0] if len(runs) == 1 else None
    return summarise([r.value for r in runs], statistic, within, lower_is_better=lower_is_better)


def paired_value(repeat: object, reference: Sequence[tuple[object, float]], whole: Interval) -> float:
    """The reference value a run of index ``repeat`` is divided by: the median of the reference's runs
    ``(repeat, value)`` of that index, else ``whole`` (the reference configuration's value)."""
    same = [value for index, value in reference if index == repeat]
    return statistics.median(same) if same else whole.value


def run_ratio(value: Interval, paired: float, whole: Interval) -> Interval | None:
    """One run's ``value`` over its ``paired`` reference value, with the run's and the reference
    configuration's (``whole``) intervals propagated, scaled around the ratio; None where a
    reference is 0."""
    if paired == 0 or whole.value == 0:
        return None
    return scaled(ratio_interval(value, whole), value.value / paired)


def best(configurations: Mapping[K, Interval]) -> K | None:
    """The key of the configuration of the highest value (the first of equals); None if there is none."""
    top: K | None = None
    for key, found in configurations.items():
        if top is None or found.value > configurations[top].value:
            top = key
    return top


def over_sequential(total: Interval, alone: Sequence[Interval]) -> Interval | None:
    """A mixed run's ``total`` (time, or energy) over running its jobs one after the other: the sum of
    each job's ``alone``, their intervals in quadrature where every job's is known (one job's solo
    without a spread leaves the sum without one); None where a job has no solo or the sum is 0."""
    if not alone:
        return None
    serial = sum_interval(alone) if all(a.known for a in alone) else point(sum(a.value for a in alone))
    if serial.value == 0:
        return None
    return ratio_interval(total, serial)


def as_change(ratio: Interval) -> Interval:
    """A ratio to sequential as a change in percent (``-12``: collocated is 12% faster)."""
    return Interval(100 * (ratio.value - 1), 100 * (ratio.low - 1), 100 * (ratio.high - 1), ratio.n, ratio.method)


def _known(value: object) -> float | None:
    """A positive number, or None (absent, null, NaN, zero)."""
    if value is None or isinstance(value, str | bool):
        return None
    number = float(value)  # type: ignore[arg-type]
    return number if number > 0 and not math.isnan(number) else None


def _in_batches(samples: float | None, batch: float | None) -> float | None:
    """An epoch's samples as it trains them: whole batches, at least one (``JobSpec.steps_per_epoch``);
    ``samples`` where the batch is unknown."""
    return float(max(1, int(samples // batch)) * batch) if samples and batch else samples


def epoch_time(job: Mapping[str, object]) -> float | None:
    """A job's epoch-2 time as the study means it, one epoch of its ``epoch_samples`` in whole batches (a
    jobs-table row), at its measured rate (``epoch2_samples_per_s``). A measured epoch runs at least its
    floor (5 s on a real GPU: more steps than its samples), or ends at its time budget, so its wall time is
    the floor's or the budget's for every job alike (found 2026-12-05). ``epoch2_s`` where the samples or
    the rate are not known (a script's epochs are its own)."""
    samples, per_s, batch = (_known(job.get(k)) for k in ("epoch_samples", "epoch2_samples_per_s", "batch_size"))
    samples = _in_batches(samples, batch)
    return samples / per_s if samples and per_s else _known(job.get("epoch2_s"))


def sample_time(job: Mapping[str, object]) -> float | None:
    """A job's seconds per sample in its measured epoch (1 / ``epoch2_samples_per_s``; None: no rate): what
    a slowdown compares, whatever the epoch's length (its floor, its budget, its ``epoch_samples``: a
    slowdown of wall times said 1.00 at every degree on an H200, 2026-12-05)."""
    per_s = _known(job.get("epoch2_samples_per_s"))
    return 1.0 / per_s if per_s else None


def as_its_epochs(
    job: Mapping[str, object], total: object, measured: object, measured_samples: object
) -> tuple[float, float] | None:
    """A solo job's ``total`` (seconds, or joules) over every epoch and its samples, as a job of its settings
    trains them without a floor; None where they are unknown.

    A mix's jobs run no floor (``config.measured_floor``), while on a GPU a solo's measured epochs run at
    least ``min_epoch_s`` (a jobs-table column), more steps than an epoch's: its time per sample, warm-up
    included, weighed the warm-up less than the mix's job's own epochs do, and the sequential time came
    short. Its ``measured`` part (over ``measured_samples``) is replaced by its own epochs' samples
    (``epochs`` - 1 of ``epoch_samples``, in whole batches) at the measured rate. What an epoch pays once
    (its iterator's start, its last synchronise) is spread over the floor's steps, so a short epoch's
    share of it is still missing. A job of no floor, a time-budgeted one and one raycolloc does not step
    (a script: no batch size) are as they ran; a floored one whose measured part is unknown or does not add
    up is None."""
    whole, samples = _known(total), _known(job.get("samples"))
    epochs, per_epoch, batch = (_known(job.get(k)) for k in ("epochs", "epoch_samples", "batch_size"))
    if whole is None or samples is None:
        return None
    if (
        _known(job.get("min_epoch_s")) is None
        or _known(job.get("epoch_time_s"))
        or not (epochs and per_epoch and batch)
    ):
        return whole, samples
    part, part_n = _known(measured), _known(measured_samples)
    if not (part and part_n and part < whole and part_n < samples):
        return None
    own = (int(epochs) - 1) * (_in_batches(per_epoch, batch) or per_epoch)
    return whole - part + own * part / part_n, samples - part_n + own


def solo_time_per_sample(job: Mapping[str, object], epochs: Sequence[Mapping[str, object]]) -> float | None:
    """A solo job's seconds per sample over every epoch, warm-up included, as a mix's job of its settings
    trains them (:func:`as_its_epochs`), from its jobs-table row and its epochs' rows; None where its
    warm-up was not whole (:func:`whole_warmup`) or its time or samples are unknown."""
    warm = sum(_known(e.get("samples")) or 0 for e in epochs if e.get("warmup"))
    measured = sum(_known(e.get("samples")) or 0 for e in epochs if not e.get("warmup"))
    if not whole_warmup(warm, job.get("epoch_samples"), job.get("epoch_time_s"), job.get("batch_size")):
        return None
    found = as_its_epochs(job, job.get("total_s"), job.get("measured_s"), measured)
    return found[0] / found[1] if found is not None else None


def whole_warmup(warmup_samples: object, epoch_samples: object, epoch_time_s: object, batch_size: object) -> bool:
    """Whether a job warmed up a whole epoch (its ``epoch_samples`` in whole batches), as every first run
    does; a repeat's learned warm-up (``measure.warmup=learned``) ran fewer. A time-budgeted epoch's
    warm-up is never shortened, and a job whose counts are unknown counts as whole. The mix tables' solo
    time per sample (warm-up included) is taken from whole warm-ups only, in the report and the summary
    alike. (Against ``epoch_samples`` itself, every epoch not a whole number of batches, as the paper's
    workloads' 50,000 CIFAR-10 samples at 128, fell short: no mix had a solo, 2026-12-05.)"""
    warm, samples = _known(warmup_samples), _in_batches(_known(epoch_samples), _known(batch_size))
    return warm is None or samples is None or _known(epoch_time_s) is not None or warm >= samples
