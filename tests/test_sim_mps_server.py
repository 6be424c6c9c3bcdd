"""The simulated MPS server ends with its control daemon, also when the daemon dies while the server is still
starting (a test session left an ``nvidia-cuda-mps-server`` running: the server read its parent after its
daemon had died, took init for it, and waited on init forever; CI 2026-12-03)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from raycolloc.node.gpu.sim_mps import _Daemon


def test_a_server_whose_daemon_died_during_its_start_ends(tmp_path: Path) -> None:
    read, write = os.pipe()
    daemon = os.fork()
    if daemon == 0:  # the control daemon: starts its server, says its pid, and dies at once
        os.close(read)
        server = _Daemon(tmp_path, tmp_path).start_server()
        os.write(write, f"{server}\n".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as said:
        server = int(said.readline())
    os.waitpid(daemon, 0)
    assert "Server" in (tmp_path / "control.log").read_text()
    proc = psutil.Process(server)

    def alive() -> bool:
        try:
            return proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 60  # its Python's start-up, then one look at its parent
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    outlived = alive()
    if outlived:
        proc.kill()
    assert not outlived, "the server outlived its daemon"
