"""Recognise a dataset from what a directory holds, whatever it is called (radT plans name their
data directories freely: ``imagenet64_images/``, ``/scratch/c10``), or, where the directory is not
on this machine (a plan written on another), from its name.

Formats are those the readers of :mod:`raycolloc.job.data.real` take: CIFAR-10 python batches,
ImageNet64 npz batches, Criteo TSV click logs, an ImageFolder tree. Only names, and the first line
of a TSV, are read; images are counted, never decoded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from raycolloc.job.data.real import CIFAR10_FILES, CRITEO_FIELDS, IMAGE_EXTENSIONS

__all__ = ["NAME_EXAMPLES", "Detected", "dataset_by_name", "detect_dataset"]


@dataclass(frozen=True)
class Detected:
    """A recognised dataset: its reader's name, and for an image folder its classes and images."""

    reader: str  # cifar10, imagenet64, criteo, imagefolder
    num_classes: int | None = None
    size: int | None = None


def _criteo_file(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            first = f.readline(1 << 16)
    except OSError:
        return False
    return first.count(b"\t") == CRITEO_FIELDS - 1


def _imagefolder(root: Path) -> Detected | None:
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    images = 0
    for folder in classes:
        images += sum(1 for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
    return Detected("imagefolder", len(classes), images) if classes and images else None


def detect_dataset(path: str | Path) -> Detected | None:
    """What the directory (or file) at ``path`` holds; None if it does not exist or holds none of
    the formats raycolloc reads."""
    root = Path(path).expanduser()
    if root.is_file():
        return Detected("criteo") if _criteo_file(root) else None
    if not root.is_dir():
        return None
    for folder in (root, root / "cifar-10-batches-py"):
        if all((folder / name).is_file() for name in CIFAR10_FILES):
            return Detected("cifar10")
    if any(root.glob("train_data_batch_*.npz")):
        return Detected("imagenet64")
    tsv = (
        [root / "train.txt"]
        if (root / "train.txt").is_file()
        else sorted(p for p in root.iterdir() if p.is_file() and p.suffix in (".tsv", ".txt"))
    )
    if tsv and _criteo_file(tsv[0]):
        return Detected("criteo")
    return _imagefolder(root)


NAME_EXAMPLES = (
    "cifar10",
    "cifar-10-batches-py",
    "c10",
    "imagenet64",
    "imagenet64_images",
    "Imagenet64_train",
    "downsampled_imagenet/64x64",
    "imagenet",
    "criteo",
    "criteo_kaggle",
)
# Names are compared lower-case without "-", "_", "." or spaces: "Imagenet64_train" -> "imagenet64train".
_CIFAR10 = re.compile(r"^(?:cifar10|c10)(?:[a-z][a-z]*)?$")  # cifar10, cifar-10-batches-py, c10; never cifar100
_IMAGENET = re.compile(
    r"^(?P<down>downsampled|ds)?(?:imagenet|ilsvrc)(?:1k|2012)?(?P<size>\d+)?(?:x\d+)?(?:px)?"
    r"(?:images|train|val|data|batches|npz|png)?$"
)
_SIZE_FOLDER = re.compile(r"^(?:train|val|valid)?(?P<size>\d+)(?:x\d+)?(?:px)?$")  # 64x64/, train_64x64/
_CRITEO = re.compile(r"^(?:criteo[a-z]*|kaggle|dac)$")
# The downsampled ImageNet of Chrabaszcz et al. comes at these sides; only 64 px has a reader here.
_DOWNSAMPLED = {"8": None, "16": None, "32": None, "64": "imagenet64"}


def _name_key(part: str) -> str:
    return re.sub(r"[-_.\s]", "", part.lower())


def dataset_by_name(path: str) -> str | None:
    """The dataset a data directory's name says it holds (for a directory not on this machine).

    The last part of the path that names a dataset decides (``/raid/datasets/imagenet64_images/``
    -> ``imagenet64``, ``/d/cifar-10-batches-py`` -> ``cifar10``); a size folder below an ImageNet
    one counts as its side (``/data/downsampled_imagenet/64x64`` -> ``imagenet64``). None where no
    part names one, or names a downsampled ImageNet of a side raycolloc has no reader for (32 px).
    """
    size: str | None = None
    for part in reversed(PurePosixPath(path.rstrip("/")).parts):
        key = _name_key(part)
        if _CIFAR10.match(key):
            return "cifar10"
        if _CRITEO.match(key):
            return "criteo"
        if (m := _IMAGENET.match(key)) is not None:
            side = m["size"] if m["size"] in _DOWNSAMPLED else size
            if side is not None:
                return _DOWNSAMPLED[side]
            return None if m["down"] else "imagenet"  # a downsampled set that does not say its side
        if size is None and (m := _SIZE_FOLDER.match(key)) is not None and m["size"] in _DOWNSAMPLED:
            size = m["size"]
    return None
