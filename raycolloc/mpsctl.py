"""The MPS control protocol: commands to ``nvidia-cuda-mps-control`` and their replies.

Shared by the node, which starts and stops daemons (``raycolloc.node.modes.mps``), and a job's
training process, which checks from inside that it is a client of its daemon's server.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import time
from collections.abc import Iterator

__all__ = ["BUSY", "CONTROL", "DEFAULT_PIPE", "MpsError", "client_status", "control_command", "pids"]

CONTROL = "nvidia-cuda-mps-control"
DEFAULT_PIPE = "/tmp/nvidia-mps"
# What the control tool says when its daemon does not take the command: on one H200 (2026-12-02),
# script jobs' watches asking at once got it, and 10 of 20 jobs of MPS x3/x7 cells (run twice) were
# never seen as clients (jobs/check_cost.sh). The asks are serialised per daemon and this reply retried.
BUSY = "Cannot send command to MPS control daemon"
BUSY_TRIES = 6  # back-off 0.05 + 0.1 + ... + 0.8 s: 1.55 s at most


class MpsError(RuntimeError):
    """The MPS daemon could not be started, reached or stopped."""


def control_command(control: str, pipe_dir: str | None, command: str, timeout: float = 10.0) -> str:
    """Send one command to the control daemon listening on ``pipe_dir``; returns its reply.

    Every raycolloc process asking one daemon takes its turn (a lock file beside the pipe directory),
    and a busy daemon's refusal (:data:`BUSY`) is asked again after a back-off."""
    env = dict(os.environ)
    if pipe_dir:
        env["CUDA_MPS_PIPE_DIRECTORY"] = pipe_dir
    for attempt in range(BUSY_TRIES):
        with _turn(pipe_dir):
            proc = subprocess.run(
                [control], input=command + "\n", capture_output=True, text=True, env=env, timeout=timeout, check=False
            )
        said = proc.stderr.strip() or proc.stdout.strip()
        if proc.returncode == 0:
            return proc.stdout.strip()
        if BUSY not in said or attempt == BUSY_TRIES - 1:
            break
        time.sleep(0.05 * 2**attempt)  # why: the daemon serves one control client at a time
    raise MpsError(f"{control}: {command!r} failed (exit {proc.returncode}): {said}")


@contextlib.contextmanager
def _turn(pipe_dir: str | None) -> Iterator[None]:
    """Hold this daemon's control lock (``<pipe_dir>.control.lock``) while a command runs; none where the lock
    file cannot be made (a pipe directory not ours)."""
    if not pipe_dir:
        yield
        return
    try:
        fd = os.open(str(pipe_dir).rstrip("/") + ".control.lock", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def pids(text: str) -> list[int]:
    """The process ids in a control daemon's reply."""
    return [int(tok) for tok in text.split() if tok.isdigit()]


def client_status(control: str | None, pipe_dir: str | None, pid: int) -> tuple[bool, int | None, str | None]:
    """From inside a job, after CUDA initialised: ``(is an MPS client, its server's pid, error)``."""
    if not pipe_dir or not control:
        return False, None, None
    try:
        for server in pids(control_command(control, pipe_dir, "get_server_list")):
            if pid in pids(control_command(control, pipe_dir, f"get_client_list {server}")):
                return True, server, None
    except (MpsError, subprocess.TimeoutExpired, OSError) as exc:
        return False, None, str(exc)
    return False, None, None
