"""One epoch's row, from what the training process measured of it: its wall time, its windows
(:mod:`raycolloc.job.windows`), its training thread's CPU time and scheduling, and its peak memory;
and the fault a test injects into an epoch (``trainer.fault``). (No thread may start here: the
training process imports this before it pins itself.)"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import NoReturn

from raycolloc.job.measure import as_int
from raycolloc.job.windows import WindowStats, window_stats
from raycolloc.results.rows import EpochRow
from raycolloc.spec import JobSpec

__all__ = ["EpochTimes", "epoch_row", "inject_fault"]


@dataclass(frozen=True)
class EpochTimes:
    """What the clocks said of one epoch: when it began (wall clock), how long it took (from one
    synchronise to the next), how many steps it ran and its windows' ``(steps, seconds)``."""

    start_ts: float
    wall_s: float
    steps: int
    windows: list[tuple[int, float]]


def epoch_row(
    job: JobSpec,
    epoch: int,
    times: EpochTimes,
    loss: float | None,
    usage: dict[str, float],
    peak_mib: tuple[float, float] | None,
) -> EpochRow:
    """The epochs table's row; ``usage`` is the training thread's :func:`~raycolloc.job.measure.thread_usage`
    over the epoch, ``peak_mib`` PyTorch's peak allocated and reserved device memory (None off CUDA)."""
    samples = times.steps * job.batch_size
    rate = samples / times.wall_s
    # The study's metric is samples over wall time; the windows give its interval (windows.py says why).
    timed: WindowStats = window_stats(times.windows, job.batch_size, rate)
    return EpochRow(
        cell_id=job.cell_id,
        job_index=job.index,
        epoch=epoch,
        warmup=epoch == 1,
        start_ts=times.start_ts,
        end_ts=times.start_ts + times.wall_s,
        wall_s=times.wall_s,
        samples=samples,
        samples_per_s=rate,
        windows=timed.windows,
        rate_low=timed.rate_low,
        rate_high=timed.rate_high,
        rate_cv=timed.rate_cv,
        rate_median=timed.rate_median,
        window_steps=[int(n) for n, _ in times.windows],
        window_s=[float(t) for _, t in times.windows],
        loss=loss,
        steps=times.steps,
        # The training thread's CPU time (user + system): near wall_s means the job is bound by
        # its CPU thread; system time and page faults show time spent in the kernel.
        thread_cpu_s=usage["thread_cpu_s"],
        thread_sys_s=usage.get("thread_sys_s"),
        minor_faults=as_int(usage.get("minor_faults")),
        involuntary_switches=as_int(usage.get("involuntary_switches")),
        voluntary_switches=as_int(usage.get("voluntary_switches")),
        peak_mem_allocated_mib=peak_mib[0] if peak_mib else None,
        peak_mem_reserved_mib=peak_mib[1] if peak_mib else None,
    )


def inject_fault(job: JobSpec) -> NoReturn:
    """The failure ``trainer.fault`` asks for, half-way through the epoch's ``epoch_samples`` (early in
    one that ``min_epoch_s`` makes longer) or through its ``epoch_time_s``, whichever comes first: an
    out-of-memory, a crash without a word (``exit``), a hang, or an error."""
    import torch

    kind = job.trainer.fault
    if kind == "oom":
        raise torch.OutOfMemoryError(f"injected out of memory (trainer.fault=oom, job {job.index})")
    if kind == "exit":
        os._exit(3)  # a crash: the process dies without a word
    if kind == "hang":
        time.sleep(10**6)
    raise RuntimeError(f"injected error (trainer.fault=error, job {job.index})")
