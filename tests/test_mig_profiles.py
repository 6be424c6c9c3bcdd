"""Tests for raycolloc.node.mig.profiles: every registered table against its own rules, plus known facts."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from raycolloc.node.mig import shapes
from raycolloc.node.mig.placement import GiRequest, Layout, LayoutError, place_layout
from raycolloc.node.mig.profiles import (
    NVML_COMPUTE_INSTANCE_PROFILE,
    NVML_GPU_INSTANCE_PROFILE,
    GpuModel,
    UnknownGpuModel,
    get_gpu_model,
    known_gpu_models,
    register_gpu_model,
)

MODELS = known_gpu_models()
PROFILES = [(m, p.name) for m in MODELS for p in get_gpu_model(m).profiles]
CIS = [(m, p.name, c.name) for m in MODELS for p in get_gpu_model(m).profiles for c in p.ci_profiles]
# NVML GI constant -> compute slices it stands for.
SLICES_OF_NVML_GI = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 7: 1, 9: 1}


def _max_disjoint(starts: tuple[int, ...], size: int) -> int:
    """Most placements that can be used at once (brute force over subsets)."""
    best = 0
    for mask in range(1 << len(starts)):
        chosen = [s for i, s in enumerate(starts) if mask >> i & 1]
        slots = [x for s in chosen for x in range(s, s + size)]
        if len(slots) == len(set(slots)):
            best = max(best, len(chosen))
    return best


def test_the_four_study_models_are_registered() -> None:
    assert set(MODELS) >= {"A100-SXM4-40GB", "A100-80GB", "H100-80GB", "H200-141GB"}
    assert MODELS == sorted(MODELS)


def test_nvml_constants_match_nvml_h() -> None:
    gi = NVML_GPU_INSTANCE_PROFILE
    assert (gi["1_SLICE"], gi["2_SLICE"], gi["3_SLICE"], gi["4_SLICE"], gi["7_SLICE"]) == (0, 1, 2, 3, 4)
    assert (gi["8_SLICE"], gi["6_SLICE"], gi["1_SLICE_REV1"], gi["2_SLICE_REV1"], gi["1_SLICE_REV2"]) == (5, 6, 7, 8, 9)
    ci = NVML_COMPUTE_INSTANCE_PROFILE
    assert (ci["1_SLICE"], ci["2_SLICE"], ci["3_SLICE"], ci["4_SLICE"], ci["7_SLICE"]) == (0, 1, 2, 3, 4)
    assert ci["1_SLICE_REV1"] == 7


# --- every table against its own rules ----------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
def test_model_table_is_self_consistent(model: str) -> None:
    m = get_gpu_model(model)
    assert (m.compute_slices, m.memory_slices) == (7, 8)
    names = [p.name for p in m.profiles]
    assert len(set(names)) == len(names)
    assert len({p.profile_id for p in m.profiles}) == len(names)
    assert len({p.nvml_index for p in m.profiles}) == len(names)
    for p in m.profiles:
        g = int(re.match(r"^(\d+)g\.\d+gb", p.name).group(1))
        assert p.compute_slices == g
        assert SLICES_OF_NVML_GI[p.nvml_index] == g
        assert p.media_extensions == (p.nvml_index == NVML_GPU_INSTANCE_PROFILE["1_SLICE_REV1"])
        assert g <= p.slot_size <= m.memory_slices
        assert 0 < p.sm_count <= m.total_sms
        assert 0 < p.memory_mib * m.memory_slices // p.slot_size <= m.total_memory_mib
        assert p.placements == tuple(sorted(set(p.placements)))
        for start in p.placements:
            assert start + p.slot_size <= m.memory_slices, f"{p.name}@{start} leaves the 8 memory slots"
            assert start + g <= m.compute_slices, f"{p.name}@{start} leaves the 7 compute slices"
    whole = [p for p in m.profiles if p.compute_slices == 7]
    assert len(whole) == 1 and whole[0].slot_size == 8 and whole[0].placements == (0,)


@pytest.mark.parametrize(("model", "profile"), PROFILES)
def test_profile_max_count_fits_and_one_more_does_not(model: str, profile: str) -> None:
    p = get_gpu_model(model).profile(profile)
    assert 1 <= p.max_count <= _max_disjoint(p.placements, p.slot_size)
    plan = place_layout(model, [profile] * p.max_count)
    assert len(plan) == p.max_count
    starts = [d.gi_start for d in plan]
    assert len(set(starts)) == len(starts) and set(starts) <= set(p.placements)
    with pytest.raises(LayoutError):
        place_layout(model, [profile] * (p.max_count + 1))


@pytest.mark.parametrize(("model", "profile"), PROFILES)
def test_larger_profiles_never_have_fewer_sms_or_less_memory(model: str, profile: str) -> None:
    m = get_gpu_model(model)
    p = m.profile(profile)
    for q in m.profiles:
        if q.compute_slices >= p.compute_slices and q.slot_size >= p.slot_size:
            assert q.sm_count >= p.sm_count and q.memory_mib >= p.memory_mib, (p.name, q.name)


@pytest.mark.parametrize(("model", "profile"), PROFILES)
def test_gi_has_a_whole_ci_and_valid_ci_table(model: str, profile: str) -> None:
    p = get_gpu_model(model).profile(profile)
    assert p.full_ci.compute_slices == p.compute_slices
    assert p.full_ci.sm_count == p.sm_count
    assert p.full_ci.full_name(p) == p.name
    for c in p.ci_profiles:
        assert c.nvml_index == NVML_COMPUTE_INSTANCE_PROFILE[f"{c.compute_slices}_SLICE"]
        assert c.name == f"{c.compute_slices}c" and c.slot_size == c.compute_slices
        assert 0 < c.sm_count <= p.sm_count
        for start in c.placements:
            assert start + c.slot_size <= p.compute_slices


@pytest.mark.parametrize(("model", "profile", "ci"), CIS)
def test_ci_max_count_fits_and_one_more_does_not(model: str, profile: str, ci: str) -> None:
    c = get_gpu_model(model).profile(profile).ci_profile(ci)
    plan = place_layout(model, [{"gi": profile, "ci": [ci] * c.max_count}])
    assert [d.ci.name for d in plan] == [ci] * c.max_count
    assert len({d.ci_start for d in plan}) == c.max_count
    with pytest.raises(LayoutError):
        place_layout(model, [{"gi": profile, "ci": [ci] * (c.max_count + 1)}])


@pytest.mark.parametrize("model", MODELS)
def test_every_alias_finds_its_model(model: str) -> None:
    m = get_gpu_model(model)
    assert m.aliases
    for alias in (m.name, m.name.lower(), *m.aliases, *(a.upper() for a in m.aliases)):
        assert get_gpu_model(alias) is m
    for alias in m.aliases:
        assert get_gpu_model(alias.removeprefix("NVIDIA ")) is m


# --- facts from the sources ---------------------------------------------------------------------
def test_a100_40gb_profiles() -> None:
    m = get_gpu_model("NVIDIA A100-SXM4-40GB")
    assert m.name == "A100-SXM4-40GB" and m.total_sms == 108
    table = {
        p.name: (p.profile_id, p.nvml_index, p.sm_count, p.max_count, p.placements, p.slot_size) for p in m.profiles
    }
    assert table == {
        "1g.5gb": (19, 0, 14, 7, (0, 1, 2, 3, 4, 5, 6), 1),
        "1g.5gb+me": (20, 7, 14, 1, (0, 1, 2, 3, 4, 5, 6), 1),
        "1g.10gb": (15, 9, 14, 4, (0, 2, 4, 6), 2),
        "2g.10gb": (14, 1, 28, 3, (0, 2, 4), 2),
        "3g.20gb": (9, 2, 42, 2, (0, 4), 4),
        "4g.20gb": (5, 3, 56, 1, (0,), 4),
        "7g.40gb": (0, 4, 98, 1, (0,), 8),
    }
    assert get_gpu_model("NVIDIA A100-PCIE-40GB") is m


def test_a100_80gb_names() -> None:
    m = get_gpu_model("NVIDIA A100 80GB PCIe")
    assert m.name == "A100-80GB" and get_gpu_model("NVIDIA A100-SXM4-80GB") is m
    assert {"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"} <= set(m.profile_names())
    assert m.profile("1g.20gb").nvml_index == NVML_GPU_INSTANCE_PROFILE["1_SLICE_REV2"]


def test_h100_profiles_match_nvidia_smi() -> None:
    m = get_gpu_model("NVIDIA H100 80GB HBM3")
    table = {p.name: (p.sm_count, p.placements, p.slot_size) for p in m.profiles if not p.media_extensions}
    assert table == {
        "1g.10gb": (16, (0, 1, 2, 3, 4, 5, 6), 1),
        "1g.20gb": (26, (0, 2, 4, 6), 2),
        "2g.20gb": (32, (0, 2, 4), 2),
        "3g.40gb": (60, (0, 4), 4),
        "4g.40gb": (64, (0,), 4),
        "7g.80gb": (132, (0,), 8),
    }
    assert m.profile("1g.20gb").nvml_index == 9 and m.profile("1g.20gb").profile_id == 15


def test_h200_profiles_match_nvml() -> None:
    m = get_gpu_model("NVIDIA H200")
    table = {p.name: (p.profile_id, p.nvml_index, p.sm_count, p.memory_mib, p.max_count) for p in m.profiles}
    assert table == {
        "1g.18gb": (19, 0, 16, 16384, 7),
        "1g.18gb+me": (20, 7, 16, 16384, 1),
        "1g.35gb": (15, 9, 26, 33280, 4),
        "2g.35gb": (14, 1, 32, 33280, 3),
        "3g.71gb": (9, 2, 60, 71424, 2),
        "4g.71gb": (5, 3, 64, 71424, 1),
        "7g.141gb": (0, 4, 132, 143360, 1),
    }


def test_ci_tables_follow_nvidia_smi_lcip() -> None:
    a100 = get_gpu_model("A100-SXM4-40GB")
    assert [c.name for c in a100.profile("4g.20gb").ci_profiles] == ["1c", "2c", "4c"]
    assert [c.name for c in a100.profile("7g.40gb").ci_profiles] == ["1c", "2c", "3c", "4c", "7c"]
    three = a100.profile("3g.20gb")
    assert [(c.name, c.sm_count, c.max_count) for c in three.ci_profiles] == [
        ("1c", 14, 3),
        ("2c", 28, 1),
        ("3c", 42, 1),
    ]
    assert three.ci_profile("1c.3g.20gb") is three.ci_profile(0) is three.ci_profile("1c")
    assert a100.profile("7g.40gb").ci_profile("4c").sm_count == 56
    with pytest.raises(ValueError, match="valid: 1c, 2c, 4c"):
        a100.profile("4g.20gb").ci_profile("3c")


# --- lookups and errors -------------------------------------------------------------------------
def test_unknown_model_lists_known_models() -> None:
    with pytest.raises(UnknownGpuModel) as err:
        get_gpu_model("Tesla T4")
    assert isinstance(err.value, ValueError)
    for name in MODELS:
        assert name in str(err.value)
    assert "NVIDIA H100 80GB HBM3" in str(err.value)


def test_unknown_profile_lists_model_profiles() -> None:
    m = get_gpu_model("A100-SXM4-40GB")
    with pytest.raises(ValueError) as err:
        m.profile("1g.20gb")
    assert "A100-SXM4-40GB" in str(err.value)
    for name in m.profile_names():
        assert name in str(err.value)


def test_profile_lookup_by_id_and_nvidia_smi_name() -> None:
    m = get_gpu_model("A100-SXM4-40GB")
    assert m.profile(9) is m.profile("MIG 3g.20gb") is m.profile("3G.20GB")
    with pytest.raises(ValueError):
        m.profile(42)


@pytest.fixture
def scratch_registry() -> Iterator[None]:
    saved = dict(shapes._REGISTRY)
    try:
        yield
    finally:
        shapes._REGISTRY.clear()
        shapes._REGISTRY.update(saved)


def test_register_gpu_model_adds_a_model(scratch_registry: None) -> None:
    @register_gpu_model
    def _toy() -> GpuModel:
        return GpuModel(
            name="TOY-8GB",
            aliases=("NVIDIA Toy",),
            total_sms=14,
            total_memory_mib=8192,
            profiles=(shapes.gi_profile("7g.8gb", 0, 4, 8000, 14, 1, (0,), 8, 2),),
        )

    assert "TOY-8GB" in known_gpu_models()
    assert get_gpu_model("NVIDIA Toy").name == "TOY-8GB"
    assert place_layout("TOY-8GB", Layout((GiRequest("7g.8gb"),))).devices[0].sm_count == 14
    with pytest.raises(ValueError, match="registered twice"):
        register_gpu_model(_toy)


def test_register_refuses_a_clashing_nvml_name(scratch_registry: None) -> None:
    with pytest.raises(ValueError, match="already belong"):

        @register_gpu_model
        def _clash() -> GpuModel:
            return GpuModel(name="OTHER", aliases=("NVIDIA H200",), total_sms=1, total_memory_mib=1, profiles=())

    assert "OTHER" not in known_gpu_models()


def test_nvml_instances_lists_each_profiles_instances_and_passes_over_what_nvml_refuses() -> None:
    """GPU instances and compute instances are listed by one helper, as NVML lists them: profile by
    profile, into the caller's array, with a count (no GPU needed: NVML's two calls are given)."""
    import ctypes
    from types import SimpleNamespace

    import pynvml

    from raycolloc.node.gpu.nvml import nvml_instances

    listed = {5: [11, 12], 9: [], 14: [31]}  # profile id -> the handles of its instances
    ids = {0: 5, 2: 9, 3: 14, 4: 20}  # profile constant -> profile id; 1: not on this GPU; 20: listing refused

    def profile_info(const: int) -> SimpleNamespace:
        if const not in ids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(id=ids[const], instanceCount=len(listed.get(ids[const], [0])))

    def list_into(profile: int, arr: ctypes.Array, count: object) -> None:
        if profile not in listed:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        for i, handle in enumerate(listed[profile]):
            arr[i] = handle
        count._obj.value = len(listed[profile])  # type: ignore[attr-defined] - ctypes.byref's target

    assert nvml_instances(6, ctypes.c_int, profile_info, list_into) == [11, 12, 31]
