"""The collocation modes by name: what the steward looks a cell's mode up in."""

from raycolloc.node.modes.base import Mode
from raycolloc.node.modes.mig import MigMode
from raycolloc.node.modes.mps import MpsMode
from raycolloc.node.modes.naive import NaiveMode

__all__ = ["MODES"]

MODES: dict[str, type[Mode]] = {mode.name: mode for mode in (NaiveMode, MpsMode, MigMode)}
