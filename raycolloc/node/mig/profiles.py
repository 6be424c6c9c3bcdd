"""MIG profile tables, one per GPU model, registered by name (``@register_gpu_model``).

Pure data: no NVML here; the types and the registry are in :mod:`raycolloc.node.mig.shapes`. A
model's table says which GPU-instance (GI) profiles exist, what each one costs (compute slices,
memory slices, SMs, MiB), how many of it may exist at once and where it may be placed, and which
compute-instance (CI) profiles each GI can be split into.

Adding a GPU is adding one small function::

    @register_gpu_model
    def _b200() -> GpuModel:
        return GpuModel(name="B200-180GB", aliases=("NVIDIA B200",), ..., profiles=(...))

Sources of every number are given next to each table.
"""

from __future__ import annotations

from raycolloc.node.mig.shapes import (
    NVML_COMPUTE_INSTANCE_PROFILE,
    NVML_GPU_INSTANCE_PROFILE,
    CiProfile,
    GiProfile,
    GpuModel,
    UnknownGpuModel,
    get_gpu_model,
    gi_profile,
    known_gpu_models,
    normalize_profile_name,
    register_gpu_model,
)

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

# --- tables -------------------------------------------------------------------------------------
# Column order of every gi_profile(...) row:
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
            gi_profile("1g.5gb", 19, 0, 4864, 14, 7, _ONE, 1, r),
            gi_profile("1g.5gb+me", 20, 7, 4864, 14, 1, _ONE, 1, r),
            gi_profile("1g.10gb", 15, 9, 9856, 14, 4, (0, 2, 4, 6), 2, r),
            gi_profile("2g.10gb", 14, 1, 9856, 28, 3, (0, 2, 4), 2, r),
            gi_profile("3g.20gb", 9, 2, 19968, 42, 2, (0, 4), 4, r),
            gi_profile("4g.20gb", 5, 3, 19968, 56, 1, (0,), 4, r),
            gi_profile("7g.40gb", 0, 4, 40192, 98, 1, (0,), 8, r),
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
            gi_profile("1g.10gb", 19, 0, 9728, 14, 7, _ONE, 1, r),
            gi_profile("1g.10gb+me", 20, 7, 9728, 14, 1, _ONE, 1, r),
            gi_profile("1g.20gb", 15, 9, 19968, 14, 4, (0, 2, 4, 6), 2, r),
            gi_profile("2g.20gb", 14, 1, 19968, 28, 3, (0, 2, 4), 2, r),
            gi_profile("3g.40gb", 9, 2, 40192, 42, 2, (0, 4), 4, r),
            gi_profile("4g.40gb", 5, 3, 40192, 56, 1, (0,), 4, r),
            gi_profile("7g.80gb", 0, 4, 80896, 98, 1, (0,), 8, r),
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
            gi_profile("1g.10gb", 19, 0, 9984, 16, 7, _ONE, 1, r),
            gi_profile("1g.10gb+me", 20, 7, 9984, 16, 1, _ONE, 1, r),
            gi_profile("1g.20gb", 15, 9, 20096, 26, 4, (0, 2, 4, 6), 2, r),
            gi_profile("2g.20gb", 14, 1, 20096, 32, 3, (0, 2, 4), 2, r),
            gi_profile("3g.40gb", 9, 2, 40448, 60, 2, (0, 4), 4, r),
            gi_profile("4g.40gb", 5, 3, 40448, 64, 1, (0,), 4, r),
            gi_profile("7g.80gb", 0, 4, 81152, 132, 1, (0,), 8, r),
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
            gi_profile("1g.18gb", 19, 0, 16384, 16, 7, _ONE, 1, r),
            gi_profile("1g.18gb+me", 20, 7, 16384, 16, 1, _ONE, 1, r),
            gi_profile("1g.35gb", 15, 9, 33280, 26, 4, (0, 2, 4, 6), 2, r),
            gi_profile("2g.35gb", 14, 1, 33280, 32, 3, (0, 2, 4), 2, r),
            gi_profile("3g.71gb", 9, 2, 71424, 60, 2, (0, 4), 4, r),
            gi_profile("4g.71gb", 5, 3, 71424, 64, 1, (0,), 4, r),
            gi_profile("7g.141gb", 0, 4, 143360, 132, 1, (0,), 8, r),
        ),
    )
