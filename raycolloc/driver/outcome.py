"""How a sweep ended, for the shell and for whoever reads its last lines.

The exit status tells whether every cell has a result (docs/results.md, "Exit status"):

* ``0`` every cell has a result: ``ok``, ``partial``, ``oom`` or ``unfit`` (a measurement, or a
  verdict a re-run would repeat);
* ``1`` some cells have none: ``error``, ``hang``, ``skipped`` (the cluster cannot run them), no
  GPU lease; the last lines name each one and why, and a re-run tries exactly those again;
* ``2`` refused before anything ran: a config error, the output directory held by another sweep,
  an output directory that is a file or not writable;
* ``3`` results could not be written (disk full, directory gone): the cells written before are
  intact and a re-run resumes from them;
* ``130`` interrupted (Ctrl-C, SIGINT), ``143`` terminated (SIGTERM: ``timeout``, Slurm,
  Kubernetes): the running cells wrote nothing, released their GPUs (MPS daemons stopped, MIG
  layouts restored), and Ray was shut down; a re-run resumes. A second signal ends the command at
  once with 128 + its number (:mod:`raycolloc.driver.signals`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raycolloc.results.rows import RESULT_STATUSES

if TYPE_CHECKING:
    from raycolloc.driver.engine import CellResult

__all__ = [
    "EXIT_CONFIG",
    "EXIT_INTERRUPTED",
    "EXIT_MISSING",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_WRITE",
    "Outcome",
    "SweepEnded",
    "closing_lines",
    "exit_code",
    "print_outcome",
]

EXIT_OK = 0
EXIT_MISSING = 1
EXIT_CONFIG = 2
EXIT_WRITE = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


@dataclass(frozen=True)
class Outcome:
    """How a sweep plan ended (:func:`raycolloc.driver.plan.run`): each cell's result and the exit status
    the command line gives for it."""

    results: tuple[CellResult, ...]
    code: int


class SweepEnded(BaseException):
    """How a sweep run inside Hydra ended, when not with exit 0: its outcome (a non-zero status), or the
    exception that ended it (its ``__cause__``, ``outcome`` None), carried to the command line's main,
    which chooses the exit status. A ``BaseException``, as ``KeyboardInterrupt`` is: Hydra drops what a task
    or a launcher returns, and reports an ``Exception`` raised by a task itself ("Error executing job")."""

    def __init__(self, outcome: Outcome | None = None) -> None:
        self.outcome = outcome
        super().__init__("the sweep ended" + (f" with exit status {outcome.code}" if outcome is not None else ""))


def _missing(results: Sequence[CellResult]) -> list[CellResult]:
    return [r for r in results if r.status not in RESULT_STATUSES]


def exit_code(results: Sequence[CellResult]) -> int:
    """``EXIT_OK`` when every cell ended with a result, else ``EXIT_MISSING``."""
    return EXIT_MISSING if _missing(results) else EXIT_OK


def closing_lines(results: Sequence[CellResult]) -> list[str]:
    """The sweep's last lines: how many cells have a result, and each one without one and why."""
    missing = _missing(results)
    lines = [f"{len(results) - len(missing)} of {len(results)} cells have a result (exit {exit_code(results)})"]
    for r in missing:
        reason = (r.reason or "no reason recorded").replace("\n", " ")
        lines.append(f"  no result: {r.cell.label} ({r.cell.cell_id}) status={r.status}: {reason[:600]}")
    if missing:
        lines.append("  a re-run of the same command runs exactly these cells again")
    return lines


def print_outcome(results: Sequence[CellResult]) -> int:
    """Print the closing lines; returns the exit status."""
    for line in closing_lines(results):
        print(line, flush=True)
    return exit_code(results)
