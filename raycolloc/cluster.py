"""Connecting to Ray: an existing cluster (``cluster.address``) or a local instance.

``cluster.backend=auto`` resolves here, once, before anything else: ``nvml`` when NVML finds a GPU
on this machine or an address is given, else ``sim`` (local mode with simulated GPUs).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import ray

from raycolloc.config import ClusterConfig, Config

__all__ = ["connect", "resolve_backend"]

log = logging.getLogger(__name__)
NAMESPACE = "raycolloc"


def resolve_backend(cfg: Config) -> Config:
    """Replace ``cluster.backend=auto`` by ``nvml`` or ``sim``."""
    if cfg.cluster.backend != "auto":
        return cfg
    from raycolloc.gpu.nvml import nvml_gpu_count

    remote = cfg.cluster.address or os.environ.get("RAY_ADDRESS")
    backend = "nvml" if remote or nvml_gpu_count() > 0 else "sim"
    return dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, backend=backend))


def connect(cluster: ClusterConfig, max_jobs_per_cell: int = 1) -> dict[str, Any]:
    """Connect to Ray once per process (no-op inside a Ray worker or when already connected)."""
    if ray.is_initialized():
        return ray.cluster_resources()
    kwargs: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": True}
    address = cluster.address or os.environ.get("RAY_ADDRESS")  # `ray job submit` sets RAY_ADDRESS
    if address:
        ray.init(address=address, **kwargs)
        return ray.cluster_resources()
    cpus = cluster.num_cpus or os.cpu_count() or 1
    if cluster.backend == "sim":
        # Simulated GPUs: logical CPUs for a degree-7 cell on every fake GPU (the jobs are tiny).
        cpus = cluster.num_cpus or max(cpus, (max(7, max_jobs_per_cell) + 1) * cluster.num_gpus)
        kwargs["num_gpus"] = cluster.num_gpus
    kwargs["include_dashboard"] = cluster.dashboard
    if cluster.dashboard:
        kwargs.update(dashboard_host=cluster.dashboard_host, dashboard_port=cluster.dashboard_port)
    if cluster.metrics_export_port:
        kwargs["_metrics_export_port"] = cluster.metrics_export_port
    # Workers at normal priority (Ray's default niceness 15 slows CPU-bound kernel launching).
    # address="local": a new instance even where `ray start` left one (ray.init() would join that
    # one, and refuse num_cpus/num_gpus for it).
    ray.init(address="local", num_cpus=cpus, _system_config={"worker_niceness": 0}, **kwargs)
    log.info("ray=local cpus=%s gpus=%s backend=%s", cpus, ray.cluster_resources().get("GPU"), cluster.backend)
    return ray.cluster_resources()
