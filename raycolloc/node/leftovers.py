"""What earlier raycolloc runs left on a node, and putting it right.

A steward keeps each GPU's state under ``<mode.pipe_root>/<gpu uuid>/``: the MPS daemon's pipe and
log directories and its record (``daemon.json``), the MIG layout it found before changing it
(``mig-found.json``), and ``steward.json``, naming the steward that uses the directory (host, pid,
process start time). The records are files, so they survive a SIGKILL of the driver, of Ray, or
of the steward itself, as the daemon and the MIG layout do.

A directory whose steward is gone is a leftover: its daemon is stopped, its MIG layout restored,
and the directory removed. So are the socket and log of a dead steward's fork server
(``forkserver-<steward pid>.{sock,log}`` in ``mode.pipe_root``), where the server was SIGKILLed
itself (one that ends with its steward removes them). A directory whose steward still runs (another Ray instance on this
host, say) is in use and never touched. Every steward does this for its GPUs when it starts, and
``python -m raycolloc.doctor`` reports (and with ``--fix`` cleans) it for the whole node, without
Ray.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import psutil

from raycolloc.mpsctl import CONTROL
from raycolloc.node.gpu.backend import GpuBackend
from raycolloc.node.mig.placement import gpu_model_of
from raycolloc.node.modes.mig import MIG_RECORD, restore_layout
from raycolloc.node.modes.mps import MpsDaemon, find_control_daemons

__all__ = [
    "OWNER_FILE",
    "InUse",
    "Leftover",
    "Owner",
    "claim",
    "clean_leftovers",
    "find_leftovers",
    "open_recorded_backend",
    "read_owner",
]

log = logging.getLogger(__name__)
OWNER_FILE = "steward.json"
SIM_CONTROL_DIR = "sim-bin"  # where runs before issue 46 installed the simulated nvidia-cuda-mps-control


@dataclass(frozen=True)
class Owner:
    """The steward process that uses a GPU directory."""

    host: str
    pid: int
    started: float  # the process's start time: a pid reused by another process is not the owner

    @classmethod
    def me(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid(), psutil.Process().create_time())

    def alive(self) -> bool:
        """The owner still runs (on another host: assumed so, this node cannot tell)."""
        if self.host != socket.gethostname():
            return True
        try:
            proc = psutil.Process(self.pid)
            # A zombie is dead: where nothing reaps orphans (a container without an init), a killed
            # steward stays one.
            return abs(proc.create_time() - self.started) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"steward pid {self.pid} on {self.host}, started {started}"


@dataclass(frozen=True)
class Leftover:
    """One thing a dead run left: an MPS daemon, a MIG layout to restore, a directory or a file."""

    kind: Literal["mps-daemon", "mig-layout", "directory", "file"]
    gpu_uuid: str
    path: Path
    detail: str
    pid: int | None = None


@dataclass(frozen=True)
class InUse:
    """A GPU directory a running steward uses (not a leftover)."""

    path: Path
    owner: Owner


def claim(gpu_dir: Path) -> None:
    """Record that this process (a steward) uses ``gpu_dir`` (written atomically)."""
    gpu_dir.mkdir(parents=True, exist_ok=True)
    tmp = gpu_dir / f".{OWNER_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(asdict(Owner.me())))
    os.replace(tmp, gpu_dir / OWNER_FILE)


def read_owner(gpu_dir: Path) -> Owner | None:
    """The steward recorded as using ``gpu_dir``, or None (no record, or an unreadable one)."""
    try:
        return Owner(**json.loads((gpu_dir / OWNER_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _daemon_pids(gpu_dir: Path) -> list[int]:
    """MPS control daemons whose pipe directory lies in ``gpu_dir``, and the one its record names."""
    found = {int(d["pid"]) for d in find_control_daemons() if Path(d["pipe_dir"]).is_relative_to(gpu_dir)}
    try:
        recorded = int(json.loads((gpu_dir / "daemon.json").read_text())["pid"])
        if psutil.pid_exists(recorded):
            found.add(recorded)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return sorted(found)


def find_leftovers(
    pipe_root: str | Path, gpu_uuids: Collection[str] | None = None
) -> tuple[list[Leftover], list[InUse]]:
    """Leftovers under ``pipe_root`` (only of ``gpu_uuids`` if given), and the directories in use."""
    root = Path(pipe_root)
    leftovers: list[Leftover] = []
    in_use: list[InUse] = []
    if not root.is_dir():
        return leftovers, in_use
    for path in sorted(root.glob("forkserver-*")):
        pid = path.name.split("-", 1)[1].split(".", 1)[0]
        if path.is_file() or path.is_socket():
            if pid.isdigit() and not psutil.pid_exists(int(pid)):
                leftovers.append(Leftover("file", "", path, f"{path.name} of fork server of steward pid {pid} (gone)"))
    for gpu_dir in sorted(p for p in root.iterdir() if p.is_dir() and p.name != SIM_CONTROL_DIR):
        uuid = gpu_dir.name
        if gpu_uuids is not None and uuid not in gpu_uuids:
            continue
        owner = read_owner(gpu_dir)
        if owner is not None and owner.alive():
            in_use.append(InUse(gpu_dir, owner))
            continue
        left_by = owner.describe() if owner else "a run that left no owner record"
        for daemon in _daemon_pids(gpu_dir):
            leftovers.append(
                Leftover(
                    "mps-daemon",
                    uuid,
                    gpu_dir,
                    f"MPS control daemon pid {daemon} of GPU {uuid}, started by {left_by}",
                    pid=daemon,
                )
            )
        if (gpu_dir / MIG_RECORD).exists():
            leftovers.append(
                Leftover(
                    "mig-layout",
                    uuid,
                    gpu_dir / MIG_RECORD,
                    f"GPU {uuid} holds a MIG layout {left_by} made; the one it found is in {gpu_dir / MIG_RECORD}",
                )
            )
        leftovers.append(Leftover("directory", uuid, gpu_dir, f"directory {gpu_dir} ({left_by})"))
    return leftovers, in_use


def _control_for(pid: int | None, gpu_dir: Path) -> str:
    """The control executable that speaks to this daemon: the one its record names (a simulated
    daemon's is its install's, :func:`~raycolloc.node.gpu.sim_mps.install_control`), else the one
    an older run installed under ``pipe_root``, else NVIDIA's."""
    try:
        recorded = str(json.loads((gpu_dir / "daemon.json").read_text())["control"])
        if shutil.which(recorded) is not None:
            return recorded
    except (OSError, ValueError, KeyError, TypeError):
        pass
    sim = gpu_dir.parent / SIM_CONTROL_DIR / CONTROL
    try:
        simulated = pid is not None and "raycolloc.node.gpu.sim_mps" in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        simulated = False
    return str(sim) if simulated and sim.exists() else CONTROL


def open_recorded_backend(env: dict[str, str]) -> GpuBackend:
    """The GPU backend a MIG record's environment points to: simulated devices, else NVML."""
    from raycolloc.node.gpu.sim import STATE_ENV, SimBackend

    if STATE_ENV in env:
        return SimBackend.from_state(env[STATE_ENV])
    from raycolloc.node.gpu.nvml import NvmlBackend  # only where a real GPU's record asks for it

    return NvmlBackend()


def clean_leftovers(found: list[Leftover], open_backend: Callable[[dict[str, str]], GpuBackend]) -> list[str]:
    """Stop the daemons, restore the MIG layouts, then remove the directories; returns one line per
    thing that could not be put right (a directory is kept while something in it was not).

    Args:
        open_backend: the GPU backend that reaches a recorded GPU, from the environment its MIG
            record names (the simulated devices' state file; empty for NVML).
    """
    failed: list[str] = []
    dirty: set[Path] = set()
    for item in found:
        gpu_dir = item.path if item.kind != "mig-layout" else item.path.parent
        try:
            if item.kind == "mps-daemon":
                daemon = MpsDaemon(item.gpu_uuid, -1, gpu_dir.parent, _control_for(item.pid, gpu_dir))
                daemon.pid = item.pid
                daemon.stop()
                log.warning("leftover=mps-daemon gpu=%s pid=%s stopped", item.gpu_uuid, item.pid)
            elif item.kind == "mig-layout":
                record = json.loads(item.path.read_text())
                backend = open_backend(record.get("env") or {})
                gpu = backend.gpu(item.gpu_uuid)
                restore_layout(backend, gpu, gpu_model_of(gpu.name), [tuple(i) for i in record["instances"]])
                item.path.unlink()
                log.warning("leftover=mig-layout gpu=%s restored", item.gpu_uuid)
            elif item.kind == "file":
                item.path.unlink(missing_ok=True)
            elif gpu_dir not in dirty:
                shutil.rmtree(gpu_dir)
        except Exception as exc:  # noqa: BLE001 - report it and keep the record for the doctor
            dirty.add(gpu_dir)
            failed.append(f"{item.detail}: {type(exc).__name__}: {exc}")
    return failed
