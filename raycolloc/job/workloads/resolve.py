"""Resolve a ``workload`` config into what a job runs.

:func:`resolve` turns a validated :class:`~raycolloc.workload_config.WorkloadConfig` into one of the
three kinds of :mod:`raycolloc.workload_kinds`: a model raycolloc trains (a preset of
:mod:`raycolloc.job.workloads.registry` or a composition of
:func:`raycolloc.job.workloads.compose.compose`), the user's function or the user's script. It runs
in the driver, once per cell, and checks what the config contract cannot without importing the
registry or timm (a preset's name, a timm model's); the training process receives the result and
builds the model from it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from raycolloc.config_checks import ConfigError, check_choice
from raycolloc.datasets import DATASETS
from raycolloc.job.workloads.compose import (
    PYTHON_BATCH_SIZE,
    PYTHON_DATASET_SIZE,
    UnknownModel,
    check_composition,
    check_model,
    compose,
)
from raycolloc.job.workloads.registry import create_workload, list_workloads
from raycolloc.workload_config import KINDS, ConfigKind, PresetKind, PythonKind, ScriptKind, TimmKind, WorkloadConfig
from raycolloc.workload_kinds import ModelWorkload, PythonWorkload, ScriptWorkload, Workload

__all__ = ["resolve"]


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
