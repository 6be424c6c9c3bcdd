"""The checks every config schema uses: one error type, and messages that name the key, the value
and what is allowed (:mod:`raycolloc.config`, :mod:`raycolloc.workload_config`)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "AMP_MODES",
    "COMPILE_MODES",
    "MAX_DEGREE",
    "MIN_EPOCH_AUTO_S",
    "MOST_LISTED",
    "SIM_INJECTIONS",
    "ConfigError",
    "as_list",
    "check_choice",
    "check_int",
    "check_min_epoch",
    "check_min",
    "check_mode_only",
    "check_port",
    "check_reserved_cpus",
    "check_sim_inject",
    "closest",
    "is_number",
    "is_mem_limit",
    "listed",
    "parse_cpu_list",
]


# Choices of ``trainer.*`` that a mix job may set for itself too (raycolloc.config, raycolloc.workload_config).
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
AMP_MODES = ("off", "bf16", "fp16")
MOST_LISTED = 20  # a plan of 132,197 bad rows printed 22 MB of errors; the first twenty say what is wrong
# Each job of a naive cell holds 1/degree of its GPU, and Ray's smallest fraction of a resource is 0.0001:
# a larger degree has no lease (and an integer past the index range crashed Python itself).
MAX_DEGREE = 10_000
# What ``cluster.sim_inject`` may put into a simulated cell's measured window (raycolloc.node.gpu.sim_inject).
SIM_INJECTIONS = ("clock_drop", "cpu_hog", "foreign_process")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and what is allowed."""


def listed(errors: Sequence[str], most: int = MOST_LISTED) -> list[str]:
    """Errors to print: every one up to ``most``, else the first ``most`` and a line counting the rest."""
    if len(errors) <= most:
        return list(errors)
    return [
        *errors[:most],
        f"... and {len(errors) - most:,} more ({len(errors):,} in all; the first {most} "
        "are shown: fix them and run again to see the rest)",
    ]


def check_choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of: {', '.join(allowed)}")


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool): NaN compares false with every bound, so a ``value < low``
    check alone lets it through, and an infinity overflows the first wait or integer it meets."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def check_min(key: str, value: Any, minimum: float, *, optional: bool = False, maximum: float | None = None) -> None:
    if optional and value is None:
        return
    if not is_number(value) or value < minimum:
        raise ConfigError(f"{key}={value!r} is not allowed; it must be a number >= {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{key}={value!r} is not allowed; it must be a number {minimum:g}..{maximum:g}")


def check_range(key: str, value: Any, low: float, high: float) -> None:
    if not is_number(value) or not low <= value <= high:
        raise ConfigError(f"{key}={value!r} is not allowed; it must be a number {low:g}..{high:g}")


def check_int(key: str, value: Any, minimum: int, *, optional: bool = False, maximum: int | None = None) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r} is not allowed; it must be an integer >= {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{key}={value!r} is not allowed; it must be an integer {minimum}..{maximum}")


def check_port(key: str, value: Any, *, optional: bool = False) -> None:
    """A TCP port: Ray would try to start three times before failing on one outside 1..65535."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ConfigError(f"{key}={value!r} is not allowed; it must be a TCP port 1..65535")


def check_mode_only(key: str, value: Any, unset: Any, only: str, mode: str) -> None:
    """A key that only one mode reads: set on another mode it would be ignored without a word."""
    if value != unset and mode != only:
        raise ConfigError(
            f"{key}={value!r} applies to mode={only} only (mode={mode}); leave {key} unset "
            f"({unset!r}) or set mode={only}"
        )


def closest(name: str, names: Iterable[str], n: int = 5) -> list[str]:
    """The names most like ``name`` (a typo's likely intent), best first."""
    return difflib.get_close_matches(name, list(names), n=n, cutoff=0.5)


def as_list(value: Any) -> list[Any]:
    """A value that may be one value or a list (one per job) as a list; None as []."""
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def is_mem_limit(value: Any) -> bool:
    """Whether ``value`` is a size such as 8G, 512M or a plain byte count."""
    text = str(value).strip().upper()
    return len(text) > 1 and text[:-1].isdigit() and text[-1] in "KMGT" or text.isdigit()


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``"0-1,4"`` -> ``(0, 1, 4)`` (the kernel's cpu-list format).

    Raises:
        ValueError: not a cpu list.
    """
    cores: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        first, _, last = part.partition("-")
        if not first.isdigit() or (last and not last.isdigit()) or (last and int(last) < int(first)):
            raise ValueError(f"not a cpu list: {text!r}")
        cores.update(range(int(first), int(last or first) + 1))
    return tuple(sorted(cores))


# ``min_epoch_s=auto`` on a real GPU: a degree-1 epoch of 25,600 samples lasts ~1.7 s on an H200, and
# its rate moved 32-35% between two sweeps minutes apart; measured for 6 s it moved 5-6% (2 x H200, one
# call; docs/measurements.md, eighteenth session). A simulated GPU's epochs are the CPU's: no floor.
MIN_EPOCH_AUTO_S = 5.0


def check_min_epoch(value: Any) -> None:
    """``min_epoch_s``: ``auto``, null (no floor) or a number of seconds >= 0."""
    if value is None or value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise ConfigError(
            f"min_epoch_s={value!r} is not allowed; choose auto (5 s on a real GPU, none on a simulated one), "
            "null (no floor) or a number of seconds >= 0"
        )


def check_reserved_cpus(key: str, value: Any) -> None:
    """``auto``, ``none``, a count of cores (``2``) or a cpu list (``0-1``, ``"0,2"``)."""
    text = str(value).strip()
    if text in ("auto", "none") or (text.isdigit() and int(text) >= 1):
        return
    try:
        parse_cpu_list(text)
    except ValueError:
        raise ConfigError(
            f"{key}={value!r} is not allowed; choose auto, none, a count of cores (2) or a cpu list (0-1, '0,2')"
        ) from None
    if "-" not in text and "," not in text:  # a bare 0 would be a count of no cores, not core 0
        raise ConfigError(f"{key}={value!r} is not allowed; reserve no cores with none, core 0 alone with 0-0")


def check_sim_inject(value: Any, backend: str) -> list[str]:
    """``cluster.sim_inject`` as a list of injections: one name, a list, or none (null, "none", []).

    Raises:
        ConfigError: an unknown injection, or any on a backend other than the simulated one (a real
            GPU's clocks and cores are not raycolloc's to disturb).
    """
    names = [str(v) for v in as_list(None if value in ("none", "") else value)]
    for name in names:
        check_choice("cluster.sim_inject", name, SIM_INJECTIONS)
    if names and backend == "nvml":
        raise ConfigError(
            f"cluster.sim_inject={','.join(names)} applies to cluster.backend=sim only (simulated GPUs); "
            "remove it on real GPUs"
        )
    return names
