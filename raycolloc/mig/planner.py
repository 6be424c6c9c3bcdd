"""MIG layouts: parse what users write in Hydra, and plan placements for a GPU model.

A *layout* is a list of GPU instances (GIs), each with a GI profile and the compute instances
(CIs) it is split into; by default one CI spans the whole GI. Accepted forms (Hydra lists and
dicts work the same as Python ones)::

    ["3g.20gb", "2g.10gb", "2g.10gb"]        # one string per GI
    ["3g.20gb", "2g.10gb x2"]                # count syntax: "<profile> x<N>" (space before x)
    "3g.20gb, 2g.10gb x2"                    # the same as one comma-separated string
    [{gi: "7g.40gb", ci: ["3c", "3c"]}]      # a GI split into CIs; ci items may be "1c x3"
    {gi: "1g.5gb", count: 7}                 # a dict may carry a count too

CI names are short (``"3c"``), nvidia-smi style (``"3c.7g.40gb"``) or the GI name for the CI
spanning the GI. A :class:`Plan` lists one :class:`PlannedDevice` per CI ("MIG device"), in
layout order: GI by GI, CIs in the order written. Jobs map to MIG devices in that order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from raycolloc.mig.profiles import CiProfile, GiProfile, GpuModel, get_gpu_model, normalize_profile_name

__all__ = ["GiSpec", "Layout", "LayoutError", "Plan", "PlannedDevice", "default_layout", "parse_layout", "plan_layout",
           "resolve_layout"]

_GI_RE = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")
_CI_RE = re.compile(r"^(\d+)c(?:\.(.+))?$")
_COUNT_RE = re.compile(r"^(?P<item>\S+)(?:\s+x\s*(?P<n>\d+))?$")
_DICT_KEYS = {"gi", "ci", "count"}


class LayoutError(ValueError):
    """A layout cannot be parsed or does not fit the GPU; the message says why."""


@dataclass(frozen=True)
class GiSpec:
    """One requested GPU instance: GI profile name and its CI profile names (short form)."""

    gi: str
    ci: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.ci:
            object.__setattr__(self, "ci", (f"{_gi_slices(self.gi)}c",))

    @property
    def is_whole(self) -> bool:
        """True when the GI holds one CI spanning it."""
        return self.ci == (f"{_gi_slices(self.gi)}c",)

    def __str__(self) -> str:
        return self.gi if self.is_whole else f"{self.gi}({'+'.join(self.ci)})"


@dataclass(frozen=True)
class Layout:
    """An ordered list of requested GPU instances (model-independent; see :func:`plan_layout`)."""

    gpu_instances: tuple[GiSpec, ...] = ()

    def __iter__(self) -> Iterator[GiSpec]:
        return iter(self.gpu_instances)

    def __len__(self) -> int:
        return len(self.gpu_instances)

    @property
    def num_devices(self) -> int:
        """MIG devices (CIs) the layout makes."""
        return sum(len(g.ci) for g in self.gpu_instances)

    def runs(self) -> list[tuple[GiSpec, int]]:
        """Consecutive equal GIs grouped: ``[(spec, count), ...]``."""
        return [(g, len(list(run))) for g, run in groupby(self.gpu_instances)]

    def to_list(self) -> list[str | dict[str, Any]]:
        """Hydra-friendly form that :func:`parse_layout` reads back to an equal layout."""
        out: list[str | dict[str, Any]] = []
        for g, n in self.runs():
            if g.is_whole:
                out.append(g.gi if n == 1 else f"{g.gi} x{n}")
            else:
                out.append({"gi": g.gi, "ci": list(g.ci), **({"count": n} if n > 1 else {})})
        return out

    def __str__(self) -> str:
        return " + ".join(str(g) if n == 1 else f"{g} x{n}" for g, n in self.runs()) or "(empty)"


def _gi_slices(name: str) -> int:
    m = _GI_RE.match(name)
    if not m:
        raise LayoutError(f"{name!r} is not a MIG GPU-instance profile (expected e.g. '3g.20gb' or '2g.10gb x3')")
    return int(m.group(1))


def _split_count(raw: Any, what: str) -> tuple[str, int]:
    text = normalize_profile_name(raw)
    m = _COUNT_RE.match(text)
    if not m or "*" in text:
        raise LayoutError(f"cannot read {what} {raw!r}; write a profile, optionally with a count: '2g.10gb x3'")
    n = int(m.group("n") or 1)
    if n < 1:
        raise LayoutError(f"count must be at least 1 in {raw!r}")
    return m.group("item"), n


def _parse_gi_name(raw: Any) -> tuple[str, int]:
    name, n = _split_count(raw, "GPU-instance entry")
    _gi_slices(name)  # validates the name
    return name, n


def _parse_ci(raw: Any, gi: str) -> list[str]:
    name, n = _split_count(raw, "compute-instance entry")
    g = _gi_slices(gi)
    if name == gi:
        return [f"{g}c"] * n
    m = _CI_RE.match(name)
    if not m or (m.group(2) is not None and m.group(2) != gi):
        raise LayoutError(f"{raw!r} is not a compute-instance profile of {gi} (expected e.g. '1c' or '1c.{gi}')")
    c = int(m.group(1))
    if not 1 <= c <= g:
        raise LayoutError(f"compute instance {raw!r} needs {c} compute slices; {gi} has {g}")
    return [f"{c}c"] * n


def _parse_item(item: Any) -> list[GiSpec]:
    if isinstance(item, GiSpec):
        return [item]
    if isinstance(item, Mapping):
        unknown = set(map(str, item)) - _DICT_KEYS
        if unknown or "gi" not in item:
            raise LayoutError(f"a GPU-instance dict needs 'gi' and may have 'ci', 'count'; got keys {sorted(map(str, item))}")
        gi, n = _parse_gi_name(item["gi"])
        count = item.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise LayoutError(f"'count' of {gi} must be a positive integer, got {count!r}")
        raw_ci = item.get("ci") or []
        raw_ci = [raw_ci] if isinstance(raw_ci, str) else list(raw_ci)
        ci = tuple(c for raw in raw_ci for c in _parse_ci(raw, gi))
        return [GiSpec(gi, ci)] * (n * count)
    if isinstance(item, str):
        gi, n = _parse_gi_name(item)
        return [GiSpec(gi)] * n
    raise LayoutError(f"cannot read layout entry {item!r}; use a profile string or a dict with 'gi'")


def parse_layout(spec: Any) -> Layout:
    """Read a layout from any accepted form (see the module docstring).

    Raises:
        LayoutError: the spec cannot be read; the message names the bad entry.
    """
    if isinstance(spec, Layout):
        return spec
    if isinstance(spec, str):
        if spec.strip().lower() == "auto":
            raise LayoutError("layout 'auto' depends on the degree; use resolve_layout(model, 'auto', degree)")
        items: Iterable[Any] = [s for s in spec.split(",") if s.strip()]
    elif isinstance(spec, (Mapping, GiSpec)):
        items = [spec]
    elif isinstance(spec, Iterable):
        items = list(spec)
    else:
        raise LayoutError(f"cannot read a MIG layout from {spec!r}")
    return Layout(tuple(g for item in items for g in _parse_item(item)))


@dataclass(frozen=True)
class PlannedDevice:
    """One MIG device of a plan: a CI with its placement inside a placed GI.

    Attributes:
        index: position in the plan (the job that gets it).
        gi_index: which GI of the plan it belongs to.
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
        return {"index": self.index, "name": self.name, "gi_profile": self.gi.name, "gi_profile_id": self.gi.profile_id,
                "gi_start": self.gi_start, "ci_profile": self.ci.name, "ci_profile_id": self.ci.nvml_index,
                "ci_start": self.ci_start, "sm_count": self.sm_count, "memory_mib": self.memory_mib}


Instance = tuple[str | int, int, Sequence[tuple[str | int, int]]]


@dataclass(frozen=True, eq=False)
class Plan:
    """Placed GIs and CIs for one GPU model; ``devices`` in job order.

    Two plans are ``==`` when they hold the same instances at the same placements (order
    ignored); :meth:`same_shape` ignores placements too.
    """

    model: GpuModel
    devices: tuple[PlannedDevice, ...]

    def __iter__(self) -> Iterator[PlannedDevice]:
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
        """The layout this plan realises."""
        return Layout(tuple(GiSpec(gi, tuple(c for c, _ in cis)) for gi, _, cis in self.instances()))

    def _key(self) -> tuple[str, tuple[Any, ...]]:
        return self.model.name, tuple(sorted((g, s, tuple(sorted(c))) for g, s, c in self.instances()))

    def same_shape(self, other: Plan) -> bool:
        """Same model and same GI/CI profiles, wherever they are placed."""
        def shape(p: Plan) -> Counter[tuple[str, tuple[str, ...]]]:
            return Counter((g, tuple(sorted(c for c, _ in cis))) for g, _, cis in p.instances())
        return self.model.name == other.model.name and shape(self) == shape(other)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        parts = [f"{d.name}@{d.gi_start}" if d.ci == d.gi.full_ci else f"{d.name}@{d.gi_start}+{d.ci_start}"
                 for d in self.devices]
        return f"{self.model.name}: {', '.join(parts)}"

    @classmethod
    def from_instances(cls, model: str | GpuModel, instances: Iterable[Instance]) -> Plan:
        """Build a plan from instances read off a device, validating them against the table.

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
                raise LayoutError(f"instances on {m.name}: GPU instance {gi.name} at slot {gi_start} has no compute instance")
            placed.append((gi, int(gi_start), sorted(ci_list, key=lambda cs: cs[1])))
        placed.sort(key=lambda t: t[1])
        desc = " + ".join(gi.name for gi, _, _ in placed) or "(empty)"
        _check_totals(m, [gi for gi, _, _ in placed], desc)
        _check_fixed(m.memory_slices, m.compute_slices, [(gi, s) for gi, s, _ in placed], desc, m.name)
        devices: list[PlannedDevice] = []
        for gi_index, (gi, gi_start, cis) in enumerate(placed):
            _check_cis(gi, [c for c, _ in cis], desc)
            _check_fixed(gi.compute_slices, gi.compute_slices, cis, desc, f"{gi.name} at slot {gi_start}")
            devices += [PlannedDevice(len(devices) + j, gi_index, gi, gi_start, ci, s) for j, (ci, s) in enumerate(cis)]
        return cls(m, tuple(devices))


def _check_fixed(mem_slots: int, compute: int, units: list[tuple[Any, int]], desc: str, where: str) -> None:
    """Validate placements read off a device: allowed starts and no overlap."""
    for prof, start in units:
        if start not in prof.placements:
            raise LayoutError(f"{desc}: {prof.name} cannot start at slot {start} in {where}; it takes {_slots_text(prof)}")
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
        raise LayoutError(f"{desc}: compute instances {'+'.join(c.name for c in cis)} need {need} compute slices; "
                          f"{gi.name} has {gi.compute_slices}")
    for name, n in Counter(c.name for c in cis).items():
        limit = gi.ci_profile(name).max_count
        if n > limit:
            raise LayoutError(f"{desc}: {gi.name} holds at most {limit} x {name} compute instances, asked for {n}")


def _search(units: Sequence[tuple[Any, int]], mem_slots: int, compute: int,
            fixed: Sequence[int] | None = None) -> dict[int, int] | None:
    """Starts for ``(profile, key)`` units, tried in the given order (deterministic backtracking).

    ``fixed`` pins unit ``i`` to start ``fixed[i]`` (units sorted by start) to check a placement.
    """
    used_mem = [False] * mem_slots
    used_cmp = [False] * compute
    out: dict[int, int] = {}

    def fits(p: GiProfile | CiProfile, s: int) -> bool:
        if s + p.slot_size > mem_slots or s + p.compute_slices > compute:
            return False
        return not any(used_mem[s:s + p.slot_size]) and not any(used_cmp[s:s + p.compute_slices])

    def mark(p: GiProfile | CiProfile, s: int, value: bool) -> None:
        used_mem[s:s + p.slot_size] = [value] * p.slot_size
        used_cmp[s:s + p.compute_slices] = [value] * p.compute_slices

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
    order = sorted(range(len(profiles)), key=lambda i: (-profiles[i].compute_slices, -profiles[i].slot_size,
                                                        profiles[i].name, i))
    return [(profiles[i], i) for i in order]


def plan_layout(model: str | GpuModel, layout: Any) -> Plan:
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
    devices: list[PlannedDevice] = []
    for i, (gi, ci_list) in enumerate(zip(gis, cis, strict=True)):
        _check_cis(gi, ci_list, desc)
        ci_starts = _search(_by_size(ci_list), gi.compute_slices, gi.compute_slices)
        if ci_starts is None:
            rules = "; ".join(f"{c.name} takes {_slots_text(c)}" for c in dict.fromkeys(ci_list))
            raise LayoutError(f"{desc}: compute instances {'+'.join(c.name for c in ci_list)} do not fit in "
                              f"{gi.name} ({rules})")
        for j, ci in enumerate(ci_list):
            devices.append(PlannedDevice(len(devices), i, gi, gi_starts[i], ci, ci_starts[j]))
    return Plan(m, tuple(devices))


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
        raise LayoutError(f"degree {degree}: {m.name} has {m.compute_slices} compute slices, "
                          f"so at most {m.compute_slices} MIG devices")
    candidates = sorted((p for p in m.profiles if not p.media_extensions),
                        key=lambda p: (-p.compute_slices, -p.slot_size, -p.memory_mib, p.name))
    for p in candidates:
        layout = Layout((GiSpec(p.name),) * degree)
        if p.max_count >= degree:
            try:
                plan_layout(m, layout)
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
