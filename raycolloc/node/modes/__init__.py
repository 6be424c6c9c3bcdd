"""Collocation modes behind one interface (:class:`~raycolloc.node.modes.base.Mode`): naive
time-slicing, MPS and MIG, registered by name."""

from raycolloc.node.modes.base import GpuSlot, Mode, ModeError
from raycolloc.node.modes.mig import MigMode
from raycolloc.node.modes.mps import MpsMode
from raycolloc.node.modes.naive import NaiveMode

__all__ = ["MODES", "GpuSlot", "Mode", "ModeError"]

MODES: dict[str, type[Mode]] = {mode.name: mode for mode in (NaiveMode, MpsMode, MigMode)}
