"""The test session leaves nothing behind (issue 46, item 5): its directory removed at its end, what
still runs in it (an MPS daemon, a fork server, a training process) named, stopped, and counted as a
failure of the run, and ``raycolloc doctor`` clean on its pipe root (what it finds fails the run too)."""

from __future__ import annotations

import contextlib
import getpass
import io
import os
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

__all__ = ["GRACE_ENV", "TMP_CHECK_ENV", "doctor_findings", "leave_nothing", "processes_under", "temp_suspects"]

# Ray's processes (a steward, its fork server and MPS daemons) follow a stopped instance within seconds;
# a loaded 2-core machine has taken ~10 s. A run that leaves a process on purpose (tests/test_session_left.py)
# sets a shorter grace: it would wait the whole of it for a process that never ends.
GRACE_ENV = "RAYCOLLOC_TEST_SESSION_GRACE_S"
GRACE_S = float(os.environ.get(GRACE_ENV, "30"))


# Names the suite has left in the machine's temporary directory (issue 46, item 5; inductor's
# torchinductor_<user>, until 2026-12-05): what is new there after a run is that run's leftover, unless
# TMP_CHECK_ENV is 0 (a machine where this user compiles torch models beside the suite).
SUSPECTS = (f"torchinductor_{getpass.getuser()}", "raycolloc-test-*")
TMP_CHECK_ENV = "RAYCOLLOC_TEST_TMP_CHECK"


def temp_suspects(tmp: Path) -> set[str]:
    """What lies in ``tmp`` under :data:`SUSPECTS`' names, to two levels (``torchinductor_<user>/<entry>``:
    a leak into a directory an earlier run left shows too); nothing where :data:`TMP_CHECK_ENV` is 0."""
    if os.environ.get(TMP_CHECK_ENV) == "0":
        return set()
    found = set()
    for pattern in SUSPECTS:
        for top in tmp.glob(pattern):
            found.add(top.name)
            if top.is_dir():
                found.update(f"{top.name}/{entry.name}" for entry in top.iterdir())
    return found


def _under(value: str, root: Path) -> bool:
    return value == str(root) or value.startswith(f"{root}{os.sep}")


def processes_under(root: Path) -> list[psutil.Process]:
    """This user's processes that name a path under ``root`` in their command line or their MPS pipe
    directory (this process excepted)."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.uids().real != os.getuid():
                continue
            words = [*proc.cmdline(), proc.environ().get("CUDA_MPS_PIPE_DIRECTORY", "")]
        except psutil.Error:
            continue
        if any(_under(word, root) or f"={root}{os.sep}" in word for word in words):
            found.append(proc)
    return found


def doctor_findings(pipe_root: Path) -> list[str]:
    """What ``raycolloc doctor`` (its check, without ``--fix``) finds left on ``pipe_root``: its ``left:``
    lines when it exits 1, else none (another run's MPS daemon on the machine, "not raycolloc's", is
    reported by the doctor but does not make it fail, nor this)."""
    from raycolloc.doctor import main as doctor

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = doctor(["--pipe-root", str(pipe_root)])
    if status == 0:
        return []
    lines = [line.strip() for line in printed.getvalue().splitlines()]
    return [line for line in lines if line.startswith("left:")] or [f"exit {status}"]


def leave_nothing(
    root: Path, grace_s: float = GRACE_S, pipe_roots: Iterable[Path] = (), stop_ray: bool = False
) -> list[str]:
    """Remove ``root`` once nothing runs in it; returns what was left (processes still running after
    ``grace_s``, stopped now; what the doctor found on each of ``pipe_roots``; a directory that could not
    be removed). Empty: nothing was. ``stop_ray``: shut this process's Ray instance down first (the
    session's end alone: a test calling this mid-session once shut the session's instance down, and
    every later test of its worker that joins it was refused, CI 2026-12-02)."""
    ray = sys.modules.get("ray")  # a quick-tier session imported none, and needs none
    if stop_ray and ray is not None and ray.is_initialized():
        ray.shutdown()
    deadline = time.monotonic() + grace_s
    while (running := processes_under(root)) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = []
    for proc in running:
        try:
            left.append(f"process {proc.pid} ({' '.join(proc.cmdline())[:200]})")
            proc.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(running, timeout=10)
    for pipe_root in pipe_roots:  # before the removal: the doctor sees what a user's pipe root would hold
        left += [f"doctor on {pipe_root}: {line}" for line in doctor_findings(pipe_root)]
    shutil.rmtree(root, ignore_errors=True)
    if root.exists():
        left.append(f"directory {root} (could not be removed)")
    return left
