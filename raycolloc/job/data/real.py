"""Readers (and small writers) for the on-disk dataset formats users bring.

Formats: CIFAR-10 "python version" pickles, Downsampled ImageNet 64x64 ``.npz``
batches, an ImageFolder tree (``root/<class>/<image>``) and Criteo TSV click logs.
:mod:`raycolloc.job.data.writers` writes each layout exactly as its reader expects.
"""

from __future__ import annotations

import itertools
import pickle
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

__all__ = [
    "check_layout",
    "ArrayDataset", "CriteoArrays", "DatasetError", "ImageFolderDataset",
    "load_cifar10", "load_criteo_tsv", "load_imagenet64", "open_imagefolder",
]  # fmt: skip

CIFAR10_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".ppm", ".tif", ".tiff", ".webp")
CRITEO_FIELDS = 40  # label + 13 integer + 26 categorical
_CHUNK_LINES = 1 << 16
_HEX = np.full(256, -1, dtype=np.int8)  # byte -> hex digit value; -1 if not hex; NUL (padding) -> 0
_HEX[0] = 0
_HEX[np.frombuffer(b"0123456789abcdef", np.uint8)] = np.arange(16)
_HEX[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16)


class DatasetError(ValueError):
    """A dataset path is missing or malformed. The message names the path and the expected layout."""


@dataclass(frozen=True)
class ArrayDataset:
    """In-memory image classification data.

    Attributes:
        images: uint8 array ``[N, C, H, W]``.
        labels: int64 array ``[N]`` of 0-based class ids.
        num_classes: Number of classes.
    """

    images: np.ndarray
    labels: np.ndarray
    num_classes: int

    def __len__(self) -> int:
        return int(self.labels.shape[0])


@dataclass(frozen=True)
class CriteoArrays:
    """Parsed Criteo rows.

    Attributes:
        dense: float32 ``[N, 13]``, ``log(1 + max(x, 0))``, missing -> 0.
        sparse: int64 ``[N, 26]``, hex categoricals hashed into ``[0, table_sizes[i])``; missing -> 0.
        labels: float32 ``[N]`` in ``{0, 1}``.
    """

    dense: np.ndarray
    sparse: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")


def check_images(images: np.ndarray, labels: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    images, labels = np.asarray(images), np.asarray(labels, dtype=np.int64)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"images must be uint8 [N, 3, H, W], got {images.dtype} {images.shape}")
    if size and images.shape[2:] != (size, size):
        raise ValueError(f"images must be [N, 3, {size}, {size}], got {images.shape}")
    if labels.shape != images.shape[:1]:
        raise ValueError(f"labels must be [{images.shape[0]}], got {labels.shape}")
    return images, labels


_CIFAR_LAYOUT = 'a pickled dict with b"data" uint8 [N, 3072] (R,G,B planes of 32x32) and b"labels" (N ints 0..9)'
_IMAGENET_LAYOUT = 'an .npz with "data" uint8 [N, 12288] (R,G,B planes of 64x64) and "labels" [N] in 1..1000'


_Reader = Callable[[Path], tuple[object, object]]


def _stack_batches(
    paths: Sequence[Path], read: _Reader, side: int, label_range: tuple[int, int], layout: str, limit: int | None
) -> ArrayDataset:
    """Read ``(data, labels)`` batches until ``limit`` samples, validate, and stack as ``[N, 3, side, side]``."""
    images: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    lo, hi = label_range
    for path in paths:
        if limit is not None and sum(map(len, labels)) >= limit and images:
            break
        try:
            raw_data, raw_labels = read(path)
            data, labs = np.asarray(raw_data), np.asarray(raw_labels, dtype=np.int64)
        except Exception as exc:  # unpickling, zip and key errors all mean a bad file
            raise DatasetError(f"{path} is not a readable batch; expected {layout} ({exc!r})") from exc
        if data.dtype != np.uint8 or data.shape[1:] != (3 * side * side,) or labs.shape != data.shape[:1]:
            got = f"got data {data.dtype} {list(data.shape)} and labels {list(labs.shape)}"
            raise DatasetError(f"{path}: wrong shape; expected {layout}, {got}")
        if labs.size and (labs.min() < lo or labs.max() > hi):
            raise DatasetError(f"{path}: labels must be in {lo}..{hi}, got {labs.min()}..{labs.max()}; {layout}")
        images.append(data.reshape(-1, 3, side, side))
        labels.append(labs - lo)
    return ArrayDataset(np.concatenate(images)[:limit], np.concatenate(labels)[:limit], hi - lo + 1)


def _read_cifar_batch(path: Path) -> tuple[object, object]:
    with path.open("rb") as f:
        batch = pickle.load(f, encoding="bytes")
    return batch[b"data"], batch[b"labels"]


def _read_npz_batch(path: Path) -> tuple[object, object]:
    with np.load(path, allow_pickle=False) as npz:
        return npz["data"], npz["labels"]


def load_cifar10(root: str | Path, limit: int | None = None) -> ArrayDataset:
    """Load the CIFAR-10 training batches (python version).

    Args:
        root: Directory holding ``data_batch_1`` .. ``data_batch_5``, or its parent
            holding ``cifar-10-batches-py/``.
        limit: Keep only the first ``limit`` samples (later batches are not read).

    Returns:
        ``ArrayDataset`` with images ``[N, 3, 32, 32]`` and 10 classes.
    """
    _check_limit(limit)
    root = Path(root)
    for folder in (root, root / "cifar-10-batches-py"):
        if all((folder / name).is_file() for name in CIFAR10_FILES):
            break
    else:
        where = folder if folder.is_dir() else root
        missing = [n for n in CIFAR10_FILES if not (where / n).is_file()]
        state = "does not exist" if not root.exists() else f"lacks {', '.join(missing)} (looked in {where})"
        raise DatasetError(
            f"CIFAR-10 directory {root} {state}: expected the python-version files "
            f"{', '.join(CIFAR10_FILES)} in {root} or in {root / 'cifar-10-batches-py'}"
        )
    paths = [folder / name for name in CIFAR10_FILES]
    return _stack_batches(paths, _read_cifar_batch, 32, (0, 9), _CIFAR_LAYOUT, limit)


def _batch_index(path: Path) -> int:
    match = re.fullmatch(r"train_data_batch_(\d+)\.npz", path.name)
    return int(match.group(1)) if match else -1


def load_imagenet64(root: str | Path, limit: int | None = None) -> ArrayDataset:
    """Load Downsampled ImageNet 64x64 ``train_data_batch_*.npz`` files (numeric order).

    Args:
        root: Directory holding ``train_data_batch_1.npz`` .. ``train_data_batch_10.npz``.
        limit: Keep only the first ``limit`` samples (later files are not read).

    Returns:
        ``ArrayDataset`` with images ``[N, 3, 64, 64]``, 0-based labels and 1000 classes.
    """
    _check_limit(limit)
    root = Path(root)
    files = sorted((p for p in root.glob("train_data_batch_*.npz") if _batch_index(p) >= 0), key=_batch_index)
    if not files:
        state = "does not exist" if not root.exists() else "holds no train_data_batch_<k>.npz files"
        raise DatasetError(
            f"ImageNet64 directory {root} {state}: expected train_data_batch_1.npz .. "
            'train_data_batch_10.npz with keys "data" (uint8 [N, 12288]) and "labels" (1..1000)'
        )
    return _stack_batches(files, _read_npz_batch, 64, (1, 1000), _IMAGENET_LAYOUT, limit)


class ImageFolderDataset(Dataset[tuple[torch.Tensor, int]]):
    """Images under ``root/<class>/<image>``; items are ``(uint8 tensor [3, S, S], label)``."""

    def __init__(self, root: Path, classes: list[str], samples: list[tuple[Path, int]], image_size: int) -> None:
        self.root, self.classes, self.samples, self.image_size = root, classes, samples, image_size
        self.num_classes = len(classes)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        try:
            with Image.open(path) as src:
                img = src.convert("RGB")
        except OSError as exc:
            raise DatasetError(f"cannot decode image {path} ({exc})") from exc
        size, (w, h) = self.image_size, img.size
        if min(w, h) != size:  # shorter side -> size, like torchvision Resize(int)
            w, h = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
            img = img.resize((w, h), Image.Resampling.BILINEAR)
        left, top = int(round((w - size) / 2.0)), int(round((h - size) / 2.0))
        img = img.crop((left, top, left + size, top + size))
        return torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).contiguous(), label


def open_imagefolder(root: str | Path, image_size: int, limit: int | None = None) -> ImageFolderDataset:
    """Index an ImageFolder tree; classes are sorted folder names mapped to ids ``0..K-1``.

    Args:
        root: Directory laid out as ``root/<class_name>/<image>.{jpg,jpeg,png,...}``.
        image_size: Output side; the shorter side is resized to it, then center-cropped.
        limit: Keep only the first ``limit`` images in (class, file name) order.
    """
    _check_limit(limit)
    if image_size <= 0:
        raise ValueError(f"image_size must be positive, got {image_size}")
    root = Path(root)
    layout = f"expected {root}/<class_name>/<image>.jpg|.jpeg|.png|... (one sub-folder per class)"
    if not root.is_dir():
        raise DatasetError(f"ImageFolder root {root} does not exist or is not a directory; {layout}")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DatasetError(f"ImageFolder root {root} has no class sub-folders; {layout}")
    samples = [
        (p, label)
        for label, name in enumerate(classes)
        for p in sorted((root / name).iterdir())
        if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
    ]
    if not samples:
        raise DatasetError(f"ImageFolder root {root} has class folders {classes[:5]} but no images; {layout}")
    return ImageFolderDataset(root, classes, samples[:limit], image_size)


def _criteo_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    layout = "expected a Criteo TSV file, or a directory holding train.txt or *.tsv / *.txt files"
    if not path.is_dir():
        raise DatasetError(f"Criteo path {path} does not exist; {layout}")
    if (path / "train.txt").is_file():
        return [path / "train.txt"]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".tsv", ".txt"))
    if not files:
        raise DatasetError(f"Criteo directory {path} holds no train.txt or *.tsv / *.txt files; {layout}")
    return files


def _parse_ints(cols: np.ndarray, path: Path, line_nos: np.ndarray) -> np.ndarray:
    try:
        return np.where(cols == b"", b"0", cols).astype(np.int64)
    except ValueError:
        for row, line in zip(cols.reshape(len(line_nos), -1), line_nos, strict=True):
            for value in row:
                try:
                    int(value or b"0")
                except ValueError:
                    text = value.decode(errors="replace")
                    raise DatasetError(f"{path}:{line}: field {text!r} is not an integer") from None
        raise DatasetError(f"{path}: malformed integer field") from None


def _parse_chunk(
    chunk: bytes, first_line: int, path: Path, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised parse of whole lines ``chunk`` (line numbers start at ``first_line``)."""
    chunk = chunk.replace(b"\r\n", b"\n")
    if not chunk.endswith(b"\n"):
        chunk += b"\n"
    buf = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    tabs = np.diff(np.searchsorted(np.flatnonzero(buf == 9), ends), prepend=0)
    blank = np.diff(ends, prepend=-1) == 1
    bad = np.flatnonzero(~blank & (tabs != CRITEO_FIELDS - 1))
    if bad.size:
        i = int(bad[0])
        raise DatasetError(
            f"{path}:{first_line + i}: found {tabs[i] + 1} fields, expected {CRITEO_FIELDS} tab-separated "
            "fields (label, 13 integer features, 26 hex categorical features)"
        )
    line_nos = first_line + np.flatnonzero(~blank)
    if blank.any():
        chunk = b"\n".join(line for line in chunk.split(b"\n") if line) + b"\n"
    fields = np.array(chunk[:-1].replace(b"\n", b"\t").split(b"\t")).reshape(-1, CRITEO_FIELDS)
    labels = _parse_ints(fields[:, 0], path, line_nos)
    if ((labels != 0) & (labels != 1)).any():
        raise DatasetError(f"{path}:{line_nos[np.argmax((labels != 0) & (labels != 1))]}: label must be 0 or 1")
    dense = np.log1p(np.maximum(_parse_ints(fields[:, 1:14], path, line_nos), 0)).astype(np.float32)
    cats = np.ascontiguousarray(fields[:, 14:])
    raw = cats.view(np.uint8).reshape(*cats.shape, cats.dtype.itemsize)
    width, lengths = raw.shape[-1], (raw != 0).sum(axis=-1)
    digits = _HEX[raw]
    invalid = (digits < 0).any(axis=-1)
    sparse = np.zeros(cats.shape, dtype=np.int64)
    if width <= 15:  # fits int64: Horner over all slots, then shift the padding zeros back out
        for j in range(width):
            sparse = sparse * 16 + digits[..., j]
        sparse = (sparse >> (4 * (width - lengths))) % sizes
    else:  # long strings: reduce modulo the table size after every real digit
        for j in range(width):
            sparse = np.where(j < lengths, (sparse * 16 + digits[..., j]) % sizes, sparse)
    if invalid.any():
        row, col = np.argwhere(invalid)[0]
        text = cats[row, col].decode(errors="replace")
        raise DatasetError(f"{path}:{line_nos[row]}: categorical field C{col + 1}={text!r} is not hex")
    return dense, sparse, labels.astype(np.float32)


def load_criteo_tsv(path: str | Path, table_sizes: Sequence[int], limit: int | None = None) -> CriteoArrays:
    """Parse Criteo click logs (``label \\t I1..I13 \\t C1..C26``; any field may be empty).

    Args:
        path: A TSV file, or a directory holding ``train.txt`` or ``*.tsv`` / ``*.txt`` files.
        table_sizes: 26 embedding table sizes; categorical ``i`` becomes ``int(hex, 16) % table_sizes[i]``.
        limit: Stop after this many rows.
    """
    _check_limit(limit)
    if len(table_sizes) != 26:
        raise ValueError(f"table_sizes must have 26 entries (one per categorical), got {len(table_sizes)}")
    sizes = np.asarray(table_sizes, dtype=np.int64)
    if (sizes <= 0).any():
        raise ValueError(f"table_sizes must be positive, got {list(table_sizes)}")
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    rows = 0
    for file in _criteo_files(Path(path)):
        with file.open("rb") as f:
            line_no = 1
            while limit is None or rows < limit:
                n = _CHUNK_LINES if limit is None else min(_CHUNK_LINES, limit - rows)
                lines = list(itertools.islice(f, n))
                if not lines:
                    break
                parts.append(_parse_chunk(b"".join(lines), line_no, file, sizes))
                line_no += len(lines)
                rows += len(parts[-1][2])
    if not parts:
        return CriteoArrays(np.zeros((0, 13), np.float32), np.zeros((0, 26), np.int64), np.zeros(0, np.float32))
    return CriteoArrays(*(np.concatenate(p)[:limit] for p in zip(*parts, strict=True)))


def check_layout(dataset: str, path: str | Path) -> list[Path]:
    """Cheap pre-flight: the files a loader needs are there (nothing is read or decoded).

    Args:
        dataset: cifar10, imagenet64, imagefolder or criteo.
        path: the dataset location given as ``data.path``.

    Returns:
        The data files the loader reads first (:func:`raycolloc.job.data.readable.check_readable` looks into them).

    Raises:
        DatasetError: naming the path and the expected layout.
    """
    root = Path(path).expanduser()
    if dataset == "criteo":
        return _criteo_files(root)
    if not root.is_dir():
        raise DatasetError(f"dataset path {root} is not a directory ({dataset} expected there)")
    if dataset == "cifar10":
        base = root / "cifar-10-batches-py" if (root / "cifar-10-batches-py").is_dir() else root
        missing = [name for name in CIFAR10_FILES if not (base / name).is_file()]
        if missing:
            raise DatasetError(
                f"CIFAR-10 directory {base} lacks {', '.join(missing)}; expected the python "
                f"batches {', '.join(CIFAR10_FILES)}"
            )
        return [base / name for name in CIFAR10_FILES]
    if dataset == "imagenet64":
        if not (files := sorted(root.glob("train_data_batch_*.npz"))):
            raise DatasetError(f"ImageNet64 directory {root} holds no train_data_batch_*.npz files")
        return files
    if dataset == "imagefolder":
        if not any(p.is_dir() and not p.name.startswith(".") for p in root.iterdir()):
            raise DatasetError(f"image folder {root} has no class directories; expected root/<class>/<image>")
        return []
    raise DatasetError(f"no reader for dataset {dataset!r}")
