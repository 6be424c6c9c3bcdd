"""What the queue checks of its database as it opens it, before it writes a byte to it.

* It is the queue's, or new: every table in it is one the queue makes, with the queue's columns. Another
  program's SQLite file given as ``queue.db`` is refused (:class:`ForeignDatabase`), untouched: the
  queue would add its tables to it and put it in WAL mode.
* It is whole: SQLite's ``PRAGMA integrity_check`` finds nothing (:class:`StoreDamaged`). A database
  scrambled or truncated on disk (after a kill, a full disk, a copy that stopped) failed its first read
  of a damaged page mid-run, with ``sqlite3.DatabaseError: database disk image is malformed``.

Changes that were committed and then lost with the ``-wal`` file are found by the ledger beside it
(:mod:`raycolloc.queue.ledger`), not here: what remains is a whole database, only an older one.
"""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path

from raycolloc.queue.dblock import StoreUnusable

__all__ = ["ForeignDatabase", "StoreDamaged", "check_database", "tables"]

_SHOWN = 3  # integrity_check lines quoted in the message (it lists every damaged page)


class ForeignDatabase(StoreUnusable):
    """``queue.db`` is an SQLite database of another program (its tables are not the queue's)."""


class StoreDamaged(StoreUnusable):
    """The queue's database fails SQLite's integrity check (scrambled or truncated on disk)."""


def tables(db: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """Each table of ``db`` (SQLite's own left out) and its columns, in order."""
    names = db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'").fetchall()
    return {str(n): tuple(str(c[1]) for c in db.execute(f'PRAGMA table_info("{n}")')) for (n,) in names}


@functools.cache
def _made_by(schema: str) -> dict[str, tuple[str, ...]]:
    """The tables, and their columns, that the SQL ``schema`` makes."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(schema)
        return tables(db)
    finally:
        db.close()


def check_database(db: sqlite3.Connection, path: Path, schema: str) -> None:
    """Refuse ``db`` (at ``path``) unless it is new or the queue's (what its SQL ``schema`` makes), and whole.

    Raises:
        ForeignDatabase: a table the queue does not make, or one of its names with other columns.
        StoreDamaged: the integrity check found damage, or SQLite found it reading the pages.
    """
    ours = _made_by(schema)
    try:
        found = tables(db)
        if any(ours.get(t) != columns for t, columns in found.items()):
            raise ForeignDatabase(
                f"queue.db={path} is not a queue database: it is another program's SQLite file (its tables: "
                f"{', '.join(sorted(found))}; the queue's are {', '.join(ours)}). Nothing was changed in it; "
                "give queue.db a path of its own (a new file, or a queue's database)"
            )
        problems = [str(r[0]) for r in db.execute("PRAGMA integrity_check").fetchall()]
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", "") != "SQLITE_CORRUPT":
            raise  # no database at all (a text file: SQLITE_NOTADB): the caller says so
        raise _damaged(path, [str(exc)]) from None  # a page too damaged to read at all
    if problems != ["ok"]:
        raise _damaged(path, problems)


def _damaged(path: Path, problems: list[str]) -> StoreDamaged:
    more = f" (and {len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else ""
    return StoreDamaged(
        f"queue.db={path} is damaged: SQLite's integrity check says {'; '.join(problems[:_SHOWN])}{more}. Its jobs "
        f"cannot be trusted: move it aside (with {path.name}-wal and {path.name}-shm beside it) to start afresh, "
        "or give another out_dir or queue.db"
    )
