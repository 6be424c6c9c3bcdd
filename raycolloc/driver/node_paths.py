"""Paths a cell's node will use, checked in the driver before Ray starts, where the node is this machine.

A local sweep (no ``cluster.address``, or ``auto``/``localhost``: a Ray instance on this machine) runs
its steward and jobs here, so what they will open can be checked before anything starts: the
steward's ``mode.pipe_root`` (MPS pipes, logs, the fork server's socket: a file there killed the
steward inside Ray), a script job's program and script file (its launcher exits 127 on the node),
and the data directory a ``workload=python`` job is handed. On a cluster at another address these
paths are the nodes' own, which the driver cannot see: the node reports them (an error row).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from raycolloc.config import ClusterConfig, Config, ConfigError
from raycolloc.job.workloads.compose import PythonWorkload, ScriptWorkload
from raycolloc.spec import CellSpec

__all__ = ["check_node_paths", "node_is_here"]

_LOCAL_HOSTS = ("", "auto", "local", "localhost", "127.0.0.1")
_PYTHON_OPTIONS_WITH_VALUE = ("-X", "-W", "-Q")


def node_is_here(cluster: ClusterConfig) -> bool:
    """Whether the cell's node is this machine: a local instance the driver starts or finds (``auto``)."""
    address = cluster.address or os.environ.get("RAY_ADDRESS") or ""
    host = address.removeprefix("ray://").rsplit(":", 1)[0] if ":" in address else address
    return host in _LOCAL_HOSTS


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_pipe_root(root: str) -> None:
    path = Path(root).expanduser()
    found = _nearest_existing(path)
    if not found.is_dir():
        why = "it is a file, not a directory" if found == path else f"{found} is a file, so it cannot be created"
    elif not os.access(found, os.W_OK | os.X_OK):
        why = f"{found} is not writable by this user"
    else:
        return
    raise ConfigError(
        f"mode.pipe_root={root!r} is not allowed: {why}; mode.pipe_root must be a directory this "
        f"user can create and write (the node's MPS pipes and logs, its fork server's socket)"
    )


def _python_script(argv: list[str]) -> str | None:
    """The script file a Python command runs (None for ``-c``, ``-m``, stdin)."""
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in ("-c", "-m", "-") or argv[i].startswith(("-c", "-m")):
            return None
        i += 2 if argv[i] in _PYTHON_OPTIONS_WITH_VALUE else 1
    return argv[i] if i < len(argv) else None


def _check_script(command: tuple[str, ...], cwd: str, env: dict[str, str]) -> None:
    """The program exists (on PATH, or as a path relative to ``cwd``), and so does a Python command's script."""
    from raycolloc.job.script import script_command

    argv = script_command(command)
    program = argv[0]
    shown = f"workload.command={list(command)!r}"
    if "/" in program:
        path = Path(cwd, program).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ConfigError(
                f"{shown}: {path} is not an executable file (relative paths are relative to "
                f"{cwd}, the sweep's directory or workload.cwd)"
            )
    elif shutil.which(program, path=env.get("PATH", os.environ.get("PATH"))) is None:
        raise ConfigError(f"{shown}: {program!r} is not a program on PATH")
    if program == sys.executable or Path(program).name.startswith("python"):
        script = _python_script(argv)
        if script is not None and not Path(cwd, script).expanduser().is_file():
            raise ConfigError(
                f"{shown}: the script {script!r} does not exist in {cwd} (relative paths are relative "
                f"to the sweep's directory, or workload.cwd); give a script file that exists"
            )


def check_node_paths(config: Config, spec: CellSpec) -> None:
    """Refuse what the node would fail on, where the node is this machine (see the module docstring).

    Raises:
        ConfigError: naming the key and what it must be.
    """
    if not node_is_here(config.cluster):
        return
    _check_pipe_root(config.mode.pipe_root)
    for job in spec.jobs:
        workload = job.workload
        if isinstance(workload, ScriptWorkload):
            _check_script(workload.command, workload.cwd or os.getcwd(), workload.env)
        elif isinstance(workload, PythonWorkload) and config.data.source == "real" and job.data.path:
            path = job.data.path
            if "://" not in path and not Path(path).expanduser().exists():
                raise ConfigError(
                    f"data.path={path!r} does not exist; with data.source=real a workload=python "
                    f"job is handed it: give an existing file or directory (or a URL)"
                )
