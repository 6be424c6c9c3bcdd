"""A repeat's warm-up learned from its first run (``measure.warmup=learned``, raycolloc/driver/warmup.py):
the rule on synthetic epochs tables, and the spec it gives a repeat."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raycolloc.driver.regrow import Regrow
from raycolloc.driver.resume import CellResult
from raycolloc.driver.warmup import Learned, learn, with_warmup
from raycolloc.spec import JobSpec

from .conftest import load


def _epoch(job: int, epoch: int, seconds: list[float], steps: int = 10) -> dict[str, Any]:
    return {"job_index": job, "epoch": epoch, "window_steps": [steps] * len(seconds), "window_s": seconds}


MEASURED = [0.1, 0.1, 0.11, 0.1, 0.09, 0.1, 0.1, 0.1, 0.1, 0.1]  # 10 windows of 10 steps: ~91-111 steps/s


def test_a_repeat_warms_up_through_the_window_where_its_first_run_settled_and_one_more() -> None:
    # The first two windows pay the first steps' costs; from the third on the warm-up runs as measured.
    warm = [1.0, 0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
    learned = learn([_epoch(0, 1, warm), _epoch(0, 2, MEASURED)])
    assert learned.steps == {0: 40}  # windows 0-2, and window 3
    assert learned.saved_s == pytest.approx(0.6)  # the six windows it no longer runs


@pytest.mark.parametrize(
    ("warm", "why"),
    [
        ([1.0, 0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.3, 0.1], "a slow window late in the warm-up: not settled early"),
        ([1.0, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3], "never as fast as the slowest measured window"),
        ([1.0, 0.1], "too few windows to learn from"),
    ],
)
def test_a_first_run_that_settled_late_or_never_teaches_nothing(warm: list[float], why: str) -> None:
    assert learn([_epoch(0, 1, warm), _epoch(0, 2, MEASURED)]) == Learned({}, 0.0), why


def test_rows_without_windows_or_a_measured_epoch_teach_nothing() -> None:
    assert (
        learn([{"job_index": 0, "epoch": 1, "window_steps": None, "window_s": None}, _epoch(0, 2, MEASURED)]).steps
        == {}
    )
    assert learn([_epoch(0, 1, [1.0] + [0.1] * 9)]).steps == {}


def test_a_cell_saves_what_its_slowest_learning_job_saves_and_nothing_if_one_job_warms_up_whole() -> None:
    fast = [1.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]  # settled at window 1: 2 windows... and one more
    slow = [1.0, 0.3, 0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]  # settled at window 3
    both = learn([_epoch(0, 1, fast), _epoch(0, 2, MEASURED), _epoch(1, 1, slow), _epoch(1, 2, MEASURED)])
    assert both.steps == {0: 30, 1: 50} and both.saved_s == pytest.approx(0.5)  # job 1 skips five windows
    never = [1.0] + [0.3] * 9
    one = learn([_epoch(0, 1, fast), _epoch(0, 2, MEASURED), _epoch(1, 1, never), _epoch(1, 2, MEASURED)])
    assert one.steps == {0: 30} and one.saved_s == 0.0  # the cell waits for job 1's whole warm-up


def test_with_warmup_sets_the_learned_steps_and_keeps_the_cells_hash_and_measured_epochs() -> None:
    spec = load(["degree=2", "workload=tiny_cnn", "epoch_samples=1024", "batch_size=32"])
    learned = with_warmup(spec, Learned({0: 12, 1: 500}, 0.4))
    first, second = learned.jobs
    assert first.warmup_steps == 12 and first.epoch_steps(1) == 12 and first.epoch_steps(2) == 32
    assert second.warmup_steps is None  # 500 steps is no shorter than its 32-step epoch: a whole one
    assert learned.config_hash == spec.config_hash and learned.cell_id == spec.cell_id
    assert [dataclasses.replace(j, warmup_steps=None) for j in learned.jobs] == list(spec.jobs)


def test_script_jobs_and_time_budgeted_epochs_warm_up_whole() -> None:
    script = load(["workload=script", "workload.command=[python,jobs/examples/plain_train.py]", "degree=1"])
    # Steps of its own to shorten, were it raycolloc's to step: it runs as written all the same.
    stepped = dataclasses.replace(
        script, jobs=tuple(dataclasses.replace(j, epoch_samples=1024, batch_size=32) for j in script.jobs)
    )
    (job,) = with_warmup(stepped, Learned({0: 3}, 1.0)).jobs
    assert isinstance(job, JobSpec) and job.steps_per_epoch == 32 and job.warmup_steps is None
    budgeted = load(["degree=1", "workload=tiny_cnn", "epoch_samples=1024", "epoch_time_s=2"])
    (job,) = with_warmup(budgeted, Learned({0: 3}, 1.0)).jobs
    assert job.warmup_steps is None  # the budget is the user's


def _first_run(tmp_path: Path, warm: list[float]) -> Path:
    first = tmp_path / "first"
    first.mkdir()
    pq.write_table(
        pa.Table.from_pylist([_epoch(0, 1, warm, steps=3), _epoch(0, 2, MEASURED, steps=3)]), first / "epochs.parquet"
    )
    return first


def _ok(gpu_s: float) -> SimpleNamespace:
    return SimpleNamespace(
        status="ok", agg_samples_per_s=100.0, agg_rate_low=80.0, agg_rate_high=120.0, started_at=0.0, finished_at=gpu_s
    )


SETTLED = [1.0, 0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]  # as MEASURED from window 2 on


def test_a_repeat_gets_what_its_first_run_taught_read_back_from_the_directory_it_was_reused_from(
    tmp_path: Path,
) -> None:
    solo, x2 = load(["degree=1", "epoch_samples=1024"]), load(["degree=2", "epoch_samples=1024"])
    regrow = Regrow([solo, x2], place=lambda spec: tmp_path / spec.cell_id, rerun=True)
    first = _first_run(tmp_path, SETTLED)
    growth = regrow.expand([CellResult(solo, tmp_path / "not-here", "ok", "", reused_from=first, row=_ok(10.0))])
    ((repeat, _),) = growth.front  # the solo's second run, due once half the first pass is in
    assert repeat.config.repeat == 1 and repeat.jobs[0].warmup_steps == 12  # windows 0-2, and one more
    assert repeat.config_hash != solo.config_hash and repeat.jobs[0].epoch_steps(2) == 32


@pytest.mark.parametrize("case", ["unreadable", "mix", "epoch"])
def test_nothing_is_learned_from_an_unreadable_table_in_a_sweep_with_a_mix_or_with_warmup_epoch(
    tmp_path: Path, case: str
) -> None:
    words = ["degree=1", "epoch_samples=1024", *(["measure.warmup=epoch"] if case == "epoch" else [])]
    solo = load(words)
    cells = [solo, load(["mix=tiny_mixed"]) if case == "mix" else load(["degree=2", "epoch_samples=1024"])]
    regrow = Regrow(cells, place=lambda spec: tmp_path / spec.cell_id, rerun=True)
    first = tmp_path / "empty" if case == "unreadable" else _first_run(tmp_path, SETTLED)
    growth = regrow.expand([CellResult(solo, first, "ok", "", row=_ok(10.0))])
    assert [spec.jobs[0].warmup_steps for spec, _ in growth.front + growth.back] == [None]
