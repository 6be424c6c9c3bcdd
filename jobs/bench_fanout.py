"""Benchmark: one sweep fanned out over every GPU of the machine vs the same sweep on one GPU.

Runs the user's command (``python -m raycolloc.sweep -m degree=1,2,3,7 mode=naive,mps ...``)
twice: with all GPUs visible, then with ``CUDA_VISIBLE_DEVICES=0`` (one GPU). Makespan is the
time from the first cell's start to the last cell's end (cells.parquet ``started_at`` /
``finished_at``; Ray's own start-up is outside it and printed separately as wall time).
Also reports how many cells were in flight at once and which GPUs were used.

    python jobs/bench_fanout.py --out fanout.json [--sweep 'degree=1,2,3,7 mode=naive,mps']
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


def run_sweep(overrides: list[str], out_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "raycolloc.sweep", "-m", *overrides, f"out_dir={out_dir}", "+rerun=true"]
    print("$", " ".join(cmd[1:]), flush=True)
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.time() - t0
    (out_dir / "sweep.log").parent.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"sweep failed ({proc.returncode}): {proc.stderr[-3000:]}")
    cells = pd.concat([pd.read_parquet(p) for p in out_dir.rglob("cells.parquet")], ignore_index=True)
    start, end = cells["started_at"].min(), cells["finished_at"].max()
    # Cells whose measured windows overlap in time: the most in flight at one moment.
    events = sorted([(t, 1) for t in cells["measured_start_ts"].dropna()] + [(t, -1) for t in cells["measured_end_ts"].dropna()])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return {"wall_s": wall, "makespan_s": float(end - start), "cells": len(cells),
            "ok": int((cells["status"] == "ok").sum()), "gpus_used": int(cells["gpu_uuid"].nunique()),
            "nodes_used": int(cells["node_id"].nunique()), "max_measured_overlap": peak,
            "cell_table": cells[["label", "status", "gpu_index", "started_at", "finished_at",
                                 "agg_samples_per_s"]].assign(started_at=lambda d: d.started_at - start,
                                                              finished_at=lambda d: d.finished_at - start).to_dict("records")}


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
    result["all_gpus"] = run_sweep(overrides, work / "all", env_all)
    print(f"all GPUs: makespan {result['all_gpus']['makespan_s']:.1f}s on {result['all_gpus']['gpus_used']} GPUs", flush=True)
    Path(args.out).write_text(json.dumps(result, indent=2, default=float))
    result["one_gpu"] = run_sweep(overrides + args.one_gpu_extra.split(), work / "one", env_one)
    result["ratio"] = result["all_gpus"]["makespan_s"] / result["one_gpu"]["makespan_s"]
    print(f"\n{'run':<10}{'cells':>6}{'ok':>4}{'GPUs':>6}{'in flight':>10}{'makespan s':>12}{'wall s':>9}")
    for key in ("all_gpus", "one_gpu"):
        r = result[key]
        print(f"{key:<10}{r['cells']:>6}{r['ok']:>4}{r['gpus_used']:>6}{r['max_measured_overlap']:>10}"
              f"{r['makespan_s']:>12.1f}{r['wall_s']:>9.1f}")
    print(f"makespan ratio all/one = {result['ratio']:.3f}")
    Path(args.out).write_text(json.dumps(result, indent=2, default=float))


if __name__ == "__main__":
    main()
