"""Whether a dataset's files are what their names say, checked in the driver before anything runs.

:func:`~raycolloc.job.data.real.check_layout` finds the files a reader needs by name; a directory
of junk under those names passed it, and every job of the sweep then failed inside its training
process (an error row per job, after Ray and the GPU had been set up). Here each file is looked
into as cheaply as its format allows, reading a few bytes, never decoding a batch: a pickle starts
with its protocol mark and ends with its STOP opcode (a truncated one does not), an ``.npz`` is a
zip whose directory (at its end) lists ``data.npy`` and ``labels.npy``, a Criteo TSV's first line
has its 40 fields.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path

from raycolloc.job.data.real import CRITEO_FIELDS, DatasetError

__all__ = ["check_readable"]

_PICKLE_PROTO = b"\x80"  # protocol 2 and later begin with PROTO <version> (CIFAR-10's batches: protocol 2)
_PICKLE_STOP = b"."  # every pickle ends with STOP
_NPZ_KEYS = ("data.npy", "labels.npy")


def _check_pickle(path: Path) -> None:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(2)
        f.seek(max(size - 1, 0))
        tail = f.read(1)
    if len(head) < 2 or head[:1] != _PICKLE_PROTO or not 2 <= head[1] <= 5 or tail != _PICKLE_STOP:
        raise DatasetError(
            f"{path} is not a complete pickled CIFAR-10 batch (a python-version batch is a pickle "
            f"of protocol 2..5 ending in its STOP mark; this file is not, or was cut short)"
        )


def _check_npz(path: Path) -> None:
    try:
        with zipfile.ZipFile(path) as npz:
            names = set(npz.namelist())
    except (zipfile.BadZipFile, OSError) as exc:
        raise DatasetError(
            f"{path} is not a readable .npz batch ({exc}); expected a zip holding {' and '.join(_NPZ_KEYS)}"
        ) from None
    if missing := [k for k in _NPZ_KEYS if k not in names]:
        raise DatasetError(f"{path} lacks {', '.join(missing)}; an ImageNet64 batch holds {' and '.join(_NPZ_KEYS)}")


def _check_tsv(path: Path) -> None:
    with path.open("rb") as f:
        first = f.readline(1 << 16).rstrip(b"\r\n")
    fields = first.count(b"\t") + 1 if first else 0
    if fields != CRITEO_FIELDS:
        raise DatasetError(
            f"{path}: its first line has {fields} tab-separated fields; a Criteo line has "
            f"{CRITEO_FIELDS} (label, 13 integers, 26 categoricals)"
        )


_CHECKS = {"cifar10": _check_pickle, "imagenet64": _check_npz, "criteo": _check_tsv}


def check_readable(dataset: str, files: Sequence[Path]) -> None:
    """Each of ``files`` (as :func:`~raycolloc.job.data.real.check_layout` returns them) looks like ``dataset``'s
    format.

    Raises:
        DatasetError: naming the file and what it should hold.
    """
    check = _CHECKS.get(dataset)
    if check is None:
        return  # an image folder: check_layout found its class directories and images by name
    for path in files:
        try:
            check(path)
        except OSError as exc:
            raise DatasetError(f"{path} cannot be read: {exc.strerror or exc}") from None
