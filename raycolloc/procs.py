"""Process helpers shared by the node and the jobs: priority and liveness.

Ray starts its worker processes at niceness 15 (``worker_niceness``). A trainer whose step rate is
bound by the CPU launching kernels, and an MPS server started by the steward (it inherits the
steward's niceness), then lose CPU time to any process at normal priority: on an H100 that cost
raycolloc up to 10% against raw processes (H100, benchB). Local Ray instances start with niceness 0; on other
clusters each trainer and the steward move themselves back to 0 where they may (root), else they
log it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import signal
import sys
import time
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

import psutil

from raycolloc.config_groups import compile_cache_at

__all__ = [
    "KERNEL_CACHES",
    "cache_env",
    "compile_cache",
    "alive",
    "die_with_parent",
    "format_cpus",
    "import_timm",
    "move_threads_off",
    "normal_priority",
    "quiet_exit_in_finalizers",
    "python_env",
    "wait_gone",
    "watch_parent",
]

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1


def normal_priority() -> int:
    """Set this process's niceness to 0 if it is higher and we may; returns the niceness in effect."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current > 0:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        except PermissionError:
            log.warning("niceness=%d: cannot lower it without root; start Ray with RAY_worker_niceness=0", current)
    return os.getpriority(os.PRIO_PROCESS, 0)


def quiet_exit_in_finalizers() -> None:
    """An actor's process told to end (Ray's SIGTERM handler raises ``SystemExit``) while a finalizer
    runs, often an ``ActorHandle.__del__``, prints "Exception ignored in ..." and a traceback of Ray's
    internals to the driver's console; that exit is no error, so it is dropped. Any other exception
    raised in a finalizer is printed as Python prints it."""
    default = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, SystemExit):
            default(unraisable)

    sys.unraisablehook = hook


def die_with_parent(parent: int) -> None:
    """Be killed with SIGKILL when the process ``parent`` ends (Linux), also when Ray kills it; the
    setting survives ``exec`` (a script job execs into the user's program)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent ended before prctl took effect
        os._exit(1)


def watch_parent(pid: int) -> None:
    """End this process when ``pid`` ends (a thread blocked on the pid's descriptor: no CPU used).

    For a process forked by the node's fork server (``raycolloc.job.forkserver``): its parent is the
    server, not its actor, so :func:`die_with_parent` cannot name the actor."""
    import threading

    def wait() -> None:
        try:
            fd = os.pidfd_open(pid)
            select.select([fd], [], [])  # readable once the process has exited
        except OSError:  # no pidfd (old kernel): poll instead
            while os.getppid() != 1 and _exists(pid):
                time.sleep(0.5)
        os._exit(1)

    if not _exists(pid):
        os._exit(1)
    threading.Thread(target=wait, name="watch-actor", daemon=True).start()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait up to ``timeout`` seconds for the processes to end; returns those still alive."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if alive(p)]
    return left


def format_cpus(cpus: tuple[int, ...] | list[int] | None) -> str | None:
    """``(3, 4, 5, 9)`` -> ``"3-5,9"``; None stays None."""
    if not cpus:
        return None
    runs: list[str] = []
    ordered = sorted(set(cpus))
    start = prev = ordered[0]
    for c in [*ordered[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(runs)


def move_threads_off(cpus: tuple[int, ...], onto: tuple[int, ...] | None = None) -> set[int]:
    """Move every thread of this process (a trainer actor: Ray's gRPC and event loops) off ``cpus``,
    the cores of the job's training process, onto the node's other cores (``onto``: the node's
    reserved cores, where its own processes run); returns those cores.

    The training process is pinned to ``cpus`` as a whole before it starts a thread (``raycolloc.
    jobproc``), so each of its threads, CUDA's included, stays with the training thread.
    """
    others = set(onto) - set(cpus) if onto else (set(os.sched_getaffinity(0)) | _node_cpus()) - set(cpus)
    if not others:
        return set(os.sched_getaffinity(0))
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), others)
        except OSError as exc:  # a thread that just ended
            log.debug("thread %s: %s", task.name, exc)
    return others


def _node_cpus() -> set[int]:
    return set(range(os.cpu_count() or 1))


def python_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with raycolloc importable (its source root first on ``PYTHONPATH``), for the Python
    processes raycolloc starts (training processes, the fork server)."""
    import raycolloc

    env = dict(base)
    root = str(Path(raycolloc.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def compile_cache(configured: str | None = None) -> Path:
    """The node's compile cache (a directory): ``trainer.compile_cache``, else $RAYCOLLOC_COMPILE_CACHE,
    else /tmp/raycolloc-compile-cache."""
    return Path(compile_cache_at(configured, os.environ)[0])


# The kernel caches' variables, each with its directory in the compile cache.
KERNEL_CACHES = (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"))


def cache_env(env: MutableMapping[str, str], configured: str | None = None) -> None:
    """Point inductor's and triton's kernel caches in ``env`` into the compile cache, so identical jobs
    reuse each other's kernels: always for a configured cache, else unless ``env`` names its own."""
    cache = compile_cache(configured)
    for var, sub in KERNEL_CACHES:
        if configured or var not in env:
            env[var] = str(cache / sub)


def import_timm() -> Any:
    """timm, imported with inductor's cache in the node's compile cache: importing timm imports
    torch._dynamo, which makes inductor's cache directory, else torch's own $TMPDIR/torchinductor_<user>
    (a driver's first check of a timm name left it behind, 2026-12-05)."""
    cache_env(os.environ)
    import timm

    return timm
