"""The queue's database when it is not what the queue left (issue 47, items 12, 16 and 17): another
program's SQLite file given as ``queue.db`` is refused by name and left untouched; a database scrambled
or truncated after its owner was killed is refused by name with exit 2 as it is opened, not met mid-run
as ``database disk image is malformed``; and one that lost committed changes with its ``-wal`` file
resumes saying so, naming the jobs that run again (the ledger beside it), where it ran them again
unnoticed."""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from raycolloc.queue.__main__ import main
from raycolloc.queue.dbcheck import ForeignDatabase, StoreDamaged
from raycolloc.queue.ledger import Entry, Ledger, ledger_path
from raycolloc.queue.replay import replay
from raycolloc.queue.settings import compose_settings
from raycolloc.queue.state import Store
from raycolloc.queue.trace import write_trace
from raycolloc.queue.tracegen import generate

WORDS = ["cluster=local", "cluster.num_gpus=2"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    settings = compose_settings(WORDS)
    return write_trace(tmp_path_factory.mktemp("trace") / "t.csv", generate(60, 7, settings.config.queue, settings.gpu))


def _replay_killed(trace: Path, words: list[str], after: int, checkpoint_at: int | None) -> None:
    class Killed(Store):
        done = 0

        @contextmanager
        def transaction(self) -> Iterator[sqlite3.Connection]:
            with super().transaction() as db:
                yield db
            Killed.done += 1
            if Killed.done == checkpoint_at:  # as SQLite's automatic checkpoint does every 1,000 pages
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if Killed.done == after:
                os._exit(9)  # SIGKILL's effect: no close, no checkpoint, the -wal file left as it is

    replay(trace, compose_settings(words), Killed)


def _killed(trace: Path, out: Path, after: int = 90, checkpoint_at: int | None = None) -> Path:
    """The database of a replay of ``trace`` killed after ``after`` commits (its -wal file left)."""
    words = [*WORDS, f"out_dir={out}"]
    child = multiprocessing.get_context("fork").Process(
        target=_replay_killed, args=(trace, words, after, checkpoint_at)
    )
    child.start()
    child.join(120)
    assert child.exitcode == 9
    (db,) = (out / "queue").glob("*/queue.sqlite")
    assert Path(f"{db}-wal").stat().st_size > 0
    return db


def _replay_again(trace: Path, out: Path) -> int:
    return main(["replay", str(trace), *WORDS, f"out_dir={out}"])


def _other_programs_db(path: Path, table: str = "users (id INTEGER, name TEXT)") -> bytes:
    db = sqlite3.connect(path)
    db.execute(f"CREATE TABLE {table}")
    db.commit()
    db.close()
    return path.read_bytes()


@pytest.mark.parametrize("table", ["users (id INTEGER, name TEXT)", "jobs (id INTEGER, command TEXT)"])
def test_another_programs_sqlite_file_as_queue_db_is_refused_and_left_as_it_was(
    tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str], table: str
) -> None:
    other = tmp_path / "app.db"
    before = _other_programs_db(other, table)
    with pytest.raises(ForeignDatabase, match=rf"queue.db={other} is not a queue database"):
        Store(other)
    assert main(["replay", str(trace), *WORDS, f"queue.db={other}"]) == 2
    err = capsys.readouterr().err
    assert f"queue.db={other} is not a queue database: it is another program's SQLite file" in err
    assert "Traceback" not in err
    assert other.read_bytes() == before  # not put in WAL mode, no table added
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no lock, ledger or -wal left beside it


@pytest.mark.parametrize("damage", ["truncated", "scrambled"])
def test_a_database_damaged_after_a_kill_is_refused_by_name_as_it_is_opened(
    tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    db = _killed(trace, tmp_path, after=120, checkpoint_at=60)  # pages in the file, later ones in the WAL
    data = bytearray(db.read_bytes())
    if damage == "truncated":
        os.truncate(db, len(data) // 2)
    else:
        rng = random.Random(0)
        data[4096:] = bytes(rng.randrange(256) for _ in range(len(data) - 4096))  # the header page kept
        db.write_bytes(bytes(data))
    with pytest.raises(StoreDamaged, match=rf"queue.db={db} is damaged"):
        Store(db)
    assert _replay_again(trace, tmp_path) == 2
    err = capsys.readouterr().err
    assert f"queue.db={db} is damaged: SQLite's integrity check says" in err and "Traceback" not in err


def _ended(db: Path) -> set[str]:
    store = Store(db, read_only=True)
    try:
        return {r.job.job_id for r in store.jobs("ended")}
    finally:
        store.close()


def test_a_resume_after_the_wal_was_deleted_names_the_jobs_that_run_again(
    tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    db = _killed(trace, tmp_path)
    ended = _ended(db)
    assert ended  # jobs had ended: their end is only in the WAL (no checkpoint yet)
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink()
    with caplog.at_level(logging.WARNING, logger="raycolloc.queue.dbopen"):
        assert _replay_again(trace, tmp_path) == 0  # every job ends: the run goes on, and says so
    said = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert f"queue.db={db} lost its last" in said and "-wal file was deleted" in said
    assert f"{len(ended)} jobs ended before, and run again now" in said
    assert all(job in said for job in sorted(ended)[:20])
    out = capsys.readouterr().out
    assert f"WARNING: {len(ended)} jobs ran again: the database lost their end" in out
    store = Store(db)
    assert set(store.ends_lost()) == ended and store.lost is None  # said once; the summary keeps the count
    store.close()


def test_a_resume_after_the_wal_was_cut_says_changes_were_lost(
    tmp_path: Path, trace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = _killed(trace, tmp_path)
    wal = Path(f"{db}-wal")
    os.truncate(wal, wal.stat().st_size // 2)  # SQLite drops the frames past the cut, without a word
    with caplog.at_level(logging.WARNING, logger="raycolloc.queue.dbopen"):
        assert _replay_again(trace, tmp_path) == 0
    assert any(f"queue.db={db} lost its last" in r.getMessage() for r in caplog.records)


def test_a_resume_with_its_wal_whole_and_a_database_made_new_report_nothing_lost(
    tmp_path: Path, trace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = _killed(trace, tmp_path)
    with caplog.at_level(logging.WARNING, logger="raycolloc.queue.dbopen"):
        assert _replay_again(trace, tmp_path) == 0  # an ordinary kill: the WAL holds every commit
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            path.unlink(missing_ok=True)  # the database removed on purpose; its ledger left behind
        assert _replay_again(trace, tmp_path) == 0  # a new database: the old ledger is not its
    assert not [r for r in caplog.records if "lost its last" in r.getMessage()]
    store = Store(db)
    assert store.ends_lost() == () and store.lost is None
    store.close()


def test_a_ledger_line_cut_by_a_kill_is_not_read_and_another_databases_ledger_is_replaced(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite"
    events = [Entry(1, "queued", "a", 0), Entry(2, "placed", "a", 1)]
    ledger_path(db).write_text(
        "# raycolloc queue ledger 1: id kind job_id attempt\n1 queued a 0\n2 placed a 1\n3 started a 1\n4 ende"
    )
    ledger = Ledger(db)
    lost = ledger.reconcile(events, fresh=False)
    ledger.close()
    assert lost is not None and (lost.recorded, lost.found, lost.ends) == (3, 2, ())
    ledger_path(db).write_text("# raycolloc queue ledger 1: id kind job_id attempt\n2 placed b 1\n3 ended b 1\n")
    ledger = Ledger(db)
    assert ledger.reconcile(events, fresh=False) is None  # event 2 is another job's: not this database's
    ledger.close()
    assert ledger_path(db).read_text().splitlines()[1:] == ["1 queued a 0", "2 placed a 1"]
