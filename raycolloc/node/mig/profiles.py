"""MIG profile tables, one per GPU model, registered by name (``@register_gpu_model``).

Pure data: no NVML here. A model's table says which GPU-instance (GI) profiles exist, what each
one costs (compute slices, memory slices, SMs, MiB), how many of it may exist at once and where
it may be placed, and which compute-instance (CI) profiles each GI can be split into.

Placement model (as NVML reports it, ``nvmlGpuInstancePlacement_t``): a GPU has 8 memory slots
and 7 compute slices. A GI placement is ``start`` (first memory slot) and ``slot_size`` (memory
slots taken); a GI with ``g`` compute slices uses compute slices ``start .. start+g-1``. CI
placements count compute slices inside their GI.

Adding a GPU is adding one small function::

    @register_gpu_model
    def _b200() -> GpuModel:
        return GpuModel(name="B200-180GB", aliases=("NVIDIA B200",), ..., profiles=(...))

Sources of every number are given next to each table.
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


def _gi(
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


# --- tables -------------------------------------------------------------------------------------
# Column order of every _gi(...) row:
#   name, nvidia-smi id, NVML_GPU_INSTANCE_PROFILE_*, MiB, SMs, max count, starts, slot size, CI SMs/slice
_ONE = tuple(range(7))  # {0,1,2,3,4,5,6}:1


@register_gpu_model
def _a100_sxm4_40gb() -> GpuModel:
    """A100 40GB (SXM4 and PCIe).

    Profiles, ids, max counts and placements: MIG User Guide (supported-mig-profiles, A100 table;
    ``nvidia-smi mig -lgipp`` example {0..6}:1, {0,2,4,6}:2, {0,2,4}:2, {0,4}:4, {0}:4, {0}:8).
    MiB and SMs: public ``nvidia-smi mig -lgip`` transcripts of an A100-SXM4-40GB (4.75/9.62/19.50/
    39.25 GiB; 14/28/42/56/98 SMs); newer drivers print 9.75/19.62/39.50 GiB. CI SMs are 14 per
    compute slice (``-lcip``: 1c.4g.20gb 14, 2c.4g.20gb 28, 4c.7g.40gb 56).
    """
    r = 14
    return GpuModel(
        name="A100-SXM4-40GB",
        aliases=("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
        total_sms=108,
        total_memory_mib=40960,
        source="MIG User Guide A100 table + nvidia-smi -lgip/-lgipp/-lcip transcripts (A100-SXM4-40GB)",
        profiles=(
            _gi("1g.5gb", 19, 0, 4864, 14, 7, _ONE, 1, r),
            _gi("1g.5gb+me", 20, 7, 4864, 14, 1, _ONE, 1, r),
            _gi("1g.10gb", 15, 9, 9856, 14, 4, (0, 2, 4, 6), 2, r),
            _gi("2g.10gb", 14, 1, 9856, 28, 3, (0, 2, 4), 2, r),
            _gi("3g.20gb", 9, 2, 19968, 42, 2, (0, 4), 4, r),
            _gi("4g.20gb", 5, 3, 19968, 56, 1, (0,), 4, r),
            _gi("7g.40gb", 0, 4, 40192, 98, 1, (0,), 8, r),
        ),
    )


@register_gpu_model
def _a100_80gb() -> GpuModel:
    """A100 80GB (SXM4 and PCIe).

    Same ids and placements as the 40GB part, names per the MIG User Guide note ("for
    A100-SXM4-80GB ... 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb").
    MiB and SMs: public ``nvidia-smi mig -lgip`` transcripts of an A100 80GB (9.50/19.50/39.25/
    79.00 GiB; 14/28/42/56/98 SMs; 1g.20gb: 19.50 GiB, 14 SMs, 4 instances).
    """
    r = 14
    return GpuModel(
        name="A100-80GB",
        aliases=("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-80GB"),
        total_sms=108,
        total_memory_mib=81920,
        source="MIG User Guide A100 table/note + nvidia-smi -lgip transcripts (A100 80GB)",
        profiles=(
            _gi("1g.10gb", 19, 0, 9728, 14, 7, _ONE, 1, r),
            _gi("1g.10gb+me", 20, 7, 9728, 14, 1, _ONE, 1, r),
            _gi("1g.20gb", 15, 9, 19968, 14, 4, (0, 2, 4, 6), 2, r),
            _gi("2g.20gb", 14, 1, 19968, 28, 3, (0, 2, 4), 2, r),
            _gi("3g.40gb", 9, 2, 40192, 42, 2, (0, 4), 4, r),
            _gi("4g.40gb", 5, 3, 40192, 56, 1, (0,), 4, r),
            _gi("7g.80gb", 0, 4, 80896, 98, 1, (0,), 8, r),
        ),
    )


@register_gpu_model
def _h100_80gb() -> GpuModel:
    """H100 80GB (SXM5 numbers; the H100 PCIe alias shares names, ids and placements).

    Names and max counts: MIG User Guide H100 table. Ids, MiB, SMs and placements: public
    ``nvidia-smi mig -lgip`` / ``-lgipp`` transcripts of an "NVIDIA H100 80GB HBM3" (9.75/19.62/
    39.50/79.25 GiB; 16/26/32/60/64/132 SMs). CI SMs of partial CIs (16 per compute slice) are
    the go-nvml mock's values, not read off hardware. H100 PCIe has 114 SMs, so its SM counts
    are lower than listed here.
    """
    r = 16
    return GpuModel(
        name="H100-80GB",
        aliases=("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"),
        total_sms=132,
        total_memory_mib=81559,
        source="MIG User Guide H100 table + nvidia-smi -lgip/-lgipp transcripts (NVIDIA H100 80GB HBM3)",
        profiles=(
            _gi("1g.10gb", 19, 0, 9984, 16, 7, _ONE, 1, r),
            _gi("1g.10gb+me", 20, 7, 9984, 16, 1, _ONE, 1, r),
            _gi("1g.20gb", 15, 9, 20096, 26, 4, (0, 2, 4, 6), 2, r),
            _gi("2g.20gb", 14, 1, 20096, 32, 3, (0, 2, 4), 2, r),
            _gi("3g.40gb", 9, 2, 40448, 60, 2, (0, 4), 4, r),
            _gi("4g.40gb", 5, 3, 40448, 64, 1, (0,), 4, r),
            _gi("7g.80gb", 0, 4, 81152, 132, 1, (0,), 8, r),
        ),
    )


@register_gpu_model
def _h200_141gb() -> GpuModel:
    """H200 141GB (SXM and NVL).

    Names and max counts: MIG User Guide H200 table. Ids, MiB, SMs, max counts and placements:
    read with NVML (nvmlDeviceGetGpuInstanceProfileInfo / ...PossiblePlacements_v2) on an
    "NVIDIA H200" (143771 MiB). CI SMs of partial CIs: 16 per compute slice (go-nvml mock).
    """
    r = 16
    return GpuModel(
        name="H200-141GB",
        aliases=("NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA H200 141GB HBM3e"),
        total_sms=132,
        total_memory_mib=143771,
        source="MIG User Guide H200 table + NVML profile/placement query on an NVIDIA H200",
        profiles=(
            _gi("1g.18gb", 19, 0, 16384, 16, 7, _ONE, 1, r),
            _gi("1g.18gb+me", 20, 7, 16384, 16, 1, _ONE, 1, r),
            _gi("1g.35gb", 15, 9, 33280, 26, 4, (0, 2, 4, 6), 2, r),
            _gi("2g.35gb", 14, 1, 33280, 32, 3, (0, 2, 4), 2, r),
            _gi("3g.71gb", 9, 2, 71424, 60, 2, (0, 4), 4, r),
            _gi("4g.71gb", 5, 3, 71424, 64, 1, (0,), 4, r),
            _gi("7g.141gb", 0, 4, 143360, 132, 1, (0,), 8, r),
        ),
    )
