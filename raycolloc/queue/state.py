"""The queue's state: its jobs and every event of theirs, in an embedded SQLite database (WAL journal).

Each change of a job's state is one transaction that updates its row and appends its event, so a
queue killed at any point finds, on restart, every job in exactly one state. A job moves
``queued -> placed -> started -> ended``; an out-of-memory crash takes it from ``started`` back to
``queued`` (``oom`` and ``requeued`` events, a larger memory estimate, priority over the FIFO); a
cancel ends it as ``cancelled``. Each placement is a new *attempt*: a runner's report of an end names
its attempt, and only the attempt that is ``started`` can end, so a late or repeated report changes
nothing — every job ends exactly once. :meth:`Store.recover` re-queues what a restarted queue finds
``placed`` or ``started`` (its runner is gone), counted as a re-queue, never as an end.

One process owns a database at a time (:mod:`~raycolloc.queue.dblock`: a second gets
:class:`StoreBusy`); a ``read_only`` store reads beside the owner, who opens it checked, with a ledger
of its events beside it (:mod:`~raycolloc.queue.dbopen`; what it lost: :attr:`Store.lost`). Each job is
stored with the slowdown bound it runs under (its own, else the queue's default when it was queued),
and :meth:`Store.claim_config` keeps the queue settings a database was made with.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from raycolloc.queue.dblock import DbLock, StoreBusy, StoreUnusable
from raycolloc.queue.dbopen import JournalModeError, open_owned
from raycolloc.queue.ledger import Entry, Ledger, LostWork
from raycolloc.queue.trace import TraceJob

__all__ = ["EVENTS", "STATES", "ConfigMismatch", "JobRecord", "JournalModeError", "Store", "StoreBusy"]
__all__ += ["StoreUnusable", "TraceMismatch"]

STATES = ("queued", "placed", "started", "ended", "cancelled")
EVENTS = ("queued", "placed", "started", "ended", "oom", "requeued", "cancelled")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL,
    submit_s REAL NOT NULL, state TEXT NOT NULL, priority INTEGER NOT NULL DEFAULT 0,
    mem_estimate_mib REAL, attempt INTEGER NOT NULL DEFAULT 0,
    ooms INTEGER NOT NULL DEFAULT 0, requeues INTEGER NOT NULL DEFAULT 0,
    gpu TEXT, mode TEXT, first_start_s REAL, start_s REAL, end_s REAL, co_residents TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL, job_id TEXT NOT NULL, kind TEXT NOT NULL, attempt INTEGER NOT NULL, gpu TEXT, detail TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, submit_s);
"""


class TraceMismatch(ValueError):
    """The database holds another trace (or policy) than the one asked to run."""


class ConfigMismatch(TraceMismatch):
    """The database was made with other queue settings than the ones given (the keys are named)."""


@dataclass(frozen=True)
class JobRecord:
    """One job as the database holds it."""

    seq: int
    job: TraceJob
    state: str
    priority: int
    mem_estimate_mib: float | None
    attempt: int
    ooms: int
    requeues: int
    gpu: str | None
    mode: str | None
    first_start_s: float | None
    start_s: float | None
    end_s: float | None
    co_residents: tuple[str, ...]


_COLUMNS = "seq, spec, state, priority, mem_estimate_mib, attempt, ooms, requeues, gpu, mode, first_start_s, "
_COLUMNS += "start_s, end_s, co_residents"


def _record(row: tuple[object, ...]) -> JobRecord:
    seq, spec, state, prio, est, attempt, ooms, requeues, gpu, mode, first, start, end, co = row
    return JobRecord(
        seq=int(str(seq)),
        job=TraceJob(**json.loads(str(spec))),
        state=str(state),
        priority=int(str(prio)),
        mem_estimate_mib=None if est is None else float(str(est)),
        attempt=int(str(attempt)),
        ooms=int(str(ooms)),
        requeues=int(str(requeues)),
        gpu=None if gpu is None else str(gpu),
        mode=None if mode is None else str(mode),
        first_start_s=None if first is None else float(str(first)),
        start_s=None if start is None else float(str(start)),
        end_s=None if end is None else float(str(end)),
        co_residents=tuple(json.loads(str(co))) if co else (),
    )


class Store:
    """The queue's database at ``path`` (created if new)."""

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        """Open (as its owner: locked, created if new) or, ``read_only``, read beside its owner.

        Raises:
            StoreBusy: another process owns it (not for ``read_only``).
            JournalModeError: SQLite would not put it in WAL mode.
            StoreUnusable: no SQLite database there, another program's, or a damaged one (named; ``dbcheck``).
        """
        self.path = Path(path)
        self._lock: DbLock | None = None
        self._ledger: Ledger | None = None
        self._pending: list[Entry] = []  # the open transaction's events, for the ledger once committed
        self.lost: LostWork | None = None  # what the database lost with its WAL, found on opening
        try:
            self._open(read_only)
        except (sqlite3.DatabaseError, OSError) as exc:  # sqlite3.OperationalError is a DatabaseError
            raise StoreUnusable(f"queue.db={self.path}: not usable as the queue's database ({exc})") from None

    def _open(self, read_only: bool) -> None:
        if read_only:  # check_same_thread=False: see dbopen.open_owned
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0, check_same_thread=False)
            return
        owned = open_owned(self.path, _SCHEMA)
        self._db, self._lock, self._ledger, self.lost = owned.db, owned.lock, owned.ledger, owned.lost

    def ends_lost(self) -> tuple[str, ...]:
        """Jobs whose end an earlier session committed and the database lost (they ran again; ``dbopen``)."""
        return tuple(json.loads(self.meta("ends_lost") or "[]"))

    def close(self) -> None:
        self._db.close()
        if self._ledger is not None:
            self._ledger.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic change: committed whole at the end of the block, or not at all; its events then
        go to the ledger."""
        self._db.execute("BEGIN IMMEDIATE")
        self._pending = []
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            self._pending = []
            raise
        self._db.execute("COMMIT")
        if self._ledger is not None:
            self._ledger.append(self._pending)
        self._pending = []

    # --- meta ------------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def claim(self, key: str, value: str) -> None:
        """Record ``key=value`` for this database, or check it is what was recorded.

        Raises:
            TraceMismatch: the database was made with another value.
        """
        with self.transaction() as db:
            found = self.meta(key)
            if found is None:
                db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))
            elif found != value:
                raise TraceMismatch(f"{self.path} holds {key}={found}, not {value}: give another queue.db or out_dir")

    def claim_config(self, settings: dict[str, object]) -> None:
        """Record the queue settings (``key -> value``) this database runs with, or check they are the
        ones recorded (their digest; a database made before settings were recorded takes them).

        Raises:
            ConfigMismatch: it was made with other settings; each differing key named with both values.
        """
        text = json.dumps(settings, sort_keys=True, default=str)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        # One statement, so atomic on its own (both rows or neither); kept out of transaction() so that
        # the points a test kills a queue at (its transactions) stay where its jobs run.
        self._db.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('config_digest', ?), ('config', ?)", (digest, text)
        )
        if self.meta("config_digest") == digest:
            return
        before = json.loads(self.meta("config") or "{}")
        now = json.loads(text)
        diff = [
            f"{k}={json.dumps(before.get(k))} there, {json.dumps(now.get(k))} now"
            for k in sorted(set(before) | set(now))
            if before.get(k) != now.get(k)
        ]
        raise ConfigMismatch(
            f"{self.path} was made with other queue settings: {'; '.join(diff)}; run it with the settings it "
            "was made with, or give another out_dir or queue.db"
        )

    def put(self, key: str, value: str) -> None:
        """Record ``key=value`` for this database, replacing what was there."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=?",
                (key, value, value),
            )

    def clock(self) -> float:
        """The time of the last event (a restarted simulation resumes from it)."""
        row = self._db.execute("SELECT MAX(t) FROM events").fetchone()
        return float(row[0]) if row and row[0] is not None else 0.0

    # --- changes -----------------------------------------------------------------------------------
    def add(
        self, jobs: Sequence[TraceJob], estimates: Sequence[float | None], t: float, bound: float | None = None
    ) -> None:
        """Queue ``jobs`` (all or none), each with its memory estimate; ``queued`` events at ``t``
        (a trace's jobs are queued at once: each waits for its ``submit_s`` before a policy sees it).
        A job without a slowdown bound is stored with ``bound`` (the queue's default): the bound it
        runs under and is reported against stays the one it was queued with.

        Raises:
            sqlite3.IntegrityError: a job id the queue already has (nothing is added).
        """
        with self.transaction() as db:
            for job, est in zip(jobs, estimates, strict=True):
                if job.max_slowdown is None and bound is not None:
                    job = replace(job, max_slowdown=bound)
                spec = json.dumps(job.__dict__)
                db.execute(
                    "INSERT INTO jobs (job_id, spec, submit_s, state, mem_estimate_mib) VALUES (?, ?, ?, 'queued', ?)",
                    (job.job_id, spec, job.submit_s, est),
                )
                self._event(db, t, job.job_id, "queued", 0, None, f"arrives at {job.submit_s:g} s")

    def place(self, job_id: str, gpu: str, mode: str, t: float) -> int:
        """``queued -> placed`` on ``gpu`` under ``mode``; returns the new attempt's number."""
        with self.transaction() as db:
            cur = db.execute(
                "UPDATE jobs SET state='placed', attempt=attempt+1, gpu=?, mode=? WHERE job_id=? AND state='queued'",
                (gpu, mode, job_id),
            )
            if cur.rowcount != 1:
                raise ValueError(f"job {job_id} is not queued: cannot place it")
            attempt = self._attempt(db, job_id)
            self._event(db, t, job_id, "placed", attempt, gpu, mode)
        return attempt

    def start(self, job_id: str, attempt: int, t: float) -> bool:
        """``placed -> started`` (this attempt only); False if it is not that attempt's turn."""
        with self.transaction() as db:
            cur = db.execute(
                "UPDATE jobs SET state='started', start_s=?, first_start_s=COALESCE(first_start_s, ?) "
                "WHERE job_id=? AND state='placed' AND attempt=?",
                (t, t, job_id, attempt),
            )
            if cur.rowcount == 1:
                self._event(db, t, job_id, "started", attempt, None, None)
        return cur.rowcount == 1

    def end(
        self, job_id: str, attempt: int, t: float, co_residents: Sequence[str] = (), rate: float | None = None
    ) -> bool:
        """``started -> ended`` (this attempt only), with the training ``rate`` (samples/s) a runner
        measured in the event (a resumed run still has it); False (nothing changes) for a stale report."""
        with self.transaction() as db:
            cur = db.execute(
                "UPDATE jobs SET state='ended', end_s=?, co_residents=? "
                "WHERE job_id=? AND state='started' AND attempt=?",
                (t, json.dumps(sorted(co_residents)), job_id, attempt),
            )
            if cur.rowcount == 1:
                self._event(db, t, job_id, "ended", attempt, None, repr(rate) if rate and rate > 0 else None)
        return cur.rowcount == 1

    def oom(self, job_id: str, attempt: int, t: float, new_estimate_mib: float) -> bool:
        """An out-of-memory crash of this attempt: back to ``queued`` ahead of the FIFO, with a larger
        memory estimate; counted (``ooms``, ``requeues``). False for a stale report."""
        with self.transaction() as db:
            cur = db.execute(
                "UPDATE jobs SET state='queued', priority=1, ooms=ooms+1, requeues=requeues+1, mem_estimate_mib=?, "
                "gpu=NULL, mode=NULL WHERE job_id=? AND state IN ('placed', 'started') AND attempt=?",
                (new_estimate_mib, job_id, attempt),
            )
            if cur.rowcount == 1:
                self._event(db, t, job_id, "oom", attempt, None, f"estimate {new_estimate_mib:.0f} MiB")
                self._event(db, t, job_id, "requeued", attempt, None, "out of memory")
        return cur.rowcount == 1

    def recover(self, t: float, alive: frozenset[tuple[str, int]] = frozenset()) -> list[str]:
        """Re-queue every ``started`` job whose runner is gone (not in ``alive``, as ``(job_id,
        attempt)``) and every ``placed`` one; returns their ids. A restarted queue calls it before
        anything else. A ``placed`` attempt's start was never recorded and only a started attempt can
        end, so it would wait forever: it is re-queued (once: it is ``queued`` after) even where its
        runner is listed alive (whoever holds such a runner stops it)."""
        rows = self._db.execute("SELECT job_id, attempt, state FROM jobs WHERE state IN ('placed', 'started')")
        lost = [(str(j), int(a)) for j, a, s in rows.fetchall() if s == "placed" or (str(j), int(a)) not in alive]
        for job_id, attempt in lost:
            self.requeue(job_id, attempt, t, "runner lost (queue restarted)")
        return [j for j, _ in lost]

    def requeue(self, job_id: str, attempt: int, t: float, reason: str) -> bool:
        """This attempt's runner is gone (its node lost, the queue restarted): back to ``queued``,
        counted as a re-queue. False for a stale report."""
        with self.transaction() as db:
            cur = db.execute(
                "UPDATE jobs SET state='queued', requeues=requeues+1, gpu=NULL, mode=NULL "
                "WHERE job_id=? AND state IN ('placed', 'started') AND attempt=?",
                (job_id, attempt),
            )
            if cur.rowcount == 1:
                self._event(db, t, job_id, "requeued", attempt, None, reason)
        return cur.rowcount == 1

    def cancel(self, job_id: str, t: float, reason: str | None = None) -> str | None:
        """Cancel a job not yet ended (``reason`` kept with its event); returns the state it was in
        (None: no such job, or already over)."""
        with self.transaction() as db:
            row = db.execute("SELECT state, attempt FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if row is None or row[0] in ("ended", "cancelled"):
                return None
            db.execute("UPDATE jobs SET state='cancelled', end_s=? WHERE job_id=?", (t, job_id))
            detail = f"was {row[0]}" + (f": {reason}" if reason else "")
            self._event(db, t, job_id, "cancelled", int(row[1]), None, detail)
        return str(row[0])

    # --- reads -------------------------------------------------------------------------------------
    def waiting(self, now: float) -> list[JobRecord]:
        """Queued jobs that have arrived by ``now``: re-queued ones first, then in order of arrival."""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM jobs WHERE state='queued' AND submit_s <= ? ORDER BY priority DESC, submit_s, seq",
            (now,),
        ).fetchall()
        return [_record(r) for r in rows]

    def next_arrival(self, now: float) -> float | None:
        """The submit time of the next queued job still to arrive after ``now``."""
        row = self._db.execute(
            "SELECT MIN(submit_s) FROM jobs WHERE state='queued' AND submit_s > ?", (now,)
        ).fetchone()
        return None if row[0] is None else float(row[0])

    def jobs(self, state: str | None = None) -> list[JobRecord]:
        """Every job (of ``state``), in order of arrival."""
        where, args = ("WHERE state=?", (state,)) if state else ("", ())
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM jobs {where} ORDER BY submit_s, seq", args).fetchall()
        return [_record(r) for r in rows]

    def job(self, job_id: str) -> JobRecord | None:
        row = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        return None if row is None else _record(row)

    def counts(self) -> dict[str, int]:
        """Jobs per state (every state named, 0 where none)."""
        found = dict(self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
        return {s: int(found.get(s, 0)) for s in STATES}

    def events(self, kind: str | None = None) -> list[tuple[float, str, str, int]]:
        """``(t, job_id, kind, attempt)`` of every event (of ``kind``), in order."""
        where, args = ("WHERE kind=?", (kind,)) if kind else ("", ())
        rows = self._db.execute(f"SELECT t, job_id, kind, attempt FROM events {where} ORDER BY id", args).fetchall()
        return [(float(t), str(j), str(k), int(a)) for t, j, k, a in rows]

    def ended_rates(self) -> dict[str, float]:
        """Each ended job's training rate (samples/s) as its runner measured it, in any session."""
        rows = self._db.execute("SELECT job_id, detail FROM events WHERE kind='ended' AND detail IS NOT NULL")
        return {str(j): float(d) for j, d in rows}

    # --- helpers -----------------------------------------------------------------------------------
    @staticmethod
    def _attempt(db: sqlite3.Connection, job_id: str) -> int:
        return int(db.execute("SELECT attempt FROM jobs WHERE job_id=?", (job_id,)).fetchone()[0])

    def _event(
        self,
        db: sqlite3.Connection,
        t: float,
        job_id: str,
        kind: str,
        attempt: int,
        gpu: str | None,
        detail: str | None,
    ) -> None:
        cur = db.execute(
            "INSERT INTO events (t, job_id, kind, attempt, gpu, detail) VALUES (?, ?, ?, ?, ?, ?)",
            (t, job_id, kind, attempt, gpu, detail),
        )
        self._pending.append(Entry(int(cur.lastrowid or 0), kind, job_id, attempt))
