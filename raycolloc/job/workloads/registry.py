"""Workload registry: ``list_workloads`` / ``create_workload`` of the presets by name.

A workload is a model, a dataset and training settings. Presets are named compositions: plain
functions returning a :class:`~raycolloc.workload_kinds.ModelWorkload` (``raycolloc.job.workloads.compose``
builds the same spec for any timm model on any dataset), listed in
:data:`raycolloc.job.workloads.presets.PRESETS`. This module reads that list; the presets import
nothing of it, and the package's ``__init__`` imports none of its modules, so no import circles
back (the presets once registered themselves when the package was imported: package -> presets ->
compose -> package). Importing it is cheap (no torch): the driver checks names before any process starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from raycolloc.job.workloads.presets import PRESETS
from raycolloc.workload_kinds import ModelWorkload

__all__ = ["create_workload", "list_workloads", "registry_of"]


def registry_of(presets: Iterable[Callable[[], ModelWorkload]]) -> dict[str, Callable[[], ModelWorkload]]:
    """Preset functions by their own names.

    Raises:
        ValueError: two presets of one name.
    """
    table: dict[str, Callable[[], ModelWorkload]] = {}
    for fn in presets:
        if fn.__name__ in table:
            raise ValueError(f"workload {fn.__name__!r} is registered twice")
        table[fn.__name__] = fn
    return table


_REGISTRY = registry_of(PRESETS)


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
