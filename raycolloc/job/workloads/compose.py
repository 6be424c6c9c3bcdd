"""Compose a workload from a model, a dataset and settings.

:func:`compose` builds the :class:`~raycolloc.workload_kinds.ModelWorkload` of any timm model on any
dataset of :data:`~raycolloc.datasets.DATASETS` (the presets are such compositions, with names);
:func:`build_model` is what a training process calls to build the model. A ``workload`` config is
turned into what a job runs by :mod:`raycolloc.job.workloads.resolve`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycolloc.config_checks import closest
from raycolloc.datasets import DATASETS
from raycolloc.job.workloads.diskcache import read_json, write_json
from raycolloc.procs import import_timm
from raycolloc.workload_kinds import ModelWorkload

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "UnknownModel",
    "build_model",
    "check_composition",
    "check_model",
    "closest_models",
    "compose",
    "timm_model_names",
]

# Defaults of a python job (the function builds batches of raycolloc's batch size; an epoch is
# dataset_size samples) where neither the workload nor the top-level keys set them.
PYTHON_BATCH_SIZE = 32
PYTHON_DATASET_SIZE = 2048


class UnknownModel(ValueError):
    """A model name timm does not know; the message lists the closest names."""


def build_model(name: str, *args: Any) -> nn.Module:
    """Build a model of :mod:`raycolloc.job.workloads.models` (imported here, so that listing and
    validating workloads never imports torch)."""
    from raycolloc.job.workloads import models

    return getattr(models, name)(*args)


@functools.cache
def timm_model_names() -> tuple[str, ...]:
    """Every model name timm's registry knows.

    Importing timm (torch, torchvision, torch._dynamo) cost a driver ~8 CPU-seconds to check one
    ``workload.model``; so the names are cached on disk per timm install
    (:mod:`raycolloc.job.workloads.diskcache`), and only the machine's first check imports timm.
    """
    name = _timm_names_file()
    names = read_json(name) if name else None
    if isinstance(names, list) and names:
        return tuple(names)
    found = tuple(import_timm().list_models())
    if name:
        write_json(name, list(found))
    return found


def _timm_names_file() -> str | None:
    """The cache file of this timm install's names (its version and the stamp of its model registry,
    found without importing it), or None without timm."""
    spec = importlib.util.find_spec("timm")
    if spec is None or spec.origin is None:
        return None
    try:
        stamp = (Path(spec.origin).parent / "models" / "__init__.py").stat().st_mtime_ns
        return f"timm-models-{metadata.version('timm')}-{stamp}.json"
    except (OSError, metadata.PackageNotFoundError):
        return None


def closest_models(name: str) -> list[str]:
    """The timm names most like ``name`` (as typed, else lower-cased), best first."""
    names = timm_model_names()
    return closest(name, names) or closest(name.lower(), names)


def check_model(name: str) -> None:
    """Raises :class:`UnknownModel` naming the closest timm names."""
    if name not in timm_model_names():
        near = closest_models(name)
        hint = f"closest: {', '.join(near)}" if near else "see timm.list_models()"
        raise UnknownModel(f"timm knows no model {name!r}; {hint}")


def check_composition(dataset: str, resolution: int | None, num_classes: int | None, dataset_size: int | None) -> None:
    """What a ``workload=timm`` composition needs of its dataset, checked without building anything
    (the model's name: :func:`check_model`).

    Raises:
        ValueError: the dataset is unknown, or lacks a shape it must be given.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset; choose one of: {', '.join(DATASETS)}")
    info = DATASETS[dataset]
    if info.family != "vision":
        raise ValueError(
            f"{dataset} holds click logs, not images; it trains a DLRM: workload=dlrm_criteo (or tiny_dlrm)"
        )
    if dataset == "synthetic":
        missing = [
            k
            for k, v in (("resolution", resolution), ("num_classes", num_classes), ("dataset_size", dataset_size))
            if v is None
        ]
        if missing:
            raise ValueError(
                "synthetic data needs an explicit shape: set " + " ".join(f"workload.{k}=N" for k in missing)
            )


def compose(
    model: str,
    dataset: str,
    *,
    name: str | None = None,
    size: str | None = None,
    batch_size: int | None = None,
    resolution: int | None = None,
    num_classes: int | None = None,
    dataset_size: int | None = None,
    lr: float | None = None,
) -> ModelWorkload:
    """A timm model on a dataset: resolution, classes and size follow the dataset unless given.

    Raises:
        ValueError: the dataset leaves a shape open that is not given (synthetic, imagefolder).
    """
    info = DATASETS[dataset]
    res = resolution or info.resolution
    classes = num_classes or info.num_classes
    samples = dataset_size or info.size
    if res is None or classes is None or samples is None:
        raise ValueError(
            f"dataset {dataset} needs workload.resolution, workload.num_classes and "
            "workload.dataset_size (or data.source=real with data.path for an image folder)"
        )
    return ModelWorkload(
        name=name or f"{model}_{dataset}",
        family="vision",
        dataset=dataset,
        sample_shape=(3, res, res),
        num_classes=classes,
        dataset_size=samples,
        batch_size=batch_size or info.batch_size,
        model=model,
        size=size,
        lr=0.1 if lr is None else lr,
        build_model=functools.partial(build_model, "timm_model", model, classes, res),
        description=f"timm {model} on {dataset} {res}x{res}, {classes} classes",
    )
