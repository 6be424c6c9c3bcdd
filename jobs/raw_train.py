"""A plain PyTorch training loop, no Ray and no raycolloc: the baseline of the benchmarks.

One process trains a timm model on synthetic data with the same work per step as raycolloc's
trainer (SGD with momentum, pinned host batches copied each step, optional compile/amp/NHWC).
It warms up, signals ``ready``, waits for the parent's ``go`` file (which holds the start time
and the deadline), trains until the deadline, synchronises and prints one JSON line.

    python jobs/raw_train.py --model resnet26 --classes 10 --res 32 --batch-size 128 --warmup-steps 400 \\
        --sync-dir DIR --rank 0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="resnet26")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--res", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--warmup-steps", type=int, default=400)
    p.add_argument("--compile", default="off", choices=["off", "default", "reduce-overhead", "max-autotune"])
    p.add_argument("--amp", default="off", choices=["off", "bf16", "fp16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--placement", default="host", choices=["host", "device"])
    p.add_argument("--cpus", default=None, help="comma list of cores to pin the process to (as taskset -c)")
    p.add_argument("--sync-dir", required=True)
    p.add_argument("--rank", type=int, required=True)
    args = p.parse_args()
    if args.cpus:
        # Before torch starts any thread: every thread of the process inherits this affinity.
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})

    import timm
    import torch
    from torch import nn

    t_start = time.perf_counter()
    cuda = torch.cuda.is_available()  # the CPU path exists only to smoke-test the benchmark's plumbing
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")

    def synchronize() -> None:
        if cuda:
            torch.cuda.synchronize()

    torch.manual_seed(args.rank)
    model = timm.create_model(args.model, pretrained=False, num_classes=args.classes).to(device)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5, fused=cuda)

    def fwd(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss_fn(model(x), y)

    forward = (
        fwd if args.compile == "off" else torch.compile(fwd, mode=None if args.compile == "default" else args.compile)
    )
    graphs = args.compile in ("reduce-overhead", "max-autotune")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    scaler = torch.amp.GradScaler(device.type) if args.amp == "fp16" else None
    pool = [
        (torch.randn(args.batch_size, 3, args.res, args.res), torch.randint(0, args.classes, (args.batch_size,)))
        for _ in range(4)
    ]
    if args.placement == "host" and cuda:
        pool = [(x.pin_memory(), y.pin_memory()) for x, y in pool]
    else:
        pool = [(x.to(device), y.to(device)) for x, y in pool]

    def step(i: int) -> None:
        x, y = pool[i % len(pool)]
        x = x.to(device, non_blocking=True).contiguous(memory_format=fmt)
        y = y.to(device, non_blocking=True)
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext():
            loss = forward(x, y)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    for i in range(args.warmup_steps):
        step(i)
    synchronize()
    setup_s = time.perf_counter() - t_start
    sync = Path(args.sync_dir)
    (sync / f"ready-{args.rank}").write_text(str(os.getpid()))
    go = sync / "go"
    while not go.exists():  # the parent writes it once every process is warm
        time.sleep(0.001)
    start, deadline = (float(v) for v in go.read_text().split())
    while time.time() < start:
        time.sleep(0.0005)
    # Why sync: the window starts with an idle queue, so it counts only work launched inside it.
    synchronize()
    r0 = resource.getrusage(resource.RUSAGE_THREAD)
    t0, steps = time.time(), 0
    while time.time() < deadline:
        step(steps)
        steps += 1
    # Why sync: the kernels launched before the deadline finish here; the window ends with them.
    synchronize()
    wall = time.time() - t0
    r1 = resource.getrusage(resource.RUSAGE_THREAD)
    cpu, sys_s = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, r1.ru_stime - r0.ru_stime
    print(
        json.dumps(
            {
                "rank": args.rank,
                "steps": steps,
                "samples": steps * args.batch_size,
                "wall_s": wall,
                "samples_per_s": steps * args.batch_size / wall,
                "setup_s": setup_s,
                "thread_cpu_s": cpu,
                "cpu_us_per_step": 1e6 * cpu / max(steps, 1),
                "sys_us_per_step": 1e6 * sys_s / max(steps, 1),
                "minor_faults_per_step": (r1.ru_minflt - r0.ru_minflt) / max(steps, 1),
                "involuntary_switches": r1.ru_nivcsw - r0.ru_nivcsw,
                "voluntary_switches": r1.ru_nvcsw - r0.ru_nvcsw,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
