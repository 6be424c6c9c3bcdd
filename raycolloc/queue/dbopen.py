"""The queue's database opened by its owner, in the order that keeps a refusal from changing anything:
locked (:mod:`~raycolloc.queue.dblock`), checked (:mod:`~raycolloc.queue.dbcheck`: the queue's and
whole, before a byte is written), put in WAL mode, given its tables, and its ledger reconciled
(:mod:`~raycolloc.queue.ledger`: what it lost with its ``-wal`` file is logged as a WARNING naming the
jobs, and the jobs that run again kept in ``meta``). A database refused on the way is closed and the
lock file made for it removed, so nothing is left beside it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from raycolloc.queue.dbcheck import check_database
from raycolloc.queue.dblock import DbLock
from raycolloc.queue.ledger import Ledger, LostWork, open_ledger

__all__ = ["JournalModeError", "Owned", "open_owned"]

log = logging.getLogger(__name__)


class JournalModeError(RuntimeError):
    """SQLite would not put the database in WAL mode (an in-memory database, or a filesystem without
    the shared memory WAL needs): the queue's crash safety rests on it, so it does not run without."""


@dataclass
class Owned:
    """A database opened by its owner: the connection, the lock held, its ledger, what it had lost."""

    db: sqlite3.Connection
    lock: DbLock
    ledger: Ledger
    lost: LostWork | None


def open_owned(path: Path, schema: str) -> Owned:
    """Open the queue's database at ``path`` as its owner (made, with the SQL ``schema``, if new).

    Raises:
        StoreBusy: another process owns it.
        ForeignDatabase, StoreDamaged: another program's SQLite file; one that fails the integrity check.
        JournalModeError: SQLite would not put it in WAL mode.
        sqlite3.DatabaseError, OSError: no SQLite database (the caller names the path).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = DbLock(path)
    fresh = not path.is_file() or path.stat().st_size == 0  # a ledger beside a new database is not its own
    db: sqlite3.Connection | None = None
    try:
        # Autocommit mode: every change goes through Store.transaction's explicit BEGIN IMMEDIATE.
        # check_same_thread=False: the live queue's actor opens it on one thread and ticks it on
        # another; its callers serialise every use (the actor's lock), as sqlite3 then requires.
        db = sqlite3.connect(path, isolation_level=None, timeout=30.0, check_same_thread=False)
        check_database(db, path, schema)
        mode = db.execute("PRAGMA journal_mode=WAL").fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            raise JournalModeError(f"{path}: SQLite answered journal_mode={mode and mode[0]}, not wal")
        # NORMAL in WAL mode: a commit survives the process being killed (not a power cut), and costs
        # no fsync per event, which a replay of 1,000 jobs would pay thousands of times.
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(schema)
        ledger, lost = open_ledger(db, path, fresh)
        if lost is not None:  # said, and the jobs that run again kept for the summary (Store.ends_lost)
            log.warning("%s", lost.message())
            known = db.execute("SELECT value FROM meta WHERE key='ends_lost'").fetchone()
            ends = json.dumps(sorted(set(json.loads(known[0]) if known else []) | set(lost.ends)))
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('ends_lost', ?)", (ends,))
        return Owned(db, lock, ledger, lost)
    except BaseException:
        if db is not None:
            db.close()
        lock.release(discard=True)  # a lock file made for a database it refused goes too
        raise
