"""Import and export NVIDIA mig-parted config files (``version: v1``).

Format (mig-parted ``api/spec/v1``)::

    version: v1
    mig-configs:
      <name>:
        - devices: all            # or a list of GPU indices, e.g. [0, 1]
          mig-enabled: true
          mig-devices:            # MIG device profile -> count
            "3g.20gb": 1
            "1c.3g.20gb": 1       # "<c>c.<gi>": a GI of that profile holding one CI of c slices

Each entry may also carry ``device-filter`` (PCI device ids); such entries are refused here
because the returned ``(devices, layout)`` pairs could not say which GPUs they apply to.

Limit: mig-devices is a count of MIG devices (compute instances) per profile, so it cannot
say which CIs share a GI. Both behaviours appear in the history of mig-parted's
``pkg/mig/config/config.go``: one GI per counted device, or consecutive CIs of the same GI
profile packed into one GI while they fit. This module therefore only exports layouts whose
GIs each hold exactly one CI (the whole GI, or a single smaller CI such as ``1c.3g.20gb``) and
reads every counted device back as its own GI; layouts with several CIs in a GI raise
``ValueError``. Counts have no order, so a round trip groups equal GIs together (a layout
already grouped comes back equal).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import yaml

from raycolloc.node.mig.layout import GiRequest, Layout, parse_layout
from raycolloc.node.mig.placement import Placement

__all__ = ["from_migparted", "layout_to_mig_devices", "to_migparted"]

_KEY_RE = re.compile(r"^(?:(\d+)c\.)?((\d+)g\.\d+gb(?:\+me)?)$")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENTRY_KEYS = {"devices", "mig-enabled", "mig-devices", "device-filter"}

Devices = str | tuple[int, ...]


def layout_to_mig_devices(layout: Layout | Placement | Any) -> dict[str, int]:
    """The ``mig-devices`` mapping of a layout, keys in order of first appearance.

    Raises:
        ValueError: a GI holds more than one CI (mig-parted cannot express it).
    """
    lay = layout.layout if isinstance(layout, Placement) else parse_layout(layout)
    out: dict[str, int] = {}
    for g in lay:
        if len(g.ci) != 1:
            raise ValueError(
                f"mig-parted cannot express GPU instance {g} with {len(g.ci)} compute instances: mig-devices "
                "counts MIG devices per profile and does not say which share a GPU instance"
            )
        key = g.gi if g.is_whole else f"{g.ci[0]}.{g.gi}"
        out[key] = out.get(key, 0) + 1
    return out


def _validate_devices(devices: Any) -> Devices:
    if devices == "all":
        return "all"
    if (
        isinstance(devices, (list, tuple))
        and devices
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices)
    ):
        return tuple(devices)
    raise ValueError(f"'devices' must be 'all' or a non-empty list of GPU indices, got {devices!r}")


def to_migparted(layout_or_placement: Layout | Placement | Any, name: str, devices: Devices | list[int] = "all") -> str:
    """A mig-parted config document with one config ``name`` applying the layout to ``devices``.

    Raises:
        ValueError: bad name or devices, or a layout mig-parted cannot express (see module doc).
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"config name must be a non-empty string, got {name!r}")
    devs = _validate_devices(devices)
    mig_devices = layout_to_mig_devices(layout_or_placement)
    key = name if _PLAIN_NAME.match(name) else json.dumps(name)
    lines = ["version: v1", "mig-configs:", f"  {key}:"]
    lines.append(f"    - devices: {devs if devs == 'all' else '[' + ', '.join(map(str, devs)) + ']'}")
    lines.append("      mig-enabled: true")
    if not mig_devices:
        lines.append("      mig-devices: {}")
    else:
        lines.append("      mig-devices:")
        lines += [f"        {json.dumps(k)}: {v}" for k, v in mig_devices.items()]
    return "\n".join(lines) + "\n"


def _parse_mig_devices(mig_devices: Any, where: str) -> Layout:
    if not isinstance(mig_devices, Mapping):
        raise ValueError(f"{where}: 'mig-devices' must be a mapping of profile to count, got {mig_devices!r}")
    gis: list[GiRequest] = []
    for key, count in mig_devices.items():
        m = _KEY_RE.match(str(key).strip().lower())
        if not m:
            raise ValueError(f"{where}: {key!r} is not a MIG device profile (e.g. '3g.20gb' or '1c.3g.20gb')")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{where}: count of {key!r} must be a non-negative integer, got {count!r}")
        c, gi, g = m.group(1), m.group(2), int(m.group(3))
        if c is not None and not 1 <= int(c) <= g:
            raise ValueError(f"{where}: {key!r} asks for {c} compute slices in a GI with {g}")
        gis += [GiRequest(gi, (f"{c or g}c",))] * count
    return Layout(tuple(gis))


def from_migparted(text: str, name: str | None = None) -> list[tuple[Devices, Layout | None]]:
    """Read one config of a mig-parted document: ``[(devices, layout), ...]``, one per entry.

    ``devices`` is ``"all"`` or a tuple of GPU indices; ``layout`` is ``None`` where
    ``mig-enabled`` is false. Profile names are not checked against a GPU model here; pass the
    layouts to :func:`~raycolloc.node.mig.placement.place_layout` for that.

    Args:
        text: the YAML document.
        name: config to read; may be omitted when the document holds exactly one.

    Raises:
        ValueError: not YAML, not a v1 mig-parted document, unknown config, or invalid entries.
    """
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"not a YAML document: {e}") from e
    if not isinstance(doc, Mapping):
        raise ValueError("a mig-parted config must be a mapping with 'version' and 'mig-configs'")
    if doc.get("version") != "v1":
        raise ValueError(f"unsupported mig-parted config version {doc.get('version')!r}; expected 'v1'")
    extra = set(doc) - {"version", "mig-configs"}
    if extra:
        raise ValueError(f"unexpected top-level field(s) {sorted(map(str, extra))}")
    configs = doc.get("mig-configs")
    if not isinstance(configs, Mapping) or not configs:
        raise ValueError("'mig-configs' must be a non-empty mapping of config name to entries")
    if name is None:
        if len(configs) != 1:
            raise ValueError(f"the document holds several configs; pick one of: {', '.join(map(str, configs))}")
        name = next(iter(configs))
    if name not in configs:
        raise ValueError(f"no mig-parted config {name!r}; the document has: {', '.join(map(str, configs))}")
    entries = configs[name]
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"config {name!r} must be a non-empty list of entries")
    out: list[tuple[Devices, Layout | None]] = []
    for i, entry in enumerate(entries):
        where = f"config {name!r} entry {i}"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: must be a mapping, got {entry!r}")
        unknown = set(map(str, entry)) - _ENTRY_KEYS
        missing = {"devices", "mig-enabled"} - set(entry)
        if unknown or missing:
            raise ValueError(f"{where}: unexpected field(s) {sorted(unknown)}, missing {sorted(missing)}")
        if "device-filter" in entry:
            raise ValueError(f"{where}: 'device-filter' entries are not supported; use explicit 'devices'")
        try:
            devices = _validate_devices(entry["devices"])
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from e
        enabled = entry["mig-enabled"]
        if not isinstance(enabled, bool):
            raise ValueError(f"{where}: 'mig-enabled' must be true or false, got {enabled!r}")
        if not enabled:
            if entry.get("mig-devices"):
                raise ValueError(f"{where}: MIG devices listed while 'mig-enabled' is false")
            out.append((devices, None))
            continue
        if "mig-devices" not in entry:
            raise ValueError(f"{where}: 'mig-devices' is required when 'mig-enabled' is true")
        out.append((devices, _parse_mig_devices(entry["mig-devices"], where)))
    return out
