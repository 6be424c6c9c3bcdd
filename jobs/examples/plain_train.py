"""A plain PyTorch training loop that knows nothing of raycolloc: the kind of script a researcher
already has, run unmodified as a script job (``workload=script``)::

    python -m raycolloc.sweep workload=script degree=2 mode=mps cluster=local \\
        'workload.command=[python,jobs/examples/plain_train.py,--epochs,3]' \\
        'workload.epoch_regex=^epoch (?P<epoch>\\d+) done samples=(?P<samples>\\d+) loss=(?P<loss>[\\d.]+)'

It trains a timm model on random images for ``--epochs`` epochs and prints one line per epoch; the
``epoch_regex`` above turns those lines into the epochs table (epoch 1 is the warm-up). It uses
the GPU if CUDA sees one (raycolloc binds it through ``CUDA_VISIBLE_DEVICES``), else the CPU.
"""

from __future__ import annotations

import argparse
import sys

import timm
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet10t")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=4, help="steps per epoch")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--res", type=int, default=32)
    p.add_argument("--fail", action="store_true", help="exit 3 after the first epoch (a crash, for tests)")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_num_threads(1)
    model = timm.create_model(args.model, pretrained=False, num_classes=10).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.batch_size, 3, args.res, args.res, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    for epoch in range(1, args.epochs + 1):
        for _ in range(args.steps):
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        print(f"epoch {epoch} done samples={args.steps * args.batch_size} loss={loss.item():.4f}", flush=True)
        if args.fail:
            print("plain_train: failing on purpose after the first epoch (--fail)", file=sys.stderr, flush=True)
            sys.exit(3)


if __name__ == "__main__":
    main()
