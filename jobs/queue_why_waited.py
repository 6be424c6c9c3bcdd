"""Why did a queued job wait? The ``raycolloc`` policy's verdict on every GPU when the job arrived.

Reads a replay's directory (``jobs.parquet``, ``profiles.json``), rebuilds each GPU as it was at a
job's arrival (the jobs whose run spans that moment, and the GPU's mode) and asks the policy, with
the model's round defaults (the parameters a ``queue.runner=ray`` replay uses where no collocated
sweep lies under ``out_dir``), what adding the job would do: every job's predicted slowdown beside
the others against its bound, and the work per second the job would add, or why it may not join.

    python jobs/queue_why_waited.py RUN_DIR JOB_ID [JOB_ID ...] [--at SECONDS] [queue.KEY=VALUE ...]

``--at`` asks at another moment than the arrival (its ``submit_s``); ``queue.*`` overrides change the
policy's settings (e.g. ``queue.slowdown_margin=0``). Exit status: 0, or 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import yaml

from raycolloc.config_checks import ConfigError
from raycolloc.config_groups import QueueConfig
from raycolloc.queue.advised import AdvisedPolicy
from raycolloc.queue.catalog import sim_gpu, sim_params
from raycolloc.queue.policy import GpuView, Predictor, QueuedJob, Resident
from raycolloc.queue.profiles import PROFILES_FILE, read_profiles


def verdicts(run_dir: Path, job_ids: Sequence[str], at: float | None, queue: QueueConfig) -> list[str]:
    """One block of lines per job: the policy's verdict on each GPU at the job's arrival (or ``at``)."""
    found = read_profiles(run_dir / PROFILES_FILE)
    profiles = {w.workload: w.profile for w in found.workloads if w.profile is not None}
    rows = pd.read_parquet(run_dir / "jobs.parquet").set_index("job_id")
    gpu = found.gpu(sim_gpu("H100-80GB"))  # the memory and base of the GPU profiled
    policy = AdvisedPolicy(queue, gpu, Predictor(gpu, sim_params(gpu)))
    missing = sorted({str(w) for w in rows.workload} - set(profiles))
    if missing:
        raise KeyError(f"{run_dir / PROFILES_FILE} has no profile of {', '.join(missing)}")
    lines: list[str] = []
    for job_id in job_ids:
        if job_id not in rows.index:
            raise KeyError(f"no job {job_id} in {run_dir / 'jobs.parquet'}")
        row = rows.loc[job_id]
        t = float(row.submit_s) if at is None else at
        profile = profiles[str(row.workload)]
        job = QueuedJob(job_id, profile.workload, profile, profile.job_mem_mib or 0.0, float(row.max_slowdown), 0.0)
        lines.append(
            f"{job_id} {row.workload} (bound {row.max_slowdown:g}) at {t:.1f} s; "
            f"it started at {row.start_s:.1f} s on {row.gpu} ({row['mode']})"
        )
        for gpu_id, on_gpu in rows[rows.index != job_id].groupby("gpu"):
            running = on_gpu[(on_gpu.start_s <= t) & (on_gpu.end_s > t)]
            if running.empty:
                lines.append(f"  {gpu_id}: empty (a whole job's work: it may start here)")
                continue
            residents = tuple(
                Resident(
                    r, profiles[str(w)], profiles[str(w)].job_mem_mib or 0.0, float(b), profiles[str(w)].job_mem_mib
                )
                for r, w, b in zip(running.index, running.workload, running.max_slowdown, strict=True)
            )
            mode = str(running["mode"].iloc[0])
            used = sum(r.mem_estimate_mib for r in residents)
            view = GpuView(str(gpu_id), gpu.memory_mib, mode, residents, used, 0.0, 0.0, 0.0, None)
            after = policy.predictor.outlook(mode, [r.profile for r in residents] + [profile])
            beside = ", ".join(
                f"{r.profile.workload} {s:.2f}x/{r.max_slowdown:g}"
                for r, s in zip(residents, after.slowdowns, strict=False)
            )
            gain = policy.added_gain(job, view)
            verdict = "may not join" if gain is None else f"may join, +{gain:.2f} of a job's work/s"
            lines.append(
                f"  {gpu_id} ({mode}): {verdict}; predicted with it: itself {after.slowdowns[-1]:.2f}x, {beside}"
            )
    return lines


def _value(text: str) -> object:
    """An override's value as Hydra reads one: 8, 0.1, 1e-3, [mps], a word."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)  # YAML 1.1 reads 1e-3 as a string
        except ValueError:
            return value
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("jobs", nargs="+", help="job ids, then any queue.KEY=VALUE overrides")
    parser.add_argument("--at", type=float, default=None, help="the moment to ask at (s; default: the arrival)")
    args = parser.parse_args(argv)
    ids = [j for j in args.jobs if "=" not in j]
    overrides = dict(j.split("=", 1) for j in args.jobs if "=" in j)
    try:
        if not ids:
            raise ConfigError("no job id given: name one or more jobs of the run (its jobs.parquet's job_id)")
        fields = {f.name: f for f in dataclasses.fields(QueueConfig)}
        values = {}
        for key, value in overrides.items():
            name = key.removeprefix("queue.")
            if not key.startswith("queue.") or name not in fields:
                raise ConfigError(f"{key} is not allowed; give queue.KEY=VALUE with KEY one of: {', '.join(fields)}")
            values[name] = _value(value)
        queue = QueueConfig(**values)
        for line in verdicts(args.run_dir, ids, args.at, queue):
            print(line)
    except (ConfigError, KeyError, FileNotFoundError, yaml.YAMLError) as e:
        print(f"error: {e.args[0] if isinstance(e, KeyError) else e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
