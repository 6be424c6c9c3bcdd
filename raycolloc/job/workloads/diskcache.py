"""The machine's cache of what is slow to learn and never changes for one install: memory estimates
(:mod:`raycolloc.job.workloads.estimate`) and timm's model names (:mod:`raycolloc.job.workloads.compose`).

JSON files under ``$RAYCOLLOC_CACHE_DIR``, else ``~/.cache/raycolloc``. A file is replaced atomically:
a reader never sees half a file; a torn or unreadable one reads as absent and is computed again; an
unwritable directory (a read-only home) only means computing it again in every process.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["cache_path", "read_json", "write_json"]

log = logging.getLogger(__name__)


def cache_path(name: str) -> Path:
    """The cache file ``name``."""
    root = os.environ.get("RAYCOLLOC_CACHE_DIR") or Path.home() / ".cache" / "raycolloc"
    return Path(root) / name


def read_json(name: str) -> Any:
    """The content of cache file ``name``, or None (absent, unreadable or torn)."""
    try:
        return json.loads(cache_path(name).read_text())
    except (OSError, ValueError):
        return None


def write_json(name: str, data: Any) -> None:
    """Replace cache file ``name`` by ``data`` (atomically; an error is logged, never raised)."""
    path = cache_path(name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as exc:
        log.debug("%s not cached: %s", path, exc)
