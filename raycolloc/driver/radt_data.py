"""A radT plan row's shared types (the row, its context, the plan's error) and what its data directory
holds: the dataset, recognised by contents here, by a mapping, or by its name
(:mod:`raycolloc.driver.radt_rows` turns the whole row into a job)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from raycolloc.datasets import DATASETS, IMAGENET_TRAIN
from raycolloc.procs import import_timm

__all__ = [
    "PlanError",
    "Row",
    "RowContext",
    "RowData",
    "data_path",
    "describe_dataset",
    "plan_error",
    "row_dataset",
    "synthetic_shape",
]


class PlanError(ValueError):
    """A plan CSV that cannot be turned into runnable cells."""


@dataclass
class Row:
    """One CSV line: its number and its fields by column."""

    line: int
    f: dict[str, str]

    def where(self, path: Path) -> str:
        f = self.f
        return f"{path}:{self.line}: Experiment {f['Experiment']!r} Workload {f['Workload']!r} Run {f['Run']!r}"


def plan_error(path: Path, row: Row, column: str, what: str, allowed: Sequence[str] = ()) -> PlanError:
    msg = f"{row.where(path)}: column {column}: {what}"
    return PlanError(msg + (f"; allowed: {', '.join(allowed)}" if allowed else ""))


@dataclass(frozen=True)
class RowContext:
    """What rows are read against: the plan's directory, the workloads and datasets it may name."""

    plan_dir: Path
    known: Sequence[str]
    datasets: Mapping[str, str] = field(default_factory=dict)  # +plan_datasets: dir name or path -> dataset
    synthetic: bool = False  # data.source=synthetic: an unrecognised dataset trains on synthetic images
    epoch_regex: str | None = None  # +plan_epoch_regex, for the script rows


@dataclass(frozen=True)
class RowData:
    """What a row's data directory holds: the dataset, the shape settings it needs, and what was
    assumed about it (``note``: a warning) or taken from its name alone (``by_name``: for the log)."""

    dataset: str
    shape: dict[str, int] = field(default_factory=dict)
    note: str | None = None
    by_name: str | None = None


def row_dataset(path: Path, row: Row, data: str | None, ctx: RowContext, model: str) -> RowData:
    """The dataset of a row's data directory: mapped, by its contents here, else by its name."""
    from raycolloc.job.data.detect import NAME_EXAMPLES, dataset_by_name, detect_dataset

    if data is None:
        if ctx.synthetic:
            return RowData("synthetic", synthetic_shape(model), "no --data: synthetic images")
        raise plan_error(path, row, "Params", f"model {model!r} needs a dataset (--data DIR)", NAME_EXAMPLES)
    name = PurePosixPath(data.rstrip("/")).name
    if (mapped := ctx.datasets.get(data, ctx.datasets.get(name))) is not None:
        return RowData(mapped)
    by_name = dataset_by_name(data)
    found = detect_dataset(data_path(ctx, data))
    if found is not None:
        if found.reader != "imagefolder":
            return RowData(found.reader)
        if by_name == "imagenet":
            return RowData("imagenet")
        shape = {"num_classes": int(found.num_classes or 1), "dataset_size": int(found.size or 1)}
        if by_name == "imagenet64":  # ImageNet64 as a tree of its 64 px images: read at 64 px, as they are
            shape["resolution"] = DATASETS["imagenet64"].resolution or 64
        return RowData("imagefolder", shape)
    if by_name is not None:
        return RowData(
            by_name,
            by_name=f"data directory {data!r} is not on this machine: taken for {by_name} "
            f"({describe_dataset(by_name)}) by its name",
        )
    if ctx.synthetic:
        return RowData(
            "synthetic",
            synthetic_shape(model),
            f"dataset of {data!r} not recognised: synthetic images of the model's default input",
        )
    raise plan_error(
        path,
        row,
        "Params",
        f"unknown dataset {name!r} (from {data!r}): not a directory holding CIFAR-10 "
        "batches, ImageNet64 npz, an ImageFolder tree or Criteo TSV here, nor a name raycolloc knows; map "
        "it with +plan_datasets={" + name + ": DATASET} or use data.source=synthetic",
        NAME_EXAMPLES,
    )


def describe_dataset(dataset: str) -> str:
    """A dataset's shape in a few words: ``64 px, 1000 classes, 1,281,167 images``."""
    info = DATASETS[dataset]
    parts = [
        f"{info.resolution} px" if info.resolution else None,
        f"{info.num_classes} classes" if info.family == "vision" and info.num_classes else None,
        f"{info.size:,} samples" if info.size else None,
    ]
    return ", ".join(p for p in parts if p)


def data_path(ctx: RowContext, data: str) -> str:
    """A row's data directory on this machine: relative ones are relative to the plan if there."""
    beside = ctx.plan_dir / data
    return str(beside.resolve()) if not Path(data).is_absolute() and beside.exists() else data


def synthetic_shape(model: str) -> dict[str, int]:
    """Synthetic images of the model's default input (timm's config) and ImageNet's classes and size."""
    cfg = import_timm().get_pretrained_cfg(model)
    res = int(cfg.input_size[-1]) if cfg is not None and cfg.input_size else 224
    return {"resolution": res, "num_classes": 1000, "dataset_size": IMAGENET_TRAIN}
