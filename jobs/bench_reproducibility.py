"""Benchmark: is a sweep's gain the same when the sweep runs again? (issue 30)

Runs the same sweep twice as separate invocations of ``python -m raycolloc.sweep`` (each its own
process and, unless the overrides name ``cluster.address``, its own fresh Ray instance), ``--gap-s``
seconds apart, each into its own output directory with ``+rerun=true`` (nothing reused). Then, per
configuration (workload, GPU, mode, degree, settings): the gain against its solo in run A and in
run B with their 95% intervals, |A/B - 1|, whether the two intervals overlap; degree-1
configurations compare their rate (samples/s) instead, their gain being 1 by definition. Each run's
GPU time is the sum of its cells' wall time (a cell holds its GPU from start to finish).

    python jobs/bench_reproducibility.py --out repro.json [--gap-s 120] -- \\
        -m degree=1,2,3,7 mode=naive,mps workload=resnet26_cifar10 epoch_samples=25600

It prints the table and the summary (median and max |A/B - 1| over the gains, the share of
configurations whose intervals overlap, the widest half-width) and writes all of it as JSON.
Exit status: 0 done, 1 a sweep failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.gains import gain_table
from analysis.load import load_sweeps
from raycolloc.results.stats import Interval, bounds, overlap

ROOT = Path(__file__).resolve().parents[1]

KEY = ["workload", "gpu_name", "mode", "degree", "settings"]


def run_sweep(sweep_args: Sequence[str], out_dir: Path) -> tuple[Path, float]:
    """One invocation of the sweep into ``out_dir``; returns its sweep directory and wall seconds.

    Raises:
        RuntimeError: the sweep exited with an error (its output is in ``out_dir/sweep.log``).
    """
    args = list(sweep_args)
    if "-m" not in args and "--multirun" not in args:
        args.insert(0, "-m")
    cmd = [sys.executable, "-m", "raycolloc.sweep", *args, f"out_dir={out_dir}", "+rerun=true"]
    print("$", " ".join(cmd[1:]), flush=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, check=False)
    wall = time.monotonic() - start
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"sweep failed ({proc.returncode}), see {out_dir / 'sweep.log'}: {proc.stderr[-2000:]}")
    (sweep,) = sorted((out_dir / "multirun").glob("*/*"))[-1:]
    return sweep, wall


RATES = {"epoch": "the epoch's samples over its wall time", "windows": "the median of its windows' rates"}


def as_rate(cells: pd.DataFrame, rate: str) -> pd.DataFrame:
    """The cells with their aggregate rate taken as ``rate`` says (:data:`RATES`): ``windows`` puts
    ``agg_rate_median`` in ``agg_samples_per_s`` and scales the within-run bounds with it."""
    if rate == "epoch":
        return cells
    if "agg_rate_median" not in cells or cells["agg_rate_median"].isna().all():
        raise RuntimeError("these results have no agg_rate_median (made before the windows' median existed)")
    scale = cells["agg_rate_median"] / cells["agg_samples_per_s"]
    return cells.assign(
        agg_samples_per_s=cells["agg_rate_median"],
        agg_rate_low=cells["agg_rate_low"] * scale,
        agg_rate_high=cells["agg_rate_high"] * scale,
    )


def measured(sweep: Path, rates: Sequence[str] = ("epoch",)) -> tuple[dict[str, pd.DataFrame], float]:
    """The sweep's gain table under each rate of ``rates`` and its GPU time (its cells' wall time, summed)."""
    data = load_sweeps([sweep])
    gpu_s = float((data.cells["finished_at"] - data.cells["started_at"]).clip(lower=0).sum())
    return {rate: gain_table(as_rate(data.cells, rate), data.jobs) for rate in rates}, gpu_s


def _interval(row: pd.Series, column: str) -> Interval | None:
    value = row.get(column)
    if value is None or pd.isna(value):
        return None
    return bounds(float(value), row.get(f"{column}_low"), row.get(f"{column}_high"))


def compare(a: pd.DataFrame, b: pd.DataFrame) -> list[dict[str, Any]]:
    """Per configuration: run A's and run B's number (gain against the solo; a degree-1
    configuration's rate), both intervals, |A/B - 1| and whether the intervals overlap."""
    rows = []
    both = a.merge(b, on=KEY, how="outer", suffixes=("_a", "_b"))
    for _, r in both.sort_values(["workload", "degree", "mode"]).iterrows():
        column = "agg_samples_per_s" if r["degree"] == 1 else "gain_vs_solo"
        ia = _interval(r.rename(lambda c: c[:-2] if c.endswith("_a") else c), column)
        ib = _interval(r.rename(lambda c: c[:-2] if c.endswith("_b") else c), column)
        row: dict[str, Any] = {k: r[k] for k in KEY}
        row["metric"] = "samples/s" if column == "agg_samples_per_s" else "gain"
        for side, found in (("a", ia), ("b", ib)):
            row[side] = found.value if found else None
            row[f"{side}_half_width_pct"] = 100 * found.rel_half_width if found and found.known else None
        row["diff_pct"] = 100 * abs(ia.value / ib.value - 1) if ia and ib and ib.value else None
        row["overlap"] = overlap(ia, ib) if ia and ib and (ia.known or ib.known) else None
        rows.append(row)
    return rows


def summarise_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Over the gains (degree > 1): median and max |A/B - 1|, share overlapping, widest half-width."""
    gains = [r for r in rows if r["metric"] == "gain"]
    diffs = [r["diff_pct"] for r in gains if r["diff_pct"] is not None]
    judged = [r["overlap"] for r in gains if r["overlap"] is not None]
    widths = [w for r in gains for w in (r["a_half_width_pct"], r["b_half_width_pct"]) if w is not None]
    return {
        "configurations": len(gains),
        "median_diff_pct": statistics.median(diffs) if diffs else None,
        "max_diff_pct": max(diffs) if diffs else None,
        "overlap_share": sum(judged) / len(judged) if judged else None,
        "max_half_width_pct": max(widths) if widths else None,
    }


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The comparison as fixed-width text."""
    head = f"{'workload':<22}{'mode':<7}{'deg':>4}  {'metric':<10}{'A':>12}{'±A%':>7}{'B':>12}{'±B%':>7}"
    lines = [head + f"{'|A/B-1| %':>11}  overlap"]
    for r in rows:
        spec = ",.0f" if r["metric"] == "samples/s" else ".3f"
        lines.append(
            f"{r['workload']:<22}{r['mode']:<7}{r['degree']:>4}  {r['metric']:<10}{_fmt(r['a'], spec):>12}"
            f"{_fmt(r['a_half_width_pct'], '.1f'):>7}{_fmt(r['b'], spec):>12}{_fmt(r['b_half_width_pct'], '.1f'):>7}"
            f"{_fmt(r['diff_pct'], '.1f'):>11}  {'-' if r['overlap'] is None else 'yes' if r['overlap'] else 'NO'}"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="JSON file for the table and the summary")
    parser.add_argument("--gap-s", type=float, default=0.0, help="seconds to wait between the two sweeps")
    parser.add_argument("--work", type=Path, help="where the sweeps write (default: a new temporary directory)")
    parser.add_argument(
        "--rates",
        default="epoch,windows",
        help="the cell rates to compare the runs by, comma-separated: epoch (the study's metric), windows "
        "(the median of each job's window rates); default both",
    )
    parser.add_argument("sweep", nargs=argparse.REMAINDER, help="-- then the sweep's arguments")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run both sweeps, compare, print and write; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    sweep_args = [a for a in args.sweep if a != "--"] if args.sweep[:1] == ["--"] else args.sweep
    if not sweep_args:
        parser.print_usage(sys.stderr)
        print("error: give the sweep's arguments after --, e.g. -- -m degree=1,2 mode=naive", file=sys.stderr)
        return 2
    if args.gap_s < 0:
        print(f"error: --gap-s must be >= 0, got {args.gap_s}", file=sys.stderr)
        return 2
    rates = [r for r in args.rates.split(",") if r]
    if not rates or any(r not in RATES for r in rates):
        print(f"error: --rates takes {', '.join(RATES)} (comma-separated), got {args.rates!r}", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="repro-"))
    runs = {}
    try:
        for name in ("a", "b"):
            if name == "b" and args.gap_s:
                print(f"waiting {args.gap_s:.0f} s before run B", flush=True)
                time.sleep(args.gap_s)
            sweep, wall = run_sweep(sweep_args, work / f"run_{name}")
            gains, gpu_s = measured(sweep, rates)
            runs[name] = {"sweep": str(sweep), "wall_s": wall, "gpu_s": gpu_s, "gains": gains}
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    by_rate: dict[str, Any] = {}
    for rate in rates:
        rows = compare(runs["a"]["gains"][rate], runs["b"]["gains"][rate])
        summary = summarise_rows(rows)
        by_rate[rate] = {"rows": rows, "summary": summary}
        print(f"rate: {rate} ({RATES[rate]})")
        print(table(rows))
        share = summary["overlap_share"]
        print(
            f"gains ({rate}): median |A/B-1| {_fmt(summary['median_diff_pct'], '.1f')}%, "
            f"max {_fmt(summary['max_diff_pct'], '.1f')}%; intervals overlap in "
            f"{_fmt(None if share is None else 100 * share, '.0f')}% of {summary['configurations']} configurations; "
            f"widest half-width {_fmt(summary['max_half_width_pct'], '.1f')}%"
        )
    for name in ("a", "b"):
        print(f"run {name.upper()}: GPU time {runs[name]['gpu_s']:.1f} s, wall {runs[name]['wall_s']:.1f} s")
    result = {
        "sweep_args": sweep_args,
        "gap_s": args.gap_s,
        "runs": {n: {k: v for k, v in r.items() if k != "gains"} for n, r in runs.items()},
        # The first rate's table at the top level, as before the rates existed; each rate's under rates.
        "rows": by_rate[rates[0]]["rows"],
        "summary": by_rate[rates[0]]["summary"],
        "rates": by_rate,
    }
    args.out.write_text(json.dumps(result, indent=2, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
