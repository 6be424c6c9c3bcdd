"""Sweep progress: cells queued / leasing / running / done, and each running job's epoch and step.

One :class:`ProgressBoard` actor per Ray cluster, detached like a node's steward and shared by the
sweeps on it, each under a key of its own (:class:`Board`, what a sweep holds): the driver's lane
threads set each cell's state, and each trainer pushes its job's progress to it directly (fire and
forget). The driver polls its own sweep's part and draws tqdm bars (on a terminal) or prints one line
per change (logs); at its end it drops that part. A board per sweep cost a Ray worker process (~1.3
CPU-seconds of start-up, 65 times in the test suite) to hold a few dicts.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

import ray

__all__ = ["Board", "ProgressBoard", "ProgressView", "open_board"]

# The version is in the name: a cluster that outlives an upgrade keeps the old board under the old name.
BOARD_NAME = "raycolloc:progress:v2"
STALE_S = 24 * 3600.0  # a sweep silent this long had its driver killed: its part goes


@ray.remote(num_cpus=0)
class ProgressBoard:
    """The progress state of every sweep on the cluster, by sweep key (one small detached actor)."""

    def __init__(self) -> None:
        self.sweeps: dict[str, dict[str, dict[str, Any]]] = {}
        self.touched: dict[str, float] = {}

    def update(self, sweep: str, key: str, fields: dict[str, Any]) -> None:
        now = self.touched[sweep] = time.time()
        cell = self.sweeps.setdefault(sweep, {}).setdefault(key, {})
        cell.update(fields)
        cell["updated"] = now

    def job(self, sweep: str, key: str, job_index: int, progress: dict[str, Any]) -> None:
        """A trainer's progress: epoch, step, steps per epoch, samples per second."""
        self.update(sweep, key, {})
        self.sweeps[sweep][key].setdefault("jobs", {})[str(job_index)] = progress

    def snapshot(self, sweep: str) -> dict[str, dict[str, Any]]:
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

    def update(self, key: str, fields: dict[str, Any]) -> None:
        """Set a cell's fields (fire and forget)."""
        self.actor.update.remote(self.sweep, key, fields)

    def job(self, key: str, job_index: int, progress: dict[str, Any]) -> None:
        """A job's progress (fire and forget: a lost update is redrawn a second later)."""
        self.actor.job.remote(self.sweep, key, job_index, progress)

    def snapshot(self, timeout: float = 10.0) -> dict[str, dict[str, Any]]:
        """Every cell of the sweep: its fields, and its jobs' progress under ``jobs``."""
        return ray.get(self.actor.snapshot.remote(self.sweep), timeout=timeout)

    def close(self) -> None:
        """The sweep ended: its part of the board goes (fire and forget)."""
        self.actor.forget.remote(self.sweep)


def open_board(namespace: str) -> Board:
    """This sweep's part of the cluster's board (the board is created by the first sweep)."""
    actor = ProgressBoard.options(name=BOARD_NAME, namespace=namespace, lifetime="detached",
                                  get_if_exists=True).remote()
    return Board(actor, f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}")


def _job_fraction(jobs: dict[Any, dict[str, Any]]) -> float:
    parts = []
    for p in jobs.values():
        epochs, steps = max(1, int(p.get("epochs", 1))), max(1, int(p.get("steps", 1)))
        parts.append(((int(p.get("epoch", 0)) - 1) * steps + int(p.get("step", 0))) / (epochs * steps))
    return max(0.0, min(1.0, sum(parts) / len(parts))) if parts else 0.0


class ProgressView:
    """Draws the board: a bar for the sweep and one per running cell (tqdm), or log lines."""

    def __init__(self, labels: dict[str, str], board: Board) -> None:
        self.labels, self.board = labels, board
        self.tty = sys.stderr.isatty()
        self._last: dict[str, str] = {}
        self._bars: dict[str, Any] = {}
        self._main: Any = None
        if self.tty:
            from tqdm import tqdm

            self._tqdm = tqdm
            self._main = tqdm(total=len(labels), desc="cells", unit="cell", position=0, dynamic_ncols=True)

    def refresh(self) -> None:
        try:
            snap = self.board.snapshot()
        except Exception:  # noqa: BLE001
            return
        states = {k: snap.get(k, {}).get("state", "queued") for k in self.labels}
        done = sum(1 for s in states.values() if s == "done")
        running = sum(1 for s in states.values() if s not in ("queued", "leasing", "done"))
        leasing = sum(1 for s in states.values() if s == "leasing")
        if not self.tty:
            for key, state in states.items():
                info = snap.get(key, {})
                line = f"{state}" + (f" status={info.get('status')}" if state == "done" else "")
                if self._last.get(key) != line:
                    self._last[key] = line
                    print(f"[sweep] cell {self.labels[key]}: {line}  (done {done}/{len(self.labels)}, "
                          f"running {running}, waiting for a GPU {leasing})", file=sys.stderr, flush=True)
            return
        self._main.n = done
        self._main.set_postfix_str(f"running={running} waiting_gpu={leasing} queued={len(self.labels) - done - running - leasing}")
        self._main.refresh()
        for key, state in states.items():
            bar = self._bars.get(key)
            if state in ("queued", "leasing") or (state == "done" and bar is None):
                continue
            if bar is None:
                bar = self._bars[key] = self._tqdm(total=100, desc=self.labels[key][:40], position=len(self._bars) + 1,
                                                   leave=False, dynamic_ncols=True, bar_format="{desc} {bar} {n}% {postfix}")
            info = snap.get(key, {})
            bar.n = int(100 * _job_fraction(info.get("jobs", {}))) if state != "done" else 100
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
