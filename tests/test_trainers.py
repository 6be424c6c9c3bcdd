"""A lane's trainer actors, lent to cell after cell: the same processes, and nothing of one cell in
the next (no CUDA environment, no torch, no open file of the previous job)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import ray

from raycolloc.driver.cell_run import run_cell
from raycolloc.driver.lane import Lane
from raycolloc.driver.lease import acquire_gpu
from raycolloc.driver.progress import open_board
from raycolloc.driver.side_by_side import MeasureWindows
from raycolloc.driver.tabulate import job_rows
from raycolloc.driver.trainers import TrainerPool
from raycolloc.node.steward_handles import NAMESPACE, get_steward

from .conftest import SHORT_TMP, load

pytestmark = pytest.mark.usefixtures("ray_local")


def _lane(spec) -> Lane:  # noqa: ANN001
    lease = acquire_gpu("test-lane", 2.0, 120)
    trainers = TrainerPool(lease, 0, 2, 1.0)
    node_id, ray_gpu_id = trainers.locate()
    steward = get_steward(node_id, spec.config.cluster, spec.config.mode.pipe_root)
    gpu = ray.get(steward.resolve_gpu.remote(ray_gpu_id), timeout=60)
    forkserver = ray.get(steward.forkserver.remote(), timeout=180)
    return Lane(
        lease, node_id, steward, gpu, open_board(NAMESPACE), threading.Event(), forkserver, trainers, MeasureWindows()
    )


def test_a_lane_lends_the_same_actors_to_its_next_cell_and_they_carry_nothing_over(tmp_path: Path) -> None:
    first = load(["degree=2", "mode=mps", "epoch_samples=64", f"mode.pipe_root={SHORT_TMP}/rctr"], out_dir=tmp_path)
    second = load(["degree=2", "mode=naive", "epoch_samples=64"], out_dir=tmp_path)
    lane = _lane(first)
    try:
        rec1 = run_cell(first, lane, time.time())
        idle = list(lane.trainers._idle)
        assert len(idle) == 2, "both actors went back to the lane"
        seen = [ray.get(a.inspect.remote(), timeout=60) for a in idle]
        for actor in seen:
            assert actor["job"] is not None  # the last job it ran, by name only
            # Only Ray's own device index for the actor's GPU share: no binding (GPU UUID, MPS pipe).
            assert set(actor["cuda_env"]) <= {"CUDA_VISIBLE_DEVICES"}, actor["cuda_env"]
            assert not actor["cuda_env"].get("CUDA_VISIBLE_DEVICES", "").startswith("GPU-")
            assert not actor["torch_imported"]
        rec2 = run_cell(second, lane, time.time())
        after = [ray.get(a.inspect.remote(), timeout=60) for a in lane.trainers._idle]
    finally:
        lane.trainers.close()
        ray.get(lane.steward.release_gpu.remote(lane.gpu.uuid), timeout=120)
        lane.lease.release()
    jobs1, _ = job_rows(rec1)
    jobs2, _ = job_rows(rec2)
    assert {j.status for j in jobs1 + jobs2} == {"ok"}
    assert {j.actor_pid for j in jobs2} == {j.actor_pid for j in jobs1} == {a["pid"] for a in seen}
    assert not {j.pid for j in jobs1} & {j.pid for j in jobs2}  # a training process per job
    assert all(j.mps_client for j in jobs1) and not any(j.mps_client for j in jobs2)
    # No file of the previous job stays open in the actor: as many as when it went back the first time.
    assert sorted(len(a["fds"]) for a in after) == sorted(len(a["fds"]) for a in seen)
    assert [a["cuda_env"] for a in after] == [a["cuda_env"] for a in seen]


def test_a_failed_job_s_actor_is_killed_not_lent_again(tmp_path: Path) -> None:
    """Also: a cell with actors of its own (``trainer.reuse_actors=false``, or script jobs) first ends
    the pool's idle ones, which hold shares of the lease's one GPU its actors need."""
    spec = load(["degree=2", "epoch_samples=64", "trainer.fault=error", "trainer.fault_job=1"], out_dir=tmp_path)
    own = load(
        ["degree=1", "epoch_samples=64", "trainer.reuse_actors=false", "trainer.setup_timeout_s=60"], out_dir=tmp_path
    )
    lane = _lane(spec)
    try:
        rec = run_cell(spec, lane, time.time())
        assert len(lane.trainers._idle) == 1  # the job that finished cleanly
        rec_own = run_cell(own, lane, time.time())  # its actor needs the whole GPU: 1/2 of it was idle
        assert [j.status for j in job_rows(rec_own)[0]] == ["ok"], rec_own.reason
        assert not lane.trainers._idle
    finally:
        lane.trainers.close()
        ray.get(lane.steward.release_gpu.remote(lane.gpu.uuid), timeout=120)
        lane.lease.release()
    jobs, _ = job_rows(rec)
    assert [j.status for j in jobs] == ["ok", "error"]
