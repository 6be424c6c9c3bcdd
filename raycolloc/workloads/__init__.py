"""Workloads: the registry and the study's presets."""

from raycolloc.workloads.registry import WorkloadSpec, create_workload, list_workloads, register_workload

__all__ = ["WorkloadSpec", "create_workload", "list_workloads", "register_workload"]
