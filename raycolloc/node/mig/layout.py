"""MIG layouts as users write them in Hydra: parsed into an ordered list of GPU instances.

A *layout* is a list of GPU instances (GIs), each with a GI profile and the compute instances
(CIs) it is split into; by default one CI spans the whole GI. Accepted forms (Hydra lists and
dicts work the same as Python ones)::

    ["3g.20gb", "2g.10gb", "2g.10gb"]        # one string per GI
    ["3g.20gb", "2g.10gb x2"]                # count syntax: "<profile> x<N>" (space before x)
    "3g.20gb, 2g.10gb x2"                    # the same as one comma-separated string
    [{gi: "7g.40gb", ci: ["3c", "3c"]}]      # a GI split into CIs; ci items may be "1c x3"
    {gi: "1g.5gb", count: 7}                 # a dict may carry a count too

CI names are short (``"3c"``), nvidia-smi style (``"3c.7g.40gb"``) or the GI name for the CI
spanning the GI. A layout is model-independent; :mod:`raycolloc.node.mig.placement` places it on a
GPU model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from raycolloc.node.mig.profiles import normalize_profile_name

__all__ = ["GiRequest", "Layout", "LayoutError", "parse_layout"]

_GI_RE = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")
_CI_RE = re.compile(r"^(\d+)c(?:\.(.+))?$")
_COUNT_RE = re.compile(r"^(?P<item>\S+)(?:\s+x\s*(?P<n>\d+))?$")
_DICT_KEYS = {"gi", "ci", "count"}


class LayoutError(ValueError):
    """A layout cannot be parsed or does not fit the GPU; the message says why."""


@dataclass(frozen=True)
class GiRequest:
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
    """An ordered list of requested GPU instances (model-independent; see
    :func:`~raycolloc.node.mig.placement.place_layout`)."""

    gpu_instances: tuple[GiRequest, ...] = ()

    def __iter__(self) -> Iterator[GiRequest]:
        return iter(self.gpu_instances)

    def __len__(self) -> int:
        return len(self.gpu_instances)

    @property
    def num_devices(self) -> int:
        """MIG devices (CIs) the layout makes."""
        return sum(len(g.ci) for g in self.gpu_instances)

    def runs(self) -> list[tuple[GiRequest, int]]:
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


def _parse_item(item: Any) -> list[GiRequest]:
    if isinstance(item, GiRequest):
        return [item]
    if isinstance(item, Mapping):
        unknown = set(map(str, item)) - _DICT_KEYS
        if unknown or "gi" not in item:
            raise LayoutError(
                f"a GPU-instance dict needs 'gi' and may have 'ci', 'count'; got keys {sorted(map(str, item))}"
            )
        gi, n = _parse_gi_name(item["gi"])
        count = item.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise LayoutError(f"'count' of {gi} must be a positive integer, got {count!r}")
        raw_ci = item.get("ci") or []
        raw_ci = [raw_ci] if isinstance(raw_ci, str) else list(raw_ci)
        ci = tuple(c for raw in raw_ci for c in _parse_ci(raw, gi))
        return [GiRequest(gi, ci)] * (n * count)
    if isinstance(item, str):
        gi, n = _parse_gi_name(item)
        return [GiRequest(gi)] * n
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
    elif isinstance(spec, (Mapping, GiRequest)):
        items = [spec]
    elif isinstance(spec, Iterable):
        items = list(spec)
    else:
        raise LayoutError(f"cannot read a MIG layout from {spec!r}")
    return Layout(tuple(g for item in items for g in _parse_item(item)))
