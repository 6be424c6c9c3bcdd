"""The directories a run makes, and taking them back when it writes nothing in them.

Hydra makes a run's directory (``hydra.run.dir``, ``${out_dir}/runs/<date>/<time>``; a multirun's
``hydra.sweep.dir``) with all its parents before raycolloc has seen the config, and the output lock
makes ``out_dir``. A refused run and a dry run write nothing, so they take back what they made: the
run's directory if it holds only Hydra's own files, then every directory this run made that is empty
now, deepest first (``out_dir`` too, when the run made it). Which ones the run made is noted just
before Hydra makes them (:class:`NoteRunDirs`, a Hydra callback in ``conf/config.yaml``); a directory
that was there before, or that holds anything (another run's files), is never removed.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write
from omegaconf.errors import OmegaConfBaseException

__all__ = ["NoteRunDirs", "discard", "forget", "make", "note", "remove_made"]

_made: list[Path] = []  # directories this process made for its run, outermost first


def note(path: str | Path) -> None:
    """Note the directories that making ``path`` (with its parents) creates: those missing now."""
    path = Path(path).absolute()
    missing = [p for p in (path, *path.parents) if not p.exists()]
    _made.extend(p for p in reversed(missing) if p not in _made)


def make(path: str | Path) -> Path:
    """Make ``path`` with its parents, noting the ones this run made; returns it."""
    note(path)
    Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)


def forget() -> None:
    """A new run: what an earlier run in this process made is not this run's to remove."""
    _made.clear()


def remove_made() -> None:
    """Remove every directory this run made that is empty now, deepest first."""
    for path in sorted(_made, key=lambda p: len(p.parts), reverse=True):
        try:
            path.rmdir()  # only an empty directory: whatever someone put there stays
        except OSError:
            continue
        _made.remove(path)


def discard(run_dir: Path, hydra_files: Collection[str]) -> None:
    """A run that writes nothing: remove ``run_dir`` if this run made it and it holds only
    ``hydra_files`` (Hydra's config record and log), then the directories made for it."""
    run_dir = run_dir.absolute()
    if run_dir in _made and run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= set(hydra_files):
        shutil.rmtree(run_dir, ignore_errors=True)
    remove_made()


class NoteRunDirs(Callback):
    """Hydra callback: before Hydra makes the run's (or the sweep's) directory, fix its path (its
    ``${now:}`` resolved once) and note which directories making it creates."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _note_dir(config, "run")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _note_dir(config, "sweep")


def _note_dir(config: DictConfig, key: str) -> None:
    forget()
    try:
        path = str(OmegaConf.select(config, f"hydra.{key}.dir", throw_on_resolution_failure=True))
    except OmegaConfBaseException:  # Hydra resolves it again and reports the error itself
        return
    # The directory Hydra makes is the one noted, even across a change of the second.
    with read_write(config.hydra[key]):
        config.hydra[key].dir = path
    note(path)
