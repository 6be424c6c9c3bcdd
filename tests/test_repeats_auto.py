"""``repeats=auto`` (issue 30): solo baselines spread over the sweep, re-runs while a configuration's
interval is wider than ``measure.target_ci``, up to ``measure.max_repeats``; the policy on synthetic
rows, then one real sweep on the simulated backend (and its resume)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from analysis.load import load_sweeps
from raycolloc.config import ConfigError
from raycolloc.driver.cell_specs import sweep_cells
from raycolloc.driver.repeats import Observation, RepeatPolicy, interval, needs_rerun, observe
from raycolloc.driver.warmup import learn

from .conftest import ROOT, load, run_cli


def _row(rate: float, low: float | None = None, high: float | None = None, status: str = "ok") -> SimpleNamespace:
    return SimpleNamespace(status=status, agg_samples_per_s=rate, agg_rate_low=low, agg_rate_high=high)


def _runs(*rates: float) -> list[Observation]:
    return [Observation("ok", r) for r in rates]


def test_a_configuration_inside_the_target_gets_no_rerun_and_a_wider_one_does_up_to_the_cap() -> None:
    cfg = load(["degree=2"]).config  # target ±3%, at most 5 runs
    assert not needs_rerun(_runs(100.0, 100.2), cfg, solo=False)  # t-interval ±1.3%
    assert needs_rerun(_runs(100.0, 100.5), cfg, solo=False)  # ±3.2%
    assert needs_rerun(_runs(100, 130, 80, 120), cfg, solo=False)
    assert not needs_rerun(_runs(100, 130, 80, 120, 90), cfg, solo=False)  # the cap
    # One run: its within-run interval decides; none known, only a solo baseline runs again.
    assert not needs_rerun([Observation("ok", 100.0, 98.0, 102.0)], cfg, solo=False)
    assert needs_rerun([Observation("ok", 100.0, 90.0, 110.0)], cfg, solo=False)
    assert not needs_rerun(_runs(100.0), cfg, solo=False) and needs_rerun(_runs(100.0), cfg, solo=True)
    assert not needs_rerun([Observation("error", None)], cfg, solo=True)  # failures are not repeated
    iv = interval(_runs(100.0, 100.2))
    assert iv is not None and iv.method == "repeats" and iv.rel_half_width == pytest.approx(0.0127, abs=1e-3)


def test_solo_baselines_run_at_start_middle_and_end_and_wide_cells_are_rerun_interleaved() -> None:
    cells = [load([f"degree={d}", "measure.min_solo_repeats=3"]) for d in (1, 2, 3, 7)]
    solo, x2, x3, x7 = cells
    policy = RepeatPolicy(cells)
    assert policy.active and policy.first_pass == 4
    assert policy.recorded(solo, _row(100.0)) == []  # 1 of 4 done: nothing due yet
    (mid,) = policy.recorded(x2, _row(180.0, 178.0, 182.0))  # half done: the solo's 2nd run, next in line
    assert (mid.base, mid.repeat, mid.front, mid.reason) == (solo, 1, True, "solo")
    (wide,) = policy.recorded(x3, _row(250.0, 225.0, 275.0))  # ±10%: again, at the queue's end
    assert (wide.base, wide.repeat, wide.front, wide.reason) == (x3, 1, False, "ci")
    (end,) = policy.recorded(x7, _row(300.0, 299.0, 301.0))  # first pass over: the solo's last run, at the end
    assert (end.base, end.repeat, end.front, end.reason) == (solo, 2, False, "solo")
    assert (
        policy.recorded(dataclasses.replace(solo, config=dataclasses.replace(solo.config, repeat=1)), _row(101)) == []
    )
    solo_r2 = load(["degree=1", "repeat=2", "measure.min_solo_repeats=3"])
    assert policy.recorded(solo_r2, _row(100.5)) == []  # 3 runs within ±3%: done
    x3_runs = [load(["degree=3", f"repeat={k}", "measure.min_solo_repeats=3"]) for k in range(1, 5)]
    # x3 keeps moving: re-run one at a time until the cap of 5 runs, then left wider.
    for k, rate in zip(range(1, 5), (300.0, 220.0, 280.0, 240.0), strict=True):
        more = policy.recorded(x3_runs[k - 1], _row(rate))
        assert [(a.repeat, a.reason) for a in more] == ([(k + 1, "ci")] if k < 4 else [])
    assert (
        policy.summary()
        == "repeats auto: 2 solo repeats, 4 re-runs for CI > 3%, 1 configuration(s) still wider (cap 5)"
    )


def _timed(rate: float, low: float, high: float, gpu_s: float) -> SimpleNamespace:
    return SimpleNamespace(
        status="ok", agg_samples_per_s=rate, agg_rate_low=low, agg_rate_high=high, started_at=0.0, finished_at=gpu_s
    )


def test_the_budget_caps_the_added_runs_gpu_time_at_a_share_of_the_first_pass() -> None:
    # Every interval ±10% (a noisy host): without a budget every configuration would go to the cap.
    cells = [load([f"degree={d}", "measure.budget=0.5", "measure.min_solo_repeats=3"]) for d in (1, 2, 3, 7)]
    solo = cells[0]
    policy = RepeatPolicy(cells)
    times = (5.0, 8.0, 10.0, 17.0)  # first pass: 40 s; budget 0.5: 20 s of added runs
    added = []
    for cell, gpu_s in zip(cells, times, strict=True):
        added += policy.recorded(cell, _timed(100.0, 90.0, 110.0, gpu_s))
    # The solo baseline's two runs come first (every gain divides by it): the re-runs for an interval
    # only get what its runs still to come leave, and then what the budget leaves.
    assert [(a.base.degree, a.reason) for a in added] == [(1, "solo"), (1, "solo")]
    assert policy.refused == 3
    assert "3 run(s) not added: the budget (measure.budget=0.5) was spent" in policy.summary()
    # Granted runs that took less than estimated (1 s, not 5) give the difference back: the solo,
    # its three runs far apart, gets a re-run for its interval.
    for k, rate in ((1, 130.0), (2, 70.0)):
        run = dataclasses.replace(solo, config=dataclasses.replace(solo.config, repeat=k))
        more = policy.recorded(run, _timed(rate, rate * 0.9, rate * 1.1, 1.0))
    assert [(a.base.degree, a.repeat, a.reason) for a in more] == [(1, 3, "ci")]


def test_solo_baselines_are_never_refused_and_re_runs_for_intervals_get_what_they_leave() -> None:
    # Issue 46: at measure.budget=0.3 the budget held each solo of the quick matrix to two runs on an H200,
    # and their t-intervals were ±81% and ±199% (2026-12-04). Solos cheap (5 s), the rest dear (40 s).
    naive1, mps1, naive2, mps2 = (
        load([f"degree={d}", f"mode={m}", "measure.min_solo_repeats=3"]) for d in (1, 2) for m in ("naive", "mps")
    )
    policy = RepeatPolicy([naive1, mps1, naive2, mps2])
    assert naive1.config.measure.budget == 0.3  # the default since issue 46
    wide = (100.0, 80.0, 120.0)  # every interval ±20%
    added = policy.recorded(naive1, _timed(*wide, 5.0))
    added += policy.recorded(mps1, _timed(*wide, 5.0))  # half the first pass: both solos' second runs due
    # 0.3 x 10 s (the first pass so far) holds neither: both are run all the same.
    assert [(a.base.mode, a.repeat, a.reason) for a in added] == [("naive", 1, "solo"), ("mps", 1, "solo")]
    # Naive's runs spread ±30%: not re-run for its interval before its three runs are in.
    assert policy.recorded(_again(naive1, 1), _timed(130.0, 104.0, 156.0, 5.0)) == []
    added = policy.recorded(naive2, _timed(*wide, 40.0))
    assert added == []
    added = policy.recorded(mps2, _timed(*wide, 40.0))  # first pass over: both solos' third runs, at the end
    assert [(a.base.mode, a.repeat, a.front) for a in added] == [("naive", 2, False), ("mps", 2, False)]
    assert policy.added == {"solo": 4, "ci": 0}
    # Not added: the x2 cells' re-runs (0.3 x 90 s = 27 s, of which the solos' four runs take 20 s; a
    # second run for an interval needs room for a third: 80 s).
    assert policy.refused == 2


def test_a_re_run_for_an_interval_leaves_room_for_solos_whose_first_run_is_still_to_come() -> None:
    # Results arrive in any order (several GPUs, a resume): x2's came first, and its re-runs for its
    # interval took the whole budget; the solo's runs came on top (20 s added against 10 s).
    solo, x2 = (load([f"degree={d}", "measure.budget=1.0", "measure.min_solo_repeats=3"]) for d in (1, 2))
    policy = RepeatPolicy([solo, x2])
    assert policy.recorded(x2, _timed(100.0, 80.0, 120.0, 5.0)) == []  # the solo's two runs are owed
    added = policy.recorded(solo, _timed(100.0, 80.0, 120.0, 5.0))
    assert [(a.base.degree, a.reason) for a in added] == [(1, "solo"), (1, "solo")] and policy.refused == 1


def _quick_matrix(saved_s: float, budget: float = 0.3) -> tuple[RepeatPolicy, list]:
    """The quick matrix as one H200 ran it, 2026-12-04 (jobs/check_cost.sh): four MIG cells skipped at
    once, eight cells of ~10-12 s (a degree-1 cell 3.4 s of warm-up, 5 s measured, the rest set-up),
    every interval ±6%; ``saved_s``: what a solo's repeat saves by its learned warm-up."""
    cells = {
        (m, d): load([f"degree={d}", f"mode={m}", f"measure.budget={budget}"])
        for d in (1, 2, 3, 7)
        for m in ("naive", "mps", "mig")
    }
    policy = RepeatPolicy(list(cells.values()), saving=lambda base: saved_s if base.degree == 1 else 0.0)
    skipped = SimpleNamespace(status="skipped", agg_samples_per_s=None, started_at=0.0, finished_at=0.0)
    added = [a for d in (1, 2, 3, 7) for a in policy.recorded(cells[("mig", d)], skipped)]
    first = {1: 10.3, 2: 10.5, 3: 10.3, 7: 12.5}
    for d in (1, 2, 3, 7):
        for m in ("naive", "mps"):
            added += policy.recorded(cells[(m, d)], _timed(100.0, 94.0, 106.0, first[d]))
    return policy, added


def test_the_quick_matrix_gives_every_solo_four_runs_and_their_short_repeats_leave_room_for_intervals() -> None:
    # Both solos' second, third and fourth runs, whatever the budget (0.3 x 87 s = 26 s < 6 x 5.3 s): no
    # re-run for an interval comes on top.
    policy, added = _quick_matrix(saved_s=5.0)
    assert sorted((a.base.mode, a.repeat, a.reason) for a in added) == [
        ("mps", 1, "solo"),
        ("mps", 2, "solo"),
        ("mps", 3, "solo"),
        ("naive", 1, "solo"),
        ("naive", 2, "solo"),
        ("naive", 3, "solo"),
    ]
    # At measure.budget=0.65 (~57 s): the solos' short repeats (6 x 5.3 s: 0.3 of the floor and a learned
    # warm-up) leave room for one configuration's second and third runs for its interval (~21 s); with
    # repeats that save nothing (6 x 10.3 s), none.
    _, added = _quick_matrix(saved_s=5.0, budget=0.65)
    _, dear_added = _quick_matrix(saved_s=0.0, budget=0.65)
    assert [a.reason for a in added].count("ci") == 1 and [a.reason for a in dear_added].count("ci") == 0


def _again(cell, repeat: int):  # noqa: ANN001, ANN202 - a CellSpec: run ``repeat`` of its configuration
    return dataclasses.replace(cell, config=dataclasses.replace(cell.config, repeat=repeat))


@pytest.mark.parametrize("budget", [0.75, 1.0])
def test_a_second_run_for_an_interval_is_granted_only_with_room_for_a_third_which_is_kept(budget: float) -> None:
    # No solo repeats of their own; every interval ±10%; a first pass of 4 x 10 s.
    words = ["measure.min_solo_repeats=1", "measure.max_repeats=3", f"measure.budget={budget}"]
    cells = [load([f"degree={d}", *words]) for d in (1, 2, 3, 7)]
    policy = RepeatPolicy(cells)
    added = sum((policy.recorded(c, _timed(100.0, 90.0, 110.0, 10.0)) for c in cells), [])
    # Each second run is granted with room for its third: 30 s hold one configuration's two more
    # runs, 40 s two configurations'. Without the rule 40 s would leave all four at two runs, each
    # with a t-interval wider than its first run's own.
    seconds = [1] if budget == 0.75 else [1, 2]
    assert [(a.base.degree, a.repeat) for a in added] == [(d, 1) for d in seconds]
    assert policy.refused == 4 - len(seconds)
    # Each second run recorded, still wide: its third is there, kept for it though others asked first.
    for degree in seconds:
        (third,) = policy.recorded(_again(cells[[1, 2, 3, 7].index(degree)], 1), _timed(130.0, 117.0, 143.0, 10.0))
        assert (third.base.degree, third.repeat, third.reason) == (degree, 2, "ci")
    # A second run that lands inside the target releases the room it held.
    pair = [load([f"degree={d}", *words[:2], "measure.budget=2"]) for d in (1, 2)]
    calm = RepeatPolicy(pair)
    assert [(a.base.degree, a.repeat) for a in calm.recorded(pair[0], _timed(100.0, 90.0, 110.0, 10.0))] == [(1, 1)]
    assert calm.recorded(_again(pair[0], 1), _timed(100.1, 90.0, 110.0, 10.0)) == []
    assert not calm.groups[next(iter(calm.groups))].third_owed


def test_the_kept_third_run_is_granted_even_when_the_second_took_longer_than_estimated() -> None:
    words = ["measure.min_solo_repeats=1", "measure.max_repeats=3", "measure.budget=1.0"]
    cells = [load([f"degree={d}", *words]) for d in (1, 2, 3, 7)]
    policy = RepeatPolicy(cells)
    added = sum((policy.recorded(c, _timed(100.0, 90.0, 110.0, 10.0)) for c in cells), [])
    assert [(a.base.degree, a.repeat) for a in added] == [(1, 1), (2, 1)]  # 40 s: two seconds, two thirds
    # The solo's second run took 15 s, not 10: 35 s spent or held, 5 s left, less than a run; its
    # third is still granted (it was kept for it), and x2's after it.
    (third,) = policy.recorded(_again(cells[0], 1), _timed(130.0, 117.0, 143.0, 15.0))
    assert (third.base.degree, third.repeat) == (1, 2)
    (x2_third,) = policy.recorded(_again(cells[1], 1), _timed(130.0, 117.0, 143.0, 10.0))
    assert (x2_third.base.degree, x2_third.repeat) == (2, 2)


def test_a_run_found_on_disk_is_taken_whatever_the_budget() -> None:
    """A resumed sweep finds the runs its first invocation added, though its estimates differ."""
    cells = [load([f"degree={d}", "measure.budget=0", "measure.min_solo_repeats=1"]) for d in (1, 2)]
    spent = RepeatPolicy(cells)
    assert sum((spent.recorded(c, _timed(100.0, 90.0, 110.0, 5.0)) for c in cells), []) == []
    found = RepeatPolicy(cells, on_disk=lambda base, repeat: base.degree == 1 and repeat == 1)
    added = sum((found.recorded(c, _timed(100.0, 90.0, 110.0, 5.0)) for c in cells), [])
    assert [(a.base.degree, a.repeat) for a in added] == [(1, 1)]  # on disk: taken; repeat 2 is not


def test_a_runs_gpu_time_leaves_out_its_wait_for_the_lease() -> None:
    row = SimpleNamespace(status="ok", agg_samples_per_s=1.0, started_at=10.0, finished_at=20.0, lease_wait_s=4.0)
    assert observe(row).gpu_s == 6.0


def test_fixed_repeats_are_exact_and_not_adaptive() -> None:
    specs = [load(["degree=1", "repeats=3"]), load(["degree=2", "repeats=3"])]
    cells = sweep_cells(specs)
    assert sorted(c.config.repeat for c in cells) == [0, 0, 1, 1, 2, 2]
    assert not RepeatPolicy(cells).active  # no run added to repeats=N
    auto = sweep_cells([load(["degree=1"]), load(["degree=2"])])
    assert [c.config.repeat for c in auto] == [0, 0] and RepeatPolicy(auto).active


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("repeats=0", r"repeats=0 is not allowed; it must be an integer 1..1000 .* or auto"),
        ("repeats=sometimes", r"repeats='sometimes' is not allowed"),
        ("measure.target_ci=0", r"measure.target_ci=0.0 is not allowed; it must be a number between 0 and 1"),
        ("measure.budget=-1", "measure.budget=-1.0 is not allowed; it must be a number 0..1000"),
        ("measure.max_repeats=0", r"measure.max_repeats=0 is not allowed"),
        ("measure.min_solo_repeats=6", r"measure.min_solo_repeats=6 is not allowed; .*measure.max_repeats \(5\)"),
        # a cap below the solos' default four runs says which key to lower
        ("measure.max_repeats=3", r"measure.min_solo_repeats=4 is not allowed; .*measure.min_solo_repeats=3, or raise"),
        ("measure.statistic=best", r"measure.statistic='best' is not allowed; choose one of: mean, median, fastest"),
        ("measure.warmup=short", r"measure.warmup='short' is not allowed; choose one of: learned, epoch"),
    ],
)
def test_bad_repeats_and_measure_values_are_refused(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load([override])


def test_bad_repeats_exit_2_before_ray(tmp_path: Path) -> None:
    proc = run_cli(
        ["-m", "degree=1,2", "workload=tiny_cnn", "cluster=local", "repeats=-1", f"out_dir={tmp_path}"],
        cwd=ROOT,
        timeout=120,
        own_ray=True,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "repeats=-1 is not allowed" in proc.stderr + proc.stdout


def test_a_dry_run_says_repeats_are_adaptive(tmp_path: Path) -> None:
    proc = run_cli(
        ["-m", "degree=1,2", "workload=tiny_cnn", "cluster=local", "+dry_run=true", f"out_dir={tmp_path}"],
        cwd=ROOT,
        timeout=120,
        own_ray=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "repeats=auto: adaptive" in proc.stdout
    assert "run 4 times, spread over the sweep (the repeats over 0.3 of the floor)" in proc.stdout


@pytest.mark.slow  # one small sweep on the simulated backend, then its resume
def test_a_sim_sweep_repeats_its_solo_baseline_and_resume_counts_the_repeats(tmp_path: Path) -> None:
    out = tmp_path / "res"
    # A target no run meets, and no budget: no configuration is re-run for its interval, but the solo
    # baseline gets its 4 spread runs all the same (never refused: every gain divides by it).
    args = [
        "-m",
        "degree=1,2",
        "mode=naive",
        "workload=tiny_cnn",
        "cluster=local",
        "epoch_samples=1024",  # 32 steps: ten warm-up windows for the repeats to learn from
        "measure.target_ci=0.0001",
        "measure.max_repeats=4",
        "measure.budget=0",  # this test is of the spread and the resume: no run may depend on timings
        "cluster.max_concurrent_cells=1",  # one lane: the order is the queue's
        f"out_dir={out}",
    ]
    proc = run_cli(args, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = load_sweeps([out], all_results=True).table("cells").sort_values("started_at")
    by_degree = cells.groupby("degree")["repeat"].apply(sorted).to_dict()
    assert by_degree == {1: [0, 1, 2, 3], 2: [0]}, cells[["label", "repeat"]].to_string()
    order = re.findall(r"^cell (tiny_cnn-naive-x\d(?:-r\d)?)-", proc.stdout, flags=re.M)
    # The solo baseline first; its 2nd run once a third of the first pass is done, its 3rd at two thirds
    # (both at the queue's front); its last one at the end.
    order_ = ("1", "1-r1", "2", "1-r2", "1-r3")
    assert order == [f"tiny_cnn-naive-x{s}" for s in order_], (order, cells.to_string())
    line = (
        "repeats auto: 3 solo repeats, 0 re-runs for CI > 0.01%, 2 configuration(s) still wider (cap 4), "
        "1 run(s) not added: the budget (measure.budget=0.0) was spent"  # x2's: the solo is at the cap
    )
    assert line in proc.stdout, proc.stdout[-3000:]
    assert (out.parent / "res").exists() and len(list(out.rglob("cells.parquet"))) == 5
    # Each repeat warmed up as long as its first run's warm-up windows taught (measure.warmup=learned:
    # 10-19 of 32 steps in two of three such sweeps here; a whole epoch where the CPU's noise kept the
    # first run's warm-up from settling early), and measured what its first run measured.
    epochs = load_sweeps([out], all_results=True).table("epochs").merge(cells[["cell_id", "degree", "repeat"]])
    solo = epochs[epochs["degree"] == 1]
    first = solo[solo["repeat"] == 0]
    learned = learn(first.to_dict("records")).steps.get(0, 32)
    warm = solo[solo["epoch"] == 1].set_index("repeat")["steps"].to_dict()
    assert warm == {0: 32, 1: learned, 2: learned, 3: learned}, solo[["repeat", "epoch", "steps"]].to_string()
    assert set(solo[solo["epoch"] == 2]["steps"]) == {32}
    again = run_cli(args, cwd=ROOT)  # resume: every run, the added ones too, found on disk
    assert again.returncode == 0, again.stderr[-3000:]
    assert re.search(r"repeats auto: 3 solo repeats, 0 re-runs .* \(3 of them found on disk\)", again.stdout)
    assert "result exists" in again.stdout and len(list(out.rglob("cells.parquet"))) == 5
