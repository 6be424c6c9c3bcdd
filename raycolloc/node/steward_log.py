"""Where the steward's lines go: its warnings to the console, its INFO lines to a file.

Ray forwards what an actor writes to every driver of the instance, so the steward's INFO lines
(``mps=started``, ``mps=stopped``, ``reserved_cpus=...``, one or two a cell) reached each sweep's, advice's
and queue's console, between their own lines (issue 46, item 7). They go to
``raycolloc-steward-<pid>.log`` in Ray's log directory instead (``/tmp/ray/session_latest/logs`` for a
local instance), beside the actor's own ``worker-*.out``/``.err``; its warnings still reach the console.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

__all__ = ["FORMAT", "log_dir", "steward_logging"]

FORMAT = "%(asctime)s %(levelname)s steward %(message)s"
_NAME = "raycolloc.steward"  # the handlers this module adds, by name: a second call replaces them


def log_dir() -> Path | None:
    """Ray's log directory on this node, as this worker sees it; None outside a Ray worker."""
    try:
        import ray._private.worker as ray_worker

        node = ray_worker._global_node
        return Path(node.get_logs_dir_path()) if node is not None else None
    except (ImportError, AttributeError):  # a Ray without this private path: the console keeps every line
        return None


def steward_logging(directory: Path | None = None) -> Path | None:
    """Set this process's logging for a steward; the file its INFO lines go to (None: there is no log
    directory, and the console says them as before)."""
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for old in [h for h in root.handlers if h.get_name() == _NAME]:
        root.removeHandler(old)
        old.close()
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter(FORMAT))
    console.set_name(_NAME)
    found = directory or log_dir()
    path = None if found is None else found / f"raycolloc-steward-{os.getpid()}.log"
    if path is not None:
        try:
            to_file = logging.FileHandler(path)
        except OSError:
            path = None
        else:
            to_file.setFormatter(logging.Formatter(FORMAT))
            to_file.set_name(_NAME)
            root.addHandler(to_file)
            console.setLevel(logging.WARNING)
    root.addHandler(console)
    return path
