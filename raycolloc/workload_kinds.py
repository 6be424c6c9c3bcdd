"""The three kinds of job a workload resolves into, each with its own behaviour: a model raycolloc
builds and trains (:class:`ModelWorkload`), the user's function (:class:`PythonWorkload`) and the user's
unmodified script (:class:`ScriptWorkload`).

The driver resolves a ``workload`` config into one of them, once per cell
(:func:`raycolloc.job.workloads.resolve.resolve`); :class:`~raycolloc.spec.JobSpec` carries it to the
trainers. Part of the config contract: importing this module imports no torch and nothing from the
driver, node or job packages, so every process reads the same types. Each kind answers for itself
what the driver and the results need of it (:meth:`amount`, :meth:`describe`, ``as_written`` and the
jobs table's ``kind``); the training process builds a model or the user's job by the kind's type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from raycolloc.datasets import DATASETS

if TYPE_CHECKING:
    from torch import nn

    from raycolloc.spec import JobSpec

__all__ = ["PythonWorkload", "ScriptWorkload", "Workload", "ModelWorkload"]


def _amount(job: JobSpec) -> str:
    return f"batch {job.batch_size}, {job.epoch_samples} samples x {job.epochs} epochs"


@dataclass(frozen=True)
class ModelWorkload:
    """A model raycolloc builds and trains: everything a trainer needs to build and feed the job.

    Attributes:
        name: the workload's name in result tables: the preset's, or ``<model>_<dataset>``.
        family: ``vision`` (images -> class) or ``dlrm`` (dense + sparse -> click).
        dataset: a name of :data:`raycolloc.datasets.DATASETS`.
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
    kind: ClassVar[str] = "model"  # the jobs table's ``kind`` column (data: kept as written before)
    as_written: ClassVar[bool] = False  # raycolloc sets its settings and runs its protocol

    @property
    def reader(self) -> str | None:
        """The loader of ``raycolloc.job.data.real`` that reads this dataset (None: synthetic only)."""
        return DATASETS[self.dataset].reader

    def amount(self, batch_size: int | None, epoch_samples: int | None) -> tuple[int, int]:
        """The job's batch size and epoch length: the ones asked for, else the workload's own."""
        return batch_size or self.batch_size, epoch_samples or self.dataset_size

    def describe(self, job: JobSpec) -> str:
        """One line for the dry run: what it trains and how much."""
        shape = "x".join(map(str, self.sample_shape))
        memory = f", ~{job.mem_estimate_mib:,.0f} MiB estimated" if job.mem_estimate_mib is not None else ""
        data = f"data {job.data.source}" + (f" {job.data.path}" if job.data.source == "real" else "")
        return (
            f"{job.name}: {self.model} on {self.dataset} ({shape}, {self.num_classes} classes), "
            f"{_amount(job)}, {data}{memory}"
        )


@dataclass(frozen=True)
class PythonWorkload:
    """The user's function builds the job (``workload=python``); raycolloc runs the protocol.

    ``sys_path`` is the directory the entry's top-level package lives in, found in the driver, so
    the training process imports the same module wherever its Ray worker started.
    """

    name: str
    entry: str
    args: dict[str, Any]
    batch_size: int
    dataset_size: int
    lr: float | None = None
    model: str | None = None
    dataset: str | None = None
    sys_path: str | None = None
    kind: ClassVar[str] = "python"
    as_written: ClassVar[bool] = False

    def amount(self, batch_size: int | None, epoch_samples: int | None) -> tuple[int, int]:
        """The job's batch size and epoch length: the ones asked for, else the workload's defaults."""
        return batch_size or self.batch_size, epoch_samples or self.dataset_size

    def describe(self, job: JobSpec) -> str:
        """One line for the dry run: the function it calls and how much it trains."""
        return f"{job.name}: python {self.entry}({self.args or ''}), {_amount(job)}"


@dataclass(frozen=True)
class ScriptWorkload:
    """The user's unmodified script is the job (``workload=script``); see ``raycolloc.job.script``.

    It runs as written (``as_written``): raycolloc sets none of its settings (batch size, epoch
    length, compile, amp), holds no warm-up barrier and measures it from outside, in an actor of
    its own.
    """

    name: str
    command: tuple[str, ...]
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    epoch_regex: str | None = None
    model: str | None = None
    dataset: str | None = None
    kind: ClassVar[str] = "script"
    as_written: ClassVar[bool] = True

    def amount(self, batch_size: int | None, epoch_samples: int | None) -> tuple[int, int]:
        """0 and 0: the script chooses its own batches and epochs."""
        return 0, 0

    def describe(self, job: JobSpec) -> str:
        """One line for the dry run: the command and how its epochs are seen."""
        marks = f", epochs marked by {self.epoch_regex!r}" if self.epoch_regex else ", no epoch marks (lifetime only)"
        return f"{job.name}: script `{' '.join(self.command)}` in {self.cwd}{marks}"


Workload = ModelWorkload | PythonWorkload | ScriptWorkload
