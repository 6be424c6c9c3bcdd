"""One owner per queue database: an exclusive ``fcntl.flock`` on a lock file beside it.

Two processes owning one database would each re-queue what the other runs (its runners are not
theirs), so the jobs would train twice. The owner holds ``<db>.lock`` locked for as long as its
:class:`~raycolloc.queue.state.Store` is open; the kernel drops the lock when the process ends, however
it ends (``kill -9`` included), so a crashed owner never blocks the next. Within one process the lock is
shared (counted): a process may open its own database more than once (tests simulate a restart so).
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DbLock", "StoreBusy", "StoreUnusable", "lock_path"]


class StoreBusy(RuntimeError):
    """Another process owns the database (a ``replay`` or ``serve`` of it is running)."""


class StoreUnusable(RuntimeError):
    """``queue.db`` cannot be opened as the queue's SQLite database (the message names it and why): a
    file that is not one, a directory, a folder that cannot be made."""


@dataclass
class _Held:
    pid: int
    fd: int
    count: int


# Lock file -> this process's hold on it. Keyed by pid too: a forked child inherits the dict (and the
# descriptor), but not the right to share its parent's lock; it must take its own.
_HELD: dict[str, _Held] = {}


def lock_path(db: Path) -> Path:
    """The lock file beside ``db``."""
    return db.with_name(f"{db.name}.lock")


class DbLock:
    """This process's exclusive hold on ``db``'s lock file (taken at once; never waits).

    Raises:
        StoreBusy: another process holds it.
    """

    def __init__(self, db: Path) -> None:
        self.path = lock_path(db)
        self._key = str(self.path.resolve())
        held = _HELD.get(self._key)
        self._made = False  # whether this hold made the lock file (a refused database's goes with it)
        if held is not None and held.pid == os.getpid():
            held.count += 1
            return
        self._made = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreBusy(
                f"{db} is in use by another process (it holds {self.path}): another replay or serve of it "
                "runs; wait for it to end, or give another out_dir or queue.db"
            ) from None
        _HELD[self._key] = _Held(os.getpid(), fd, 1)

    def release(self, discard: bool = False) -> None:
        """Drop this hold; the lock itself goes with the process's last one (``discard``: and the lock
        file, where this hold made it: a database refused on opening leaves nothing beside it)."""
        held = _HELD.get(self._key)
        if held is None or held.pid != os.getpid():
            return
        held.count -= 1
        if held.count == 0:
            del _HELD[self._key]
            if discard and self._made:
                self.path.unlink(missing_ok=True)  # still locked: no other process can hold it meanwhile
            os.close(held.fd)  # closing the descriptor releases the flock
