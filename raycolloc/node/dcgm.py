"""DCGM as a telemetry source (used when its Python bindings import and a host engine answers).

Not exercised in this project's own runs: the GPU machine it was developed on has no DCGM. The
field ids are DCGM's (dcgm_fields.h); profiling fields (1001-1005) are ratios 0..1, reported
here in percent like GPM. Per-MIG entities are not read through DCGM; MIG rows come from GPM.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

__all__ = ["DCGM_FIELDS", "DcgmFields", "dcgm_available"]

BINDINGS = Path("/usr/local/dcgm/bindings/python3")
DCGM_FIELDS: dict[str, int] = {
    "gr_engine_active": 1001,
    "sm_active": 1002,
    "sm_occupancy": 1003,
    "tensor_active": 1004,
    "dram_active": 1005,
    "pcie_tx_bytes_s": 1009,
    "pcie_rx_bytes_s": 1010,
    "gpu_util": 203,
    "power_w": 155,
    "energy_mj": 156,
    "mem_used_mib": 252,
}
_PERCENT = {"gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active"}
_UUID_FIELD = 54  # DCGM_FI_DEV_UUID


def _import_reader() -> Any:
    if BINDINGS.exists() and str(BINDINGS) not in sys.path:
        sys.path.append(str(BINDINGS))
    from DcgmReader import DcgmReader

    return DcgmReader


def dcgm_available() -> bool:
    """True when DCGM's Python bindings import and a host engine answers on this node."""
    try:
        reader = _import_reader()(fieldIds=[_UUID_FIELD], updateFrequency=1_000_000)
        reader.GetLatestGpuValuesAsFieldIdDict()
        reader.Shutdown()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no usable DCGM here"
        return False


class DcgmFields:
    """Latest values of :data:`DCGM_FIELDS` for one GPU, watched every ``interval_ms``."""

    def __init__(self, interval_ms: int) -> None:
        self.reader = _import_reader()(
            fieldIds=[*DCGM_FIELDS.values(), _UUID_FIELD], updateFrequency=interval_ms * 1000
        )

    def sample(self, uuid: str) -> dict[str, float | None]:
        data = self.reader.GetLatestGpuValuesAsFieldIdDict()
        values = next((v for v in data.values() if str(v.get(_UUID_FIELD, "")).strip() == uuid), None)
        if values is None:
            return {}
        out: dict[str, float | None] = {}
        for name, field in DCGM_FIELDS.items():
            raw = values.get(field)
            if raw is None:
                out[name] = None
                continue
            out[name] = float(raw) * (100.0 if name in _PERCENT else 1.0)
        return out

    def close(self) -> None:
        self.reader.Shutdown()
