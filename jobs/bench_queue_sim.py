"""Benchmark: the queue's three policies on one trace, on the simulated cluster (issue 33), at one or
both time scales and over seeds (issue 44).

Per scale (``--scales short carma``: ``queue.trace_scale``) and seed (``--seeds``), writes one
Philly-like trace (``--jobs``; at the short scale arrivals are scaled to the cluster: the mean gap is 2 s
on 4 GPUs, shorter in proportion on more; at CARMA's, CARMA's traces' gap, made for its 4 GPUs), then
runs ``python -m raycolloc.queue replay`` once per policy (``queue.carma_seed`` = the seed), each in its
own process as a user would, and prints a table: makespan, mean and p95 JCT, GPU energy (each also
against ``exclusive``), OOMs, the slowest job's slowdown, jobs over their bound, mean SM activity, and
the wall time of the command and of its simulation. Over several runs, a table per scale: each
policy's makespan, mean JCT and energy against the same trace's ``exclusive`` run (median, min-max over
seeds), mean SM activity and OOMs. ``--set KEY=VALUE`` adds an override to every command (e.g.
``queue.sim_startup_s=10``). The numbers other than wall times are the simulated cluster's (the
advisor's model on round-number profiles): they rank policies, they are not measured.

    python jobs/bench_queue_sim.py --out queue_sim.json [--jobs 1000 --nodes 8 --gpus-per-node 8]
    python jobs/bench_queue_sim.py --out scales.json --jobs 60 --nodes 1 --gpus-per-node 4 \
        --scales short carma --seeds 0 1 2 3 4 5 --set queue.sim_startup_s=10
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from raycolloc.queue.report import Summary, format_policies

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("exclusive", "carma", "raycolloc")


def _run(args: list[str]) -> str:
    cmd = [sys.executable, "-m", "raycolloc.queue", *args]
    print("$", " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:1])} failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return proc.stdout


def table(results: dict[str, dict[str, Any]]) -> str:
    """The report's side-by-side table, and each command's wall time and its simulation's."""
    fields = {f.name for f in dataclasses.fields(Summary)}
    summaries = [Summary(**{k: v for k, v in r.items() if k in fields}) for r in results.values()]
    walls = [f"{'policy':<10} {'wall s':>7} {'sim s':>6}"] + [
        f"{p:<10} {r['command_wall_s']:>7.1f} {r['wall_s']:>6.1f}" for p, r in results.items()
    ]
    return format_policies(summaries) + "\n\n" + "\n".join(walls)


def _spread(values: list[float], spec: str) -> str:
    """Median [min-max] of ``values``."""
    if not values:
        return "-"
    return f"{format(statistics.median(values), spec)} [{format(min(values), spec)}-{format(max(values), spec)}]"


def seeds_table(runs: dict[int, dict[str, dict[str, Any]]]) -> str:
    """One scale's runs (seed -> policy -> summary): per policy, makespan, mean JCT and energy against
    the same seed's ``exclusive`` run, and the mean SM activity (median [min-max] over seeds), mean JCT
    in minutes (median), OOMs (over all seeds)."""

    def against(policy: str, key: str) -> list[float]:
        return [r[policy][key] / r["exclusive"][key] for r in runs.values() if r[policy][key] and r["exclusive"][key]]

    head = (
        f"{'policy':<10} {'makespan vs excl':>22} {'JCT mean vs excl':>22} {'JCT mean min':>12} "
        f"{'energy vs excl':>22} {'SM mean':>18} {'OOMs':>5}"
    )
    lines = [head, "-" * len(head)]
    for policy in POLICIES:
        jct = [r[policy]["jct_mean_s"] / 60 for r in runs.values() if r[policy]["jct_mean_s"] is not None]
        sm = [r[policy]["sm_active_mean"] for r in runs.values() if r[policy].get("sm_active_mean") is not None]
        lines.append(
            f"{policy:<10} {_spread(against(policy, 'makespan_s'), '.2f'):>22} "
            f"{_spread(against(policy, 'jct_mean_s'), '.2f'):>22} {_spread(jct, '.0f'):>12} "
            f"{_spread(against(policy, 'energy_j'), '.2f'):>22} {_spread(sm, '.2f'):>18} "
            f"{sum(r[policy]['ooms'] for r in runs.values()):>5}"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--scales", nargs="+", default=["short"], help="queue.trace_scale values: short, carma")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for every command")
    p.add_argument("--gpu-model", default="H100-80GB")
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    p.add_argument("--work-dir", type=Path, default=None, help="where the trace and the runs go (default: a temp dir)")
    args = p.parse_args()
    if args.jobs < 1 or args.nodes < 1 or args.gpus_per_node < 1:
        print("--jobs, --nodes and --gpus-per-node must be >= 1", file=sys.stderr)
        return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-queue-"))
    runs: dict[str, dict[int, dict[str, dict[str, Any]]]] = {}
    for scale in args.scales:
        for seed in args.seeds:
            runs.setdefault(scale, {})[seed] = _one_trace(args, work, scale, seed)
    if len(args.scales) * len(args.seeds) > 1:
        for scale, by_seed in runs.items():
            print(f"\nscale={scale}, seeds {' '.join(map(str, by_seed))}:\n{seeds_table(by_seed)}", flush=True)
    first = runs[args.scales[0]][args.seeds[0]]
    out = {
        "jobs": args.jobs,
        "nodes": args.nodes,
        "gpus_per_node": args.gpus_per_node,
        "gpu_model": args.gpu_model,
        "seeds": args.seeds,
        "scales": args.scales,
        "overrides": args.set,
        "policies": first,  # the first scale's first seed
        "runs": runs,
    }
    args.out.write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return 0


def _one_trace(args: argparse.Namespace, work: Path, scale: str, seed: int) -> dict[str, dict[str, Any]]:
    """One trace of ``scale`` and ``seed``, replayed under each policy: policy -> summary."""
    gpus = args.nodes * args.gpus_per_node
    cluster = ["cluster=local", f"cluster.gpu_model={args.gpu_model}", *args.set]
    shape = [f"queue.sim_nodes={args.nodes}", f"queue.sim_gpus_per_node={args.gpus_per_node}"]
    trace = work / f"trace-{args.jobs}-{scale}-s{seed}.csv"
    # The same load per GPU as the 4-GPU default (a 2 s mean gap there): arrivals keep every GPU busy.
    gap = [f"queue.trace_gap_s={2.0 * 4 / gpus:g}", f"queue.trace_scale={scale}"]
    _run(["trace", "--jobs", str(args.jobs), "--seed", str(seed), "--out", str(trace), *cluster, *gap])
    results: dict[str, dict[str, Any]] = {}
    for policy in POLICIES:
        start = time.perf_counter()
        where = [f"queue.policy={policy}", f"queue.carma_seed={seed}", *cluster, *shape, f"out_dir={work}"]
        _run(["replay", str(trace), *where])
        wall = time.perf_counter() - start
        run = work / "queue" / f"{trace.stem}-{policy}-{args.nodes}x{args.gpus_per_node}-{args.gpu_model}"
        summary = json.loads((run / "summary.json").read_text())
        results[policy] = {**summary, "command_wall_s": wall}
    print(f"\nscale={scale} seed={seed}:\n{table(results)}", flush=True)
    return results


if __name__ == "__main__":
    sys.exit(main())
