"""Lanes kept between the sweeps of one process (``raycolloc.driver.kept_lanes``, the advisor's): the
next sweep takes the lane over (its lease, its trainer actors), the wait between the sweeps is
counted in its first cell's wall time, a sweep the kept lane does not fit gets a lane of its own,
and nothing is held once the block ends."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from ray.util.placement_group import placement_group_table

from raycolloc.driver.engine import run_cells
from raycolloc.driver.kept_lanes import KeptLanes, kept_lanes, lanes_kept

from .conftest import load


def _lane_groups() -> set[str]:
    """The sweeps' GPU leases alive now (placement groups named after a lane)."""
    return {
        g["name"]
        for g in placement_group_table().values()
        if g["name"].startswith("raycolloc:lane:") and g["state"] != "REMOVED"
    }


def _actor_pids(result) -> set[int]:  # noqa: ANN001
    import pandas as pd

    return set(pd.read_parquet(Path(result.cell_dir) / "jobs.parquet")["actor_pid"])


def _kept(cores: int, cpus_per_gpu: float) -> KeptLanes:
    kept = KeptLanes(lambda cores: max(7, min(cores, 48)))
    kept.cores, kept.cpus_per_gpu = cores, cpus_per_gpu
    return kept


def test_a_pool_is_sized_for_the_largest_cell_wanted_within_the_nodes_cpus_per_gpu() -> None:
    assert _kept(16, 16.0).pool_size(1, 1.0) == 16  # one H200 on a 16-core node: its 16 cores
    assert _kept(2, 8.0).pool_size(1, 1.0) == 7  # 2 cores: the degrees asked for (7) are still ranked
    assert _kept(64, 16.0).pool_size(1, 1.0) == 16  # 4 GPUs on 64 cores: a GPU's share of the CPUs
    assert _kept(64, 64.0).pool_size(1, 2.0) == 32  # at 2 CPUs a trainer
    assert _kept(16, 16.0).pool_size(20, 1.0) == 20  # never below what the sweep itself needs
    assert _kept(16, 0.0).pool_size(3, 1.0) == 3  # no CPUs known: what the sweep needs
    assert _kept(16, 16.0).pool_size(1, 0.0) == 16


@pytest.mark.slow
@pytest.mark.usefixtures("ray_local")
def test_the_next_sweep_takes_the_kept_lane_and_its_wait_counts_as_gpu_time(tmp_path: Path) -> None:
    words = ["epoch_samples=64", "repeats=1"]
    solo = load([*words, "degree=1", "mode=naive"], out_dir=tmp_path)
    pair = load([*words, "degree=2", "mode=naive"], out_dir=tmp_path)
    big = load([*words, "degree=4", "mode=naive"], out_dir=tmp_path)
    assert not _lane_groups()
    with lanes_kept(lambda cores: 2) as kept:
        assert kept_lanes() is kept
        (first,) = run_cells([(solo, tmp_path / "solo")], rerun=True)
        held = _lane_groups()
        assert len(held) == 1  # kept after its sweep ended
        time.sleep(1.0)  # the advisor fits and ranks here: the GPU waits, held
        (second,) = run_cells([(pair, tmp_path / "pair")], rerun=True)
        assert _lane_groups() == held  # the same lease, taken over
        (third,) = run_cells([(big, tmp_path / "big")], rerun=True)  # 4 jobs: more than the kept pool
        assert len(_lane_groups()) == 1 and _lane_groups() != held  # a lane of its own, the kept one closed
    assert not _lane_groups()  # nothing held after the block
    assert kept_lanes() is None
    assert {first.status, second.status, third.status} == {"ok"}
    one, two = (r.row for r in (first, second))
    assert one is not None and two is not None
    assert two.lease_wait_s == 0.0 and two.lane_setup_s >= 1.0  # the wait between the sweeps
    assert two.started_at <= one.finished_at + 0.5  # its wall time holds the wait: from when the lane was kept
    assert _actor_pids(first) < _actor_pids(second)  # the solo's trainer lent again to the pair
    assert not _actor_pids(third) & _actor_pids(second)  # new trainers: the kept lane was closed


@pytest.mark.slow
@pytest.mark.usefixtures("ray_local")
def test_a_sweep_of_two_lanes_or_a_failed_cell_keeps_no_lane(tmp_path: Path) -> None:
    """A sweep over both of the session's GPUs closes the kept lane first (a GPU it holds would keep one of
    the sweep's lanes waiting) and keeps none; a lane whose cell failed is not kept either."""
    words = ["epoch_samples=64", "repeats=1", "mode=naive"]
    solo = load([*words, "degree=1"], out_dir=tmp_path)
    two = [load([*words, f"degree={d}"], out_dir=tmp_path) for d in (1, 2)]
    failing = load([*words, "degree=1", "trainer.fault=error", "trainer.fault_job=0"], out_dir=tmp_path)
    with lanes_kept(lambda cores: 2):
        run_cells([(solo, tmp_path / "solo")], rerun=True)
        assert len(_lane_groups()) == 1
        both = run_cells([(c, tmp_path / f"two-{i}") for i, c in enumerate(two)], rerun=True)
        assert {r.status for r in both} == {"ok"} and not _lane_groups()
        (failed,) = run_cells([(failing, tmp_path / "failing")], rerun=True)
        assert failed.status != "ok" and not _lane_groups()
    assert not _lane_groups()
    with pytest.raises(RuntimeError, match="already inside"), lanes_kept(lambda cores: 1), lanes_kept(lambda c: 1):
        pass
