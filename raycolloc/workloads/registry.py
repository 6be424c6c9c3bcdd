"""Workload registry: ``@register_workload`` / ``create_workload``, as timm does for models.

A workload is a model, a loss, an optimiser and the shape of the data it trains on. Presets are
plain functions returning a :class:`WorkloadSpec`; importing this module is cheap (no torch), so
configs can validate names before any process starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

__all__ = ["WorkloadSpec", "create_workload", "list_workloads", "register_workload"]

_REGISTRY: dict[str, Callable[[], WorkloadSpec]] = {}


@dataclass(frozen=True)
class WorkloadSpec:
    """Everything a trainer needs to build and feed one training job.

    Attributes:
        name: registry name.
        family: ``vision`` (images -> class) or ``dlrm`` (dense + sparse -> click).
        dataset: dataset format the real loader reads: cifar10, imagenet64, imagefolder, criteo.
        sample_shape: shape of one input sample (images: C, H, W).
        num_classes: classes (vision) or 1 (dlrm).
        dataset_size: samples in one epoch of the full dataset.
        batch_size: default batch size of the preset.
        size: the study's size class (S, M, L, XL) or ``tiny`` for CPU presets.
        build_model: returns a fresh ``nn.Module``.
        lr: learning rate of the SGD optimiser.
        table_sizes: embedding rows per categorical feature (dlrm only).
        memory_gib: rough peak GPU memory at the default batch size, for the pre-flight estimate.
    """

    name: str
    family: str
    dataset: str
    sample_shape: tuple[int, ...]
    num_classes: int
    dataset_size: int
    batch_size: int
    size: str
    build_model: Callable[[], nn.Module]
    lr: float = 0.1
    table_sizes: tuple[int, ...] = field(default_factory=tuple)
    memory_gib: float = 1.0
    description: str = ""


def register_workload(fn: Callable[[], WorkloadSpec]) -> Callable[[], WorkloadSpec]:
    """Register a preset function under its own name."""
    if fn.__name__ in _REGISTRY:
        raise ValueError(f"workload {fn.__name__!r} is registered twice")
    _REGISTRY[fn.__name__] = fn
    return fn


def list_workloads() -> list[str]:
    """Names of all registered workloads, sorted."""
    _load_presets()
    return sorted(_REGISTRY)


def create_workload(name: str, **overrides: Any) -> WorkloadSpec:
    """Build the spec of a registered workload, with optional field overrides.

    Raises:
        KeyError: unknown name; the message lists the registered ones.
    """
    _load_presets()
    if name not in _REGISTRY:
        raise KeyError(f"unknown workload {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    spec = _REGISTRY[name]()
    return replace(spec, **overrides) if overrides else spec


def _load_presets() -> None:
    # The presets module registers itself on import; kept lazy to avoid an import cycle.
    from raycolloc.workloads import presets  # noqa: F401
