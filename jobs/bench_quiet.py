"""What the node's own raycolloc processes spend while a sweep runs: the driver, the steward (its
sampler is a thread of it) and the progress board, in CPU seconds (psutil ``cpu_times``).

    python jobs/bench_quiet.py --out quiet.json                      # this checkout
    python jobs/bench_quiet.py --root /path/to/other/checkout --label before --out before.json

It runs one small sweep on simulated GPUs (its own local Ray instance) from the source tree
``--root``, polls every process of it every half second, and keeps each one's last CPU times (a
process that ends keeps what it had). Issue 30 measured the driver at 14-22% of a core and the
steward with its sampler at 9% on an H200 host; with ``cluster.reserved_cpus`` they run on reserved
cores, and what they spend there is what this counts.
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

import psutil

SWEEP = ["-m", "workload=tiny_cnn", "cluster=local", "degree=1,2", "mode=naive,mps", "epoch_time_s=4"]
SWEEP += ["epoch_samples=100000000", "cluster.num_gpus=2"]
ROLES = {"driver": None, "steward": "Steward", "board": "ProgressBoard"}


def _role(proc: psutil.Process, driver: int) -> str | None:
    if proc.pid == driver:
        return "driver"
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return None
    return next((role for role, mark in ROLES.items() if mark and mark in line), None)


def measure(root: Path, out_dir: Path) -> dict[str, float]:
    """Run the sweep from ``root``; CPU seconds (user + system) per role."""
    env = {**os.environ, "PYTHONPATH": str(root), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "-m", "raycolloc.sweep", *SWEEP, f"out_dir={out_dir}", "+rerun=true"]
    sweep = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: dict[int, tuple[str, float]] = {}
    t0 = time.monotonic()
    while sweep.poll() is None:
        try:
            procs = [psutil.Process(sweep.pid), *psutil.Process(sweep.pid).children(recursive=True)]
        except psutil.Error:
            break
        for proc in procs:
            role = _role(proc, sweep.pid)
            if role is None:
                continue
            try:
                times = proc.cpu_times()
                seen[proc.pid] = (role, times.user + times.system)
            except psutil.Error:
                continue
        time.sleep(0.5)
    totals = {role: 0.0 for role in ROLES}
    for role, cpu in seen.values():
        totals[role] += cpu
    totals["wall_s"] = time.monotonic() - t0
    totals["exit"] = float(sweep.returncode or 0)
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--out", type=Path, default=Path("bench_quiet.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-quiet-") as tmp:
        totals = measure(args.root.resolve(), Path(tmp))
    print(f"{'process':<10}{'CPU s':>8}{'% of wall':>11}   ({args.label}, {totals['wall_s']:.1f} s wall)")
    for role in ROLES:
        print(f"{role:<10}{totals[role]:>8.2f}{100 * totals[role] / totals['wall_s']:>10.1f}%")
    args.out.write_text(json.dumps({"label": args.label, "root": str(args.root), "sweep": SWEEP, **totals}, indent=1))
    sys.exit(int(totals["exit"]))


if __name__ == "__main__":
    main()
