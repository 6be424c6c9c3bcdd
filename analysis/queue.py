"""The queue's runs side by side: one table, and SM activity and jobs over time per policy.

Usage::

    python -m analysis.queue RUN_DIR [RUN_DIR ...] --out DIR

Each ``RUN_DIR`` is what a replay wrote (``out_dir/queue/<trace>-<policy>/``: ``summary.json``,
``jobs.parquet``, ``gpus.parquet``, ``queue.sqlite``), or a directory holding such runs
(``out_dir/queue``). A run is known by its policy, its trace (the digest its state database recorded)
and its cluster (shape, GPU model, seed): runs are compared only with runs of the same trace and
cluster, one table per such group (makespan, mean and p95 JCT, energy, each against that group's
``exclusive`` run on the same GPUs — a real run records their UUIDs; a ratio against another
machine's run, where the group has none on the same GPUs, is marked ``*``, and the report says where
the group has none at all —, OOMs, the slowest job's slowdown, jobs
over their bound). It writes ``queue_policies.csv`` (a row per run, with ``trace``, ``cluster``,
``run``, the ratios against its group's ``exclusive``, ``versus``: which run that was, and
``versus_same_gpus``), the cluster's mean SM activity and jobs
running over time per run (``queue_timeline.csv``, ``queue_sm_activity.png``) and each run's JCTs
(``queue_jct.png``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after matplotlib.use: the backend is chosen before pyplot loads
import numpy as np
import pandas as pd

from raycolloc.queue.report import Summary, baseline, format_policies, same_gpus

__all__ = ["QueueRun", "format_groups", "load_runs", "main", "run_identity", "timeline"]

POINTS = 400  # samples of the timeline from the first arrival to the last end


@dataclasses.dataclass(frozen=True)
class QueueRun:
    """One replay's results, and what it ran: its trace (digest) and cluster."""

    directory: Path
    summary: Summary
    jobs: pd.DataFrame
    gpus: pd.DataFrame
    trace: str
    cluster: str
    label: str = ""  # unique among the runs loaded: the policy, made unique where a policy ran twice

    @property
    def group(self) -> tuple[str, str]:
        """What a run is compared within: the same trace on the same cluster."""
        return (self.trace, self.cluster)


def run_identity(directory: Path, jobs: pd.DataFrame, gpus: pd.DataFrame) -> tuple[str, str]:
    """The run's trace digest and cluster, as its state database recorded them (the replay claims
    both); without one, a digest of the jobs as the run saw them and the count of its GPUs."""
    db = directory / "queue.sqlite"
    if db.is_file():
        # read-only: never touch a run's state; as_uri() escapes what a URI reads ('#', '%', '?')
        con = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            meta = dict(con.execute("SELECT key, value FROM meta WHERE key IN ('trace', 'cluster')").fetchall())
        except sqlite3.Error:
            meta = {}
        finally:
            con.close()
        if "trace" in meta and "cluster" in meta:
            return str(meta["trace"]), str(meta["cluster"])
    columns = [c for c in ("job_id", "submit_s", "workload", "max_slowdown") if c in jobs.columns]
    rows = jobs[columns].sort_values(columns[:1]).to_csv(index=False) if columns else ""
    gpu_count = gpus["gpu"].nunique() if "gpu" in gpus.columns else 0
    return "jobs:" + hashlib.sha256(rows.encode()).hexdigest()[:16], f"{gpu_count} GPUs (no state database)"


def load_runs(paths: Sequence[Path]) -> list[QueueRun]:
    """Every run under ``paths`` (a run directory, or one holding runs), in the order found; each
    labelled by its policy, with ``#2``, ``#3``... where a policy appears again.

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
            jobs = pd.read_parquet(run / "jobs.parquet")
            runs.append(QueueRun(run, summary, jobs, gpus, *run_identity(run, jobs, gpus)))
    seen: dict[str, int] = {}
    labelled = []
    for r in runs:
        seen[r.summary.policy] = seen.get(r.summary.policy, 0) + 1
        n = seen[r.summary.policy]
        labelled.append(dataclasses.replace(r, label=r.summary.policy if n == 1 else f"{r.summary.policy}#{n}"))
    return labelled


def _groups(runs: Sequence[QueueRun]) -> dict[tuple[str, str], list[QueueRun]]:
    out: dict[tuple[str, str], list[QueueRun]] = {}
    for r in runs:
        out.setdefault(r.group, []).append(r)
    return out


def _baseline(group: Sequence[QueueRun], run: QueueRun) -> QueueRun | None:
    """The group's ``exclusive`` run ``run`` is compared with: on the same GPUs where there is one."""
    found = baseline(run.summary, [r.summary for r in group])
    return next((r for r in group if r.summary is found), None)


def format_groups(runs: Sequence[QueueRun]) -> str:
    """One table per trace and cluster, each against its own ``exclusive`` run (said where none)."""
    parts = []
    for (trace, cluster), group in _groups(runs).items():
        has_exclusive = any(r.summary.policy == "exclusive" for r in group)
        note = "" if has_exclusive else "\n(no exclusive run of this trace and cluster: no 'vs excl' ratios)"
        table = format_policies([r.summary for r in group], [r.label for r in group])  # as the CSV names runs
        truth = "/".join(sorted({r.summary.truth for r in group}))  # what played the GPUs (queue.truth)
        parts.append(f"trace {trace}, cluster {cluster}, truth {truth}:\n{table}{note}")
    return "\n\n".join(parts)


def _table(runs: Sequence[QueueRun]) -> pd.DataFrame:
    rows: list[dict[str, object]] = []
    for group in _groups(runs).values():
        for r in group:
            base = _baseline(group, r)
            row: dict[str, object] = {
                "run": r.label,
                "trace": r.trace,
                "cluster": r.cluster,
                "directory": str(r.directory),
            }
            row.update(dataclasses.asdict(r.summary))
            row["versus"] = base.label if base else None
            row["versus_same_gpus"] = same_gpus(r.summary, base.summary) if base else None
            for key in ("makespan_s", "energy_j", "jct_mean_s"):
                value, ref = getattr(r.summary, key), getattr(base.summary, key) if base else None
                row[f"{key}_vs_exclusive"] = value / ref if value is not None and ref else None
            rows.append(row)
    return pd.DataFrame(rows)


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
    several = len(_groups(runs)) > 1  # then a line names its trace and cluster too
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for run in runs:
        line, name = lines[run.label], _name(run, several)
        top.plot(line["t"], 100 * line["sm_active"], label=name)
        bottom.plot(line["t"], line["jobs"], label=name)
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
        ax.plot(np.arange(1, len(jct) + 1) / max(1, len(jct)), jct, label=_name(run, several))
    ax.set_xlabel("share of jobs")
    ax.set_ylabel("JCT s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "queue_jct.png", dpi=110)
    plt.close(fig)


def _name(run: QueueRun, several: bool) -> str:
    return f"{run.label} ({run.trace[:8]}, {run.cluster})" if several else run.label


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
    _table(runs).to_csv(args.out / "queue_policies.csv", index=False)
    lines = {r.label: timeline(r.gpus) for r in runs}  # keyed by run: two runs of a policy both stay
    pd.concat(
        [lines[r.label].assign(run=r.label, policy=r.summary.policy, trace=r.trace, cluster=r.cluster) for r in runs]
    ).to_csv(args.out / "queue_timeline.csv", index=False)
    _figures(runs, lines, args.out)
    print(format_groups(runs))
    print(f"\nwrote {args.out}/queue_policies.csv, queue_timeline.csv, queue_sm_activity.png, queue_jct.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
