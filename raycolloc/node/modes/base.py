"""The interface every collocation mode implements, and the GPU slot the steward keeps per GPU.

A mode prepares one GPU for one cell and returns one :class:`~raycolloc.spec.Binding` per job
(the environment and device each job's training process starts with), then releases what it
changed. A GPU holds a set of residents (the cells prepared on it: a sweep's cell alone, or a queue's
jobs side by side); what joining and leaving it means is the mode's (MPS: the first resident starts the
GPU's daemon, the last one's release stops it). The steward picks the mode by name from
:data:`raycolloc.node.modes.registry.MODES`; nothing above this package knows which modes exist.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from raycolloc.mode_kinds import ModeKind
from raycolloc.node.gpu.backend import GpuBackend, GpuInfo
from raycolloc.spec import Binding, CellSpec, Release

if TYPE_CHECKING:
    from raycolloc.node.modes.mps import MpsDaemon

__all__ = ["GpuSlot", "Mode", "ModeError", "check_joining"]

log = logging.getLogger(__name__)


class ModeError(RuntimeError):
    """The GPU cannot be prepared for the mode as it is (the message says why and what to do)."""


@dataclass
class GpuSlot:
    """One GPU of the node, as the steward holds it from cell to cell.

    Attributes:
        backend: the node's GPU backend.
        gpu: the GPU as the backend saw it when the current cell arrived.
        control: the MPS control executable (NVIDIA's, or the simulated one).
        daemon: this GPU's MPS control daemon, kept between consecutive MPS cells.
        dirs: the GPU's directories under ``mode.pipe_root`` that cells used.
        residents: the cells prepared on the GPU and not yet released (the steward keeps it; a mode's
            ``release`` reads it: the GPU emptied when the set is empty).
        lock: held by the steward around a mode's prepare and release on this GPU: residents joining and
            leaving at once must not both start (or one stop under the other) the GPU's MPS daemon.
    """

    backend: GpuBackend
    gpu: GpuInfo
    control: str
    daemon: MpsDaemon | None = None
    dirs: set[Path] = field(default_factory=set)
    residents: set[str] = field(default_factory=set)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def dir(self, cell: CellSpec) -> Path:
        """This GPU's directory under the cell's ``mode.pipe_root`` (MPS pipes, logs, records);
        the slot remembers it, to remove it when the GPU's lease ends."""
        path = Path(cell.config.mode.pipe_root) / self.gpu.uuid
        self.dirs.add(path)
        return path

    def stop_daemon(self) -> bool:
        """Stop the MPS daemon kept from an earlier MPS cell; True if there was one."""
        if self.daemon is None:
            return False
        daemon, self.daemon = self.daemon, None
        daemon.stop()
        return True


class Mode(Protocol):
    """One way of sharing a GPU among a cell's jobs."""

    kind: ClassVar[ModeKind]  # what every part reads about the mode (raycolloc.mode_kinds)
    name: ClassVar[str]  # kind.name

    def __init__(self, slot: GpuSlot, cell: CellSpec) -> None: ...

    def prepare(self) -> list[Binding]:
        """Make the GPU ready; one binding per job, in job order.

        Raises:
            ModeError: the GPU cannot run this cell as it is; nothing was left changed.
        """
        ...

    def release(self) -> Release:
        """The cell leaves the GPU (it is no longer in ``slot.residents``): undo what :meth:`prepare`
        changed for it, and where the GPU emptied what its residents shared (keeping what the next cell
        may reuse); what was done."""
        ...


def check_joining(mode: type[Mode], gpu_uuid: str, residents: Collection[str]) -> None:
    """A job joins a GPU's residents (``residents``: their modes' names) only in their own mode, and only in a
    mode whose jobs may join and leave a GPU (:attr:`~raycolloc.mode_kinds.ModeKind.queued`; MIG's layout is
    fixed for a cell's life).

    Raises:
        ModeError: it may not join them.
    """
    others = set(residents)
    if others and (others != {mode.name} or not mode.kind.queued):
        raise ModeError(
            f"mode={mode.name}: GPU {gpu_uuid} holds jobs of mode {', '.join(sorted(others))}; a job joins only "
            "jobs of its own mode, in a mode whose jobs may join and leave (mode_kinds: queued)"
        )
