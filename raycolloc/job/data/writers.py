"""Writers of the on-disk dataset layouts :mod:`raycolloc.job.data.real` reads, for tests and demo data.

Each ``write_*`` produces exactly the layout its reader expects (CIFAR-10 python batches,
ImageNet64 npz batches, an ImageFolder tree of PNGs, Criteo TSV).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from raycolloc.job.data.real import CIFAR10_FILES, check_images

__all__ = ["write_cifar10", "write_criteo_tsv", "write_imagefolder", "write_imagenet64"]


def write_cifar10(root: str | Path, images: np.ndarray, labels: np.ndarray) -> Path:
    """Write ``images`` (uint8 ``[N, 3, 32, 32]``) as ``data_batch_1`` .. ``data_batch_5`` under ``root``."""
    images, labels = check_images(images, labels, 32)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    parts = np.array_split(np.arange(len(labels)), len(CIFAR10_FILES))
    for i, (name, idx) in enumerate(zip(CIFAR10_FILES, parts, strict=True)):
        batch = {
            b"batch_label": f"training batch {i + 1} of 5".encode(),
            b"labels": [int(v) for v in labels[idx]],
            b"data": np.ascontiguousarray(images[idx].reshape(-1, 3072)),
            b"filenames": [f"img_{j:06d}.png".encode() for j in idx],
        }
        with (root / name).open("wb") as f:
            pickle.dump(batch, f, protocol=2)
    return root


def write_imagenet64(root: str | Path, images: np.ndarray, labels: np.ndarray, per_file: int = 128_116) -> list[Path]:
    """Write uint8 ``[N, 3, 64, 64]`` images and 0-based labels as ``train_data_batch_<k>.npz`` files."""
    images, labels = check_images(images, labels, 64)
    if per_file <= 0:
        raise ValueError(f"per_file must be positive, got {per_file}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, start in enumerate(range(0, max(len(labels), 1), per_file), start=1):
        path = root / f"train_data_batch_{k}.npz"
        chunk = images[start : start + per_file]
        np.savez(path, data=chunk.reshape(len(chunk), 12288), labels=labels[start : start + per_file] + 1)
        paths.append(path)
    return paths


def write_imagefolder(root: str | Path, images: np.ndarray, labels: np.ndarray) -> Path:
    """Write uint8 ``[N, 3, H, W]`` images as PNGs ``root/class_<id:04d>/<n:06d>.png``."""
    images, labels = check_images(images, labels, 0)
    root = Path(root)
    for n, (img, label) in enumerate(zip(images, labels, strict=True)):
        folder = root / f"class_{int(label):04d}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.ascontiguousarray(img.transpose(1, 2, 0))).save(folder / f"{n:06d}.png")
    return root


def write_criteo_tsv(
    path: str | Path,
    dense_ints: Sequence[Sequence[int | None]] | np.ndarray,
    cat_hex: Sequence[Sequence[str | int | None]] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
) -> Path:
    """Write Criteo rows; ``None``/``""`` values become empty fields, int categoricals become 8 hex digits."""
    if not len(dense_ints) == len(cat_hex) == len(labels):
        raise ValueError("dense_ints, cat_hex and labels must have the same number of rows")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="ascii", newline="\n") as f:
        for label, dense, cats in zip(labels, dense_ints, cat_hex, strict=True):
            if len(dense) != 13 or len(cats) != 26:
                raise ValueError(f"each row needs 13 integer and 26 categorical values, got {len(dense)}/{len(cats)}")
            ints = ["" if v is None else str(int(v)) for v in dense]
            hexes = ["" if c is None else c if isinstance(c, str) else f"{int(c):08x}" for c in cats]
            f.write("\t".join([str(int(label)), *ints, *hexes]) + "\n")
    return path
