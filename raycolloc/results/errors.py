"""What can go wrong with results, without pyarrow: the errors of reading and writing a cell's tables,
and the free-space line their messages carry. (The command line imports these to report a failure;
a config error is refused before pyarrow, Ray or pandas are imported.)"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["InvalidResult", "ResultError", "ResultWriteError", "SweepDirError", "UnknownSchemaVersion", "free_space"]


class ResultError(Exception):
    """Base of what can go wrong reading or writing results: a library raises it, a main chooses the exit."""


class InvalidResult(ResultError, ValueError):
    """A cell directory whose tables are missing, unreadable or disagree; the message says which."""


class UnknownSchemaVersion(InvalidResult):
    """A table written by a raycolloc whose schema this one cannot read."""


class SweepDirError(ResultError):
    """A sweep directory given to read is missing, holds no raycolloc cell, holds only corrupt ones, or
    another schema version; the message names the path (:mod:`analysis.load`). The command-line mains
    exit 2 on it (a bad argument)."""


class ResultWriteError(ResultError, RuntimeError):
    """A cell's tables could not be written; the message names the path, the error and the free space."""


def free_space(path: str | Path) -> str:
    """Free space on the file system of ``path`` (or its nearest existing parent), for messages."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return f"{shutil.disk_usage(probe).free / (1 << 20):,.1f} MiB free on {probe}"
    except OSError as exc:
        return f"free space of {probe} unknown ({exc.strerror})"
