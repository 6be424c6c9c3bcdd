"""MIG: the cell's layout on the GPU (applied when allowed, else required), one MIG device per job.

:class:`MigMode` reads MIG mode and the GPU's instances through the backend. If the existing
layout has the requested shape it is used as is. Otherwise, when ``mig.allow_reconfigure`` allows it
(``true``; ``null``, the default, allows it on simulated GPUs only) and the process may (root), it destroys the
instances it found, creates the requested ones (GPU
instances with placement, then their compute instances), and on release restores exactly what it
found; the layout found is also recorded on disk (``<pipe_root>/<uuid>/mig-found.json``) until it
is restored, so the steward restores it after a run that was killed (``raycolloc.node.leftovers``). It never toggles
MIG mode:
with MIG disabled it refuses and names the command an administrator would run.
"""

from __future__ import annotations

import json
import logging
from typing import Any, ClassVar

from raycolloc.mode_kinds import ModeKind, mode_of
from raycolloc.node.gpu.backend import GpuBackend, GpuInfo, MigDevice, MigUnavailable
from raycolloc.node.mig.layout import LayoutError
from raycolloc.node.mig.placement import Placement, gpu_model_of, requested_placement
from raycolloc.node.modes.base import GpuSlot, ModeError
from raycolloc.spec import Binding, CellSpec, Release

__all__ = [
    "MIG_RECORD",
    "Instances",
    "MigMode",
    "admin_hint",
    "apply_instances",
    "cell_placement",
    "read_instances",
    "restore_layout",
]

log = logging.getLogger(__name__)
MIG_RECORD = "mig-found.json"
Instances = list[tuple[int, int, list[tuple[int, int]]]]  # [(gi profile id, start, [(ci profile id, start)])]
_placed: dict[tuple[str, str, str, tuple[str | None, ...]], Placement] = {}


def cell_placement(cell: CellSpec, gpu_name: str) -> Placement:
    """The cell's MIG layout placed on the model of the GPU named ``gpu_name``: the one decision the
    driver's pre-flight (skipped and unfit cells) and the steward (what it creates) share. Placed once
    per process, layout and GPU model (a sweep asks it for every cell and GPU, twice).

    Raises:
        UnknownGpuModel: no MIG table for that GPU model.
        LayoutError: the layout does not fit the GPU or does not give one MIG device per job.
    """
    model = gpu_model_of(gpu_name)
    profiles = tuple(j.mig_profile for j in cell.jobs)
    key = (model.name, repr(cell.config.mig.layout), repr(cell.mix_mig_layout), profiles)
    if key not in _placed:  # a layout that does not fit raises each time: nothing is kept
        _placed[key] = requested_placement(model, cell.config.mig.layout, cell.mix_mig_layout, list(profiles))
    return _placed[key]


def admin_hint(gpu: GpuInfo) -> str:
    """What an administrator runs to enable MIG on ``gpu`` (raycolloc never does)."""
    return (
        f"MIG mode is disabled on GPU {gpu.index} ({gpu.name}, {gpu.uuid}). raycolloc never changes MIG mode; "
        f"an administrator enables it with `sudo nvidia-smi -i {gpu.index} -mig 1` on an idle GPU "
        f"(some systems need a GPU reset or reboot), then creates or lets raycolloc create "
        f"(mig.allow_reconfigure=true) the instances"
    )


def read_instances(backend: GpuBackend, uuid: str) -> Instances:
    """The GPU's MIG instances as ``[(gi profile id, start, [(ci profile id, start), ...]), ...]``."""
    return [
        (r.profile_id, r.start, [(c.profile_id, c.start) for c in r.compute_instances])
        for r in backend.gpu_instances(uuid)
    ]


def apply_instances(backend: GpuBackend, uuid: str, instances: Instances) -> None:
    """Replace the GPU's MIG instances by ``instances`` (what ``nvidia-smi mig -dci -dgi`` then ``-cgi
    -cci`` do), created in that order. The steward restores layouts with it; tests set one up with it."""
    for gi in backend.gpu_instances(uuid):
        for ci in gi.compute_instances:
            backend.destroy_compute_instance(uuid, gi.gi_id, ci.ci_id)
        backend.destroy_gpu_instance(uuid, gi.gi_id)
    for gi_profile, gi_start, cis in instances:
        gi_id = backend.create_gpu_instance(uuid, gi_profile, gi_start)
        for ci_profile, ci_start in cis:
            backend.create_compute_instance(uuid, gi_id, ci_profile, ci_start)


class MigMode:
    """See the module docstring."""

    kind: ClassVar[ModeKind] = mode_of("mig")
    name: ClassVar[str] = kind.name

    def __init__(self, slot: GpuSlot, cell: CellSpec) -> None:
        self.slot, self.cell = slot, cell
        self.backend, self.gpu = slot.backend, slot.gpu
        self.model = gpu_model_of(self.gpu.name)
        self.found: Instances | None = None
        self.devices: list[MigDevice] = []

    def _placement(self, instances: Instances) -> Placement:
        return Placement.from_instances(self.model, instances)

    def prepare(self) -> list[Binding]:
        """Make the GPU hold the cell's layout; one binding per job, pinned to its MIG device.

        Raises:
            ModeError: MIG disabled or unsupported, the layout differs and may not be changed, or
                it does not fit this GPU model.
        """
        try:
            devices, profiles = self._prepare()
        except (MigUnavailable, LayoutError) as exc:
            raise ModeError(str(exc)) from None
        self.devices = devices
        return [
            Binding(
                job.index, self.gpu.uuid, {"CUDA_VISIBLE_DEVICES": dev.uuid}, mig_uuid=dev.uuid, mig_profile=profile
            )
            for job, dev, profile in zip(self.cell.jobs, devices, profiles, strict=True)
        ]

    def _prepare(self) -> tuple[list[MigDevice], list[str]]:
        gpu, cfg = self.gpu, self.cell.config.mig
        if self.slot.stop_daemon():
            log.info("gpu=%s stopped the MPS daemon kept from an earlier cell before a MIG cell", gpu.uuid)
        if not gpu.mig_supported:
            raise MigUnavailable(f"GPU {gpu.index} ({gpu.name}) does not support MIG")
        current, _pending = self.backend.mig_mode(gpu.uuid)
        if not current:
            raise MigUnavailable(admin_hint(gpu))
        placement = cell_placement(self.cell, gpu.name)
        found_instances = read_instances(self.backend, gpu.uuid)
        found = self._placement(found_instances)
        if not found.same_shape(placement):
            # Unset: the backend says (simulated GPUs belong to raycolloc: their layout is nobody's machine).
            default = self.backend.traits.reconfigure_mig_default
            allowed = cfg.allow_reconfigure if cfg.allow_reconfigure is not None else default
            if not allowed:
                raise MigUnavailable(
                    f"GPU {gpu.index} holds MIG layout [{found}] but the cell needs [{placement}]; "
                    f"set mig.allow_reconfigure=true to let raycolloc create it (and restore the "
                    f"old one afterwards), or create it yourself"
                )
            if not self.backend.can_reconfigure_mig():
                raise MigUnavailable("mig.allow_reconfigure=true needs root on the GPU node to create MIG instances")
            busy = self.backend.processes(gpu.uuid)
            if busy:
                raise MigUnavailable(
                    f"GPU {gpu.index} has running processes {[p.pid for p in busy]}; its MIG layout cannot change now"
                )
            self.found = found_instances
            self._record(found_instances)
            try:
                apply_instances(
                    self.backend,
                    gpu.uuid,
                    [
                        (
                            self.model.profile(gi).profile_id,
                            start,
                            [(self.model.profile(gi).ci_profile(ci).nvml_index, cs) for ci, cs in cis],
                        )
                        for gi, start, cis in placement.instances()
                    ],
                )
            except BaseException:
                self.release()
                raise
            log.info("mig=applied gpu=%s layout=[%s] replaced=[%s]", gpu.uuid, placement, found)
        return self._match(placement)

    def _record(self, instances: Instances) -> None:
        """Write the layout found to disk before changing it: a killed run's steward restores it."""
        path = self.slot.dir(self.cell) / MIG_RECORD
        path.parent.mkdir(parents=True, exist_ok=True)
        # With what reaches this GPU's driver (the simulated devices' state file), so that a doctor
        # without Ray can restore it too.
        path.write_text(
            json.dumps({"gpu": self.gpu.uuid, "instances": instances, "env": self.backend.job_env(self.gpu.uuid)})
        )

    def _match(self, placement: Placement) -> tuple[list[MigDevice], list[str]]:
        """Pair each placed MIG device with a real one of the same profiles (placement first)."""
        available = list(self.backend.mig_devices(self.gpu.uuid))
        chosen: list[MigDevice] = []
        for want in placement:
            key = (want.gi.profile_id, want.ci.nvml_index)
            same = [d for d in available if (d.gi_profile_id, d.ci_profile_id) == key]
            exact = [d for d in same if (d.gi_start, d.ci_start) == (want.gi_start, want.ci_start)]
            pick = next(iter(exact or same), None)
            if pick is None:
                raise MigUnavailable(f"no MIG device {want.name} on GPU {self.gpu.index} after preparing [{placement}]")
            available.remove(pick)
            chosen.append(pick)
        return chosen, [d.name for d in placement]

    def release(self) -> Release:
        """Put back the layout found before the cell (only if this cell changed it)."""
        if self.found is None:
            return Release()
        restore_layout(self.backend, self.gpu, self.model, self.found)
        (self.slot.dir(self.cell) / MIG_RECORD).unlink(missing_ok=True)
        self.found = None
        return Release(mig_restored=True)


def restore_layout(backend: GpuBackend, gpu: GpuInfo, model: Any, instances: Instances) -> None:
    """Put ``instances`` back on ``gpu`` and check the result.

    Raises:
        MigUnavailable: the GPU holds something else afterwards.
    """
    apply_instances(backend, gpu.uuid, instances)
    after = Placement.from_instances(model, read_instances(backend, gpu.uuid))
    before = Placement.from_instances(model, instances)
    if after != before:
        raise MigUnavailable(f"MIG layout of GPU {gpu.index} restored as [{after}], expected [{before}]")
    log.info("mig=restored gpu=%s layout=[%s]", gpu.uuid, before)
