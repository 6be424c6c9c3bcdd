"""The directories a run makes, and taking them back when it writes nothing in them.

Hydra makes a run's directory (``hydra.run.dir``, ``${out_dir}/runs/<date>/<time>``; a multirun's
``hydra.sweep.dir``) with all its parents before raycolloc has seen the config, and the output lock
makes ``out_dir``. A refused run and a dry run write nothing, so they take back what they made: the
run's directory if it holds only Hydra's own files, then every directory this run made that is empty
now, deepest first (``out_dir`` too, when the run made it). Which ones the run made is noted just
before Hydra makes them (:class:`NoteRunDirs`, a Hydra callback in ``conf/config.yaml``); a directory
that was there before, or that holds anything (another run's files), is never removed. One function
takes them back (:func:`discard_run`), for a dry run (:func:`raycolloc.driver.plan.run`) and for a
refused one (the command line's main).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write
from omegaconf.errors import OmegaConfBaseException

__all__ = ["HYDRA_FILES", "NoteRunDirs", "discard_run", "forget", "make", "note", "remove_made"]

_made: list[Path] = []  # directories this process made for its run, outermost first
# What Hydra (and the launcher, for a multirun's cells) writes in a run's directories before a cell runs:
# its config record, a multirun's list of jobs, the job's log (``<job name>.log``, noted with the run).
HYDRA_FILES = {".hydra", "multirun.yaml", "sweep.log"}
_logs: set[str] = set()


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
    _logs.clear()


def remove_made() -> None:
    """Remove every directory this run made that is empty now, deepest first."""
    for path in sorted(_made, key=lambda p: len(p.parts), reverse=True):
        try:
            path.rmdir()  # only an empty directory: whatever someone put there stays
        except OSError:
            continue
        _made.remove(path)


def discard_run() -> None:
    """A run that wrote nothing (refused, or a dry run): remove every directory this run made that
    holds only Hydra's files (the run's or the sweep's directory, a multirun's cell directories),
    deepest first, then the directories made for them that are empty now."""
    for path in sorted(_made, key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and {p.name for p in path.iterdir()} <= HYDRA_FILES | _logs:
            shutil.rmtree(path, ignore_errors=True)
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
    _logs.add(f"{OmegaConf.select(config, 'hydra.job.name', default='sweep')}.log")
