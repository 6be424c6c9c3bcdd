"""The real command line: Hydra multirun through the Ray launcher across GPUs and nodes, radT plans.

Elsewhere: a first multirun, resume and ``+rerun=true`` in ``test_trust.py`` (items 1 and 3);
SIGKILL, Ctrl-C and their re-runs in ``test_faults.py``."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from analysis.load import load_sweeps

from .conftest import ROOT, SHORT_TMP, compose, run_cli, short_tmp

TINY = ["workload=tiny_cnn", "cluster=local", "epoch_samples=128"]


def _tables(root: Path, name: str) -> pd.DataFrame:
    """Every result under ``root``, references to earlier runs' results followed (as a report reads them)."""
    return load_sweeps([root], all_results=True).table(name)


@pytest.mark.slow  # a plan of two groups, run, then run again
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
    pipe_root = SHORT_TMP / f"rcplan{os.getpid()}"
    proc = run_cli(
        [
            f"+plan={plan}",
            "cluster=local",
            "cluster.num_gpus=2",
            "epoch_samples=128",
            f"mode.pipe_root={pipe_root}",
            f"out_dir={out}",
        ],
        cwd=ROOT,
    )
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
    plan.write_text(
        "Experiment,Workload,Status,Run,Devices,Collocation,File,Listeners,Params\n"
        "1,1,,a,0,-,train.py,smi,--model vggg16 --data /d/cifar10\n"
    )
    proc = run_cli(
        [f"+plan={plan}", "cluster=local", f"out_dir={tmp_path / 'res'}"], cwd=ROOT, timeout=120, own_ray=True
    )  # refused before Ray
    assert proc.returncode != 0
    assert "plan.csv:2" in proc.stderr + proc.stdout and "vggg16" in proc.stderr + proc.stdout
    assert "column Params" in proc.stderr + proc.stdout and "allowed: vgg16" in proc.stderr + proc.stdout


@pytest.mark.timeout(900)
@pytest.mark.slow  # a Ray instance of two nodes, four cells of two 4-second epochs
def test_two_nodes_four_gpus_run_four_cells_at_once(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    # No dashboard: it would take Ray's default port 8265 from a test beside this one that needs it.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 6, "num_gpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=6, num_gpus=2)
    cluster.wait_for_nodes()
    out = tmp_path / "res"
    try:
        proc = run_cli(
            [
                "-m",
                "cluster=local",
                "repeats=1",
                f"cluster.address={cluster.address}",
                # Four one-job cells, one per GPU. Their steps sleep (tests/sleepy_workload.py),
                # as GPU-bound steps leave a node's CPUs free: with CPU-bound tiny_cnn steps
                # four trainers on CI's 2 cores slowed each other's set-up by up to ~35 s, and
                # only measured windows of ~45 s overlapped.
                "workload=python",
                "workload.entry=tests.sleepy_workload:build",
                # The four jobs' first steps wait for each other: their epochs start together however
                # long each cell's set-up took (up to ~35 s apart on a loaded 2-core machine), so the
                # windows overlap by the order of events, not by epochs outlasting the set-up skew.
                f"workload.args={{meet_dir:'{short_tmp('meet')}',meet:4}}",
                "batch_size=16",
                "degree=1",
                "mode=naive,mps",
                "seed=0,1",
                # Epochs of 4 s (a time budget, whatever the load): after the meeting only a cell's
                # barrier between its epochs stands between the four windows' starts (3 s in
                # tests/test_two_nodes.py, with two cells; 6 s here before).
                "epoch_samples=1000000",
                "epoch_time_s=4",
                "epochs=2",
                f"mode.pipe_root={SHORT_TMP}/rcmn{os.getpid()}",
                f"out_dir={out}",
            ],
            cwd=ROOT,
            timeout=850,
        )
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
    # measured windows (epoch 2 of every cell).
    leased = cells["started_at"] + cells["lease_wait_s"]
    assert max(int(((leased <= t) & (cells["finished_at"] >= t)).sum()) for t in leased) == 4
    starts, ends = cells["measured_start_ts"], cells["measured_end_ts"]
    peak = max(int(((starts <= t) & (ends >= t)).sum()) for t in starts)
    view = cells[["label", "gpu_uuid", "started_at", "measured_start_ts", "measured_end_ts"]].copy()
    for column in ("started_at", "measured_start_ts", "measured_end_ts"):
        view[column] -= cells["started_at"].min()  # seconds since the first cell started
    assert peak == 4, view.to_string()


@pytest.mark.slow  # a sweep of six cells on two GPUs
def test_largest_cells_start_first_when_cells_outnumber_gpus(tmp_path: Path) -> None:
    out = tmp_path / "res"
    args = ["-m", *TINY, "degree=1,3,2", "mode=naive,mps", "cluster.num_gpus=2", "repeats=1", f"out_dir={out}"]
    proc = run_cli(args, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = _tables(out, "cells").sort_values("started_at")
    # No more cells started than there are GPUs: the launcher, not Ray's lease order, decides.
    assert int((cells["started_at"] < cells["finished_at"].min()).sum()) == 2
    assert list(cells["degree"]) == [3, 3, 2, 2, 1, 1], cells[["label", "started_at"]].to_string()


def test_cell_size_puts_more_samples_first_and_naive_before_mps() -> None:
    from raycolloc.driver.cell_specs import validate_cell
    from raycolloc.driver.engine import cell_size

    specs = {}
    for degree, mode in ((1, "naive"), (7, "mps"), (7, "naive"), (3, "mig"), (3, "naive")):
        cfg = compose(["workload=tiny_cnn", "cluster=local", f"degree={degree}", f"mode={mode}"])
        specs[f"{mode}{degree}"] = validate_cell(cfg)
    order = sorted(specs, key=lambda k: cell_size(specs[k]))
    assert order == ["naive7", "mps7", "naive3", "mig3", "naive1"]


@pytest.mark.slow  # a sweep that starts (and stops) a Ray instance of its own
def test_a_normal_run_leaves_no_fork_server_files_and_no_lock(tmp_path: Path) -> None:
    """Issue 29, item 7: every run, normal ones too, left the fork server's socket and log in the pipe
    root. The steward's fork server ends with it, when the sweep stops its Ray instance."""
    out = tmp_path / "out"
    pipe_root = SHORT_TMP / f"rcfs{os.getpid()}"  # short: Unix socket paths
    proc = run_cli(
        ["-m", *TINY, "degree=1", "mode=naive,mps", "repeats=1", f"mode.pipe_root={pipe_root}", f"out_dir={out}"],
        cwd=ROOT,
        own_ray=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 of 2 cells have a result" in proc.stdout
    deadline = time.monotonic() + 30  # Ray's processes follow the driver within seconds
    while list(pipe_root.glob("forkserver-*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    # Nothing of the run stays (the simulated MPS control lies with the simulated GPUs: issue 46).
    assert sorted(p.name for p in pipe_root.iterdir()) == []
    from raycolloc.doctor import main as doctor

    assert doctor(["--pipe-root", str(pipe_root)]) == 0  # issue 46, item 5: the doctor is clean after a run
    assert not (out / ".raycolloc.lock").exists()
    shutil.rmtree(pipe_root, ignore_errors=True)
