"""The workloads a simulated cluster knows, as the advisor's solo profiles, and its GPU.

A replay on the simulated cluster needs each job's profile alone on the simulated GPU model (its
rate, SM/DRAM activity, time busy, memory): the advisor's model turns profiles into rates under
collocation, and that is the simulated cluster's truth. These are round numbers for an H100-80GB:
ResNet26/CIFAR-10, EfficientNetV2-S/ImageNet64 and ResNet152/ImageNet near the solos measured in
docs/measurements.md (15,600, 1,800 and 920 samples/s; SM activity 25%, 20% and ~40-55%; 1.2 and 14 GiB),
the others set between them by model size; other GPU models scale the rate. They stand in for
measured profiles; they are not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from raycolloc.advise.model import DEFAULT_PARAMS, Gpu, Params
from raycolloc.advise.profile import Profile
from raycolloc.mode_kinds import BASELINE_MODE
from raycolloc.node.mig.placement import gpu_model_of

__all__ = ["CATALOG", "CLASSES", "Entry", "NoProfile", "catalog_profile", "idle_power_w", "sim_gpu", "sim_params"]

CLASSES = ("light", "medium", "heavy")
SETTINGS = "queue catalogue (round numbers, not measured)"


@dataclass(frozen=True)
class Entry:
    """One workload alone on an H100-80GB: samples/s, SM activity, time busy, SM occupancy, DRAM
    activity (0..1), its memory (MiB, context included) and its size class."""

    model: str
    dataset: str
    size: str
    samples_per_s: float
    sm_active: float
    busy: float
    sm_occupancy: float
    dram_active: float
    mem_mib: float

    @property
    def key(self) -> str:
        return f"{self.model}/{self.dataset}"


CATALOG: dict[str, Entry] = {
    e.key: e
    for e in (
        Entry("resnet26", "cifar10", "light", 15_600, 0.25, 0.45, 0.15, 0.12, 1_200),
        Entry("resnet18", "cifar10", "light", 20_000, 0.22, 0.40, 0.14, 0.10, 1_000),
        Entry("mobilenetv3_large_100", "cifar10", "light", 18_000, 0.15, 0.35, 0.10, 0.08, 900),
        Entry("resnet50", "imagenet64", "medium", 4_500, 0.45, 0.70, 0.30, 0.25, 4_000),
        Entry("efficientnetv2_s", "imagenet64", "medium", 1_800, 0.20, 0.45, 0.15, 0.12, 4_500),
        Entry("convnext_tiny", "imagenet64", "medium", 3_000, 0.40, 0.65, 0.28, 0.22, 5_000),
        Entry("resnet152", "imagenet", "heavy", 920, 0.55, 0.85, 0.35, 0.30, 14_000),
        Entry("cait_xxs24_224", "imagenet", "heavy", 700, 0.60, 0.85, 0.40, 0.25, 9_000),
        Entry("deit_small_patch16_224", "imagenet", "heavy", 1_300, 0.60, 0.90, 0.40, 0.30, 8_000),
        Entry("vit_base_patch16_224", "imagenet", "heavy", 450, 0.75, 0.95, 0.45, 0.35, 18_000),
    )
}
# (idle W, W per unit of SM activity, rate against an H100) per GPU family; the idle powers are the
# simulated backend's (raycolloc.node.gpu.sim).
_FAMILY = (("A100", (55.0, 300.0, 0.6)), ("H100", (70.0, 500.0, 1.0)), ("H200", (75.0, 500.0, 1.1)))


class NoProfile(LookupError):
    """A job whose workload the simulated cluster has no profile of."""


def _family(name: str) -> tuple[float, float, float]:
    return next((v for k, v in _FAMILY if k in name), _FAMILY[1][1])


def sim_gpu(gpu_model: str) -> Gpu:
    """The advisor's view of one simulated GPU of ``gpu_model`` (a registered MIG table's name).

    Raises:
        raycolloc.node.mig.profiles.UnknownGpuModel: no such GPU model.
    """
    model = gpu_model_of(gpu_model)
    return Gpu(name=model.name, memory_mib=float(model.total_memory_mib), base_mib=0.0, cores=None)


def sim_params(gpu: Gpu) -> Params:
    """The model's parameters on the simulated GPU: the advisor's defaults, with a power slope."""
    return replace(DEFAULT_PARAMS, power_slope_w=_family(gpu.name)[1], source="simulated GPU")


def catalog_profile(workload: str, gpu: Gpu) -> Profile:
    """The profile of ``model/dataset`` alone on ``gpu``.

    Raises:
        NoProfile: the catalogue does not have it (the message lists what it has).
    """
    entry = CATALOG.get(workload)
    if entry is None:
        raise NoProfile(f"no profile of {workload} on the simulated cluster; it knows: {', '.join(CATALOG)}")
    idle, slope, speed = _family(gpu.name)
    rate = entry.samples_per_s * speed
    return Profile(
        workload=entry.key,
        settings=SETTINGS,
        gpu_name=gpu.name,
        gpu_memory_mib=gpu.memory_mib,
        backend="queue-catalog",
        mode=BASELINE_MODE,
        cell_dirs=(),
        config_hash="",
        batch_size=128,
        samples_per_s=rate,
        cpu_s_per_step=None,
        cpu_busy=0.0,
        sm_active=entry.sm_active,
        busy=entry.busy,
        busy_source="catalogue",
        sm_occupancy=entry.sm_occupancy,
        dram_active=entry.dram_active,
        pcie_rx_bytes_s=None,
        power_w=idle + slope * entry.sm_active,
        energy_per_sample_j=(idle + slope * entry.sm_active) / rate,
        peak_reserved_mib=None,
        peak_device_mib=entry.mem_mib,
        gpu_mem_used_mib=None,
        job_mem_mib=entry.mem_mib,
        mem_source="catalogue",
    )


def idle_power_w(gpu: Gpu) -> float:
    """An idle simulated GPU's power."""
    return _family(gpu.name)[0]
