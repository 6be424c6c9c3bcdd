"""Benchmark: the queue's three policies on one trace, on the simulated cluster (issue 33).

Writes one Philly-like trace (``--jobs``, arrivals scaled to the cluster: the mean gap is 2 s on 4
GPUs, shorter in proportion on more), then runs ``python -m raycolloc.queue replay`` once per policy,
each in its own process as a user would, and prints a table: makespan, mean and p95 JCT, GPU energy
(each also against ``exclusive``), OOMs, the slowest job's slowdown, jobs over their bound, and the
wall time of the command and of its simulation. The numbers other than wall times are the simulated
cluster's (the advisor's model on round-number profiles): they rank policies, they are not measured.

    python jobs/bench_queue_sim.py --out queue_sim.json [--jobs 1000 --nodes 8 --gpus-per-node 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gpu-model", default="H100-80GB")
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    p.add_argument("--work-dir", type=Path, default=None, help="where the trace and the runs go (default: a temp dir)")
    args = p.parse_args()
    if args.jobs < 1 or args.nodes < 1 or args.gpus_per_node < 1:
        print("--jobs, --nodes and --gpus-per-node must be >= 1", file=sys.stderr)
        return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-queue-"))
    gpus = args.nodes * args.gpus_per_node
    cluster = ["cluster=local", f"cluster.gpu_model={args.gpu_model}"]
    shape = [f"queue.sim_nodes={args.nodes}", f"queue.sim_gpus_per_node={args.gpus_per_node}"]
    trace = work / f"trace-{args.jobs}.csv"
    # The same load per GPU as the 4-GPU default (a 2 s mean gap there): arrivals keep every GPU busy.
    gap = [f"queue.trace_gap_s={2.0 * 4 / gpus:g}"]
    _run(["trace", "--jobs", str(args.jobs), "--seed", str(args.seed), "--out", str(trace), *cluster, *gap])
    results: dict[str, dict[str, Any]] = {}
    for policy in POLICIES:
        start = time.perf_counter()
        _run(["replay", str(trace), f"queue.policy={policy}", *cluster, *shape, f"out_dir={work}"])
        wall = time.perf_counter() - start
        run = work / "queue" / f"{trace.stem}-{policy}-{args.nodes}x{args.gpus_per_node}-{args.gpu_model}"
        summary = json.loads((run / "summary.json").read_text())
        results[policy] = {**summary, "command_wall_s": wall}
    print(table(results), flush=True)
    out = {
        "jobs": args.jobs,
        "nodes": args.nodes,
        "gpus_per_node": args.gpus_per_node,
        "gpu_model": args.gpu_model,
        "seed": args.seed,
        "trace": str(trace),
        "policies": results,
    }
    args.out.write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
