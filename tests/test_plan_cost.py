"""A sweep says before its first cell what it plans: cells, runs and GPU time from the protocol's own
lengths (issue 46, item 11), once per sweep, whatever the number of its steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from raycolloc.driver import engine
from raycolloc.driver.cell_specs import sweep_cells
from raycolloc.driver.cost import SETUP_S, plan_cost, plan_gpus, plan_mig
from raycolloc.driver.plan import PlannedCell, Step, SweepPlan, run

from .conftest import load


def _matrix(*words: str) -> list:
    return sweep_cells([load([f"degree={d}", f"mode={m}", *words]) for d in (1, 2, 3, 7) for m in ("naive", "mps")])


def test_the_quick_matrixs_planned_gpu_time_is_its_runs_set_up_and_floored_epochs_within_the_budget() -> None:
    cells = _matrix("min_epoch_s=5")  # the floor auto gives on a real GPU
    cost = plan_cost(cells, gpus=1)
    run_s = SETUP_S + 1 * 5.0  # epochs=2: one measured epoch at its floor; the warm-up's own time unknown
    budget = cells[0].config.measure.budget
    first_pass = 8 * run_s
    # Two solos, four runs each: never refused (every gain divides by them); their repeats measure 0.3 of
    # the floor (measure.repeat_floor), and their six added runs (6 x 5 s) are more than the budget (0.3 x
    # the first pass, 20.4 s): no re-run for an interval.
    assert budget == 0.3 and cells[0].config.measure.repeat_floor == 0.3
    repeat_s = SETUP_S + 0.3 * 5.0
    assert (cost.cells, cost.runs, cost.timed) == (8, 14, False)
    assert cost.gpu_s == pytest.approx(first_pass + 6 * repeat_s) == cost.max_gpu_s and cost.wall_s == cost.gpu_s
    assert cost.line() == (
        "plan: 8 cells (14 runs with the solo baselines' repeats) on 1 GPU, at least 1.6 min of GPU time "
        "(14 runs x (3.5 s set-up + measured epochs at their 5 s floor, solo repeats' at 0.3 of it); epochs' own "
        "time not counted), at least 1.6 min wall"
    )
    whole = plan_cost(_matrix("min_epoch_s=5", "measure.repeat_floor=1", "measure.min_solo_repeats=3"), gpus=1)
    assert whole.gpu_s == pytest.approx(first_pass + 4 * run_s) == whole.max_gpu_s
    assert whole.line() == (
        "plan: 8 cells (12 runs with the solo baselines' repeats) on 1 GPU, at least 1.7 min of GPU time "
        "(12 runs x (3.5 s set-up + measured epochs at their 5 s floor); epochs' own time not counted), "
        "at least 1.7 min wall"
    )
    generous = plan_cost(_matrix("min_epoch_s=5", "measure.budget=1.0"), gpus=2)
    assert generous.runs == 14 and generous.gpu_s == pytest.approx(first_pass + 6 * repeat_s)  # every solo run
    assert generous.max_gpu_s == pytest.approx(2 * first_pass)  # and re-runs for intervals up to the budget
    assert generous.wall_s == pytest.approx(generous.gpu_s / 2)


def test_fixed_repeats_and_time_budgeted_epochs_are_planned_exactly_and_spread_over_the_gpus() -> None:
    cells = _matrix("repeats=2", "epoch_time_s=3", "epochs=3")
    cost = plan_cost(cells, gpus=4)
    assert (cost.cells, cost.runs, cost.timed) == (16, 16, True)
    assert cost.gpu_s == pytest.approx(16 * (SETUP_S + 3 * 3.0)) == cost.max_gpu_s
    assert cost.wall_s == pytest.approx(cost.gpu_s / 4)
    assert cost.line() == (
        "plan: 16 cells on 4 GPUs, about 3.3 min of GPU time (16 runs x (3.5 s set-up + epochs at their 3 s budget)), "
        "about 50 s wall"
    )


def test_the_simulated_clusters_gpus_are_its_declared_ones() -> None:
    assert plan_gpus([load(["cluster.num_gpus=3"])]) == 3
    assert plan_gpus([load(["cluster.num_gpus=3", "cluster.max_concurrent_cells=2"])]) == 2


def test_the_plan_line_is_printed_once_before_the_first_cell_of_a_sweep_of_several_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def ran(cells: list, **_: object) -> list:
        print(f"ran {len(cells)} cell(s)", flush=True)
        return []

    monkeypatch.setattr(engine, "run_cells", ran)  # what runs a step is the engine's: here, a line
    cells = [PlannedCell(spec, tmp_path / spec.cell_id) for spec in _matrix()[:4]]
    steps = (Step(tuple(cells[:2]), title="group 1"), Step(tuple(cells[2:]), title="group 2"))
    run(SweepPlan(run_dir=tmp_path, out_dir=str(tmp_path / "out"), steps=steps, closing=False))
    lines = capsys.readouterr().out.splitlines()
    planned = [i for i, line in enumerate(lines) if line.startswith("plan: ")]
    assert len(planned) == 1 and lines[planned[0]].startswith("plan: 4 cells (10 runs")
    assert planned[0] < lines.index("group 1") < lines.index("ran 2 cell(s)")


def test_mig_cells_a_machine_with_mig_off_cannot_run_are_counted_skipped_not_as_runs() -> None:
    # One H200 with MIG disabled, 2026-12-04: the quick matrix's plan counted its four MIG cells (and the
    # MIG solo's repeats) as GPU time, though the sweep skipped them at once.
    cells = sweep_cells(
        [load([f"degree={d}", f"mode={m}", "min_epoch_s=5"]) for d in (1, 2, 3, 7) for m in ("naive", "mps", "mig")]
    )
    unknown, off = plan_cost(cells, gpus=1), plan_cost(cells, gpus=1, mig=False)
    assert (unknown.cells, unknown.runs, unknown.skipped) == (12, 21, 0)
    assert (off.cells, off.runs, off.skipped) == (12, 14, 4)
    assert off.gpu_s == pytest.approx(8 * (SETUP_S + 5.0) + 6 * (SETUP_S + 1.5)) and off.wall_s == off.gpu_s
    assert off.line().startswith(
        "plan: 12 cells (4 MIG cells skipped: MIG mode is off on this machine's GPUs; 14 runs with the solo "
        "baselines' repeats) on 1 GPU, at least 1.6 min of GPU time (14 runs x "
    )
    # docs/results.md shows this line as the sweep prints it
    shown = (Path(__file__).parents[1] / "docs" / "results.md").read_text().splitlines()
    assert f"    {off.line()}" in shown
    assert plan_cost(cells, gpus=1, mig=True) == unknown
    # Known only for this machine's real GPUs: simulated ones (their administrator may switch MIG per
    # cell), a cluster at an address, or a plan without a MIG cell say nothing.
    assert plan_mig(cells) is None  # load() composes cluster=local: simulated GPUs
    assert plan_mig([c for c in cells if c.mode != "mig"]) is None


@pytest.mark.gpu
def test_on_a_gpu_with_mig_disabled_the_plan_knows_it() -> None:
    from raycolloc.node.gpu.names import local_mig_enabled, nvml_mig_enabled

    modes = nvml_mig_enabled()
    assert modes, "NVML sees no GPU"
    cluster = load(["cluster=gpu"]).config.cluster
    assert local_mig_enabled(cluster) is any(modes)
