"""Where a node keeps raycolloc's state by default: under ``/tmp``, per user, and per install where the
state is simulated.

Issue 46, item 4: every run on a machine used one ``/tmp/raycolloc-mps`` and one ``/tmp/raycolloc-sim``,
so every simulated run had the same GPU UUIDs, and one checkout's steward found (and stopped) another
checkout's MPS daemon on "its" GPU. Now:

* ``mode.pipe_root`` defaults to ``$RAYCOLLOC_PIPE_ROOT``, else ``/tmp/raycolloc-<uid>/mps``: one
  user's, and the same for every run of that user, so a re-run on a real GPU finds a daemon a killed
  run left (the steward stops it) and ``raycolloc doctor`` looks where the runs wrote;
* ``cluster.sim_root`` defaults to ``/tmp/raycolloc-<uid>/sim-<install>``: one simulated machine per
  user and install (a checkout, a virtual environment), whose GPU UUIDs derive from that directory
  (:mod:`raycolloc.node.gpu.simdevice`), so two installs' MPS daemons live in different pipe
  directories and never meet. ``$RAYCOLLOC_SIM_ROOT`` or ``cluster.sim_root=`` gives a run its own.

``/tmp`` and not ``$TMPDIR``: an MPS pipe's socket path must stay under ~100 characters.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["PIPE_ROOT_ENV", "default_pipe_root", "default_sim_root", "install_key", "user_dir"]

_TMP = Path("/tmp")
PIPE_ROOT_ENV = "RAYCOLLOC_PIPE_ROOT"


def user_dir() -> Path:
    """This user's directory of raycolloc state on this machine (``/tmp/raycolloc-<uid>``)."""
    return _TMP / f"raycolloc-{os.getuid()}"


def install_key(package_dir: str | Path | None = None) -> str:
    """A short name of this install: a hash of where its ``raycolloc`` package lies (a checkout, a
    virtual environment's site-packages)."""
    where = Path(package_dir) if package_dir is not None else Path(__file__).parent
    return hashlib.sha256(str(where.resolve()).encode()).hexdigest()[:8]


def default_pipe_root() -> str:
    """``mode.pipe_root``'s default: ``$RAYCOLLOC_PIPE_ROOT`` (a test session's own), else this user's,
    the same for every run (see the module docstring)."""
    return os.environ.get(PIPE_ROOT_ENV) or str(user_dir() / "mps")


def default_sim_root() -> str:
    """``cluster.sim_root``'s default: this user's simulated machine of this install."""
    return str(user_dir() / f"sim-{install_key()}")
