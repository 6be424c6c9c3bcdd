"""Whether a script job became a client of its cell's MPS server, watched from outside.

A script creates its CUDA context when it chooses (after its imports, its data, its model: seconds
in), and a short one may be gone before the cell's driver asks the actor for its epochs (every job's
set-up, the sampler's start and the measured window come first). So the watch starts with the
process and asks the control daemon every ``POLL_S`` (every ``LATE_POLL_S`` after ``LATE_S``) until
the script (or a child of it) is seen in a server's client list, the script ends, or the daemon fails
to answer ``MAX_FAILURES`` times in a row. A script never seen says why in ``mps_check_error``: what
was asked, how often, for which pids.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field

import psutil

from raycolloc.mpsctl import MpsError, control_command, pids
from raycolloc.spec import JobInfo

__all__ = ["LATE_POLL_S", "LATE_S", "MAX_FAILURES", "POLL_S", "MpsWatch"]

POLL_S = 0.25  # a context that lives a second is seen; each ask runs the control tool once per server
LATE_S, LATE_POLL_S = 30.0, 1.0  # a script not a client after 30 s (CPU work first, or none) is asked each second
MAX_FAILURES = 3  # a daemon that fails to answer three times in a row is not asked again


@dataclass
class MpsWatch:
    """Watch process ``pid`` until it is an MPS client of the daemon on ``pipe_dir`` (``control``: its
    tool), writing what is found into ``info``; :meth:`stop` waits for the watch's last word."""

    control: str
    pipe_dir: str
    pid: int
    info: JobInfo
    asked: int = 0
    looked_for: set[int] = field(default_factory=set)
    servers: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._watch, name=f"mps-watch-{self.pid}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Wait for the watch to end (it ends when the process does) and its verdict to be written."""
        self._thread.join(timeout)

    def _watch(self) -> None:
        failures = 0
        while self._alive() and failures < MAX_FAILURES:
            try:
                if self._seen():
                    return
                failures = 0
            except (MpsError, subprocess.TimeoutExpired, OSError) as exc:
                failures += 1
                self.info.mps_check_error = str(exc)[:400]
            time.sleep(POLL_S if time.monotonic() - self._started < LATE_S else LATE_POLL_S)
        self._never_seen(failures)

    def _alive(self) -> bool:
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _seen(self) -> bool:
        """Is the process or one of its children in a server's client list now? (the verdict written)"""
        try:
            ours = {self.pid, *(c.pid for c in psutil.Process(self.pid).children(recursive=True))}
        except psutil.Error:
            return False  # gone between two asks: the loop ends on it
        self.looked_for |= ours
        self.asked += 1
        for server in pids(control_command(self.control, self.pipe_dir, "get_server_list")):
            self.servers.add(server)
            if ours & set(pids(control_command(self.control, self.pipe_dir, f"get_client_list {server}"))):
                self.info.mps_client, self.info.mps_server_pid, self.info.mps_check_error = True, server, None
                return True
        return False

    def _never_seen(self, failures: int) -> None:
        """Say what was looked at, where the process was never seen as a client."""
        span = time.monotonic() - self._started
        why = (
            f"the daemon failed {failures} times in a row ({self.info.mps_check_error}); asked no more"
            if failures >= MAX_FAILURES
            else "until the script ended"
        )
        servers = ", ".join(map(str, sorted(self.servers))) or "none"
        self.info.mps_check_error = (
            f"not seen as an MPS client: asked {self.control} on {self.pipe_dir} {self.asked} times over "
            f"{span:.1f} s, {why}; pids looked for: {', '.join(map(str, sorted(self.looked_for))) or 'none'}; "
            f"servers listed: {servers}"
        )[:500]
