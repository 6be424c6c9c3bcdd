"""The MPS control protocol: commands to ``nvidia-cuda-mps-control`` and their replies.

Shared by the node, which starts and stops daemons (``raycolloc.node.modes.mps``), and a job's
training process, which checks from inside that it is a client of its daemon's server.
"""

from __future__ import annotations

import os
import subprocess

__all__ = ["CONTROL", "DEFAULT_PIPE", "MpsError", "client_status", "control_command", "pids"]

CONTROL = "nvidia-cuda-mps-control"
DEFAULT_PIPE = "/tmp/nvidia-mps"


class MpsError(RuntimeError):
    """The MPS daemon could not be started, reached or stopped."""


def control_command(control: str, pipe_dir: str | None, command: str, timeout: float = 10.0) -> str:
    """Send one command to the control daemon listening on ``pipe_dir``; returns its reply."""
    env = dict(os.environ)
    if pipe_dir:
        env["CUDA_MPS_PIPE_DIRECTORY"] = pipe_dir
    proc = subprocess.run(
        [control], input=command + "\n", capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        said = proc.stderr.strip() or proc.stdout.strip()
        raise MpsError(f"{control}: {command!r} failed (exit {proc.returncode}): {said}")
    return proc.stdout.strip()


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
