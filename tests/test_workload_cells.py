"""Cells of every kind of workload on a real local Ray instance with simulated GPUs: timm models that
are not presets (a real multirun), the user's function from ``jobs/examples``, and an unmodified
script measured from outside."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from .conftest import ROOT, load, run_cli, run_one, short_tmp

TIMM = [
    "workload=timm",
    "workload.dataset=synthetic",
    "workload.resolution=32",
    "workload.num_classes=10",
    "workload.dataset_size=64",
    "batch_size=16",
]
SCRIPT = [
    "workload=script",
    "workload.command=[python,jobs/examples/plain_train.py,--epochs,3,--steps,3]",
    r"workload.epoch_regex='^epoch (?P<epoch>\d+) done samples=(?P<samples>\d+) loss=(?P<loss>[\d.]+)'",
]


def _pipe_root() -> str:
    return str(short_tmp("rcmps"))  # Unix socket paths must stay short


@pytest.mark.slow  # four cells of a real multirun of two timm models: about 25 s on 2 cores
def test_multirun_over_two_timm_models_naive_and_mps(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = run_cli(
        [
            "-m",
            "cluster=local",
            "cluster.num_gpus=2",
            *TIMM,
            "workload.model=resnet10t,test_vit",
            "mode=naive,mps",
            "degree=2",
            f"mode.pipe_root={_pipe_root()}",
            "telemetry.interval_ms=50",
            f"out_dir={out}",
        ],
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = (out / "multirun").glob("*/*")
    cells = pd.concat([pd.read_parquet(p) for p in sweep.glob("*/cells.parquet")])
    jobs = pd.concat([pd.read_parquet(p) for p in sweep.glob("*/jobs.parquet")])
    assert len(cells) == 4 and set(cells["status"]) == {"ok"}
    # Each cell and job is named by its model and dataset: cells of different models stay apart.
    assert set(cells["workload"]) == {"resnet10t_synthetic_32px", "test_vit_synthetic_32px"}
    assert set(zip(cells["workload"], cells["mode"], strict=True)) == {
        (w, m) for w in ("resnet10t_synthetic_32px", "test_vit_synthetic_32px") for m in ("naive", "mps")
    }
    assert set(jobs["model"]) == {"resnet10t", "test_vit"} and set(jobs["dataset"]) == {"synthetic"}
    assert set(jobs["kind"]) == {"model"} and (jobs["epoch2_s"] > 0).all()
    assert jobs.loc[jobs.cell_id.str.contains("mps"), "mps_client"].all()
    # The sweep summary prints them apart too.
    assert "resnet10t_synthetic_32px" in proc.stdout and "test_vit_synthetic_32px" in proc.stdout


@pytest.mark.usefixtures("ray_local")
def test_python_workload_cell_runs_the_example_inside_the_protocol(tmp_path: Path) -> None:
    spec = load(
        [
            "workload=python",
            "workload.entry=jobs.examples.tiny_regression:build",
            "workload.args={hidden: 16}",
            "degree=2",
            "epoch_samples=256",
        ],
        out_dir=tmp_path,
    )
    result, t = run_one(spec, tmp_path / "cell")
    jobs, epochs, cells = t["jobs"], t["epochs"], t["cells"]
    assert result.status == "ok", result.summary
    assert set(jobs["kind"]) == {"python"} and set(jobs["workload"]) == {"tiny_regression.build"}
    assert (jobs["params"] == 32 * 16 + 16 + 16 + 1).all()  # the user's MLP, built by the user's function
    # raycolloc's protocol around it: a warm-up epoch, then epoch 2 measured together by both jobs.
    assert sorted(epochs["epoch"].unique()) == [1, 2] and (epochs["steps"] == 256 // 32).all()
    # Together: every job warmed up before any measured epoch began (the barrier), and the measured
    # epochs began at once. Their overlap is not asserted: 8 steps of this MLP take milliseconds.
    e1, e2 = epochs[epochs.epoch == 1], epochs[epochs.epoch == 2]
    assert e2["start_ts"].min() >= e1["end_ts"].max() and e2["loss"].notna().all()
    assert e2["start_ts"].max() - e2["start_ts"].min() < 1.0
    assert cells.loc[0, "agg_samples_per_s"] == pytest.approx(e2["samples_per_s"].sum())


@pytest.mark.usefixtures("ray_local")
def test_python_step_function_refuses_fast_paths_as_a_row(tmp_path: Path) -> None:
    spec = load(
        [
            "workload=python",
            "workload.entry=jobs.examples.tiny_regression:build_step",
            "trainer.compile=default",
            "epoch_samples=64",
        ],
        out_dir=tmp_path,
    )
    result, t = run_one(spec, tmp_path / "cell")
    job = t["jobs"].iloc[0]
    assert result.status == "error" and job["status"] == "error"
    assert "trainer.compile cannot apply to jobs.examples.tiny_regression:build_step" in job["error"]


@pytest.mark.usefixtures("ray_local")
def test_script_cell_of_degree_two_is_measured_from_outside(tmp_path: Path) -> None:
    spec = load([*SCRIPT, "degree=2", "mode=mps", f"mode.pipe_root={_pipe_root()}"], out_dir=tmp_path)
    result, t = run_one(spec, tmp_path / "cell")
    jobs, epochs, cells, tel = t["jobs"], t["epochs"], t["cells"], t["telemetry"]
    assert result.status == "ok", result.summary
    assert set(jobs["kind"]) == {"script"} and set(jobs["exit_code"]) == {0}
    # The script's own lines, read off its stdout, are its epochs: epoch 2 timed without its help.
    assert sorted(epochs["epoch"].unique()) == [1, 2, 3] and (epochs["samples"] == 3 * 16).all()
    assert epochs.loc[epochs.epoch == 1, "warmup"].all() and epochs["loss"].notna().all()
    assert (jobs["epoch2_s"] > 0).all() and (jobs["epochs"] == 3).all()
    assert jobs["batch_size"].isna().all() and jobs["epoch_samples"].isna().all()
    # Lifetimes: start to exit, overlapping (the cell's jobs ran at once).
    assert ((jobs["ended_ts"] - jobs["started_ts"]) == jobs["total_s"]).all()
    assert cells.loc[0, "lifetime_overlap_s"] > 0 and cells.loc[0, "n_ok"] == 2
    # Bound like a raycolloc job: its own cores, the GPU's UUID, a client of the cell's MPS server.
    assert jobs["cpus"].nunique() == 2 and jobs["mps_client"].all() and jobs["mps_server_pid"].nunique() == 1
    assert (jobs["cuda_visible_devices"] == jobs["gpu_uuid"]).all()
    # The steward sampled the script's own process: memory and SM activity on the (simulated) GPU.
    procs = tel[tel.scope == "process"]
    assert set(procs["pid"].astype(int)) == set(jobs["pid"])
    assert (jobs["peak_device_mem_mib"] > 0).all() and jobs["proc_sm_util_mean"].notna().all()


@pytest.mark.usefixtures("ray_local")
def test_failing_script_is_an_error_row_with_the_tail_of_its_stderr(tmp_path: Path) -> None:
    command = "workload.command=[python,jobs/examples/plain_train.py,--epochs,3,--steps,1,--fail]"
    spec = load([*SCRIPT[:1], command, *SCRIPT[2:], "degree=1"], out_dir=tmp_path)
    result, t = run_one(spec, tmp_path / "cell")
    job = t["jobs"].iloc[0]
    assert result.status == "error" and job["status"] == "error" and job["exit_code"] == 3
    assert "script exited with code 3" in job["error"] and "failing on purpose" in job["error"]
    assert list(t["epochs"]["epoch"]) == [1]  # the epoch it finished before it failed is kept
