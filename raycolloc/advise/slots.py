"""Where each job of a candidate runs: MIG devices of a GPU model's layout, MPS SM limits.

MIG devices come from the GPU model's profile table and placement rules
(:mod:`raycolloc.node.mig.placement`), exactly as a mig cell would be placed: a job's share of the
SMs is its compute instance's SMs over the GPU's, its share of memory bandwidth its GPU instance's
memory slices over the GPU's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from raycolloc.advise.model import Slot
from raycolloc.node.mig.layout import LayoutError
from raycolloc.node.mig.placement import gpu_model_of, requested_placement
from raycolloc.node.mig.profiles import UnknownGpuModel

__all__ = ["equal_share", "mig_slots", "mps_slots"]


def mig_slots(
    gpu_name: str, layout: Any, mix_layout: Any, job_profiles: Sequence[str | None]
) -> tuple[tuple[Slot, ...], tuple[str, ...]] | None:
    """The jobs' MIG slots (and device names) for a layout, as a mig cell would place them; None
    where the GPU model has no MIG table or the layout does not fit it."""
    try:
        model = gpu_model_of(gpu_name)
        placement = requested_placement(model, layout, mix_layout, list(job_profiles))
    except (UnknownGpuModel, LayoutError, ValueError):
        return None
    slots = tuple(
        Slot(
            sm_fraction=d.sm_count / model.total_sms,
            mem_fraction=d.gi.slot_size / model.memory_slices,
            memory_mib=float(d.memory_mib),
            group=d.gi_index,
            name=d.name,
        )
        for d in placement
    )
    return slots, tuple(d.name for d in placement)


def equal_share(degree: int) -> int:
    """An equal MPS active-thread percentage for ``degree`` jobs (rounded up: MPS allows the sum to
    exceed 100, and rounding down would leave SMs no job may use)."""
    return max(1, min(100, math.ceil(100 / degree)))


def mps_slots(percentages: Sequence[int | None]) -> tuple[Slot, ...]:
    """Slots of MPS jobs, each limited to its active-thread percentage of the SMs (None: no limit)."""
    return tuple(Slot() if p is None else Slot(sm_fraction=p / 100.0, name=f"atp={p}") for p in percentages)
