"""The resume index: which cells already have a valid result, wherever a sweep wrote them.

Resume is keyed to the work (the config hash), not to a directory: a re-run finds a cell's result
wherever an earlier sweep of the same ``out_dir`` wrote it. The index looks in three places: the
directory the sweep writes to now (``hydra.sweep.dir``, its own earlier results included), ``out_dir``
itself (every sweep written under it), and every sweep directory outside ``out_dir`` that an earlier
sweep of this ``out_dir`` wrote to, listed in ``<out_dir>/.raycolloc-sweeps`` (one path a line,
appended under the output lock: :func:`register_sweeps`). So the index is one per ``out_dir``: a sweep
with another ``out_dir`` finds these results only in its own sweep directory. A result is a cell whose status is one
of :data:`RESULT_STATUSES` and whose four tables
read back and agree (:func:`raycolloc.results.store.read_cell`); a cell that ended in ``error``
or was ``skipped`` is not, so a re-run tries it again. A directory whose tables are corrupt is set
aside (renamed ``<name>.invalid-<time>``, kept for inspection) and the cell runs again.

A reused cell is referenced from the new sweep, not copied: its directory there holds only
``reused.json`` naming the result, so the results tree holds each measurement once. The reference
names the result relative to itself as well as absolutely, so a results tree copied elsewhere (from
a cluster to a laptop) still finds its reused cells.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from raycolloc.results.errors import ResultWriteError, free_space
from raycolloc.results.rows import RESULT_STATUSES
from raycolloc.results.store import InvalidResult, read_cell, read_parquet

__all__ = [
    "REFERENCE",
    "RESULT_STATUSES",
    "SWEEPS_FILE",
    "ResultIndex",
    "Reused",
    "known_sweeps",
    "read_reference",
    "register_sweeps",
    "sweep_root",
    "write_reference",
]

log = logging.getLogger(__name__)
REFERENCE = "reused.json"
SWEEPS_FILE = ".raycolloc-sweeps"  # in out_dir: the sweep directories outside it that its sweeps wrote to


def sweep_root(cell_dirs: Iterable[Path]) -> Path:
    """Where a sweep writes: the directory holding all of its cells (one cell: its own directory)."""
    return Path(os.path.commonpath([str(Path(d).absolute()) for d in cell_dirs]))


def known_sweeps(out_dir: str | Path) -> list[Path]:
    """The sweep directories outside ``out_dir`` that its sweeps wrote to (those still there or not)."""
    try:
        lines = (Path(out_dir) / SWEEPS_FILE).read_text().splitlines()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        log.warning(
            "resume index %s unreadable (%s): sweeps outside out_dir are not looked in",
            Path(out_dir) / SWEEPS_FILE,
            exc,
        )
        return []
    return [Path(line) for line in dict.fromkeys(lines) if line.startswith("/")]


def register_sweeps(out_dir: str | Path, roots: Iterable[Path]) -> None:
    """Add the sweep directories in ``roots`` that lie outside ``out_dir`` to its index. Call it while
    holding ``out_dir`` (:func:`raycolloc.driver.outlock.hold_output`): the file is appended unlocked.

    Raises:
        ResultWriteError: the index cannot be written (naming the path and the free space).
    """
    base = Path(out_dir).resolve()
    known = set(known_sweeps(base))
    new = [r for r in dict.fromkeys(Path(r).resolve() for r in roots) if not r.is_relative_to(base) and r not in known]
    if not new:
        return
    path = base / SWEEPS_FILE
    try:
        with path.open("a") as index:
            index.writelines(f"{r}\n" for r in new)
    except OSError as exc:
        raise ResultWriteError(f"cannot write {path}: {exc.strerror} ({free_space(base)})") from exc


def _scan_roots(roots: Iterable[Path]) -> list[Path]:
    """The existing directories among ``roots``, none inside another (each is searched whole)."""
    found = sorted({r.resolve() for r in roots if r.is_dir()}, key=lambda r: len(r.parts))
    kept: list[Path] = []
    for root in found:
        if not any(root.is_relative_to(k) for k in kept):
            kept.append(root)
    return kept


@dataclass(frozen=True)
class Reused:
    """A cell whose valid result already exists."""

    path: Path
    status: str


@dataclass(frozen=True)
class _Candidate:
    path: Path
    status: str
    finished_at: float


class ResultIndex:
    """Config hash -> the newest valid result under ``root`` (an ``out_dir``), the sweep directories
    its index file lists and ``also`` (the directory the sweep writes to now). Built once per sweep,
    in the driver."""

    def __init__(self, root: str | Path, repair: bool = True, also: Iterable[Path] = ()) -> None:
        self.root = Path(root)
        self.repair = repair  # False (a dry run): invalid results are reported, never renamed
        self._candidates: dict[str, list[_Candidate]] = {}
        self.set_aside: list[tuple[Path, str]] = []
        self.roots = _scan_roots([self.root, *also, *known_sweeps(self.root)])
        for where in self.roots:
            for path in where.rglob("cells.parquet"):
                self._add(path)
        for found in self._candidates.values():
            found.sort(key=lambda c: c.finished_at, reverse=True)

    def _add(self, path: Path) -> None:
        try:
            table = read_parquet(path, columns=["config_hash", "status", "finished_at"])
            digest, status, finished = (table.column(c)[0].as_py() for c in ("config_hash", "status", "finished_at"))
        except (OSError, pa.ArrowException, KeyError, IndexError) as exc:
            self._set_aside(path.parent, f"cells.parquet unreadable: {exc}")
            return
        if status in RESULT_STATUSES:
            when = finished if finished is not None else path.stat().st_mtime
            self._candidates.setdefault(digest, []).append(_Candidate(path.parent, status, when))

    def _set_aside(self, cell_dir: Path, why: str) -> None:
        if not self.repair:
            self.set_aside.append((cell_dir, why))
            return
        target = cell_dir.with_name(f"{cell_dir.name}.invalid-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            cell_dir.rename(target)
        except OSError as exc:
            log.warning("result=invalid path=%s reason=%s set_aside_failed=%s", cell_dir, why, exc)
            return
        self.set_aside.append((target, why))
        log.warning("result=invalid path=%s reason=%s set_aside=%s: the cell runs again", cell_dir, why, target)

    def find(self, config_hash: str) -> Reused | None:
        """The newest valid result for ``config_hash``; invalid candidates are set aside on the way."""
        for candidate in self._candidates.get(config_hash, []):
            try:
                read_cell(candidate.path)
            except InvalidResult as exc:
                self._set_aside(candidate.path, str(exc))
                continue
            return Reused(candidate.path, candidate.status)
        return None


def write_reference(cell_dir: Path, result: Reused, config_hash: str) -> None:
    """Record in ``cell_dir`` that this cell's result is ``result`` (written atomically)."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    tmp = cell_dir / f".{REFERENCE}.tmp"
    target = result.path.resolve()
    tmp.write_text(
        json.dumps(
            {
                "result": str(target),
                "relative": os.path.relpath(target, cell_dir.resolve()),
                "config_hash": config_hash,
                "status": result.status,
                "referenced_at": time.time(),
            }
        )
    )
    tmp.replace(cell_dir / REFERENCE)


def read_reference(cell_dir: Path) -> Path | None:
    """The result a reference in ``cell_dir`` names, or None if ``cell_dir`` holds none: found
    relative to the reference where the tree moved, else at its absolute path."""
    ref = cell_dir / REFERENCE
    if not ref.is_file():
        return None
    named = json.loads(ref.read_text())
    moved = (cell_dir / named["relative"]).resolve() if named.get("relative") else None
    return moved if moved is not None and moved.is_dir() else Path(named["result"])
