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
from typing import Any, ClassVar

import psutil

from raycolloc.mode_kinds import ModeKind, mode_of
from raycolloc.mpsctl import CONTROL, DEFAULT_PIPE, MpsError, control_command, pids
from raycolloc.node.modes.base import GpuSlot, ModeError
from raycolloc.procs import alive, wait_gone
from raycolloc.spec import Binding, CellSpec, Release

__all__ = ["MpsDaemon", "MpsMode", "daemons_serving", "find_control_daemons"]

log = logging.getLogger(__name__)


def find_control_daemons() -> list[dict[str, Any]]:
    """Every MPS control daemon on this node with its pipe directory and visible devices."""
    found = []
    # Not process_iter's ``proc.info``: psutil (6+) keeps one Process object per pid across calls, and
    # another thread of the steward iterating at the same time (the quiet cores' scan, node/reserve.py)
    # rewrites ``info`` with its own attributes: a KeyError: 'pid' here once failed a naive cell.
    for proc in psutil.process_iter():
        try:
            name = proc.name() or ""
            argv = proc.cmdline() or []
            cmd = " ".join(argv)
            if CONTROL not in name and CONTROL not in cmd:
                continue
            if "-d" not in argv and not name.startswith(CONTROL[:15]):
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        found.append(
            {
                "pid": proc.pid,
                "pipe_dir": env.get("CUDA_MPS_PIPE_DIRECTORY", DEFAULT_PIPE),
                "visible": env.get("CUDA_VISIBLE_DEVICES"),
            }
        )
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
        env.update(
            CUDA_VISIBLE_DEVICES=self.gpu_uuid,
            CUDA_MPS_PIPE_DIRECTORY=str(self.pipe_dir),
            CUDA_MPS_LOG_DIRECTORY=str(self.log_dir),
        )
        return env

    def start(self, timeout: float = 20.0) -> int:
        """Stop any stale daemon of this GPU, then start a fresh one; returns its pid."""
        if shutil.which(self.control) is None and not Path(self.control).exists():
            raise MpsError(f"{self.control} not found on PATH; MPS needs the NVIDIA driver's MPS tools")
        if len(str(self.pipe_dir)) > 90:
            raise MpsError(
                f"MPS pipe directory {self.pipe_dir} is too long for a Unix socket path "
                f"(limit about 100 characters); set a shorter mode.pipe_root"
            )
        self.stop_stale()
        for d in (self.dir, self.pipe_dir, self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o700)  # owner-only: nobody else may join or steer this daemon
        proc = subprocess.run(
            [self.control, "-d"], env=self._env(), capture_output=True, text=True, timeout=timeout, check=False
        )
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
                # The control beside the pid: a later steward or the doctor stops the daemon with it.
                record = {"pid": pid, "gpu": self.gpu_uuid, "started": time.time(), "control": self.control}
                self.record.write_text(json.dumps(record))
                log.info("mps=started gpu=%s pid=%d pipe=%s", self.gpu_uuid, pid, self.pipe_dir)
                return pid
            time.sleep(0.1)
        raise MpsError(
            f"{self.control} for {self.gpu_uuid} did not come up within {timeout:.0f}s (log: {self.log_dir})"
        )

    def _running_pid(self) -> int | None:
        for daemon in find_control_daemons():
            if Path(daemon["pipe_dir"]) == self.pipe_dir:
                return int(daemon["pid"])
        return None

    def server_pids(self) -> list[int]:
        return pids(control_command(self.control, str(self.pipe_dir), "get_server_list"))

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
        survivors = wait_gone([pid, *servers], timeout)
        for left in survivors:
            log.warning("mps=kill gpu=%s pid=%d (did not quit in %.0fs)", self.gpu_uuid, left, timeout)
            try:
                os.kill(left, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_gone(survivors, 5.0)
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

    def running(self) -> bool:
        """The daemon this object started is still up."""
        return self.pid is not None and alive(self.pid)

    def binding_env(self, active_thread_percentage: int | None, pinned_mem_limit: str | None) -> dict[str, str]:
        """Environment of one MPS client job (applied before CUDA initialises in the job)."""
        env = {
            "CUDA_VISIBLE_DEVICES": self.gpu_uuid,
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir),
        }
        if active_thread_percentage is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(active_thread_percentage)
        if pinned_mem_limit is not None:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={pinned_mem_limit}"
        return env


def daemons_serving(gpu_uuid: str, gpu_index: int, own_pipe: Path | None = None) -> list[dict[str, Any]]:
    """Control daemons whose clients would land on this GPU, other than the one on ``own_pipe``."""
    foreign = []
    for daemon in find_control_daemons():
        if own_pipe is not None and Path(daemon["pipe_dir"]) == own_pipe:
            continue
        visible = daemon["visible"]
        if visible is None or gpu_uuid in visible.split(",") or str(gpu_index) in visible.split(","):
            foreign.append(daemon)
    return foreign


class MpsMode:
    """MPS: the jobs are clients of one MPS server on the GPU, through the GPU's own daemon.

    The first resident of the GPU starts its daemon and the others join it. The daemon is kept in the
    GPU's slot after the last resident leaves when ``mode.keep_daemon`` (a following MPS cell on the same
    GPU reuses it; the next non-MPS cell, or the end of the GPU's lease, stops it), else stopped then.
    """

    kind: ClassVar[ModeKind] = mode_of("mps")
    name: ClassVar[str] = kind.name

    def __init__(self, slot: GpuSlot, cell: CellSpec) -> None:
        self.slot, self.cell = slot, cell

    def prepare(self) -> list[Binding]:
        gpu, slot = self.slot.gpu, self.slot
        if gpu.mig_enabled:
            raise ModeError(f"mode=mps: MIG mode is enabled on {gpu.uuid}; MPS over MIG is not supported here")
        daemon = slot.daemon
        root = Path(self.cell.config.mode.pipe_root)
        if daemon is None or not daemon.running() or daemon.dir != root / gpu.uuid:
            slot.stop_daemon()
            daemon = MpsDaemon(gpu.uuid, gpu.index, root, slot.control)
            try:
                daemon.start()
            except MpsError as exc:
                raise ModeError(str(exc)) from None
            slot.daemon = daemon
        return [
            Binding(
                job.index,
                gpu.uuid,
                daemon.binding_env(job.active_thread_percentage, job.pinned_mem_limit),
                mps_pipe_dir=str(daemon.pipe_dir),
                mps_control=slot.control,
            )
            for job in self.cell.jobs
        ]

    def release(self) -> Release:
        # The daemon serves the GPU's other residents while there are any; once the GPU empties it goes,
        # unless mode.keep_daemon keeps it for the lane's next MPS cell (the lease's end stops it then).
        if self.slot.residents or self.cell.config.mode.keep_daemon:
            return Release(mps_daemon_kept=self.slot.daemon is not None)
        return Release(mps_stopped=self.slot.stop_daemon())
