"""Cells side by side: whose measured windows overlapped on a node, and measuring one at a time.

Cells on a node's other GPUs share its cores, memory bandwidth and PCIe root: on one 4 x H200 host
MPS x2 ran 25,519 samples/s with four GPUs busy and 32,844 alone (-22%), naive x2 +10% (issue 30).
Each lane (a driver thread) opens its cell's measured window here, from after the warm-up barrier
to the end of the measured epochs (a mix's or a script's: all of its training), and closes it when
they end. A cell's ``overlapping_cells`` are the other cells of its node whose windows overlapped
its own. The count is exact when taken as the window closes: a cell that overlapped it has opened
its window by then (it may still be measuring), and one that opens later starts after it ended.

With ``cluster.isolate_measurement=true`` a node's windows do not overlap: a lane holds the node's
lock while its cell measures, so the next cell's jobs wait after their warm-up (set-up and warm-up
still run side by side). The windows here bracket the jobs' own (they open before the measured
call and close after its last job returns), so windows that do not overlap here do not there.
The wait asks ``on_wait`` every half second, which raises to cancel it (Ctrl-C, SIGTERM); no
trainer call is pending while it waits, so no stall watch or timeout runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["MeasureWindows", "Window"]

WAIT_POLL_S = 0.5  # how often a cell waiting for its node's lock looks at the cancel flag


@dataclass
class Window:
    """One cell's measured window (driver clock, ``time.time()``); ``end`` None while it measures."""

    node_id: str
    cell_id: str
    start: float
    end: float | None = None
    overlapping: int | None = None  # other cells of the node whose windows overlapped (once closed)
    waited_s: float = 0.0  # how long it waited for the node's other cells (isolate_measurement)


class MeasureWindows:
    """The measured windows of one sweep's cells, per node (shared by its lanes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: list[Window] = []
        self._nodes: dict[str, threading.Lock] = {}

    def _node_lock(self, node_id: str) -> threading.Lock:
        with self._lock:
            return self._nodes.setdefault(node_id, threading.Lock())

    @contextmanager
    def measuring(
        self, node_id: str, cell_id: str, isolate: bool, on_wait: Callable[[], None] = lambda: None
    ) -> Iterator[Window]:
        """The cell's measured window, open for the ``with`` block (``isolate``: alone on its node).

        Raises:
            whatever ``on_wait`` raises while the cell waits for its node (the sweep was cancelled).
        """
        held = self._node_lock(node_id) if isolate else None
        t0 = time.monotonic()
        while held is not None and not held.acquire(timeout=WAIT_POLL_S):
            on_wait()
        try:
            window = Window(node_id, cell_id, time.time(), waited_s=time.monotonic() - t0)
            with self._lock:
                self._windows.append(window)
            try:
                yield window
            finally:
                with self._lock:
                    window.end = time.time()
                    window.overlapping = sum(1 for w in self._windows if w is not window and _overlap(w, window))
        finally:
            if held is not None:
                held.release()

    def windows(self) -> list[Window]:
        with self._lock:
            return list(self._windows)


def _overlap(other: Window, window: Window) -> bool:
    """Whether ``other`` (of any node) overlapped the closed ``window`` on its node."""
    assert window.end is not None
    return (
        other.node_id == window.node_id and other.start < window.end and (other.end is None or other.end > window.start)
    )
