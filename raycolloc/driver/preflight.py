"""Pre-flight against the connected cluster, before any GPU state changes.

Three outcomes for a cell the cluster cannot run as asked:

* the config itself is wrong for every node there is (a MIG layout no GPU of the cluster's models
  can hold; more jobs than a node has cores or host memory for): :class:`~raycolloc.config.ConfigError`,
  exit 2, nothing runs (64 training processes on a 2-core, 24 GB machine had Ray's memory monitor
  kill 26 workers, and the cell never ended);
* the cluster at hand lacks what the cell needs (MIG disabled on every GPU, no MIG table for its
  GPU model): the cell is *skipped*, a result row with the reason, and the other cells run;
* the cell is valid but its jobs' memory estimate exceeds every GPU (or MIG instance) there is:
  the cell is *unfit*, a result row with the numbers asked and available (the study's CaiT x7
  on 40 GB); the other cells run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import ray

from raycolloc.config import ConfigError
from raycolloc.devices import GpuInfo
from raycolloc.mode_kinds import mode_of
from raycolloc.node.gpu.simdevice import CONTEXT_MIB
from raycolloc.node.mig.layout import LayoutError
from raycolloc.node.mig.profiles import UnknownGpuModel
from raycolloc.node.modes.mig import admin_hint, cell_placement
from raycolloc.spec import CellSpec, JobSpec, NodeInfo

__all__ = ["check_cluster", "check_nodes", "gpu_nodes", "job_gpu_memory_mib", "unfit_cells"]

log = logging.getLogger(__name__)
# What a node holds per job (host memory, jobs per core) is its backend's, with the measurements and
# allowances behind it: raycolloc.node.gpu.kinds, reported in each steward's NodeInfo.traits.


def gpu_nodes() -> dict[str, int]:
    """Live nodes of the cluster with GPUs: node id -> GPU count."""
    return {
        n["NodeID"]: int(n["Resources"]["GPU"])
        for n in ray.nodes()
        if n.get("Alive") and n["Resources"].get("GPU", 0) >= 1
    }


def _mig_verdict(cell: CellSpec, infos: list[NodeInfo]) -> tuple[str | None, list[str]]:
    """``(skip reason or None, layout errors)`` for a mig cell over the cluster's GPUs."""
    unavailable: list[str] = []
    layout_errors: list[str] = []
    for info in infos:
        for gpu in info.gpus:
            no_table = None
            try:
                cell_placement(cell, gpu.name)
            except UnknownGpuModel as exc:
                no_table = f"no MIG table for GPU {gpu.index} ({gpu.name}): {exc}"
            except (LayoutError, ValueError) as exc:
                layout_errors.append(str(exc))
                continue
            # What the GPU allows comes first: a GPU with MIG off is that, whatever raycolloc's tables know.
            # ... unless a simulated administrator switches MIG mode for each cell.
            switched = info.traits.simulated_admin and cell.config.cluster.sim_mig_mode == "auto"
            if not gpu.mig_supported:
                unavailable.append(f"GPU {gpu.index} ({gpu.name}) does not support MIG")
            elif not gpu.mig_enabled and not switched:
                unavailable.append(admin_hint(gpu))
            elif no_table:
                unavailable.append(no_table)
            else:
                return None, []
    if unavailable:
        return "mode=mig cannot run on this cluster: " + "; ".join(dict.fromkeys(unavailable)), layout_errors
    return None, layout_errors


def job_gpu_memory_mib(job: JobSpec) -> float | None:
    """A job's estimated device memory (MiB) with the CUDA context every process holds: the model's
    estimate (:mod:`raycolloc.job.workloads.estimate`, what a simulated GPU allocates for the job).
    None where there is none: the user's code or script, a model the meta device cannot run."""
    from raycolloc.job.workloads.estimate import job_estimate_mib

    mib = job_estimate_mib(job)
    return None if mib is None else mib + CONTEXT_MIB


def _gib(mib: float) -> str:
    return f"{mib / 1024:,.1f} GiB"


def check_nodes(cells: Sequence[CellSpec], infos: list[NodeInfo]) -> None:
    """Every cell must fit some GPU node's cores and host memory, with all its jobs at once.

    Raises:
        ConfigError: naming the cell, what it asks and what the largest node has.
    """
    errors = []
    for cell in cells:
        cores = sum(max(1, math.ceil(j.trainer.num_cpus)) for j in cell.jobs)
        # (node's backend, cores it allows, host memory the cell needs there, host memory available)
        nodes = [
            (
                info.backend,
                info.cpus * info.traits.jobs_per_core,
                cell.degree * info.traits.host_mib_per_job,
                info.mem_available_mib,
            )
            for info in infos
        ]
        if not any(cores <= allowed for _, allowed, _, _ in nodes):
            errors.append(
                f"{cell.label}: degree={cell.degree} x trainer.num_cpus={cell.config.trainer.num_cpus:g} "
                f"needs {cores} cores for its training processes; the largest GPU node allows "
                f"{max(allowed for _, allowed, _, _ in nodes)} (lower the degree or trainer.num_cpus)"
            )
        elif not any(need <= free for _, _, need, free in nodes):
            _, _, need, free = max(nodes, key=lambda node: node[3])
            errors.append(
                f"{cell.label}: degree={cell.degree} needs about {_gib(need)} of host memory for its "
                f"{cell.degree} training processes; the GPU node with the most has {_gib(free)} "
                f"available (lower the degree)"
            )
    if errors:
        raise ConfigError("; ".join(errors))


def _gpu_verdict(cell: CellSpec, gpu: GpuInfo) -> str | None:
    """Why the cell's jobs do not fit this GPU's memory (None if they do)."""
    estimates = [job_gpu_memory_mib(j) for j in cell.jobs]
    if any(mib is None for mib in estimates):
        return None  # a job without an estimate: its cell is not judged on memory
    need = [float(mib) for mib in estimates if mib is not None]
    if not mode_of(cell.mode).partitioned:
        if sum(need) <= gpu.memory_mib:
            return None
        return (
            f"{cell.degree} jobs x about {_gib(max(need))} (estimated peak per job) need {_gib(sum(need))}; "
            f"{gpu.name} has {_gib(gpu.memory_mib)}"
        )
    placement = cell_placement(cell, gpu.name)
    per_gi: dict[int, list[float]] = {}
    for device, mib in zip(placement, need, strict=True):
        per_gi.setdefault(device.gi_index, []).append(mib)
    for device in placement:
        asked = sum(per_gi[device.gi_index])
        if asked > device.memory_mib:
            return f"MIG instance {device.gi.name} holds {_gib(device.memory_mib)}; its jobs need about {_gib(asked)}"
    return None


def unfit_cells(cells: Sequence[CellSpec], infos: list[NodeInfo], skipped: dict[str, str]) -> dict[str, str]:
    """Cells whose jobs' memory estimate exceeds every GPU of the cluster: cell id -> the numbers."""
    unfit = {}
    for cell in cells:
        if cell.cell_id in skipped:
            continue
        verdicts = []
        for info in infos:
            for gpu in info.gpus:
                try:
                    verdicts.append(_gpu_verdict(cell, gpu))
                except (UnknownGpuModel, LayoutError, ValueError):
                    continue  # a MIG layout this GPU cannot hold: check_cluster's business
        if verdicts and all(v is not None for v in verdicts):
            unfit[cell.cell_id] = "unfit: " + "; ".join(dict.fromkeys(v for v in verdicts if v))
    return unfit


def check_cluster(cells: list[CellSpec], infos: list[NodeInfo]) -> dict[str, str]:
    """Check the cells against the GPUs the stewards reported (``infos``).

    Returns:
        cell id -> the reason it is skipped, for cells this cluster cannot run.

    Raises:
        ConfigError: a cell's config fits no GPU of the cluster at all.
    """
    if not infos or not any(info.gpus for info in infos):
        raise ConfigError("the Ray cluster has no GPU; use cluster=local for simulated GPUs, or start Ray on GPU nodes")
    skipped: dict[str, str] = {}
    errors: list[str] = []
    for cell in cells:
        if not mode_of(cell.mode).partitioned:
            continue
        reason, layout_errors = _mig_verdict(cell, infos)
        if reason is not None:
            skipped[cell.cell_id] = reason
        elif layout_errors:
            errors.append(
                f"{cell.label}: mig.layout fits no GPU of this cluster: " + "; ".join(dict.fromkeys(layout_errors))
            )
    if errors:
        raise ConfigError("; ".join(errors))
    return skipped
