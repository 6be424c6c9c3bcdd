"""Workload registry: ``@register_workload`` / ``create_workload``, as timm does for models.

A workload is a model, a dataset and training settings. Presets are named compositions: plain
functions returning a :class:`~raycolloc.workload_kinds.ModelWorkload` (``raycolloc.job.workloads.compose``
builds the same spec for any timm model on any dataset). The presets register themselves when the
package is imported (its ``__init__`` imports :mod:`raycolloc.job.workloads.presets`, as timm's
``models`` package imports its model files), so this module imports none of them and no import
circles back here. Importing it is cheap (no torch): the driver checks names before any process starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from raycolloc.workload_kinds import ModelWorkload

__all__ = ["create_workload", "list_workloads", "register_workload"]

_REGISTRY: dict[str, Callable[[], ModelWorkload]] = {}


def register_workload(fn: Callable[[], ModelWorkload]) -> Callable[[], ModelWorkload]:
    """Register a preset function under its own name."""
    if fn.__name__ in _REGISTRY:
        raise ValueError(f"workload {fn.__name__!r} is registered twice")
    _REGISTRY[fn.__name__] = fn
    return fn


def list_workloads() -> list[str]:
    """Names of all registered workloads, sorted."""
    return sorted(_REGISTRY)


def create_workload(name: str, **overrides: Any) -> ModelWorkload:
    """Build the spec of a registered workload, with optional field overrides.

    Raises:
        KeyError: unknown name; the message lists the registered ones.
    """
    if name not in _REGISTRY:
        raise KeyError(f"unknown workload {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    spec = _REGISTRY[name]()
    return replace(spec, **overrides) if overrides else spec
