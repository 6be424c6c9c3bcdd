"""Tests for raycolloc.node.mig.layout and .placement (layouts, their placements) and raycolloc.node.mig.migparted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from raycolloc.node.mig import shapes
from raycolloc.node.mig.layout import GiRequest, Layout, LayoutError, parse_layout
from raycolloc.node.mig.migparted import from_migparted, layout_to_mig_devices, to_migparted
from raycolloc.node.mig.placement import Placement, default_layout, place_layout, resolve_layout
from raycolloc.node.mig.profiles import GpuModel, get_gpu_model, known_gpu_models, register_gpu_model

A100 = "A100-SXM4-40GB"
MODELS = known_gpu_models()


# --- parsing ------------------------------------------------------------------------------------
def test_all_layout_forms_read_the_same() -> None:
    expected = Layout((GiRequest("3g.20gb"), GiRequest("2g.10gb"), GiRequest("2g.10gb")))
    forms = [
        ["3g.20gb", "2g.10gb", "2g.10gb"],
        ["3g.20gb", "2g.10gb x2"],
        ["3g.20gb", "2g.10gb x 2"],
        "3g.20gb, 2g.10gb x2",
        [{"gi": "3g.20gb"}, {"gi": "2g.10gb", "count": 2}],
        ("MIG 3g.20gb", "2G.10GB X2"),
    ]
    for form in forms:
        assert parse_layout(form) == expected, form
    assert str(expected) == "3g.20gb + 2g.10gb x2"
    assert expected.num_devices == 3


def test_ci_dict_form() -> None:
    lay = parse_layout({"gi": "7g.40gb", "ci": ["3c", "3c.7g.40gb"]})
    assert lay == Layout((GiRequest("7g.40gb", ("3c", "3c")),))
    assert parse_layout({"gi": "7g.40gb", "ci": "1c x7"}).num_devices == 7
    assert parse_layout({"gi": "3g.20gb", "ci": ["3g.20gb"]}) == parse_layout("3g.20gb")
    assert str(lay) == "7g.40gb(3c+3c)"


@pytest.mark.parametrize(
    "bad",
    [
        "3*2g.10gb",
        "2g.10gbx3",
        "2g.10gb x0",
        "ten",
        [{"ci": ["1c"]}],
        [{"gi": "3g.20gb", "cis": ["1c"]}],
        [{"gi": "3g.20gb", "ci": ["4c"]}],
        [{"gi": "3g.20gb", "count": 0}],
        [3],
        "auto",
    ],
)
def test_unreadable_layouts_are_refused(bad: object) -> None:
    with pytest.raises(LayoutError):
        parse_layout(bad)


def test_star_count_error_shows_the_supported_syntax() -> None:
    with pytest.raises(LayoutError, match=r"'2g\.10gb x3'"):
        parse_layout(["3*2g.10gb"])


def test_to_list_reads_back_equal() -> None:
    lay = parse_layout(["3g.20gb", "1g.5gb x2", {"gi": "1g.10gb"}, {"gi": "7g.40gb", "ci": ["3c", "4c"], "count": 1}])
    assert parse_layout(lay.to_list()) == lay
    assert lay.to_list()[:2] == ["3g.20gb", "1g.5gb x2"]


def test_resolve_layout_auto_uses_the_degree() -> None:
    assert resolve_layout(A100, "auto", 3) == parse_layout("2g.10gb x3")
    assert resolve_layout(A100, ["7g.40gb"]) == parse_layout("7g.40gb")
    with pytest.raises(LayoutError, match="degree"):
        resolve_layout(A100, "auto")


# --- planning -----------------------------------------------------------------------------------
def test_a100_3g_plus_two_2g_fits() -> None:
    plan = place_layout(A100, ["3g.20gb", "2g.10gb x2"])
    assert [d.gi.name for d in plan] == ["3g.20gb", "2g.10gb", "2g.10gb"]  # layout order = job order
    assert [d.gi_start for d in plan] == [4, 0, 2]
    assert [d.sm_count for d in plan] == [42, 28, 28]
    assert [d.index for d in plan] == [0, 1, 2]
    slots = [s for d in plan for s in d.gi.slots(d.gi_start)]
    assert len(slots) == len(set(slots))


def test_a100_3g_plus_five_1g_does_not_fit() -> None:
    with pytest.raises(LayoutError, match="A100-SXM4-40GB") as err:
        place_layout(A100, ["3g.20gb", "1g.5gb x5"])
    assert "3g.20gb + 1g.5gb x5" in str(err.value)


def test_a100_seven_2g_refused_with_slice_counts() -> None:
    with pytest.raises(LayoutError) as err:
        place_layout(A100, ["2g.10gb x7"])
    msg = str(err.value)
    assert "14" in msg and "7" in msg and "compute slices" in msg and A100 in msg


def test_h100_four_1g20gb_fit_five_do_not() -> None:
    plan = place_layout("H100-80GB", ["1g.20gb x4"])
    assert sorted(d.gi_start for d in plan) == [0, 2, 4, 6]
    assert all(d.sm_count == 26 for d in plan)
    with pytest.raises(LayoutError, match="H100-80GB"):
        place_layout("H100-80GB", ["1g.20gb x5"])


def test_max_count_is_enforced_with_a_clear_message() -> None:
    with pytest.raises(LayoutError, match=r"at most 1 x 1g\.5gb\+me"):
        place_layout(A100, ["1g.5gb+me x2"])


def test_unknown_profile_for_the_model() -> None:
    with pytest.raises(LayoutError) as err:
        place_layout(A100, ["1g.20gb"])
    assert "1g.10gb" in str(err.value) and "7g.40gb" in str(err.value)


def test_empty_layout_is_refused() -> None:
    with pytest.raises(LayoutError, match="empty"):
        place_layout(A100, [])


def test_ci_layout_plans_two_mig_devices() -> None:
    plan = place_layout(A100, [{"gi": "7g.40gb", "ci": ["3c", "3c"]}])
    assert len(plan) == 2
    assert [d.name for d in plan] == ["3c.7g.40gb", "3c.7g.40gb"]
    assert {d.gi_start for d in plan} == {0} and {d.gi_index for d in plan} == {0}
    assert sorted(d.ci_start for d in plan) == [0, 4]
    assert [d.sm_count for d in plan] == [42, 42]
    assert all(d.memory_mib == get_gpu_model(A100).profile("7g.40gb").memory_mib for d in plan)
    assert plan.devices[0].to_dict()["ci_profile_id"] == 2


@pytest.mark.parametrize(
    ("ci", "pattern"),
    [(["4c", "4c"], "8 compute slices"), (["3c x3"], "9 compute slices"), (["7c", "1c"], "8 compute slices")],
)
def test_ci_layouts_that_do_not_fit(ci: list[str], pattern: str) -> None:
    with pytest.raises(LayoutError, match=pattern):
        place_layout(A100, [{"gi": "7g.40gb", "ci": ci}])


def test_ci_profile_missing_in_gi() -> None:
    with pytest.raises(LayoutError, match="valid: 1c, 2c, 4c"):
        place_layout(A100, [{"gi": "4g.20gb", "ci": ["3c"]}])


def test_mixed_ci_layout_places_without_overlap() -> None:
    plan = place_layout(A100, [{"gi": "7g.40gb", "ci": ["1c", "2c", "4c"]}])
    spans = [s for d in plan for s in range(d.ci_start, d.ci_start + d.ci.compute_slices)]
    assert len(spans) == len(set(spans)) == 7
    assert [d.ci.name for d in plan] == ["1c", "2c", "4c"]


def test_planning_is_deterministic() -> None:
    layout = ["2g.10gb", "1g.5gb x3", "2g.10gb"]
    first = place_layout(A100, layout)
    assert [(d.gi_start, d.ci_start) for d in first] == [(d.gi_start, d.ci_start) for d in place_layout(A100, layout)]
    assert str(first) == str(place_layout(A100, layout))


@pytest.fixture
def trap_model() -> Iterator[str]:
    saved = dict(shapes._REGISTRY)

    @register_gpu_model
    def _trap() -> GpuModel:  # 2g only at slots 0-1 and 4-5: two fit by count, three cannot be placed
        return GpuModel(
            name="TRAP-40GB",
            aliases=(),
            total_sms=98,
            total_memory_mib=40960,
            profiles=(
                shapes.gi_profile("2g.10gb", 14, 1, 9856, 28, 3, (0, 4), 2, 14),
                shapes.gi_profile("7g.40gb", 0, 4, 40192, 98, 1, (0,), 8, 14),
            ),
        )

    try:
        yield "TRAP-40GB"
    finally:
        shapes._REGISTRY.clear()
        shapes._REGISTRY.update(saved)


def test_no_placement_message_names_the_slots(trap_model: str) -> None:
    assert len(place_layout(trap_model, ["2g.10gb x2"])) == 2
    with pytest.raises(LayoutError) as err:
        place_layout(trap_model, ["2g.10gb x3"])
    msg = str(err.value)
    assert "no placement fits" in msg and "TRAP-40GB" in msg and "slots 0-1 or 4-5" in msg


# --- default layouts ----------------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("degree", "g"), [(1, 7), (2, 3), (3, 2), (7, 1)])
def test_default_layouts_on_every_model(model: str, degree: int, g: int) -> None:
    layout = default_layout(model, degree)
    assert len(layout) == degree and len(set(layout)) == 1
    gi = get_gpu_model(model).profile(layout.gpu_instances[0].gi)
    assert gi.compute_slices == g and not gi.media_extensions
    if g == 1:
        assert gi.nvml_index == 0 and gi.slot_size == 1  # the plain 1g profile, not 1g.10gb/+me
    assert len(place_layout(model, layout)) == degree


def test_default_layouts_of_the_study_a100() -> None:
    assert [str(default_layout(A100, d)) for d in (1, 2, 3, 7)] == ["7g.40gb", "3g.20gb x2", "2g.10gb x3", "1g.5gb x7"]
    assert str(default_layout("H200-141GB", 2)) == "3g.71gb x2"


@pytest.mark.parametrize("model", MODELS)
def test_default_layout_other_degrees(model: str) -> None:
    for degree in (4, 5, 6):
        assert len(place_layout(model, default_layout(model, degree))) == degree
    for bad in (0, 8, -1):
        with pytest.raises(LayoutError):
            default_layout(model, bad)


# --- plans read off a device --------------------------------------------------------------------
def test_plan_from_instances_equals_planned() -> None:
    planned = place_layout(A100, ["3g.20gb", "2g.10gb x2"])
    read = Placement.from_instances(A100, [(14, 2, [(1, 0)]), (9, 4, [(2, 0)]), ("2g.10gb", 0, [("2c", 0)])])
    assert read == planned and hash(read) == hash(planned)
    assert read.same_shape(planned)
    assert [d.gi_start for d in read] == [0, 2, 4]  # device order: by placement


def test_plans_with_other_placements_differ_but_share_the_shape() -> None:
    planned = place_layout(A100, ["2g.10gb", "1g.5gb"])
    read = Placement.from_instances(A100, [("2g.10gb", 4, [("2c", 0)]), ("1g.5gb", 0, [("1c", 0)])])
    assert read != planned
    assert read.same_shape(planned)
    assert not read.same_shape(place_layout(A100, ["2g.10gb", "1g.10gb"]))


def test_plan_from_instances_with_cis_and_round_trip() -> None:
    planned = place_layout(A100, [{"gi": "7g.40gb", "ci": ["3c", "3c"]}])
    read = Placement.from_instances(A100, planned.instances())
    assert read == planned
    assert place_layout(A100, planned.layout) == planned
    assert read != place_layout(A100, [{"gi": "7g.40gb", "ci": ["4c", "3c"]}])


@pytest.mark.parametrize(
    ("instances", "pattern"),
    [
        ([("3g.20gb", 0, [("3c", 0)]), ("2g.10gb", 2, [("2c", 0)])], "overlap"),
        ([("3g.20gb", 2, [("3c", 0)])], "cannot start at slot 2"),
        ([("3g.20gb", 0, [])], "no compute instance"),
        ([("7g.40gb", 0, [("3c", 0), ("3c", 2)])], "3c cannot start at slot 2"),
        ([("7g.40gb", 0, [("4c", 0), ("3c", 0)])], "overlap"),
        ([("1g.20gb", 0, [("1c", 0)])], "no GPU-instance profile '1g.20gb'"),
        ([("4g.20gb", 0, [("4c", 0)]), ("4g.20gb", 4, [("4c", 0)])], "8 compute slices"),
    ],
)
def test_plan_from_bad_instances_is_refused(instances: list, pattern: str) -> None:
    with pytest.raises(LayoutError, match=pattern):
        Placement.from_instances(A100, instances)


def test_hydra_containers_are_accepted() -> None:
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create(
        {"a": ["3g.20gb", {"gi": "7g.40gb", "ci": ["3c", "3c"]}], "b": {"gi": "1g.5gb", "count": 7}}
    )
    assert parse_layout(cfg.a) == Layout((GiRequest("3g.20gb"), GiRequest("7g.40gb", ("3c", "3c"))))
    assert parse_layout(cfg.b) == parse_layout("1g.5gb x7")


# --- mig-parted ---------------------------------------------------------------------------------
def test_to_migparted_document() -> None:
    doc = yaml.safe_load(to_migparted(["3g.20gb", "2g.10gb x2"], "study-3", devices=[0, 1]))
    assert doc == {
        "version": "v1",
        "mig-configs": {
            "study-3": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.20gb": 1, "2g.10gb": 2}}]
        },
    }


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("degree", [1, 2, 3, 4, 7])
def test_migparted_round_trip_of_default_layouts(model: str, degree: int) -> None:
    layout = default_layout(model, degree)
    [(devices, back)] = from_migparted(to_migparted(layout, f"d{degree}"))
    assert devices == "all" and back == layout


def test_migparted_round_trip_with_single_ci_and_plan() -> None:
    layout = parse_layout(["4g.20gb", {"gi": "3g.20gb", "ci": ["1c"]}])
    text = to_migparted(place_layout(A100, layout), "mixed", devices=[2])
    assert '"1c.3g.20gb": 1' in text
    [(devices, back)] = from_migparted(text, "mixed")
    assert devices == (2,) and back == layout
    assert place_layout(A100, back) == place_layout(A100, layout)


def test_migparted_refuses_several_cis_in_one_gi() -> None:
    with pytest.raises(ValueError, match="cannot express"):
        to_migparted([{"gi": "7g.40gb", "ci": ["3c", "3c"]}], "split")
    assert layout_to_mig_devices(["1g.5gb x7"]) == {"1g.5gb": 7}


NVIDIA_STYLE = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.5gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
  custom:
    - devices: [0]
      mig-enabled: false
    - devices: [1, 2]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 1
        "1g.5gb": 0
        "2g.10gb": 2
"""


def test_from_migparted_reads_nvidia_style_configs() -> None:
    [(devices, layout)] = from_migparted(NVIDIA_STYLE, "all-1g.5gb")
    assert devices == "all" and len(place_layout(A100, layout)) == 7
    assert from_migparted(NVIDIA_STYLE, "all-disabled") == [("all", None)]
    custom = from_migparted(NVIDIA_STYLE, "custom")
    assert custom[0] == ((0,), None)
    assert custom[1] == ((1, 2), parse_layout(["3g.20gb", "2g.10gb x2"]))


@pytest.mark.parametrize(
    ("text", "name", "pattern"),
    [
        ("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n", None, "version"),
        ("version: v1\n", None, "mig-configs"),
        ("- just a list\n", None, "mapping"),
        ("version: [\n", None, "YAML"),
        (NVIDIA_STYLE, None, "pick one of: all-disabled, all-1g.5gb, custom"),
        (NVIDIA_STYLE, "nope", "no mig-parted config 'nope'"),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {'1g.5gb': -1}}]}\n",
            None,
            "count",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {'big': 1}}]}\n",
            None,
            "profile",
        ),
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}\n", None, "required"),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, mig-devices: {'1g.5gb': 1}}]}\n",
            None,
            "mig-enabled",
        ),
        ("version: v1\nmig-configs: {a: [{devices: some, mig-enabled: false}]}\n", None, "devices"),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, device-filter: '0x20B010DE'}]}\n",
            None,
            "device-filter",
        ),
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, extra: 1}]}\n", None, "extra"),
    ],
)
def test_from_migparted_refuses_invalid_documents(text: str, name: str | None, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        from_migparted(text, name)


def test_to_migparted_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="devices"):
        to_migparted(["7g.40gb"], "x", devices=[])
    with pytest.raises(ValueError, match="name"):
        to_migparted(["7g.40gb"], "")


def test_a_cell_layout_is_placed_once_per_gpu_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31, item 5: the pre-flight (skipped, then unfit cells) and the steward each placed a cell's
    layout; they share :func:`cell_placement`, which places it once per layout and GPU model."""
    from raycolloc.node.modes import mig
    from tests.conftest import load

    calls: list[str] = []
    place = mig.requested_placement

    def counted(model: GpuModel, *args: Any) -> Placement:
        calls.append(model.name)
        return place(model, *args)

    monkeypatch.setattr(mig, "requested_placement", counted)
    monkeypatch.setattr(mig, "_placed", {})
    cell = load(["mode=mig", "degree=3", "epoch_samples=64"])
    first = mig.cell_placement(cell, "NVIDIA A100-SXM4-40GB")
    assert mig.cell_placement(cell, "Simulated A100-SXM4-40GB") is first  # the same model: placed once
    assert [d.name for d in first] == ["2g.10gb"] * 3
    mig.cell_placement(cell, "NVIDIA H100 80GB HBM3")
    assert len(calls) == 2
    with pytest.raises(LayoutError):  # a layout that does not fit is refused every time, never kept
        mig.cell_placement(
            load(["mode=mig", "mig.layout=[7g.40gb,1g.5gb]", "degree=2", "epoch_samples=64"]), "NVIDIA A100-SXM4-40GB"
        )
