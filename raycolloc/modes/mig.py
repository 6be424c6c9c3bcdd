"""MIG: check the requested layout, apply it (when allowed) or require it, pin jobs, restore.

The steward's :class:`MigManager` reads MIG mode and the GPU's instances through the backend.
If the existing layout has the requested shape it is used as is. Otherwise, with
``mig.allow_reconfigure=true`` and a process that may (root), it destroys the instances it found,
creates the requested ones (GPU instances with placement, then their compute instances),
and on release restores exactly what it found. It never toggles MIG mode: with MIG disabled it
refuses and names the command an administrator would run.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from raycolloc.cellspec import JobSpec
from raycolloc.config import Config, ConfigError, MigConfig
from raycolloc.gpu.backend import GpuBackend, GpuInfo, GpuInstanceRecord, MigDevice, MigUnavailable
from raycolloc.mig.planner import LayoutError, Plan, plan_layout, resolve_layout
from raycolloc.mig.profiles import GpuModel, UnknownGpuModel, get_gpu_model

__all__ = ["MigManager", "check_mig_possible", "expand_short_names", "gpu_model_of", "requested_plan"]

log = logging.getLogger(__name__)
SIM_PREFIX = "Simulated "


def gpu_model_of(gpu: GpuInfo) -> GpuModel:
    """The MIG table of a GPU (simulated GPUs are named ``Simulated <model>``)."""
    name = gpu.name[len(SIM_PREFIX):] if gpu.name.startswith(SIM_PREFIX) else gpu.name
    return get_gpu_model(name)


_SHORT = re.compile(r"^(\d+)g((?:\s+x\s*\d+)?)$")


def expand_short_names(model: GpuModel, spec: Any) -> Any:
    """Replace model-independent GPU-instance names (``"2g"``, ``"1g x3"``, ``{gi: 7g}``) by the
    model's profile of that many compute slices with the least memory (``2g.10gb`` on an A100-40GB,
    ``2g.20gb`` on an H100), so presets like the study's 1g/2g/4g layout work on every GPU."""
    if isinstance(spec, str):
        m = _SHORT.match(spec.strip())
        if not m:
            return spec
        sizes = [p for p in model.profiles if p.compute_slices == int(m.group(1)) and not p.media_extensions]
        if not sizes:
            raise LayoutError(f"{model.name} has no {m.group(1)}-slice GPU-instance profile; "
                              f"its profiles are: {', '.join(model.profile_names())}")
        return min(sizes, key=lambda p: p.memory_mib).name + m.group(2)
    if isinstance(spec, Mapping):
        return {k: expand_short_names(model, v) if k == "gi" else v for k, v in spec.items()}
    if isinstance(spec, Sequence):
        return [expand_short_names(model, item) for item in spec]
    return spec


def requested_plan(model: GpuModel, layout: Any, mix_layout: Any, job_profiles: Sequence[str | None]) -> Plan:
    """Plan the cell's layout: per-job profiles (plans, mixes), else the mix's, else ``mig.layout``.

    Raises:
        LayoutError: the layout does not fit the GPU or does not give one MIG device per job.
    """
    if all(job_profiles):
        spec: Any = list(job_profiles)
    else:
        spec = mix_layout if mix_layout else layout
    spec = expand_short_names(model, _plain(spec))
    plan = plan_layout(model, resolve_layout(model, spec, len(job_profiles)))
    if len(plan) != len(job_profiles):
        raise LayoutError(f"MIG layout {plan} makes {len(plan)} MIG devices; the cell has {len(job_profiles)} jobs")
    return plan


def _plain(spec: Any) -> Any:
    return OmegaConf.to_container(spec) if isinstance(spec, DictConfig | ListConfig) else spec


def _admin_hint(gpu: GpuInfo) -> str:
    return (f"MIG mode is disabled on GPU {gpu.index} ({gpu.name}, {gpu.uuid}). raycolloc never changes MIG mode; "
            f"an administrator enables it with `sudo nvidia-smi -i {gpu.index} -mig 1` on an idle GPU "
            f"(some systems need a GPU reset or reboot), then creates or lets raycolloc create "
            f"(mig.allow_reconfigure=true) the instances")


def check_mig_possible(cfg: Config, infos: list[dict[str, Any]]) -> None:
    """Pre-flight for a mig cell: some GPU of the cluster has MIG (or can get it) and the layout fits.

    Raises:
        ConfigError: naming the GPUs found and why none will do.
    """
    reasons = []
    profiles = [j.mig_profile for j in cfg.mix.jobs] if cfg.mix.jobs else [None] * cfg.degree
    for info in infos:
        for gpu in info["gpus"]:
            try:
                model = gpu_model_of(gpu)
                requested_plan(model, cfg.mig.layout, cfg.mix.mig_layout, profiles)
            except (UnknownGpuModel, LayoutError, ValueError) as exc:
                reasons.append(str(exc))
                continue
            sim_auto = info["backend"] == "sim" and cfg.cluster.sim_mig_mode == "auto"
            if not gpu.mig_supported:
                reasons.append(f"GPU {gpu.index} ({gpu.name}) does not support MIG")
            elif not gpu.mig_enabled and not sim_auto:
                reasons.append(_admin_hint(gpu))
            else:
                return
    raise ConfigError("mode=mig cannot run on this cluster: " + "; ".join(dict.fromkeys(reasons)))


class MigManager:
    """The MIG state of one GPU for one cell (owned by the steward)."""

    def __init__(self, backend: GpuBackend, gpu: GpuInfo) -> None:
        self.backend, self.gpu = backend, gpu
        self.model = gpu_model_of(gpu)
        self.found: list[GpuInstanceRecord] | None = None
        self.reconfigured = False

    def _current_plan(self, records: list[GpuInstanceRecord]) -> Plan:
        return Plan.from_instances(self.model, [(r.profile_id, r.start, [(c.profile_id, c.start)
                                                                        for c in r.compute_instances])
                                                for r in records])

    def prepare(self, mig: MigConfig, jobs: Sequence[JobSpec], mix_layout: Any) -> tuple[list[MigDevice], list[str]]:
        """Make the GPU hold the requested layout; returns one MIG device (and its profile name) per job.

        Raises:
            MigUnavailable: MIG disabled or unsupported, or the layout differs and may not be changed.
            LayoutError: the requested layout does not fit this GPU model.
        """
        gpu = self.gpu
        if not gpu.mig_supported:
            raise MigUnavailable(f"GPU {gpu.index} ({gpu.name}) does not support MIG")
        current, _pending = self.backend.mig_mode(gpu.uuid)
        if not current:
            raise MigUnavailable(_admin_hint(gpu))
        plan = requested_plan(self.model, mig.layout, mix_layout, [j.mig_profile for j in jobs])
        records = self.backend.gpu_instances(gpu.uuid)
        found = self._current_plan(records)
        if not found.same_shape(plan):
            if not mig.allow_reconfigure:
                raise MigUnavailable(f"GPU {gpu.index} holds MIG layout [{found}] but the cell needs [{plan}]; "
                                     f"set mig.allow_reconfigure=true to let raycolloc create it (and restore the "
                                     f"old one afterwards), or create it yourself")
            if not self.backend.can_reconfigure_mig():
                raise MigUnavailable("mig.allow_reconfigure=true needs root on the GPU node to create MIG instances")
            busy = self.backend.processes(gpu.uuid)
            if busy:
                raise MigUnavailable(f"GPU {gpu.index} has running processes {[p.pid for p in busy]}; "
                                     f"its MIG layout cannot change now")
            self.found = records
            try:
                self._apply(plan)
            except BaseException:
                self.restore()
                raise
            self.reconfigured = True
            log.info("mig=applied gpu=%s layout=[%s] replaced=[%s]", gpu.uuid, plan, found)
        return self._match(plan)

    def _destroy_all(self) -> None:
        for gi in self.backend.gpu_instances(self.gpu.uuid):
            for ci in gi.compute_instances:
                self.backend.destroy_compute_instance(self.gpu.uuid, gi.gi_id, ci.ci_id)
            self.backend.destroy_gpu_instance(self.gpu.uuid, gi.gi_id)

    def _create(self, instances: list[tuple[int, int, list[tuple[int, int]]]]) -> None:
        for gi_profile, gi_start, cis in instances:
            gi_id = self.backend.create_gpu_instance(self.gpu.uuid, gi_profile, gi_start)
            for ci_profile, ci_start in cis:
                self.backend.create_compute_instance(self.gpu.uuid, gi_id, ci_profile, ci_start)

    def _apply(self, plan: Plan) -> None:
        self._destroy_all()
        self._create([(self.model.profile(gi).profile_id, start,
                       [(self.model.profile(gi).ci_profile(ci).nvml_index, cs) for ci, cs in cis])
                      for gi, start, cis in plan.instances()])

    def _match(self, plan: Plan) -> tuple[list[MigDevice], list[str]]:
        """Pair each planned MIG device with a real one of the same profiles (placement first)."""
        available = list(self.backend.mig_devices(self.gpu.uuid))
        chosen: list[MigDevice] = []
        for want in plan:
            key = (want.gi.profile_id, want.ci.nvml_index)
            same = [d for d in available if (d.gi_profile_id, d.ci_profile_id) == key]
            exact = [d for d in same if (d.gi_start, d.ci_start) == (want.gi_start, want.ci_start)]
            pick = (exact or same or [None])[0]
            if pick is None:
                raise MigUnavailable(f"no MIG device {want.name} on GPU {self.gpu.index} after preparing [{plan}]")
            available.remove(pick)
            chosen.append(pick)
        return chosen, [d.name for d in plan]

    def restore(self) -> None:
        """Put back the layout found before the cell (only if this manager changed it)."""
        if self.found is None:
            return
        self._destroy_all()
        self._create([(r.profile_id, r.start, [(c.profile_id, c.start) for c in r.compute_instances])
                      for r in self.found])
        after = self._current_plan(self.backend.gpu_instances(self.gpu.uuid))
        before = self._current_plan(self.found)
        if after != before:
            raise MigUnavailable(f"MIG layout of GPU {self.gpu.index} restored as [{after}], expected [{before}]")
        log.info("mig=restored gpu=%s layout=[%s]", self.gpu.uuid, before)
        self.found = None
