"""Ray dashboard gauges (``ray.util.metrics``), exported by Ray with a ``ray_`` prefix.

``raycolloc_job_samples_per_s{cell,job_name}``, ``raycolloc_gpu_sm_active{gpu,cell}`` (GPM/DCGM SM
activity, else NVML utilisation), ``raycolloc_gpu_mem_used_mib{gpu,cell}``,
``raycolloc_gpu_power_w{gpu,cell}``. Where Ray's metrics stack is not installed, gauges are no-ops.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raycolloc.results.rows import TelemetryRow

__all__ = ["GpuGauges", "make_gauge"]

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


class GpuGauges:
    """A node steward's GPU gauges (SM activity, memory used, power per GPU and cell), made at the first
    telemetry row it publishes (a steward that samples nothing exports none)."""

    def __init__(self) -> None:
        self._gauges: dict[str, Any] = {}

    def publish(self, row: TelemetryRow) -> None:
        if not self._gauges:
            keys = ("gpu", "cell")
            self._gauges = {
                "sm_active": make_gauge("raycolloc_gpu_sm_active", "SM activity of a GPU (%)", keys),
                "mem_used_mib": make_gauge("raycolloc_gpu_mem_used_mib", "GPU memory used (MiB)", keys),
                "power_w": make_gauge("raycolloc_gpu_power_w", "GPU power (W)", keys),
            }
        tags = {"gpu": row.gpu_uuid, "cell": row.cell_id}
        # Without GPM or DCGM there is no SM activity; the gauge then shows NVML utilisation.
        sm = row.sm_active if row.sm_active is not None else row.gpu_util
        for key, value in (("sm_active", sm), ("mem_used_mib", row.mem_used_mib), ("power_w", row.power_w)):
            if value is not None:
                self._gauges[key].set(float(value), tags=tags)
