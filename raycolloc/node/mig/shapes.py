"""What a MIG profile table is made of (GI and CI profiles, a GPU model) and the registry of tables
by name; the tables themselves are in :mod:`raycolloc.node.mig.profiles`. Pure data: no NVML here.

Placement model (as NVML reports it, ``nvmlGpuInstancePlacement_t``): a GPU has 8 memory slots
and 7 compute slices. A GI placement is ``start`` (first memory slot) and ``slot_size`` (memory
slots taken); a GI with ``g`` compute slices uses compute slices ``start .. start+g-1``. CI
placements count compute slices inside their GI.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = [
    "NVML_COMPUTE_INSTANCE_PROFILE",
    "NVML_GPU_INSTANCE_PROFILE",
    "CiProfile",
    "GiProfile",
    "GpuModel",
    "UnknownGpuModel",
    "get_gpu_model",
    "gi_profile",
    "known_gpu_models",
    "normalize_profile_name",
    "register_gpu_model",
]

# nvml.h ``NVML_GPU_INSTANCE_PROFILE_*`` (the index passed to nvmlDeviceGetGpuInstanceProfileInfo).
NVML_GPU_INSTANCE_PROFILE: dict[str, int] = {
    "1_SLICE": 0,
    "2_SLICE": 1,
    "3_SLICE": 2,
    "4_SLICE": 3,
    "7_SLICE": 4,
    "8_SLICE": 5,
    "6_SLICE": 6,
    "1_SLICE_REV1": 7,
    "2_SLICE_REV1": 8,
    "1_SLICE_REV2": 9,
}
# nvml.h ``NVML_COMPUTE_INSTANCE_PROFILE_*``; nvidia-smi shows the same numbers as CI profile ids.
NVML_COMPUTE_INSTANCE_PROFILE: dict[str, int] = {
    "1_SLICE": 0,
    "2_SLICE": 1,
    "3_SLICE": 2,
    "4_SLICE": 3,
    "7_SLICE": 4,
    "8_SLICE": 5,
    "6_SLICE": 6,
    "1_SLICE_REV1": 7,
}
_CI_NVML_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}

# CI placements (start compute slice inside the GI) per GI compute-slice count, as nvidia-smi
# ``-lcip`` / ``-lcipp`` list them: {ci compute slices: starts}. The CI spanning the whole GI is
# always there; a 4g GI has no 3c CI.
_CI_PLACEMENTS: dict[int, dict[int, tuple[int, ...]]] = {
    1: {1: (0,)},
    2: {1: (0, 1), 2: (0,)},
    3: {1: (0, 1, 2), 2: (0,), 3: (0,)},
    4: {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)},
    7: {1: (0, 1, 2, 3, 4, 5, 6), 2: (0, 2, 4), 3: (0, 4), 4: (0,), 7: (0,)},
}

_GI_NAME = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")


def normalize_profile_name(name: str) -> str:
    """Lower-case a profile name and drop an ``MIG `` prefix (``"MIG 3g.20gb"`` -> ``"3g.20gb"``)."""
    text = " ".join(str(name).split()).lower()
    return text[4:] if text.startswith("mig ") else text


class UnknownGpuModel(ValueError):
    """No registered table matches a GPU name; the message lists the known models."""


@dataclass(frozen=True)
class CiProfile:
    """A compute-instance profile inside one GI profile.

    Attributes:
        name: short name, ``"3c"``; the nvidia-smi name is :meth:`full_name`.
        compute_slices: compute slices it takes inside its GI.
        nvml_index: ``NVML_COMPUTE_INSTANCE_PROFILE_*`` (equal to the nvidia-smi CI profile id).
        sm_count: SMs of the CI.
        max_count: how many fit in one GI.
        placements: allowed start compute slices inside the GI.
        slot_size: compute slices one placement covers.
    """

    name: str
    compute_slices: int
    nvml_index: int
    sm_count: int
    max_count: int
    placements: tuple[int, ...]
    slot_size: int

    def full_name(self, gi: GiProfile) -> str:
        """nvidia-smi name: ``"1c.3g.20gb"``, or the GI name for the CI spanning the GI."""
        return gi.name if self.compute_slices == gi.compute_slices else f"{self.name}.{gi.name}"


@dataclass(frozen=True)
class GiProfile:
    """A GPU-instance profile of one GPU model.

    Attributes:
        name: nvidia-smi name, e.g. ``"1g.5gb"``.
        profile_id: nvidia-smi / NVML profile id (``-lgip`` ID column, e.g. 19).
        nvml_index: ``NVML_GPU_INSTANCE_PROFILE_*`` constant (e.g. 0 for 1_SLICE).
        compute_slices: compute (SM) slices, the ``g`` in the name.
        memory_mib: memory of the instance as NVML reports it.
        sm_count: SMs of the instance.
        max_count: instances of this profile that may exist at once.
        placements: allowed start memory slots.
        slot_size: memory slots one placement covers (the memory slices of the profile).
        ci_profiles: compute-instance profiles the GI can be split into, smallest first.
    """

    name: str
    profile_id: int
    nvml_index: int
    compute_slices: int
    memory_mib: int
    sm_count: int
    max_count: int
    placements: tuple[int, ...]
    slot_size: int
    ci_profiles: tuple[CiProfile, ...] = field(default_factory=tuple)

    @property
    def memory_slices(self) -> int:
        """Memory slots taken (same as :attr:`slot_size`)."""
        return self.slot_size

    @property
    def media_extensions(self) -> bool:
        """True for ``+me`` profiles."""
        return self.name.endswith("+me")

    @property
    def full_ci(self) -> CiProfile:
        """The CI spanning the whole GI (what ``nvidia-smi mig -cgi ... -C`` creates)."""
        return self.ci_profile(f"{self.compute_slices}c")

    def slots(self, start: int) -> range:
        """Memory slots covered when placed at ``start``."""
        return range(start, start + self.slot_size)

    def ci_profile(self, name: str | int) -> CiProfile:
        """CI profile by short name (``"3c"``), nvidia-smi name (``"3c.7g.40gb"``) or NVML index.

        Raises:
            ValueError: no such CI profile in this GI; the message lists the valid ones.
        """
        for ci in self.ci_profiles:
            if isinstance(name, int) and not isinstance(name, bool):
                if ci.nvml_index == name:
                    return ci
            elif normalize_profile_name(str(name)) in (ci.name, ci.full_name(self)):
                return ci
        valid = ", ".join(ci.name for ci in self.ci_profiles)
        raise ValueError(f"GPU instance {self.name} has no compute-instance profile {name!r}; valid: {valid}")


@dataclass(frozen=True)
class GpuModel:
    """The MIG table of one GPU model.

    Attributes:
        name: canonical name, e.g. ``"A100-SXM4-40GB"``.
        aliases: NVML device names (``nvmlDeviceGetName``) that map to this table.
        total_sms: SMs of the whole GPU (MIG off).
        total_memory_mib: memory of the whole GPU as nvidia-smi reports it.
        profiles: GI profiles, smallest first.
        compute_slices: compute slices of the GPU (7).
        memory_slices: memory slots of the GPU (8).
        source: where the numbers come from.
    """

    name: str
    aliases: tuple[str, ...]
    total_sms: int
    total_memory_mib: int
    profiles: tuple[GiProfile, ...]
    compute_slices: int = 7
    memory_slices: int = 8
    source: str = ""

    def profile_names(self) -> list[str]:
        """GI profile names, in table order."""
        return [p.name for p in self.profiles]

    def profile(self, name: str | int) -> GiProfile:
        """GI profile by name (``"3g.20gb"``, ``"MIG 3g.20gb"``) or nvidia-smi profile id (int).

        Raises:
            ValueError: unknown profile; the message lists this model's profiles.
        """
        for p in self.profiles:
            if isinstance(name, int) and not isinstance(name, bool):
                if p.profile_id == name:
                    return p
            elif p.name == normalize_profile_name(str(name)):
                return p
        raise ValueError(
            f"{self.name} has no GPU-instance profile {name!r}; its profiles are: {', '.join(self.profile_names())}"
        )

    def matches(self, device_name: str) -> bool:
        """True when ``device_name`` is this model's name or one of its NVML names."""
        key = _name_key(device_name)
        return key in {_name_key(n) for n in (self.name, *self.aliases)}


def _name_key(name: str) -> str:
    text = " ".join(str(name).split()).lower()
    return text[7:] if text.startswith("nvidia ") else text


def gi_profile(
    name: str,
    profile_id: int,
    nvml_index: int,
    memory_mib: int,
    sm_count: int,
    max_count: int,
    placements: Iterable[int],
    slot_size: int,
    ci_sm_per_slice: int,
) -> GiProfile:
    """Build a GI profile and its standard CI profiles (compute slices come from the name)."""
    m = _GI_NAME.match(name)
    if not m:
        raise ValueError(f"not a GI profile name: {name!r}")
    g = int(m.group(1))
    cis = tuple(
        CiProfile(
            name=f"{c}c",
            compute_slices=c,
            nvml_index=_CI_NVML_BY_SLICES[c],
            sm_count=sm_count if c == g else c * ci_sm_per_slice,
            max_count=len(starts),
            placements=starts,
            slot_size=c,
        )
        for c, starts in sorted(_CI_PLACEMENTS[g].items())
    )
    return GiProfile(
        name, profile_id, nvml_index, g, memory_mib, sm_count, max_count, tuple(placements), slot_size, cis
    )


_REGISTRY: dict[str, GpuModel] = {}


def register_gpu_model(fn: Callable[[], GpuModel]) -> Callable[[], GpuModel]:
    """Decorator: build the table returned by ``fn`` and register it under its name.

    Raises:
        ValueError: a model of that name (or sharing an NVML name) is already registered.
    """
    model = fn()
    key = model.name.lower()
    if key in _REGISTRY:
        raise ValueError(f"GPU model {model.name!r} is registered twice")
    for other in _REGISTRY.values():
        clash = [a for a in (model.name, *model.aliases) if other.matches(a)]
        if clash:
            raise ValueError(f"GPU model {model.name!r}: name(s) {clash} already belong to {other.name!r}")
    _REGISTRY[key] = model
    return fn


def known_gpu_models() -> list[str]:
    """Canonical names of all registered GPU models, sorted."""
    return sorted(m.name for m in _REGISTRY.values())


def get_gpu_model(name: str | GpuModel) -> GpuModel:
    """The table for a canonical name or an NVML device name (case and ``NVIDIA `` prefix ignored).

    Raises:
        UnknownGpuModel: nothing matches; the message lists the known models and their NVML names.
    """
    if isinstance(name, GpuModel):
        return name
    for model in _REGISTRY.values():
        if model.matches(name):
            return model
    known = "; ".join(f"{m.name} ({', '.join(m.aliases)})" for m in sorted(_REGISTRY.values(), key=lambda m: m.name))
    raise UnknownGpuModel(f"unknown GPU model {name!r}; known models: {known}")
