"""The sweep command's last step, however it ended (results, an error, Ctrl-C, SIGTERM): Ray shut
down, and nothing of the sweep left on this host.

Normally the lanes leave nothing: each ends its lease through the node's steward, which stops the
GPU's MPS daemon and restores its MIG layout. A steward that died during a cell (killed, or its
Ray instance gone) cannot: its daemon outlives it, as on a GPU. So after Ray is shut down (a local
instance the sweep started stops with it, and its processes are waited for), what a dead steward
left under the sweep's ``mode.pipe_root`` on this host is put right from its records
(:mod:`raycolloc.node.leftovers`, the doctor's ``--fix``), in one log line. A directory whose
steward still runs (a cluster the sweep joined) is in use and never touched; a dead steward's
daemon on another node is stopped by that node's next steward.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import psutil

from raycolloc.node.leftovers import clean_leftovers, find_leftovers, open_recorded_backend

__all__ = ["begin", "note_pipe_root", "shut_down"]

log = logging.getLogger("raycolloc")
RAY_EXIT_S = 15.0  # Ray's shutdown gives each of its processes 1 s before SIGKILL; workers follow the raylet
_pipe_roots: set[Path] = set()  # every mode.pipe_root a sweep of this process used
_keep_ray = {"connected": False}  # connected before the command began (an in-process caller's Ray)


def begin() -> None:
    """The command begins: a Ray connection this process already has is the caller's, and stays."""
    ray = sys.modules.get("ray")
    _keep_ray["connected"] = ray is not None and ray.is_initialized()


def note_pipe_root(root: str | Path) -> None:
    """The engine used ``root``: look there for what a dead steward left when the command ends."""
    _pipe_roots.add(Path(root))


def _stop_ray() -> None:
    """Disconnect from Ray; a local instance this process started stops, and its processes (this
    process's children: GCS, raylet, agents, workers) are waited for, the slow ones killed."""
    ray = sys.modules.get("ray")  # a sweep refused before Ray was imported has none to stop
    if ray is None or not ray.is_initialized() or _keep_ray["connected"]:
        return
    ours = psutil.Process().children(recursive=True)
    ray.shutdown()
    _, alive = psutil.wait_procs(ours, timeout=RAY_EXIT_S)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5.0)


def _clean(root: Path) -> None:
    found, _ = find_leftovers(root)
    held = [item for item in found if item.kind in ("mps-daemon", "mig-layout")]
    if not found:
        return
    failed = clean_leftovers(found, open_recorded_backend)
    if held:
        done = "; ".join(item.detail for item in held)
        log.warning(
            "a steward died during the sweep: put right on this host: %s%s",
            done,
            f" (not fixed: {'; '.join(failed)}; `python -m raycolloc.doctor` reports it)" if failed else "",
        )


def shut_down() -> None:
    """Stop Ray, then put right what a dead steward of the sweep left on this host."""
    _stop_ray()
    roots = sorted(_pipe_roots)
    _pipe_roots.clear()  # this command's: an in-process caller's next command starts afresh
    for root in roots:
        _clean(root)
