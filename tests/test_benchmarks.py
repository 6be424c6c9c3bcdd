"""The benchmark scripts' plumbing, run on the simulated backend (their numbers come from the GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from . import sleepy_workload
from .conftest import session_ray

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--backend", "sim", "--batch-size", "4", "--epoch-samples", "16", "--window-s", "0.5"]


def _run(script: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAY_AUTH_MODE="disabled", HOME=str(tmp_path))
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_bench_trainer_compares_the_trainer_and_the_steward_variant_with_a_raw_process_on_one_core(
    tmp_path: Path,
) -> None:
    out = tmp_path / "trainer.json"
    # The trainers run on the session's Ray instance (a cluster the user names), its steward's GPU 0.
    proc = _run(
        "bench_trainer.py",
        [*SMALL, "--rounds", "1", "--epochs", "1", "--ray-address", session_ray(), "--out", str(out)],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    (rnd,) = result["rounds"]
    assert rnd["raw_samples_per_s"] > 0 and rnd["raw_cpu_us_per_step"] > 0
    for variant in ("trainer", "steward"):
        side = rnd[variant]
        assert len(side["samples_per_s"]) == 1 and side["samples_per_s"][0] > 0 and side["cpu_us_per_step"][0] > 0
        if result["core"] is not None:
            # Every side's training thread ran on the core the raw process was pinned to.
            assert side["cpus"] == str(result["core"]), (variant, side["cpus"])
        ratio = result["summary"][variant]["ratio_best"]
        assert abs(ratio - side["samples_per_s"][0] / rnd["raw_samples_per_s"]) < 1e-9
    # Only the steward variant is sampled, as a cell's job is.
    assert rnd["trainer"]["telemetry_rows"] is None and rnd["steward"]["telemetry_rows"] > 0
    assert "median/raw" in proc.stdout


def test_bench_trainer_refuses_bad_arguments_before_starting_anything(tmp_path: Path) -> None:
    for bad, key in ((["--rounds", "0"], "--rounds"), (["--variants", "trainer,cell"], "--variants")):
        proc = _run("bench_trainer.py", [*SMALL, *bad, "--out", str(tmp_path / "x.json")], tmp_path)
        assert proc.returncode == 2 and key in proc.stderr, proc.stderr
    assert not (tmp_path / "x.json").exists()


def test_bench_collocation_runs_raw_and_raycolloc_side_by_side_and_writes_its_table(tmp_path: Path) -> None:
    out = tmp_path / "colloc.json"
    # The raycolloc side joins the session's Ray instance (a cluster the user names, as on a DGX).
    proc = _run(
        "bench_collocation.py",
        [*SMALL, "--modes", "naive", "--degrees", "1", "--ray-address", session_ray(), "--out", str(out)],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["mode"], row["degree"], row["status"]) == ("naive", 1, "ok")
    assert row["raw"] > 0 and row["raycolloc"] > 0
    assert abs(row["ratio"] - row["raycolloc"] / row["raw"]) < 1e-9
    assert row["telemetry"].startswith("sim-")  # the raycolloc side sampled its (simulated) GPU
    # Both sides' training threads report how often they waited and were pre-empted.
    for side in ("raw_switches_per_s", "raycolloc_switches_per_s"):
        ((voluntary, involuntary),) = row[side]
        assert voluntary >= 0 and involuntary >= 0, (side, row[side])
    assert "raw img/s" in proc.stdout


def test_bench_fanout_runs_the_sweep_on_every_gpu_then_on_one_and_accounts_each_cells_time(tmp_path: Path) -> None:
    out = tmp_path / "fanout.json"
    # Epochs of 2 s (a time budget): a cell outlasts a lane's set-up, so both lanes take one. Its jobs'
    # steps sleep (tests/sleepy_workload.py): cells side by side on 2 cores do not slow each other.
    sweep = (
        f"degree=1,2 mode=naive {' '.join(sleepy_workload.WORDS)} epoch_samples=1000000 epoch_time_s=2 batch_size=16"
    )
    # Both runs join the session's Ray instance (2 GPUs); the one-GPU run is one lane, which keeps its GPU.
    proc = _run(
        "bench_fanout.py",
        [
            "--sweep",
            sweep,
            "--extra",
            f"cluster=local cluster.address={session_ray()}",
            "--one-gpu-extra",
            "cluster.max_concurrent_cells=1",
            "--out",
            str(out),
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    both, one = result["all_gpus"], result["one_gpu"]
    assert (both["cells"], both["ok"], both["gpus_used"]) == (2, 2, 2)
    assert (one["cells"], one["ok"], one["gpus_used"]) == (2, 2, 1)
    assert abs(result["ratio"] - both["makespan_s"] / one["makespan_s"]) < 1e-9
    for cell in both["cell_table"] + one["cell_table"]:
        # The phases add up to the cell's wall time (other_s is what no phase covers, never negative).
        # A lane's set-up is charged to the lane's first cell only (0 for the others).
        parts = [
            "lease_wait_s",
            "lane_setup_s",
            "prepare_s",
            "actor_start_s",
            "trainer_setup_s",
            "epochs_s",
            "teardown_s",
            "other_s",
        ]
        assert abs(sum(cell[k] for k in parts) - cell["wall_s"]) < 1e-6, cell
        assert cell["trainer_setup_s"] > 0 and cell["epochs_s"] > 0 and cell["other_s"] > -1e-6, cell
    # On one GPU (one lane) the cells ran one after the other, and only the lane's first set it up.
    first, second = sorted(one["cell_table"], key=lambda c: c["started_at"])
    assert second["started_at"] >= first["finished_at"] and one["max_measured_overlap"] == 1
    assert first["lane_setup_s"] > 0 and second["lane_setup_s"] == 0 and second["lease_wait_s"] < 0.1
    assert "caches warm" in proc.stdout and "trainer_setup" in proc.stdout


def test_bench_overhead_times_every_phase_per_variant_and_switches_one_saving_off_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    # The sweeps join the session's Ray instance, one cell at a time (one lane, as on one GPU).
    extra = f"cluster=local cluster.address={session_ray()} cluster.max_concurrent_cells=1"
    proc = _run(
        "bench_overhead.py",
        [
            "--sweep",
            "degree=1,2 mode=mps workload=tiny_cnn epoch_samples=64",
            "--extra",
            extra,
            "--variants",
            "all,exec",
            "--out",
            str(out),
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["variant"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {"all", "exec"}
    for r in results.values():
        assert r["ok"] == r["cells"] == 2
        assert r["fixed_median_s"] > 0 and 0 < r["measured_share"] < 1
        assert r["job_spawn_s"] is not None and r["job_cuda_init_s"] is not None
        # Every cell's fixed cost is its phases and what lies between them: never less than their sum.
        for cell in r["cells_table"]:
            phases = sum(cell[k] or 0.0 for k in ("lease_wait_s", "lane_setup_s", "prepare_s", "setup_s", "teardown_s"))
            assert cell["fixed"] >= phases - 1e-6
    assert results["all"]["spawn"] == ["fork"] and results["exec"]["spawn"] == ["exec"]
    # Only the lane's first cell waits for the lease and the lane's set-up; with the daemon kept the
    # second MPS cell prepares without starting one.
    cells = sorted(results["all"]["cells_table"], key=lambda c: c["started_at"])
    assert cells[1]["lease_wait_s"] == 0 and cells[1]["lane_setup_s"] == 0
    assert "median" in proc.stdout and "exec" in proc.stdout
