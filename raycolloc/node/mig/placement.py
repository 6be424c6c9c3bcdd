"""MIG placements: a layout placed on a GPU model's profile table (slots, counts, placements).

A :class:`Placement` lists one :class:`PlacedDevice` per CI ("MIG device"), in layout order: GI by
GI, CIs in the order written. Jobs map to MIG devices in that order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from raycolloc.node.mig.layout import GiRequest, Layout, LayoutError, parse_layout
from raycolloc.node.mig.profiles import CiProfile, GiProfile, GpuModel, get_gpu_model

__all__ = [
    "PlacedDevice",
    "Placement",
    "default_layout",
    "expand_short_names",
    "gpu_model_of",
    "place_layout",
    "requested_placement",
    "resolve_layout",
]


@dataclass(frozen=True)
class PlacedDevice:
    """One MIG device of a placement: a CI with its placement inside a placed GI.

    Attributes:
        index: position in the placement (the job that gets it).
        gi_index: which GI of the placement it belongs to.
        gi: GI profile. gi_start: first memory slot of the GI.
        ci: CI profile. ci_start: first compute slice of the CI inside the GI.
    """

    index: int
    gi_index: int
    gi: GiProfile
    gi_start: int
    ci: CiProfile
    ci_start: int

    @property
    def name(self) -> str:
        """nvidia-smi name, e.g. ``"3g.20gb"`` or ``"1c.3g.20gb"``."""
        return self.ci.full_name(self.gi)

    @property
    def sm_count(self) -> int:
        return self.ci.sm_count

    @property
    def memory_mib(self) -> int:
        """Memory of the GI (shared by all CIs of the GI)."""
        return self.gi.memory_mib

    def to_dict(self) -> dict[str, Any]:
        """Plain values for logs and result rows."""
        return {
            "index": self.index,
            "name": self.name,
            "gi_profile": self.gi.name,
            "gi_profile_id": self.gi.profile_id,
            "gi_start": self.gi_start,
            "ci_profile": self.ci.name,
            "ci_profile_id": self.ci.nvml_index,
            "ci_start": self.ci_start,
            "sm_count": self.sm_count,
            "memory_mib": self.memory_mib,
        }


Instance = tuple[str | int, int, Sequence[tuple[str | int, int]]]


@dataclass(frozen=True, eq=False)
class Placement:
    """Placed GIs and CIs for one GPU model; ``devices`` in job order.

    Two placements are ``==`` when they hold the same instances at the same placements (order
    ignored); :meth:`same_shape` ignores placements too.
    """

    model: GpuModel
    devices: tuple[PlacedDevice, ...]

    def __iter__(self) -> Iterator[PlacedDevice]:
        return iter(self.devices)

    def __len__(self) -> int:
        return len(self.devices)

    def instances(self) -> list[tuple[str, int, list[tuple[str, int]]]]:
        """``[(gi name, gi start, [(ci name, ci start), ...]), ...]`` in GI order."""
        out: dict[int, tuple[str, int, list[tuple[str, int]]]] = {}
        for d in self.devices:
            out.setdefault(d.gi_index, (d.gi.name, d.gi_start, []))[2].append((d.ci.name, d.ci_start))
        return [out[k] for k in sorted(out)]

    @property
    def layout(self) -> Layout:
        """The layout this placement realises."""
        return Layout(tuple(GiRequest(gi, tuple(c for c, _ in cis)) for gi, _, cis in self.instances()))

    def _key(self) -> tuple[str, tuple[Any, ...]]:
        return self.model.name, tuple(sorted((g, s, tuple(sorted(c))) for g, s, c in self.instances()))

    def same_shape(self, other: Placement) -> bool:
        """Same model and same GI/CI profiles, wherever they are placed."""

        def shape(p: Placement) -> Counter[tuple[str, tuple[str, ...]]]:
            return Counter((g, tuple(sorted(c for c, _ in cis))) for g, _, cis in p.instances())

        return self.model.name == other.model.name and shape(self) == shape(other)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Placement) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        parts = [
            f"{d.name}@{d.gi_start}" if d.ci == d.gi.full_ci else f"{d.name}@{d.gi_start}+{d.ci_start}"
            for d in self.devices
        ]
        return f"{self.model.name}: {', '.join(parts)}"

    @classmethod
    def from_instances(cls, model: str | GpuModel, instances: Iterable[Instance]) -> Placement:
        """Build a placement from instances read off a device, validating them against the table.

        Args:
            model: GPU model (name, NVML name or table).
            instances: ``(gi, gi_start, [(ci, ci_start), ...])``; ``gi`` is a GI profile name or
                nvidia-smi profile id, ``ci`` a CI name (``"1c"``, ``"1c.3g.20gb"``) or CI profile id.

        Raises:
            LayoutError: unknown profile, bad or overlapping placement, too many instances.
        """
        m = get_gpu_model(model)
        placed: list[tuple[GiProfile, int, list[tuple[CiProfile, int]]]] = []
        for gi_ref, gi_start, cis in instances:
            try:
                gi = m.profile(gi_ref)
                ci_list = [(gi.ci_profile(c), int(s)) for c, s in cis]
            except ValueError as e:
                raise LayoutError(f"instances on {m.name}: {e}") from e
            if not ci_list:
                raise LayoutError(
                    f"instances on {m.name}: GPU instance {gi.name} at slot {gi_start} has no compute instance"
                )
            placed.append((gi, int(gi_start), sorted(ci_list, key=lambda cs: cs[1])))
        placed.sort(key=lambda t: t[1])
        desc = " + ".join(gi.name for gi, _, _ in placed) or "(empty)"
        _check_totals(m, [gi for gi, _, _ in placed], desc)
        _check_fixed(m.memory_slices, m.compute_slices, [(gi, s) for gi, s, _ in placed], desc, m.name)
        devices: list[PlacedDevice] = []
        for gi_index, (gi, gi_start, gi_cis) in enumerate(placed):
            _check_cis(gi, [c for c, _ in gi_cis], desc)
            _check_fixed(gi.compute_slices, gi.compute_slices, gi_cis, desc, f"{gi.name} at slot {gi_start}")
            devices += [
                PlacedDevice(len(devices) + j, gi_index, gi, gi_start, ci, s) for j, (ci, s) in enumerate(gi_cis)
            ]
        return cls(m, tuple(devices))


def _check_fixed(mem_slots: int, compute: int, units: list[tuple[Any, int]], desc: str, where: str) -> None:
    """Validate placements read off a device: allowed starts and no overlap."""
    for prof, start in units:
        if start not in prof.placements:
            raise LayoutError(
                f"{desc}: {prof.name} cannot start at slot {start} in {where}; it takes {_slots_text(prof)}"
            )
    if _search([(p, i) for i, (p, _) in enumerate(units)], mem_slots, compute, [s for _, s in units]) is None:
        raise LayoutError(f"{desc}: instances overlap in {where}")


def _slots_text(prof: GiProfile | CiProfile) -> str:
    spans = [str(s) if prof.slot_size == 1 else f"{s}-{s + prof.slot_size - 1}" for s in prof.placements]
    word = "slot" if prof.slot_size == 1 and len(spans) == 1 else "slots"
    return f"{word} {spans[0]}" if len(spans) == 1 else f"{word} {', '.join(spans[:-1])} or {spans[-1]}"


def _check_totals(m: GpuModel, gis: Sequence[GiProfile], desc: str) -> None:
    compute = sum(g.compute_slices for g in gis)
    if compute > m.compute_slices:
        raise LayoutError(f"{desc} needs {compute} compute slices; {m.name} has {m.compute_slices}")
    memory = sum(g.slot_size for g in gis)
    if memory > m.memory_slices:
        raise LayoutError(f"{desc} needs {memory} memory slices; {m.name} has {m.memory_slices}")
    for name, n in Counter(g.name for g in gis).items():
        limit = m.profile(name).max_count
        if n > limit:
            raise LayoutError(f"{desc}: {m.name} allows at most {limit} x {name}, the layout asks for {n}")


def _check_cis(gi: GiProfile, cis: Sequence[CiProfile], desc: str) -> None:
    need = sum(c.compute_slices for c in cis)
    if need > gi.compute_slices:
        raise LayoutError(
            f"{desc}: compute instances {'+'.join(c.name for c in cis)} need {need} compute slices; "
            f"{gi.name} has {gi.compute_slices}"
        )
    for name, n in Counter(c.name for c in cis).items():
        limit = gi.ci_profile(name).max_count
        if n > limit:
            raise LayoutError(f"{desc}: {gi.name} holds at most {limit} x {name} compute instances, asked for {n}")


def _search(
    units: Sequence[tuple[Any, int]], mem_slots: int, compute: int, fixed: Sequence[int] | None = None
) -> dict[int, int] | None:
    """Starts for ``(profile, key)`` units, tried in the given order (deterministic backtracking).

    ``fixed`` pins unit ``i`` to start ``fixed[i]`` (units sorted by start) to check a placement.
    """
    used_mem = [False] * mem_slots
    used_cmp = [False] * compute
    out: dict[int, int] = {}

    def fits(p: GiProfile | CiProfile, s: int) -> bool:
        if s + p.slot_size > mem_slots or s + p.compute_slices > compute:
            return False
        return not any(used_mem[s : s + p.slot_size]) and not any(used_cmp[s : s + p.compute_slices])

    def mark(p: GiProfile | CiProfile, s: int, value: bool) -> None:
        used_mem[s : s + p.slot_size] = [value] * p.slot_size
        used_cmp[s : s + p.compute_slices] = [value] * p.compute_slices

    def rec(i: int, floor: int) -> bool:
        if i == len(units):
            return True
        prof, key = units[i]
        for s in prof.placements if fixed is None else (fixed[i],):
            if s < floor or not fits(prof, s):
                continue
            mark(prof, s, True)
            out[key] = s
            nxt = units[i + 1][0] if i + 1 < len(units) else None
            if rec(i + 1, s + 1 if nxt == prof else 0):  # equal profiles: increasing starts only
                return True
            mark(prof, s, False)
        return False

    return out if rec(0, 0) else None


def _by_size(profiles: Sequence[GiProfile | CiProfile]) -> list[tuple[GiProfile | CiProfile, int]]:
    order = sorted(
        range(len(profiles)), key=lambda i: (-profiles[i].compute_slices, -profiles[i].slot_size, profiles[i].name, i)
    )
    return [(profiles[i], i) for i in order]


def place_layout(model: str | GpuModel, layout: Any) -> Placement:
    """Place every GI and CI of ``layout`` on ``model``; larger profiles first, deterministic.

    Raises:
        UnknownGpuModel: ``model`` is not registered.
        LayoutError: unknown profile, too many slices or instances, or no placement fits.
    """
    m = get_gpu_model(model)
    lay = parse_layout(layout)
    desc = str(lay)
    if not lay.gpu_instances:
        raise LayoutError(f"empty MIG layout for {m.name}")
    try:
        gis = [m.profile(g.gi) for g in lay]
        cis = [[gi.ci_profile(c) for c in g.ci] for gi, g in zip(gis, lay, strict=True)]
    except ValueError as e:
        raise LayoutError(f"layout '{desc}': {e}") from e
    _check_totals(m, gis, desc)
    gi_starts = _search(_by_size(gis), m.memory_slices, m.compute_slices)
    if gi_starts is None:
        rules = "; ".join(f"{p.name} takes {_slots_text(p)}" for p in dict.fromkeys(gis))
        raise LayoutError(f"{desc}: no placement fits on {m.name} ({rules})")
    devices: list[PlacedDevice] = []
    for i, (gi, ci_list) in enumerate(zip(gis, cis, strict=True)):
        _check_cis(gi, ci_list, desc)
        ci_starts = _search(_by_size(ci_list), gi.compute_slices, gi.compute_slices)
        if ci_starts is None:
            rules = "; ".join(f"{c.name} takes {_slots_text(c)}" for c in dict.fromkeys(ci_list))
            raise LayoutError(
                f"{desc}: compute instances {'+'.join(c.name for c in ci_list)} do not fit in {gi.name} ({rules})"
            )
        for j, ci in enumerate(ci_list):
            devices.append(PlacedDevice(len(devices), i, gi, gi_starts[i], ci, ci_starts[j]))
    return Placement(m, tuple(devices))


def default_layout(model: str | GpuModel, degree: int) -> Layout:
    """The study's layout for ``degree`` collocated jobs: ``degree`` equal GIs, the largest that fit.

    Gives 7g for 1, 3g x2 for 2, 2g x3 for 3, 1g x7 for 7 (with the model's memory names).

    Raises:
        LayoutError: ``degree`` is not in 1..7 (the model's compute slices).
    """
    m = get_gpu_model(model)
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
        raise LayoutError(f"degree must be a positive integer, got {degree!r}")
    if degree > m.compute_slices:
        raise LayoutError(
            f"degree {degree}: {m.name} has {m.compute_slices} compute slices, "
            f"so at most {m.compute_slices} MIG devices"
        )
    candidates = sorted(
        (p for p in m.profiles if not p.media_extensions),
        key=lambda p: (-p.compute_slices, -p.slot_size, -p.memory_mib, p.name),
    )
    for p in candidates:
        layout = Layout((GiRequest(p.name),) * degree)
        if p.max_count >= degree:
            try:
                place_layout(m, layout)
            except LayoutError:
                continue
            return layout
    raise LayoutError(f"no profile of {m.name} fits {degree} times")


def resolve_layout(model: str | GpuModel, spec: Any, degree: int | None = None) -> Layout:
    """``spec`` parsed, or the default layout for ``degree`` when ``spec`` is ``"auto"``/None."""
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "auto"):
        if degree is None:
            raise LayoutError("layout 'auto' needs the degree (number of collocated jobs)")
        return default_layout(model, degree)
    return parse_layout(spec)


SIM_PREFIX = "Simulated "


def gpu_model_of(gpu_name: str) -> GpuModel:
    """The MIG table of a GPU by its NVML name (simulated GPUs are named ``Simulated <model>``)."""
    name = gpu_name[len(SIM_PREFIX) :] if gpu_name.startswith(SIM_PREFIX) else gpu_name
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
            raise LayoutError(
                f"{model.name} has no {m.group(1)}-slice GPU-instance profile; "
                f"its profiles are: {', '.join(model.profile_names())}"
            )
        return min(sizes, key=lambda p: p.memory_mib).name + m.group(2)
    if isinstance(spec, Mapping):
        return {k: expand_short_names(model, v) if k == "gi" else v for k, v in spec.items()}
    if isinstance(spec, Sequence):
        return [expand_short_names(model, item) for item in spec]
    return spec


def requested_placement(model: GpuModel, layout: Any, mix_layout: Any, job_profiles: Sequence[str | None]) -> Placement:
    """Place the cell's layout: per-job profiles (radT plans, mixes), else the mix's, else ``mig.layout``.

    Raises:
        LayoutError: the layout does not fit the GPU or does not give one MIG device per job.
    """
    if all(job_profiles):
        spec: Any = list(job_profiles)
    else:
        spec = mix_layout if mix_layout else layout
    spec = expand_short_names(model, _plain(spec))
    placement = place_layout(model, resolve_layout(model, spec, len(job_profiles)))
    if len(placement) != len(job_profiles):
        raise LayoutError(
            f"MIG layout {placement} makes {len(placement)} MIG devices; the cell has {len(job_profiles)} jobs"
        )
    return placement


def _plain(spec: Any) -> Any:
    return OmegaConf.to_container(spec) if isinstance(spec, DictConfig | ListConfig) else spec
