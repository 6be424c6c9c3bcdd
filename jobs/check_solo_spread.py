"""Check: how much raycolloc's degree-1 cell moves between repeats, against a raw PyTorch process.

Issue 30's acceptance on one GPU: raycolloc's naive x1 with ``repeats=5`` (one sweep, the real command
line, a fresh Ray of its own) has a spread (fastest / slowest) of at most 1.10, and its median is at
least 0.97 of a raw PyTorch process (jobs/raw_train.py) pinned to one core that no other process uses
(raycolloc is not running then). The raw process runs before and after the sweep (A B A), so a host
that drifts over the minutes shows in the raw numbers too.

    python jobs/check_solo_spread.py --out solo.json [--workload resnet26_cifar10] [--repeats 5] [--raw-runs 3]

Prints one table and writes it as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collocation import ROOT, WORKLOADS, raw_cell  # a sibling script: jobs/ is not a package


def raycolloc_runs(args: argparse.Namespace, out_dir: Path) -> list[float]:
    """The degree-1 cell's aggregate rate of every repeat, from one sweep through the command line."""
    cmd = [
        sys.executable,
        "-m",
        "raycolloc.sweep",
        "-m",
        "degree=1",
        "mode=naive",
        f"workload={args.workload}",
        f"batch_size={args.batch_size}",
        f"epoch_samples={args.epoch_samples}",
        f"repeats={args.repeats}",
        f"out_dir={out_dir}",
        *args.overrides,
    ]
    print("$", " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, check=False)
    (out_dir / "sweep.log").write_text(proc.stdout + proc.stderr)
    print(proc.stdout[-1500:], flush=True)
    if proc.returncode != 0:
        raise RuntimeError(f"sweep failed ({proc.returncode}): {proc.stderr[-3000:]}")
    cells = pd.concat([pd.read_parquet(p) for p in out_dir.rglob("cells.parquet")], ignore_index=True)
    ok = cells[cells["status"] == "ok"].sort_values("repeat")
    return [float(v) for v in ok["agg_samples_per_s"]]


def raw_runs(args: argparse.Namespace, n: int) -> list[float]:
    """``n`` raw single-process runs, each pinned to one core (the one raycolloc would give the job)."""
    raw_args = argparse.Namespace(
        workload=args.workload,
        batch_size=args.batch_size,
        epoch_samples=args.epoch_samples,
        window_s=args.window_s,
        backend=args.backend,
        cpu_affinity="auto",
    )
    opts = {"compile": "off", "amp": "off", "placement": "host", "channels_last": "false"}
    return [float(raw_cell(raw_args, "naive", 1, opts)["raw_samples_per_s"]) for _ in range(n)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="resnet26_cifar10", choices=sorted(WORKLOADS))
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epoch-samples", type=int, default=25600)
    p.add_argument("--window-s", type=float, default=8.0, help="each raw run's measured window")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--raw-runs", type=int, default=3, help="raw runs before the sweep, and again after")
    p.add_argument("--backend", default="nvml", choices=["nvml", "sim"], help="sim: plumbing test only")
    p.add_argument("--out", required=True)
    p.add_argument("--work", default=None, help="where the sweep writes (default: a new temporary directory)")
    p.add_argument("overrides", nargs="*", help="more sweep overrides")
    args = p.parse_args()
    if args.backend == "sim":
        args.overrides.append("cluster.backend=sim")
    before = raw_runs(args, args.raw_runs)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="solo-spread-"))
    work.mkdir(parents=True, exist_ok=True)
    cells = raycolloc_runs(args, work)
    after = raw_runs(args, args.raw_runs)
    raw = before + after
    out: dict[str, Any] = {
        "workload": args.workload,
        "raw_before": before,
        "raw_after": after,
        "raycolloc": cells,
        "raw_median": statistics.median(raw),
        "raycolloc_median": statistics.median(cells) if cells else None,
        "raycolloc_spread": max(cells) / min(cells) if cells else None,
        "raw_spread": max(raw) / min(raw),
    }
    out["median_vs_raw"] = out["raycolloc_median"] / out["raw_median"] if cells else None
    out["pass"] = bool(cells) and out["raycolloc_spread"] <= 1.10 and out["median_vs_raw"] >= 0.97
    print(f"{'side':<12} {'runs (samples/s)':<60} {'median':>9} {'spread':>7}")
    print(f"{'raw':<12} {' '.join(f'{v:,.0f}' for v in raw):<60} {out['raw_median']:>9,.0f} {out['raw_spread']:>7.3f}")
    if cells:
        line = " ".join(f"{v:,.0f}" for v in cells)
        print(f"{'raycolloc':<12} {line:<60} {out['raycolloc_median']:>9,.0f} {out['raycolloc_spread']:>7.3f}")
        print(
            f"raycolloc median / raw median: {out['median_vs_raw']:.3f}; pass (spread <= 1.10, >= 0.97): {out['pass']}"
        )
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
