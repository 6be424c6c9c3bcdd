"""Workloads: the study's presets (:mod:`~raycolloc.job.workloads.presets`), their registry by name
(:mod:`~raycolloc.job.workloads.registry`), any timm model on any dataset
(:mod:`~raycolloc.job.workloads.compose`) and a sweep's ``workload`` group resolved to a job's
workload (:mod:`~raycolloc.job.workloads.resolve`).

This ``__init__`` imports none of them: Python runs it before any module of the package, so a
package that fills itself from its own modules imports itself in a circle.
"""
