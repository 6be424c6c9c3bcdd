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
