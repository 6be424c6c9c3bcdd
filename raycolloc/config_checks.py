"""The checks every config schema uses: one error type, and messages that name the key, the value
and what is allowed (:mod:`raycolloc.config`, :mod:`raycolloc.workload_config`)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["ConfigError", "check_choice", "check_int", "check_min", "closest"]


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and what is allowed."""


def check_choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of: {', '.join(allowed)}")


def check_min(key: str, value: Any, minimum: float, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ConfigError(f"{key}={value!r} is not allowed; it must be a number >= {minimum}")


def check_int(key: str, value: Any, minimum: int, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r} is not allowed; it must be an integer >= {minimum}")


def closest(name: str, names: Iterable[str], n: int = 5) -> list[str]:
    """The names most like ``name`` (a typo's likely intent), best first."""
    return difflib.get_close_matches(name, list(names), n=n, cutoff=0.5)
