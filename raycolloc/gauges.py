"""Ray dashboard gauges (``ray.util.metrics``), exported by Ray with a ``ray_`` prefix.

``raycolloc_job_samples_per_s{cell,job_name}``, ``raycolloc_gpu_sm_active{gpu,cell}`` (GPM/DCGM SM
activity, else NVML utilisation), ``raycolloc_gpu_mem_used_mib{gpu,cell}``,
``raycolloc_gpu_power_w{gpu,cell}``. Where Ray's metrics stack is not installed, gauges are no-ops.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

__all__ = ["make_gauge"]

log = logging.getLogger(__name__)


class _NoGauge:
    def set(self, value: float, tags: dict[str, str] | None = None) -> None:
        return None


def make_gauge(name: str, description: str, tag_keys: Sequence[str]) -> Any:
    """A ``ray.util.metrics.Gauge``, or a no-op stand-in when metrics cannot be exported here."""
    try:
        from ray.util.metrics import Gauge

        return Gauge(name, description, tag_keys=tuple(tag_keys))
    except Exception as exc:  # noqa: BLE001 - dashboards are optional, training is not
        log.warning("metrics=off gauge=%s reason=%s", name, exc)
        return _NoGauge()
