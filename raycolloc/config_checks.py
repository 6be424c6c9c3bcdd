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
    "MAX_CORES",
    "MAX_DEGREE",
    "MAX_EPOCHS",
    "MAX_GPUS",
    "MAX_INT",
    "MAX_REPEATS",
    "MAX_SAMPLES",
    "MAX_SECONDS",
    "MAX_SEED",
    "MAX_SLOWDOWN",
    "MIN_EPOCH_AUTO_S",
    "MOST_LISTED",
    "SIM_INJECTIONS",
    "ConfigError",
    "as_list",
    "bound_text",
    "check_choice",
    "check_int",
    "check_min_epoch",
    "check_min",
    "check_mode_only",
    "check_percentage",
    "check_port",
    "check_range",
    "check_reserved_cpus",
    "check_seconds",
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
# The largest value of every number a user gives (config keys, advisor flags): NaN, infinities and
# values past these are refused by name before anything starts.
MAX_INT = 2**63 - 1  # an integer without a tighter bound: what a result column (int64) and torch hold
# Seconds (timeouts, budgets, floors, gaps): ~116 days, longer than any sweep, lease or queue; a trace's
# submit_s stops there too (raycolloc.queue.trace), and a wait of 1e300 s overflows (threading, asyncio).
MAX_SECONDS = 1e7
MAX_EPOCHS = 10**6  # a cell's (or a trace job's) epochs
MAX_SAMPLES = 10**12  # an epoch's samples (as a trace job's)
MAX_SLOWDOWN = 1e6  # a job's bound on its slowdown against running alone (as a trace's max_slowdown column)
MAX_CORES = 4096  # cores, threads or processes asked of one node (larger than any node's count of cores)
MAX_GPUS = 1024  # GPUs of one (simulated) node
MAX_REPEATS = 1000  # runs of one configuration
MAX_SEED = 2**31 - 1  # a job's seed is seed + its index: below 2**32, what numpy and most user code take
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


def bound_text(value: float) -> str:
    """A bound as a message shows it: ``10000000`` rather than ``1e+07``, ``0.001`` as it is."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e16 else f"{value:g}"


def check_min(
    key: str,
    value: Any,
    minimum: float,
    *,
    optional: bool = False,
    maximum: float | None = None,
    what: str = "",
    note: str = "",
) -> None:
    """A finite number ``>= minimum`` (and ``<= maximum`` where given); ``what`` says what it counts
    (``" of seconds"``), ``note`` follows the range (why the bound)."""
    if optional and value is None:
        return
    shown = f">= {bound_text(minimum)}" if maximum is None else f"{bound_text(minimum)}..{bound_text(maximum)}"
    if not is_number(value) or value < minimum or (maximum is not None and value > maximum):
        raise ConfigError(f"{key}={value!r} is not allowed; it must be a number{what} {shown}{note}")


def check_seconds(key: str, value: Any, minimum: float, *, optional: bool = False) -> None:
    """A number of seconds ``minimum..MAX_SECONDS``: a timeout, a budget, a floor or a gap."""
    check_min(key, value, minimum, optional=optional, maximum=MAX_SECONDS, what=" of seconds", note=" (116 days)")


def check_range(key: str, value: Any, low: float, high: float) -> None:
    check_min(key, value, low, maximum=high)


def check_int(key: str, value: Any, minimum: int, *, optional: bool = False, maximum: int = MAX_INT) -> None:
    """An integer (not a bool, not a float) ``minimum..maximum``; the message shows the range where
    ``maximum`` is a field's own, and the 64-bit limit only to a value past it."""
    if optional and value is None:
        return
    shown = f">= {minimum}" if maximum == MAX_INT else f"{minimum}..{maximum}"
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r} is not allowed; it must be an integer {shown}")
    if value > maximum:
        beyond = f" (at most {MAX_INT}: a 64-bit integer)" if maximum == MAX_INT else ""
        raise ConfigError(f"{key}={value!r} is not allowed; it must be an integer {shown}{beyond}")


def check_port(key: str, value: Any, *, optional: bool = False) -> None:
    """A TCP port: Ray would try to start three times before failing on one outside 1..65535."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ConfigError(f"{key}={value!r} is not allowed; it must be a TCP port 1..65535")


def check_percentage(key: str, value: Any) -> None:
    """An MPS active-thread percentage: an integer 1..100, or None (the daemon's default)."""
    if value is not None:
        check_int(key, value, 1, maximum=100)


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
    """``min_epoch_s``: ``auto``, null (no floor) or a number of seconds 0..MAX_SECONDS."""
    if value is None or value == "auto":
        return
    if not is_number(value) or not 0 <= value <= MAX_SECONDS:
        raise ConfigError(
            f"min_epoch_s={value!r} is not allowed; choose auto (5 s on a real GPU, none on a simulated one), "
            f"null (no floor) or a number of seconds 0..{bound_text(MAX_SECONDS)} (116 days)"
        )


def check_floor(floor: Any, epoch_time_s: float | None, epochs: int, cap: float | None) -> None:
    """A number given as ``min_epoch_s`` must mean something: not beside a time budget (which ends the
    epoch first), not longer than the cap on a call's epochs (``trainer.epoch_timeout_s``)."""
    if floor is None or floor == "auto" or not floor:
        return
    if epoch_time_s:
        raise ConfigError(
            f"min_epoch_s={floor} conflicts with epoch_time_s={epoch_time_s}: a time-budgeted epoch "
            "has no floor; give one of them (min_epoch_s=auto or null beside a budget)"
        )
    if cap is not None and floor * (epochs - 1) >= cap:
        raise ConfigError(
            f"min_epoch_s={floor} makes the {epochs - 1} measured epochs last at least "
            f"{floor * (epochs - 1):g} s, past trainer.epoch_timeout_s={cap}: lower the floor or raise the cap"
        )


def check_floor_share(share: Any, repeat: int) -> None:
    """``floor_share``: a number in (0, 1], below 1 only on a repeat (``repeat`` >= 1): repeats=auto sets
    it on a solo's repeats (measure.repeat_floor); a configuration's first run measures its whole floor."""
    if not is_number(share) or not 0 < share <= 1:
        raise ConfigError(f"floor_share={share!r} is not allowed; it must be a number in (0, 1] (1: the whole floor)")
    if share < 1 and repeat == 0:
        raise ConfigError(
            f"floor_share={share} is not allowed on a first run (repeat=0); a configuration's first run measures "
            "its whole floor (repeats=auto sets a solo's repeats' share: measure.repeat_floor)"
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
