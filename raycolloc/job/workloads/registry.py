"""Workload registry: ``@register_workload`` / ``create_workload``, as timm does for models.

A workload is a model, a dataset and training settings. Presets are named compositions: plain
functions returning a :class:`WorkloadSpec` (``raycolloc.job.workloads.compose`` builds the same
spec for any timm model on any dataset). Importing this module is cheap (no torch), so configs can
validate names before any process starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from torch import nn

__all__ = ["WorkloadSpec", "create_workload", "list_workloads", "register_workload"]

_REGISTRY: dict[str, Callable[[], WorkloadSpec]] = {}


@dataclass(frozen=True)
class WorkloadSpec:
    """Everything a trainer needs to build and feed one training job.

    Attributes:
        name: the workload's name in result tables: the preset's, or ``<model>_<dataset>``.
        family: ``vision`` (images -> class) or ``dlrm`` (dense + sparse -> click).
        dataset: a name of :data:`raycolloc.job.workloads.datasets.DATASETS`.
        sample_shape: shape of one input sample (images: C, H, W).
        num_classes: classes (vision) or 1 (dlrm).
        dataset_size: samples in one epoch of the full dataset.
        batch_size: default batch size.
        build_model: returns a fresh ``nn.Module`` (also under ``torch.device("meta")``, for the
            memory estimate).
        model: the model's name (a timm name, ``dlrm`` or ``tiny_cnn``).
        size: the study's size class of a preset (S, M, L, XL, ``tiny``); None for other
            compositions, whose class comes from the memory estimate
            (:func:`raycolloc.job.workloads.estimate.size_class`).
        lr: learning rate of the SGD optimiser.
        table_sizes: embedding rows per categorical feature (dlrm only).
    """

    name: str
    family: str
    dataset: str
    sample_shape: tuple[int, ...]
    num_classes: int
    dataset_size: int
    batch_size: int
    build_model: Callable[[], nn.Module]
    model: str = ""
    size: str | None = None
    lr: float = 0.1
    table_sizes: tuple[int, ...] = field(default_factory=tuple)
    description: str = ""
    kind: ClassVar[str] = "model"

    @property
    def reader(self) -> str | None:
        """The loader of ``raycolloc.job.data.real`` that reads this dataset (None: synthetic only)."""
        from raycolloc.job.workloads.datasets import DATASETS

        return DATASETS[self.dataset].reader


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
    from raycolloc.job.workloads import presets  # noqa: F401
