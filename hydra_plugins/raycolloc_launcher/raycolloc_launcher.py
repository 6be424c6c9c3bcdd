"""``hydra/launcher=raycolloc``: the sweep's cells fanned out over the GPUs of a Ray cluster; and
``hydra/sweeper=raycolloc``: Hydra's basic sweeper without its second composition of every job.

(No ``from __future__ import annotations`` here: Hydra executes plugin modules without
registering them in sys.modules, where postponed annotations break dataclasses.)

This module only registers the launcher and the sweeper with Hydra (whose plugins must be classes of
this package); the launcher's work is ``raycolloc.driver.launcher.SweepLauncher``'s (compose and validate
every cell once, then run them, one lane per GPU), so a multirun's config never passes through here.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore

from raycolloc.driver.launcher import SweepLauncher

log = logging.getLogger(__name__)


@dataclass
class RayCollocLauncherConf:
    """Options of the launcher (``hydra.launcher.*``); it has none of its own yet."""

    _target_: str = "hydra_plugins.raycolloc_launcher.raycolloc_launcher.RayCollocLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="raycolloc", node=RayCollocLauncherConf, provider="raycolloc")


class RayCollocLauncher(SweepLauncher):
    """The launcher under the name Hydra knows; its work is :class:`raycolloc.driver.launcher.SweepLauncher`'s."""


@dataclass
class RayCollocSweeperConf(BasicSweeperConf):
    """Hydra's basic sweeper's options (``hydra.sweeper.params``, ``max_batch_size``)."""

    _target_: str = "hydra_plugins.raycolloc_launcher.raycolloc_launcher.RayCollocSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="raycolloc", node=RayCollocSweeperConf, provider="raycolloc")


class RayCollocSweeper(BasicSweeper):
    """The basic sweeper (the same override grammar, batches and ``multirun.yaml``), minus one step.

    Before each batch the basic sweeper composes every job's config once to catch composition errors
    early, then throws the configs away; the launcher above composes them again, in the same process,
    before any cell starts, and lists every bad cell where the sweeper stopped at the first. Each
    composition costs 0.2-0.6 s on a 2-core machine (a 12-cell dry run: 6.0 s with the basic sweeper,
    3.7 s with this one), so it is made once. (Hydra 1.3 keeps ``BasicSweeper`` in ``_internal``; its
    tests here fail if that moves.)
    """

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Nothing: ``raycolloc.driver.launcher`` composes and validates every job of the batch."""
