"""Sweep progress: cells queued / leasing / running / done, and each running job's epoch and step.

One :class:`ProgressBoard` actor per Ray cluster, detached like a node's steward and shared by the
sweeps on it, each under a key of its own (:class:`Board`, what a sweep holds): the driver's lane
threads set each cell's state, and each trainer pushes its job's progress to it directly (fire and
forget). The driver polls its own sweep's part and draws tqdm bars (on a terminal) or prints one line
per change (logs); at its end it drops that part. A board per sweep cost a Ray worker process (~1.3
CPU-seconds of start-up, 65 times in the test suite) to hold a few records. What it holds is typed
(:class:`~raycolloc.spec.CellProgress`, :class:`~raycolloc.spec.JobProgress`).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import ray

from raycolloc.driver.cost import minutes, plan_cost, run_seconds
from raycolloc.spec import CellProgress, CellSpec, JobProgress

if TYPE_CHECKING:
    from ray.actor import ActorClass

__all__ = ["Board", "ProgressBoard", "ProgressView", "open_board"]

# The version is in the name: a cluster that outlives an upgrade keeps the old board under the old name.
BOARD_NAME = "raycolloc:progress:v3"
STALE_S = 24 * 3600.0  # a sweep silent this long had its driver killed: its part goes


@ray.remote(num_cpus=0)
class ProgressBoard:
    """The progress state of every sweep on the cluster, by sweep key (one small detached actor)."""

    def __init__(self) -> None:
        self.sweeps: dict[str, dict[str, CellProgress]] = {}
        self.touched: dict[str, float] = {}

    def _cell(self, sweep: str, key: str) -> CellProgress:
        now = self.touched[sweep] = time.time()
        cells = self.sweeps.setdefault(sweep, {})
        cell = cells[key] = replace(cells.get(key) or CellProgress(), updated=now)
        return cell

    def cell(self, sweep: str, key: str, state: str, status: str | None = None) -> None:
        """A cell's state (and its status, once done)."""
        cell = self._cell(sweep, key)
        self.sweeps[sweep][key] = replace(cell, state=state, status=status if status is not None else cell.status)

    def job(self, sweep: str, key: str, job_index: int, progress: JobProgress) -> None:
        """A trainer's progress: epoch, step, steps per epoch, samples per second."""
        self._cell(sweep, key).jobs[job_index] = progress

    def snapshot(self, sweep: str) -> dict[str, CellProgress]:
        return self.sweeps.get(sweep, {})

    def forget(self, sweep: str) -> None:
        """The sweep ended: its part goes, and so does that of any sweep silent for ``STALE_S``."""
        now = time.time()
        for key in [sweep, *(k for k, t in self.touched.items() if now - t > STALE_S)]:
            self.sweeps.pop(key, None)
            self.touched.pop(key, None)


@dataclass(frozen=True)
class Board:
    """One sweep's part of the cluster's progress board: what its lanes, cells and trainers call."""

    actor: Any
    sweep: str

    def cell(self, key: str, state: str, status: str | None = None) -> None:
        """Set a cell's state, and its status once done (fire and forget)."""
        self.actor.cell.remote(self.sweep, key, state, status)

    def job(self, key: str, job_index: int, progress: JobProgress) -> None:
        """A job's progress (fire and forget: a lost update is redrawn a second later)."""
        self.actor.job.remote(self.sweep, key, job_index, progress)

    def snapshot(self, timeout: float = 10.0) -> dict[str, CellProgress]:
        """Every cell of the sweep that has reported: its state, and its jobs' progress."""
        snap: dict[str, CellProgress] = ray.get(self.actor.snapshot.remote(self.sweep), timeout=timeout)
        return snap

    def close(self) -> None:
        """The sweep ended: its part of the board goes (fire and forget)."""
        self.actor.forget.remote(self.sweep)


def open_board(namespace: str) -> Board:
    """This sweep's part of the cluster's board (the board is created by the first sweep)."""
    # cast: what @ray.remote made of the class (mypy sees the class itself through the decorator's stub).
    board = cast("ActorClass[ProgressBoard]", ProgressBoard)
    actor = board.options(name=BOARD_NAME, namespace=namespace, lifetime="detached", get_if_exists=True).remote()
    return Board(actor, f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}")


def _job_fraction(jobs: dict[int, JobProgress]) -> float:
    parts = []
    for p in jobs.values():
        epochs, steps = max(1, p.epochs), max(1, p.steps)
        parts.append(((p.epoch - 1) * steps + p.step) / (epochs * steps))
    return max(0.0, min(1.0, sum(parts) / len(parts))) if parts else 0.0


class ProgressView:
    """Draws the board: a bar for the sweep and one per running cell (tqdm), or log lines; both say
    about how long is left (:meth:`left_s`)."""

    def __init__(self, cells: Sequence[CellSpec], board: Board, lanes: int = 1) -> None:
        self.labels: dict[str, str] = {}
        self.plan_s: dict[str, float] = {}  # each cell's run as the plan line counts it (cost.run_seconds)
        self.board, self.lanes = board, max(1, lanes)
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        # How often the driver redraws: each redraw is a call to the board (issue 30: the driver's own
        # CPU time is taken from the node's cores while jobs measure; it was 0.5 s). Not slower: a log
        # prints the states it sees, and a state shorter than the interval (a 4 s warm-up) would be missed.
        self.every_s = 1.0
        self._last: dict[str, str] = {}
        self._bars: dict[str, Any] = {}
        self._main: Any = None
        # Runs the plan line counts that are not cells yet: the solo baselines' repeats, which
        # repeats=auto adds as their first runs end (each at the plan's seconds of one of them).
        plan = plan_cost(cells, lanes)
        self._take(cells)
        self.pending = plan.runs - len(cells)
        self.pending_s = (plan.gpu_s - sum(self.plan_s.values())) / max(1, self.pending)
        self.timed = plan.timed  # every epoch's length known: else the plan's seconds are a floor
        if self.tty:
            from tqdm import tqdm

            self._tqdm = tqdm
            # tqdm's own "<remaining" is left out: the postfix says the estimate below, the plan's at first.
            self._main = tqdm(
                total=len(self.labels),
                desc="cells",
                unit="cell",
                position=0,
                dynamic_ncols=True,
                bar_format="{desc} {bar} {n_fmt}/{total_fmt} [{elapsed}] {postfix}",
            )

    def add(self, cells: Sequence[CellSpec], reused: Sequence[CellSpec] = ()) -> None:
        """Cells added while the sweep runs (``repeats=auto``): the sweep's total grows. The solo
        baselines' repeats among them, and those found on disk (``reused``), are runs the plan counted."""
        from raycolloc.driver.repeats import is_solo

        self.pending = max(0, self.pending - sum(1 for c in [*cells, *reused] if is_solo(c)))
        self._take(cells)
        if self._main is not None and cells:
            self._main.total = len(self.labels)

    def _take(self, cells: Sequence[CellSpec]) -> None:
        """``cells``' labels and their runs' seconds as the plan counts them (new dicts: refresh() may be
        reading the old ones)."""
        self.labels = {**self.labels, **{c.cell_id: c.label for c in cells}}
        self.plan_s = {**self.plan_s, **{c.cell_id: run_seconds(c.config)[0] for c in cells}}

    def left_s(self, snap: dict[str, CellProgress], now: float | None = None) -> float:
        """About how many seconds the sweep has left. Before any cell is done: the plan's seconds of the
        cells not done (the running ones' less what they trained) and of the runs it counts that are not
        cells yet, over the lanes. Then: the sweep's pace so far (seconds since it started per planned
        second finished, the running ones in part) times the planned seconds left (a solo's repeat over
        a share of its floor counts as the shorter run it is). Re-runs for intervals are not foreseen."""
        elapsed = (time.monotonic() if now is None else now) - self.started
        left: dict[str, float] = {}
        for key in self.labels:
            cell = snap.get(key, CellProgress())
            if cell.state != "done":
                left[key] = 1.0 - (_job_fraction(cell.jobs) if cell.state not in ("queued", "leasing") else 0.0)
        planned = sum(self.plan_s[k] * f for k, f in left.items()) + self.pending * self.pending_s
        if len(left) == len(self.labels):  # no cell done yet
            return max(0.0, planned / self.lanes)
        # The done cells and the running ones' part, in the plan's seconds (each run's at least its set-up).
        finished = sum(self.plan_s[k] * (1.0 - left.get(k, 0.0)) for k in self.labels)
        return elapsed / finished * planned

    def refresh(self) -> None:
        try:
            snap = self.board.snapshot()
        except Exception:  # noqa: BLE001
            return
        labels = self.labels
        states = {k: snap.get(k, CellProgress()).state for k in labels}
        done = sum(1 for s in states.values() if s == "done")
        running = sum(1 for s in states.values() if s not in ("queued", "leasing", "done"))
        leasing = sum(1 for s in states.values() if s == "leasing")
        said = "at least" if done == 0 and not self.timed else "about"  # the plan's seconds, or the pace
        left = f"{said} {minutes(self.left_s(snap))} left" if done < len(labels) or self.pending else "all done"
        if not self.tty:
            for key, state in states.items():
                line = f"{state}" + (f" status={snap[key].status}" if state == "done" else "")
                if self._last.get(key) != line:
                    self._last[key] = line
                    print(
                        f"[sweep] cell {labels[key]}: {line}  (done {done}/{len(labels)}, "
                        f"running {running}, waiting for a GPU {leasing}; {left})",
                        file=sys.stderr,
                        flush=True,
                    )
            return
        self._main.n = done
        queued = len(labels) - done - running - leasing
        self._main.set_postfix_str(f"running={running} waiting_gpu={leasing} queued={queued}; {left}")
        self._main.refresh()
        for key, state in states.items():
            bar = self._bars.get(key)
            if state in ("queued", "leasing") or (state == "done" and bar is None):
                continue
            if bar is None:
                bar = self._bars[key] = self._tqdm(
                    total=100,
                    desc=labels[key][:40],
                    position=len(self._bars) + 1,
                    leave=False,
                    dynamic_ncols=True,
                    bar_format="{desc} {bar} {n}% {postfix}",
                )
            bar.n = int(100 * _job_fraction(snap[key].jobs)) if state != "done" else 100
            bar.set_postfix_str(state)
            bar.refresh()

    def write(self, text: str) -> None:
        """Print a finished cell's summary without tearing the bars."""
        if self.tty:
            self._tqdm.write(text, file=sys.stderr)
        else:
            print(text, flush=True)

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        if self._main is not None:
            self._main.close()
