"""The sweep's progress says about how long is left (issue 46: "a progress bar with an estimate of the
time left from the plan"): the plan's seconds until a cell is done, then the sweep's own pace."""

from __future__ import annotations

import pytest

from raycolloc.driver.cost import run_seconds
from raycolloc.driver.progress import ProgressView
from raycolloc.spec import CellProgress, JobProgress

from .conftest import load


class _Board:
    def __init__(self, snap: dict[str, CellProgress]) -> None:
        self.snap = snap

    def snapshot(self) -> dict[str, CellProgress]:
        return self.snap


# A floor on the measured epoch: the plan counts it (set-up + (epochs - 1) x floor per run); three runs of
# the solo, each over its whole floor (the defaults are four, the repeats over 0.3 of it).
WORDS = ["min_epoch_s=4", "measure.min_solo_repeats=3", "measure.repeat_floor=1"]


def _cells() -> list:
    return [load([f"degree={d}", *WORDS]) for d in (1, 2, 3)]


def _half(spec: object) -> CellProgress:
    jobs = {0: JobProgress(epoch=2, step=0, steps=10, epochs=2)}  # one epoch of two trained: half
    return CellProgress(state="measuring", jobs=jobs)


def test_before_any_cell_is_done_the_plan_says_what_is_left() -> None:
    cells = _cells()
    view = ProgressView(cells, _Board({}), lanes=2)  # type: ignore[arg-type]
    plan = [run_seconds(c.config)[0] for c in cells]
    assert plan[0] == pytest.approx(3.5 + 4.0)  # the plan line's own count of a run
    repeat = 3.5 + 4.0  # a solo's repeat, at the least: its whole floor (measure.repeat_floor=1)
    assert view.pending == 2  # the solo baseline's two repeats, not cells yet (the first pass's own solo is one)
    assert view.left_s({}) == pytest.approx((sum(plan) + 2 * repeat) / 2)
    running = {cells[0].cell_id: _half(cells[0])}
    assert view.left_s(running) == pytest.approx((plan[0] / 2 + plan[1] + plan[2] + 2 * repeat) / 2)


def test_once_cells_are_done_the_sweeps_own_pace_says_it() -> None:
    cells = _cells()
    view = ProgressView(cells, _Board({}), lanes=1)  # type: ignore[arg-type]
    snap = {cells[0].cell_id: CellProgress(state="done", status="ok"), cells[1].cell_id: _half(cells[1])}
    # 30 s for one and a half cells (20 s a cell): one and a half cells and two planned repeats take 70 s
    assert view.left_s(snap, now=view.started + 30.0) == pytest.approx(70.0)
    view.add([load(["degree=1", *WORDS, "seed=1"])])  # a planned solo repeat became a cell: the same
    assert view.pending == 1
    assert view.left_s(snap, now=view.started + 30.0) == pytest.approx(70.0)
    view.add([load(["degree=7", *WORDS])])  # a re-run for an interval, not planned: more is left
    assert view.pending == 1
    assert view.left_s(snap, now=view.started + 30.0) == pytest.approx(90.0)
    view.add([], reused=[load(["degree=1", *WORDS, "seed=2"])])  # a solo repeat found on disk
    assert view.pending == 0
    assert view.left_s(snap, now=view.started + 30.0) == pytest.approx(70.0)


def test_a_log_line_says_it(capsys: pytest.CaptureFixture[str]) -> None:
    cells = _cells()
    board = _Board({cells[0].cell_id: _half(cells[0])})
    view = ProgressView(cells, board, lanes=1)  # type: ignore[arg-type]
    view.refresh()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3
    assert err[0].startswith(f"[sweep] cell {cells[0].label}: measuring  (done 0/3, running 1")
    # 7.5 / 2 + 7.5 + 7.5 + 2 x 7.5 = 33.75 s, the plan's floor on simulated GPUs (epochs' own time unknown)
    assert all(line.endswith("at least 34 s left)") for line in err), err
    board.snap = {c.cell_id: CellProgress(state="done", status="ok") for c in cells}
    view.refresh()  # the solo's repeats are still to come
    assert (
        capsys.readouterr().err.splitlines()[-1].endswith("(done 3/3, running 0, waiting for a GPU 0; about 0 s left)")
    )
    view.add([], reused=[load(["degree=1", *WORDS, f"seed={s}"]) for s in (1, 2)])  # found on disk
    board.snap = {**board.snap, cells[0].cell_id: CellProgress(state="done", status="failed")}  # a new line
    view.refresh()
    assert capsys.readouterr().err.splitlines()[-1].endswith("(done 3/3, running 0, waiting for a GPU 0; all done)")


def test_a_solos_short_repeats_count_as_the_shorter_runs_they_are() -> None:
    """The defaults: four runs of each solo, its repeats over 0.3 of the floor. Both estimates count each
    planned repeat at the plan's seconds of one (3.5 s set-up + 0.3 x 4 s), not as a whole cell."""
    cells = [load([f"degree={d}", "min_epoch_s=4"]) for d in (1, 2, 3)]
    view = ProgressView(cells, _Board({}), lanes=1)  # type: ignore[arg-type]
    repeat = 3.5 + 0.3 * 4.0
    assert view.pending == 3 and view.pending_s == pytest.approx(repeat)
    assert view.left_s({}) == pytest.approx(3 * 7.5 + 3 * repeat)
    snap = {cells[0].cell_id: CellProgress(state="done", status="ok"), cells[1].cell_id: _half(cells[1])}
    # 30 s for 1.5 cells of 7.5 planned seconds (11.25): the sweep runs 30 / 11.25 times the plan, and
    # half a cell and a cell (11.25 s) and three short repeats (14.1 s) are left of it.
    assert view.left_s(snap, now=view.started + 30.0) == pytest.approx(30 / 11.25 * (11.25 + 3 * repeat))
