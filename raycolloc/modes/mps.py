"""MPS: one control daemon per GPU, owned by the node's steward.

Each daemon is started with ``CUDA_VISIBLE_DEVICES=<GPU-UUID>`` and its own pipe and log
directories under ``mode.pipe_root/<uuid>/`` (owner-only), never the default /tmp/nvidia-mps
that every CUDA process on the node would join. A record file beside them names the daemon's
pid, so a daemon left behind by a crashed run is found and stopped before a new one starts.
Jobs reach their daemon through ``CUDA_MPS_PIPE_DIRECTORY`` and verify from inside that they
are its clients (``get_server_list`` / ``get_client_list``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from raycolloc.cellspec import Binding

__all__ = ["MpsDaemon", "MpsError", "control_command", "find_control_daemons", "mps_client_status"]

log = logging.getLogger(__name__)
CONTROL = "nvidia-cuda-mps-control"
SERVER = "nvidia-cuda-mps-server"
DEFAULT_PIPE = "/tmp/nvidia-mps"


class MpsError(RuntimeError):
    """The MPS daemon could not be started, reached or stopped."""


def control_command(control: str, pipe_dir: str | None, command: str, timeout: float = 10.0) -> str:
    """Send one command to the control daemon listening on ``pipe_dir``; returns its reply."""
    env = dict(os.environ)
    if pipe_dir:
        env["CUDA_MPS_PIPE_DIRECTORY"] = pipe_dir
    proc = subprocess.run([control], input=command + "\n", capture_output=True, text=True, env=env, timeout=timeout,
                          check=False)
    if proc.returncode != 0:
        raise MpsError(f"{control}: {command!r} failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def _pids(text: str) -> list[int]:
    return [int(tok) for tok in text.split() if tok.isdigit()]


def find_control_daemons() -> list[dict[str, Any]]:
    """Every MPS control daemon on this node with its pipe directory and visible devices."""
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            name = proc.info["name"] or ""
            cmd = " ".join(proc.info["cmdline"] or [])
            if CONTROL not in name and CONTROL not in cmd:
                continue
            if "-d" not in (proc.info["cmdline"] or []) and not name.startswith(CONTROL[:15]):
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        found.append({
            "pid": proc.info["pid"],
            "pipe_dir": env.get("CUDA_MPS_PIPE_DIRECTORY", DEFAULT_PIPE),
            "visible": env.get("CUDA_VISIBLE_DEVICES"),
        })
    return found


class MpsDaemon:
    """The MPS control daemon of one GPU.

    Args:
        gpu_uuid: the GPU it serves (the daemon sees only this GPU).
        gpu_index: the GPU's NVML index (a daemon's CUDA_VISIBLE_DEVICES may name it by index).
        root: ``mode.pipe_root``; the daemon's directories are ``root/<uuid>/{pipe,log}``.
        control: the control executable (``nvidia-cuda-mps-control``, or the simulated one).
    """

    def __init__(self, gpu_uuid: str, gpu_index: int, root: str | Path, control: str = CONTROL) -> None:
        self.gpu_uuid = gpu_uuid
        self.gpu_index = gpu_index
        self.control = control
        self.dir = Path(root) / gpu_uuid
        self.pipe_dir = self.dir / "pipe"
        self.log_dir = self.dir / "log"
        self.record = self.dir / "daemon.json"
        self.pid: int | None = None

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(CUDA_VISIBLE_DEVICES=self.gpu_uuid, CUDA_MPS_PIPE_DIRECTORY=str(self.pipe_dir),
                   CUDA_MPS_LOG_DIRECTORY=str(self.log_dir))
        return env

    def start(self, timeout: float = 20.0) -> int:
        """Stop any stale daemon of this GPU, then start a fresh one; returns its pid."""
        if shutil.which(self.control) is None and not Path(self.control).exists():
            raise MpsError(f"{self.control} not found on PATH; MPS needs the NVIDIA driver's MPS tools")
        if len(str(self.pipe_dir)) > 90:
            raise MpsError(f"MPS pipe directory {self.pipe_dir} is too long for a Unix socket path "
                           f"(limit about 100 characters); set a shorter mode.pipe_root")
        self.stop_stale()
        for d in (self.dir, self.pipe_dir, self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o700)  # owner-only: nobody else may join or steer this daemon
        proc = subprocess.run([self.control, "-d"], env=self._env(), capture_output=True, text=True, timeout=timeout,
                              check=False)
        if proc.returncode != 0:
            raise MpsError(f"starting {self.control} -d for {self.gpu_uuid} failed: {proc.stderr.strip()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self._running_pid()
            if pid is not None:
                try:
                    control_command(self.control, str(self.pipe_dir), "get_server_list", timeout=5)
                except (MpsError, subprocess.TimeoutExpired):
                    time.sleep(0.1)
                    continue
                self.pid = pid
                self.record.write_text(json.dumps({"pid": pid, "gpu": self.gpu_uuid, "started": time.time()}))
                log.info("mps=started gpu=%s pid=%d pipe=%s", self.gpu_uuid, pid, self.pipe_dir)
                return pid
            time.sleep(0.1)
        raise MpsError(f"{self.control} for {self.gpu_uuid} did not come up within {timeout:.0f}s (log: {self.log_dir})")

    def _running_pid(self) -> int | None:
        for daemon in find_control_daemons():
            if Path(daemon["pipe_dir"]) == self.pipe_dir:
                return int(daemon["pid"])
        return None

    def server_pids(self) -> list[int]:
        return _pids(control_command(self.control, str(self.pipe_dir), "get_server_list"))

    def stop(self, timeout: float = 15.0) -> None:
        """``quit`` the daemon and wait until it and its servers are gone (kill if they hang)."""
        pid = self.pid or self._running_pid()
        if pid is None:
            self.record.unlink(missing_ok=True)
            return
        servers: list[int] = []
        try:
            servers = self.server_pids()
            control_command(self.control, str(self.pipe_dir), "quit", timeout=timeout)
        except (MpsError, subprocess.TimeoutExpired) as exc:
            log.warning("mps=quit-failed gpu=%s pid=%d error=%s", self.gpu_uuid, pid, exc)
        survivors = _wait_gone([pid, *servers], timeout)
        for left in survivors:
            log.warning("mps=kill gpu=%s pid=%d (did not quit in %.0fs)", self.gpu_uuid, left, timeout)
            try:
                os.kill(left, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _wait_gone(survivors, 5.0)
        self.pid = None
        self.record.unlink(missing_ok=True)
        log.info("mps=stopped gpu=%s pid=%d", self.gpu_uuid, pid)

    def stop_stale(self) -> bool:
        """Stop a daemon of this GPU that an earlier, crashed run left behind. True if one was found."""
        recorded = None
        if self.record.exists():
            try:
                recorded = int(json.loads(self.record.read_text())["pid"])
            except (ValueError, KeyError, json.JSONDecodeError):
                recorded = None
        pid = self._running_pid()
        if pid is None and (recorded is None or not psutil.pid_exists(recorded)):
            self.record.unlink(missing_ok=True)
            return False
        log.warning("mps=stale gpu=%s pid=%s recorded=%s: stopping it", self.gpu_uuid, pid, recorded)
        self.pid = pid or recorded
        self.stop()
        return True

    def serves_gpu_elsewhere(self) -> list[dict[str, Any]]:
        """Control daemons *not started by us* whose clients would land on this GPU."""
        foreign = []
        for daemon in find_control_daemons():
            if Path(daemon["pipe_dir"]) == self.pipe_dir:
                continue
            visible = daemon["visible"]
            if visible is None or self.gpu_uuid in visible.split(",") or str(self.gpu_index) in visible.split(","):
                foreign.append(daemon)
        return foreign

    def binding_env(self, job_index: int, active_thread_percentage: int | None, pinned_mem_limit: str | None) -> dict[str, str]:
        """Environment of one MPS client job (applied before CUDA initialises in the job)."""
        env = {"CUDA_VISIBLE_DEVICES": self.gpu_uuid, "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
               "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}
        if active_thread_percentage is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(active_thread_percentage)
        if pinned_mem_limit is not None:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={pinned_mem_limit}"
        return env


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if psutil.pid_exists(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if _alive(p)]
    return alive


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def mps_client_status(binding: Binding, pid: int) -> dict[str, Any]:
    """From inside a job (after CUDA is initialised): is this process a client of an MPS server?"""
    if not binding.mps_pipe_dir or not binding.mps_control:
        return {"mps_client": False, "mps_server_pid": None}
    try:
        for server in _pids(control_command(binding.mps_control, binding.mps_pipe_dir, "get_server_list")):
            clients = _pids(control_command(binding.mps_control, binding.mps_pipe_dir, f"get_client_list {server}"))
            if pid in clients:
                return {"mps_client": True, "mps_server_pid": server}
    except (MpsError, subprocess.TimeoutExpired, OSError) as exc:
        return {"mps_client": False, "mps_server_pid": None, "mps_check_error": str(exc)}
    return {"mps_client": False, "mps_server_pid": None}
