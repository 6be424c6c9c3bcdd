"""A queued job's own output, kept (``JobSpec.log_path``): what the live queue's ``logs JOB`` prints.

A sweep's training process writes to its trainer actor's log and says nothing of its own (its rows say
it). A job of the live queue has a file instead: :func:`output_to` sends the process's stdout and stderr
there at the file descriptors (torch's and the workload's writes to fd 2 are kept too), and
:func:`said` adds a line at set-up and one per epoch, so a timm or python job's log shows how far it
got, as a script's own epoch lines do.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from raycolloc.spec import JobSpec, JobState

__all__ = ["output_to", "said"]


def output_to(path: str) -> None:
    """Send this process's stdout and stderr to the end of ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def said(job: JobSpec, state: JobState, first: int) -> JobState:
    """Where ``job``'s set-up (``first`` 0) or its epochs from ``first`` on got to, in its kept output
    (nothing where it keeps none); returns ``state``."""
    if not job.log_path:
        return state
    if first == 0:
        print(f"raycolloc: {job.workload.name} set up ({state.status})", flush=True)
    for e in state.epochs:
        if first and e.epoch >= first:
            rate = f"{e.samples_per_s:,.1f} samples/s" if e.samples_per_s else "-"
            loss = f" loss={e.loss:.4f}" if e.loss is not None else ""
            print(f"raycolloc: epoch {e.epoch} {e.samples or 0} samples in {e.wall_s:.2f} s ({rate}){loss}", flush=True)
    if not state.ok:
        print(f"raycolloc: {state.status}: {state.error}", file=sys.stderr, flush=True)
    return state
