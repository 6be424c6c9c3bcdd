"""How much device memory a job needs, estimated from its model (never from a table per model).

The model is built on PyTorch's ``meta`` device (shapes without storage, nothing allocated) and run
forward once at the job's batch size, counting the tensors autograd saves for the backward pass:
those are the activations that live until the backward frees them. Added to that: the weights,
their gradients and the optimiser's state (SGD momentum: one buffer per weight; DLRM's plain SGD:
none, and its embedding gradients are sparse). The allocator's caching and cuDNN workspaces come on
top on a real GPU; the measured peak is recorded per epoch (``peak_mem_reserved_mib``).

Uses: a simulated GPU's memory accounting (a job that does not fit fails as an out-of-memory
would), the size class of compositions that are not presets, and the dry run's listing.

Estimates are kept on disk (``$RAYCOLLOC_CACHE_DIR``, else ``~/.cache/raycolloc``), keyed by the
composition and the versions of torch, timm and raycolloc's own models: the first forward on the
meta device costs seconds in every new process (torch's import, its meta kernels' registration),
which every sweep's driver and every simulated job paid again.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycolloc.job.workloads.diskcache import cache_path, read_json, write_json
from raycolloc.procs import cache_env
from raycolloc.workload_kinds import ModelWorkload

if TYPE_CHECKING:
    from raycolloc.spec import JobSpec

__all__ = ["MemoryEstimate", "estimate_memory", "job_estimate_mib", "size_class"]

log = logging.getLogger(__name__)

MIB = 1 << 20
# Upper bounds (MiB of the estimate) of each size class, set between the estimates of the study's
# presets at their batch sizes: ResNet26/CIFAR-10 (S) 0.4 GiB; ResNet50 and EfficientNetV2-S on
# ImageNet64 (M) 1.7-1.9 GiB; CaiT-XXS24 and ResNet152 at 224 px (L) 7.7-16.9 GiB; XL beyond.
# (``tiny`` stays the name of the CPU presets.)
SIZE_CLASSES = (("S", 1024.0), ("M", 4096.0), ("L", 32768.0))


@dataclass(frozen=True)
class MemoryEstimate:
    """A job's estimated device memory, in MiB."""

    params: int
    weights_mib: float
    gradients_mib: float
    optimizer_mib: float
    activations_mib: float

    @property
    def total_mib(self) -> float:
        return self.weights_mib + self.gradients_mib + self.optimizer_mib + self.activations_mib


def estimate_memory(spec: ModelWorkload, batch_size: int) -> MemoryEstimate:
    """The estimate for ``spec`` at ``batch_size`` (cached per model, shape and batch).

    Raises:
        Exception: whatever the model raises when it cannot run on this input (a shape it does
            not take, too few pixels for its depth): the composition cannot train.
    """
    key = (spec.model or spec.name, spec.family, spec.sample_shape, spec.num_classes, spec.table_sizes, batch_size)
    if key in _FAILED:  # a model the meta device cannot run fails the same way every time: tried once
        raise _FAILED[key]
    if key not in _CACHE:
        on_disk = _stored_key(key)
        try:
            _CACHE[key] = _stored(on_disk) or _store(on_disk, _estimate(spec, batch_size))
        except NotImplementedError as exc:
            _FAILED[key] = exc
            raise
    return _CACHE[key]


def warn_no_estimate(name: str, why: str) -> None:
    """Log that ``name`` has no memory estimate, once per workload and process (a sweep or an advice
    composes the same workload for every cell and job: one line says it)."""
    if name not in _WARNED:
        _WARNED.add(name)
        log.warning("no memory estimate for %s (%s)", name, why)


def job_estimate_mib(job: JobSpec) -> float | None:
    """A job's estimate in MiB, without the CUDA context: the one the driver made and carried
    (compositions), else its model's. None for the user's own code or script, and for a model the
    meta device cannot run (the driver's pre-flight then does not judge it; a simulated GPU
    counts its parameters instead)."""
    if job.mem_estimate_mib is not None:
        return job.mem_estimate_mib
    if not isinstance(job.workload, ModelWorkload):  # the user's code or script
        return None
    try:
        return estimate_memory(job.workload, job.batch_size).total_mib
    except Exception as exc:  # noqa: BLE001 - a preset the meta device cannot run: no estimate
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        warn_no_estimate(job.workload.name, f"{type(exc).__name__}: {first}")
        return None


# (model, family, sample shape, classes, tables, batch) -> estimate: the same composition in many
# cells of a sweep is estimated once.
_CACHE: dict[tuple[object, ...], MemoryEstimate] = {}
_FAILED: dict[tuple[object, ...], NotImplementedError] = {}  # the meta device cannot run it
_WARNED: set[str] = set()  # workloads whose missing estimate was said
ESTIMATES = "memory-estimates.json"  # the cache file (raycolloc.job.workloads.diskcache)


def cache_file() -> Path:
    """Where estimates are kept between processes."""
    return cache_path(ESTIMATES)


def _stored_key(key: tuple[object, ...]) -> str:
    # What the estimate depends on beyond the composition: the library versions that define the
    # models and their meta kernels, and raycolloc's own models (tiny_cnn, DLRM) by their source file.
    models = Path(__file__).with_name("models.py").stat()
    versions = [_version("torch"), _version("timm"), models.st_size, models.st_mtime_ns]
    return json.dumps([*(list(k) if isinstance(k, tuple) else k for k in key), *versions])


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def _stored(key: str) -> MemoryEstimate | None:
    try:
        return MemoryEstimate(**_load_stored()[key])
    except (KeyError, TypeError):  # not there, or written by another layout of MemoryEstimate
        return None


def _load_stored() -> dict[str, dict[str, Any]]:
    stored = read_json(ESTIMATES)  # None: none yet, unreadable or torn: estimate again
    return stored if isinstance(stored, dict) else {}


def _store(key: str, estimate: MemoryEstimate) -> MemoryEstimate:
    """Add ``estimate`` to the file (two writers at once may lose one entry, which is then estimated
    again; a read-only cache directory: estimates are then made per process)."""
    write_json(ESTIMATES, {**_load_stored(), key: asdict(estimate)})
    return estimate


def _estimate(spec: ModelWorkload, batch: int) -> MemoryEstimate:
    # Building a model imports torch._dynamo, which makes inductor's cache directory: the node's compile
    # cache's, as the training processes', not torch's own in the temporary directory.
    cache_env(os.environ)
    import torch

    family, shape, tables = spec.family, spec.sample_shape, spec.table_sizes

    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    with torch.device("meta"):
        model = spec.build_model()
        if family == "dlrm":
            inputs: tuple[torch.Tensor, ...] = (
                torch.empty(batch, shape[0]),
                torch.zeros(batch, len(tables), dtype=torch.long),
            )
        else:
            inputs = (torch.empty(batch, *shape),)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(*inputs)
    dense = sparse = 0
    for module in model.modules():
        for p in module.parameters(recurse=False):
            size = p.numel() * p.element_size()
            if isinstance(module, torch.nn.EmbeddingBag | torch.nn.Embedding) and getattr(module, "sparse", False):
                sparse += size
            else:
                dense += size
    # Sparse embedding gradients hold only the rows of a batch: one row per sample and table.
    sparse_grads = (
        batch
        * len(tables)
        * 4
        * (next((m.embedding_dim for m in model.modules() if isinstance(m, torch.nn.EmbeddingBag)), 0))
    )
    momentum = 0 if family == "dlrm" else dense
    return MemoryEstimate(
        params=sum(p.numel() for p in model.parameters()),
        weights_mib=(dense + sparse) / MIB,
        gradients_mib=(dense + sparse_grads) / MIB,
        optimizer_mib=momentum / MIB,
        activations_mib=saved[0] / MIB,
    )


def size_class(spec: ModelWorkload, estimate: MemoryEstimate | None) -> str:
    """The study's class of a preset; for other compositions, the class of its estimate."""
    if spec.size is not None:
        return spec.size
    if estimate is None:
        return "?"
    return next((name for name, bound in SIZE_CLASSES if estimate.total_mib <= bound), "XL")
