"""Starting a job's training process: forked by the node's warm parent, or exec'd afresh.

``trainer.spawn=fork`` (the default) asks the node's fork server (:mod:`raycolloc.job.forkserver`,
started by the steward) for a child with torch and timm already imported; ``exec`` starts
``python -m raycolloc.job.process``, which imports them itself (about 6.4 s of every cell's set-up
on 2 busy cores, local mode). Either way the process gets the same environment (the actor's plus
the binding's), pins itself to the binding's cores and speaks the same protocol; if the fork
server cannot be reached, the job is exec'd and the log says why.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from multiprocessing import reduction
from multiprocessing.connection import Client, Connection
from typing import Protocol

__all__ = ["ForkedProcess", "TrainingProcess", "start_training_process"]

log = logging.getLogger(__name__)
FORK_TIMEOUT_S = 30.0


class TrainingProcess(Protocol):
    """What the trainer needs of its training process (a ``subprocess.Popen`` has it)."""

    pid: int

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


class ForkedProcess:
    """A training process the fork server forked: not our child, so its exit code comes from the
    server, over the connection that asked for it."""

    def __init__(self, pid: int, server: Connection) -> None:
        self.pid, self._server = pid, server
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._server.poll(0):
            self._read()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._server.poll(timeout):
                raise subprocess.TimeoutExpired(f"training process {self.pid}", timeout or 0.0)
            self._read()
        assert self.returncode is not None
        return self.returncode

    def _read(self) -> None:
        try:
            kind, code = self._server.recv()
        except (EOFError, OSError):  # the server is gone: the process is (PDEATHSIG on the actor) or will be
            kind, code = "exit", -signal.SIGKILL
        self.returncode = int(code) if kind == "exit" else -1

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _fork(server_path: str, env: dict[str, str], job_end: socket.socket) -> ForkedProcess:
    server = Client(server_path, family="AF_UNIX")
    server.send((env, os.getpid()))
    reduction.send_handle(server, job_end.fileno(), None)
    if not server.poll(FORK_TIMEOUT_S):
        server.close()
        raise TimeoutError(f"the fork server {server_path} did not answer within {FORK_TIMEOUT_S:g}s")
    kind, value = server.recv()
    if kind != "pid":
        server.close()
        raise RuntimeError(f"the fork server refused: {value}")
    return ForkedProcess(int(value), server)


def start_training_process(
    name: str, env: dict[str, str], forkserver: str | None
) -> tuple[TrainingProcess, Connection]:
    """Start a training process; returns it and its connection, on which the caller sends the job
    (the process knows nothing before that: this module never sees a job's settings).

    Args:
        name: the job's name, for the log.
        env: the whole environment of the process (the actor's plus the binding's).
        forkserver: the node's fork server socket (``trainer.spawn=fork``), or None to exec.
    """
    ours, theirs = socket.socketpair()
    proc: TrainingProcess | None = None
    with theirs:
        if forkserver:
            try:
                proc = _fork(forkserver, env, theirs)
            except (OSError, EOFError, TimeoutError, RuntimeError) as exc:
                log.warning(
                    "job=%s fork server %s unusable (%s): starting the training process afresh",
                    name,
                    forkserver,
                    exc,
                )
        if proc is None:
            proc = subprocess.Popen(
                [sys.executable, "-m", "raycolloc.job.process", str(theirs.fileno()), str(os.getpid())],
                env=env,
                pass_fds=(theirs.fileno(),),
            )
    return proc, Connection(ours.detach())
