"""NVML's clock-event reasons (called throttle reasons before driver 535): why the GPU's clocks are
below their maximum, as a readable string of names.

The bit values are NVML's (``nvmlClocksEventReason*`` / ``nvmlClocksThrottleReason*`` in
``nvml.h``); they are written out here so the simulated backend and the analysis read the same names
without importing pynvml.
"""

from __future__ import annotations

__all__ = ["CLOCK_EVENTS", "SLOWING", "reason_names"]

CLOCK_EVENTS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
# The reasons that mean a cap held a working GPU's clocks down (power, heat, a board or hardware
# limit). The others are not noise: an idle GPU clocks down, and application clocks, sync boost and
# display clocks are settings that hold for every run alike.
SLOWING = frozenset(
    {
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "board_limit",
        "reliability",
    }
)


def reason_names(mask: int) -> str:
    """The reasons set in ``mask``, comma-joined in bit order ("" when none); an unknown bit is
    written in hex, so a newer driver's reason is kept, not dropped."""
    names = [name for bit, name in CLOCK_EVENTS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENTS)
    if unknown:
        names.append(hex(unknown))
    return ",".join(names)
