"""Workloads: the registry and the study's presets.

Importing the package registers the presets (``presets`` decorates each with ``@register_workload``),
as timm's ``models`` package imports its model files: whoever imports ``raycolloc.job.workloads.registry``
imports this package first, so the registry is full before anyone lists it.
"""

from raycolloc.job.workloads import presets as presets  # imported to register the presets
from raycolloc.job.workloads.registry import create_workload, list_workloads, register_workload
from raycolloc.workload_kinds import ModelWorkload

__all__ = ["ModelWorkload", "create_workload", "list_workloads", "register_workload"]
