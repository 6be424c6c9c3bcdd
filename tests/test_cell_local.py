"""Cells end to end on a real local Ray instance with simulated GPUs (the same code as on GPUs)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import ray

from raycolloc.node.steward_handles import NAMESPACE, steward_name
from raycolloc.results.schema import SCHEMA_VERSION

from .conftest import load, run_one, short_tmp

pytestmark = pytest.mark.usefixtures("ray_local")


def _cell(tmp_path: Path, overrides: list[str], samples: int = 256):  # noqa: ANN202
    spec = load([f"epoch_samples={samples}", *overrides], out_dir=tmp_path)
    outcome, tables = run_one(spec, tmp_path / "cell")
    return spec, outcome, tables


def _steward(spec):  # noqa: ANN001, ANN202
    node = ray.get_runtime_context().get_node_id()
    return ray.get_actor(steward_name(node, spec.config.cluster), namespace=NAMESPACE)


def test_naive_cell_writes_four_tables_with_one_gpu_per_cell(tmp_path: Path) -> None:
    # 1024 samples: a measured window of ~0.5 s holds several 50 ms telemetry samples and overlaps
    # surely (a 256-sample window on a loaded CI box once caught no sample).
    job, outcome, t = _cell(tmp_path, ["degree=2", "mode=naive"], samples=1024)
    assert outcome.status == "ok"
    cells, jobs, epochs, tel = t["cells"], t["jobs"], t["epochs"], t["telemetry"]
    assert len(cells) == 1 and cells.loc[0, "status"] == "ok"
    assert set(cells["schema_version"]) == {SCHEMA_VERSION}
    assert len(jobs) == 2 and set(jobs["status"]) == {"ok"}
    assert jobs["gpu_uuid"].nunique() == 1 and jobs["gpu_uuid"].iloc[0] == cells.loc[0, "gpu_uuid"]
    assert jobs["pid"].nunique() == 2  # one process per job
    # Forked by the node's warm parent (trainer.spawn=fork, the default): torch came imported.
    assert set(jobs["spawn"]) == {"fork"} and (jobs["import_s"] < jobs["spawn_s"] + 1e-9).all()
    assert (jobs["cuda_visible_devices"] == cells.loc[0, "gpu_uuid"]).all()
    assert not jobs["mps_client"].any()
    # Each job pinned to a core of its own (trainer.cpu_affinity=auto), as its training thread saw it.
    assert jobs["cpus"].notna().all() and jobs["cpus"].nunique() == 2
    assert all(int(c) in os.sched_getaffinity(0) for c in jobs["cpus"])
    # Epoch 1 is warm-up; epoch 2 is measured, and the measured epochs overlap (barrier).
    assert sorted(epochs["epoch"].unique()) == [1, 2]
    assert epochs.loc[epochs.epoch == 1, "warmup"].all() and not epochs.loc[epochs.epoch == 2, "warmup"].any()
    e1, e2 = epochs[epochs.epoch == 1], epochs[epochs.epoch == 2]
    assert e2["start_ts"].min() >= e1["end_ts"].max()  # every job warmed up before any measured
    assert e2["start_ts"].max() < e2["end_ts"].min()
    assert cells.loc[0, "agg_samples_per_s"] == pytest.approx(e2["samples_per_s"].sum())
    assert (e2["samples"] == 1024).all()
    # The training thread's own accounting: CPU time within the epoch's wall time, system time a part of it.
    assert ((e2["thread_cpu_s"] > 0) & (e2["thread_cpu_s"] <= e2["wall_s"] * 1.05 + 0.01)).all()
    assert ((e2["thread_sys_s"] >= 0) & (e2["thread_sys_s"] <= e2["thread_cpu_s"])).all()
    assert (e2["minor_faults"] >= 0).all() and (e2["involuntary_switches"] >= 0).all()
    assert (e2["voluntary_switches"] >= 0).all()
    # Telemetry: every row names its source; process rows for both jobs.
    assert set(tel["source"]) == {"sim-gpm"}
    assert set(tel.loc[tel.scope == "process", "pid"].astype(int)) == set(jobs["pid"])
    assert cells.loc[0, "energy_j"] > 0 and cells.loc[0, "sm_active_mean"] > 0
    assert '"degree": 2' in cells.loc[0, "config_json"] and '"ray"' in cells.loc[0, "env_json"]


def test_injected_oom_is_a_row_and_the_cell_finishes(tmp_path: Path) -> None:
    _, outcome, t = _cell(
        tmp_path,
        ["degree=2", "trainer.fault=oom", "trainer.fault_job=1", "trainer.cpu_affinity=none", "trainer.spawn=exec"],
    )
    jobs = t["jobs"].set_index("job_index")
    assert jobs["cpus"].isna().all()  # not pinned: left to the scheduler
    assert set(jobs["spawn"]) == {"exec"}  # a fresh interpreter: it imported torch and timm itself
    assert jobs.loc[1, "status"] == "oom" and "injected out of memory" in jobs.loc[1, "error"]
    assert jobs.loc[0, "status"] == "ok" and jobs.loc[0, "epoch2_s"] > 0
    assert outcome.status == "partial"
    assert t["cells"].loc[0, "n_ok"] == 1


def test_crashed_trainer_process_is_an_error_row(tmp_path: Path) -> None:
    _, outcome, t = _cell(tmp_path, ["degree=2", "trainer.fault=exit", "trainer.fault_job=0"])
    jobs = t["jobs"].set_index("job_index")
    assert jobs.loc[0, "status"] == "error" and "died" in jobs.loc[0, "error"]
    assert jobs.loc[1, "status"] == "ok"
    assert outcome.status == "partial"


def test_a_cell_whose_memory_estimate_exceeds_the_gpu_is_unfit(tmp_path: Path) -> None:
    # 2 x resnet152 at batch 512 needs ~2 x 129 GiB (the model's estimate): more than the A100-40GB
    # has. The pre-flight records the cell as unfit, with the numbers, and starts no job (the
    # simulated GPU itself would refuse the memory: tests/test_trust.py).
    _, outcome, t = _cell(
        tmp_path,
        [
            "workload=resnet152_imagenet",
            "degree=2",
            "batch_size=512",
            "epoch_samples=512",
            "cluster.gpu_model=A100-SXM4-40GB",
        ],
    )
    assert outcome.status == "unfit"
    reason = t["cells"].loc[0, "reason"]
    assert re.search(r"2 jobs x about 12\d\.\d GiB .* need 2\d\d\.\d GiB; .* has 40\.0 GiB", reason), reason
    assert set(t["jobs"]["status"]) == {"skipped"} and t["jobs"]["pid"].isna().all()


def test_mps_cell_jobs_are_clients_of_one_server_and_the_daemon_stops(tmp_path: Path) -> None:
    from raycolloc.node.modes.mps import find_control_daemons

    pipe_root = short_tmp("rcmps")  # Unix socket paths must stay short
    job, outcome, t = _cell(tmp_path, ["degree=3", "mode=mps", f"mode.pipe_root={pipe_root}"])
    jobs = t["jobs"]
    assert outcome.status == "ok"
    assert jobs["mps_client"].all()
    assert jobs["mps_server_pid"].nunique() == 1
    assert not [d for d in find_control_daemons() if str(pipe_root) in d["pipe_dir"]]
    # The GPU's directory (pipes, logs, records) goes with its lease: nothing accumulates under the
    # pipe root (its owner-only mode while it exists: tests/test_faults.py).
    assert not (pipe_root / jobs["gpu_uuid"].iloc[0]).exists()


def test_trainer_actors_take_one_call_at_a_time_on_their_main_thread() -> None:
    from raycolloc.driver.trainers import RemoteTrainer

    # Nothing calls a trainer concurrently (progress goes to the board; a hung or interrupted one is
    # killed), so it needs no thread pool beside the main thread that relays to its training process.
    assert RemoteTrainer._default_options.get("max_concurrency", 1) == 1


def test_sweeps_share_the_cluster_s_progress_board_and_each_sees_its_own_cells() -> None:
    """One detached board per cluster (a sweep starts no actor for it); a sweep's part is its own,
    even where two sweeps run cells of the same name, and goes when the sweep ends."""
    from raycolloc.driver.progress import open_board
    from raycolloc.spec import JobProgress

    a, b = open_board(NAMESPACE), open_board(NAMESPACE)
    assert a.actor._actor_id == b.actor._actor_id and a.sweep != b.sweep
    a.cell("cell-1", "setup")
    b.cell("cell-1", "done", "ok")
    progress = JobProgress(epoch=1, step=3, steps=4, epochs=2)
    a.job("cell-1", 0, progress)
    assert a.snapshot()["cell-1"].state == "setup" and a.snapshot()["cell-1"].jobs == {0: progress}
    assert b.snapshot()["cell-1"].state == "done" and not b.snapshot()["cell-1"].jobs
    a.close()
    assert a.snapshot() == {} and set(b.snapshot()) == {"cell-1"}
    b.close()
