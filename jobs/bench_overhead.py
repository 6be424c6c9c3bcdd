"""Benchmark: where a cell's fixed cost goes (everything but its epochs), and each saving alone.

Runs the same sweep once per variant, each a fresh command (its own Ray instance), and reads the
cells and jobs tables: per variant the sweep's wall time, the median and 90th-percentile fixed cost
per cell (``finished_at - started_at - total_s``), the share of GPU time spent in measured epochs,
and the median of every phase (cells: lease, lane set-up, prepare, setup, sampler start, barrier,
teardown; jobs: process start, imports, CUDA context, model, data).

Variants switch one saving off at a time:

* ``all``: every saving on (the defaults);
* ``exec``: training processes exec'd afresh instead of forked from the warm parent (``trainer.spawn=exec``);
* ``lease-per-cell``: a GPU lease per cell instead of one per lane (``cluster.reuse_lease=false``);
* ``stop-mps``: the MPS daemon stopped after every cell (``mode.keep_daemon=false``);
* ``fresh-actors``: new trainer actors for every cell instead of the lane's (``trainer.reuse_actors=false``);
* ``none``: all four off;
* ``before``: the code of another checkout (``--before-tree DIR``, e.g. the commit you start from),
  run through its own ``python -m raycolloc.sweep``.

    python jobs/bench_overhead.py --out overhead.json --variants before,all,exec,lease-per-cell,stop-mps \\
        [--sweep 'degree=1,2,3,7 mode=naive,mps workload=resnet26_cifar10 epoch_samples=25600'] \\
        [--before-tree /path/to/old/checkout] [--extra 'cluster=local']
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
VARIANTS: dict[str, list[str]] = {
    "all": [],
    "exec": ["trainer.spawn=exec"],
    "lease-per-cell": ["cluster.reuse_lease=false"],
    "stop-mps": ["mode.keep_daemon=false"],
    "fresh-actors": ["trainer.reuse_actors=false"],
    "none": ["trainer.spawn=exec", "cluster.reuse_lease=false", "mode.keep_daemon=false", "trainer.reuse_actors=false"],
    "before": [],
}
CELL_PHASES = ["lease_wait_s", "lane_setup_s", "prepare_s", "setup_s", "sampler_start_s", "barrier_s", "teardown_s"]
JOB_PHASES = ["spawn_s", "import_s", "cuda_init_s", "model_s", "data_s"]


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v == v]
    return statistics.median(values) if values else None


def _p90(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None and v == v)
    return values[min(len(values) - 1, int(0.9 * len(values)))] if values else None


def run_variant(name: str, overrides: list[str], out_dir: Path, before_tree: Path | None) -> dict[str, Any]:
    """One sweep of the variant; its wall time and the phases of its cells and jobs."""
    tree = before_tree if name == "before" else ROOT
    assert tree is not None
    env = dict(os.environ)
    if name == "before":  # the old checkout's own package, not this one
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(tree), env.get("PYTHONPATH", "").replace(str(ROOT), "")) if p
        )
    cmd = [
        sys.executable,
        "-m",
        "raycolloc.sweep",
        "-m",
        *overrides,
        *VARIANTS[name],
        f"out_dir={out_dir}",
        "+rerun=true",
        "repeats=1",  # the benchmark times the cells it names, once (its own repeats are its variants' pairs)
    ]
    print(f"$ {' '.join(cmd[1:])}" + (f"   (in {tree})" if name == "before" else ""), flush=True)
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    wall = time.time() - t0
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"variant {name}: sweep failed ({proc.returncode}): {proc.stderr[-3000:]}")
    cells = pd.concat([pd.read_parquet(p) for p in out_dir.rglob("cells.parquet")], ignore_index=True)
    jobs = pd.concat([pd.read_parquet(p) for p in out_dir.rglob("jobs.parquet")], ignore_index=True)
    cells["fixed"] = cells["finished_at"] - cells["started_at"] - cells["total_s"].fillna(0.0)
    gpus = max(1, int(cells["gpu_uuid"].nunique()))
    result: dict[str, Any] = {
        "variant": name,
        "wall_s": wall,
        "cells": len(cells),
        "ok": int((cells["status"] == "ok").sum()),
        "gpus": gpus,
        "spawn": sorted(jobs["spawn"].dropna().unique()) if "spawn" in jobs else [],
        "fixed_median_s": _median(list(cells["fixed"])),
        "fixed_p90_s": _p90(list(cells["fixed"])),
        "fixed_sum_s": float(cells["fixed"].sum()),
        "epochs_sum_s": float(cells["total_s"].fillna(0).sum()),
        "measured_share": float(cells["makespan_s"].fillna(0).sum()) / (wall * gpus),
        "cells_table": cells.drop(columns=["config_json", "env_json"], errors="ignore").to_dict("records"),
    }
    for column in CELL_PHASES:
        result[column] = _median(list(cells[column])) if column in cells else None
    for column in JOB_PHASES:
        result[f"job_{column}"] = _median(list(jobs[column])) if column in jobs else None
    return result


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None or value != value else format(value, spec)


def print_table(results: list[dict[str, Any]]) -> None:
    head = [
        "wall_s",
        "fixed_median_s",
        "fixed_p90_s",
        "measured_share",
        *CELL_PHASES,
        *(f"job_{j}" for j in JOB_PHASES),
    ]
    names = [h.removesuffix("_s").replace("job_", "j.") for h in head]
    print(f"\n{'variant':<16}{'cells':>6}" + "".join(f"{n[:13]:>14}" for n in names))
    for r in results:
        print(
            f"{r['variant']:<16}{r['ok']:>3}/{r['cells']:<2}"
            + "".join(f"{_fmt(r[h], '.1%') if h == 'measured_share' else _fmt(r[h]):>14}" for h in head)
        )
    print(
        "(medians over cells and jobs, seconds; fixed = finished_at - started_at - total_s; measured_share ="
        " measured epochs / (wall x GPUs))"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", default="degree=1,2,3,7 mode=naive,mps workload=resnet26_cifar10 epoch_samples=25600")
    p.add_argument("--extra", default="", help="more overrides for every variant, e.g. cluster=local")
    p.add_argument(
        "--variants", default="all,exec,lease-per-cell,stop-mps", help=f"comma list of {', '.join(VARIANTS)}"
    )
    p.add_argument("--before-tree", default=None, help="a checkout of the code to compare with (variant 'before')")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    names = [v for v in args.variants.split(",") if v]
    if not names or any(v not in VARIANTS for v in names):
        p.error(f"--variants: {args.variants!r}; allowed: a comma list of {', '.join(VARIANTS)}")
    before = Path(args.before_tree).resolve() if args.before_tree else None
    if "before" in names and (before is None or not (before / "raycolloc" / "sweep.py").exists()):
        p.error("--variants before needs --before-tree DIR, a checkout holding raycolloc/sweep.py")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="overhead"))
    overrides = args.sweep.split() + args.extra.split()
    results = []
    for name in names:
        results.append(run_variant(name, overrides, work / name, before))
        r = results[-1]
        print(
            f"{name}: wall {r['wall_s']:.1f}s, fixed cost per cell median {_fmt(r['fixed_median_s'])}s, "
            f"measured share {r['measured_share']:.1%}",
            flush=True,
        )
        Path(args.out).write_text(json.dumps({"sweep": overrides, "results": results}, indent=1, default=float))
    print_table(results)
    Path(args.out).write_text(json.dumps({"sweep": overrides, "results": results}, indent=1, default=float))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
