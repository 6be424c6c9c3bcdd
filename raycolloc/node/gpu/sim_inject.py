"""Noise put into a simulated cell's measured window (``cluster.sim_inject``), so that the report's
attribution ("Why runs were noisy") can be shown and tested on a machine without a GPU.

Each injection is real where it can be, not a number written into a column:

* ``clock_drop``: the simulated GPU reports its SM clock at :data:`DROP_FACTOR` of boost with NVML's
  ``sw_power_cap`` reason, and its jobs run slower by as much: each training process is stopped
  (SIGSTOP) for ``1 - DROP_FACTOR`` of every :data:`DUTY_PERIOD_S`, as a GPU at a lower clock runs
  the same kernels slower. It holds for :data:`DROP_SHARE` of the measured window, estimated from the
  warm-up's length (the steward does not know the window's end in advance).
* ``cpu_hog``: :data:`HOGS_PER_CORE` busy processes pinned to each core of the cell's jobs run through
  the measured window: the training threads are pre-empted (involuntary context switches rise), wait
  for their core well beyond the usual wait, and the rate falls.
* ``foreign_process``: a process that is not the cell's attaches to the simulated GPU (a context and
  a little memory), as another user's job would; NVML's process list shows it.

Everything is undone by :meth:`Injector.stop` (the cell's sampling stops or the cell is released);
the helper processes also end by themselves when the steward dies or after :data:`MAX_LIFE_S`.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

import psutil

from raycolloc.node.gpu.sim import SimBackend

__all__ = ["DROP_FACTOR", "DROP_SHARE", "DUTY_PERIOD_S", "HOGS_PER_CORE", "MAX_LIFE_S", "Injector", "injector_for"]

log = logging.getLogger(__name__)

DROP_FACTOR = 0.6  # the capped SM clock as a share of boost: a drop a power cap on a busy H100 can make
DROP_SHARE = 0.5  # how much of the measured window the drop lasts: part of it, as real caps come and go
DUTY_PERIOD_S = 0.05  # stop/continue period: short beside a 1 s progress report, long beside a signal
MAX_LIFE_S = 900.0  # a helper process never outlives this, whatever happens to the steward
FOREIGN_MIB = 256  # what the foreign process allocates on the simulated GPU
# Two: the training thread gets about a third of its core, its wait far above the usual one even on a
# loaded 2-core CI machine, where every cell's thread already waits about half the time.
HOGS_PER_CORE = 2
# A helper's body: busy (hog) or idle (foreign), until its parent (the steward) is gone or time is up.
_BODY = "import os,time\nend=time.time()+{life}\nwhile os.getppid()=={parent} and time.time()<end:\n    {work}\n"


def _helper(work: str) -> subprocess.Popen[bytes]:
    code = _BODY.format(life=MAX_LIFE_S, parent=os.getpid(), work=work)
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)


class Injector:
    """The injections of one simulated cell.

    Args:
        backend: the node's simulated GPUs.
        gpu_uuid: the cell's GPU.
        visible: the device a foreign process attaches to (the GPU, or a MIG device of the cell).
        names: from ``cluster.sim_inject``.
        pids: the cell's training processes.
    """

    def __init__(
        self, backend: SimBackend, gpu_uuid: str, visible: str, names: Sequence[str], pids: Sequence[int]
    ) -> None:
        self.backend, self.gpu_uuid, self.visible = backend, gpu_uuid, visible
        self.names, self.pids = tuple(names), list(pids)
        self.created = time.monotonic()  # sampling starts before warm-up: the warm-up's length follows
        self.helpers: list[subprocess.Popen[bytes]] = []
        self._stop = threading.Event()
        self._drop: threading.Thread | None = None

    def measuring(self) -> None:
        """The measured epochs begin: start every injection."""
        if "cpu_hog" in self.names:
            for core in sorted(self._job_cores()):
                for _ in range(HOGS_PER_CORE):
                    hog = _helper("pass")
                    os.sched_setaffinity(hog.pid, {core})
                    self.helpers.append(hog)
        if "foreign_process" in self.names:
            other = _helper("time.sleep(0.2)")
            self.helpers.append(other)
            self.backend.devices.attach(self.visible, other.pid, FOREIGN_MIB << 20)
        if "clock_drop" in self.names:
            hold = max(0.5, DROP_SHARE * (time.monotonic() - self.created))
            self._drop = threading.Thread(target=self._clock_drop, args=(hold,), name="sim-clock-drop", daemon=True)
            self._drop.start()
        log.info("sim_inject=%s gpu=%s helpers=%s", ",".join(self.names), self.gpu_uuid, [h.pid for h in self.helpers])

    def _job_cores(self) -> set[int]:
        cores: set[int] = set()
        for pid in self.pids:
            try:
                cores.update(psutil.Process(pid).cpu_affinity() or [])
            except psutil.Error:
                continue
        return cores

    def _clock_drop(self, hold_s: float) -> None:
        """Cap the clock and slow the jobs as much, for ``hold_s`` or until stopped."""
        self.backend.cap_clocks(self.gpu_uuid, DROP_FACTOR, "sw_power_cap")
        end = time.monotonic() + hold_s
        try:
            while time.monotonic() < end and not self._stop.is_set():
                self._signal(signal.SIGSTOP)
                # Stopped for the share of the period the lower clock loses, then running for the rest.
                self._stop.wait((1.0 - DROP_FACTOR) * DUTY_PERIOD_S)
                self._signal(signal.SIGCONT)
                self._stop.wait(DROP_FACTOR * DUTY_PERIOD_S)
        finally:
            self._signal(signal.SIGCONT)  # never leave a job stopped
            self.backend.cap_clocks(self.gpu_uuid, None)

    def _signal(self, sig: signal.Signals) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue

    def stop(self) -> None:
        """Undo every injection (safe to call twice)."""
        self._stop.set()
        if self._drop is not None:
            self._drop.join(timeout=5)
        for helper in self.helpers:
            helper.kill()
            helper.wait(timeout=5)
        self.helpers.clear()


def injector_for(
    backend: object, gpu_uuid: str, visible: str, names: Sequence[str], pids: Sequence[int]
) -> Injector | None:
    """The cell's injector, or None when it injects nothing.

    Raises:
        TypeError: injections asked of a backend that is not the simulated one (the config refuses
            them there first, with exit 2).
    """
    if not names:
        return None
    if not isinstance(backend, SimBackend):
        raise TypeError(f"cluster.sim_inject={','.join(names)} needs simulated GPUs, not {type(backend).__name__}")
    return Injector(backend, gpu_uuid, visible, names, pids)
