"""Sweep progress: cells queued / leasing / running / done, and each running job's epoch and step.

One :class:`ProgressBoard` actor per sweep, on the driver's node: the driver's cell threads set
each cell's state, and each trainer pushes its job's progress to it directly (fire and forget).
The driver polls it and draws tqdm bars (on a terminal) or prints one line per change (logs).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import ray

__all__ = ["ProgressBoard", "ProgressView"]


@ray.remote(num_cpus=0)
class ProgressBoard:
    """The sweep's shared progress state (one small actor on the driver's node)."""

    def __init__(self) -> None:
        self.cells: dict[str, dict[str, Any]] = {}

    def update(self, key: str, fields: dict[str, Any]) -> None:
        cell = self.cells.setdefault(key, {})
        cell.update(fields)
        cell["updated"] = time.time()

    def job(self, key: str, job_index: int, progress: dict[str, Any]) -> None:
        """A trainer's progress: epoch, step, steps per epoch, samples per second."""
        self.update(key, {})
        self.cells[key].setdefault("jobs", {})[str(job_index)] = progress

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return self.cells


def _job_fraction(jobs: dict[Any, dict[str, Any]]) -> float:
    parts = []
    for p in jobs.values():
        epochs, steps = max(1, int(p.get("epochs", 1))), max(1, int(p.get("steps", 1)))
        parts.append(((int(p.get("epoch", 0)) - 1) * steps + int(p.get("step", 0))) / (epochs * steps))
    return max(0.0, min(1.0, sum(parts) / len(parts))) if parts else 0.0


class ProgressView:
    """Draws the board: a bar for the sweep and one per running cell (tqdm), or log lines."""

    def __init__(self, labels: dict[str, str], board: Any) -> None:
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
            snap = ray.get(self.board.snapshot.remote(), timeout=10)
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
