"""The queue's runs side by side: one table, and SM activity and jobs over time per policy.

Usage::

    python -m analysis.queue RUN_DIR [RUN_DIR ...] --out DIR

Each ``RUN_DIR`` is what a replay wrote (``out_dir/queue/<trace>-<policy>/``: ``summary.json``,
``jobs.parquet``, ``gpus.parquet``), or a directory holding such runs (``out_dir/queue``). It prints
the policies side by side (makespan, mean and p95 JCT, energy, each against ``exclusive``, OOMs, the
slowest job's slowdown, jobs over their bound) and writes ``queue_policies.csv``, the cluster's mean SM
activity and jobs running over time (``queue_timeline.csv``, ``queue_sm_activity.png``) and each job's
JCT by policy (``queue_jct.png``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after matplotlib.use: the backend is chosen before pyplot loads
import numpy as np
import pandas as pd

from raycolloc.queue.report import Summary, format_policies

__all__ = ["QueueRun", "load_runs", "main", "timeline"]

POINTS = 400  # samples of the timeline from the first arrival to the last end


@dataclasses.dataclass(frozen=True)
class QueueRun:
    """One replay's results."""

    directory: Path
    summary: Summary
    jobs: pd.DataFrame
    gpus: pd.DataFrame


def load_runs(paths: Sequence[Path]) -> list[QueueRun]:
    """Every run under ``paths`` (a run directory, or one holding runs), in the order found.

    Raises:
        FileNotFoundError: a path holds no run.
    """
    runs = []
    fields = {f.name for f in dataclasses.fields(Summary)}
    for path in paths:
        found = [path] if (path / "summary.json").is_file() else sorted(p.parent for p in path.glob("*/summary.json"))
        if not found:
            raise FileNotFoundError(f"{path}: no queue run (summary.json) in it or in its folders")
        for run in found:
            data = json.loads((run / "summary.json").read_text())
            summary = Summary(**{k: v for k, v in data.items() if k in fields})
            gpus = pd.read_parquet(run / "gpus.parquet") if (run / "gpus.parquet").is_file() else pd.DataFrame()
            runs.append(QueueRun(run, summary, pd.read_parquet(run / "jobs.parquet"), gpus))
    return runs


def timeline(gpus: pd.DataFrame, points: int = POINTS) -> pd.DataFrame:
    """The cluster's mean SM activity (0..1) and jobs running over time, from each GPU's rows (each
    holds from its ``t`` until that GPU's next row)."""
    if gpus.empty:
        return pd.DataFrame({"t": [], "sm_active": [], "jobs": []})
    grid = np.linspace(gpus["t"].min(), gpus["t"].max(), points)
    sm, jobs = np.zeros(points), np.zeros(points)
    groups = gpus.sort_values("t", kind="stable").groupby("gpu")
    for _, rows in groups:
        last = rows.drop_duplicates("t", keep="last")  # several changes at one time: the last holds
        at = np.searchsorted(last["t"].to_numpy(), grid, side="right") - 1
        known = at >= 0
        sm[known] += last["sm_active"].to_numpy()[at[known]]
        jobs[known] += last["jobs"].to_numpy()[at[known]]
    return pd.DataFrame({"t": grid, "sm_active": sm / groups.ngroups, "jobs": jobs})


def _figures(runs: list[QueueRun], lines: dict[str, pd.DataFrame], out: Path) -> None:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for policy, line in lines.items():
        top.plot(line["t"], 100 * line["sm_active"], label=policy)
        bottom.plot(line["t"], line["jobs"], label=policy)
    top.set_ylabel("mean SM activity %")
    bottom.set_ylabel("jobs running")
    bottom.set_xlabel("s since the first arrival")
    top.legend()
    fig.tight_layout()
    fig.savefig(out / "queue_sm_activity.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(9, 4))
    for run in runs:
        jct = run.jobs["jct_s"].dropna().sort_values().to_numpy()
        ax.plot(np.arange(1, len(jct) + 1) / max(1, len(jct)), jct, label=run.summary.policy)
    ax.set_xlabel("share of jobs")
    ax.set_ylabel("JCT s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "queue_jct.png", dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (2: a path with no queue run)."""
    p = argparse.ArgumentParser(prog="python -m analysis.queue", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="replay directories, or directories holding them")
    p.add_argument("--out", type=Path, required=True, help="where the tables and figures go")
    args = p.parse_args(argv)
    try:
        runs = load_runs(args.runs)
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([dataclasses.asdict(r.summary) for r in runs]).to_csv(args.out / "queue_policies.csv", index=False)
    lines = {r.summary.policy: timeline(r.gpus) for r in runs}
    pd.concat([line.assign(policy=policy) for policy, line in lines.items()]).to_csv(
        args.out / "queue_timeline.csv", index=False
    )
    _figures(runs, lines, args.out)
    print(format_policies([r.summary for r in runs]))
    print(f"\nwrote {args.out}/queue_policies.csv, queue_timeline.csv, queue_sm_activity.png, queue_jct.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
