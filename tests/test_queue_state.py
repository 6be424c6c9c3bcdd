"""The queue's state (issue 33): every change one transaction, each job ends exactly once — also when
the queue is killed at any point and restarted (simulated cluster: its runners die with it)."""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from sqlite3 import Connection

import pytest

from raycolloc.queue.replay import replay
from raycolloc.queue.settings import compose_settings
from raycolloc.queue.state import Store
from raycolloc.queue.trace import TraceJob, read_trace, write_trace
from raycolloc.queue.tracegen import generate


def _job(job_id: str, submit: float = 0.0) -> TraceJob:
    return TraceJob(job_id, submit, "timm", "resnet50", "imagenet64", None, None, 1000, None)


def test_a_job_ends_once_and_a_stale_or_repeated_report_changes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "q.sqlite")
    store.add([_job("a"), _job("b", 5.0)], [100.0, 100.0], 0.0)
    assert [r.job.job_id for r in store.waiting(1.0)] == ["a"]  # b has not arrived yet
    assert store.next_arrival(1.0) == 5.0
    first = store.place("a", "g0", "mps", 1.0)
    assert store.start("a", first, 1.0)
    assert store.oom("a", first, 2.0, 150.0)  # out of memory: re-queued, counted, estimate grown
    record = store.job("a")
    assert record is not None and (record.state, record.ooms, record.requeues, record.priority) == ("queued", 1, 1, 1)
    assert record.mem_estimate_mib == 150.0
    second = store.place("a", "g1", "naive", 3.0)
    assert second == first + 1 and store.start("a", second, 3.0)
    assert not store.end("a", first, 4.0)  # the first attempt's runner, late: ignored
    assert store.end("a", second, 9.0, ("b",))
    assert not store.end("a", second, 9.5)  # reported twice: ignored
    assert not store.oom("a", second, 9.6, 1e6)
    assert [e for e in store.events("ended")] == [(9.0, "a", "ended", second)]
    assert store.counts()["ended"] == 1 and store.clock() == 9.0
    with pytest.raises(ValueError, match="not queued"):
        store.place("a", "g0", "naive", 10.0)
    store.close()


def test_a_measured_training_rate_is_kept_with_the_end_for_a_resumed_run(tmp_path: Path) -> None:
    from raycolloc.queue.core import Report

    store = Store(tmp_path / "q.sqlite")
    store.add([_job("a"), _job("b"), _job("c")], [100.0] * 3, 0.0)
    attempts = {j: store.place(j, "g0", "mps", 1.0) for j in "abc"}
    assert all(store.start(j, a, 1.0) for j, a in attempts.items())
    assert store.end("a", attempts["a"], 5.0, (), 21_000.0)
    assert not store.end("a", attempts["a"], 6.0, (), 1.0)  # a stale report's rate is not kept either
    assert store.end("b", attempts["b"], 5.0)  # nothing measured (the simulated cluster)
    store.close()
    store = Store(tmp_path / "q.sqlite")  # the next session: the rate measured by the last one is there
    assert store.ended_rates() == {"a": 21_000.0}
    # What a runner reports reaches the database through the queue's handling of it.
    from raycolloc.queue.core import Queue

    queue = Queue.__new__(Queue)
    queue.store = store
    queue.handle([Report("c", attempts["c"], "ended", 7.0, (), None, 9_000.0)])
    assert store.ended_rates() == {"a": 21_000.0, "c": 9_000.0}
    store.close()


def test_recover_requeues_jobs_whose_runner_is_gone_and_keeps_the_living(tmp_path: Path) -> None:
    store = Store(tmp_path / "q.sqlite")
    store.add([_job("a"), _job("b"), _job("c")], [1.0, 1.0, 1.0], 0.0)
    a = store.place("a", "g0", "naive", 1.0)
    store.start("a", a, 1.0)
    store.place("b", "g1", "naive", 1.0)  # placed, never started: the queue died in between
    c = store.place("c", "g2", "naive", 1.0)
    store.start("c", c, 1.0)
    assert sorted(store.recover(2.0, alive=frozenset({("c", c)}))) == ["a", "b"]
    states = {r.job.job_id: (r.state, r.requeues) for r in store.jobs()}
    assert states == {"a": ("queued", 1), "b": ("queued", 1), "c": ("started", 0)}
    assert store.cancel("c", 3.0) == "started" and store.cancel("c", 4.0) is None
    store.close()


class Killed(BaseException):
    """The queue's process dying (BaseException: nothing in the queue may catch it)."""


def _dying(after: int, before_commit: bool) -> type[Store]:
    """A store whose process dies at its ``after``-th transaction, before or after the commit."""

    class DyingStore(Store):
        left = after

        @contextmanager
        def transaction(self) -> Iterator[Connection]:
            with super().transaction() as db:
                yield db
                DyingStore.left -= 1
                if before_commit and DyingStore.left == 0:
                    raise Killed  # mid-transaction: rolled back, as SQLite discards an uncommitted one
            if not before_commit and DyingStore.left == 0:
                raise Killed  # committed, and the queue dies before it acts on it

    return DyingStore


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    settings = compose_settings(["cluster=local", "cluster.num_gpus=2"])
    return write_trace(tmp_path_factory.mktemp("trace") / "t.csv", generate(16, 7, settings.config.queue, settings.gpu))


def _check_each_job_ended_once(db: Path, trace: Path) -> Store:
    store = Store(db)
    ended = Counter(job for _, job, _, _ in store.events("ended"))
    ids = {j.job_id for j in read_trace(trace)}
    assert set(ended) == ids and set(ended.values()) == {1}
    assert store.counts()["ended"] == len(ids)
    return store


@pytest.mark.parametrize("policy", ["exclusive", "carma", "raycolloc"])
@pytest.mark.parametrize(("after", "before_commit"), [(6, True), (17, False), (30, True), (44, False)])
def test_a_queue_killed_mid_trace_and_restarted_ends_every_job_exactly_once(
    tmp_path: Path, small_trace: Path, policy: str, after: int, before_commit: bool
) -> None:
    words = ["cluster=local", "cluster.num_gpus=2", f"queue.policy={policy}", f"out_dir={tmp_path}"]
    settings = compose_settings(words)
    with pytest.raises(Killed):
        replay(small_trace, settings, _dying(after, before_commit))
    outcome = replay(small_trace, settings)  # the same command again: it resumes
    assert outcome.summary.complete and outcome.summary.ended == 16
    store = _check_each_job_ended_once(outcome.directory / "queue.sqlite", small_trace)
    lost = [e for e in store.events("requeued")]
    assert lost, "the kill found jobs running: their runners died and they were re-queued"
    assert sum(r.requeues for r in store.jobs()) == len(lost)
    store.close()


def _replay_dying_hard(trace: Path, words: list[str], after: int) -> None:
    class HardKill(Store):
        left = after

        @contextmanager
        def transaction(self) -> Iterator[Connection]:
            with super().transaction() as db:
                yield db
                HardKill.left -= 1
                if HardKill.left == 0:
                    os._exit(9)  # the process ends mid-transaction: no rollback, no close, no finally

    replay(trace, compose_settings(words), HardKill)


def test_a_queue_process_that_dies_mid_transaction_resumes_from_its_database(tmp_path: Path, small_trace: Path) -> None:
    words = ["cluster=local", "cluster.num_gpus=2", "queue.policy=raycolloc", f"out_dir={tmp_path}"]
    child = multiprocessing.get_context("fork").Process(target=_replay_dying_hard, args=(small_trace, words, 45))
    child.start()
    child.join(60)
    assert child.exitcode == 9
    outcome = replay(small_trace, compose_settings(words))
    assert outcome.summary.complete
    _check_each_job_ended_once(outcome.directory / "queue.sqlite", small_trace).close()


def test_a_database_of_another_trace_or_policy_is_refused(tmp_path: Path, small_trace: Path) -> None:
    from raycolloc.queue.__main__ import main

    db = tmp_path / "shared.sqlite"
    assert main(["replay", str(small_trace), "cluster=local", f"queue.db={db}", "queue.policy=exclusive"]) == 0
    assert main(["replay", str(small_trace), "cluster=local", f"queue.db={db}", "queue.policy=carma"]) == 2
    assert main(["replay", str(small_trace), "cluster=local", f"queue.db={db}", "queue.policy=exclusive"]) == 0


def test_a_node_lost_mid_trace_has_its_jobs_requeued_and_each_job_ends_once(tmp_path: Path, small_trace: Path) -> None:
    import pandas as pd

    words = ["cluster=local", "queue.sim_nodes=2", "queue.sim_gpus_per_node=1", f"out_dir={tmp_path}"]
    outcome = replay(small_trace, compose_settings([*words, "queue.sim_node_loss=[1@15]"]))
    assert outcome.summary.complete
    store = _check_each_job_ended_once(outcome.directory / "queue.sqlite", small_trace)
    lost = [j for t, j, _, _ in store.events("requeued") if t == 15.0]
    assert lost and outcome.summary.requeues == len(lost)
    rows = pd.read_parquet(outcome.jobs_file)
    late = rows[rows["start_s"] >= 15.0]
    assert not late.empty and (late["gpu"] == "n0-g0").all()  # nothing runs on the lost node after
    store.close()


@pytest.mark.parametrize("loss", ["[x@10]", "[1@]", "[1@-5]", "[7@10]"])
def test_a_bad_node_loss_exits_2_and_queues_nothing(tmp_path: Path, small_trace: Path, loss: str) -> None:
    from raycolloc.queue.__main__ import main

    words = ["cluster=local", "queue.sim_nodes=2", f"out_dir={tmp_path}", f"queue.sim_node_loss={loss}"]
    assert main(["replay", str(small_trace), *words]) == 2
    assert not (tmp_path / "queue").exists()


def test_recover_requeues_a_placed_attempt_once_even_where_its_runner_is_listed_alive(tmp_path: Path) -> None:
    store = Store(tmp_path / "q.sqlite")
    store.add([_job("a")], [1.0], 0.0)
    first = store.place("a", "g0", "naive", 1.0)  # its start never recorded: it could never end
    alive = frozenset({("a", first)})
    assert store.recover(2.0, alive) == ["a"]
    assert store.recover(3.0, alive) == []  # once
    record = store.job("a")
    assert record is not None and (record.state, record.requeues) == ("queued", 1)
    assert len(store.events("requeued")) == 1
    second = store.place("a", "g1", "naive", 4.0)
    assert store.start("a", second, 4.0) and store.end("a", second, 5.0)
    store.close()


def test_a_database_sqlite_will_not_keep_in_wal_mode_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raycolloc.queue.state import JournalModeError

    monkeypatch.chdir(tmp_path)  # the lock file of ":memory:" lands here
    with pytest.raises(JournalModeError, match="journal_mode=memory, not wal"):
        Store(":memory:")  # an in-memory database has no WAL


def test_a_job_is_stored_with_the_bound_it_runs_under_and_reported_against_it(tmp_path: Path) -> None:
    from dataclasses import replace

    from raycolloc.queue.report import job_rows

    store = Store(tmp_path / "q.sqlite")
    store.add([_job("a"), replace(_job("b"), max_slowdown=1.5)], [1.0, 1.0], 0.0, bound=2.0)
    assert {r.job.job_id: r.job.max_slowdown for r in store.jobs()} == {"a": 2.0, "b": 1.5}
    rows = job_rows("raycolloc", store.jobs(), lambda job: 1.0, 3.0)  # today's default: not a's
    assert [r.max_slowdown for r in rows] == [2.0, 1.5]
    store.close()


def test_a_rerun_with_other_queue_settings_is_refused_naming_them(
    tmp_path: Path, small_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from raycolloc.queue.__main__ import main

    words = ["cluster=local", "cluster.num_gpus=2", f"out_dir={tmp_path}"]
    assert main(["replay", str(small_trace), *words]) == 0
    run = next((tmp_path / "queue").iterdir())
    first = json.loads((run / "summary.json").read_text())
    capsys.readouterr()
    assert main(["replay", str(small_trace), *words, "queue.max_slowdown=1.05", "queue.aging_s=10"]) == 2
    err = capsys.readouterr().err
    assert "queue.aging_s=300.0 there, 10.0 now; queue.max_slowdown=2.0 there, 1.05 now" in err, err
    assert json.loads((run / "summary.json").read_text()) == first  # nothing ran, nothing rewritten
    assert main(["replay", str(small_trace), *words, "queue.trace_gap_s=9"]) == 0  # the generator's: not the run's
    assert main(["replay", str(small_trace), *words, "queue.sim_nodes=1"]) == 0  # the same cluster, said so
    store = Store(run / "queue.sqlite", read_only=True)
    own = {j.job_id: j.max_slowdown for j in read_trace(small_trace)}
    assert {r.job.job_id: r.job.max_slowdown for r in store.jobs()} == {k: v or 2.0 for k, v in own.items()}
    store.close()


# A process that owns a database (one job running in it) until it is killed.
_OWNER = """
import sys
from raycolloc.queue.state import Store
from raycolloc.queue.trace import TraceJob
store = Store(sys.argv[1])
store.add([TraceJob("a", 0.0, "timm", "resnet50", "imagenet64", None, None, 1000, None)], [1.0], 0.0)
store.start("a", store.place("a", "g0", "naive", 1.0), 1.0)
print("owning", flush=True)
sys.stdin.read()
"""


def test_a_second_process_may_not_own_a_database_but_may_read_it(
    tmp_path: Path, small_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess
    import sys

    from raycolloc.queue.__main__ import main
    from raycolloc.queue.state import StoreBusy

    db = tmp_path / "q.sqlite"
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "owning"
        with pytest.raises(StoreBusy, match="in use by another process"):
            Store(db)
        assert main(["replay", str(small_trace), "cluster=local", f"queue.db={db}"]) == 2
        assert "in use by another process" in capsys.readouterr().err
        reader = Store(db, read_only=True)  # reading beside the owner
        record = reader.job("a")
        assert record is not None and (record.state, record.requeues) == ("started", 0)  # left running
        reader.close()
    finally:
        owner.kill()  # however the owner ends, the kernel drops its lock
        owner.wait(30)
    store = Store(db)
    assert store.recover(2.0) == ["a"]  # now it is the owner's to resume
    store.close()
