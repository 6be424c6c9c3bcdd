"""Paths a cell's node will use, checked in the driver before Ray starts, where the node is this machine.

A local sweep (no ``cluster.address``, or ``auto``/``localhost``: a Ray instance on this machine) runs
its steward and jobs here, so what they will open can be checked before anything starts: the
steward's ``mode.pipe_root`` (MPS pipes, logs, the fork server's socket: a file there killed the
steward inside Ray), the simulated GPUs' ``cluster.sim_root`` and the compile cache (each named by the
environment variable that gave it, where one did), a script job's program and script file (its launcher
exits 127 on the node), and the data directory a ``workload=python`` job is handed. On a cluster at
another address these paths are the nodes' own, which the driver cannot see: the node reports them (an
error row).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from raycolloc.config import ClusterConfig, Config, ConfigError
from raycolloc.config_groups import compile_cache_at
from raycolloc.node.gpu.kinds import backend_traits
from raycolloc.spec import CellSpec
from raycolloc.workload_kinds import PythonWorkload, ScriptWorkload

__all__ = ["check_node_dir", "check_node_paths", "dir_problem", "node_is_here"]

_LOCAL_HOSTS = ("", "auto", "local", "localhost", "127.0.0.1")
_PYTHON_OPTIONS_WITH_VALUE = ("-X", "-W", "-Q")
# Keys whose value conf/ reads from an environment variable by default: a refusal names the variable.
_ENV_OF = {"cluster.sim_root": "RAYCOLLOC_SIM_ROOT"}


def node_is_here(cluster: ClusterConfig) -> bool:
    """Whether the cell's node is this machine: a local instance the driver starts or finds (``auto``)."""
    address = cluster.address or os.environ.get("RAY_ADDRESS") or ""
    host = address.removeprefix("ray://").rsplit(":", 1)[0] if ":" in address else address
    return host in _LOCAL_HOSTS


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _cannot_write(folder: Path) -> str | None:
    """Why this user cannot make a directory in ``folder`` (None: it can). Made and removed at once:
    as root, ``os.access`` says yes to /proc, where nothing can be made."""
    try:
        Path(tempfile.mkdtemp(prefix=".raycolloc-probe-", dir=folder)).rmdir()
    except OSError as exc:
        return f"no directory can be made in {folder} ({exc.strerror})"
    return None


def dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a directory this user makes and writes (None: it can)."""
    found = _nearest_existing(path)
    if not found.is_dir():
        return "it is a file, not a directory" if found == path else f"{found} is a file, so it cannot be created"
    return _cannot_write(found)


def check_node_dir(name: str, value: str, role: str, shown: str | None = None) -> None:
    """``value`` is a directory this user can create and write, or refused naming ``name`` (the key or
    the environment variable that gave it; ``shown``: how the message shows it, default ``name=value``).

    Raises:
        ConfigError: it is a file, lies under a file, or cannot be made or written.
    """
    why = dir_problem(Path(value).expanduser())
    if why is not None:
        raise ConfigError(
            f"{shown or f'{name}={value!r}'} is not allowed: {why}; {name} must be a directory this "
            f"user can create and write ({role})"
        )


def _check_pipe_root(root: str) -> None:
    check_node_dir("mode.pipe_root", root, "the node's MPS pipes and logs, its fork server's socket")


def _check_state_dirs(config: Config) -> None:
    """The GPU backend's state directory (``cluster.sim_root``: conf/cluster reads $RAYCOLLOC_SIM_ROOT)
    and the compile cache (``trainer.compile_cache``, else $RAYCOLLOC_COMPILE_CACHE): a file there
    killed the steward, or every training process, inside Ray with a message that named neither."""
    key = backend_traits(config.cluster.backend).state_dir_key
    if key is not None:
        value, name = str(getattr(config.cluster, key)), f"cluster.{key}"
        var = _ENV_OF.get(name)
        from_env = var is not None and os.environ.get(var) == value
        shown = f"${var}={value!r} (read as {name})" if from_env else None
        check_node_dir(f"${var}" if from_env else name, value, "the simulated GPUs' state", shown)
    cache, name = compile_cache_at(config.trainer.compile_cache, os.environ)
    check_node_dir(name, cache, "the node's compiled kernels, shared by its jobs", f"{name}={cache!r}")


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
    _check_state_dirs(config)
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
