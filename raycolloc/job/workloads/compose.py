"""Compose a workload from a model, a dataset and settings; resolve a ``workload`` config into what
a job runs.

:func:`compose` builds the :class:`~raycolloc.workload_kinds.ModelWorkload` of any timm model on any
dataset of :data:`~raycolloc.datasets.DATASETS` (the presets are such compositions, with names).
:func:`resolve` turns a validated :class:`~raycolloc.workload_config.WorkloadConfig` into one of the
three kinds of :mod:`raycolloc.workload_kinds`: a model raycolloc trains, the user's function or the
user's script. It runs in the driver, once per cell, and checks what the config contract cannot
without importing the registry or timm (a preset's name, a timm model's); the training process
receives the result and builds the model from it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycolloc.config_checks import ConfigError, check_choice, closest
from raycolloc.datasets import DATASETS
from raycolloc.job.workloads.diskcache import read_json, write_json
from raycolloc.job.workloads.registry import create_workload, list_workloads
from raycolloc.workload_config import KINDS, ConfigKind, PresetKind, PythonKind, ScriptKind, TimmKind, WorkloadConfig
from raycolloc.workload_kinds import ModelWorkload, PythonWorkload, ScriptWorkload, Workload

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "UnknownModel",
    "build_model",
    "check_composition",
    "check_model",
    "closest_models",
    "compose",
    "resolve",
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
    import timm

    found = tuple(timm.list_models())
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


def _count_imagefolder(path: str | None, resolution: int) -> tuple[int, int]:
    """(classes, images) of an ImageFolder tree, for a composition on ``data.source=real``."""
    from raycolloc.job.data.real import DatasetError, open_imagefolder

    try:
        folder = open_imagefolder(str(path), resolution)
    except DatasetError as exc:
        raise ConfigError(f"data.path: {exc}") from None
    return folder.num_classes, len(folder)


def _resolve_preset(wc: WorkloadConfig, label: str, source: str, path: str | None) -> ModelWorkload:
    check_choice("workload", wc.name, (*list_workloads(), *KINDS))
    spec = create_workload(wc.name)
    for key in ("resolution", "num_classes"):
        if getattr(wc, key) is not None:
            raise ConfigError(
                f"workload.{key} does not apply to the preset {wc.name} (its model is built for "
                f"{spec.dataset}); compose it instead: workload=timm workload.model={spec.model} "
                f"workload.dataset={spec.dataset} workload.{key}=..."
            )
    changes = {k: getattr(wc, k) for k in ("batch_size", "dataset_size", "lr") if getattr(wc, k) is not None}
    return replace(spec, **changes) if changes else spec


def _resolve_timm(wc: WorkloadConfig, label: str, source: str, path: str | None) -> ModelWorkload:
    # Checked here, in the driver (the config contract imports no timm): the name, then the dataset.
    try:
        check_model(str(wc.model))
    except UnknownModel as exc:
        raise ConfigError(f"workload.model={wc.model!r}: {exc}") from None
    if not wc.dataset:
        raise ConfigError(f"workload=timm needs workload.dataset; choose one of: {', '.join(DATASETS)}")
    try:
        check_composition(wc.dataset, wc.resolution, wc.num_classes, wc.dataset_size)
    except ValueError as exc:
        raise ConfigError(f"workload.dataset={wc.dataset!r}: {exc}") from None
    info = DATASETS[wc.dataset]
    classes, samples = wc.num_classes, wc.dataset_size
    if wc.dataset == "imagefolder" and (classes is None or samples is None):
        if source != "real":
            raise ConfigError(
                "workload.dataset=imagefolder counts its classes and images in data.path: set "
                "data.source=real data.path=DIR, or workload.num_classes and workload.dataset_size"
            )
        counted_classes, counted = _count_imagefolder(path, wc.resolution or info.resolution or 224)
        classes, samples = classes or counted_classes, samples or counted
    return compose(
        str(wc.model),
        str(wc.dataset),
        name=label,
        batch_size=wc.batch_size,
        resolution=wc.resolution,
        num_classes=classes,
        dataset_size=samples,
        lr=wc.lr,
    )


def _entry_root(entry: str) -> str | None:
    """The directory to put on ``sys.path`` so that ``entry``'s module imports in another process.

    Raises:
        ConfigError: the module cannot be found or imported, or has no such function.
    """
    module, function = entry.split(":")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        found, why = None, str(exc)
    else:
        why = "no such module on sys.path (run from the directory that holds it, or install it)"
    if found is None:
        raise ConfigError(f"workload.entry={entry!r}: cannot import {module}: {why}")
    try:
        target = getattr(importlib.import_module(module), function, None)
    except Exception as exc:  # noqa: BLE001 - the user's module failed on import: say why
        raise ConfigError(f"workload.entry={entry!r}: importing {module} failed: {type(exc).__name__}: {exc}") from None
    if not callable(target):
        raise ConfigError(f"workload.entry={entry!r}: {module} has no function {function!r}")
    if not found.origin or found.origin in ("built-in", "frozen"):
        return None
    origin = Path(found.origin).resolve()
    depth = module.count(".") + (1 if origin.name == "__init__.py" else 0)
    return str(origin.parents[depth])


def _resolve_python(wc: WorkloadConfig, label: str, source: str, path: str | None) -> PythonWorkload:
    return PythonWorkload(
        name=label,
        entry=str(wc.entry),
        args=dict(wc.args),
        batch_size=wc.batch_size or PYTHON_BATCH_SIZE,
        dataset_size=wc.dataset_size or PYTHON_DATASET_SIZE,
        lr=wc.lr,
        model=wc.model,
        dataset=wc.dataset,
        sys_path=_entry_root(str(wc.entry)),
    )


def _resolve_script(wc: WorkloadConfig, label: str, source: str, path: str | None) -> ScriptWorkload:
    # Relative paths in the command are relative to where the sweep was started, as in a shell.
    cwd = str(Path(wc.cwd).expanduser().resolve()) if wc.cwd else os.getcwd()
    if not Path(cwd).is_dir():
        raise ConfigError(f"workload.cwd={wc.cwd!r} is not a directory")
    return ScriptWorkload(
        name=label,
        command=tuple(wc.command),
        cwd=cwd,
        env=dict(wc.env),
        epoch_regex=wc.epoch_regex,
        model=wc.model,
        dataset=wc.dataset,
    )


# Each kind of workload config resolves into its kind of job (the registry and timm, which the
# config contract does not import, are consulted here, in the driver).
_RESOLVERS: dict[type[ConfigKind], Callable[[WorkloadConfig, str, str, str | None], Workload]] = {
    PresetKind: _resolve_preset,
    TimmKind: _resolve_timm,
    PythonKind: _resolve_python,
    ScriptKind: _resolve_script,
}


def resolve(wc: WorkloadConfig, label: str, source: str = "synthetic", path: str | None = None) -> Workload:
    """What a job of this workload runs (in the driver, once): the preset's or the composition's
    model (its name checked against the registry or timm's), the user's function or script.

    Args:
        wc: the validated workload config.
        label: its name in the result tables (``raycolloc.workload_config.workload_label``).
        source: ``data.source`` (an image folder's classes are counted with ``real``).
        path: the job's dataset location.

    Raises:
        ConfigError: naming the key.
    """
    return _RESOLVERS[type(wc.kind)](wc, label, source, path)
