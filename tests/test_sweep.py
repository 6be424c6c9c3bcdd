"""The real command line: Hydra multirun through the Ray launcher, resume, kill and Ctrl-C, radT plans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from analysis.load import load_sweeps

from raycolloc.node.modes.mps import find_control_daemons

from .conftest import ROOT, compose, run_cli

TINY = ["workload=tiny_cnn", "cluster=local", "epoch_samples=128"]


def _tables(root: Path, name: str) -> pd.DataFrame:
    """Every result under ``root``, references to earlier runs' results followed (as a report reads them)."""
    return load_sweeps([root], all_results=True).table(name)


def _sweep_dirs(out: Path) -> list[Path]:
    return sorted(p for p in (out / "multirun").glob("*/*") if p.is_dir())


def test_naive_multirun_degrees_1_and_2_one_gpu_per_cell(tmp_path: Path) -> None:
    out = tmp_path / "res"
    proc = run_cli(["-m", *TINY, "degree=1,2", "mode=naive", f"out_dir={out}"], cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = _sweep_dirs(out)
    cell_dirs = sorted(p.parent for p in sweep.rglob("cells.parquet"))
    assert len(cell_dirs) == 2
    for d in cell_dirs:
        assert all((d / f"{t}.parquet").exists() for t in ("cells", "jobs", "epochs", "telemetry"))
        jobs = pd.read_parquet(d / "jobs.parquet")
        assert jobs["gpu_uuid"].nunique() == 1 and set(jobs["status"]) == {"ok"}
    degrees = sorted(_tables(sweep, "cells")["degree"])
    assert degrees == [1, 2]
    assert "throughput gain" in proc.stdout


def test_resume_second_run_starts_nothing_and_rerun_forces(tmp_path: Path) -> None:
    out = tmp_path / "res"
    args = ["-m", *TINY, "degree=1,2", "mode=naive", f"out_dir={out}"]
    assert run_cli(args, cwd=ROOT).returncode == 0
    t0 = time.monotonic()
    second = run_cli(args, cwd=ROOT)
    elapsed = time.monotonic() - t0
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout.count("reused; +rerun=true runs it again") == 2
    assert "Started a local Ray instance" not in second.stdout + second.stderr  # no Ray, no job
    assert elapsed < 60, elapsed  # seconds on an idle laptop; generous for a loaded CI machine
    first_dir, second_dir = _sweep_dirs(out)
    before, after = _tables(first_dir, "cells"), _tables(second_dir, "cells")
    assert sorted(after["cell_id"]) == sorted(before["cell_id"])
    assert after["resumed_from"].notna().all()
    assert sorted(after["agg_samples_per_s"]) == sorted(before["agg_samples_per_s"])
    third = run_cli([*args, "+rerun=true", "degree=1"], cwd=ROOT)
    assert third.returncode == 0 and "reused" not in third.stdout


def _popen_sweep(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "raycolloc.sweep", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for(predicate, timeout: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def test_killed_sweep_reruns_to_exactly_one_result_per_cell(tmp_path: Path) -> None:
    out = tmp_path / "res"
    args = ["-m", "workload=tiny_cnn", "cluster=local", "degree=1,2,3", "mode=naive", f"out_dir={out}",
            "epoch_samples=512"]
    proc = _popen_sweep(args)
    try:
        assert _wait_for(lambda: any(out.rglob("cells.parquet")), 300), "no cell finished"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its local Ray instance, without warning
        proc.wait(timeout=60)
    done_before = len(list(out.rglob("cells.parquet")))
    assert 1 <= done_before < 3
    rerun = run_cli(args, cwd=ROOT)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    latest = _sweep_dirs(out)[-1]
    cells = _tables(latest, "cells")
    assert sorted(cells["degree"]) == [1, 2, 3]  # exactly one result per cell
    assert cells["resumed_from"].notna().sum() == done_before
    assert set(cells["status"]) == {"ok"}


def test_ctrl_c_releases_the_gpu_of_running_cells(tmp_path: Path) -> None:
    out = tmp_path / "res"
    pipe_root = Path("/tmp") / f"rcint{os.getpid()}"
    args = ["-m", "workload=tiny_cnn", "cluster=local", "degree=2", "mode=mps", f"mode.pipe_root={pipe_root}",
            f"out_dir={out}", "epoch_samples=100000", "epochs=3"]
    proc = _popen_sweep(args)
    try:
        assert _wait_for(lambda: any(str(pipe_root) in d["pipe_dir"] for d in find_control_daemons()), 300)
        time.sleep(3)
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    assert "cancelling" in output, output[-3000:]
    assert not [d for d in find_control_daemons() if str(pipe_root) in d["pipe_dir"]], output[-3000:]
    assert not list(out.rglob("cells.parquet"))  # an interrupted cell is not a result


def test_radt_plan_runs_groups_and_writes_status_back(tmp_path: Path) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text(
        "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params\n"
        "1, 1, , a, 0, MPS, train.py, smi, --model tiny_cnn --batch-size 32 --epochs 2\n"
        "1, 1, , b, 0, MPS, train.py, smi, workload=tiny_cnn batch-size=16\n"
        "1, 1, , c, 1, -, train.py, smi, --workload tiny_dlrm --epochs 2\n"
        "2, 1, FINISHED, d, 0, -, train.py, smi, --workload tiny_cnn\n"
    )
    out = tmp_path / "res"
    pipe_root = Path("/tmp") / f"rcplan{os.getpid()}"
    proc = run_cli([f"+plan={plan}", "cluster=local", "cluster.num_gpus=2", "epoch_samples=128",
                    f"mode.pipe_root={pipe_root}", f"out_dir={out}"], cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _tables(out, "jobs")
    cells = _tables(out, "cells")
    assert len(cells) == 2  # group 1 on two GPUs; group 2 was FINISHED
    assert sorted(cells["mode"]) == ["mps", "naive"]
    mps_jobs = jobs[jobs["cell_id"].isin(cells.loc[cells["mode"] == "mps", "cell_id"])]
    assert sorted(mps_jobs["batch_size"]) == [16, 32] and mps_jobs["mps_client"].all()
    assert set(jobs["workload"]) == {"tiny_cnn", "tiny_dlrm"}
    statuses = [line.split(",")[2].strip() for line in plan.read_text().splitlines()[1:]]
    assert statuses == ["FINISHED", "FINISHED", "FINISHED", "FINISHED"]
    again = run_cli([f"+plan={plan}", "cluster=local", f"out_dir={out}"], cwd=ROOT)
    assert again.returncode == 0 and "nothing to run" in again.stdout


def test_radt_plan_errors_name_the_row(tmp_path: Path) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text("Experiment,Workload,Status,Run,Devices,Collocation,File,Listeners,Params\n"
                    "1,1,,a,0,-,train.py,smi,--model vggg16 --data /d/cifar10\n")
    proc = run_cli([f"+plan={plan}", "cluster=local", f"out_dir={tmp_path / 'res'}"], cwd=ROOT, timeout=120)
    assert proc.returncode != 0
    assert "plan.csv:2" in proc.stderr + proc.stdout and "vggg16" in proc.stderr + proc.stdout
    assert "column Params" in proc.stderr + proc.stdout and "allowed: vgg16" in proc.stderr + proc.stdout


@pytest.mark.timeout(900)
def test_two_nodes_four_gpus_run_four_cells_at_once(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 6, "num_gpus": 2})
    cluster.add_node(num_cpus=6, num_gpus=2)
    cluster.wait_for_nodes()
    out = tmp_path / "res"
    try:
        proc = run_cli(["-m", "workload=tiny_cnn", "cluster=local", f"cluster.address={cluster.address}",
                        # Four one-job cells, one per GPU: four trainers at a time on CI's 2 cores.
                        # With the four degree-2 cells of a degree=1,2 sweep first (8 trainers), one
                        # cell's set-up lagged another's by 90 s and their measured windows missed
                        # each other. (A second wave of four cells proved nothing more: it was cut.)
                        "degree=1", "mode=naive,mps", "seed=0,1", "epoch_samples=16384", "batch_size=16",
                        # Measured windows (epochs 2-4) of ~45 s on 2 cores: longer than the skew of
                        # the cells' set-ups (up to ~35 s: the first cell to train slows the others').
                        "epochs=4",
                        f"mode.pipe_root=/tmp/rcmn{os.getpid()}", f"out_dir={out}"], cwd=ROOT, timeout=850)
    finally:
        cluster.shutdown()
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = _tables(out, "cells")
    jobs = _tables(out, "jobs")
    assert len(cells) == 4 and set(cells["status"]) == {"ok"}
    assert cells["node_id"].nunique() == 2
    assert cells["gpu_uuid"].nunique() == 4  # every GPU of both nodes
    per_cell = jobs.groupby("cell_id")["gpu_uuid"].nunique()
    assert (per_cell == 1).all()  # every cell's jobs on one GPU
    # Four cells in flight at once: some moment lies inside four GPU leases, and inside four
    # measured windows (epochs 2-4 of every cell).
    leased = cells["started_at"] + cells["lease_wait_s"]
    assert max(int(((leased <= t) & (cells["finished_at"] >= t)).sum()) for t in leased) == 4
    starts, ends = cells["measured_start_ts"], cells["measured_end_ts"]
    peak = max(int(((starts <= t) & (ends >= t)).sum()) for t in starts)
    view = cells[["label", "gpu_uuid", "started_at", "measured_start_ts", "measured_end_ts"]].copy()
    for column in ("started_at", "measured_start_ts", "measured_end_ts"):
        view[column] -= cells["started_at"].min()  # seconds since the first cell started
    assert peak == 4, view.to_string()


def test_largest_cells_start_first_when_cells_outnumber_gpus(tmp_path: Path) -> None:
    out = tmp_path / "res"
    proc = run_cli(["-m", *TINY, "degree=1,3,2", "mode=naive,mps", "cluster.num_gpus=2", f"out_dir={out}"], cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = _tables(out, "cells").sort_values("started_at")
    # No more cells started than there are GPUs: the launcher, not Ray's lease order, decides.
    assert int((cells["started_at"] < cells["finished_at"].min()).sum()) == 2
    assert list(cells["degree"]) == [3, 3, 2, 2, 1, 1], cells[["label", "started_at"]].to_string()


def test_cell_size_puts_more_samples_first_and_naive_before_mps() -> None:
    from raycolloc.driver.cells import validate_cell
    from raycolloc.driver.engine import cell_size

    specs = {}
    for degree, mode in ((1, "naive"), (7, "mps"), (7, "naive"), (3, "mig"), (3, "naive")):
        cfg = compose(["workload=tiny_cnn", "cluster=local", f"degree={degree}", f"mode={mode}"])
        specs[f"{mode}{degree}"] = validate_cell(cfg)
    order = sorted(specs, key=lambda k: cell_size(specs[k]))
    assert order == ["naive7", "mps7", "naive3", "mig3", "naive1"]
