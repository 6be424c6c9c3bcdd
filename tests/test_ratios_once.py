"""The statistics once (issue 45): the report's gain and mix tables (pandas, :mod:`analysis`) and the
sweep's summary (pure Python, :mod:`raycolloc.results.summary_tables`) apply the same rules
(:mod:`raycolloc.results.ratios`), so on the same cells, written by the real writer, they agree to the
last digit: values and 95% intervals of the aggregate rate, the gains against the solo and the best
solo, energy per sample, a mix's total time and its change against sequential."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis.gains import gain_table
from analysis.load import load_sweeps
from analysis.mixed import mixed_table, table2
from raycolloc.results.ratios import as_change, best, configuration, over_sequential, paired_value, run_ratio
from raycolloc.results.stats import Interval, point
from raycolloc.results.summary_tables import gain_rows, mix_rows, read_runs

from .test_analysis import T0, cell, epochs_of, job, make_sweep

MEAN = {"measure": {"statistic": "mean"}}


def _cells(root: Path) -> Path:
    """The analysis fixture's sweep (points, a compiled best solo, an OOM, two mixes), a second run of
    the mixes' solos (so the sequential time has an interval), and tiny_cnn with repeats under the
    mean: solos 100/115/90 (their mean and median differ), pairs 200/241.5/171, a triple of four runs
    (its fourth without a solo of its repeat), and one-run cells of ``mlp`` with within-run intervals."""
    make_sweep(root)
    cell(root, "0b", "cnn", "naive", [job(0, "cnn", 1.6, total_s=13.0)], agg=190.0, repeat=1)
    cell(root, "7b", "mlp", "naive", [job(0, "mlp", 4.2, total_s=19.0)], agg=72.0, repeat=1)
    for k, (solo, pair) in enumerate([(100.0, 200.0), (115.0, 241.5), (90.0, 171.0)]):
        kw: dict[str, Any] = {"repeat": k, "extra_config": MEAN}
        cell(root, f"ts{k}", "tiny_cnn", "naive", [job(0, "tiny_cnn", 1.5)], agg=solo, repeat_group="s", **kw)
        pairs = [job(i, "tiny_cnn", 1.5) for i in range(2)]
        cell(root, f"tp{k}", "tiny_cnn", "naive", pairs, agg=pair, repeat_group="p", energy_j=90.0 + k, **kw)
    for k, agg in enumerate((240.0, 250.0, 260.0, 245.0)):
        jobs = [job(i, "tiny_cnn", 2.0) for i in range(3)]
        cell(root, f"tt{k}", "tiny_cnn", "naive", jobs, agg=agg, repeat=k, repeat_group="t", extra_config=MEAN)
    cell(root, "ms", "mlp", "mps", [job(0, "mlp", 4.0)], agg=80.0, agg_rate_low=76.0, agg_rate_high=84.0)
    pair = [job(i, "mlp", 4.0) for i in range(2)]
    cell(root, "mp", "mlp", "mps", pair, agg=150.0, agg_rate_low=135.0, agg_rate_high=165.0)
    return root


def _equal(found: Interval | None, frame: pd.Series, column: str) -> None:
    """The summary's interval and the report's ``column`` (with ``_low``/``_high``) agree."""
    value, low, high = frame[column], frame.get(f"{column}_low"), frame.get(f"{column}_high")
    if found is None:
        assert pd.isna(value), (column, value)
        return
    assert value == pytest.approx(found.value, rel=1e-12), column
    if low is None:
        return
    if not found.known:
        assert pd.isna(low) and pd.isna(high), (column, low, high)
        return
    assert (low, high) == pytest.approx((found.low, found.high), rel=1e-12), column


def test_the_report_and_the_summary_compute_the_same_gains_and_mixes(tmp_path: Path) -> None:
    root = _cells(tmp_path / "sweep")
    data = load_sweeps([root])
    runs = read_runs(sorted(p for p in root.iterdir() if p.is_dir()))
    report = gain_table(data.cells, data.jobs)
    summary = gain_rows(runs)
    assert len(summary) == len(report) == 15
    compared = 0
    for r in summary:
        match = report[
            (report["workload"] == r.workload)
            & (report["mode"] == r.mode)
            & (report["degree"] == r.degree)
            & (report["settings"] == r.settings)
            # two configurations that differ only by their cells (no repeat group): told apart by rate
            & (report["agg_samples_per_s"].isna() if r.agg is None else report["agg_samples_per_s"] == r.agg.value)
        ]
        assert len(match) == 1, r
        other = match.iloc[0]
        assert other["status"] == r.status and other["n_runs"] == r.runs
        for found, column in (
            (r.agg, "agg_samples_per_s"),
            (r.gain, "gain_vs_solo"),
            (r.vs_best, "gain_vs_best_solo"),
            (r.energy, "energy_per_sample_j"),
        ):
            _equal(found, other, column)
            compared += found is not None and found.known
    assert compared >= 8  # intervals compared, not only points
    mixes = table2(mixed_table(data.cells, data.jobs, data.epochs))
    rows = mix_rows(runs)
    assert len(rows) == len(mixes) == 2
    for m in rows:
        other = mixes[(mixes["mix"] == m.mix) & (mixes["mode"] == m.mode)].iloc[0]
        _equal(m.total, other, "total_s")
        _equal(m.change, other, "change_vs_sequential_pct")
    naive = next(m for m in rows if m.mode == "naive")
    assert naive.change is not None and naive.change.known  # the solos' two runs give the sum its interval


def test_the_rules_on_their_own() -> None:
    """A run is paired with the reference's run of its repeat, else the reference's value; its ratio
    carries both intervals; a mix's change sums its jobs' intervals in quadrature."""
    whole = configuration([point(100.0), point(110.0), point(90.0)], "mean")
    assert whole is not None and whole.value == pytest.approx(100.0) and whole.known
    reference = [(0, 100.0), (1, 110.0), (2, 90.0)]
    assert paired_value(1, reference, whole) == 110.0 and paired_value(5, reference, whole) == whole.value
    gain = run_ratio(Interval(231.0, 219.45, 242.55, 3, "windows"), 110.0, whole)
    assert gain is not None and gain.value == pytest.approx(2.1)
    assert gain.rel_half_width == pytest.approx(math.hypot(0.05, whole.rel_half_width))
    assert run_ratio(point(1.0), 0.0, whole) is None
    assert best({"a": point(2.0), "b": point(3.0), "c": point(3.0)}) == "b" and best({}) is None
    alone = [Interval(12.0, 11.0, 13.0, 2, "repeats"), Interval(18.0, 16.0, 20.0, 2, "repeats")]
    ratio = over_sequential(point(25.0), alone)
    assert ratio is not None and ratio.rel_half_width == pytest.approx(math.hypot(1.0, 2.0) / 30.0)
    assert as_change(ratio).value == pytest.approx(100 * (25 / 30 - 1))
    unsure = over_sequential(point(25.0), [alone[0], point(18.0)])  # one solo without a spread
    assert unsure is not None and not unsure.known
    assert over_sequential(point(25.0), []) is None


def _mix_numbers(root: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Each mix's change against sequential: the summary's, and the report's."""
    data = load_sweeps([root])
    report = table2(mixed_table(data.cells, data.jobs, data.epochs))
    summary = mix_rows(read_runs(sorted(p for p in root.iterdir() if p.is_dir())))
    mine = [(m.mix, m.mode, m.change.value if m.change else None) for m in summary]
    theirs = [
        (r["mix"], r["mode"], None if pd.isna(v := r["change_vs_sequential_pct"]) else v) for _, r in report.iterrows()
    ]
    return sorted(mine, key=lambda t: t[:2]), sorted(theirs, key=lambda t: t[:2])


@pytest.mark.parametrize(("warmup_samples", "counts"), [(60, False), (300, True), (None, True), (0, True)])
def test_a_solo_run_that_warmed_up_less_than_an_epoch_is_no_reference_for_a_mix(
    tmp_path: Path, warmup_samples: int | None, counts: bool
) -> None:
    """A repeat's learned warm-up (``measure.warmup=learned``) keeps the slow start and drops the tail:
    its time per sample, warm-up included, is no measure of the job alone for a mix's sequential sum.
    A warm-up of unknown samples counts as whole; the report and the summary agree on each."""
    root = make_sweep(tmp_path / "sweep")
    before = _mix_numbers(root)
    slow = job(0, "cnn", 1.5, total_s=100.0)  # the mix's cnn solo again, far slower over its whole life
    eps = epochs_of(slow)
    eps[0] = {**eps[0], "samples": warmup_samples}  # of its 300 samples per epoch
    cell(root, "0r", "cnn", "naive", [slow], agg=200.0, epochs=eps, repeat=1)
    summary, report = _mix_numbers(root)
    assert (summary != before[0], report != before[1]) == (counts, counts)
    assert [t[2] for t in summary] == pytest.approx([t[2] for t in report], nan_ok=True)


def test_a_floored_solos_time_counts_its_epochs_as_the_mixs_job_trains_them() -> None:
    from raycolloc.results.ratios import as_its_epochs, solo_time_per_sample

    # Warm-up 300 samples in 2 s; a measured epoch over a 5 s floor: 1200 samples in 6 s (200/s). A mix's
    # job trains one epoch of 300 after its warm-up: 2 s + 1.5 s for 600 samples.
    floored = {"samples": 1500, "epochs": 2, "epoch_samples": 300, "batch_size": 30, "min_epoch_s": 5.0}
    assert as_its_epochs(floored, 8.0, 6.0, 1200) == pytest.approx((3.5, 600))
    assert as_its_epochs({**floored, "min_epoch_s": None}, 8.0, 6.0, 1200) == (8.0, 1500)  # no floor: as it ran
    assert as_its_epochs({**floored, "epoch_time_s": 3.0}, 8.0, 6.0, 1200) == (8.0, 1500)  # a time budget too
    assert as_its_epochs({**floored, "epoch_samples": 310}, 8.0, 6.0, 1200) == pytest.approx(
        (3.5, 600)
    )  # whole batches
    assert as_its_epochs(floored, None, 6.0, 1200) is None
    epochs = [{"warmup": True, "samples": 300}, {"warmup": False, "samples": 1200}]
    assert solo_time_per_sample({**floored, "total_s": 8.0, "measured_s": 6.0}, epochs) == pytest.approx(3.5 / 600)
    short = [{"warmup": True, "samples": 60}, {"warmup": False, "samples": 1200}]  # a learned warm-up: no reference
    assert solo_time_per_sample({**floored, "total_s": 8.0, "measured_s": 6.0}, short) is None
    uneven = {**floored, "epoch_samples": 310, "total_s": 8.0, "measured_s": 6.0}  # its warm-up: 10 whole batches
    assert solo_time_per_sample(uneven, epochs) == pytest.approx(3.5 / 600)
    assert as_its_epochs(floored, 8.0, None, 1200) is None  # floored, its measured part unknown: no reference
    script = {**floored, "batch_size": None, "epoch_samples": None}  # not stepped by raycolloc: as it ran
    assert as_its_epochs(script, 8.0, None, None) == (8.0, 1500)


@pytest.mark.parametrize("epoch_samples", [300, 310])  # 310 at 30: ten whole batches, as 50,000 at 128
def test_a_mix_against_a_solo_measured_over_the_floor_is_as_against_one_of_its_own_epochs(
    tmp_path: Path, epoch_samples: int
) -> None:
    """On a GPU a mix's jobs run no floor and their solos run 5 s measured epochs: the sequential time was
    the jobs' samples at the solo's time per sample over its longer life, which weighs its warm-up less.
    An epoch of samples not a whole number of batches trains its whole batches: its warm-up is whole."""

    def trains(row: dict[str, Any]) -> dict[str, Any]:  # its epochs' rows made first: 300 samples each
        return {**row, "epoch_samples": epoch_samples}

    def sweep(root: Path, cnn_solo: dict[str, Any], cnn_epochs: list[dict[str, Any]]) -> Path:
        mixed = [job(0, "cnn", 6.0, total_s=10.0), job(1, "mlp", 12.0, total_s=20.0)]
        eps = epochs_of(mixed[0], warmup_s=4.0) + epochs_of(mixed[1], warmup_s=8.0, start=T0 + 2.0, gap=3.0)
        cell(
            root, "8", "cnn+mlp", "naive", [trains(j) for j in mixed], agg=None, mix="cnn_mlp", epochs=eps, total_s=20.0
        )
        cell(root, "0", "cnn", "naive", [trains(cnn_solo)], agg=200.0, epochs=cnn_epochs)
        mlp = job(0, "mlp", 4.0, total_s=18.0)
        cell(root, "7", "mlp", "naive", [trains(mlp)], agg=75.0, epochs=epochs_of(mlp))
        return root

    plain = job(0, "cnn", 1.5)  # 2 s warm-up and 1.5 s for its 300 samples: 3.5 s
    rate = {"epoch2_s": 6.0, "measured_s": 6.0, "epoch2_samples_per_s": 200.0}
    floored = {**plain, "total_s": 8.0, "min_epoch_s": 5.0, **rate}  # its measured epoch: 1200 samples in 6 s
    floored_eps = epochs_of(plain)
    floored_eps[1] = {**floored_eps[1], "samples": 1200, "wall_s": 6.0, "end_ts": floored_eps[1]["start_ts"] + 6.0}
    own = _mix_numbers(sweep(tmp_path / "own", plain, epochs_of(plain)))
    over_floor = _mix_numbers(sweep(tmp_path / "floor", floored, floored_eps))
    assert all(t[2] is not None for t in own[0] + own[1]), own  # every job has its solo
    assert [t[2] for t in own[0]] == pytest.approx([t[2] for t in own[1]])  # summary and report agree
    assert [t[2] for t in over_floor[0]] == pytest.approx([t[2] for t in own[0]])
    assert [t[2] for t in over_floor[1]] == pytest.approx([t[2] for t in own[1]])


def test_a_slowdown_is_of_each_epochs_samples_at_its_rate_not_of_a_floored_wall_time(tmp_path: Path) -> None:
    """On a real GPU every measured epoch runs at least its 5 s floor, so the jobs' wall times are the
    floor's alike: a slowdown of wall times said 1.00 (one H200, 2026-12-05). A job's epoch-2 time is its
    epoch's samples at its measured rate, in the summary and the report alike."""
    root = tmp_path / "sweep"

    def floored(index: int, own_s: float) -> dict[str, Any]:
        j = job(index, "cnn", own_s)  # 300 samples at 300 / own_s samples/s ...
        return {**j, "epoch2_s": 5.0, "measured_s": 5.0, "total_s": 7.0}  # ... measured over the 5 s floor

    cell(root, "s", "cnn", "naive", [floored(0, 1.5)], agg=200.0)
    cell(root, "p", "cnn", "naive", [floored(0, 2.5), floored(1, 2.5)], agg=240.0)
    data = load_sweeps([root])
    (row,) = [r for r in gain_rows(read_runs(sorted(root.iterdir()))) if r.degree == 2]
    assert row.slowdown is not None and row.slowdown.value == pytest.approx(2.5 / 1.5)
    report = gain_table(data.cells, data.jobs).set_index("degree")
    assert report.loc[2, "slowdown_mean"] == pytest.approx(2.5 / 1.5) == report.loc[2, "slowdown_max"]
    assert report.loc[1, "slowdown_mean"] == pytest.approx(1.0)
    from analysis.tables import epoch2_table

    per_job = epoch2_table(data.cells, data.jobs).set_index(["degree", "job_index"])
    assert per_job.loc[(2, 1), "epoch2_s"] == pytest.approx(2.5) and per_job.loc[(1, 0), "epoch2_s"] == pytest.approx(
        1.5
    )
    assert per_job.loc[(2, 0), "slowdown"] == pytest.approx(2.5 / 1.5)


def test_a_slowdown_compares_seconds_per_sample_whatever_each_epochs_length(tmp_path: Path) -> None:
    """Two solos of one configuration key at one rate, one of 300 samples an epoch and one of 3,000 (a
    mix's solo runs its job's own), and a pair at half that rate: each of the pair is 2x slower per
    sample (its epoch-2 time against an epoch of its own samples)."""
    root = tmp_path / "sweep"
    cell(root, "a", "cnn", "naive", [job(0, "cnn", 1.5)], agg=200.0)  # 300 samples in 1.5 s
    cell(root, "b", "cnn", "naive", [job(0, "cnn", 15.0, samples=3000)], agg=200.0)  # 3,000 in 15 s
    cell(root, "p", "cnn", "naive", [job(0, "cnn", 3.0), job(1, "cnn", 3.0)], agg=200.0)  # 300 in 3 s each
    data = load_sweeps([root])
    (row,) = [r for r in gain_rows(read_runs(sorted(root.iterdir()))) if r.degree == 2]
    assert row.slowdown is not None and row.slowdown.value == pytest.approx(2.0)
    from analysis.tables import epoch2_table

    per_job = epoch2_table(data.cells, data.jobs).set_index(["degree", "job_index"])
    assert per_job.loc[(2, 0), "slowdown"] == pytest.approx(2.0) and per_job.loc[(2, 0), "epoch2_s"] == pytest.approx(
        3.0
    )


def test_an_epochs_time_is_its_whole_batches_at_its_rate_and_a_baselines_too(tmp_path: Path) -> None:
    from analysis.tables import baseline_table
    from raycolloc.results.ratios import epoch_time, sample_time

    row = {"epoch_samples": 100, "batch_size": 32, "epoch2_samples_per_s": 48.0, "epoch2_s": 5.0}
    assert epoch_time(row) == pytest.approx(96 / 48.0)  # three batches of 32, as JobSpec.steps_per_epoch
    assert sample_time(row) == pytest.approx(1 / 48.0)
    assert epoch_time({"epoch2_s": 5.0, "epoch_samples": None}) == 5.0 and sample_time({"epoch2_s": 5.0}) is None

    def floored(index: int, own_s: float) -> dict[str, Any]:
        return {**job(index, "cnn", own_s), "epoch2_s": 5.0, "measured_s": 5.0}  # at the 5 s floor

    now, then = tmp_path / "now", tmp_path / "then"
    # the same power over the same 5 s window: energy_j alike, but half the samples, so twice the energy per sample
    cell(now, "s", "cnn", "naive", [floored(0, 3.0)], agg=100.0, energy_j=500.0, energy_per_sample_j=1.0)
    cell(then, "s", "cnn", "naive", [floored(0, 1.5)], agg=200.0, energy_j=500.0, energy_per_sample_j=0.5)
    a, b = load_sweeps([now]), load_sweeps([then])
    (compared,) = baseline_table(a.cells, a.jobs, b.cells, b.jobs).to_dict("records")
    assert compared["agg_ratio"] == pytest.approx(0.5) and compared["epoch2_ratio"] == pytest.approx(2.0)
    assert compared["energy_ratio"] == pytest.approx(2.0)
