"""Measurement: the queue's policies on simulated GPUs played by the advisor's model and by the corpus.

For each seed, writes a Philly-like trace per truth (``queue.truth=model``: the catalogue's workloads;
``queue.truth=corpus``: the measured corpus's) and replays it under ``exclusive``, ``carma`` and
``raycolloc``, each through the queue's own command line (``python -m raycolloc.queue trace|replay``),
run in this one process so that the corpus's leave-one-workload-out fits (about 8 s each) are made
once. Prints, per truth and policy, makespan and mean JCT against ``exclusive`` on the same trace (mean
over seeds, and the seeds' min-max), mean JCT in seconds, OOMs and jobs over their bound; writes them
as JSON.

    python jobs/queue_truth.py --out queue_truth.json [--jobs 60 --seeds 0-5 --nodes 1 --gpus-per-node 4]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from raycolloc.queue.__main__ import main as queue_main

POLICIES = ("exclusive", "carma", "raycolloc")
TRUTHS = ("model", "corpus")
GPU_MODEL = "H200-141GB"  # the corpus's


def _queue(args: list[str]) -> None:
    print("$ python -m raycolloc.queue", " ".join(args), flush=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = queue_main(args)
    if status != 0:
        raise RuntimeError(f"{' '.join(args[:2])}: exit {status}\n{out.getvalue()[-2000:]}")


def run(truth: str, seed: int, args: argparse.Namespace, work: Path) -> dict[str, dict[str, Any]]:
    """One trace of ``truth`` and ``seed`` under every policy: each policy's summary."""
    gpus = args.nodes * args.gpus_per_node
    common = [
        "cluster=local",
        f"cluster.gpu_model={GPU_MODEL}",
        f"queue.truth={truth}",
        f"queue.sim_nodes={args.nodes}",
        f"queue.sim_gpus_per_node={args.gpus_per_node}",
        f"out_dir={work}",
    ]
    trace = work / f"{truth}-s{seed}-{args.jobs}.csv"
    gap = f"queue.trace_gap_s={2.0 * 4 / gpus:g}"  # the 4-GPU default's load per GPU
    _queue(["trace", "--jobs", str(args.jobs), "--seed", str(seed), "--out", str(trace), *common, gap])
    out = {}
    for policy in POLICIES:
        _queue(["replay", str(trace), f"queue.policy={policy}", *common])
        suffix = "-corpus" if truth == "corpus" else ""
        run_dir = work / "queue" / f"{trace.stem}-{policy}-{args.nodes}x{args.gpus_per_node}-{GPU_MODEL}{suffix}"
        out[policy] = json.loads((run_dir / "summary.json").read_text())
    return out


def table(results: dict[str, dict[int, dict[str, dict[str, Any]]]]) -> str:
    """Per truth and policy: makespan and mean JCT against exclusive (mean, min-max over seeds)."""
    lines = [
        f"{'truth':<7} {'policy':<10} {'makespan/excl':>14} {'(min-max)':>12} {'JCT/excl':>9} {'(min-max)':>12} "
        f"{'JCT mean s':>10} {'OOMs':>5} {'over bound':>10}"
    ]
    for truth, by_seed in results.items():
        for policy in POLICIES:
            span = [s[policy]["makespan_s"] / s["exclusive"]["makespan_s"] for s in by_seed.values()]
            jct = [s[policy]["jct_mean_s"] / s["exclusive"]["jct_mean_s"] for s in by_seed.values()]
            jct_s = statistics.mean(s[policy]["jct_mean_s"] for s in by_seed.values())
            ooms = sum(s[policy]["ooms"] for s in by_seed.values())
            over = sum(s[policy]["over_bound"] for s in by_seed.values())
            lines.append(
                f"{truth:<7} {policy:<10} {statistics.mean(span):>13.2f}x {min(span):>5.2f}-{max(span):<5.2f}x "
                f"{statistics.mean(jct):>8.2f}x {min(jct):>5.2f}-{max(jct):<5.2f}x {jct_s:>10.1f} {ooms:>5} {over:>10}"
            )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=60)
    p.add_argument("--seeds", default="0-5", help="a range FIRST-LAST")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int, default=4)
    p.add_argument("--truths", default=",".join(TRUTHS))
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    p.add_argument("--work-dir", type=Path, default=None, help="where traces and runs go (default: a temp dir)")
    args = p.parse_args()
    first, _, last = args.seeds.partition("-")
    seeds = range(int(first), int(last or first) + 1)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="queue-truth-"))
    results = {t: {s: run(t, s, args, work) for s in seeds} for t in args.truths.split(",")}
    print(table(results), flush=True)
    shape = {"jobs": args.jobs, "nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "gpu_model": GPU_MODEL}
    args.out.write_text(json.dumps({**shape, "results": results}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
