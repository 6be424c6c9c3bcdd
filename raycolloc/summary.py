"""The short table printed after each cell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["cell_summary"]


def _fmt(value: Any, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def cell_summary(cell: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]) -> str:
    """A few lines: the cell's aggregate, then one line per job."""
    head = (f"cell {cell['cell_id']}  status={cell['status']}  gpu={cell.get('gpu_name') or '-'}  "
            f"aggregate={_fmt(cell.get('agg_samples_per_s'))} samples/s  "
            f"sm_active={_fmt(cell.get('sm_active_mean'), '.1f')}%  "
            f"mem_max={_fmt(cell.get('mem_used_max_mib'))} MiB  energy={_fmt(cell.get('energy_j'), ',.1f')} J  "
            f"telemetry={cell.get('telemetry_source')}")
    lines = [head, f"  {'job':<28}{'status':<8}{'epoch2 s':>10}{'samples/s':>12}{'peak MiB':>10}  note"]
    for j in jobs:
        note = (j.get("error") or "")[:80]
        if j.get("mig_uuid"):
            note = f"{j.get('mig_profile')} {j['mig_uuid'][:12]}… {note}"
        elif j.get("mps_client"):
            note = f"MPS client of {j.get('mps_server_pid')} {note}"
        lines.append(f"  {j['job_name']:<28}{j['status']:<8}{_fmt(j.get('epoch2_s'), '.2f'):>10}"
                     f"{_fmt(j.get('epoch2_samples_per_s')):>12}{_fmt(j.get('peak_mem_allocated_mib')):>10}  {note}")
    if cell.get("reason") and cell["status"] != "ok":
        lines.append(f"  reason: {str(cell['reason'])[:300]}")
    return "\n".join(lines)
