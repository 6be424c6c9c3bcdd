"""An epoch timed in windows of equal steps: the interval of its rate, from inside the epoch (issue 30).

The epoch's headline rate stays its samples over its wall time (the study's metric); the windows only
say how sure that number is. About :data:`WINDOWS` windows of equal step counts (batch means), at
least :data:`MIN_STEPS` steps each, so a short epoch has fewer windows (one: no interval). An epoch
ended by a time budget (``epoch_time_s``) does not know its steps in advance: it marks every
``stride`` steps and, each time it holds twice the windows it wants, merges neighbours and doubles
the stride, so it ends with :data:`WINDOWS` to twice as many equal windows (the last also holds the
steps after the last mark).

Why events on a GPU: a synchronise at every window boundary would drain the queue the steps keep
full, and the measurement would change what it measures. A CUDA event is queued behind the window's
last kernel and read after the epoch's final synchronise, so the epoch runs as it would unmarked. On
the CPU (the simulated GPU's device) the steps run as they are launched: a ``perf_counter`` reading is
the boundary. (No thread may start here: the training process imports this before it pins itself.)
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from raycolloc.results.stats import cv, window_interval

if TYPE_CHECKING:
    import torch

__all__ = [
    "MIN_STEPS",
    "WINDOWS",
    "Clock",
    "CpuClock",
    "CudaClock",
    "EpochWindows",
    "WindowStats",
    "clock_for",
    "window_stats",
]

WINDOWS = 10  # about ten windows an epoch: enough for a t-interval, each still many steps long
MIN_STEPS = 3  # a window of fewer steps says more about one step's jitter than about the rate


class Clock(Protocol):
    """Marks a boundary now (in the device's order of work) and tells the seconds between two marks."""

    def mark(self) -> Any: ...

    def seconds(self, start: Any, end: Any) -> float: ...


class CpuClock:
    """Steps on the CPU finish as they return: the time of the call is the boundary."""

    def mark(self) -> float:
        return time.perf_counter()

    def seconds(self, start: float, end: float) -> float:
        return end - start


class CudaClock:
    """A CUDA event queued behind the last kernel launched: no synchronise inside the epoch. Read
    :meth:`seconds` only after the epoch's final synchronise (every event has then completed)."""

    def mark(self) -> torch.cuda.Event:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return float(start.elapsed_time(end)) / 1000.0  # milliseconds


def clock_for(device: torch.device) -> Clock:
    """The clock of a training device: events on a CUDA device, ``perf_counter`` elsewhere."""
    return CudaClock() if device.type == "cuda" else CpuClock()


@dataclass(frozen=True)
class WindowStats:
    """An epoch's windows in the epochs table: how many, the 95% interval of its rate, the windows'
    coefficient of variation (None with fewer than two windows: no spread to speak of) and the median
    of their rates (one window's: its own rate)."""

    windows: int
    rate_low: float | None
    rate_high: float | None
    rate_cv: float | None
    rate_median: float | None = None


class EpochWindows:
    """The window boundaries of one epoch: create it when the epoch's clock starts, call :meth:`step`
    after every step, :meth:`close` after the last one (before the final synchronise) and
    :meth:`windows` after it.

    Args:
        clock: the device's clock.
        steps: the epoch's steps; None when a time budget ends it (the steps are not known ahead).
    """

    def __init__(self, clock: Clock, steps: int | None, target: int = WINDOWS, min_steps: int = MIN_STEPS) -> None:
        self._clock, self._target = clock, target
        self._marks: list[tuple[int, Any]] = [(0, clock.mark())]
        if steps is None:
            self._bounds: list[int] = []
            self._stride = min_steps
            self._next = min_steps
        else:
            n = max(1, min(target, steps // min_steps))
            # Interior boundaries only: the last window ends where the epoch does (close).
            self._bounds = [round(k * steps / n) for k in range(n - 1, 0, -1)]  # popped from the end
            self._stride = 0
            self._next = self._bounds.pop() if self._bounds else -1

    def step(self, done: int) -> None:
        """``done`` steps have been launched; marks a boundary if one falls here."""
        if done != self._next:
            return
        self._marks.append((done, self._clock.mark()))
        if not self._stride:
            self._next = self._bounds.pop() if self._bounds else -1
            return
        if len(self._marks) > 2 * self._target:
            # Twice the windows wanted: neighbours merge (every other mark goes), the stride doubles.
            self._marks = self._marks[::2]
            self._stride *= 2
        self._next = done + self._stride

    def close(self, done: int) -> None:
        """The epoch's last step (``done`` in all) has been launched: its end is the last boundary.
        Steps after the last mark of a budgeted epoch join the window before them."""
        last = self._marks[-1][0]
        if done <= last:
            return
        if self._stride and len(self._marks) > 1 and done - last < self._stride:
            self._marks.pop()
        self._marks.append((done, self._clock.mark()))

    def windows(self) -> list[tuple[int, float]]:
        """``(steps, seconds)`` of each window, in order (after the epoch's final synchronise)."""
        pairs = zip(self._marks, self._marks[1:], strict=False)
        return [(b - a, self._clock.seconds(ma, mb)) for (a, ma), (b, mb) in pairs]


def window_stats(windows: list[tuple[int, float]], batch_size: int, rate: float) -> WindowStats:
    """The epoch's interval from its windows, around its headline ``rate`` (samples over wall time).

    The half-width is :func:`raycolloc.results.stats.window_interval`'s, taken relative and put around
    the headline: on a GPU the windows' seconds (events) and the wall time (the host's clock, from one
    synchronise to the next) differ by the synchronise itself, so the relative width is what carries.
    The median of one window is its own rate.
    """
    timed = [(s, t) for s, t in windows if s > 0]
    if len(timed) < 2 or any(t <= 0 for _, t in timed):
        # One window: its own rate (the device's clock, as the windows' median is), else the headline.
        own = timed[0][0] * batch_size / timed[0][1] if len(timed) == 1 and timed[0][1] > 0 else rate
        return WindowStats(len(windows), None, None, None, own if windows else None)
    samples = [float(s * batch_size) for s, _ in timed]
    seconds = [t for _, t in timed]
    rel = window_interval(samples, seconds).rel_half_width
    rates = [s / t for s, t in zip(samples, seconds, strict=True)]
    return WindowStats(len(windows), rate * (1 - rel), rate * (1 + rel), cv(rates), statistics.median(rates))
