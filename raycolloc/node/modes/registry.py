"""The collocation modes by name: what the steward looks a cell's mode up in.

Each implementation is paired with its entry of :data:`raycolloc.mode_kinds.MODE_KINDS` (the data every
part reads about a mode), one each and in that order; an entry without an implementation, or one
whose name is not a mode, fails on import.
"""

from raycolloc.mode_kinds import MODE_NAMES
from raycolloc.node.modes.base import Mode
from raycolloc.node.modes.mig import MigMode
from raycolloc.node.modes.mps import MpsMode
from raycolloc.node.modes.naive import NaiveMode

__all__ = ["MODES"]

_BY_NAME: dict[str, type[Mode]] = {mode.name: mode for mode in (NaiveMode, MpsMode, MigMode)}
if sorted(_BY_NAME) != sorted(MODE_NAMES):
    raise ImportError(f"mode implementations {sorted(_BY_NAME)} do not match the modes {list(MODE_NAMES)}")
MODES: dict[str, type[Mode]] = {name: _BY_NAME[name] for name in MODE_NAMES}
