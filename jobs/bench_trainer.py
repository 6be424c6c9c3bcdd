"""Benchmark: raycolloc's trainer alone against a raw PyTorch process, one job on one core.

A cell adds a lot around its trainers (steward, telemetry, lease, driver); this benchmark takes
all of that away to ask one question: does the trainer itself train as fast as a plain loop? Each
round runs, back to back on the same core (the one raycolloc's steward would pick),
(a) ``jobs/raw_train.py`` over a fixed window and (b) a ``Trainer`` actor, the class cells use,
with a binding pinned to that core, one warm-up epoch and ``--epochs`` measured ones. It prints
one line per round and a summary (best and median of each side, their ratio, CPU time per step of
each side's training thread) and writes everything as JSON.

    python jobs/bench_trainer.py --rounds 3 --out trainer.json [--compile reduce-overhead]

``--backend sim`` runs the same plumbing on the CPU (simulated GPU): a smoke test, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_collocation import WORKLOADS, _raw_cores, raw_cell  # noqa: E402 - a sibling script, not a package


def _job(args: argparse.Namespace) -> Any:
    """The JobSpec a one-job cell of these settings would give its trainer (real config composition)."""
    from hydra import compose, initialize_config_dir

    from raycolloc.cellspec import plan_cell
    from raycolloc.config import load_config, register_configs

    register_configs()
    overrides = [f"workload={args.workload}", f"batch_size={args.batch_size}", f"epoch_samples={args.epoch_samples}",
                 "degree=1", f"epochs={args.epochs + 1}", f"trainer.compile={args.compile}", f"trainer.amp={args.amp}",
                 f"trainer.channels_last={args.channels_last}", f"data.placement={args.placement}",
                 f"cluster.backend={args.backend}"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = load_config(compose(config_name="config", overrides=overrides))
    return cfg, plan_cell(cfg).jobs[0]


def trainer_round(job: Any, gpu: Any, core: int | None, steward: Any, timeout_s: float) -> dict[str, Any]:
    """One Trainer actor: setup, warm-up epoch, measured epochs; its measured epochs' rates."""
    import ray

    from raycolloc.cell import RemoteTrainer
    from raycolloc.cellspec import Binding

    binding = Binding(job_index=0, gpu_uuid=gpu.uuid, env={}, cpus=(core,) if core is not None else None)
    trainer = RemoteTrainer.options(num_cpus=1, num_gpus=0).remote(job, binding, "bench-trainer", gpu.backend, steward)
    try:
        state = ray.get(trainer.setup.remote(), timeout=timeout_s)
        if state["status"] == "ok":
            ray.get(trainer.run_epochs.remote(1, 1), timeout=timeout_s)
            state = ray.get(trainer.run_epochs.remote(2, job.epochs), timeout=timeout_s)
        if state["status"] != "ok":
            raise RuntimeError(f"trainer failed: {state['error']}")
    finally:
        ray.kill(trainer)
    measured = [e for e in state["epochs"] if not e["warmup"]]
    return {"samples_per_s": [e["samples_per_s"] for e in measured],
            "cpu_us_per_step": [1e6 * e["thread_cpu_s"] / e["steps"] for e in measured],
            "cpus": state["info"].get("cpus")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="resnet26_cifar10", choices=sorted(WORKLOADS))
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epoch-samples", type=int, default=38400, help="per trainer epoch (and raw warm-up)")
    p.add_argument("--epochs", type=int, default=2, help="measured trainer epochs per round")
    p.add_argument("--window-s", type=float, default=4.0, help="the raw process's measured window")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compile", default="off", choices=["off", "default", "reduce-overhead", "max-autotune"])
    p.add_argument("--amp", default="off", choices=["off", "bf16", "fp16"])
    p.add_argument("--channels-last", default="false", choices=["true", "false"])
    p.add_argument("--placement", default="host", choices=["host", "device"])
    p.add_argument("--cpu-affinity", default="auto", choices=["auto", "none"])
    p.add_argument("--backend", default="nvml", choices=["nvml", "sim"], help="sim: CPU plumbing test only")
    p.add_argument("--timeout-s", type=float, default=900.0, help="limit of each trainer call")
    p.add_argument("--out", required=True, help="JSON file for the results")
    args = p.parse_args()
    if args.rounds < 1 or args.epochs < 1:
        p.error("--rounds and --epochs must be at least 1")

    import ray

    from raycolloc.steward import get_steward

    cfg, job = _job(args)
    # A local instance of its own (never one the user runs), niceness 0 as raycolloc's own.
    ray.init(address="local", num_cpus=max(4, os.cpu_count() or 1), num_gpus=1 if args.backend == "sim" else None,
             include_dashboard=False, namespace="raycolloc", _system_config={"worker_niceness": 0})
    try:
        steward = get_steward(ray.get_runtime_context().get_node_id(), cfg.cluster, cfg.mode.pipe_root)
        gpu = ray.get(steward.resolve_gpu.remote("0"), timeout=60)
        raw_args = argparse.Namespace(workload=args.workload, backend=args.backend, batch_size=args.batch_size,
                                      epoch_samples=args.epoch_samples, window_s=args.window_s,
                                      cpu_affinity=args.cpu_affinity)
        # The core the steward's policy gives a one-job cell (raw_cell picks the same): both sides train there.
        cores = _raw_cores(raw_args, gpu.uuid, 1)[0]
        core = int(cores[1]) if cores else None
        opts = {"compile": args.compile, "amp": args.amp, "channels_last": args.channels_last,
                "placement": args.placement}
        rounds = []
        for r in range(args.rounds):
            raw = raw_cell(raw_args, "naive", 1, opts)
            rc = trainer_round(job, gpu, core, steward, args.timeout_s)
            rounds.append({"raw_samples_per_s": raw["raw_samples_per_s"], "raw_cpu_us_per_step": raw["cpu_us_per_step"],
                           "trainer_samples_per_s": rc["samples_per_s"], "trainer_cpu_us_per_step": rc["cpu_us_per_step"],
                           "trainer_cpus": rc["cpus"]})
            print(f"round {r + 1}: raw {raw['raw_samples_per_s']:,.0f} img/s ({raw['cpu_us_per_step']:,.0f} us CPU/step)"
                  f"  trainer {', '.join(f'{v:,.0f}' for v in rc['samples_per_s'])} img/s"
                  f" ({', '.join(f'{v:,.0f}' for v in rc['cpu_us_per_step'])} us CPU/step)  core {core}", flush=True)
    finally:
        ray.shutdown()
    raws = [x["raw_samples_per_s"] for x in rounds]
    trainers = [v for x in rounds for v in x["trainer_samples_per_s"]]
    summary = {"raw_best": max(raws), "raw_median": statistics.median(raws), "trainer_best": max(trainers),
               "trainer_median": statistics.median(trainers)}
    summary["ratio_best"] = summary["trainer_best"] / summary["raw_best"]
    summary["ratio_median"] = summary["trainer_median"] / summary["raw_median"]
    print(f"\n{args.workload}, batch {args.batch_size}, compile={args.compile}, amp={args.amp}, core {core},"
          f" card: {gpu.name}")
    print(f"{'':8}{'raw':>10}{'trainer':>10}{'ratio':>8}")
    for key in ("best", "median"):
        print(f"{key:8}{summary['raw_' + key]:>10,.0f}{summary['trainer_' + key]:>10,.0f}{summary['ratio_' + key]:>8.3f}")
    Path(args.out).write_text(json.dumps({"card": gpu.name, "core": core, "args": vars(args), "rounds": rounds,
                                          "summary": summary}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
