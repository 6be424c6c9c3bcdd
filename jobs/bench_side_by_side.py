"""Benchmark: how much do cells on a node's other GPUs disturb a cell's numbers? (issue 30)

Runs one sweep three ways, each a separate invocation with a fresh Ray (jobs/bench_reproducibility.py's
``run_sweep``): **alone** (``cluster.max_concurrent_cells=1``: one cell at a time on the node),
**together** (the default: one cell per GPU at once) and **isolated** (``cluster.isolate_measurement=true``:
cells set up and warm up side by side, but their measured windows do not overlap). Per configuration it
prints each way's aggregate rate with its 95% interval, the ratio to *alone* with its interval, and
whether that ratio is beyond the noise (its interval excludes 1); and how many cells' measured windows
overlapped (``overlapping_cells``). Writes all of it as JSON.

    python jobs/bench_side_by_side.py --out side.json -- -m degree=1,2 mode=naive,mps \\
        workload=resnet26_cifar10 epoch_samples=25600
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reproducibility import KEY, _interval, measured, run_sweep  # a sibling script: jobs/ is not a package

from analysis.load import load_sweeps
from raycolloc.results.stats import ratio_interval, verdict

WAYS = {
    "alone": ["cluster.max_concurrent_cells=1"],
    "together": [],
    "isolated": ["cluster.isolate_measurement=true"],
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--work", default=None, help="where the sweeps go (default: a new temporary directory)")
    p.add_argument("sweep", nargs=argparse.REMAINDER, help="-- then the sweep's overrides")
    args = p.parse_args()
    sweep_args = [a for a in args.sweep if a != "--"]
    work = Path(args.work or tempfile.mkdtemp(prefix="side-by-side-"))
    tables: dict[str, pd.DataFrame] = {}
    overlaps: dict[str, list[int]] = {}
    gpu_s: dict[str, float] = {}
    for way, extra in WAYS.items():
        sweep, _ = run_sweep([*sweep_args, *extra], work / way)
        tables[way], gpu_s[way] = measured(sweep)
        cells = load_sweeps([sweep]).cells
        overlaps[way] = [int(v) for v in cells["overlapping_cells"].dropna()]
    rows: list[dict[str, Any]] = []
    alone = tables["alone"].set_index(KEY)
    for way in ("together", "isolated"):
        for key, r in tables[way].set_index(KEY).iterrows():
            if key not in alone.index or pd.isna(r["agg_samples_per_s"]):
                continue
            base, here = _interval(alone.loc[key], "agg_samples_per_s"), _interval(r, "agg_samples_per_s")
            if base is None or here is None:
                continue
            ratio = ratio_interval(here, base)
            rows.append(
                {
                    **dict(zip(KEY, key, strict=True)),
                    "way": way,
                    "alone": base.value,
                    "alone_pm_pct": 100 * base.rel_half_width if base.known else None,
                    "rate": here.value,
                    "rate_pm_pct": 100 * here.rel_half_width if here.known else None,
                    "ratio": ratio.value,
                    "ratio_low": ratio.low,
                    "ratio_high": ratio.high,
                    "beyond_noise": verdict(ratio, 1.0) != "inconclusive",
                }
            )
    print(
        f"{'workload':<20}{'mode':<7}{'deg':>4}  {'way':<9}{'alone':>10}{'±%':>6}"
        f"{'rate':>10}{'±%':>6}{'ratio':>8}  beyond noise"
    )
    for r in rows:
        pm_a = "-" if r["alone_pm_pct"] is None else f"{r['alone_pm_pct']:.1f}"
        pm_r = "-" if r["rate_pm_pct"] is None else f"{r['rate_pm_pct']:.1f}"
        print(
            f"{r['workload']:<20}{r['mode']:<7}{r['degree']:>4}  {r['way']:<9}{r['alone']:>10,.0f}{pm_a:>6}"
            f"{r['rate']:>10,.0f}{pm_r:>6}{r['ratio']:>8.3f}  {r['beyond_noise']}"
        )
    summary = {
        way: {
            "beyond_noise": sum(r["beyond_noise"] for r in rows if r["way"] == way),
            "configurations": sum(r["way"] == way for r in rows),
            "mean_abs_change_pct": (
                100
                * sum(abs(r["ratio"] - 1) for r in rows if r["way"] == way)
                / max(1, sum(r["way"] == way for r in rows))
            ),
        }
        for way in ("together", "isolated")
    }
    for way, s in summary.items():
        print(
            f"{way}: {s['beyond_noise']} of {s['configurations']} configurations differ from alone beyond the noise; "
            f"mean |change| {s['mean_abs_change_pct']:.1f}%; overlapping_cells {overlaps[way]}"
        )
    out = {"rows": rows, "summary": summary, "overlapping_cells": overlaps, "gpu_s": gpu_s, "work": str(work)}
    Path(args.out).write_text(json.dumps(out, indent=2, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
