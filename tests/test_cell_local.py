"""Cells end to end on a real local Ray instance with simulated GPUs (the same code as on GPUs)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import ray

from raycolloc.cell import run_cell
from raycolloc.results import SCHEMA_VERSION, TABLES
from raycolloc.steward import NAMESPACE, steward_name

from .conftest import load

pytestmark = pytest.mark.usefixtures("ray_local")


def _cell(tmp_path: Path, overrides: list[str]):  # noqa: ANN202
    job = load(["epoch_samples=256", *overrides], out_dir=tmp_path)
    outcome = run_cell(job.cfg, job.spec, tmp_path / "cell")
    tables = {name: pd.read_parquet(tmp_path / "cell" / f"{name}.parquet") for name in TABLES}
    return job, outcome, tables


def _steward(job):  # noqa: ANN001, ANN202
    node = ray.get_runtime_context().get_node_id()
    return ray.get_actor(steward_name(node, job.cfg.cluster), namespace=NAMESPACE)


def test_naive_cell_writes_four_tables_with_one_gpu_per_cell(tmp_path: Path) -> None:
    job, outcome, t = _cell(tmp_path, ["degree=2", "mode=naive"])
    assert outcome.status == "ok"
    cells, jobs, epochs, tel = t["cells"], t["jobs"], t["epochs"], t["telemetry"]
    assert len(cells) == 1 and cells.loc[0, "status"] == "ok"
    assert set(cells["schema_version"]) == {SCHEMA_VERSION}
    assert len(jobs) == 2 and set(jobs["status"]) == {"ok"}
    assert jobs["gpu_uuid"].nunique() == 1 and jobs["gpu_uuid"].iloc[0] == cells.loc[0, "gpu_uuid"]
    assert jobs["pid"].nunique() == 2  # one process per job
    assert not jobs["mps_client"].any()
    # Each job pinned to a core of its own (trainer.cpu_affinity=auto), as its training thread saw it.
    assert jobs["cpus"].notna().all() and jobs["cpus"].nunique() == 2
    assert all(int(c) in os.sched_getaffinity(0) for c in jobs["cpus"])
    # Epoch 1 is warm-up; epoch 2 is measured, and the measured epochs overlap (barrier).
    assert sorted(epochs["epoch"].unique()) == [1, 2]
    assert epochs.loc[epochs.epoch == 1, "warmup"].all() and not epochs.loc[epochs.epoch == 2, "warmup"].any()
    e2 = epochs[epochs.epoch == 2]
    assert e2["start_ts"].max() < e2["end_ts"].min()
    assert cells.loc[0, "agg_samples_per_s"] == pytest.approx(e2["samples_per_s"].sum())
    assert (e2["samples"] == 256).all()
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
    _, outcome, t = _cell(tmp_path, ["degree=2", "trainer.fault=oom", "trainer.fault_job=1", "trainer.cpu_affinity=none"])
    jobs = t["jobs"].set_index("job_index")
    assert jobs["cpus"].isna().all()  # not pinned: left to the scheduler
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


def test_simulated_gpu_refuses_memory_it_does_not_have(tmp_path: Path) -> None:
    # 7 x resnet152 at batch 512 declares ~7 x 112 GiB: the simulated A100-40GB runs out of memory.
    _, outcome, t = _cell(tmp_path, ["workload=resnet152_imagenet", "degree=2", "batch_size=512", "epoch_samples=512",
                                     "cluster.gpu_model=A100-SXM4-40GB"])
    assert set(t["jobs"]["status"]) == {"oom"}
    assert "simulated CUDA out of memory" in t["jobs"]["error"].iloc[0]
    assert outcome.status == "oom"


def test_mps_cell_jobs_are_clients_of_one_server_and_the_daemon_stops(tmp_path: Path) -> None:
    from raycolloc.modes.mps import find_control_daemons

    pipe_root = Path(tempfile.mkdtemp(prefix="rcmps", dir="/tmp"))  # Unix socket paths must stay short
    job, outcome, t = _cell(tmp_path, ["degree=3", "mode=mps", f"mode.pipe_root={pipe_root}"])
    jobs = t["jobs"]
    assert outcome.status == "ok"
    assert jobs["mps_client"].all()
    assert jobs["mps_server_pid"].nunique() == 1
    assert not [d for d in find_control_daemons() if str(pipe_root) in d["pipe_dir"]]
    gpu_dir = pipe_root / jobs["gpu_uuid"].iloc[0]
    assert oct(gpu_dir.stat().st_mode & 0o777) == "0o700"
    assert not (gpu_dir / "daemon.json").exists()


def test_trainer_actors_take_one_call_at_a_time_on_their_main_thread() -> None:
    from raycolloc.cell import RemoteTrainer

    # Nothing calls a trainer concurrently (progress goes to the steward; a hung or interrupted one is
    # killed), so it needs no thread pool beside the main thread that relays to its training process.
    assert RemoteTrainer._default_options.get("max_concurrency", 1) == 1
