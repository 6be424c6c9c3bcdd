"""Batch sources: what a trainer feeds its model each step, synthetic or read from disk.

``placement=host`` keeps batches in (pinned) host memory and copies each one to the GPU every
step, so PCIe carries the traffic of real training; ``placement=device`` keeps them on the GPU.
Synthetic data has the real set's sample shape, class count and epoch size; a small pool of
distinct batches is cycled so memory stays bounded for ImageNet-sized epochs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from raycolloc.workload_kinds import ModelWorkload

__all__ = ["Batch", "BatchSource", "build_source"]

Batch = tuple[tuple[torch.Tensor, ...], torch.Tensor]
POOL_BATCHES = 4
_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
_STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


class BatchSource:
    """An endless stream of batches on ``device``.

    Args:
        tensors: the dataset as host tensors (inputs..., target), indexed along dim 0.
        batch_size: samples per batch.
        device: the training device.
        placement: ``host`` (copy each batch) or ``device`` (resident on the GPU).
        images_uint8: inputs[0] holds uint8 images to normalise on the device.
        shuffle: draw a fresh permutation every pass (real data); synthetic pools cycle in order.
    """

    def __init__(
        self,
        tensors: tuple[torch.Tensor, ...],
        batch_size: int,
        device: torch.device,
        placement: str,
        images_uint8: bool,
        shuffle: bool,
        seed: int,
    ) -> None:
        self.batch_size = batch_size
        self.device = device
        self.images_uint8 = images_uint8
        self.shuffle = shuffle
        self.n = int(tensors[0].shape[0])
        if self.n < batch_size:
            raise ValueError(f"the dataset has {self.n} samples, fewer than batch_size={batch_size}")
        self._gen = torch.Generator().manual_seed(seed)
        self._cuda = device.type == "cuda"
        self._on_device = placement == "device"
        self._pool: list[tuple[torch.Tensor, ...]] = []
        if not shuffle:
            # A fixed pool cycled in order (synthetic data): split once, pinned or resident.
            self._pool = [
                tuple(self._resident(t[i : i + batch_size]) for t in tensors)
                for i in range(0, self.n - batch_size + 1, batch_size)
            ]
        self.tensors = tuple(t.to(device) for t in tensors) if self._on_device and shuffle else tensors
        self._order = self._permutation()
        self._pos = 0
        self._ring: list[tuple[torch.Tensor, ...]] = []
        self._events: list[Any] = []
        self._slot = 0
        if not self._on_device and self._cuda and shuffle:
            # A ring of pinned staging buffers: the copy of batch i overlaps the compute of batch
            # i-1; an event guards each buffer so it is not overwritten while its copy is in flight.
            self._ring = [
                tuple(torch.empty((batch_size, *t.shape[1:]), dtype=t.dtype).pin_memory() for t in tensors)
                for _ in range(3)
            ]
            self._events = [None] * len(self._ring)
        self.bytes_per_batch = sum(t[:batch_size].numel() * t.element_size() for t in tensors)

    def _resident(self, t: torch.Tensor) -> torch.Tensor:
        if self._on_device:
            return t.to(self.device)
        return t.contiguous().pin_memory() if self._cuda else t.contiguous()

    def _permutation(self) -> torch.Tensor:
        if self.shuffle:
            return torch.randperm(self.n, generator=self._gen)
        return torch.arange(self.n)

    def _next_indices(self) -> torch.Tensor:
        if self._pos + self.batch_size > self.n:
            self._order, self._pos = self._permutation(), 0
        idx = self._order[self._pos : self._pos + self.batch_size]
        self._pos += self.batch_size
        return idx

    def next(self) -> Batch:
        """The next batch, already on the training device."""
        if self._pool:
            batch = self._pool[self._pos % len(self._pool)]
            self._pos += 1
            parts = tuple(t.to(self.device, non_blocking=True) for t in batch)
            *inputs, target = parts
            return tuple(inputs), target
        idx = self._next_indices()
        if self._on_device:
            idx = idx.to(self.device)
            parts = tuple(t.index_select(0, idx) for t in self.tensors)
        elif self._ring:
            slot = self._slot
            self._slot = (slot + 1) % len(self._ring)
            if self._events[slot] is not None:
                self._events[slot].synchronize()
            staging = self._ring[slot]
            for src, dst in zip(self.tensors, staging, strict=True):
                torch.index_select(src, 0, idx, out=dst)
            parts = tuple(s.to(self.device, non_blocking=True) for s in staging)
            event = torch.cuda.Event()
            event.record()
            self._events[slot] = event
        else:
            parts = tuple(t.index_select(0, idx) for t in self.tensors)
        *inputs, target = parts
        if self.images_uint8:
            inputs[0] = _normalise(inputs[0])
        return tuple(inputs), target

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.next()


class LoaderSource:
    """Batches from a ``torch.utils.data.DataLoader`` (ImageFolder trees decoded by workers)."""

    def __init__(self, dataset: Any, batch_size: int, device: torch.device, num_workers: int, seed: int) -> None:
        from torch.utils.data import DataLoader

        self.device = device
        self.batch_size = batch_size
        if len(dataset) < batch_size:
            raise ValueError(f"the dataset has {len(dataset)} samples, fewer than batch_size={batch_size}")
        self.loader = DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=True,
            drop_last=True,
            num_workers=num_workers,
            pin_memory=device.type == "cuda",
            persistent_workers=num_workers > 0,
            generator=torch.Generator().manual_seed(seed),
        )
        self._it = iter(self.loader)
        self.bytes_per_batch = batch_size * int(np.prod(dataset[0][0].shape))

    def next(self) -> Batch:
        try:
            images, labels = next(self._it)
        except StopIteration:
            self._it = iter(self.loader)
            images, labels = next(self._it)
        images = images.to(self.device, non_blocking=True)
        return (_normalise(images),), labels.to(self.device, non_blocking=True)


def _normalise(images: torch.Tensor) -> torch.Tensor:
    mean, std = _MEAN.to(images.device), _STD.to(images.device)
    return (images.float() - mean) / std


def _synthetic(spec: ModelWorkload, batch_size: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    n = POOL_BATCHES * batch_size
    if spec.family == "dlrm":
        dense = torch.rand((n, spec.sample_shape[0]), generator=gen) * 5
        sparse = torch.stack([torch.randint(0, rows, (n,), generator=gen) for rows in spec.table_sizes], dim=1)
        labels = (torch.rand(n, generator=gen) < 0.25).float()
        return dense, sparse, labels
    images = torch.randn((n, *spec.sample_shape), generator=gen)
    labels = torch.randint(0, spec.num_classes, (n,), generator=gen)
    return images, labels


def build_source(
    spec: ModelWorkload,
    batch_size: int,
    device: torch.device,
    source: str,
    placement: str,
    path: str | None,
    num_workers: int,
    seed: int,
    limit: int | None = None,
) -> BatchSource | LoaderSource:
    """Build the batch source of one job.

    Args:
        spec: the workload.
        batch_size: samples per step.
        device: where the model trains.
        source: ``synthetic`` or ``real``.
        placement: ``host`` or ``device``.
        path: dataset location for ``real``.
        num_workers: decoding workers for image folders.
        seed: data order and synthetic values.
        limit: read at most this many samples of a real dataset.
    """
    if source == "synthetic":
        return BatchSource(
            _synthetic(spec, batch_size, seed),
            batch_size,
            device,
            placement,
            images_uint8=False,
            shuffle=False,
            seed=seed,
        )
    from raycolloc.job.data import real

    reader = spec.reader
    if path is None:
        raise ValueError(f"workload {spec.name}: data.source={source!r} needs a dataset location (data.path)")
    if reader == "cifar10":
        ds = real.load_cifar10(path, limit=limit)
    elif reader == "imagenet64":
        ds = real.load_imagenet64(path, limit=limit)
    elif reader == "imagefolder":
        if placement == "device":
            raise ValueError(
                "data.placement=device needs an in-memory dataset; an image folder is decoded "
                "from disk every step: use data.placement=host"
            )
        folder = real.open_imagefolder(path, spec.sample_shape[-1], limit=limit)
        return LoaderSource(folder, batch_size, device, num_workers, seed)
    elif reader == "criteo":
        arrays = real.load_criteo_tsv(path, spec.table_sizes, limit=limit)
        columns = (torch.from_numpy(arrays.dense), torch.from_numpy(arrays.sparse), torch.from_numpy(arrays.labels))
        return BatchSource(columns, batch_size, device, placement, images_uint8=False, shuffle=True, seed=seed)
    else:
        raise ValueError(f"workload {spec.name} has no real-data loader for dataset {spec.dataset!r} (synthetic only)")
    if ds.num_classes > spec.num_classes:
        raise ValueError(f"{path}: {ds.num_classes} classes but workload {spec.name} has {spec.num_classes}")
    tensors = (torch.from_numpy(ds.images), torch.from_numpy(ds.labels))
    return BatchSource(tensors, batch_size, device, placement, images_uint8=True, shuffle=True, seed=seed)
