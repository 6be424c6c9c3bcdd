"""The ledger beside the queue's database: every event it committed, one line each, appended after the
commit (``<db>.ledger``), so that a database that lost committed changes is caught when it is opened.

In WAL mode a commit lands in ``<db>-wal`` first and reaches the database file only at a checkpoint
(every 1,000 pages: a 30-job replay never gets there). Delete the ``-wal`` file after the owner was
killed, or truncate or scramble it (SQLite drops the frames from the first bad one on, silently),
and the database opens as it was some commits ago: whole, but with jobs that had ended queued again,
cancels and submissions gone (issue 47: 23 jobs ran again, exit 0, unnoticed). The database cannot know
what it never kept; the ledger, a separate file, does: on opening, events it holds past the database's
last one are what was lost (:class:`LostWork`, which names the jobs). The ledger is then rewritten from
the database, so it says each loss once.

A line is ``id kind job_id attempt``; a line cut by a kill mid-write is not read. Appends are not
synced: like the database's ``synchronous=NORMAL``, they survive the process being killed, not a power
cut. A ledger of another database (its events differ where both have them), or one beside a database
file that was made new, is replaced without a word.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Entry", "Ledger", "LostWork", "ledger_path", "open_ledger"]

log = logging.getLogger(__name__)

_HEADER = "# raycolloc queue ledger 1: id kind job_id attempt\n"
_NAMED = 20  # job ids named per kind of loss; the rest counted


@dataclass(frozen=True)
class Entry:
    """One committed event: its id in the ``events`` table, its kind, job and attempt."""

    id: int
    kind: str
    job_id: str
    attempt: int

    def line(self) -> str:
        return f"{self.id} {self.kind} {self.job_id} {self.attempt}\n"


@dataclass(frozen=True)
class LostWork:
    """Events the ledger recorded after the database's last one: committed, then lost with its WAL."""

    db: Path
    recorded: int  # the ledger's last event id
    found: int  # the database's
    ends: tuple[str, ...]  # jobs whose end was lost: they run again
    cancels: tuple[str, ...]  # jobs whose cancel was lost: they run
    submissions: tuple[str, ...]  # jobs whose queueing was lost: not in the database at all

    def message(self) -> str:
        """What was lost and what it means, for the log."""
        parts = [
            f"queue.db={self.db} lost its last {self.recorded - self.found} committed events (job changes): its "
            f"ledger ({ledger_path(self.db).name}) records events up to #{self.recorded}, the database holds them "
            f"up to #{self.found}. Its {self.db.name}-wal file was deleted, cut or damaged after the queue that "
            "owned it was killed, and the database is as it was before those events."
        ]
        for ids, what in (
            (self.ends, "ended before, and run again now"),
            (self.cancels, "cancelled before, and run now"),
            (
                self.submissions,
                "queued before and no longer in the database (a replay queues its trace again; "
                "a live queue's must be submitted again)",
            ),
        ):
            if ids:
                more = f" and {len(ids) - _NAMED} more" if len(ids) > _NAMED else ""
                shown = ", ".join(sorted(ids)[:_NAMED]) + more  # by id: a reader finds a job, a test the first
                parts.append(f"{len(ids)} job{'s' if len(ids) > 1 else ''} {what}: {shown}.")
        return " ".join(parts)


def ledger_path(db: Path) -> Path:
    """The ledger beside ``db``."""
    return db.with_name(f"{db.name}.ledger")


class Ledger:
    """The ledger of the database at ``db``, opened by its owner (:class:`~raycolloc.queue.state.Store`)."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.path = ledger_path(db)
        self._fd: int | None = None

    def reconcile(self, events: Sequence[Entry], fresh: bool) -> LostWork | None:
        """Compare the ledger with the database's ``events`` (in order), then rewrite it from them and
        keep it open for appends; returns what the database lost (None: nothing, or the ledger is not
        this database's: ``fresh``, the database file was made new)."""
        kept = [] if fresh else self._read()
        found = events[-1].id if events else 0
        by_id = {e.id: e for e in events}
        common = [e for e in kept if e.id <= found]
        ours = not common or by_id.get(common[-1].id) == common[-1]  # else another database's ledger
        lost = [e for e in kept if e.id > found] if ours else []
        self._rewrite(events)
        if not lost:
            return None
        present = {e.job_id for e in events}
        return LostWork(
            db=self.db,
            recorded=lost[-1].id,
            found=found,
            ends=_jobs(lost, "ended"),
            cancels=_jobs(lost, "cancelled"),
            submissions=tuple(j for j in _jobs(lost, "queued") if j not in present),
        )

    def append(self, entries: Sequence[Entry]) -> None:
        """Record committed events (one write; a failure is logged once and ends the ledger: a database
        whose ledger falls behind only loses the check, never a job)."""
        if self._fd is None or not entries:
            return
        try:
            os.write(self._fd, "".join(e.line() for e in entries).encode())
        except OSError as exc:
            log.warning("queue ledger=%s not written (%s); lost changes will not be detected", self.path, exc)
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _read(self) -> list[Entry]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("queue ledger=%s unreadable (%s): replaced", self.path, exc)
            return []
        lines = text.splitlines(keepends=True)
        if not lines or lines[0] != _HEADER:
            return []  # not a ledger (of this version): nothing to compare
        entries = []
        for line in lines[1:]:
            fields = line.split()
            if not line.endswith("\n") or len(fields) != 4 or not (fields[0].isdigit() and fields[3].isdigit()):
                break  # cut by a kill mid-write (the last line), or not a ledger's: the rest is not trusted
            entries.append(Entry(int(fields[0]), fields[1], fields[2], int(fields[3])))
        return entries

    def _rewrite(self, events: Sequence[Entry]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(_HEADER + "".join(e.line() for e in events))
            tmp.replace(self.path)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            log.warning("queue ledger=%s not written (%s); lost changes will not be detected", self.path, exc)


def open_ledger(db: sqlite3.Connection, path: Path, fresh: bool) -> tuple[Ledger, LostWork | None]:
    """The ledger of the queue's database ``db`` at ``path``, reconciled with its ``events`` table
    (:meth:`Ledger.reconcile`), and what the database lost."""
    rows = db.execute("SELECT id, kind, job_id, attempt FROM events ORDER BY id").fetchall()
    ledger = Ledger(path)
    return ledger, ledger.reconcile([Entry(int(i), str(k), str(j), int(a)) for i, k, j, a in rows], fresh)


def _jobs(entries: Sequence[Entry], kind: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(e.job_id for e in entries if e.kind == kind))
