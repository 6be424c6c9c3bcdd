"""The datasets a composed workload trains on: shape, classes, size and which reader loads them.

Importing this module is cheap (no torch): configs validate dataset names with it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DATASETS", "IMAGENET_TRAIN", "DatasetInfo"]

IMAGENET_TRAIN = 1_281_167


@dataclass(frozen=True)
class DatasetInfo:
    """One dataset a workload can name.

    Attributes:
        name: what ``workload.dataset`` says.
        family: ``vision`` (images -> class) or ``dlrm`` (dense + sparse features -> click).
        reader: the loader of :mod:`raycolloc.job.data.real` for ``data.source=real``
            (cifar10, imagenet64, imagefolder, criteo); None: synthetic only.
        resolution: image side in pixels (None: set by ``workload.resolution``).
        num_classes: classes (None: counted from the tree, or ``workload.num_classes``).
        size: samples in one epoch (None: counted from the tree, or ``workload.dataset_size``).
        batch_size: default batch size of a composition on it.
        description: one line for listings.
    """

    name: str
    family: str
    reader: str | None
    resolution: int | None
    num_classes: int | None
    size: int | None
    batch_size: int
    description: str


DATASETS: dict[str, DatasetInfo] = {
    d.name: d
    for d in (
        DatasetInfo(
            "cifar10",
            "vision",
            "cifar10",
            32,
            10,
            50_000,
            128,
            "CIFAR-10 python batches (data_batch_1..5), 32 px, 10 classes",
        ),
        DatasetInfo(
            "imagenet64",
            "vision",
            "imagenet64",
            64,
            1000,
            IMAGENET_TRAIN,
            128,
            "Downsampled ImageNet 64x64 npz batches (train_data_batch_*.npz), 1000 classes",
        ),
        DatasetInfo(
            "imagenet",
            "vision",
            "imagefolder",
            224,
            1000,
            IMAGENET_TRAIN,
            64,
            "ImageNet as an ImageFolder tree (root/<class>/<image>), 224 px, 1000 classes",
        ),
        DatasetInfo(
            "imagefolder",
            "vision",
            "imagefolder",
            224,
            None,
            None,
            64,
            "any ImageFolder tree at data.path; classes and size counted from it, 224 px unless workload.resolution",
        ),
        DatasetInfo(
            "criteo",
            "dlrm",
            "criteo",
            None,
            1,
            45_840_617,
            2048,
            "Criteo click logs (TSV: label, 13 integer, 26 hex categorical features)",
        ),
        DatasetInfo(
            "synthetic",
            "vision",
            None,
            None,
            None,
            None,
            128,
            "random images of an explicit shape: workload.resolution, num_classes, dataset_size",
        ),
    )
}
