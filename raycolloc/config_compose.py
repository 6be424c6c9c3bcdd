"""``conf/`` composed with a command's overrides, as ``hydra.compose`` does, in milliseconds where it can.

Hydra composes the whole tree again for every call: its own node (launcher, sweeper, logging, help)
and every group's YAML file and schema, merged and deep-copied, about 150 ms on an idle 2-core
machine. The queue's commands, the advisor's cells and the tests compose once per command or cell,
and most of those calls differ only in plain values (``degree=3``, ``out_dir=...``): the quick test
tier spent 90 of its 267 test-seconds there. So a composition is made by Hydra once per process for
each list of *group* choices (``workload=tiny_cnn``, ``cluster=local``), and each call gets a copy with
its plain values set as Hydra sets them (``OmegaConf.update`` with merge, on the struct config, after
every group is merged; Hydra's messages where a key is unknown or a value does not fit): about 8 ms.

Anything else goes to Hydra whole, as before: a ``+``/``++``/``~`` override, a ``group@package``, a
sweep (``a=1,2``), a ``hydra.`` key, a group given a dict or an interpolation, an override Hydra's
parser refuses. Each copy's resolver cache is cleared, so ``${now:}`` is its own call's time.
``tests/test_config_compose.py`` holds the two ways equal, on good and bad overrides.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from raycolloc import conf_dir

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = ["compose_config"]

_BASES: OrderedDict[tuple[str, ...], tuple[object, DictConfig]] = OrderedDict()
_MAX_BASES = 32  # a process meets a handful of group lists; a long-lived one keeps the latest
_LOCK = threading.Lock()


def compose_config(overrides: Sequence[str] = ()) -> DictConfig:
    """``conf/config.yaml`` composed with ``overrides`` (no Hydra node), exactly as
    ``hydra.compose(config_name="config", overrides=...)`` composes it.

    Raises:
        hydra.errors.HydraException: as Hydra raises it (an unknown group option, a key the config
            does not have, a value its schema refuses).
    """
    from omegaconf import OmegaConf

    from raycolloc.config import register_configs

    register_configs()  # the base_<group> schemas the YAML files start from
    split = _split(list(overrides))
    if split is None:
        return _hydra_compose(list(overrides))
    groups, values = split
    schemas = _schemas()
    with _LOCK:
        held = _BASES.get(groups)
        if held is None or held[0] is not schemas:  # schemas stored again: their defaults may differ
            held = (schemas, _hydra_compose(list(groups)))
            _BASES[groups] = held
            while len(_BASES) > _MAX_BASES:
                _BASES.popitem(last=False)
        else:
            _BASES.move_to_end(groups)
        cfg = copy.deepcopy(held[1])
    OmegaConf.clear_cache(cfg)  # resolved ${now:} and the like: this composition's own, as Hydra's would be
    for line, key, value in values:
        _set(cfg, line, key, value)
    return cfg


def _schemas() -> object:
    """The stored root schema: stored again (``register_configs`` after its cache was cleared, under
    another environment), it is another object, and the compositions made from the old one go."""
    from hydra.core.config_store import ConfigStore

    return ConfigStore.instance().repo.get("base_config.yaml")


def _hydra_compose(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def _split(overrides: list[str]) -> tuple[tuple[str, ...], tuple[tuple[str, str, Any], ...]] | None:
    """The group choices (in order) and the plain values (line, key, parsed value); None where any
    override is another kind, or one Hydra's parser refuses (Hydra then composes it, and says why)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return None
    groups: list[str] = []
    values: list[tuple[str, str, Any]] = []
    for o in parsed:
        key = o.key_or_group
        plain = not (o.is_delete() or o.is_add() or o.is_force_add() or o.is_sweep_override())
        if not plain or o.package is not None or key == "hydra" or key.startswith(("hydra.", "hydra/")):
            return None
        if _is_group(key):
            choice = o.value()
            # Hydra reads a dict on a group key as a value (applied in order with the others), and a
            # choice with an interpolation may read the environment: both go to Hydra whole.
            if not isinstance(choice, str) or "${" in choice:
                return None
            groups.append(o.input_line or "")
        else:
            values.append((o.input_line or "", key, o.value()))
    return tuple(groups), tuple(values)


def _is_group(key: str) -> bool:
    """Whether ``key`` names a config group (a folder of ``conf/``, or a group of the ConfigStore)."""
    from hydra.core.config_store import ConfigStore

    path = key.replace(".", "/")
    if (conf_dir() / path).is_dir():
        return True
    node: Any = ConfigStore.instance().repo
    for part in path.split("/"):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return isinstance(node, dict)


def _set(cfg: DictConfig, line: str, key: str, value: Any) -> None:
    """One plain override, as Hydra applies it after composing (its messages too)."""
    import sys

    from hydra.errors import ConfigCompositionException
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    try:
        try:
            OmegaConf.update(cfg, key, value, merge=True)
        except (ConfigAttributeError, ConfigKeyError) as ex:
            raise ConfigCompositionException(
                f"Could not override '{key}'.\nTo append to your config use +{line}"
            ) from ex
    except OmegaConfBaseException as ex:
        raise ConfigCompositionException(f"Error merging override {line}").with_traceback(sys.exc_info()[2]) from ex
