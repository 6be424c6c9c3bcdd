"""One sweep writes to an output directory at a time.

Two sweeps on one ``out_dir`` would both find no result for a cell, both run it, and overwrite
each other's tables (started in the same second they even share the sweep directory). So a sweep
holds ``<out_dir>/.raycolloc.lock`` while it resumes, runs and writes: an exclusive ``flock`` on
the file, which records who holds it (host, pid, since when, the command). A second sweep is
refused (exit 2) naming that holder. The kernel drops the lock when its process ends, however it
ends (SIGKILL included), so the lock of a dead sweep is simply taken over, and the record it left
is logged. (``flock`` is shared across hosts on local file systems and NFSv4.)

The file exists while a sweep holds it: the holder removes it before it lets go (a sweep that
ended, or was refused after it took the lock, leaves no lock file). A sweep that opened the file
just before it was removed then holds a lock nobody else sees, so the taker checks, once it has the
lock, that its file is still the one at the path, and starts again if not.

The lock is per process and re-entrant; a sweep takes it in one place, around everything its plan
writes (:func:`raycolloc.driver.plan.run`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from raycolloc.config import ConfigError
from raycolloc.driver.rundirs import make
from raycolloc.results.errors import free_space

__all__ = ["LOCK_NAME", "Holder", "OutputLocked", "check_output_dir", "hold_output"]

log = logging.getLogger("raycolloc")
LOCK_NAME = ".raycolloc.lock"
_held: dict[Path, tuple[int, int]] = {}  # resolved out_dir -> (fd, depth), in this process
_guard = threading.Lock()


class OutputLocked(ConfigError):
    """Another sweep holds the output directory (the message names it)."""


@dataclass(frozen=True)
class Holder:
    """Who holds an output directory, as its lock file records it."""

    host: str
    pid: int
    since: float
    command: str

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"host {self.host}, pid {self.pid}, since {when} ({self.command})"


def check_output_dir(out_dir: str | Path) -> Path:
    """Create ``out_dir`` if needed and check that it is a writable directory.

    Raises:
        ConfigError: naming the key, the path and what is wrong with it.
    """
    path = Path(out_dir).absolute()
    blocker = next((p for p in [path, *path.parents] if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ConfigError(
            f"out_dir={str(out_dir)!r} is not allowed: {blocker} is a file, not a directory; "
            f"give a directory (it is created if missing)"
        )
    try:
        make(path)  # noted: a sweep refused later takes it back if it is empty then
    except OSError as exc:
        raise ConfigError(f"out_dir={str(out_dir)!r} cannot be created: {exc.strerror} ({free_space(path)})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(
            f"out_dir={str(out_dir)!r} is not writable by this user (uid {os.getuid()}); "
            f"give a directory you may write to"
        )
    return path


def _read(fd: int) -> Holder | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 65536) or b"null")
        return Holder(**data) if data else None
    except (OSError, ValueError, TypeError):
        return None


def _is_at(fd: int, lock: Path) -> bool:
    """The file ``fd`` is open on is still the one at ``lock`` (its holder removes it on release)."""
    try:
        here, held = os.stat(lock), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


def _lock_file(path: Path, lock: Path) -> int:
    """Open and flock ``lock``: the descriptor, holding it."""
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(
                f"out_dir={str(path)!r}: cannot create {lock}: {exc.strerror} ({free_space(path)})"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise ConfigError(f"out_dir={str(path)!r}: cannot lock {lock}: {exc.strerror}") from None
            who = holder.describe() if holder else "a process that has not written its name yet"
            raise OutputLocked(
                f"out_dir={str(path)!r} is in use by another sweep: {who}. One sweep writes to "
                f"an output at a time; wait for it to end, or give this one another out_dir"
            ) from None
        if _is_at(fd, lock):
            return fd
        os.close(fd)  # its holder removed it as we opened it: lock the file at the path now


def _acquire(path: Path) -> int:
    lock = path / LOCK_NAME
    fd = _lock_file(path, lock)
    stale = _read(fd)
    if stale is not None:
        log.warning(
            "out_dir=%s: taking over the lock of a sweep that ended without releasing it (%s)", path, stale.describe()
        )
    me = Holder(socket.gethostname(), os.getpid(), time.time(), " ".join(["python", *sys.argv])[:300])
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(asdict(me)).encode(), 0)
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        raise ConfigError(f"out_dir={str(path)!r}: cannot write {lock}: {exc.strerror} ({free_space(path)})") from None
    return fd


@contextlib.contextmanager
def hold_output(out_dir: str | Path) -> Iterator[Path]:
    """Hold ``out_dir`` for this process while the block runs (re-entrant); yields its path.

    Raises:
        OutputLocked: another sweep holds it.
        ConfigError: it is not a writable directory.
    """
    path = check_output_dir(out_dir).resolve()
    with _guard:
        fd, depth = _held.get(path, (-1, 0))
        if depth == 0:
            fd = _acquire(path)
        _held[path] = (fd, depth + 1)
    try:
        yield path
    finally:
        with _guard:
            fd, depth = _held.pop(path)
            if depth > 1:
                _held[path] = (fd, depth - 1)
            else:
                with contextlib.suppress(OSError):
                    if _is_at(fd, path / LOCK_NAME):
                        os.unlink(path / LOCK_NAME)  # while still held: see the module's docstring
                os.close(fd)  # releases the flock
