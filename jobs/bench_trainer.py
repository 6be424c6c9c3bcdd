"""Benchmark: raycolloc's trainer alone against a raw PyTorch process, one job on one core.

A cell adds a lot around its trainers (steward, telemetry, lease, driver); this benchmark adds
those parts back one at a time, to tell which of them costs throughput. Each round runs, back to
back on the same core (the one raycolloc's steward would pick), ``jobs/raw_train.py`` over a
fixed window and then each of ``--variants``:

* ``trainer``: a ``Trainer`` actor (the class cells use) with a binding pinned to that core, no
  steward state: one warm-up epoch and ``--epochs`` measured ones;
* ``steward``: the same, but the node's steward prepares the job as a naive one-job cell (its
  cores, its environment) and samples its GPU and process during the epochs, as in a cell.

It prints one line per round and a summary (best and median of each side, its ratio to raw, CPU
time per step of each training thread) and writes everything as JSON.

    python jobs/bench_trainer.py --rounds 3 --out trainer.json [--variants trainer,steward] [--compile reduce-overhead]

``--backend sim`` runs the same plumbing on the CPU (simulated GPU): a smoke test, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_collocation import WORKLOADS, _raw_cores, _start_ray, raw_cell  # noqa: E402 - a sibling script


def _cell(args: argparse.Namespace) -> Any:
    """The one-job cell of these settings (real config composition and validation)."""
    from hydra import compose, initialize_config_dir

    from raycolloc.config import register_configs
    from raycolloc.driver.cell_specs import validate_cell

    register_configs()
    overrides = [
        f"workload={args.workload}",
        f"batch_size={args.batch_size}",
        f"epoch_samples={args.epoch_samples}",
        "degree=1",
        f"epochs={args.epochs + 1}",
        f"trainer.compile={args.compile}",
        f"trainer.amp={args.amp}",
        f"trainer.channels_last={args.channels_last}",
        f"data.placement={args.placement}",
        f"cluster.backend={args.backend}",
    ]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return validate_cell(compose(config_name="config", overrides=overrides))


VARIANTS = ("trainer", "steward")


def trainer_round(
    variant: str, cell: Any, gpu: Any, core: int | None, steward: Any, cell_id: str, timeout_s: float
) -> dict[str, Any]:
    """One Trainer actor: setup, warm-up epoch, measured epochs; its measured epochs' rates."""
    import dataclasses

    import ray

    from raycolloc.driver.trainers import RemoteTrainer
    from raycolloc.spec import Binding

    cell = dataclasses.replace(
        cell, cell_id=cell_id, jobs=tuple(dataclasses.replace(j, cell_id=cell_id) for j in cell.jobs)
    )
    (job,) = cell.jobs
    telemetry_rows = None
    if variant == "steward":
        (binding,) = ray.get(steward.prepare.remote(cell, gpu.uuid), timeout=timeout_s)
    else:
        env = {"CUDA_VISIBLE_DEVICES": gpu.uuid, **ray.get(steward.job_env.remote(gpu.uuid), timeout=60)}
        device = ray.get(steward.job_device.remote(gpu.uuid), timeout=60)
        binding = Binding(
            job_index=0, gpu_uuid=gpu.uuid, env=env, cpus=(core,) if core is not None else None, device=device
        )
    trainer = RemoteTrainer.options(num_cpus=1, num_gpus=0).remote()
    try:
        ray.get(trainer.start.remote(job, binding), timeout=timeout_s)
        state = ray.get(trainer.setup.remote(), timeout=timeout_s)
        if state.ok and variant == "steward":
            ray.get(steward.start_sampling.remote(cell_id, {state.info.pid: 0}), timeout=60)
        if state.ok:
            ray.get(trainer.run_epochs.remote(1, 1), timeout=timeout_s)
            state = ray.get(trainer.run_epochs.remote(2, job.epochs), timeout=timeout_s)
        if variant == "steward":
            telemetry_rows = len(ray.get(steward.stop_sampling.remote(cell_id), timeout=60).rows)
        if not state.ok:
            raise RuntimeError(f"{variant}: trainer failed: {state.error}")
    finally:
        ray.kill(trainer)
        if variant == "steward":
            ray.get(steward.release_gpu.remote(gpu.uuid), timeout=120)
    measured = [e for e in state.epochs if not e.warmup]
    return {
        "samples_per_s": [e.samples_per_s for e in measured],
        "cpu_us_per_step": [1e6 * e.thread_cpu_s / e.steps for e in measured],
        "cpus": state.info.cpus,
        "telemetry_rows": telemetry_rows,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="resnet26_cifar10", choices=sorted(WORKLOADS))
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epoch-samples", type=int, default=38400, help="per trainer epoch (and raw warm-up)")
    p.add_argument("--epochs", type=int, default=2, help="measured trainer epochs per round")
    p.add_argument("--window-s", type=float, default=4.0, help="the raw process's measured window")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {', '.join(VARIANTS)}")
    p.add_argument("--compile", default="off", choices=["off", "default", "reduce-overhead", "max-autotune"])
    p.add_argument("--amp", default="off", choices=["off", "bf16", "fp16"])
    p.add_argument("--channels-last", default="false", choices=["true", "false"])
    p.add_argument("--placement", default="host", choices=["host", "device"])
    p.add_argument("--cpu-affinity", default="auto", choices=["auto", "none"])
    p.add_argument("--backend", default="nvml", choices=["nvml", "sim"], help="sim: CPU plumbing test only")
    p.add_argument("--timeout-s", type=float, default=900.0, help="limit of each trainer call")
    p.add_argument(
        "--ray-address",
        default=None,
        help="run the trainers on this Ray cluster (ADDRESS of `ray start`); default: a local "
        "instance of the benchmark's own",
    )
    p.add_argument("--out", required=True, help="JSON file for the results")
    args = p.parse_args()
    if args.rounds < 1 or args.epochs < 1:
        p.error("--rounds and --epochs must be at least 1")
    variants = args.variants.split(",")
    if not variants or any(v not in VARIANTS for v in variants):
        p.error(f"--variants: {args.variants!r}; allowed: a comma list of {', '.join(VARIANTS)}")

    import ray

    from raycolloc.node.steward_handles import get_steward

    cell = _cell(args)
    cfg = cell.config
    if args.ray_address:
        ray.init(address=args.ray_address)  # ray.shutdown disconnects; the cluster goes on
    else:
        _start_ray(args)  # a local instance of its own, never one the user runs
    try:
        steward = get_steward(ray.get_runtime_context().get_node_id(), cfg.cluster, cfg.mode.pipe_root)
        gpu = ray.get(steward.resolve_gpu.remote("0"), timeout=60)
        raw_args = argparse.Namespace(
            workload=args.workload,
            backend=args.backend,
            batch_size=args.batch_size,
            epoch_samples=args.epoch_samples,
            window_s=args.window_s,
            cpu_affinity=args.cpu_affinity,
        )
        # The core the steward's policy gives a one-job cell (raw_cell picks the same): every side trains there.
        cores = _raw_cores(raw_args, gpu.uuid, 1)[0]
        core = int(cores[1]) if cores else None
        opts = {
            "compile": args.compile,
            "amp": args.amp,
            "channels_last": args.channels_last,
            "placement": args.placement,
        }
        rounds = []
        for r in range(args.rounds):
            raw = raw_cell(raw_args, "naive", 1, opts)
            row: dict[str, Any] = {
                "raw_samples_per_s": raw["raw_samples_per_s"],
                "raw_cpu_us_per_step": raw["cpu_us_per_step"],
            }
            line = (
                f"round {r + 1}: raw {raw['raw_samples_per_s']:,.0f} img/s ({raw['cpu_us_per_step']:,.0f} us CPU/step)"
            )
            for variant in variants:
                rc = trainer_round(variant, cell, gpu, core, steward, f"bench-trainer-{r}-{variant}", args.timeout_s)
                row[variant] = rc
                line += (
                    f"  {variant} {', '.join(f'{v:,.0f}' for v in rc['samples_per_s'])}"
                    f" ({', '.join(f'{v:,.0f}' for v in rc['cpu_us_per_step'])} us) on {rc['cpus']}"
                )
            rounds.append(row)
            print(line, flush=True)
    finally:
        ray.shutdown()
    raws = [x["raw_samples_per_s"] for x in rounds]
    summary = {"raw": {"best": max(raws), "median": statistics.median(raws)}}
    for variant in variants:
        rates = [v for x in rounds for v in x[variant]["samples_per_s"]]
        summary[variant] = {"best": max(rates), "median": statistics.median(rates)}
        for key in ("best", "median"):
            summary[variant][f"ratio_{key}"] = summary[variant][key] / summary["raw"][key]
    print(
        f"\n{args.workload}, batch {args.batch_size}, compile={args.compile}, amp={args.amp}, core {core},"
        f" card: {gpu.name}"
    )
    print(f"{'side':10}{'best':>10}{'median':>10}{'best/raw':>10}{'median/raw':>12}")
    for side, v in summary.items():
        print(
            f"{side:10}{v['best']:>10,.0f}{v['median']:>10,.0f}{v.get('ratio_best', 1.0):>10.3f}"
            f"{v.get('ratio_median', 1.0):>12.3f}"
        )
    Path(args.out).write_text(
        json.dumps({"card": gpu.name, "core": core, "args": vars(args), "rounds": rounds, "summary": summary}, indent=1)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
