"""Model builders for the presets: timm vision models, a compact DLRM and tiny CPU models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from raycolloc.procs import import_timm

__all__ = ["DLRM", "TinyCNN", "timm_model"]


def timm_model(name: str, num_classes: int, resolution: int | None = None) -> nn.Module:
    """A randomly initialised timm model (no weights are downloaded).

    Models built for one input size (ViT, CaiT: ``fixed_input_size`` in timm's config) are built
    for ``resolution`` when it differs; the others take any size as they are.
    """
    timm = import_timm()
    kwargs: dict[str, Any] = {}
    cfg = timm.get_pretrained_cfg(name)
    if resolution and cfg is not None and cfg.fixed_input_size and tuple(cfg.input_size[1:]) != (resolution,) * 2:
        kwargs["img_size"] = resolution
    return timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)


class TinyCNN(nn.Module):
    """A three-layer CNN that trains in milliseconds per step on a laptop CPU."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _mlp(sizes: Sequence[int], last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    _rows: torch.Tensor  # registered buffers (their type, which nn.Module's __getattr__ does not give)
    _cols: torch.Tensor
    """A compact DLRM: embedding bags for the categorical features, a bottom MLP for the dense
    ones, pairwise dot-product interaction, and a top MLP that predicts the click logit.

    Args:
        table_sizes: rows of each embedding table (one per categorical feature).
        dim: embedding dimension (also the bottom MLP's output size).
        num_dense: dense features per sample.
        bottom: hidden sizes of the bottom MLP.
        top: hidden sizes of the top MLP.
    """

    def __init__(
        self,
        table_sizes: Sequence[int],
        dim: int = 16,
        num_dense: int = 13,
        bottom: Sequence[int] = (512, 256, 64),
        top: Sequence[int] = (512, 256),
    ) -> None:
        super().__init__()
        # sparse=True: the optimiser touches only the rows of the batch, as DLRM trains.
        self.tables = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum", sparse=True) for n in table_sizes)
        self.bottom = _mlp([num_dense, *bottom, dim], last_relu=True)
        n = len(table_sizes) + 1
        rows, cols = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("_rows", rows, persistent=False)
        self.register_buffer("_cols", cols, persistent=False)
        self.top = _mlp([dim + n * (n - 1) // 2, *top, 1], last_relu=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        # One index per feature and sample: a [B, 1] input is B bags of one row each.
        embedded = [table(sparse[:, i : i + 1]) for i, table in enumerate(self.tables)]
        features = torch.stack([x, *embedded], dim=1)
        dots = torch.bmm(features, features.transpose(1, 2))[:, self._rows, self._cols]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)
