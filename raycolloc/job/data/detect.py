"""Recognise a dataset from what a directory holds, whatever it is called (radT plans name their
data directories freely: ``imagenet64_images/``, ``/scratch/c10``).

Formats are those the readers of :mod:`raycolloc.job.data.real` take: CIFAR-10 python batches,
ImageNet64 npz batches, Criteo TSV click logs, an ImageFolder tree. Only names, and the first line
of a TSV, are read; images are counted, never decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from raycolloc.job.data.real import CIFAR10_FILES, CRITEO_FIELDS, IMAGE_EXTENSIONS

__all__ = ["Detected", "detect_dataset"]


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
    tsv = [root / "train.txt"] if (root / "train.txt").is_file() else sorted(
        p for p in root.iterdir() if p.is_file() and p.suffix in (".tsv", ".txt"))
    if tsv and _criteo_file(tsv[0]):
        return Detected("criteo")
    return _imagefolder(root)
