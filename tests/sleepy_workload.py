"""A ``workload=python`` job whose steps sleep instead of computing: for tests of where and when cells
run (fan-out across GPUs and nodes), so that four cells on a 2-core machine overlap without slowing each
other, as GPU-bound cells on a real node do."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from torch import nn

from raycolloc.job.workloads.user import JobContext, UserJob

# The words of a cell whose jobs run this workload, 1 ms of each 10 ms step computing: for tests whose
# time-budgeted epochs only hold a cell open (a 5 s epoch of tiny_cnn keeps a core busy for 5 s, on a
# 2-core machine whose suite is bound by its CPU), and the name its jobs get (``<index>-<NAME>``).
WORDS = ("workload=python", "workload.entry=tests.sleepy_workload:build", "workload.args={step_ms:10,busy_ms:1}")
NAME = "sleepy_workload.build"
MEET_WAIT_S = 600.0  # a bound, not a pause: the jobs of a test's cells arrive within its set-up time


def build(ctx: JobContext) -> UserJob:
    """A step of ``args.step_ms`` milliseconds (default 10), the first ``args.busy_ms`` (default 0) of
    them spent computing and the rest asleep, and a one-weight model. (The simulated GPU's SM activity
    follows its jobs' CPU time: a job that only sleeps keeps it at ~0.)

    ``args.meet_dir`` and ``args.meet`` (N): the job's first step waits until N jobs (of any cell, on any
    node of the machine) have made theirs, so that their epochs start together whatever each cell's
    set-up took: a test of cells running at once then rests on that order, not on the set-ups of cells
    on a loaded machine ending within an epoch of each other."""
    seconds = float(ctx.args.get("step_ms", 10)) / 1000.0
    busy = float(ctx.args.get("busy_ms", 0)) / 1000.0
    meet = int(ctx.args.get("meet", 0))
    room = Path(str(ctx.args.get("meet_dir", ""))) if meet else None
    model = nn.Linear(1, 1).to(ctx.device)

    def step() -> torch.Tensor:
        nonlocal room
        if room is not None:
            _meet(room, meet)
            room = None
        start = time.perf_counter()
        while time.perf_counter() - start < busy:
            pass
        time.sleep(max(0.0, seconds - (time.perf_counter() - start)))
        return torch.zeros(())

    return UserJob(model=model, step=step)


HOLD_ENV = "RAYCOLLOC_TEST_HOLD"


def build_held(ctx: JobContext) -> UserJob:
    """:func:`build`, whose first step waits (up to ``MEET_WAIT_S``) until the file named by
    ``$RAYCOLLOC_TEST_HOLD`` exists (first touching that name + ``.reached``): a job that is surely
    running, at its first step, whenever a test
    stops its queue, and that ends in moments once the test lets it go (the environment reaches the job
    from the ``serve`` that started the Ray instance)."""
    job = build(ctx)
    gate = Path(os.environ[HOLD_ENV]) if os.environ.get(HOLD_ENV) else None
    inner = job.step

    def step() -> torch.Tensor:
        nonlocal gate
        if gate is not None:
            gate.with_name(gate.name + ".reached").touch()  # the test knows the job trains
            deadline = time.monotonic() + MEET_WAIT_S
            while not gate.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            gate = None
        return inner()

    return UserJob(model=job.model, step=step)


def _meet(room: Path, count: int) -> None:
    """Say this job arrived (a file named by its pid), then wait for ``count`` arrivals in all."""
    room.mkdir(parents=True, exist_ok=True)
    (room / str(os.getpid())).touch()
    deadline = time.monotonic() + MEET_WAIT_S
    while sum(1 for _ in room.iterdir()) < count and time.monotonic() < deadline:
        time.sleep(0.05)
