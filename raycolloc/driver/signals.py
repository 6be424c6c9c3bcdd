"""How the sweep command takes a signal: SIGTERM as Ctrl-C, and a second signal ends it at once.

``timeout``, Slurm and Kubernetes stop a job with SIGTERM, not SIGINT. The command line
(:func:`raycolloc.sweep.main`) installs one handler for both: the first SIGINT raises
``KeyboardInterrupt`` and the first SIGTERM :class:`Terminated` (a ``KeyboardInterrupt``) in the
main thread, so both take the path Ctrl-C always took: the engine cancels the running cells (each
kills its trainers, releases its GPU and writes nothing), the lanes end their leases (MPS daemons
stopped, MIG layouts restored), Ray is shut down, and the command exits 130 (SIGINT) or 143
(SIGTERM). A second signal of either kind, while that runs, ends the process at once with
128 + its number (the same signal within a second of the first is taken for ``timeout``'s echo of it,
not a second one); what it leaves, a re-run (or ``python -m raycolloc.doctor --fix``) puts right.

``timeout`` signals the command's whole process group, where the local Ray instance's own processes
(GCS, raylet, agents) live: they would die at once, the driver's cleanup would wait on a dead GCS
and Ray would end the driver after 60 s (exit 1, the MPS daemon left). So, as Ray itself does for
SIGINT, a local instance is started with SIGTERM blocked (:func:`shielded`): its processes inherit
the mask and leave the signal to the driver, which shuts them down when the cells have released
their GPUs (each then takes Ray's 1 s grace before SIGKILL).

``ray.init`` replaces SIGTERM's handler twice: a Python one (``sys.exit(15)``), then the core
worker's native failure handler, which prints "*** SIGTERM received" with a stack and aborts
(exit 134, measured with Ray 2.60 in local mode). So :func:`reinstall` runs again after every
``ray.init`` (``driver/cluster.py``). Library callers (tests, notebooks) that never call
:func:`install` keep their own handlers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from raycolloc.driver.outcome import EXIT_INTERRUPTED, EXIT_TERMINATED

__all__ = ["Terminated", "ending", "exit_status", "install", "reinstall", "shielded", "uninstall"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# "first": the first signal that came, which also names the exit status (Ray's blocking calls re-raise
# any exception a handler raises as a plain KeyboardInterrupt, so the exception's type alone cannot tell
# SIGTERM from Ctrl-C); "ending": the command is tearing down, and any signal ends it at once.
_state: dict[str, int] = {"installed": 0, "first": 0, "ending": 0}
_before: dict[int, Any] = {}  # the handlers install() replaced, put back by uninstall()
_first_at = [0.0]  # when the first signal came (time.monotonic)
# GNU `timeout` sends its signal to the command and then to its own process group, which holds the
# command: the driver gets SIGTERM twice, microseconds apart (seen on the GPU machine: the sweep took the
# echo for a second signal and exited at once, its MPS daemons left). The same signal within this
# window is that echo, not a user's second signal.
ECHO_S = 1.0


class Terminated(KeyboardInterrupt):
    """The sweep received SIGTERM; it ends as after Ctrl-C (a ``KeyboardInterrupt``), with exit 143."""


def _handle(signum: int, frame: FrameType | None) -> None:
    if _state["first"] == signum and time.monotonic() - _first_at[0] < ECHO_S:
        return  # the same signal again at once: `timeout` sends it to the command, then to its group
    if _state["first"] or _state["ending"]:
        # Nothing is waited for: Ray's processes die with this one (they share its fate), and a
        # re-run stops what the steward kept (MPS daemons, MIG layouts) from its records.
        os.write(
            2,
            f"\n{signal.Signals(signum).name} again: exiting now (exit {128 + signum}); a re-run or "
            f"`python -m raycolloc.doctor --fix` cleans what is left\n".encode(),
        )
        os._exit(128 + signum)
    # The time first: a second signal handled between these two lines must see it as the echo.
    _first_at[0] = time.monotonic()
    _state["first"] = signum
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def install() -> None:
    """Take SIGINT and SIGTERM in this process (the main thread of the command line)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _SIGNALS:
        before = signal.signal(signum, _handle)
        if not _state["installed"]:
            _before[signum] = before
    _state["installed"] = 1


def uninstall() -> None:
    """Put back the handlers :func:`install` replaced (a command run in-process, by a test, ends)."""
    if not _state["installed"] or threading.current_thread() is not threading.main_thread():
        return
    for signum, before in _before.items():
        signal.signal(signum, before if before is not None else signal.SIG_DFL)
    _before.clear()
    _state.update(installed=0, first=0, ending=0)


def reinstall() -> None:
    """After ``ray.init``: take SIGTERM back from Ray, if :func:`install` ran in this process."""
    if _state["installed"]:
        install()


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """SIGTERM held back from the processes started inside (they inherit the blocked signal), and from
    this thread until the end, where one that arrived meanwhile is taken (after :func:`reinstall`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def ending() -> None:
    """The command is tearing down: a signal from now on ends it at once, as a second one does."""
    _state["ending"] = 1


def exit_status(exc: KeyboardInterrupt) -> int:
    """130 for an interrupt (Ctrl-C), 143 for SIGTERM: the signal this process took first, or, where
    :func:`install` never ran, the exception's type. ``ray.get`` and ``ray.wait`` turn the
    :class:`Terminated` our handler raises into a plain ``KeyboardInterrupt`` (measured, Ray 2.x in
    local mode), so a SIGTERM that lands while the driver waits on Ray is known by the record."""
    if isinstance(exc, Terminated) or _state["first"] == signal.SIGTERM:
        return EXIT_TERMINATED
    return EXIT_INTERRUPTED
