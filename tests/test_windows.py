"""An epoch timed in windows (issue 30): boundaries of equal steps, fewer windows in a short epoch,
a budgeted epoch's merged windows, the interval and CV from known step times, and the columns
through a real cell on the simulated backend."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest

from raycolloc.job.windows import EpochWindows, WindowStats, window_stats
from raycolloc.results.stats import t_quantile

from .conftest import load, run_one


class FakeClock:
    """A clock that moves only when a fake step says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def mark(self) -> float:
        return self.now

    def seconds(self, start: float, end: float) -> float:
        return end - start


def _run(steps: int | None, n: int, step_s: Callable[[int], float]) -> list[tuple[int, float]]:
    """``n`` fake steps, step ``i`` taking ``step_s(i)`` seconds; the epoch's windows."""
    clock = FakeClock()
    windows = EpochWindows(clock, steps)
    for i in range(n):
        clock.now += step_s(i)
        windows.step(i + 1)
    windows.close(n)
    return windows.windows()


def test_ten_windows_of_equal_steps_give_the_interval_and_cv_of_their_rates() -> None:
    # 100 steps of batch 10; window k's steps take 0.01 * (1 + k % 2 * 0.1) s: rates 1000 and 909.09...
    got = _run(100, 100, lambda i: 0.01 * (1 + (i // 10) % 2 * 0.1))
    assert [s for s, _ in got] == [10] * 10
    assert [t for _, t in got] == pytest.approx([0.1, 0.11] * 5)
    rates = [100 / 0.1, 100 / 0.11] * 5
    headline = 1000 / (5 * 0.1 + 5 * 0.11)
    stats = window_stats(got, 10, headline)
    hw = t_quantile(9) * statistics.stdev(rates) / math.sqrt(10)
    assert stats.windows == 10
    assert stats.rate_cv == pytest.approx(statistics.stdev(rates) / statistics.fmean(rates))
    # The windows' half-width, relative, around the headline (samples over wall time).
    assert (stats.rate_low, stats.rate_high) == pytest.approx((headline - hw, headline + hw))
    # Steady steps: a zero-width interval and no spread.
    steady = window_stats(_run(100, 100, lambda i: 0.01), 10, 1000.0)
    assert (steady.rate_low, steady.rate_high, steady.rate_cv) == pytest.approx((1000.0, 1000.0, 0.0))


def test_a_short_epoch_has_fewer_windows_of_at_least_three_steps_and_one_has_no_interval() -> None:
    assert [s for s, _ in _run(7, 7, lambda i: 0.01)] == [4, 3]
    sizes = [s for s, _ in _run(35, 35, lambda i: 0.01)]
    assert len(sizes) == 10 and set(sizes) == {3, 4} and sum(sizes) == 35
    one = _run(5, 5, lambda i: 0.01)
    assert one == [(5, pytest.approx(0.05))]
    assert window_stats(one, 10, 1000.0) == WindowStats(1, None, None, None, 1000.0)


def test_the_median_window_rate_leaves_out_the_windows_a_host_slowed() -> None:
    # Ten windows at 1000 samples/s, three of them slowed to a third (a vCPU that slows for a while):
    # the epoch's rate falls by a third; the median of its windows stays at the unslowed rate.
    slow = {2, 5, 6}
    got = _run(100, 100, lambda i: 0.01 * (3 if i // 10 in slow else 1))
    headline = 1000 / sum(t for _, t in got)
    stats = window_stats(got, 10, headline)
    assert headline == pytest.approx(1000 / 1.6)
    assert stats.rate_median == pytest.approx(1000.0)
    # Half the windows or more slowed: the median is a slowed one's (it does not invent a rate).
    most = window_stats(_run(100, 100, lambda i: 0.01 * (3 if i // 10 < 6 else 1)), 10, 500.0)
    assert most.rate_median == pytest.approx(1000 / 3)


def test_a_budgeted_epoch_merges_windows_as_it_goes_and_keeps_equal_steps() -> None:
    # A time budget: steps unknown ahead. 1000 steps: ten to twenty windows of one stride each,
    # the last also holding the steps after the last mark; all steps and seconds accounted for.
    got = _run(None, 1000, lambda i: 0.001)
    sizes = [s for s, _ in got]
    assert 10 <= len(got) < 20 and sum(sizes) == 1000
    stride = sizes[0]
    assert set(sizes[:-1]) == {stride} and stride <= sizes[-1] < 2 * stride
    assert sum(t for _, t in got) == pytest.approx(1.0)
    # A budget reached after four steps: one window.
    assert [s for s, _ in _run(None, 4, lambda i: 0.01)] == [4]


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("budget", [[], ["epoch_time_s=600"]], ids=["steps", "budget"])
def test_a_real_cell_carries_the_windows_into_its_rows(tmp_path: Path, budget: list[str]) -> None:
    """Steps known ahead (ten windows), or a time budget (steps unknown: marked every stride, merged as
    they go). The budget is far past the 128 steps' time, so its epochs end by their samples whatever
    the machine's load: with a 0.3 s budget a loaded 2-core machine once trained an epoch too few steps
    for two windows."""
    spec = load(["degree=2", "epoch_samples=1024", "batch_size=8", *budget], out_dir=tmp_path)
    result, t = run_one(spec, tmp_path / "cell")
    epochs, jobs, cells = t["epochs"], t["jobs"], t["cells"]
    assert result.status == "ok", result.summary
    assert (epochs["windows"] >= 2).all() and (epochs["rate_cv"] >= 0).all()
    assert (epochs["rate_low"] <= epochs["samples_per_s"]).all()
    assert (epochs["samples_per_s"] <= epochs["rate_high"]).all()
    if not budget:  # 128 steps: ten windows
        assert set(epochs["windows"]) == {10}
    else:  # marked every stride, neighbours merged: ten to twenty windows
        assert epochs["windows"].between(10, 20).all() and (epochs["steps"] == 128).all()
    e2 = epochs[epochs.epoch == 2].sort_values("job_index")
    assert list(jobs.sort_values("job_index")["epoch2_rate_low"]) == list(e2["rate_low"])
    assert list(jobs.sort_values("job_index")["epoch2_rate_cv"]) == list(e2["rate_cv"])
    cell = cells.iloc[0]
    assert cell["agg_rate_low"] <= cell["agg_samples_per_s"] <= cell["agg_rate_high"]
    assert cell["rate_cv"] == pytest.approx(e2["rate_cv"].max())
    assert cell["unstable"] == (cell["rate_cv"] >= 0.10)
    # Each window's steps and seconds are in the epochs table, and the median of their rates with them.
    for _, e in epochs.iterrows():
        rates = [n * 8 / t for n, t in zip(e["window_steps"], e["window_s"], strict=True)]
        assert len(rates) == e["windows"] and sum(e["window_steps"]) == e["steps"]
        assert e["rate_median"] == pytest.approx(statistics.median(rates))
    assert cell["agg_rate_median"] == pytest.approx(e2["rate_median"].sum())


def _on(backend: str, *words: str):  # noqa: ANN202 - a Config
    import dataclasses

    cfg = load(list(words)).config
    return dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, backend=backend))


def test_a_measured_epochs_floor_is_auto_on_a_real_gpu_only_and_never_in_a_budget_or_mix() -> None:
    from raycolloc.config import measured_floor
    from raycolloc.config_checks import MIN_EPOCH_AUTO_S

    assert load([]).config.min_epoch_s == "auto"
    assert measured_floor(_on("nvml")) == MIN_EPOCH_AUTO_S and measured_floor(_on("sim")) is None
    assert (
        measured_floor(_on("sim", "min_epoch_s=0.4")) == 0.4 and measured_floor(_on("nvml", "min_epoch_s=null")) is None
    )
    assert measured_floor(_on("nvml", "epoch_time_s=3")) is None  # a budget ends the epoch
    assert measured_floor(_on("nvml", "mix=tiny_mixed")) is None
    job = load(["epoch_samples=64", "batch_size=8", "min_epoch_s=0.4"]).jobs[0]
    assert job.min_epoch_s == 0.4 and job.epoch_floor_s(2) == 0.4 and job.epoch_floor_s(1) == 0.0  # warm-up: none


@pytest.mark.parametrize(
    ("words", "match"),
    [
        (["min_epoch_s=-1"], r"min_epoch_s=-1 is not allowed; choose auto .* null .* seconds 0..10000000"),
        (["min_epoch_s=soon"], r"min_epoch_s='soon' is not allowed"),
        (["min_epoch_s=true"], r"min_epoch_s=True is not allowed"),
        (["min_epoch_s=inf"], r"min_epoch_s=inf is not allowed"),
        (["min_epoch_s=2", "epoch_time_s=3"], r"min_epoch_s=2 conflicts with epoch_time_s=3"),
        (["min_epoch_s=30", "trainer.epoch_timeout_s=20"], r"past trainer.epoch_timeout_s=20"),
    ],
)
def test_a_bad_floor_is_refused_by_name(words: list[str], match: str) -> None:
    from raycolloc.config import ConfigError

    with pytest.raises(ConfigError, match=match):
        load(words)


def test_the_floor_is_hashed_as_it_acts_so_a_gpu_cell_measured_without_it_is_not_reused() -> None:
    from raycolloc.config import config_hash

    # Simulated GPUs: auto is no floor, and the hash is the one written before the floor existed.
    assert config_hash(_on("sim")) == config_hash(_on("sim", "min_epoch_s=null"))
    # A real GPU: auto is 5 s, unlike a cell measured without a floor (null), like an explicit 5.
    assert config_hash(_on("nvml")) != config_hash(_on("nvml", "min_epoch_s=null"))
    assert config_hash(_on("nvml")) == config_hash(_on("nvml", "min_epoch_s=5"))
    assert config_hash(_on("sim", "min_epoch_s=2")) != config_hash(_on("sim"))


@pytest.mark.usefixtures("ray_local")
def test_a_measured_epoch_runs_at_least_its_floor_with_more_steps_than_its_samples(tmp_path: Path) -> None:
    spec = load(["degree=1", "epoch_samples=64", "batch_size=8", "min_epoch_s=0.6"], out_dir=tmp_path)
    result, t = run_one(spec, tmp_path / "cell")
    assert result.status == "ok", result.summary
    epochs = t["epochs"].set_index("epoch")
    assert epochs.loc[1, "steps"] == 8  # warm-up: its samples alone
    assert epochs.loc[2, "wall_s"] >= 0.6 and epochs.loc[2, "steps"] > 8
    assert epochs.loc[2, "samples"] == epochs.loc[2, "steps"] * 8
    assert epochs.loc[2, "windows"] >= 2  # the windows follow the steps it ran
    assert t["cells"].iloc[0]["agg_samples_per_s"] == pytest.approx(epochs.loc[2, "samples_per_s"])
    assert t["jobs"].iloc[0]["min_epoch_s"] == 0.6  # the floor the job ran, in its row


def test_a_mix_has_no_floor_its_headline_is_the_time_of_fixed_work() -> None:
    spec = load(["mix=tiny_mixed", "min_epoch_s=2"])
    assert spec.jobs and all(job.min_epoch_s is None for job in spec.jobs)
    assert load(["degree=2", "min_epoch_s=2"]).jobs[1].min_epoch_s == 2


def test_spent_batches_name_themselves_instead_of_a_bare_stop_iteration() -> None:
    import torch

    from raycolloc.job.workloads.user import BatchesRanOut, _Batches

    once = ((torch.zeros(2, 3), torch.zeros(2)) for _ in range(2))  # a generator: spent after one pass
    batches = _Batches(once, torch.device("cpu"))
    batches.next(), batches.next()
    with pytest.raises(BatchesRanOut, match="re-iterable"):
        batches.next()
    listed = _Batches([(torch.zeros(2, 3), torch.zeros(2))], torch.device("cpu"))
    assert [listed.next()[1].shape for _ in range(3)] == [torch.Size([2])] * 3  # a list is cycled
