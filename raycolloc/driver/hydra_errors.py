"""Hydra's own errors as raycolloc config errors: the key, the value and the allowed values.

Hydra reports an unknown group option (``workload=resnet9000``), a value of the wrong type
(``degree=two``) or an override it cannot parse before raycolloc's code runs, and exits 1 with
its own message, which lists the ConfigStore's internal schemas (``base_workload``) among the
options. The entry point lets Hydra raise them (``HYDRA_FULL_ERROR``) and turns them into a
:class:`~raycolloc.config.ConfigError` here, so every config error reads the same and exits 2.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Any

from hydra.core.override_parser.types import Override
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from raycolloc import conf_dir
from raycolloc.config import Config, ConfigError
from raycolloc.driver.override_quoting import explain_parse_error

__all__ = ["as_config_error", "check_group_choices", "group_options"]

_MISSING = re.compile(r"Could not find '([^']+)/([^']+)'")
_VALUE = re.compile(r"Value '(.*)' (?:of type|is not)")
_EXPECTED = {
    int: "it must be an integer",
    float: "it must be a number",
    bool: "it must be true or false",
    str: "it must be a string",
    list: "it must be a list such as [a,b]",
}


def group_options(group: str) -> list[str]:
    """What a user may choose for a config group: its YAML files under ``conf/`` (never the
    ConfigStore's internal ``base_<group>`` schema)."""
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


def check_group_choices(choices: Any) -> None:
    """Refuse a group option that is an internal schema (``workload=base_workload``): Hydra offers
    the ConfigStore's ``base_<group>`` entries as options, and one alone would silently run the
    schema's defaults (tiny_cnn, naive).

    Args:
        choices: Hydra's ``runtime.choices`` (group -> chosen option).

    Raises:
        ConfigError: naming the group, the option and the options a user may choose.
    """
    for group, option in (choices or {}).items():
        if isinstance(option, str) and option == f"base_{group}":
            raise ConfigError(
                f"{group}={option!r} is not allowed; choose one of: {', '.join(group_options(str(group)))}"
            )


def _field_type(full_key: str) -> tuple[type | None, list[str]]:
    """The declared type of a dotted key of :class:`Config` (None if unknown), and the field names
    of the schema holding it."""
    schema: Any = Config
    parts = full_key.split(".")
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(schema):
            return None, []
        hints = typing.get_type_hints(schema)
        names = sorted(hints)
        if part not in hints:
            return None, names
        kind = hints[part]
        if i == len(parts) - 1:
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            base = typing.get_origin(kind) or kind
            return (args[0] if args and base not in (list, dict) else base), names
        schema = kind
    return None, []


def _expected(full_key: str) -> str:
    kind, _ = _field_type(full_key)
    origin = typing.get_origin(kind) or kind
    return _EXPECTED[origin] if origin in _EXPECTED else "see the key's type in raycolloc/config.py"


def _takes_text(full_key: str) -> bool:
    """Whether a key takes a string (or anything: ``hydra.*``, ``+`` keys), so quoting is the cure."""
    kind, _ = _field_type(full_key)
    return kind is None or kind is str or kind is Any


def _group_value_error(exc: ValueError) -> ConfigError | None:
    """``mode=null``, ``workload=5``: Hydra's defaults list raises a bare ``ValueError`` ("Config group
    override must be a string or a list. Got NoneType") that names no group; the override it was
    reading (a local of the frame that raised) does."""
    if "Config group override must be" not in str(exc):
        return None
    tb, found = exc.__traceback__, None
    while tb is not None:
        override = tb.tb_frame.f_locals.get("override")
        found = override if isinstance(override, Override) else found
        tb = tb.tb_next
    if found is None:
        return ConfigError(f"{str(exc).splitlines()[0]}: a config group takes the name of one of its options")
    group = found.key_or_group
    text = found.input_line.partition("=")[2] if found.input_line else found.get_value_element_as_str()
    return ConfigError(f"{group}={text} is not allowed; choose one of: {', '.join(group_options(group))}")


def as_config_error(exc: BaseException) -> ConfigError | None:
    """The config error an exception of Hydra or OmegaConf stands for, or None if it is not one."""
    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, ValueError) and (group_error := _group_value_error(exc)) is not None:
        return group_error
    if isinstance(exc, MissingConfigException):
        found = _MISSING.search(str(exc))
        if found:
            group, option = found.groups()
            return ConfigError(f"{group}={option!r} is not allowed; choose one of: {', '.join(group_options(group))}")
        return ConfigError(str(exc).splitlines()[0])
    if isinstance(exc, OverrideParseException):
        return ConfigError(explain_parse_error(exc, _takes_text))
    if not isinstance(exc, HydraException | OmegaConfBaseException):
        return None
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else exc
    key = getattr(cause, "full_key", None)
    if isinstance(cause, OmegaConfBaseException) and key:
        if isinstance(cause, ConfigKeyError | ConfigAttributeError):
            _, names = _field_type(str(key))
            return ConfigError(f"unknown key {key}; allowed keys there: {', '.join(names) or '(none)'}")
        first = str(getattr(cause, "msg", cause)).splitlines()[0]
        value = _VALUE.search(first)
        shown = f"{key}={value.group(1)!r}" if value else str(key)
        return ConfigError(f"{shown} is not allowed; {_expected(str(key))} ({first})")
    return ConfigError(str(exc).splitlines()[0])
