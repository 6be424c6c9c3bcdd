"""Benchmark: one sweep fanned out over every GPU of the machine vs the same sweep on one GPU.

Runs the user's command (``python -m raycolloc.sweep -m degree=1,2,3,7 mode=naive,mps ...``)
twice: with all GPUs visible, then with ``CUDA_VISIBLE_DEVICES=0`` (one GPU). Makespan is the
time from the first cell's start to the last cell's end (cells.parquet ``started_at`` /
``finished_at``; Ray's own start-up is outside it and printed separately as wall time).
Also reports how many cells were in flight at once, which GPUs were used, and per cell where its
time went (lease wait, steward prepare, trainer start, trainer setup, epochs, teardown). Before
either run it imports torch, timm and Ray once and starts CUDA on every GPU, so neither run pays
for a cold page cache.

    python jobs/bench_fanout.py --out fanout.json [--sweep 'degree=1,2,3,7 mode=naive,mps']

On a cluster already running (``--extra cluster.address=HOST:PORT``) the driver's
``CUDA_VISIBLE_DEVICES`` hides none of its GPUs: make the second run one lane instead
(``--one-gpu-extra cluster.max_concurrent_cells=1``; a lane keeps the GPU it leased for all its cells).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_collocation import _fmt  # noqa: E402 - a sibling script, not a package


def run_sweep(overrides: list[str], out_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    # repeats=1: the benchmark times the cells it names, once (repeats=auto would add runs as it saw noise).
    cmd = [sys.executable, "-m", "raycolloc.sweep", "-m", "repeats=1", *overrides, f"out_dir={out_dir}", "+rerun=true"]
    print("$", " ".join(cmd[1:]), flush=True)
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.time() - t0
    (out_dir / "sweep.log").parent.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"sweep failed ({proc.returncode}): {proc.stderr[-3000:]}")
    cells = pd.concat([pd.read_parquet(p) for p in out_dir.rglob("cells.parquet")], ignore_index=True)
    jobs = pd.concat([pd.read_parquet(p) for p in out_dir.rglob("jobs.parquet")], ignore_index=True)
    start, end = cells["started_at"].min(), cells["finished_at"].max()
    # Where a cell's time goes: waiting for its GPU and the lane's set-up (a lane's first cell only),
    # steward prepare (MPS daemon), trainer actors starting, the trainers' own setup (process,
    # CUDA, model, data), epochs, teardown, and the rest (tables, Ray's calls between the phases).
    trainer_setup = jobs.groupby("cell_id")["setup_s"].max()
    cells["wall_s"] = cells["finished_at"] - cells["started_at"]
    cells["lane_setup_s"] = cells["lane_setup_s"].fillna(0.0)  # a lane's later cells set up no lane
    cells["trainer_setup_s"] = cells["cell_id"].map(trainer_setup)
    cells["actor_start_s"] = cells["setup_s"] - cells["trainer_setup_s"]
    cells["epochs_s"] = cells["total_s"]
    cells["other_s"] = cells["wall_s"] - cells[
        ["lease_wait_s", "lane_setup_s", "prepare_s", "setup_s", "total_s", "teardown_s"]
    ].fillna(0).sum(axis=1)
    # Cells whose measured windows overlap in time: the most in flight at one moment.
    events = sorted(
        [(t, 1) for t in cells["measured_start_ts"].dropna()] + [(t, -1) for t in cells["measured_end_ts"].dropna()]
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return {
        "wall_s": wall,
        "makespan_s": float(end - start),
        "cells": len(cells),
        "ok": int((cells["status"] == "ok").sum()),
        "gpus_used": int(cells["gpu_uuid"].nunique()),
        "nodes_used": int(cells["node_id"].nunique()),
        "max_measured_overlap": peak,
        "cell_table": cells[["label", "status", "gpu_index", "started_at", "finished_at", "agg_samples_per_s", *PHASES]]
        .assign(started_at=lambda d: d.started_at - start, finished_at=lambda d: d.finished_at - start)
        .to_dict("records"),
    }


PHASES = [
    "wall_s",
    "lease_wait_s",
    "lane_setup_s",
    "prepare_s",
    "actor_start_s",
    "trainer_setup_s",
    "epochs_s",
    "teardown_s",
    "other_s",
]


def print_cells(result: dict[str, Any]) -> None:
    """Per cell, both runs side by side: when it ran and where its time went."""
    one = {c["label"]: c for c in result.get("one_gpu", {}).get("cell_table", [])}
    print(f"\n{'cell':<34}{'run':<9}{'GPU':>4}{'start':>7}{'end':>7}" + "".join(f"{k[:-2]:>14}" for k in PHASES))
    for c in sorted(result["all_gpus"]["cell_table"], key=lambda c: c["started_at"]):
        for run, row in (("all", c), ("one", one.get(c["label"]))):
            if row is None:
                continue
            print(
                f"{c['label'][:33]:<34}{run:<9}{_fmt(row['gpu_index'], '.0f'):>4}{row['started_at']:>7.1f}"
                f"{row['finished_at']:>7.1f}" + "".join(f"{_fmt(row[k], '.1f'):>14}" for k in PHASES)
            )


WARM = (
    "import time; t = time.perf_counter(); import torch, timm, ray, raycolloc.job.trainer\n"
    "for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):\n"
    "    torch.zeros(1, device=f'cuda:{i}')\n"
    "print(f'caches warm in {time.perf_counter() - t:.1f}s', flush=True)"
)


def warm_caches() -> None:
    """Read torch, timm and Ray from disk, and start CUDA on every GPU, once before either run.

    A fresh machine's first cells otherwise pay for the cold page cache, and only in the run that
    goes first; this benchmark measures the fan-out, not the disk.
    """
    subprocess.run([sys.executable, "-c", WARM], cwd=ROOT, check=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", default="degree=1,2,3,7 mode=naive,mps workload=resnet26_cifar10 epoch_samples=51200")
    p.add_argument("--extra", default="", help="more overrides for both runs, e.g. cluster=local cluster.num_gpus=4")
    p.add_argument("--one-gpu-extra", default="", help="overrides for the one-GPU run only (sim: cluster.num_gpus=1)")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="fanout"))
    overrides = args.sweep.split() + args.extra.split()
    env_all = dict(os.environ)
    env_one = dict(os.environ, CUDA_VISIBLE_DEVICES="0")
    result: dict[str, Any] = {"sweep": overrides}
    warm_caches()
    result["all_gpus"] = run_sweep(overrides, work / "all", env_all)
    every = result["all_gpus"]
    print(f"all GPUs: makespan {every['makespan_s']:.1f}s on {every['gpus_used']} GPUs", flush=True)
    Path(args.out).write_text(json.dumps(result, indent=2, default=float))
    result["one_gpu"] = run_sweep(overrides + args.one_gpu_extra.split(), work / "one", env_one)
    result["ratio"] = result["all_gpus"]["makespan_s"] / result["one_gpu"]["makespan_s"]
    print(f"\n{'run':<10}{'cells':>6}{'ok':>4}{'GPUs':>6}{'in flight':>10}{'makespan s':>12}{'wall s':>9}")
    for key in ("all_gpus", "one_gpu"):
        r = result[key]
        print(
            f"{key:<10}{r['cells']:>6}{r['ok']:>4}{r['gpus_used']:>6}{r['max_measured_overlap']:>10}"
            f"{r['makespan_s']:>12.1f}{r['wall_s']:>9.1f}"
        )
    print(f"makespan ratio all/one = {result['ratio']:.3f}")
    print_cells(result)
    Path(args.out).write_text(json.dumps(result, indent=2, default=float))


if __name__ == "__main__":
    main()
