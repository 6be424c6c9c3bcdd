"""Workloads: the registry and the study's presets."""

from raycolloc.job.workloads.registry import WorkloadSpec, create_workload, list_workloads, register_workload

__all__ = ["WorkloadSpec", "create_workload", "list_workloads", "register_workload"]
