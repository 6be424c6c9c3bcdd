"""A cell's rows from what it recorded: the measured window's energy and power, the fixed cost."""

from __future__ import annotations

import pytest

from raycolloc.driver.tabulate import window_stats
from raycolloc.results.rows import TelemetryRow


def _gpu(ts: float, energy_mj: float, power_w: float = 999.0) -> TelemetryRow:
    return TelemetryRow(
        cell_id="c",
        gpu_uuid="GPU-x",
        mig_uuid=None,
        gi_id=None,
        scope="gpu",
        ts=ts,
        source="sim-gpm",
        energy_mj=energy_mj,
        power_w=power_w,
        sm_active=50.0,
    )


def test_energy_is_the_counter_interpolated_at_the_window_ends_and_power_agrees_with_it() -> None:
    # 200 W for 10 s: the counter grows by 200 J a second; samples every second.
    rows = [_gpu(float(t), 200_000.0 * t) for t in range(11)]
    stats = window_stats(rows, 2.5, 6.25)
    assert stats["energy_j"] == pytest.approx(200.0 * 3.75)
    assert stats["power_mean_w"] == pytest.approx(200.0)  # energy / window, not the sampled power_w
    assert stats["sm_active_mean"] == pytest.approx(50.0)


def test_a_window_shorter_than_the_sampling_interval_still_has_its_energy() -> None:
    rows = [_gpu(0.0, 0.0), _gpu(1.0, 300_000.0)]  # 300 W
    stats = window_stats(rows, 0.4, 0.45)  # no sample inside the window
    assert stats["energy_j"] == pytest.approx(300.0 * 0.05)
    assert stats["power_mean_w"] == pytest.approx(300.0)
    assert stats["sm_active_mean"] is None  # nothing was sampled inside it


def test_no_window_no_numbers() -> None:
    assert set(window_stats([_gpu(0.0, 0.0)], None, None).values()) == {None}
    assert window_stats([_gpu(5.0, 0.0)], 6.0, 7.0)["energy_j"] is None  # no sample after the window


def test_cell_statuses_are_one_literal_holding_the_result_ones() -> None:
    """Issue 31, item 6: a cell's status is a ``CellStatus`` beside ``JobStatus``, not a bare ``str``."""
    from typing import get_args

    from raycolloc.results.rows import RESULT_STATUSES
    from raycolloc.spec import CELL_STATUSES, JOB_STATUSES, CellStatus, as_cell_status

    assert get_args(CellStatus) == CELL_STATUSES
    assert set(RESULT_STATUSES) < set(CELL_STATUSES) and set(JOB_STATUSES) < set(CELL_STATUSES)
    assert as_cell_status("partial") == "partial"
    with pytest.raises(ValueError, match="not one of"):
        as_cell_status("finished")
